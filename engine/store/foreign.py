"""Reading another tool's SQLite database: read-only, never written.

An importer of a tool that keeps its sessions in SQLite (the OpenAI Agents SDK's ``SQLiteSession``)
names the tables and columns it needs; :func:`read_tables` opens the file with SQLite's read-only URI
(``file:…?mode=ro``; with ``immutable=1`` when the database is in WAL mode and has no ``-wal`` file,
so that no ``-wal`` / ``-shm`` file is created beside it; while the tool runs its ``-wal`` exists and
is read too), with ``PRAGMA query_only``, reads those tables in one read transaction (one
consistent snapshot while the tool keeps writing) and closes it. Nothing is created, locked for
writing, checkpointed or migrated: the file's bytes are the same afterwards.

SQL is here because only :mod:`engine.store` may speak it; the rows go back as plain dicts for the
pure parsers of :mod:`engine.importers`.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import quote

from .db import StoreError

__all__ = ["ForeignDatabaseError", "SQLITE_MAGIC", "TableRequest", "read_tables"]

#: the first 16 bytes of every SQLite 3 database file
SQLITE_MAGIC = b"SQLite format 3\x00"

#: (columns, order-by column) to read from one table
TableRequest = tuple[tuple[str, ...], str | None]


class ForeignDatabaseError(StoreError):
    """Another tool's database could not be read (not SQLite, corrupt, locked, missing tables)."""

    code = "foreign_database"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _flags(path: Path, header: bytes) -> tuple[str, ...]:
    """How to open: ``mode=ro``, or ``immutable=1`` for a WAL database with no ``-wal`` file (nothing
    left to read there, and a read-only connection would create ``-wal`` / ``-shm`` files beside it:
    never tried then, so a damaged one is refused without a file written beside the source)."""
    wal_mode = len(header) > 19 and header[18] == 2 and header[19] == 2
    if wal_mode and not Path(str(path) + "-wal").exists():
        return ("mode=ro&immutable=1",)
    return ("mode=ro", "mode=ro&immutable=1")


def _connect(path: Path, header: bytes) -> sqlite3.Connection:
    base = "file:" + quote(str(path.resolve()), safe="/:")
    last: Exception | None = None
    for flags in _flags(path, header):
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(f"{base}?{flags}", uri=True, check_same_thread=False, timeout=2.0)
            conn.text_factory = lambda b: b.decode("utf-8", errors="replace")  # a bad byte is not a lost row
            conn.execute("PRAGMA query_only = 1")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.DatabaseError as exc:  # OperationalError included
            last = exc
            if conn is not None:
                conn.close()
    raise ForeignDatabaseError(f"cannot open read-only ({last})")


def read_tables(path: str | Path,
                pick: Callable[[Mapping[str, tuple[str, ...]]], Mapping[str, TableRequest]]) -> dict[str, list[dict[str, Any]]]:
    """Read the tables ``pick`` asks for, given the database's schema (table → its columns).

    Returns table → rows (dicts of the requested columns that exist, ordered by the order-by
    column when the table has it). Raises :class:`ForeignDatabaseError` when the file is not a
    readable SQLite database."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ForeignDatabaseError(f"{p}: no such file")
    with p.open("rb") as fh:
        header = fh.read(100)
    if not header.startswith(SQLITE_MAGIC):
        raise ForeignDatabaseError(f"{p}: not a SQLite database")
    try:
        with closing(_connect(p, header)) as conn:
            conn.execute("BEGIN")  # one snapshot for every table read below
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            schema = {n: tuple(r[1] for r in conn.execute(f"PRAGMA table_info({_ident(n)})")) for n in names}
            out: dict[str, list[dict[str, Any]]] = {}
            for table, (columns, order) in pick(schema).items():
                have = schema.get(table)
                if have is None:
                    continue
                cols = [c for c in columns if c in have]
                if not cols:
                    continue
                sql = f"SELECT {', '.join(_ident(c) for c in cols)} FROM {_ident(table)}"
                if order and order in have:
                    sql += f" ORDER BY {_ident(order)}"
                out[table] = [dict(zip(cols, row)) for row in conn.execute(sql)]
            conn.rollback()
            return out
    except sqlite3.DatabaseError as exc:
        raise ForeignDatabaseError(f"{p}: {exc}") from exc
