"""v21 API (docs/v21.md#other), what a session ran in and with: working directories, repository
roots, model, billing route and ``model_config``."""

from __future__ import annotations

from collections.abc import Mapping

from hermes_store.facade import arguments as args
from hermes_store.facade.units import SessionDB, absent, read, write
from hermes_store.repo import settings, workspace

# --------------------------------------------------------------------------- workspace


def distinct_session_cwds(db: SessionDB,
                          include_archived: bool = False) -> list[workspace.WorkingDirectory]:
    return read(db, lambda c: workspace.distinct_cwds(c, include_archived=bool(include_archived)))


def backfill_repo_roots(db: SessionDB, cwd_to_root: Mapping[str, str]) -> None:
    if not isinstance(cwd_to_root, Mapping):
        raise TypeError(f"cwd_to_root must be a mapping, not {type(cwd_to_root).__name__}")
    pairs = {args.required("cwd", cwd): args.required("git_repo_root", root)
             for cwd, root in cwd_to_root.items() if cwd and root}
    if pairs:
        write(db, lambda c: workspace.backfill_repo_roots(c, pairs), what="backfill_repo_roots")


def update_session_cwd(db: SessionDB, session_id: str, cwd: str, git_branch: str | None = None,
                       git_repo_root: str | None = None) -> None:
    """Set ``cwd``; the git columns only when they hold something (stored stripped), so a
    turn outside a repository keeps what an earlier turn learnt."""
    sid = args.session_id(session_id)
    where = None if absent(cwd) else args.required("cwd", cwd)
    git = {name: value.strip() for name, value in (
        ("git_branch", args.text("git_branch", git_branch)),
        ("git_repo_root", args.text("git_repo_root", git_repo_root))) if value and value.strip()}
    if sid is None or where is None:
        return
    write(db, lambda c: workspace.update_cwd(c, sid, where, git), what="update_session_cwd")


# --------------------------------------------------------------------------- settings


def update_session_model(db: SessionDB, session_id: str, model: str | None) -> None:
    name = args.text("model", model)
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: settings.update_model(c, sid, name), what="update_session_model")


def update_session_billing_route(db: SessionDB, session_id: str, *, provider: str | None,
                                 base_url: str | None, billing_mode: str | None = None) -> None:
    route = {"provider": args.text("provider", provider),
             "base_url": args.text("base_url", base_url),
             "billing_mode": args.text("billing_mode", billing_mode)}
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: settings.update_billing_route(c, sid, **route),
              what="update_session_billing_route")


def update_session_meta(db: SessionDB, session_id: str, model_config_json: str | None,
                        model: str | None = None) -> None:
    config = args.text("model_config_json", model_config_json)
    name = args.text("model", model)
    sid = args.session_id(session_id)
    if sid is not None:
        write(db, lambda c: settings.update_meta(c, sid, config, name),
              what="update_session_meta")
