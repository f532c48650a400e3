"""The session store: the only package with SQL (SQLAlchemy 2 + Alembic, SQLite and PostgreSQL)."""

from .db import (
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
from .store import DuplicateThread, InvalidTransition, Locked, NewOffload, Store

__all__ = [
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
    "display_url",
    "migrate",
    "normalize_url",
]
