"""The ``manifest.jsonl`` beside a Markdown export: one record a file, and its verification.

A record's ``sha256`` is the checksum of the file's bytes, what ``sha256sum`` prints, so the
manifest can be checked without this package. Exporting again into the same directory
replaces the records of the files it rewrites instead of appending duplicates; records of
other files, and lines this code cannot read, are kept as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_store.errors import StoreNotFoundError
from hermes_store.transfer.output import open_output

MANIFEST = "manifest.jsonl"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Manifest:
    """The manifest of one directory, rewritten whole (temporary file and rename) on every
    record, so an interrupted export leaves a manifest matching the files it finished."""

    def __init__(self, directory: Path, *, mode: int | None = None) -> None:
        self.path = directory / MANIFEST
        self.mode = mode  # the exports' own: it names them (titles live in file names)
        self.lines: list[tuple[str | None, str]] = []  # (file name or None, the line)
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    self.lines.append((_path_of(line), line))

    def record(self, name: str, line: str) -> None:
        """Put the record ``line`` of the file ``name`` in place of any earlier one."""
        self.lines = [(p, text) for p, text in self.lines if p != name]
        self.lines.append((name, line))
        with open_output(self.path, force=True, mode=self.mode) as out:
            out.write("".join(text + "\n" for _, text in self.lines))


def _path_of(line: str) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    path = record.get("path") if isinstance(record, dict) else None
    return path if isinstance(path, str) else None


@dataclass
class FileCheck:
    path: str
    status: str  # ok | changed | missing | unreadable record
    expected: str | None = None
    actual: str | None = None


def verify(target: str | os.PathLike[str]) -> list[FileCheck]:
    """Check every file a manifest (or the manifest in a directory) lists against its
    checksum; files are looked up beside the manifest."""
    path = Path(target)
    if path.is_dir():
        path = path / MANIFEST
    if not path.is_file():
        raise StoreNotFoundError(f"no manifest at {path}")
    checks: list[FileCheck] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        name = _path_of(line)
        if name is None:
            checks.append(FileCheck(line[:80], "unreadable record"))
            continue
        expected = json.loads(line).get("sha256")
        file = path.parent / name
        if not file.is_file():
            checks.append(FileCheck(name, "missing", expected))
            continue
        actual = file_sha256(file)
        checks.append(FileCheck(name, "ok" if actual == expected else "changed", expected,
                                actual))
    return checks


def as_dicts(checks: list[FileCheck]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]
