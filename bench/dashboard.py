#!/usr/bin/env python3
"""The dashboard's cost (issue 34): Horizon's Project -> Instances page with 200 servers and
the launch wizard's data calls, each page's time beside the same data asked of the cloud
with openstacksdk directly, in the same run; and the calls Horizon makes to the cloud for
each page (how many, to which service, how long each took), to show where its time goes.

    .venv/bin/python bench/dashboard.py           # 200 servers, 20 rounds: dashboard.json
    .venv/bin/python bench/dashboard.py --quick   # 20 servers, 5 rounds: dashboard-quick.json
    .venv/bin/python bench/dashboard.py --network none   # no Neutron in the catalog

The cloud is the Tempest cloud's (tools/tempest_run/cloud.py: etcd with TLS and RBAC,
Placement, Keystone, Glance, the compute API, the controller, a fake-driver compute host
for each 40 servers (Nova's MaxInstancesPerHostFilter allows 50 a host); with `--network
neutron`, the default, Neutron on OVN and each host an OVN chassis that plugs its servers'
ports, as in `make up`) on free ports in a run directory of its own, and
Horizon on it (tools/local_services/horizon.py: gunicorn, 2 workers x 4 threads, TLS). As
admin: the demo project's quotas lifted. As the demo user (openstacksdk): a key pair, a
server group, a network with a /22 subnet, and N servers (m1.nano, `min_count` batches of
20) on that network, all waited ACTIVE.

Then, R rounds, each: Horizon's pages in a logged-in `requests` session (Horizon's login
form with its CSRF token, as a browser), one request at a time:

- `instances (20 a page)`: GET /project/instances/, Horizon's default page (20 servers);
- `instances (all N)`: the same with the user's page size N (the `API_RESULT_PAGE_SIZE`
  cookie Horizon's user settings set), the whole list on one page;
- the launch wizard: Horizon 27's wizard is an Angular modal on the instances page (there
  is no /project/instances/launch page any more); when it opens it asks Horizon's REST API
  (openstack_dashboard/api/rest) for the availability zones, public flavors, key pairs,
  limits (reserved), security groups, networks (then each network's ports), images
  (active, and community ones), server groups and the metadata definitions' namespaces.
  Each call is timed; "the wizard" is their sum (the browser sends most at once: the sum
  is what the cloud and Horizon spend, not what the user waits).

and the same data asked with openstacksdk (a connection per run, its token reused, as
Horizon's session reuses its token): the servers (detailed; a page of 21 as Horizon asks,
and all N), flavors, images, key pairs, limits, availability zones, server groups, security
groups, networks, ports; each call timed.

Horizon's log (horizon.py's LOGGING: keystoneauth's and glanceclient's debug lines, one
request and its answer per process and thread) says every call Horizon made for a page:
read after each page, it gives the calls' count by service and each call's time (the log's
millisecond clock). The compute API's access log counts the calls it answered in the same
window, as a check.

Everything is started here and stopped by pid; the run directory is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import html.parser
import importlib.metadata
import json
import os
import re
import shutil
import signal
import sys
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.services import checkout_commit, machine_line, save_results, say  # noqa: E402
from bench.stats import percentile  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path("/var/tmp/etcd-compute-bench")
DEMO_CLOUD, ADMIN_CLOUD = "etcd-compute-demo", "etcd-compute"
FLAVOR = "42"  # m1.nano
BATCH = 20  # servers a create (min_count = max_count)
# Servers a fake host is given at most: under scheduler.max_instances_per_host (Nova's 50).
PER_HOST = 40
CIDR = "10.30.0.0/22"
ACTIVE_TIMEOUT = 1800.0
HORIZON_PAGE_SIZE = 20  # Horizon's default API_RESULT_PAGE_SIZE
# Horizon's own cost of a page (its middleware, session, menus, template): the user settings
# page, which asks the cloud for nothing.
FLOOR = "user settings (Horizon alone)"

# The wizard's calls to Horizon's REST API, as launch-instance-model.service.js and the
# openstack-service-api services send them: (label, path, Neutron needed). The ports of
# each network are asked after the networks (added per network at run time); then, once
# those answered, the server groups and the metadata definitions (METADEFS), in the
# background of the open wizard.
WIZARD: tuple[tuple[str, str, bool], ...] = (
    ("availability zones", "api/nova/availzones/", False),
    ("flavors", "api/nova/flavors/?is_public=true&get_extras=false", False),
    ("key pairs", "api/nova/keypairs/", False),
    ("limits", "api/nova/limits/?reserved=true", False),
    ("security groups", "api/network/securitygroups/", True),
    ("networks", "api/neutron/networks/", True),
    ("images", "api/glance/images/?status=active&sort_key=name&sort_dir=asc", False),
    ("images (community)", "api/glance/images/?status=active&sort_key=name&sort_dir=asc"
     "&visibility=community", False),
    ("server groups", "api/nova/servergroups/", False),
)
METADEFS: tuple[tuple[str, str, bool], ...] = tuple(
    (f"metadata namespaces: {kind}{f' {target}' if target else ''}",
     f"api/glance/metadefs/namespaces/?properties_target={target}&resource_type={kind}", False)
    for kind, target in (("OS::Nova::Flavor", ""), ("OS::Glance::Image", ""),
                         ("OS::Cinder::Volumes", ""), ("OS::Nova::Server", "metadata"),
                         ("OS::Nova::Server", "scheduler_hints")))


# --- Horizon's log: the calls it made --------------------------------------------------

# horizon.py's LOGGING: "<date> <time,ms> <pid> <thread> <LEVEL> <logger> <message>".
_RECORD = re.compile(r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?P<pid>\d+) "
                     r"(?P<thread>\d+) (?P<level>[A-Z]+) (?P<name>\S+) ?(?P<message>.*)$")
# keystoneauth: "REQ: curl -g -i [--cacert "F"] -X GET URL -H ..."; glanceclient:
# "curl -g -i -X GET -H ... URL".
_REQUEST = re.compile(r"\bcurl -g -i\b.*?-X (?P<method>[A-Z]+)\b")
_URL = re.compile(r"(?P<url>https?://[^\s\"']+)")
# keystoneauth: "RESP: [200] ..."; glanceclient: a record whose next line is "HTTP/1.1 200 OK".
_RESPONSE = re.compile(r"(?:RESP: \[(?P<ks>\d{3})\]|^HTTP/1\.[01] (?P<gl>\d{3})\b)", re.M)
_ID = re.compile(r"/(?:[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}|"
                 r"[0-9a-f]{32})(?=/|$)")


@dataclass(frozen=True)
class Call:
    """One call Horizon made to the cloud: its method, URL, answer's status and duration."""

    method: str
    url: str
    status: int
    seconds: float


