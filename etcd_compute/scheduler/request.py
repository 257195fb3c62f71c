"""Parse a Placement allocation-candidates query, locally, before any network call.

    resources=VCPU:1,MEMORY_MB:512&required=HW_CPU_X86_AVX2,!CUSTOM_SLOW
    resources1=VGPU:1&required1=in:CUSTOM_A100,CUSTOM_H100&group_policy=isolate
    member_of=in:<agg>,<agg>&in_tree=<rp uuid>&limit=20

Keys, with an optional granular suffix (`resources1`, `required_GPU`):
`resources`, `required` (traits, `!TRAIT` forbidden, `in:A,B` any-of; may
repeat), `member_of` (aggregate uuids, `in:` any-of, `!`/`!in:` forbidden;
may repeat), `in_tree`. Unsuffixed only: `group_policy` (none|isolate),
`limit`. Anything else is a UsageError naming the fault: Placement would
answer 400 with a paragraph, we answer with one line and exit status 2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from etcd_compute.errors import UsageError
from etcd_compute.keys import UUID

RESOURCE_CLASS = re.compile(r"^([A-Z_]+|CUSTOM_[A-Z0-9_]+)\Z")
TRAIT = re.compile(r"^[A-Z0-9_]{1,255}\Z")
KEY = re.compile(r"^(resources|required|member_of|in_tree)([A-Za-z0-9_-]{1,64})?\Z")
# Placement stores amounts as 32-bit signed integers.
MAX_AMOUNT = 2**31 - 1
GROUP_POLICIES = ("none", "isolate")
MAX_QUERY_LENGTH = 8192


def _show(text: str, limit: int = 40) -> str:
    """`text` quoted and shortened for an error line (never a newline in it)."""
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(text)


@dataclass
class RequestGroup:
    """One (possibly granular) request group; suffix "" is the unnumbered group."""

    suffix: str = ""
    resources: dict[str, int] = field(default_factory=dict)
    # Each inner list is one `required` parameter: all of `required_all`, any of
    # `required_any` lists, none of `forbidden`.
    required_all: list[str] = field(default_factory=list)
    required_any: list[list[str]] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    # member_of: each inner list is "in one of these"; forbidden_aggregates: in none.
    member_of: list[list[str]] = field(default_factory=list)
    forbidden_aggregates: list[str] = field(default_factory=list)
    in_tree: str | None = None

    def constraints(self) -> list[tuple[str, str]]:
        """Every non-resource constraint as (query key, value), one per parameter."""
        out: list[tuple[str, str]] = []
        for trait in self.required_all:
            out.append((f"required{self.suffix}", trait))
        for any_of in self.required_any:
            out.append((f"required{self.suffix}", "in:" + ",".join(any_of)))
        for trait in self.forbidden:
            out.append((f"required{self.suffix}", "!" + trait))
        for any_of in self.member_of:
            value = any_of[0] if len(any_of) == 1 else "in:" + ",".join(any_of)
            out.append((f"member_of{self.suffix}", value))
        for aggregate in self.forbidden_aggregates:
            out.append((f"member_of{self.suffix}", "!" + aggregate))
        if self.in_tree:
            out.append((f"in_tree{self.suffix}", self.in_tree))
        return out

    def resource_param(self) -> tuple[str, str]:
        return (f"resources{self.suffix}",
                ",".join(f"{rc}:{amount}" for rc, amount in sorted(self.resources.items())))


@dataclass
class ResourceRequest:
    """A parsed query: request groups by suffix, group_policy and limit."""

    groups: dict[str, RequestGroup] = field(default_factory=dict)
    group_policy: str | None = None
    limit: int | None = None

    @property
    def resources(self) -> dict[str, int]:
        """Total amount per resource class over all groups (what one instance uses)."""
        total: dict[str, int] = {}
        for group in self.groups.values():
            for rc, amount in group.resources.items():
                total[rc] = total.get(rc, 0) + amount
        return total

    def resource_params(self) -> list[tuple[str, str]]:
        params = [group.resource_param() for group in self.groups.values()]
        granular = [g for g in self.groups.values() if g.suffix]
        if self.group_policy:
            params.append(("group_policy", self.group_policy))
        elif len(granular) > 1:
            # Placement insists on a policy with several granular groups; "none"
            # is what a request without one would mean.
            params.append(("group_policy", "none"))
        return params

    def constraint_params(self) -> list[tuple[str, str]]:
        return [c for group in self.groups.values() for c in group.constraints()]

    def to_query(self, limit: int | None = None,
                 extra: list[tuple[str, str]] | None = None,
                 constraints: list[tuple[str, str]] | None = None) -> str:
        """The encoded query string; `constraints` (default: all of ours) replaces them."""
        params = self.resource_params()
        params += self.constraint_params() if constraints is None else constraints
        params += extra or []
        effective_limit = limit if limit is not None else self.limit
        if self.limit is not None and limit is not None:
            effective_limit = min(self.limit, limit)
        if effective_limit is not None:
            params.append(("limit", str(effective_limit)))
        return "&".join(f"{key}={quote(value, safe=':,!')}" for key, value in params)

    def set_destination(self, rp: str | None) -> None:
        """The one host (its provider tree) the request may go to, as Nova's requested
        destination: the unnumbered group's `in_tree` (every group's when that group
        claims nothing); None drops the unnumbered group's."""
        plain = self.groups.get("")
        if rp is None:
            if plain is not None:
                plain.in_tree = None
            return
        for group in [plain] if plain is not None and plain.resources else \
                self.groups.values():
            group.in_tree = rp

    def add_member_of(self, aggregates: list[str]) -> None:
        """Restrict the unnumbered group to any of `aggregates` (used by --zone)."""
        group = self.groups.setdefault("", RequestGroup(""))
        group.member_of.append(list(aggregates))


