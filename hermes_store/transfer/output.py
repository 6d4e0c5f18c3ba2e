"""What an export is asked for and what it produces: options, result, the redaction policy applied
to rows, and the files it writes (atomically, never over an existing one without ``force``).

Shared by :mod:`hermes_store.transfer.export` (jsonl, trace, user prompts, the entry point) and
:mod:`hermes_store.transfer.documents` (Markdown and HTML).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hermes_store.errors import HermesStoreError, UsageError
from hermes_store.paths import default_db_path
from hermes_store.transfer.redact import Redactor
from hermes_store.transfer.targets import cannot_write, open_in_place, plan_target
from hermes_store.version import __version__

__all__ = [
    "EXPORTER", "FORMATS", "ExportOptions", "ExportResult", "Progress", "Scrub",
    "default_export_dir", "dumps", "is_dir_target", "open_output", "slug", "tick",
]

FORMATS = ("jsonl", "md", "qmd", "html", "trace")
EXPORTER = f"hermes-store {__version__}"
# Session columns that identify rather than describe; redaction leaves them alone.
_SESSION_KEYS = frozenset({"id", "parent_session_id"})


@dataclass
class ExportOptions:
    """The flags of ``export`` that shape the output (selection is the caller's)."""

    format: str = "jsonl"
    #: ``"user-prompts"`` or None.
    only: str | None = None
    #: None = the format's default (on for ``trace`` only).
    redact: bool | None = None
    known_secrets: Sequence[str] = ()
    #: ``single`` or ``logical`` (md/qmd: one file per compression lineage).
    lineage: str = "single"
    force: bool = False
    reasoning: bool = True
    #: jsonl: False omits the ``attachments`` key (``--no-attachments``).
    attachments: bool = True
    #: Fixed export time (tests, reproducible bundles); default now.
    exported_at: str | None = None
    #: Permission bits of the files written; None = the store's own (``export_sessions``).
    file_mode: int | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise UsageError(f"unknown export format {self.format!r} (use {', '.join(FORMATS)})")
        if self.only not in (None, "user-prompts"):
            raise UsageError(f"--only {self.only!r}: only 'user-prompts' is supported")
        if self.only and self.format not in ("jsonl", "md"):
            raise UsageError("--only user-prompts writes jsonl or md")
        if self.lineage not in ("single", "logical"):
            raise UsageError(f"--lineage {self.lineage!r}: use single or logical")
        if self.exported_at is None:
            self.exported_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    @property
    def redacting(self) -> bool:
        return self.format == "trace" if self.redact is None else self.redact


@dataclass
class ExportResult:
    """What was written: files (or ``-``), counts, and notes for stderr."""

    format: str
    sessions: int = 0
    messages: int = 0
    files: list[str] = field(default_factory=list)
    redacted: bool = False
    #: Per-category redaction counts (never the values).
    redaction_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    manifest: str | None = None


Progress = Callable[[str, int], None]


def tick(progress: Progress | None, sid: str, n: int) -> None:
    if progress is not None:
        progress(sid, n)


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class Scrub:
    """Applies the export's redaction policy to rows (a pass-through when redaction is off)."""

    def __init__(self, options: ExportOptions) -> None:
        self.on = options.redacting
        self.redactor = Redactor(options.known_secrets) if self.on else None

    @staticmethod
    def _scannable(row: dict[str, Any]) -> dict[str, Any]:
        # A raw (undecodable) cell would travel as base64 and hide a secret from the scan:
        # when redacting, it is read as text (bad bytes replaced) like everything else.
        return {k: v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v
                for k, v in row.items()}

    def session(self, row: dict[str, Any]) -> dict[str, Any]:
        if self.redactor is None:
            return row
        out = self.redactor.redact_session_metadata(self._scannable(row))
        for key, value in out.items():
            if key not in _SESSION_KEYS and isinstance(value, str):
                out[key] = self.redactor.redact_value(value, key)
        return out

    def message(self, row: dict[str, Any]) -> dict[str, Any]:
        return row if self.redactor is None else self.redactor.redact_message(self._scannable(row))

    def text(self, value: str) -> str:
        return value if self.redactor is None else self.redactor.redact_text(value)

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.redactor.counts) if self.redactor else {}


# --------------------------------------------------------------------------- output files

@contextlib.contextmanager
def open_output(path: Path | None, *, force: bool = False,
                mode: int | None = None) -> Iterator[TextIO]:
    """Write to *path* through a temporary sibling renamed into place on success; None = stdout.

    The file gets permission bits *mode* exactly (the umask cannot widen or narrow them);
    None leaves them to the umask.

    An existing *path* is refused unless *force*; a special file (FIFO, device, socket) is
    written in place instead of replaced (:mod:`hermes_store.transfer.targets`). On any error
    the temporary file is removed and *path* is left as it was; a failed write is an
    OutputError naming *path*.
    """
    if path is None:
        try:
            yield sys.stdout
            sys.stdout.flush()
        except OSError as err:
            raise cannot_write("to standard output", err) from err
        return
    path, in_place = plan_target(path, force=force)
    if in_place:
        with open_in_place(path) as f:
            try:
                yield f
                f.flush()
            except OSError as err:
                raise cannot_write(path, err) from err
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                     0o666 if mode is None else mode)
        if mode is not None:
            os.fchmod(fd, mode)
        f = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
    except OSError as err:
        raise cannot_write(path, err) from err
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException as err:
        f.close()
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError) and not isinstance(err, HermesStoreError):
            raise cannot_write(path, err) from err
        raise


def default_export_dir() -> Path:
    """``$HERMES_HOME/session-exports`` (beside the default store)."""
    return default_db_path().parent / "session-exports"


def is_dir_target(output: str | os.PathLike[str]) -> bool:
    text = os.fspath(output)
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def slug(title: str | None, limit: int = 60) -> str:
    """File-name slug of a (redacted) title: lowercase words joined by ``-``."""
    if not title:
        return ""
    return re.sub(r"[^\w]+", "-", title.lower()).strip("-_")[:limit].strip("-_")
