"""Check the relative links of Markdown files outside docs/ (MkDocs checks those inside).

    python -m tools.docs_links README.md [FILE ...]

Each link to a file of the repository must name one that exists, and a `#anchor` into a
Markdown file a heading of it (slugged as MkDocs' table of contents slugs them). One line
per dead link, exit status 1; links to other sites are not followed.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# [text](target) and [text](target "title"), not images' sources from other sites.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's toc extension makes it (its default slugify:
    ASCII only, punctuation dropped, spaces to hyphens), markup removed first."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _prose(text: str) -> list[str]:
    """The lines of `text` outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in the Markdown file `path` (a repeated one gets _1, _2...)."""
    found: set[str] = set()
    for line in _prose(path.read_text()):
        match = HEADING.match(line)
        if match:
            anchor, number = slug(match.group(1)), 0
            while (anchor if not number else f"{anchor}_{number}") in found:
                number += 1
            found.add(anchor if not number else f"{anchor}_{number}")
    return found


def dead_links(path: Path) -> list[str]:
    """One line per link of `path` that leads nowhere."""
    faults = []
    for line in _prose(path.read_text()):
        for target in LINK.findall(line):
            if re.match(r"\A[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto: ...: another site's
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO)}: link {target!r}"
            if not linked.exists():
                faults.append(f"{where}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                faults.append(f"{where}: no heading with that anchor")
    return faults


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    faults = [fault for name in names for fault in dead_links((REPO / name).resolve())]
    for fault in faults:
        print(f"docs_links: {fault}", file=sys.stderr)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
