"""The query language of full-text search: pure functions, no database connection.

The search contract (docs/search.md) is implemented in four layers:

* :func:`sanitize_query` turns any user text into an FTS5 expression that is valid for both the
  unicode61 and the trigram tokenizer (or into ``""``, meaning "no search").
* :func:`parse_query` reads that expression back as a flat list of :class:`Term` and operator
  strings; :func:`build_tree` gives it FTS5's precedence as a small tree (:class:`And`,
  :class:`Or`, :class:`Not`).
* :func:`route_term` decides, before anything runs, which index answers each term.
* Renderers turn a tree into one MATCH string per index (:func:`render_match`) or into a bound
  LIKE expression (:func:`render_like`); :func:`evaluate_tree` combines per-term id sets instead
  when terms are served by different routes.

The CJK bigram index reads text derived by ``repo.bigrams.cjk_bigram_text``; :meth:`Term.bigram_match`
maps a query term onto the same pieces. Both use one regex so the two sides can never disagree.
"""

from __future__ import annotations

import operator
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar, overload

from hermes_store.repo.bigrams import BIGRAM_END, CJK_RUN_RE, contains_cjk

__all__ = [
    "AND", "MAX_QUERY_CHARS", "MAX_TERMS", "NOT", "OR", "And", "Index", "Node", "Not", "Or",
    "Route", "Term", "build_tree", "evaluate_tree", "iter_terms", "parse_query", "positive_terms",
    "render_like", "render_match", "route_term", "sanitize_query",
]

AND, OR, NOT = "AND", "OR", "NOT"
OPERATORS = frozenset((AND, OR, NOT))
MAX_QUERY_CHARS = 2048
MAX_TERMS = 64

Route = Literal["word", "trigram", "bigram", "like"]
Index = Literal["word", "trigram", "bigram"]

# --- Terms ---------------------------------------------------------------------------------------