def _amounts(key: str, value: str) -> dict[str, int]:
    if not value:
        raise UsageError(f"{key}: empty; expected RESOURCE_CLASS:AMOUNT[,...]")
    resources: dict[str, int] = {}
    for pair in value.split(","):
        if pair.count(":") != 1:
            raise UsageError(f"{key}: malformed pair {_show(pair)}; expected RESOURCE_CLASS:AMOUNT")
        rc, amount = pair.split(":")
        if not RESOURCE_CLASS.match(rc):
            raise UsageError(f"{key}: bad resource class {_show(rc)} (upper case, "
                             "CUSTOM_ for custom classes)")
        if not re.fullmatch(r"[0-9]{1,10}", amount):
            raise UsageError(f"{key}: bad amount {_show(amount)} for {rc}; expected a "
                             "positive integer")
        number = int(amount)
        if not 1 <= number <= MAX_AMOUNT:
            raise UsageError(f"{key}: amount {number} for {rc} out of range 1..{MAX_AMOUNT}")
        if rc in resources:
            raise UsageError(f"{key}: resource class {rc} given twice")
        resources[rc] = number
    return resources


def _names(key: str, value: str, pattern: re.Pattern[str], what: str) -> list[str]:
    names = value.split(",")
    for name in names:
        if not pattern.match(name):
            raise UsageError(f"{key}: bad {what} {_show(name)}")
    if len(set(names)) != len(names):
        raise UsageError(f"{key}: {what} listed twice in {_show(value)}")
    return names


def _required(group: RequestGroup, key: str, value: str) -> None:
    if value.startswith("in:"):
        group.required_any.append(_names(key, value[3:], TRAIT, "trait"))
        return
    if not value:
        raise UsageError(f"{key}: empty; expected TRAIT[,!TRAIT...] or in:TRAIT,TRAIT")
    for item in value.split(","):
        forbidden = item.startswith("!")
        trait = item[1:] if forbidden else item
        if not TRAIT.match(trait):
            raise UsageError(f"{key}: bad trait {_show(item)}")
        wanted, other = ((group.forbidden, group.required_all) if forbidden
                         else (group.required_all, group.forbidden))
        if trait in other:
            raise UsageError(f"{key}: trait {trait} is both required and forbidden")
        if trait not in wanted:
            wanted.append(trait)


def _member_of(group: RequestGroup, key: str, value: str) -> None:
    forbidden = value.startswith("!")
    body = value[1:] if forbidden else value
    any_of = body.startswith("in:")
    body = body[3:] if any_of else body
    if not any_of and "," in body:
        raise UsageError(f"{key}: several aggregates need in: ({_show(value)})")
    aggregates = _names(key, body, UUID, "aggregate uuid")
    if forbidden:
        group.forbidden_aggregates.extend(a for a in aggregates
                                          if a not in group.forbidden_aggregates)
    else:
        group.member_of.append(aggregates)


def parse_query(text: str) -> ResourceRequest:
    """Parse `text` into a ResourceRequest; UsageError (one line) on any fault."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("empty query; expected e.g. resources=VCPU:1,MEMORY_MB:512")
    if len(text) > MAX_QUERY_LENGTH:
        raise UsageError(f"query longer than {MAX_QUERY_LENGTH} characters")
    request = ResourceRequest()
    seen_single: set[str] = set()
    for part in text.strip().split("&"):
        if not part:
            raise UsageError(f"empty parameter in {_show(text)} (doubled or trailing &)")
        if "=" not in part:
            raise UsageError(f"malformed parameter {_show(part)}; expected key=value")
        raw_key, raw_value = part.split("=", 1)
        key, value = unquote(raw_key), unquote(raw_value)
        if any(ch.isspace() for ch in key + value):
            raise UsageError(f"{_show(key)}: whitespace is not allowed in {_show(part)}")
        if key in ("group_policy", "limit"):
            if key in seen_single:
                raise UsageError(f"{key}: given twice")
            seen_single.add(key)
            if key == "group_policy":
                if value not in GROUP_POLICIES:
                    raise UsageError(f"group_policy: {_show(value)} is not one of none, isolate")
                request.group_policy = value
            else:
                if not re.fullmatch(r"[0-9]{1,6}", value) or int(value) < 1:
                    raise UsageError(f"limit: {_show(value)} is not a positive integer")
                request.limit = int(value)
            continue
        match = KEY.match(key)
        if not match:
            raise UsageError(
                f"unknown key {_show(key)}; expected resources, required, member_of, in_tree "
                "(each optionally with a group suffix), group_policy or limit")
        kind, suffix = match.group(1), match.group(2) or ""
        group = request.groups.setdefault(suffix, RequestGroup(suffix))
        if kind == "resources":
            if group.resources:
                raise UsageError(f"{key}: given twice")
            group.resources = _amounts(key, value)
        elif kind == "required":
            _required(group, key, value)
        elif kind == "member_of":
            _member_of(group, key, value)
        else:
            if group.in_tree is not None:
                raise UsageError(f"{key}: given twice")
            if not UUID.match(value):
                raise UsageError(f"{key}: {_show(value)} is not a resource provider uuid")
            group.in_tree = value
    for suffix, group in request.groups.items():
        if not group.resources:
            name = f"resources{suffix}"
            raise UsageError(f"{name} missing: every request group needs resources "
                             f"(constraints given for group {_show(suffix or '(unnumbered)')})")
    if not request.groups:
        raise UsageError("no resources= in the query")
    return request
