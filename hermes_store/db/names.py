"""The names of our derived objects: one rule, ``hs_`` + a noun, kept here and nowhere else.

The agent shares ``state.db`` with us and creates its search objects by name on every open
(``CREATE … IF NOT EXISTS messages_fts …``); a name it finds taken it keeps as it is, whatever the
object is. Two programs giving one name two meanings is how an adopted file broke: the agent's
CJK triggers wrote into our bigram index by its name, and its recovery path dropped our triggers
because they carried its names. So every table, view, trigger, index, column, function and
``state_meta`` key we derive takes a name under :data:`PREFIX`, which no agent release uses
(docs/mixed-fleets.md lists every name of the agent's schemas 1-31, and tests/test_names.py holds
the two sets apart). The agent, finding its own names absent, builds its own objects beside ours;
what that costs is in docs/mixed-fleets.md.

Revisions never import this module (they are history); revision 0022 spells the same names.
"""

from __future__ import annotations

PREFIX = "hs_"


def ours(noun: str) -> str:
    """The name of our object ``noun``."""
    return PREFIX + noun


def is_ours(name: str | None) -> bool:
    return bool(name) and str(name).startswith(PREFIX)


# --------------------------------------------------------------------------- SQLite: views

SEARCH_TEXT = ours("search_text")          # the text of every message (multimodal reduced)
BACKFILL_WINDOW = ours("backfill_window")  # the (P, H] window of an unfinished backfill
WORD_SOURCE = ours("fts_src")              # what the word index holds
SEARCH_SCOPE = ours("search_scope")        # rows the trigram and bigram indexes cover
TRIGRAM_SOURCE = ours("fts_trigram_src")   # what the trigram index holds

# --------------------------------------------------------------------------- SQLite: tables

# The text of multimodal (JSON-part) messages, derived once per write so that the search views
# read plain columns: FTS5's own 'rebuild' and 'integrity-check' cannot scan a view using json_each.
PART_TEXT = ours("part_text")
WORD_INDEX = ours("fts")
TRIGRAM_INDEX = ours("fts_trigram")
CJK_SIDE = ours("cjk")
CJK_PENDING = ours("cjk_pending")
CJK_INDEX = ours("fts_cjk")
# Inline indexes of an adopted legacy file, renamed aside until the backfill has drained them.
RETIRED_WORD_INDEX = ours("fts_old")
RETIRED_TRIGRAM_INDEX = ours("fts_trigram_old")
RETIRED_CJK_INDEX = ours("fts_cjk_old")

FTS_INDEXES = (WORD_INDEX, TRIGRAM_INDEX, CJK_INDEX)
RETIRED_FTS_INDEXES = (RETIRED_WORD_INDEX, RETIRED_TRIGRAM_INDEX, RETIRED_CJK_INDEX)

# --------------------------------------------------------------------------- SQLite: triggers

PART_TEXT_AI = ours("part_text_ai")
PART_TEXT_AU = ours("part_text_au")
PART_TEXT_AD = ours("part_text_ad")
WORD_AI = ours("fts_ai")
WORD_BD = ours("fts_bd")
WORD_BU = ours("fts_bu")
WORD_AU = ours("fts_au")
TRIGRAM_AI = ours("fts_trigram_ai")
TRIGRAM_BD = ours("fts_trigram_bd")
TRIGRAM_BU = ours("fts_trigram_bu")
TRIGRAM_AU = ours("fts_trigram_au")
CJK_AI = ours("cjk_ai")
CJK_AD = ours("cjk_ad")
CJK_AU = ours("cjk_au")
CJK_PENDING_AI = ours("cjk_pending_ai")
CJK_PENDING_AU = ours("cjk_pending_au")
CJK_MESSAGES_AD = ours("cjk_ad_messages")
# The lineage root of rows other programs insert or relink (revision 0023).
SESSION_ROOT_AI = ours("sessions_root_ai")
SESSION_ROOT_AU = ours("sessions_root_au")

# --------------------------------------------------------------------------- state_meta keys

# The backfill window's markers: H, the highest id the backfill covers, and P, how far it got.
# The agent gates its own triggers on keys of its own (``fts_rebuild_high_water`` …), so ours
# must not be those: a window of ours would stop its triggers and its window ours.
BACKFILL_HIGH_WATER = ours("backfill_high_water")
BACKFILL_PROGRESS = ours("backfill_progress")
# '0' while no row of the CJK bigram index holds a Latin run glued to CJK (revision 0025): Latin
# terms then need only the word index (docs/search.md#the-row-split).
CJK_GLUED_LATIN = ours("cjk_glued_latin")

# --------------------------------------------------------------------------- PostgreSQL

PG_SEARCH_CONFIG = ours("search")
PG_TEXT_FUNCTION = ours("search_text")
PG_WORD_TEXT_FUNCTION = ours("word_text")
PG_WORD_COLUMN = ours("search_words")
PG_CJK_COLUMN = ours("search_cjk")
PG_WORD_INDEX = ours("idx_messages_words")
PG_TRIGRAM_INDEX = ours("idx_messages_trgm")
PG_CJK_INDEX = ours("idx_messages_cjk")
PG_PENDING_INDEX = ours("idx_messages_cjk_pending")
PG_ROOT_FUNCTION = ours("sessions_root")
PG_ROOT_TRIGGER = ours("sessions_root")
