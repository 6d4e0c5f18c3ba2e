"""hermes-store: the operator's command line. Each command is a thin layer over one library call.

The group and shared plumbing live in :mod:`.app`; each module below registers one family of
commands on it.
"""

from __future__ import annotations

from hermes_store.cli import (  # noqa: F401  (each module registers its commands)
    browse, copy, health, metadata, repair, retention, schema, transfer,
)
from hermes_store.cli.app import main

__all__ = ["main"]
