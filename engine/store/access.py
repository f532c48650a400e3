"""What the database role of a store may do (issue 23: roles on a shared store).

A PostgreSQL role with SELECT only (the ``viewer`` of docs/roles.md) opens the store read-only:
every write is refused by the engine with ``read_only`` and the words of :func:`read_only_words`
before the database would answer with a raw permission error. The ``operator`` role needs INSERT
and UPDATE on the tables an operator action writes (and no DELETE, no DDL).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

#: what every operator action writes: (table, privilege)
WRITE_PRIVILEGES: tuple[tuple[str, str], ...] = (
    ("conversations", "UPDATE"),
    ("compaction_state", "INSERT"),
    ("compaction_state", "UPDATE"),
    ("compaction_history", "INSERT"),
    ("compaction_events", "INSERT"),
    ("audit_log", "INSERT"),
)

READ_ONLY_WORDS = {
    "role": "read-only: your database role cannot write",
    "forced": "read-only: opened with --read-only",
    "file": "read-only: the database file cannot be written",
}


def read_only_words(reason: str | None) -> str:
    """Why a store is read-only, in the words the inspector's tooltips and header use."""
    return READ_ONLY_WORDS.get(reason or "file", READ_ONLY_WORDS["file"])


def role_can_write(engine: Engine) -> bool:
    """True when the PostgreSQL role this engine logs in as holds every privilege of
    :data:`WRITE_PRIVILEGES` (asked with ``has_table_privilege``; an unanswerable question counts
    as writable: the database still refuses what it must)."""
    checks = " AND ".join(f"has_table_privilege('{t}', '{p}')" for t, p in WRITE_PRIVILEGES)
    try:
        with engine.connect() as conn:
            return bool(conn.execute(text(f"SELECT {checks}")).scalar())
    except SQLAlchemyError:
        return True
