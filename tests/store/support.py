"""Helpers for the store tests."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timezone
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


def _tables(engine: sa.Engine) -> tuple[sa.Table, sa.Table]:
    meta = sa.MetaData()
    return sa.Table("conversations", meta, autoload_with=engine), sa.Table("messages", meta, autoload_with=engine)


def conversation_counters(engine: sa.Engine, key: str) -> tuple[int, int | None, int]:
    """(``message_count``, ``last_message_id``, rows in ``messages``) of a thread, read raw."""
    conversations, messages = _tables(engine)
    with engine.connect() as conn:
        cid, count, last = conn.execute(
            sa.select(conversations.c.id, conversations.c.message_count, conversations.c.last_message_id).where(conversations.c.thread_key == key)
        ).one()
        rows = conn.execute(sa.select(sa.func.count()).select_from(messages).where(messages.c.conversation_id == cid)).scalar_one()
    return count, last, rows


def insert_legacy_rows(engine: sa.Engine, key: str, rows: list[dict]) -> list[int]:
    """Insert message rows the way legacy data (or another program writing SQL directly) would
    arrive: raw SQLAlchemy Core, bypassing the write door and its invariants, so a test can have
    an orphan tool result or a call answered twice in the database. Each row is a dict with
    ``role`` and ``content`` and optionally ``tool_calls`` (list of {id, name, arguments}),
    ``tool_call_id``, ``name``. Keeps ``message_count`` and ``last_message_id``. Returns the ids."""
    conversations, messages = _tables(engine)
    now = datetime.now(UTC)
    ids: list[int] = []
    with engine.begin() as conn:
        cid = conn.execute(sa.select(conversations.c.id).where(conversations.c.thread_key == key)).scalar_one()
        for row in rows:
            values = {"conversation_id": cid, "tool_calls": None, "tool_call_id": None, "name": None, "metadata": None, "run_id": None, "created_at": now, **row}
            ids.append(conn.execute(sa.insert(messages).values(**values).returning(messages.c.id)).scalar_one())
        if ids:
            conn.execute(
                sa.update(conversations)
                .where(conversations.c.id == cid)
                .values(message_count=conversations.c.message_count + len(ids), last_message_id=ids[-1], updated_at=now)
            )
    return ids
