"""The typing rules of docs/architecture.md#conventions that mypy itself cannot hold: every
``type: ignore`` in the package names its error code and says why on the same line, there are
fewer than 32 of them, and no configuration switches strictness off for part of the package."""

from __future__ import annotations

import io
import re
import tokenize
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hermes_store"
MAX_IGNORES = 31  # fewer than the 32 the package had before the typing pass (issue 23)

IGNORE = re.compile(r"type:\s*ignore\b")
# ``type: ignore[code, code]`` then, after ``#`` or `` - ``, the reason in words.
JUSTIFIED = re.compile(r"type:\s*ignore\[[a-z][a-z-]*(?:,\s*[a-z][a-z-]*)*\]"
                       r"\s*(?:#|-|\N{EM DASH})\s*\S*[A-Za-z]")
# mypy's in-file configuration (``# mypy: ignore-errors``, ``disable-error-code=…``).
INLINE_CONFIG = re.compile(r"#\s*mypy:")


def _comments() -> list[tuple[str, str]]:
    """Every comment in the package, as ``(file:line, text)``; strings are not comments."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                found.append((f"{path.relative_to(ROOT)}:{token.start[0]}", token.string))
    return found


def _ignores() -> list[tuple[str, str]]:
    return [(where, text) for where, text in _comments() if IGNORE.search(text)]


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    bare = [f"{where}: {text}" for where, text in _ignores() if not JUSTIFIED.search(text)]
    assert bare == [], ("a type: ignore without an error code and a reason on its line "
                        "(`# type: ignore[code]  # why`):\n" + "\n".join(bare))


def test_fewer_than_32_type_ignores_remain() -> None:
    found = _ignores()
    assert len(found) <= MAX_IGNORES, (
        f"{len(found)} type: ignore comments (at most {MAX_IGNORES}); fix a type rather than "
        "silence it:\n" + "\n".join(f"{where}: {text}" for where, text in found))


def test_no_part_of_the_package_is_checked_less_strictly() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config.get("strict") is True
    assert not config.get("ignore_errors") and not config.get("disable_error_code")
    loosened = [o for o in config.get("overrides", [])
                if any(k != "module" and k != "ignore_missing_imports" for k in o)]
    assert loosened == [], f"per-module mypy settings beyond missing stubs: {loosened}"
    inline = [f"{where}: {text}" for where, text in _comments() if INLINE_CONFIG.search(text)]
    assert inline == [], "mypy configured inside a module:\n" + "\n".join(inline)
