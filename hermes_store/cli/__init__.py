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
    with one line instead of a traceback; a reader that closed the pipe early (``| head -1``)
    ends it with exit 0 and nothing on stderr."""
    try:
        from hermes_store.cli.app import main

        main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except SystemExit as done:
        # What is still buffered is flushed here, after the command: a closed pipe shows up
        # now, and must not turn a finished command into "Exception ignored … BrokenPipeError".
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            from hermes_store.cli.app import stdout_to_devnull

            stdout_to_devnull()
            sys.exit(0 if done.code in (None, 0, 1) else done.code)
        raise
