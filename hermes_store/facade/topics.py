"""Telegram DM topic mode on ``SessionDB`` (repository: repo/topics.py).

Ids go through ``str()`` because Telegram chat, thread and user ids arrive as ints. An id that
is ``None`` or ``""`` names nothing: readers answer their neutral value, writers refuse it
(storing the text ``"None"`` as a chat id would bind nothing anyone can find again).
"""

from __future__ import annotations

import time
from typing import Any

from hermes_store.facade.units import SessionDB, absent, read, write
from hermes_store.repo import topics


def _required(name: str, value: object) -> str:
    if absent(value):
        raise ValueError(f"{name} is required")
    return str(value)


def apply_telegram_topic_migration(db: SessionDB) -> None:
    write(db, topics.apply_migration, what="apply_telegram_topic_migration")


def enable_telegram_topic_mode(db: SessionDB, *, chat_id: object, user_id: object,
                               has_topics_enabled: object = None,
                               allows_users_to_create_topics: object = None) -> None:
    chat, user, now = _required("chat_id", chat_id), _required("user_id", user_id), time.time()
    write(db, lambda c: topics.enable(
        c, chat_id=chat, user_id=user, has_topics_enabled=has_topics_enabled,
        allows_users_to_create_topics=allows_users_to_create_topics, now=now),
        what="enable_telegram_topic_mode")


def disable_telegram_topic_mode(db: SessionDB, *, chat_id: object,
                                clear_bindings: bool = True) -> None:
    if absent(chat_id):
        return
    chat, now = str(chat_id), time.time()
    write(db, lambda c: topics.disable(c, chat_id=chat, clear_bindings=bool(clear_bindings),
                                       now=now), what="disable_telegram_topic_mode")


def is_telegram_topic_mode_enabled(db: SessionDB, *, chat_id: object, user_id: object) -> bool:
    if absent(chat_id) or absent(user_id):
        return False
    chat, user = str(chat_id), str(user_id)
    return read(db, lambda c: topics.is_enabled(c, chat_id=chat, user_id=user))


def bind_telegram_topic(db: SessionDB, *, chat_id: object, thread_id: object, user_id: object,
                        session_key: object, session_id: object,
                        managed_mode: object = "auto") -> None:
    values = {name: _required(name, value) for name, value in (
        ("chat_id", chat_id), ("thread_id", thread_id), ("user_id", user_id),
        ("session_key", session_key), ("session_id", session_id))}
    mode = "auto" if absent(managed_mode) else str(managed_mode)
    now = time.time()
    write(db, lambda c: topics.bind(c, managed_mode=mode, now=now, **values),
          what="bind_telegram_topic")


def get_telegram_topic_binding(db: SessionDB, *, chat_id: object,
                               thread_id: object) -> topics.TopicBinding | None:
    if absent(chat_id) or absent(thread_id):
        return None
    chat, thread = str(chat_id), str(thread_id)
    return read(db, lambda c: topics.binding(c, chat_id=chat, thread_id=thread))


def get_telegram_topic_binding_by_session(db: SessionDB, *,
                                          session_id: object) -> topics.TopicBinding | None:
    if absent(session_id):
        return None
    sid = str(session_id)
    return read(db, lambda c: topics.binding_by_session(c, session_id=sid))


def list_telegram_topic_bindings_for_chat(db: SessionDB, *,
                                          chat_id: object) -> list[topics.TopicBinding]:
    if absent(chat_id):
        return []
    chat = str(chat_id)
    return read(db, lambda c: topics.bindings_for_chat(c, chat_id=chat))


def is_telegram_session_linked_to_topic(db: SessionDB, *, session_id: object) -> bool:
    if absent(session_id):
        return False
    sid = str(session_id)
    return read(db, lambda c: topics.session_linked(c, session_id=sid))


def delete_telegram_topic_binding(db: SessionDB, *, chat_id: object, thread_id: object) -> int:
    if absent(chat_id) or absent(thread_id):
        return 0
    chat, thread, now = str(chat_id), str(thread_id), time.time()
    return write(db, lambda c: topics.delete_binding(c, chat_id=chat, thread_id=thread, now=now),
                 what="delete_telegram_topic_binding")


def list_unlinked_telegram_sessions_for_user(db: SessionDB, *, chat_id: object,
                                             user_id: object,
                                             limit: int = 10) -> list[dict[str, Any]]:
    """``chat_id`` is accepted for the agent's signature and ignored, as the agent does: a
    user's unlinked sessions are offered in whichever DM they ask from."""
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise TypeError("limit must be an int")
    if absent(user_id) or limit <= 0:
        return []
    user, now = str(user_id), time.time()
    return read(db, lambda c: topics.unlinked_sessions(c, user_id=user, limit=limit, now=now))