def _records(text: str) -> Iterator[tuple[re.Match[str], str]]:
    """Each log record (its first line's match, and its whole text with continuation
    lines)."""
    first: re.Match[str] | None = None
    lines: list[str] = []
    for line in text.splitlines():
        matched = _RECORD.match(line)
        if matched:
            if first is not None:
                yield first, "\n".join(lines)
            first, lines = matched, [matched["message"]]
        elif first is not None:
            lines.append(line)
    if first is not None:
        yield first, "\n".join(lines)


def _time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def horizon_calls(text: str) -> list[Call]:
    """The calls Horizon's log `text` shows, each request paired with the next answer
    logged by the same process and thread, in the order they were answered. A request
    without an answer in `text` is left out."""
    pending: dict[tuple[str, str], tuple[str, str, float]] = {}
    calls: list[Call] = []
    for first, message in _records(text):
        where = (first["pid"], first["thread"])
        request = _REQUEST.search(message)
        if request:
            url = _URL.search(message[request.end():]) or _URL.search(message)
            if url:
                pending[where] = (request["method"], url["url"], _time(first["at"]))
            continue
        response = _RESPONSE.search(message)
        if response and where in pending:
            method, url, at = pending.pop(where)
            calls.append(Call(method, url, int(response["ks"] or response["gl"]),
                              round(_time(first["at"]) - at, 3)))
    return calls


def call_kind(method: str, url: str) -> str:
    """`METHOD /path` of a call, its query left out and ids as {id}: calls of one kind
    grouped (GET /v2.1/servers/detail, GET /v2.0/ports, ...)."""
    path = _ID.sub("/{id}", urlsplit(url).path.rstrip("/")) or "/"
    return f"{method} {path}"


def service_of(url: str, endpoints: dict[str, str]) -> str:
    """The catalog's service type for `url` (`endpoints`: "host:port" -> type), else its
    host:port."""
    where = urlsplit(url).netloc
    return endpoints.get(where, where)


