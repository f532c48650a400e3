"""Migrations: a fresh database reaches head, a second run is a no-op, and the migrated schema
is exactly what the models declare (Alembic autogenerate finds no difference)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from engine.core.messages import user
from engine.store import Store, migrate, normalize_url
from engine.store.db import code_head
from engine.store.models import Base
from tests import door_ops

from .support import fingerprint


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(normalize_url(url))


def test_migrate_creates_the_schema_at_head(fresh_db: str) -> None:
    assert migrate(fresh_db) == (None, code_head())
    engine = _engine(fresh_db)
    try:
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == code_head()
            assert set(sa.inspect(conn).get_table_names()) == set(Base.metadata.tables) | {"alembic_version"}
    finally:
        engine.dispose()
    store = Store.open(fresh_db)
    try:
        assert store.schema.status == "current" and store.writable
    finally:
        store.close()


def test_migrate_twice_is_a_no_op(fresh_db: str) -> None:
    migrate(fresh_db)
    store = Store.open(fresh_db)
    store.create_conversation("kept")
    door_ops.append_message(store, "kept", user("still here"))
    store.close()
    before = fingerprint(fresh_db)
    assert migrate(fresh_db) == (code_head(), code_head())
    assert fingerprint(fresh_db) == before


def test_migrated_schema_matches_the_models(fresh_db: str) -> None:
    migrate(fresh_db)
    engine = _engine(fresh_db)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            assert compare_metadata(ctx, Base.metadata) == []
    finally:
        engine.dispose()


def test_the_comparison_would_see_a_drift(fresh_db: str) -> None:
    """Guard for the test above: a column the models do not declare is reported."""
    migrate(fresh_db)
    engine = _engine(fresh_db)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE messages ADD COLUMN stray_column INTEGER")
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert [(d[0], d[3].name) for d in diffs] == [("remove_column", "stray_column")]
    finally:
        engine.dispose()


def test_migrated_sqlite_file_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    migrate(str(path))
    engine = _engine(str(path))
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()
