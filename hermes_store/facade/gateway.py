"""v21 API (docs/v21.md#gateway): peer columns, the expiry flag, the routing index and the
lookups a gateway resumes by."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from hermes_store.content import dump_json
from hermes_store.facade import arguments as args
from hermes_store.facade.units import SessionDB, absent, read, write
from hermes_store.repo import gateway as repo


def record_gateway_session_peer(db: SessionDB, session_id: str, *, source: str,
                                user_id: str | None = None, session_key: str | None = None,
                                chat_id: str | None = None, chat_type: str | None = None,
                                thread_id: str | None = None, display_name: str | None = None,
                                origin_json: str | None = None) -> None:
    """Who the session talks to. The peer columns (``source`` included, unlike
    ``create_session``) are set as given, ``None`` clearing; the display name and origin only
    when given."""
    sid = args.session_id(session_id)
    key = args.session_id(session_key, "session_key")
    values: dict[str, Any] = {"session_key": key,
                              "source": args.required("source", source)}
    peer = {"user_id": user_id, "chat_id": chat_id, "chat_type": chat_type,
            "thread_id": thread_id}
    values.update({name: args.stringified(name, value) for name, value in peer.items()})
    if display_name is not None:
        values["display_name"] = args.text("display_name", display_name)
    if origin_json is not None:
        values["origin_json"] = (origin_json if isinstance(origin_json, str)
                                 else dump_json(origin_json))
    if sid is None or key is None:
        return
    write(db, lambda c: repo.record_peer(c, sid, values), what="record_gateway_session_peer")


def set_expiry_finalized(db: SessionDB, session_id: str, finalized: bool = True) -> None:
    sid = args.session_id(session_id)
    if sid is not None:
        flag = bool(finalized)
        write(db, lambda c: repo.set_expiry_finalized(c, sid, flag), what="set_expiry_finalized")


# --------------------------------------------------------------------------- routing index


def _scope(scope: object) -> str:
    return "" if scope is None else args.required("scope", scope)


def save_gateway_routing_entry(db: SessionDB, session_key: str, entry_json: str, *,
                               scope: str = "") -> None:
    where = _scope(scope)
    if absent(session_key) or absent(entry_json):
        return
    key = args.required("session_key", session_key)
    entry = args.required("entry_json", entry_json)
    write(db, lambda c: repo.save_route(c, where, key, entry, now=time.time()),
          what="save_gateway_routing_entry")


def replace_gateway_routing_entries(db: SessionDB, entries: Mapping[str, str], *,
                                    scope: str = "") -> None:
    """One unit: the scope's index becomes exactly ``entries`` (pairs with an empty key or
    value are left out)."""
    where = _scope(scope)
    if not isinstance(entries, Mapping):
        raise TypeError(f"entries must be a mapping, not {type(entries).__name__}")
    kept = {args.required("session key", k): args.required("entry_json", v)
            for k, v in entries.items() if k and v}
    write(db, lambda c: repo.replace_routes(c, where, kept, now=time.time()),
          what="replace_gateway_routing_entries")


def load_gateway_routing_entries(db: SessionDB, *, scope: str = "") -> dict[str, str]:
    where = _scope(scope)
    return read(db, lambda c: repo.load_routes(c, where))


def delete_gateway_routing_entries(db: SessionDB, session_keys: Iterable[str], *,
                                   scope: str = "") -> None:
    where = _scope(scope)
    if isinstance(session_keys, str):
        raise TypeError("session_keys must be a list of keys, not one str")
    keys = [key for key in (session_keys or ()) if not absent(key)]
    for key in keys:
        args.required("session key", key)
    if keys:
        write(db, lambda c: repo.delete_routes(c, where, keys),
              what="delete_gateway_routing_entries")


# --------------------------------------------------------------------------- lookups


def list_gateway_sessions(db: SessionDB, *, platform: str | None = None,
                          active_only: bool = True) -> list[dict[str, Any]]:
    name = args.text("platform", platform) or None
    return read(db, lambda c: repo.list_gateway_sessions(
        c, platform=name, active_only=bool(active_only), now=time.time()))


def find_session_by_origin(db: SessionDB, *, platform: str, chat_id: Any,
                           thread_id: Any = None, user_id: Any = None) -> str | None:
    """The open keyed session of that chat (and thread). With a user: theirs, else the only
    candidate. Without: the newest, unless the chat holds several users' sessions (then the
    caller must not guess)."""
    if not platform or absent(chat_id):
        return None
    name = args.required("platform", platform)
    chat = args.stringified("chat_id", chat_id)
    if chat is None:  # absent() above: not reached, but the lookup needs a chat
        return None
    thread = args.stringified("thread_id", thread_id)
    user = args.stringified("user_id", user_id) if user_id else None
    found = read(db, lambda c: repo.origin_candidates(c, platform=name, chat_id=chat,
                                                      thread_id=thread))
    if user:
        mine = [sid for sid, uid in found if uid == user]
        if mine:
            return mine[0]
        return found[0][0] if len(found) == 1 else None
    if len({uid for _, uid in found if uid}) > 1:
        return None
    return found[0][0] if found else None


def find_latest_gateway_session_for_peer(db: SessionDB, *, source: str, user_id: Any = None,
                                         session_key: str | None = None, chat_id: Any = None,
                                         chat_type: Any = None,
                                         thread_id: Any = None) -> dict[str, Any] | None:
    """The session a returning peer resumes (open, or ended by older code that closed it
    wrongly, and holding messages); the caller reopens it."""
    key = args.session_id(session_key, "session_key")
    if key is None:
        return None
    platform = args.required("source", source)
    peer = {name: args.stringified(name, value) for name, value in (
        ("user_id", user_id), ("chat_id", chat_id), ("chat_type", chat_type),
        ("thread_id", thread_id))}
    return read(db, lambda c: repo.latest_for_peer(c, source=platform, session_key=key, **peer))
