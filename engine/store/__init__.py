"""The session store: the only package with SQL (SQLAlchemy 2 + Alembic, SQLite and PostgreSQL).

Modules: ``db`` (URLs, engines, migrations, schema versions), ``models`` (the tables), ``records``
(rows to :mod:`engine.views` records), ``invariants`` (the conversation rules, pure), ``reads``
(reads of one conversation in a session), ``door`` (:class:`Locked`, the one write door),
``sources`` (the door's import writes: source facts, imported usage, recorded compactions) and
``store`` (:class:`Store`: opening, the lock, every read and write use case).
"""

from .db import (
    DatabaseLocked,
    DatabaseUnreachable,
    InvalidDatabaseURL,
    NotADatabase,
    SchemaMissing,
    SchemaOutdated,
    SchemaTooNew,
    StoreError,
    display_url,
    migrate,
    normalize_url,
)
from .door import ABORTED_TEXT, InvalidTransition, Locked
from .invariants import CallLedger
from .reads import ConversationReader
from .store import DuplicateThread, Store, ThreadLocked

__all__ = [
    "ABORTED_TEXT",
    "CallLedger",
    "ConversationReader",
    "DatabaseLocked",
    "DatabaseUnreachable",
    "DuplicateThread",
    "InvalidDatabaseURL",
    "InvalidTransition",
    "Locked",
    "NotADatabase",
    "SchemaMissing",
    "SchemaOutdated",
    "SchemaTooNew",
    "Store",
    "StoreError",
    "ThreadLocked",
    "display_url",
    "migrate",
    "normalize_url",
]
