"""Helpers for the store tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import sqlalchemy as sa

from engine.store import normalize_url


def fingerprint(url: str) -> tuple:
    """Everything a write could change: the SQLite file bytes and directory, or every PostgreSQL
    table's content (call it with no Store open on a SQLite file, so the WAL is checkpointed)."""
    u = normalize_url(url)
    if u.get_backend_name() == "sqlite":
        path = Path(u.database or "")
        return (sorted(p.name for p in path.parent.iterdir()), hashlib.sha256(path.read_bytes()).hexdigest())
    engine = sa.create_engine(u)
    try:
        with engine.connect() as conn:
            tables = sorted(sa.inspect(conn).get_table_names())
            return tuple(
                (t, conn.exec_driver_sql(f'SELECT md5(coalesce(string_agg(x::text, \',\' ORDER BY x::text), \'\')) FROM "{t}" x').scalar())
                for t in tables
            )
    finally:
        engine.dispose()
