"""What a session runs with: ``model``, the billing route and ``model_config``.

Functions take a caller-owned ``Connection`` and never commit; an unknown id changes nothing.
"""

from __future__ import annotations

from sqlalchemy import update

from hermes_store.db.models import SESSIONS
from hermes_store.repo import prompts
from hermes_store.repo.sessions import Executor, connection_of

sessions = SESSIONS


def update_model(conn: Executor, session_id: str, model: str | None) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(model=model))


def update_billing_route(conn: Executor, session_id: str, *, provider: str | None,
                         base_url: str | None, billing_mode: str | None) -> None:
    """Point the session at another provider. The stored system prompt names the old one, so
    it goes too (the agent rebuilds it on the next turn)."""
    values = {"billing_provider": provider, "billing_base_url": base_url, "system_prompt": None}
    if billing_mode is not None:
        values["billing_mode"] = billing_mode
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(**values))
    if prompts.hashed(connection_of(conn)):
        prompts.replace(connection_of(conn), session_id, None)  # the reference goes with the text


def update_meta(conn: Executor, session_id: str, model_config: str | None,
                model: str | None) -> None:
    """Replace ``model_config`` with the caller's text as given (callers read-modify-write, so
    markers survive only if they kept them); ``model`` only when given."""
    values: dict[str, str | None] = {"model_config": model_config}
    if model is not None:
        values["model"] = model
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(**values))