def tally(calls: list[Call], endpoints: dict[str, str]) -> dict[str, Any]:
    """A page's calls: how many and how many seconds, by service and by kind."""
    by_service: dict[str, dict[str, float]] = {}
    by_kind: dict[str, dict[str, float]] = {}
    for call in calls:
        service = service_of(call.url, endpoints)
        for key, table in ((service, by_service),
                           (f"{service} {call_kind(call.method, call.url)}", by_kind)):
            entry = table.setdefault(key, {"count": 0, "seconds": 0.0})
            entry["count"] += 1
            entry["seconds"] = round(entry["seconds"] + call.seconds, 3)
    return {"count": len(calls), "seconds": round(sum(c.seconds for c in calls), 3),
            "errors": [f"{c.method} {c.url} -> {c.status}" for c in calls if c.status >= 400],
            "by_service": by_service, "by_kind": by_kind}


def access_log_requests(text: str) -> list[str]:
    """`METHOD /path` of each request in a gunicorn access log `text` (its default format:
    `host - - [date] "GET /v2.1/servers/detail?limit=21 HTTP/1.1" 200 ...`)."""
    found = re.findall(r'\] "([A-Z]+) (\S+) HTTP/[\d.]+" \d{3} ', text)
    return [f"{method} {path}" for method, path in found]


# --- Horizon's login form --------------------------------------------------------------


