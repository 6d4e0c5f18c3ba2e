"""``optimize``: merge FTS segments, refresh planner statistics, VACUUM, and leave no WAL behind.

Steps (cli-and-formats.md §3.4): (1) ``maintenance.optimize``: FTS5 ``optimize`` (segment merge)
of each index, CJK catch-up and ``PRAGMA optimize``;
(2) a PASSIVE checkpoint, so VACUUM starts from a short WAL; (3) ``VACUUM``; (4) a TRUNCATE
checkpoint: VACUUM writes the whole file through the WAL, and without this a 3 GB store leaves a
3 GB ``-wal`` behind (lessons.md §8). The caller owns the whole-file preconditions (no other
holder, free disk); ``preflight`` states them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from . import maintenance
from .backup import require_free_space
from .engine import checkpoint, engine_path
from .engine import vacuum as vacuum_store

Progress = Callable[[str], None]


@dataclass
class Sizes:
    main: int
    wal: int

    @classmethod
    def of(cls, path: Path) -> Sizes:
        wal = Path(f"{path}-wal")
        return cls(path.stat().st_size if path.exists() else 0,
                   wal.stat().st_size if wal.exists() else 0)


@dataclass
class OptimizeResult:
    before: Sizes
    after: Sizes
    steps: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def preflight(path: Path) -> None:
    """VACUUM needs about the store's size free beside it and again in the temp directory."""
    need = path.stat().st_size
    require_free_space(path.parent, need, "optimize (VACUUM)")
    require_free_space(Path(tempfile.gettempdir()), need, "optimize (VACUUM's temp copy)")


def optimize(engine: Engine, progress: Progress | None = None, *,
             vacuum: bool = True) -> OptimizeResult:
    path = Path(engine_path(engine))
    note = progress or (lambda step: None)
    result = OptimizeResult(Sizes.of(path), Sizes.of(path))
    note("merging FTS segments")
    result.merged = maintenance.optimize(engine)
    result.steps += ["fts optimize", "pragma optimize"]
    note("checkpoint (PASSIVE)")
    checkpoint(engine, "PASSIVE")
    result.steps.append("checkpoint passive")
    if vacuum:
        note("VACUUM")
        vacuum_store(engine)
        result.steps.append("vacuum")
    note("checkpoint (TRUNCATE)")
    checkpoint(engine, "TRUNCATE")
    result.steps.append("checkpoint truncate")
    result.after = Sizes.of(path)
    return result

