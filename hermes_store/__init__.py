"""hermes_store: the Hermes agent's session store on SQLAlchemy 2, Alembic and SQLite FTS5."""

from hermes_store.db.engine import open_engine
from hermes_store.db.models import Base, ChatSession, Message, StateMeta
from hermes_store.errors import HermesStoreError
from hermes_store.facade import SessionDB
from hermes_store.version import __version__

__all__ = ["Base", "ChatSession", "HermesStoreError", "Message", "SessionDB", "StateMeta",
           "open_engine", "__version__"]
