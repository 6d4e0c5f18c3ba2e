"""The documents the code cites are the repository's own (docs/), and they describe the package.

A citation is a ``*.md`` name in a comment, a docstring, the README or a document in docs/,
optionally with a ``#section`` anchor. Source files cite from the repository root
(``docs/search.md#routing``); Markdown files link relative to themselves, as a renderer reads them.
A bare section number (the section sign) names no document, so it counts as a broken citation.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hermes_store"
SOURCE_DIRS = ("hermes_store", "migrations", "tests", "benchmarks")
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
README = ROOT / "README.md"
# Names of other people's files that comments mention as such: Codex injects the AGENTS.md of
# the user's project into a session, and the importers strip it.
FOREIGN_FILES = frozenset({"AGENTS.md"})

CITATION = re.compile(r"(?<![\w./-])([\w./-]+\.md)\b(?:#([\w-]+))?")
SECTION_SIGN = "\N{SECTION SIGN}"
# Places outside the repository that the reference material lived in during development.
OUTSIDE = re.compile(r"\.\./shared\b|\bshared[/]reference\b|\blegacy-dbs[/]")
TEXT_SUFFIXES = (".py", ".md", ".ini", ".toml", ".mako", ".cfg", ".txt")


def _python_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py"))


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _docstrings(tree: ast.AST) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                yield first.value


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring line of a Python file, or every line of a
    Markdown file."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield from enumerate(source.splitlines(), 1)
        return
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in _docstrings(ast.parse(source, str(path))):
        for offset, line in enumerate(node.value.splitlines()):
            yield node.lineno + offset, line


def _citations() -> Iterator[tuple[str, Path, str, str | None]]:
    """(where, citing file, cited path, anchor) for every citation in the repository's prose."""
    for path in [*_python_files(), *_markdown_files()]:
        for line, text in _prose(path):
            for match in CITATION.finditer(text):
                name, anchor = match.group(1), match.group(2)
                if Path(name).name not in FOREIGN_FILES:
                    yield f"{path.relative_to(ROOT)}:{line}", path, name, anchor


def _resolve(citing: Path, name: str) -> Path | None:
    """The cited file inside the repository, or None."""
    base = citing.parent if citing.suffix == ".md" else ROOT
    target = (base / name).resolve()
    if not target.is_relative_to(ROOT) or not target.is_file():
        return None
    return target


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rule)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found.add(slug(m.group(1)))
    return found


def test_docs_folder_holds_the_documents_the_issue_names() -> None:
    for name in ("architecture.md", "search.md", "formats.md"):
        assert (DOCS / name).is_file(), f"docs/{name} is missing"


def test_every_cited_document_is_in_the_repository() -> None:
    missing = [f"{where} cites {name}" for where, citing, name, _ in _citations()
               if _resolve(citing, name) is None]
    assert missing == [], "\n".join(missing)


def test_every_cited_section_exists_in_its_document() -> None:
    missing = []
    for where, citing, name, anchor in _citations():
        target = _resolve(citing, name)
        if anchor and target is not None and target.suffix == ".md" \
                and anchor not in anchors(target):
            missing.append(f"{where} cites {name}#{anchor}")
    assert missing == [], "\n".join(missing)


def test_no_bare_section_number_stands_in_for_a_citation() -> None:
    bare = [f"{path.relative_to(ROOT)}:{line}: {text.strip()[:70]}"
            for path in [*_python_files(), *_markdown_files()]
            for line, text in _prose(path) if SECTION_SIGN in text]
    assert bare == [], "\n".join(bare)


def test_nothing_points_outside_the_repository() -> None:
    skip = {".git", ".venv", "__pycache__", "fixtures", "results"}
    wrong = []
    for path in sorted(ROOT.rglob("*")):
        parts = set(path.relative_to(ROOT).parts)
        if parts & skip or not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                wrong.append(f"{path.relative_to(ROOT)}:{n}")
    assert wrong == [], "\n".join(wrong)


def test_the_checks_recognise_what_they_look_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""See search.md and docs/search.md#routing."""\n'
                      "# lessons.md \N{SECTION SIGN}8, and the AGENTS.md of a project\n"
                      'TEXT = "p.md"\n', encoding="utf-8")
    found = [(line, m.group(1), m.group(2)) for line, text in _prose(sample)
             for m in CITATION.finditer(text)]
    assert sorted(found) == [(1, "docs/search.md", "routing"), (1, "search.md", None),
                             (2, "AGENTS.md", None), (2, "lessons.md", None)]
    assert _resolve(sample, "search.md") is None
    assert _resolve(sample, "docs/search.md") == DOCS / "search.md"
    assert _resolve(sample, "../" * len(ROOT.parts) + "etc/passwd.md") is None
    assert slug("Ranking and order") == "ranking-and-order"
    assert slug("`jsonl`: the backup format") == "jsonl-the-backup-format"
    assert OUTSIDE.search("see ../sh" + "ared/reference/search.md")


# --------------------------------------------------------------------------- the layout


def _rooms() -> dict[str, list[str]]:
    """Each folder of the package and the modules in it (a package's __init__ is no room)."""
    rooms: dict[str, list[str]] = {"": []}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.name in ("__init__.py", "__main__.py") or "migrations" in rel.parts:
            continue
        rooms.setdefault("/".join(rel.parts[:-1]), []).append(path.stem)
    return rooms


def _layout_block(path: Path, heading: str) -> list[str]:
    """The first fenced block after ``heading`` in ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    fence = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    return lines[fence + 1 : end]


def _room_text(block: list[str], room: str) -> str:
    """The line naming ``room/`` plus its continuation lines (those that open no other room)."""
    opener = re.compile(r"^\s*[\w.]+/(?:\s|$)")
    for i, line in enumerate(block):
        if re.match(rf"^\s*{re.escape(room)}/(?:\s|$)", line):
            rest = [line]
            for more in block[i + 1 :]:
                if opener.match(more) or re.match(r"^\s*\S+\.py\b", more) or not more.strip():
                    break
                rest.append(more)
            return " ".join(rest)
    return ""


@pytest.mark.parametrize(("document", "heading"), [(ARCHITECTURE, "## Rooms"),
                                                   (README, "## Layout")])
def test_the_layout_names_every_module_in_its_room(document: Path, heading: str) -> None:
    block = _layout_block(document, heading)
    missing = []
    for room, modules in _rooms().items():
        text = " ".join(block) if room == "" else _room_text(block, room)
        for module in modules:
            name = f"{module}.py" if room == "" else module
            if not re.search(rf"(?<![\w.]){re.escape(name)}\b", text):
                missing.append(f"{room or 'hermes_store'}/{module}")
    assert missing == [], f"{document.name} {heading!r} does not name {missing}"
