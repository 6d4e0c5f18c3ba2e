"""Every session carries its lineage root, so lineage walks can filter on it.

``sessions.root_session_id`` holds the topmost ancestor reached by parent links (the session
itself when it has no parent, or its parent row is gone). Each recursive lineage walk then says
``root_session_id = :root`` in its anchor and its recursive member, and whole-store walks join
each step on the root. A distributed engine that shards ``sessions`` by this column (Citus:
"recursive CTEs are only supported when they contain a filter on the distribution column")
answers a walk on one shard; on one server the filter narrows each step to one tree through
``idx_sessions_root (root_session_id, parent_session_id)``.

The library's write units keep the column right (create with a parent, relinks, deletes that
detach children, imports, copies). Other programs write ``sessions`` too (on SQLite the
agent inserts its rows itself), so triggers give their rows a root: an insert takes its
parent's root; a relink moves the row (and on SQLite its children: no CTE is allowed in a
trigger body there). A Citus store drops the PostgreSQL trigger when it distributes the tables.

The backfill walks every tree from its top in one recursive statement and writes the roots in
batches; sessions in a parent cycle (damaged data) carry their own id.

Revision ID: 0023_sessions_carry_lineage_root
Revises: 0022_derived_names_of_our_own
"""

import sqlalchemy as sa
from alembic import op

revision = "0023_sessions_carry_lineage_root"
down_revision = "0022_derived_names_of_our_own"
branch_labels = None
depends_on = None

MAX_DEPTH = 100
BATCH = 1000

WALK = f"""WITH RECURSIVE walk(id, root_id, depth) AS (
    SELECT s.id, s.id, 0 FROM sessions AS s
    WHERE s.parent_session_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = s.parent_session_id)
    UNION ALL
    SELECT c.id, w.root_id, w.depth + 1
    FROM walk AS w JOIN sessions AS c ON c.parent_session_id = w.id
    WHERE w.depth < {MAX_DEPTH}
)
SELECT id, MIN(root_id) FROM walk GROUP BY id"""
SET_ROOT = "UPDATE sessions SET root_session_id = :root WHERE id = :id"
OWN_ROOT = "UPDATE sessions SET root_session_id = id WHERE root_session_id IS NULL"
INDEX = "CREATE INDEX IF NOT EXISTS idx_sessions_root ON sessions (root_session_id, parent_session_id)"

_PARENT_ROOT = ("(SELECT COALESCE(p.root_session_id, p.id) FROM sessions AS p "
                "WHERE p.id = new.parent_session_id)")
SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER hs_sessions_root_ai AFTER INSERT ON sessions
WHEN new.root_session_id IS NULL BEGIN
    UPDATE sessions SET root_session_id = COALESCE({_PARENT_ROOT}, new.id) WHERE id = new.id;
END""",
    f"""CREATE TRIGGER hs_sessions_root_au AFTER UPDATE OF parent_session_id ON sessions
WHEN new.parent_session_id IS NOT old.parent_session_id BEGIN
    UPDATE sessions SET root_session_id = COALESCE({_PARENT_ROOT}, new.id)
    WHERE id = new.id OR (parent_session_id = new.id AND id <> new.id);
END""",
]

# PostgreSQL: the same for rows other programs write (psql, loaders); a row's own root only,
# the write units move subtrees.
PG_ROOT_FUNCTION = """CREATE FUNCTION hs_sessions_root() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.root_session_id IS NOT NULL THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND (NEW.parent_session_id IS NOT DISTINCT FROM OLD.parent_session_id
                             OR NEW.root_session_id IS DISTINCT FROM OLD.root_session_id) THEN
        RETURN NEW;
    END IF;
    NEW.root_session_id := COALESCE((SELECT COALESCE(p.root_session_id, p.id) FROM sessions AS p
                                     WHERE p.id = NEW.parent_session_id), NEW.id);
    RETURN NEW;
END $$"""
PG_ROOT_TRIGGER = """CREATE TRIGGER hs_sessions_root BEFORE INSERT OR UPDATE OF parent_session_id
ON sessions FOR EACH ROW EXECUTE FUNCTION hs_sessions_root()"""


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    have = {c["name"] for c in sa.inspect(bind).get_columns("sessions")}
    if "root_session_id" not in have:
        kind = 'TEXT COLLATE "C"' if postgres else "TEXT"
        op.execute(f"ALTER TABLE sessions ADD COLUMN root_session_id {kind}")
    roots = [{"id": row[0], "root": row[1]} for row in bind.exec_driver_sql(WALK)]
    for start in range(0, len(roots), BATCH):
        bind.execute(sa.text(SET_ROOT), roots[start:start + BATCH])
    op.execute(OWN_ROOT)
    op.execute(INDEX)
    for statement in ([PG_ROOT_FUNCTION, PG_ROOT_TRIGGER] if postgres else SQLITE_TRIGGERS):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS hs_sessions_root ON sessions")
        op.execute("DROP FUNCTION IF EXISTS hs_sessions_root()")
    else:
        op.execute("DROP TRIGGER IF EXISTS hs_sessions_root_au")
        op.execute("DROP TRIGGER IF EXISTS hs_sessions_root_ai")
    op.execute("DROP INDEX IF EXISTS idx_sessions_root")
    op.execute("ALTER TABLE sessions DROP COLUMN root_session_id")