def _has_alnum(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _bigram_parts(text: str) -> list[tuple[bool, str]]:
    """Split a term into (is_cjk_run, text) parts; parts without a letter or digit add no token."""
    parts: list[tuple[bool, str]] = []
    pos = 0
    for match in CJK_RUN_RE.finditer(text):
        gap = text[pos : match.start()]
        if _has_alnum(gap):
            parts.append((False, gap.strip()))
        parts.append((True, match.group()))
        pos = match.end()
    tail = text[pos:]
    if _has_alnum(tail):
        parts.append((False, tail.strip()))
    return parts


@dataclass(frozen=True)
class Term:
    """One search term as the sanitizer wrote it.

    ``fts5`` is the literal FTS5 form (quotes and prefix star included); ``text`` is the literal
    the substring routes (trigram, LIKE, snippets) work with.
    """

    fts5: str
    text: str
    phrase: bool = False
    prefix: bool = False

    @classmethod
    def from_token(cls, token: str) -> Term:
        prefix = token.endswith("*")
        body = token[:-1] if prefix else token
        if len(body) >= 2 and body[0] == body[-1] == '"':
            return cls(token, body[1:-1].replace('""', '"'), phrase=True, prefix=prefix)
        return cls(token, body, phrase=False, prefix=prefix)

    @property
    def is_cjk(self) -> bool:
        return contains_cjk(self.text)

    @property
    def length(self) -> int:
        return len(self.text)

    @property
    def needs_literal_check(self) -> bool:
        # Both tokenizers drop "%", so an index hit alone cannot tell "100%完成" from "100完成".
        return "%" in self.text

    def word_match(self) -> str:
        return self.fts5

    def trigram_match(self) -> str:
        # No star: a substring search already covers the prefix.
        return _quote(self.text)

    def like_pattern(self) -> str:
        """``%literal%`` for ``LIKE ? ESCAPE '\\'``: never FTS syntax, wildcards escaped."""
        escaped = self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return f"%{escaped}%"

    def bigram_match(self) -> str:
        """The bigram term mapping (docs/search.md#routing): one phrase, maybe a prefix."""
        if not self.is_cjk:
            return self.fts5  # Latin runs are plain words in the derived text
        parts = _bigram_parts(self.text)
        pieces: list[str] = []
        star = self.prefix
        for i, (is_run, part) in enumerate(parts):
            followed = i < len(parts) - 1
            if not is_run:
                pieces.append(part)
                continue
            pieces.extend(map(operator.add, part, part[1:]))  # the n-1 overlapping pieces
            if followed:
                pieces.append(part[-1] + BIGRAM_END)  # glue to what follows, as the index does
            elif len(part) == 1:
                pieces.append(part)
                star = True  # matches the char inside a run ("裂X") and at its end ("裂" + mark)
        if not pieces:  # only CJK punctuation: nothing to look up, match the literal as a word
            return self.fts5
        return _quote(" ".join(pieces)) + ("*" if star else "")


# --- Sanitizer (docs/search.md#sanitizer) --------------------------------------------------------

_PHRASE_MARK = "\x00"  # control characters are spaces by then, so this cannot clash with input
_NEAR_RE = re.compile(r"(?<!\w)NEAR\(([^)]*?)(?:,\s*\d+\s*)?(?:\)|$)")
_STAR_RUN_RE = re.compile(r"\*+")
_QUOTE_CHARS = frozenset("-._%")


def _normalize_input(text: str) -> str:
    # Surrogates count as control characters: sqlite3 cannot bind a string holding one.
    return "".join(
        " " if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in text[:MAX_QUERY_CHARS]
    )


def _extract_phrases(text: str) -> tuple[str, list[str]]:
    """Replace balanced quoted phrases by a mark; an unpaired quote becomes a space."""
    phrases: list[str] = []
    out: list[str] = []
    pos = 0
    while (start := text.find('"', pos)) >= 0:
        end = text.find('"', start + 1)
        if end < 0:
            out.append(text[pos:start] + " ")
            pos = start + 1
            break
        stop = end + 2 if text.startswith("*", end + 1) else end + 1
        out.append(text[pos:start])
        if _has_alnum(text[start + 1 : end]):
            phrases.append(text[start:stop])
            out.append(f" {_PHRASE_MARK} ")
        else:
            out.append(" ")
        pos = stop
    out.append(text[pos:])
    return "".join(out), phrases


_ALWAYS_KEPT = frozenset("_-.*" + _PHRASE_MARK)  # "*" is judged later, by its position


def _keep_char(ch: str, keep_percent: bool) -> bool:
    if ch in _ALWAYS_KEPT:
        return True
    if ch == "%":
        return keep_percent
    return unicodedata.category(ch)[0] in "LNM"


def _fix_stars(text: str) -> str:
    """Keep one ``*`` only where it ends a token right after a letter, digit or ``_``."""

    def repl(match: re.Match[str]) -> str:
        start, end = match.span()
        after_word = start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_")
        at_end = end == len(text) or text[end].isspace()
        return "*" if after_word and at_end else " "

    return _STAR_RUN_RE.sub(repl, text)


def _token_item(token: str) -> str | None:
    """An operator, a term in FTS5 form, or None when the token carries no letter or digit."""
    token = token.strip("-.")
    if token in OPERATORS:
        return token
    if not _has_alnum(token):
        return None
    prefix = token.endswith("*")
    stem = token.rstrip("*")
    # A bare AND/OR/NOT followed by "*" would be read as an operator, so it is quoted too.
    if _QUOTE_CHARS.intersection(stem) or stem in OPERATORS:
        return f'"{stem}"' + ("*" if prefix else "")
    return token


def _tokenize(text: str, phrases: list[str]) -> list[str]:
    items: list[str] = []
    phrase_iter = iter(phrases)
    for token in text.split():
        item = next(phrase_iter) if token == _PHRASE_MARK else _token_item(token)
        if item is not None:
            items.append(item)
    return items


def _is_op(item: object) -> bool:
    return isinstance(item, str) and item in OPERATORS


# A query item: a token (str) while sanitizing, a Term or an operator once parsed.
_Item = TypeVar("_Item", str, "Term | str")


def _strip_trailing_ops(items: list[_Item]) -> list[_Item]:
    while items and _is_op(items[-1]):
        items.pop()
    return items


def _clean_operators(items: list[_Item]) -> list[_Item]:
    """Step 6 of docs/search.md#sanitizer, until stable; on strings and :class:`Term` lists."""
    while True:
        out: list[_Item] = []
        for item in items:
            if out and _is_op(item) and _is_op(out[-1]):
                out[-1] = item  # a run of operators keeps its last one
            else:
                out.append(item)
        if out and out[0] in (AND, OR):
            out = out[1:]
        elif out and out[0] == NOT:
            out = out[2:]  # a pure exclusion cannot be expressed; dropping only NOT would invert
        _strip_trailing_ops(out)
        if out == items:
            return out
        items = out


def _limit_terms(items: list[str], limit: int = MAX_TERMS) -> list[str]:
    out: list[str] = []
    terms = 0
    for item in items:
        if not _is_op(item):
            terms += 1
            if terms > limit:
                break
        out.append(item)
    return _strip_trailing_ops(out)


def sanitize_query(text: str | None) -> str:
    """Total: any text → FTS5 both tokenizers accept, or ``""`` (docs/search.md#sanitizer)."""
    if not isinstance(text, str):
        return ""
    text = _normalize_input(text)
    keep_percent = contains_cjk(text)
    working, phrases = _extract_phrases(text)
    working = _NEAR_RE.sub(r" \1 ", working)
    working = "".join(ch if _keep_char(ch, keep_percent) else " " for ch in working)
    working = _fix_stars(working)
    items = _limit_terms(_clean_operators(_tokenize(working, phrases)))
    return " ".join(items)


# --- Parsing and the boolean tree (docs/search.md#query-language) --------------------------------

_ITEM_RE = re.compile(r'"[^"]*"\*?|[^\s"]+')


def parse_query(sanitized: str) -> list[Term | str]:
    """The flat list of terms and ``AND``/``OR``/``NOT`` of a :func:`sanitize_query` output."""
    return [
        tok if tok in OPERATORS else Term.from_token(tok)
        for tok in _ITEM_RE.findall(sanitized or "")
    ]


@dataclass(frozen=True)
class And:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    left: Node
    right: Node

    @property
    def children(self) -> tuple[Node, Node]:
        return (self.left, self.right)


Node = Term | And | Or | Not


def _split(items: Sequence[Term | str], op: str) -> list[list[Term | str]]:
    groups: list[list[Term | str]] = [[]]
    for item in items:
        if item == op:
            groups.append([])
        else:
            groups[-1].append(item)
    return groups


def _combine(cls: type[And] | type[Or], nodes: list[Node]) -> Node:
    if len(nodes) == 1:
        return nodes[0]
    flat: list[Node] = []
    for node in nodes:
        flat.extend(node.children if isinstance(node, cls) else (node,))
    return cls(tuple(flat))


def _terms(group: list[Term | str]) -> list[Node]:
    """A group between operators: terms only, as ``parse_query`` yields no other strings and
    ``_clean_operators`` leaves no run of operators."""
    terms: list[Node] = []
    for item in group:
        if not isinstance(item, Term):
            raise ValueError(f"operator {item!r} inside a group of terms: the query was not "
                             "cleaned by build_tree")
        terms.append(item)
    return terms


def _not_level(items: Sequence[Term | str]) -> Node:
    # NOT binds looser than juxtaposition and associates to the left: a NOT b NOT c = (a-b)-c.
    groups = [_combine(And, _terms(g)) for g in _split(items, NOT)]
    node = groups[0]
    for right in groups[1:]:
        node = Not(node, right)
    return node


def build_tree(items: Iterable[Term | str]) -> Node | None:
    """FTS5 precedence, tightest first: juxtaposition, NOT, AND, OR. ``None`` for no terms."""
    cleaned = _clean_operators(list(items))
    if not cleaned:
        return None
    ors = [
        _combine(And, [_not_level(g) for g in _split(group, AND)]) for group in _split(cleaned, OR)
    ]
    return _combine(Or, ors)


def iter_terms(tree: Node | None) -> Iterator[Term]:
    """Every term, in query order (each needs a route)."""
    if isinstance(tree, Term):
        yield tree
    elif tree is not None:
        for child in tree.children:
            yield from iter_terms(child)


def positive_terms(tree: Node | None) -> list[Term]:
    """Terms a hit can contain: everything but the right side of a NOT (for snippets)."""
    if tree is None:
        return []
    if isinstance(tree, Term):
        return [tree]
    if isinstance(tree, Not):
        return positive_terms(tree.left)
    return [t for child in tree.children for t in positive_terms(child)]


def evaluate_tree(tree: Node | None, lookup: Callable[[Term], set[int]]) -> set[int]:
    """Combine per-term id sets: ∩ for AND, ∪ for OR, − for NOT."""
    if tree is None:
        return set()
    if isinstance(tree, Term):
        return set(lookup(tree))
    if isinstance(tree, Not):
        left = evaluate_tree(tree.left, lookup)
        return left - evaluate_tree(tree.right, lookup) if left else left
    sets = (evaluate_tree(child, lookup) for child in tree.children)
    if isinstance(tree, Or):
        return set().union(*sets)
    result = next(sets)
    for other in sets:
        if not result:
            break
        result &= other
    return result


# --- Rendering -----------------------------------------------------------------------------------

_TERM_FORMS: dict[str, Callable[[Term], str]] = {
    "word": Term.word_match, "trigram": Term.trigram_match, "bigram": Term.bigram_match
}


def _render(tree: Node, leaf: Callable[[Term], str], and_: str, or_: str, not_: str) -> str:
    if isinstance(tree, Term):
        return leaf(tree)

    def sub(node: Node) -> str:
        text = _render(node, leaf, and_, or_, not_)
        return text if isinstance(node, Term) else f"({text})"

    if isinstance(tree, Not):
        return not_.format(sub(tree.left), sub(tree.right))
    joiner = and_ if isinstance(tree, And) else or_
    return joiner.join(sub(child) for child in tree.children)


def render_match(tree: Node, index: Index | str) -> str:
    """One MATCH string for ``index`` with the same meaning as the tree (explicit parentheses)."""
    leaf = _TERM_FORMS.get(index)
    if leaf is None:
        raise ValueError(f"unknown index {index!r}, expected one of {sorted(_TERM_FORMS)}")
    return _render(tree, leaf, " AND ", " OR ", "{} NOT {}")


def render_like(tree: Node, columns: Sequence[str], *, compare: str = "LIKE ?",
                false: str = "0") -> tuple[str, list[str]]:
    """A boolean SQL expression over fixed column expressions; user text only in parameters.
    ``compare`` is the operator and placeholder (PostgreSQL: ``ILIKE %s``), ``false`` the
    dialect's false literal."""
    if not columns:
        raise ValueError("render_like needs at least one column expression")
    params: list[str] = []
    term_sql = "(" + " OR ".join(f"{col} {compare} ESCAPE '\\'" for col in columns) + ")"

    def leaf(term: Term) -> str:
        params.extend([term.like_pattern()] * len(columns))
        return term_sql

    # NULL columns make LIKE NULL; coalesce so "NOT NULL" does not drop rows that lack the term.
    sql = _render(tree, leaf, " AND ", " OR ", f"{{}} AND NOT coalesce({{}}, {false})")
    # Parenthesized as a whole, so a caller can AND it with its filters without precedence traps.
    return (sql if isinstance(tree, Term) else f"({sql})"), params


# --- Routing (docs/search.md#routing) ------------------------------------------------------------


def route_term(
    term: Term,
    *,
    trigram_available: bool = True,
    bigram_ready: bool = True,
    tool_role: bool = False,
) -> Route:
    """Which index answers ``term``; decided up front, never retried on zero hits.

    ``"word"`` means the word index for rows the bigram index does not cover plus the bigram
    index for rows it does (the word index alone while the bigram index is not ready).
    """
    if tool_role:
        return "like"  # tool bodies are indexed only up to a prefix
    if not term.is_cjk:
        return "word"
    if term.length >= 3 and trigram_available:
        return "trigram"
    return "bigram" if bigram_ready else "like"  # trigram needs 3 characters per term




# --------------------------------------------------------------------------- syntaxes

# What ``-word`` means, named in one place. ``agent`` (the default of SessionDB.search_messages):
# the v11 reading, where a leading ``-`` is trimmed like other punctuation and ``-rf`` searches
# for ``rf``. ``exclusions`` (the command line): ``-word`` and ``-"a phrase"`` exclude.
SYNTAXES = ("agent", "exclusions")
_QUERY_TOKEN = re.compile(r'-?"[^"]*"\*?|\S+')
_OR = "OR"


@overload
def apply_syntax(query: str, syntax: str) -> str: ...


@overload
def apply_syntax(query: None, syntax: str) -> None: ...


@overload
def apply_syntax(query: str | None, syntax: str) -> str | None: ...


def apply_syntax(query: str | None, syntax: str) -> str | None:
    """``query`` in the library's own reading, from the reading ``syntax`` names."""
    if syntax not in SYNTAXES:
        raise ValueError(f"unknown query syntax {syntax!r}: use one of {', '.join(SYNTAXES)}")
    return with_exclusions(query) if syntax == "exclusions" and query else query


def with_exclusions(text: str) -> str:
    """The command line's ``-word`` (and ``-"a phrase"``) as the query language's ``NOT``.

    The library's sanitizer trims a leading ``-``, as the session API asks; on the command line
    a ``-`` before a letter or a quote excludes the term. Juxtaposition binds tighter than NOT,
    so each exclusion moves to the end of its ``OR`` branch (``a -b c`` is ``a c NOT b``); a
    branch made of exclusions alone cannot be expressed and is dropped. ``-1`` and a lone
    ``-`` stay words."""
    branches: list[tuple[list[str], list[str]]] = [([], [])]
    for token in _QUERY_TOKEN.findall(text):
        if token == _OR:
            branches.append(([], []))
        elif len(token) > 1 and token[0] == "-" and (token[1].isalpha() or token[1] == '"'):
            branches[-1][1].append(token[1:])
        else:
            branches[-1][0].append(token)
    parts = [" ".join(words + [f"NOT {term}" for term in excluded])
             for words, excluded in branches if words]
    return f" {_OR} ".join(parts)


def exclusions_only(text: str) -> bool:
    """Whether the query only excludes (``-borrow``, ``NOT borrow``): it then matches nothing,
    by design, and the caller says so rather than a bare "no messages match"."""
    excluded = positive = 0
    tokens = [t for t in _QUERY_TOKEN.findall(text) if t != _OR]
    after_not = False
    for token in tokens:
        if token == "NOT":
            after_not = True
            continue
        if after_not or (len(token) > 1 and token[0] == "-"
                         and (token[1].isalpha() or token[1] == '"')):
            excluded += 1
        else:
            positive += 1
        after_not = False
    return excluded > 0 and positive == 0
