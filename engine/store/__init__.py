"""The session store: the only package with SQL (SQLAlchemy 2 + Alembic, SQLite and PostgreSQL)."""

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
from .store import ABORTED_TEXT, DuplicateThread, InvalidTransition, Locked, NewOffload, Store, ThreadLocked

__all__ = [
    "ABORTED_TEXT",
    "DatabaseLocked",
    "DatabaseUnreachable",
    "DuplicateThread",
    "InvalidDatabaseURL",
    "InvalidTransition",
    "Locked",
    "NewOffload",
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
