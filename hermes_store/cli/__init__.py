"""hermes-store: the operator's command line. Each command is a thin layer over one library call.

The group and shared plumbing live in :mod:`.app`; each module below it registers one family
of commands, imported only when one of its commands is used (``--version`` and ``--help`` load
click and nothing heavier).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["main", "run"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from hermes_store.cli.app import main

        return main
    raise AttributeError(f"module 'hermes_store.cli' has no attribute {name!r}")


def run() -> None:
    """The ``hermes-store`` console script: Ctrl-C at any moment, start-up included, exits 130
    with one line instead of a traceback."""
    try:
        from hermes_store.cli.app import main

        main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
