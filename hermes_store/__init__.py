"""hermes_store: the Hermes agent's session store on SQLAlchemy 2, Alembic and SQLite FTS5."""

from .engine import open_engine
from .errors import HermesStoreError
from .facade import SessionDB
from .models import Base, ChatSession, Message, StateMeta

__version__ = "0.1.0"

__all__ = ["Base", "ChatSession", "HermesStoreError", "Message", "SessionDB", "StateMeta",
           "open_engine", "__version__"]
