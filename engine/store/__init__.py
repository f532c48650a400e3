"""The session store: the only package with SQL (SQLAlchemy 2 + Alembic, SQLite and PostgreSQL).

Modules: ``db`` (URLs, engines, migrations, schema versions), ``models`` (the tables), ``records``
(rows to :mod:`engine.core.views` records), ``invariants`` (the conversation rules, pure), ``reads``
(reads of one conversation in a session), ``door`` (:class:`Locked`, the one write door),
``rules`` (the data rules: what a read refuses as ``corrupt_row``, what the door escapes or refuses), ``sources`` (the door's import writes: source facts, imported usage, recorded compactions) and
``store`` (:class:`Store`: opening, the lock, every read and write use case) and ``fleet``
(:class:`FleetReads`: the thread list paged, sorted, searched and filtered in SQL; the fleet aggregates).
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
from .fleet import FleetAggregates, FleetReads, InvalidThreadQuery
from .invariants import CallLedger
from .reads import ConversationReader
from .rules import NUL_ESCAPE, CorruptRow, InvalidSetting, ReadOnlyDatabase
from .store import DuplicateThread, Store, ThreadLocked

__all__ = [
    "ABORTED_TEXT",
    "CallLedger",
    "ConversationReader",
    "CorruptRow",
    "DatabaseLocked",
    "DatabaseUnreachable",
    "DuplicateThread",
    "FleetAggregates",
    "FleetReads",
    "InvalidDatabaseURL",
    "InvalidSetting",
    "InvalidThreadQuery",
    "InvalidTransition",
    "Locked",
    "NUL_ESCAPE",
    "NotADatabase",
    "ReadOnlyDatabase",
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