class _Form(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "input" and attributes.get("type") == "hidden" and attributes.get("name"):
            self.fields[attributes["name"] or ""] = attributes.get("value") or ""


def hidden_fields(page: str) -> dict[str, str]:
    """The hidden inputs of an HTML page (name -> value): Horizon's login form's CSRF token
    and region."""
    form = _Form()
    form.feed(page)
    return form.fields


class LogTail:
    """What a log file got since the last read (or skip)."""

    def __init__(self, path: Path):  # noqa: D107
        self.path, self.offset = path, 0

    def read(self) -> str:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            data = log.read()
        self.offset += len(data)
        return data.decode(errors="replace")

    def skip(self) -> None:
        self.offset = self.path.stat().st_size


class Dashboard:
    """A logged-in browser's session on Horizon."""

    def __init__(self, url: str, ca_file: str):  # noqa: D107
        import requests

        self.url = url
        self.session = requests.Session()
        # Per request: requests lets REQUESTS_CA_BUNDLE from the environment outrank a
        # session's own `verify`.
        self.verify = ca_file

    def login(self, user: str, password: str) -> None:
        page = self.session.get(self.url + "auth/login/", timeout=120, verify=self.verify)
        page.raise_for_status()
        fields = {**hidden_fields(page.text), "username": user, "password": password}
        answer = self.session.post(self.url + "auth/login/", data=fields, timeout=300,
                                   headers={"Referer": self.url + "auth/login/"},
                                   verify=self.verify)
        if answer.status_code >= 400 or "/auth/login" in answer.url:
            raise SystemExit(f"bench/dashboard.py: Horizon's login as {user} failed "
                             f"({answer.status_code} at {answer.url})")

    def get(self, path: str, ajax: bool = False,
            cookies: dict[str, str] | None = None) -> tuple[float, Any]:
        """Seconds for GET `path` (a page, or with `ajax` a REST call), and the answer."""
        headers = {"X-Requested-With": "XMLHttpRequest",
                   "Accept": "application/json"} if ajax else {}
        began = time.perf_counter()
        answer = self.session.get(self.url + path, headers=headers, cookies=cookies,
                                  timeout=600, verify=self.verify)
        seconds = time.perf_counter() - began
        # A REST call's failure is the wizard's to show (or not): counted, not fatal.
        if not ajax and (answer.status_code != 200 or "/auth/login" in answer.url):
            raise RuntimeError(f"GET /{path}: {answer.status_code} at {answer.url}: "
                               f"{answer.text[:200]}")
        return seconds, answer


# --- the cloud -------------------------------------------------------------------------


@contextlib.contextmanager
def cloud(run_dir: Path, neutron: bool, hosts: int, keep_logs: Path | None = None
          ) -> Iterator[dict[str, Any]]:
    """The Tempest cloud (`hosts` fake hosts; Neutron with `neutron`) and Horizon on it; at
    the end the services' logs copied to `keep_logs` (if given) and everything stopped."""
    from tools.local_services.horizon import HorizonServer
    from tools.tempest_run import cloud as tempest_cloud

    began = time.monotonic()
    stack, _conf = tempest_cloud.start(run_dir, say, compute_nodes=hosts,
                                        network=neutron)
    horizon: HorizonServer | None = None
    try:
        keystone = stack._keystone()
        horizon = HorizonServer.create(run_dir / "horizon", pki=stack.pki)
        horizon.start(keystone.auth_url, keystone.ca_file, neutron=neutron)
        say(f"Horizon at {horizon.url} (pid {horizon.pid})")
        yield {"stack": stack, "keystone": keystone, "horizon": horizon,
               "up_s": round(time.monotonic() - began, 1),
               "api_log": run_dir / "compute-api.log"}
    finally:
        if horizon is not None:
            horizon.stop()
        tempest_cloud.stop(stack, say, keep_logs=keep_logs)


def lift_quotas(admin: Any, project_id: str, neutron: bool) -> None:
    """No quota in the way of N servers and their ports (Nova's default is 10 instances)."""
    answer = admin.compute.put(f"/os-quota-sets/{project_id}", json={"quota_set": {
        "instances": -1, "cores": -1, "ram": -1}})
    if answer.status_code != 200:
        raise SystemExit(f"bench/dashboard.py: quota update {answer.status_code}: "
                         f"{answer.text[:300]}")
    if neutron:
        admin.network.update_quota(project_id, ports=-1, networks=-1, subnets=-1)


def public_key() -> str:
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


def populate(conn: Any, count: int, image_id: str, neutron: bool) -> dict[str, Any]:
    """A key pair, a server group, a network (with Neutron) and `count` ACTIVE servers."""
    conn.compute.create_keypair(name="bench-key", public_key=public_key())
    conn.compute.create_server_group(name="bench-group", policies=["soft-anti-affinity"])
    made: dict[str, Any] = {"networks": []}
    networks: list[dict[str, str]] | str = "auto"
    if neutron:
        network = conn.network.create_network(name="bench-net")
        conn.network.create_subnet(network_id=network.id, name="bench-subnet", ip_version=4,
                                   cidr=CIDR)
        made["networks"] = [network.id]
        networks = [{"uuid": network.id}]
    else:
        networks = "none"
    began = time.monotonic()
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        conn.compute.create_server(name=f"bench-{start // BATCH:02d}", flavor_id=FLAVOR,
                                   image_id=image_id, networks=networks, key_name="bench-key",
                                   min_count=size, max_count=size)
    while True:
        statuses: dict[str, int] = {}
        for server in conn.compute.servers():
            statuses[server.status] = statuses.get(server.status, 0) + 1
        if statuses.get("ERROR"):
            raise SystemExit(f"bench/dashboard.py: servers in ERROR: {statuses}")
        if statuses.get("ACTIVE", 0) >= count:
            break
        if time.monotonic() - began > ACTIVE_TIMEOUT:
            raise SystemExit(f"bench/dashboard.py: not all ACTIVE in {ACTIVE_TIMEOUT:.0f} s: "
                             f"{statuses}")
        time.sleep(5)
    made["create_s"] = round(time.monotonic() - began, 1)
    made["servers"] = count
    say(f"{count} servers ACTIVE in {made['create_s']} s")
    return made


def endpoints_of(conn: Any) -> dict[str, str]:
    """host:port -> service type, from the caller's catalog."""
    catalog = conn.session.auth.get_access(conn.session).service_catalog.catalog
    found: dict[str, str] = {}
    for service in catalog:
        for endpoint in service.get("endpoints", []):
            found[urlsplit(endpoint["url"]).netloc] = service["type"]
    return found


# --- the rounds ------------------------------------------------------------------------


def sdk_calls(conn: Any, count: int, neutron: bool, network_ids: list[str]
              ) -> dict[str, Callable[[], Any]]:
    """openstacksdk's calls for the same data as the pages: name -> call."""
    calls: dict[str, Callable[[], Any]] = {
        f"servers, detailed ({HORIZON_PAGE_SIZE + 1})": lambda: list(conn.compute.servers(
            details=True, limit=HORIZON_PAGE_SIZE + 1, max_items=HORIZON_PAGE_SIZE + 1)),
        f"servers, detailed (all {count})": lambda: list(conn.compute.servers(details=True)),
        "flavors": lambda: list(conn.compute.flavors(details=True, is_public=True)),
        "images": lambda: list(conn.image.images(status="active", sort_key="name",
                                                 sort_dir="asc")),
        "key pairs": lambda: list(conn.compute.keypairs()),
        "limits": lambda: conn.compute.get_limits(reserved=True),
        "availability zones": lambda: list(conn.compute.availability_zones()),
        "server groups": lambda: list(conn.compute.server_groups()),
    }
    if neutron:
        calls["security groups"] = lambda: list(conn.network.security_groups())
        calls["networks"] = lambda: list(conn.network.networks())
        calls["ports of the network"] = lambda: [
            list(conn.network.ports(network_id=net)) for net in network_ids]
        calls[f"ports of all {count} servers"] = lambda: list(conn.network.ports(
            device_owner="compute:nova"))
    return calls


# What openstacksdk asks for the data of each Horizon page (sdk_calls' names).
def equivalents(count: int, neutron: bool) -> dict[str, list[str]]:
    net = ["networks", f"ports of all {count} servers"] if neutron else []
    return {
        f"instances ({HORIZON_PAGE_SIZE} a page)":
            [f"servers, detailed ({HORIZON_PAGE_SIZE + 1})", "flavors", "images", "limits",
             *net],
        f"instances (all {count})":
            [f"servers, detailed (all {count})", "flavors", "images", "limits", *net],
        "launch wizard (sum)":
            ["availability zones", "flavors", "key pairs", "limits", "images",
             "server groups", *(["security groups", "networks", "ports of the network"]
                                if neutron else [])],
    }


def merged(tallies: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Several pages' tallies as one (their calls' counts and seconds by kind added)."""
    kinds: dict[str, dict[str, float]] = {}
    for one in tallies:
        for kind, entry in one["by_kind"].items():
            into = kinds.setdefault(kind, {"count": 0, "seconds": 0.0})
            into["count"] += entry["count"]
            into["seconds"] = round(into["seconds"] + entry["seconds"], 3)
    return {"by_kind": kinds}


def by_kind(tallies: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each kind of call over the rounds' tallies: p50 of its count and of its seconds (a
    round without it counts as 0)."""
    kinds = sorted({kind for one in tallies for kind in one["by_kind"]})
    zero = {"count": 0, "seconds": 0.0}
    return {kind: {
        "count_p50": percentile([one["by_kind"].get(kind, zero)["count"] for one in tallies],
                                50) or 0.0,
        "seconds_p50": round(percentile([one["by_kind"].get(kind, zero)["seconds"]
                                         for one in tallies], 50) or 0.0, 4)}
        for kind in kinds}


def summary(values: list[float]) -> dict[str, Any]:
    """p50, p95, min and max of `values` (seconds), and how many."""
    return {"p50": round(percentile(values, 50) or 0.0, 4),
            "p95": round(percentile(values, 95) or 0.0, 4),
            "min": round(min(values), 4), "max": round(max(values), 4), "n": len(values)}


def measure(dash: Dashboard, conn: Any, count: int, rounds: int, neutron: bool,
            network_ids: list[str], endpoints: dict[str, str], horizon_log: Path,
            api_log: Path) -> dict[str, Any]:
    """`rounds` rounds of Horizon's pages and openstacksdk's calls, one after the other."""
    wizard = [(label, path) for label, path, needs in WIZARD if neutron or not needs]
    wizard += [(f"ports of network {index + 1}", f"api/neutron/ports/?network_id={net}")
               for index, net in enumerate(network_ids)]
    pages: dict[str, Callable[[], tuple[float, Any]]] = {
        FLOOR: lambda: dash.get("settings/"),
        f"instances ({HORIZON_PAGE_SIZE} a page)": lambda: dash.get("project/instances/"),
        f"instances (all {count})": lambda: dash.get(
            "project/instances/", cookies={"API_RESULT_PAGE_SIZE": str(count)}),
    }
    for label, path in wizard:
        pages[f"wizard: {label}"] = lambda path=path: dash.get(path, ajax=True)
    for label, path, _needs in METADEFS:
        pages[f"wizard, after: {label}"] = lambda path=path: dash.get(path, ajax=True)
    sdk = sdk_calls(conn, count, neutron, network_ids)
    seconds: dict[str, list[float]] = {name: [] for name in [*pages, *sdk]}
    tallies: dict[str, list[dict[str, Any]]] = {name: [] for name in pages}
    api_requests: dict[str, list[int]] = {name: [] for name in pages}
    shown: dict[str, int] = {}
    failed: dict[str, set[str]] = {}  # Horizon's answers other than 200, by page
    horizon_tail, api_tail = LogTail(horizon_log), LogTail(api_log)
    for number in range(rounds + 1):  # round 0 warms the caches and is not counted
        for name, page in pages.items():
            horizon_tail.skip()
            api_tail.skip()
            took, answer = page()
            time.sleep(0.2)  # the access log's line is written once the answer is sent
            calls = horizon_calls(horizon_tail.read())
            fresh = api_tail.read()
            if number == 0:
                if name.startswith("instances"):
                    shown[name] = answer.text.count('data-object-id="')
                continue
            seconds[name].append(took)
            if answer.status_code != 200:
                failed.setdefault(name, set()).add(
                    f"{answer.status_code} {answer.text[:120].strip()}")
            tallies[name].append(tally(calls, endpoints))
            api_requests[name].append(len(access_log_requests(fresh)))
        for name, call in sdk.items():
            began = time.perf_counter()
            call()
            if number:
                seconds[name].append(time.perf_counter() - began)
        if number:
            say(f"round {number}/{rounds}: " + ", ".join(
                f"{name} {seconds[name][-1]:.2f} s" for name in list(pages)[:3]))
    out: dict[str, Any] = {"horizon": {}, "sdk": {}, "rows_shown": shown}
    for name in pages:
        out["horizon"][name] = {
            "seconds": summary(seconds[name]),
            "calls": summary([one["count"] for one in tallies[name]]),
            "calls_seconds": summary([one["seconds"] for one in tallies[name]]),
            "compute_api_requests": summary(api_requests[name]),
            "by_service": {service: {"count": entry["count"]} for service, entry in
                           tallies[name][-1]["by_service"].items()},
            "by_kind": by_kind(tallies[name]),
            "errors": sorted({error for one in tallies[name] for error in one["errors"]}),
            "answered": sorted(failed.get(name, {"200"})),
            "samples": [round(value, 4) for value in seconds[name]],
        }
    for name in sdk:
        out["sdk"][name] = {"seconds": summary(seconds[name]),
                            "samples": [round(value, 4) for value in seconds[name]]}
    for total, prefix in (("launch wizard (sum)", "wizard: "),
                          ("metadata definitions (sum)", "wizard, after: ")):
        names = [name for name in pages if name.startswith(prefix)]
        sums = [sum(seconds[name][index] for name in names) for index in range(rounds)]
        out["horizon"][total] = {
            "seconds": summary(sums),
            "calls": summary([sum(tallies[name][index]["count"] for name in names)
                              for index in range(rounds)]),
            "calls_seconds": summary([sum(tallies[name][index]["seconds"] for name in names)
                                      for index in range(rounds)]),
            "compute_api_requests": summary([sum(api_requests[name][index]
                                                 for name in names)
                                             for index in range(rounds)]),
            "by_kind": by_kind([merged(tallies[name][index] for name in names)
                                for index in range(rounds)]),
            "samples": [round(value, 4) for value in sums]}
    out["equivalents"] = {}
    for page, names in equivalents(count, neutron).items():
        sdk_sums = [sum(seconds[name][index] for name in names) for index in range(rounds)]
        page_p50 = out["horizon"][page]["seconds"]["p50"]
        sdk_p50 = round(percentile(sdk_sums, 50) or 0.0, 4)
        out["equivalents"][page] = {"sdk_calls": names, "sdk_sum": summary(sdk_sums),
                                    "ratio_p50": round(page_p50 / sdk_p50, 2)
                                    if sdk_p50 else None}
    return out


# --- the report ------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value * 1000:.0f}"


def markdown(results: dict[str, Any]) -> list[str]:
    settings, m = results["settings"], results["measured"]
    count = settings["servers"]
    mode = "quick" if settings["quick"] else "full"
    lines = [
        f"## Issue 34: the dashboard's pages against openstacksdk ({mode} run, "
        f"{results['date'][:10]})",
        "",
        f"`bench/dashboard.py{' --quick' if settings['quick'] else ''}` at {results['commit']}"
        f" on {results['machine']}; load before {results['load_before']}, after "
        f"{results['load_after']}. The Tempest cloud (Keystone, Glance, the compute API, "
        f"{settings.get('hosts', 1)} fake-driver host(s)"
        f"{', Neutron on OVN' if settings['neutron'] else ', no Neutron'})"
        f", Horizon {results['horizon_version']} under gunicorn (2 workers x 4 threads, TLS) "
        f"on it, openstacksdk {results['openstacksdk']}; {count} ACTIVE servers of the demo "
        f"project (created in {results['populated']['create_s']} s). {settings['rounds']} "
        "rounds after one warm-up, each: Horizon's pages one at a time in a logged-in "
        "session, then openstacksdk's calls. Milliseconds:",
        "",
        "| Horizon page | p50 | p95 | calls to the cloud (p50) | their time (p50) | "
        "of which compute API calls | the same data with openstacksdk (p50) | "
        "Horizon / sdk |",
        "|---|---|---|---|---|---|---|---|",
    ]
    floor = m["horizon"].get(FLOOR)
    if floor:
        lines.append(f"| {FLOOR} | {_ms(floor['seconds']['p50'])} | "
                     f"{_ms(floor['seconds']['p95'])} | {floor['calls']['p50']:.0f} | "
                     f"{_ms(floor['calls_seconds']['p50'])} | "
                     f"{floor['compute_api_requests']['p50']:.0f} | - | - |")
    for page, eq in m["equivalents"].items():
        h = m["horizon"][page]
        lines.append(
            f"| {page} | {_ms(h['seconds']['p50'])} | {_ms(h['seconds']['p95'])} | "
            f"{h['calls']['p50']:.0f} | {_ms(h['calls_seconds']['p50'])} | "
            f"{h['compute_api_requests']['p50']:.0f} | {_ms(eq['sdk_sum']['p50'])} "
            f"({', '.join(eq['sdk_calls'])}) | {eq['ratio_p50']}x |")
    lines += ["", "Each wizard call to Horizon's REST API, and openstacksdk's calls, "
              "milliseconds:", "", "| call | p50 | p95 | Horizon's calls to the cloud (p50) "
              "| Horizon answered |", "|---|---|---|---|---|"]
    for name, h in m["horizon"].items():
        if name.startswith(("wizard: ", "wizard, after: ", "metadata definitions")):
            lines.append(f"| {name} | {_ms(h['seconds']['p50'])} | "
                         f"{_ms(h['seconds']['p95'])} | {h['calls']['p50']:.0f} | "
                         f"{'; '.join(h.get('answered', [])) or '-'} |")
    for name, s in m["sdk"].items():
        lines.append(f"| sdk: {name} | {_ms(s['seconds']['p50'])} | "
                     f"{_ms(s['seconds']['p95'])} | - | - |")
    for page in (f"instances ({HORIZON_PAGE_SIZE} a page)", f"instances (all {count})",
                 "launch wizard (sum)", "metadata definitions (sum)"):
        h = m["horizon"][page]
        kinds = sorted(h["by_kind"].items(), key=lambda item: -item[1]["seconds_p50"])
        shown = f" (rows shown: {m['rows_shown'][page]})" if page in m["rows_shown"] else ""
        lines += ["", f"What Horizon asked the cloud for `{page}`{shown}, by call, p50 "
                  "over the rounds "
                  f"(the calls' times from Horizon's log, 1 ms clock):", "",
                  "| call | count | ms |", "|---|---|---|"]
        lines += [f"| {kind} | {entry['count_p50']:.0f} | {_ms(entry['seconds_p50'])} |"
                  for kind, entry in kinds]
    errors = sorted({error for h in m["horizon"].values() for error in h.get("errors", [])})
    if errors:
        lines += ["", "Calls answered 4xx/5xx during the rounds: " + "; ".join(errors[:10])]
    lines += ["", f"![dashboard](results/{results['plot']})"] if results.get("plot") else []
    return lines


def plot(results: dict[str, Any], path: Path) -> str:
    """Each page's p50 beside openstacksdk's for the same data (a PNG); its name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = results["measured"]
    pages = list(m["equivalents"])
    horizon = [m["horizon"][page]["seconds"]["p50"] * 1000 for page in pages]
    calls = [m["horizon"][page]["calls_seconds"]["p50"] * 1000 for page in pages]
    sdk = [m["equivalents"][page]["sdk_sum"]["p50"] * 1000 for page in pages]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    rows = range(len(pages))
    ax.barh([r + 0.27 for r in rows], horizon, 0.27, label="Horizon page")
    ax.barh(list(rows), calls, 0.27, label="its calls to the cloud (Horizon's log)")
    ax.barh([r - 0.27 for r in rows], sdk, 0.27, label="openstacksdk, same data")
    ax.set_yticks(list(rows), pages, fontsize=8)
    ax.set_xlabel("p50, ms")
    ax.legend(fontsize=7)
    fig.suptitle(f"bench/dashboard.py at {results['commit']} ({results['date']}), "
                 f"{results['settings']['servers']} servers", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 servers, 5 rounds")
    parser.add_argument("--servers", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--network", choices=["neutron", "none"], default="neutron")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="copy the services' logs (Horizon's, the API's, ...) here")
    parser.add_argument("--plot-only", type=Path, metavar="JSON",
                        help="only the plot of a results file (beside it, .png)")
    args = parser.parse_args(argv)
    if args.plot_only:
        with_plot(args.plot_only)
        return 0
    count = args.servers or (20 if args.quick else 200)
    rounds = args.rounds or (5 if args.quick else 20)
    neutron = args.network == "neutron"
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    if neutron:
        from tools.local_services.netns import netns_usable

        why = netns_usable()
        if why:
            raise SystemExit(f"bench/dashboard.py: {why} (or --network none)")
    import openstack

    commit = checkout_commit()
    load_before = Path("/proc/loadavg").read_text().strip()
    started = time.monotonic()
    ROOT.mkdir(parents=True, exist_ok=True, mode=0o711)
    top = ROOT / f"dashboard-{uuidlib.uuid4().hex[:8]}"
    top.mkdir(mode=0o711)
    name = f"dashboard{'-quick' if args.quick else ''}.json"
    results: dict[str, Any] = {
        "settings": {"quick": args.quick, "servers": count, "rounds": rounds,
                     "hosts": -(-count // PER_HOST),
                     "neutron": neutron, "flavor": FLAVOR, "batch": BATCH},
        "openstacksdk": importlib.metadata.version("openstacksdk"), "file": name,
        "horizon_version": _horizon_version(), "commit": commit, "load_before": load_before,
        "machine": machine_line()}
    try:
        with cloud(top / "run", neutron, -(-count // PER_HOST), args.keep_logs) as info:
            results["up_s"] = info["up_s"]
            run_dir: Path = info["stack"].run_dir
            os.environ["OS_CLIENT_CONFIG_FILE"] = str(run_dir / "clouds.yaml")
            admin = openstack.connect(cloud=ADMIN_CLOUD)
            conn = openstack.connect(cloud=DEMO_CLOUD)
            lift_quotas(admin, conn.current_project_id, neutron)
            image = admin.image.find_image("tempest-image")
            results["populated"] = populate(conn, count, image.id, neutron)
            keystone = info["keystone"]
            dash = Dashboard(info["horizon"].url, keystone.ca_file)
            dash.login("demo", keystone.password("demo"))
            say("logged in to Horizon as demo")
            results["measured"] = measure(dash, conn, count, rounds, neutron,
                                          results["populated"]["networks"],
                                          endpoints_of(conn), info["horizon"].log_path,
                                          info["api_log"])
    finally:
        shutil.rmtree(top, ignore_errors=True)
    save_results(RESULTS / name, results, started)
    with_plot(RESULTS / name)
    for line in markdown(json.loads((RESULTS / name).read_text())):
        print(line)
    return 0


def with_plot(path: Path) -> None:
    """The plot of the results at `path` beside them (its name into them), if matplotlib
    is there (`make bench-deps`)."""
    results = json.loads(path.read_text())
    try:
        results["plot"] = plot(results, path.with_suffix(".png"))
    except ImportError as exc:
        say(f"no plot ({exc}; make bench-deps, then bench/dashboard.py --plot-only {path})")
        return
    path.write_text(json.dumps(results, indent=1))


def _horizon_version() -> str:
    from tools.local_services.process import HORIZON_VENV

    found = list(HORIZON_VENV.glob("lib/python3*/site-packages/horizon-*.dist-info"))
    return found[0].name.split("-")[1].removesuffix(".dist") if found else "?"


if __name__ == "__main__":
    sys.exit(main())
