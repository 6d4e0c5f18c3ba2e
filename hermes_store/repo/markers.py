"""The agent's relationship markers in ``sessions.model_config``: ``_branched_from`` (set by
``/branch``) and ``_delegate_from`` (set on subagent sessions).

A session *carries* a marker when its ``model_config`` text holds the quoted key. The test is
textual on purpose, and the SQL and Python forms below are the same test, so a walk done in
Python (tip, lineage, resume) and one done in SQL (listing) never disagree:

* it runs on both backends as plain ``LIKE`` (SQLite's JSON functions raise on malformed text,
  and PostgreSQL 15 has no cast that fails softly), so one bad ``model_config`` cannot break a
  listing or a walk;
* the agent writes these keys with JSON's own quoting, so a quoted key can only appear as a key
  (or as a string value spelled exactly like one, which nothing writes). SQLite's ``LIKE`` also
  ignores ASCII case; the keys are lower-case and nothing writes them otherwise.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, or_

BRANCHED_FROM = "_branched_from"
DELEGATE_FROM = "_delegate_from"
MARKERS = (BRANCHED_FROM, DELEGATE_FROM)


def _quoted(key: str) -> str:
    return f'"{key}"'


def carries(model_config: str | None, key: str) -> bool:
    """Python form of :func:`carries_clause`."""
    return isinstance(model_config, str) and _quoted(key) in model_config


def carries_any(model_config: str | None) -> bool:
    return any(carries(model_config, key) for key in MARKERS)


def carries_clause(model_config: ColumnElement[str], key: str) -> ColumnElement[bool]:
    """True where the column's text holds the quoted key (NULL text: false, never NULL)."""
    return and_(model_config.is_not(None),
                model_config.contains(_quoted(key), autoescape=True))


def carries_any_clause(model_config: ColumnElement[str]) -> ColumnElement[bool]:
    return or_(*(carries_clause(model_config, key) for key in MARKERS))
