"""The facade: ``SessionDB``, the agent's store API as a thin layer over the repositories.

``session_db`` holds the class (lifecycle, the v11 methods, and the binding of every other
method); ``units`` the three ways a method runs (read, write unit, best-effort write); the
other modules hold the v21 methods of one noun each, as functions taking the ``SessionDB``.
"""

from hermes_store.facade.session_db import SessionDB

__all__ = ["SessionDB"]
