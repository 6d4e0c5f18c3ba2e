"""The migrations folder and its head revision, read from the scripts' text without importing
Alembic (``hermes-store --version`` answers before any database library is loaded)."""

from __future__ import annotations

import re
from pathlib import Path

_REVISION = re.compile(r'^revision\s*=\s*["\']([^"\']+)["\']', re.M)
_DOWN = re.compile(r'^down_revision\s*=\s*["\']([^"\']+)["\']', re.M)


def script_location() -> str:
    """The migrations folder: inside the installed package, else the repository's."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise RuntimeError("hermes_store's migrations folder is missing from this installation")


def head(location: str | None = None) -> str:
    """The one revision no other revision builds on (Alembic's head of this linear chain)."""
    return _head(location or script_location())


def _head(location: str) -> str:
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in sorted((Path(location) / "versions").glob("*.py")):
        text = script.read_text(encoding="utf-8")
        found = _REVISION.search(text)
        if found is None:
            continue
        revisions.add(found.group(1))
        parents.update(m.group(1) for m in _DOWN.finditer(text))
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"the migrations have {len(heads)} heads: {sorted(heads)}")
    return heads.pop()


def _links(location: str) -> dict[str, str | None]:
    """Each revision of the chain and the one it builds on (None for the first)."""
    links: dict[str, str | None] = {}
    for script in sorted((Path(location) / "versions").glob("*.py")):
        text = script.read_text(encoding="utf-8")
        found = _REVISION.search(text)
        if found is not None:
            down = _DOWN.search(text)
            links[found.group(1)] = down.group(1) if down else None
    return links


def pending(current: str | None, location: str | None = None) -> list[str] | None:
    """The revisions from ``current`` (exclusive) up to the head, oldest first; None when
    ``current`` is not a revision of this chain (a newer hermes_store wrote it)."""
    links = _links(location or script_location())
    if current is not None and current not in links:
        return None
    out: list[str] = []
    at: str | None = head(location)
    while at is not None and at != current:
        out.append(at)
        at = links.get(at)
    return list(reversed(out))
