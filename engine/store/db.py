"""Connecting to the session database: URL handling, SQLite pragmas, schema checks, migrations.

SQLite is the embedded default; PostgreSQL is the shared deployment. Errors the user can cause
(bad URL, unreachable server, a file that is not a database, a schema from another version) are
turned into one-line :class:`StoreError` subclasses; passwords never appear in messages.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError, SQLAlchemyError

from ..core.errors import EngineError
from .rules import CorruptRow, tolerant_json_loads


class StoreError(EngineError):
    code = "store_error"


class InvalidDatabaseURL(StoreError):
    code = "invalid_db_url"


class DatabaseUnreachable(StoreError):
    code = "db_unreachable"


class NotADatabase(StoreError):
    code = "not_a_database"


class DatabaseLocked(StoreError):
    """Another writer holds the lock we need (PostgreSQL row lock, SQLite write lock)."""

    code = "db_locked"


class SchemaMissing(StoreError):
    code = "schema_missing"


class SchemaOutdated(StoreError):
    code = "schema_outdated"


class SchemaTooNew(StoreError):
    code = "schema_too_new"


SchemaStatus = Literal["current", "outdated", "missing", "too_new", "unstamped"]


def _migrations_dir() -> str:
    return str(resources.files("engine.store") / "migrations")


# Alembic is imported where it is used (about 11 MB and a fifth of the import time): a process that
# only reads a database another process opened (engine.snapshots' stream worker) never loads it.


def _alembic_config() -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", _migrations_dir())
    return cfg


@functools.lru_cache(maxsize=1)
def _revisions() -> tuple[tuple[str, ...], frozenset[str]]:
    """The heads and every revision of the migrations this program ships: read from its files
    once per process (Alembic loads each one as a module: ~5 ms an open otherwise)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config())
    return tuple(script.get_heads()), frozenset(rev.revision for rev in script.walk_revisions())


def code_head() -> str:
    heads = _revisions()[0]
    if len(heads) != 1:  # pragma: no cover - a packaging mistake
        raise StoreError(f"migrations have {len(heads)} heads; expected exactly one")
    return heads[0]


def normalize_url(url_or_path: str) -> URL:
    """Accept a SQLAlchemy URL or a plain SQLite file path; return a parsed URL.

    ``postgresql://`` is routed to psycopg 3 (the driver we ship)."""
    raw = (url_or_path or "").strip()
    if not raw:
        raise InvalidDatabaseURL("empty database URL")
    if "://" not in raw:
        raw = "sqlite:///" + str(Path(raw).expanduser().absolute())
    try:
        url = make_url(raw)
    except ArgumentError:
        raise InvalidDatabaseURL(f"not a database URL: {raw.split('@')[-1]!r}") from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        raise InvalidDatabaseURL(f"unsupported database {url.get_backend_name()!r} (use sqlite or postgresql)")
    return url


def display_url(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _sqlite_path(url: URL) -> str | None:
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


def sqlite_read_only(url: URL) -> bool:
    """True for an existing SQLite file this process may not write (the file, or its directory,
    which SQLite needs for its journal): the store then opens it read-only and writes nothing."""
    path = _sqlite_path(url) if url.get_backend_name() == "sqlite" else None
    if path is None or not Path(path).is_file():
        return False
    parent = Path(path).parent
    # the permission bits as well as access(): root may write a chmod 444 file, but it is meant read-only
    no_bits = not (os.stat(path).st_mode & 0o222) or not (os.stat(parent).st_mode & 0o222)
    return no_bits or not os.access(path, os.W_OK) or not os.access(parent, os.W_OK)


def _read_only_uri(path: str) -> str:
    """The SQLite URI of a read-only open: ``mode=ro``; also ``immutable=1`` when no write-ahead
    log is beside the file (nothing can be pending, and SQLite then needs no ``-shm`` either)."""
    uri = "file:" + quote(str(Path(path).absolute())) + "?mode=ro"
    return uri if Path(path + "-wal").exists() else uri + "&immutable=1"


def create_db_engine(url: URL, *, read_only: bool = False) -> Engine:
    """An Engine with the per-backend settings the store relies on (``read_only``: a SQLite file
    opened with ``mode=ro``, see :func:`sqlite_read_only`)."""
    try:
        if url.get_backend_name() == "sqlite":
            args: dict = {"timeout": 60, "check_same_thread": False}
            if read_only and _sqlite_path(url) is not None:
                uri = _read_only_uri(_sqlite_path(url))  # type: ignore[arg-type]
                engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, **args),
                                       json_deserializer=tolerant_json_loads)
            else:
                engine = create_engine(url, connect_args=args, json_deserializer=tolerant_json_loads)
            _install_sqlite_hooks(engine)
        else:
            engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5, connect_args={"connect_timeout": 5},
                                   json_deserializer=tolerant_json_loads)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:  # ImportError: a driver we do not ship
        raise InvalidDatabaseURL(f"cannot use {display_url(url)}: {exc}") from None
    return engine


_SQLITE_BUSY_TIMEOUT_MS = 60000
#: PostgreSQL lock_not_available (NOWAIT); SQLite SQLITE_BUSY
_LOCK_SQLSTATE = "55P03"


def _install_sqlite_hooks(engine: Engine) -> None:
    """Foreign keys, and transactions we control: ``BEGIN IMMEDIATE`` for writers.

    On SQLite ``SELECT ... FOR UPDATE`` renders nothing; the conversation lock is an immediate
    write transaction, requested with ``execution_options(sqlite_begin="IMMEDIATE")``.
    Connecting writes nothing: WAL mode is persistent in the file and set once by :func:`migrate`."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # pragma: no cover - exercised by every test
        dbapi_conn.isolation_level = None  # let SQLAlchemy's begin hook emit BEGIN itself
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
        # WAL file (set by migrate): a commit is durable across an application crash once it returns;
        # only an OS crash or power loss can undo the last commits, never corrupt (docs/architecture.md)
        mode = cur.execute("PRAGMA journal_mode").fetchone()
        if mode is not None and str(mode[0]).lower() == "wal":
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()
        _record.info["busy_timeout"] = _SQLITE_BUSY_TIMEOUT_MS

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # pragma: no cover - exercised by every test
        opts = conn.get_execution_options()
        timeout = 0 if opts.get("sqlite_nowait") else _SQLITE_BUSY_TIMEOUT_MS  # nowait: fail at once
        if conn.info.get("busy_timeout") != timeout:
            driver_execute(conn, f"PRAGMA busy_timeout={timeout}")
            conn.info["busy_timeout"] = timeout
        driver_execute(conn, _BEGIN.get(opts.get("sqlite_begin", "DEFERRED")) or f"BEGIN {opts.get('sqlite_begin')}")


_BEGIN = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")}


def driver_execute(conn: Connection, sql: str) -> None:
    """Run ``sql`` (a statement without parameters or rows: ``BEGIN``, a ``PRAGMA`` setting) on the
    driver's own connection, not through a Core execution (some 30 µs of Python each; a write
    transaction of a model step begins with one). The connection's ``before_cursor_execute``
    listeners still see it (statement counters, tests), and a driver error is raised as Core would
    raise it (:class:`sqlalchemy.exc.DBAPIError` and its subclasses, which
    :func:`translate_error` reads)."""
    if conn._has_events or conn.engine._has_events:
        conn.dispatch.before_cursor_execute(conn, None, sql, (), None, False)
    dbapi = conn.dialect.loaded_dbapi
    try:
        # the driver's connection (the same object as the DBAPI one for pysqlite; a connection
        # detached from the pool, the quick read's one lent to the door, has no pool record to name it)
        (conn.connection.driver_connection or conn.connection.dbapi_connection).execute(sql)  # type: ignore[union-attr]
    except dbapi.Error as exc:
        raise DBAPIError.instance(sql, (), exc, dbapi.Error, dialect=conn.dialect) from exc


def translate_error(exc: BaseException, url: URL) -> EngineError:
    """A one-line, password-free error for a DB failure the user can act on."""
    where = display_url(url)
    msg = str(getattr(exc, "orig", exc) or exc).strip().splitlines()[0] if str(exc) else type(exc).__name__
    low = msg.lower()
    if "could not decode to utf-8" in low:  # sqlite3: a text value that is not UTF-8
        found = re.search(r"column '([^']*)'", msg)
        return CorruptRow(None, None, found.group(1) if found else None, "text that is not valid UTF-8")
    if getattr(getattr(exc, "orig", None), "sqlstate", None) == _LOCK_SQLSTATE or "database is locked" in low:
        return DatabaseLocked(f"{where} is locked by another writer: {msg}")
    if "file is not a database" in low or "file is encrypted" in low:
        return NotADatabase(f"{where} is not a SQLite database")
    if "unable to open database" in low:
        return DatabaseUnreachable(f"cannot open {where}: {msg}")
    if isinstance(exc, OperationalError) or "connection" in low or "could not" in low:
        return DatabaseUnreachable(f"cannot connect to {where}: {msg}")
    return StoreError(f"database error on {where}: {msg}")


@dataclass(frozen=True)
class SchemaInfo:
    status: SchemaStatus
    current: str | None
    head: str

    def problem(self, url: URL) -> StoreError | None:
        where = display_url(url)
        if self.status == "missing":
            return SchemaMissing(f"{where} has no compaction schema; create it with: compaction migrate --db '{where}'")
        if self.status == "outdated":
            return SchemaOutdated(
                f"{where} has schema revision {self.current}, this version needs {self.head}; "
                f"upgrade it with: compaction migrate --db '{where}'"
            )
        if self.status == "unstamped":
            return SchemaOutdated(
                f"{where} has compaction tables but no schema version stamp (not created by `compaction migrate`); "
                "refusing to guess its version: back it up and migrate a new database"
            )
        if self.status == "too_new":
            return SchemaTooNew(
                f"{where} has schema revision {self.current}, newer than this program knows ({self.head}); "
                "refusing to write: upgrade compaction-inspector"
            )
        return None


def schema_info(engine: Engine) -> SchemaInfo:
    with engine.connect() as conn:
        return _schema_of(conn)


def _schema_of(conn: Connection) -> SchemaInfo:
    """The schema revision the database is stamped with, against this program's (one query for
    the stamp, one for the stamp table; the table names only when there is no stamp)."""
    from alembic.runtime.migration import MigrationContext

    head = code_head()
    current = MigrationContext.configure(conn).get_current_revision()
    if current is None:
        status: SchemaStatus = "missing"
        if "conversations" in inspect(conn).get_table_names():
            status = "unstamped"  # our tables without a version stamp: not made by `compaction migrate`
    elif current == head:
        status = "current"
    else:
        status = "outdated" if current in _revisions()[1] else "too_new"
    return SchemaInfo(status=status, current=current, head=head)


def check_schema(engine: Engine, url: URL) -> SchemaInfo:
    """:func:`check_reachable` and :func:`schema_info` on one connection (what opening a store
    asks: one connect, three statements on a current database)."""
    return _reachable(engine, url, _schema_of)


def check_reachable(engine: Engine, url: URL) -> None:
    _reachable(engine, url, lambda conn: None)


def _reachable(engine: Engine, url: URL, then: Any) -> Any:
    """One connection: a ping (and on SQLite a read of the file's header, so a file that is not a
    database fails here), then ``then(conn)``; a driver error as :func:`translate_error`."""
    sqlite = url.get_backend_name() == "sqlite" and _sqlite_path(url) is not None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            if sqlite:
                conn.exec_driver_sql("PRAGMA schema_version").scalar()
            return then(conn)
    except (DBAPIError, SQLAlchemyError) as exc:
        raise translate_error(exc, url) from None


def ensure_sqlite_file(url: URL, *, create: bool) -> None:
    """Never create a stray empty file when the user only meant to open a database."""
    if url.get_backend_name() != "sqlite":
        return
    path = _sqlite_path(url)
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise NotADatabase(f"{path} is a directory, not a SQLite database")
    if p.exists():
        return
    if not create:
        raise DatabaseUnreachable(f"no database file at {path}; create it with: compaction migrate --db '{path}'")
    parent = p.parent
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnreachable(f"cannot create directory {parent}: {exc.strerror}") from None
    if not os.access(parent, os.W_OK):
        raise DatabaseUnreachable(f"cannot create {path}: directory is not writable")


def _enable_wal(engine: Engine, url: URL) -> None:
    """Switch a SQLite file to WAL (readers never block the writer); persistent in the file."""
    if url.get_backend_name() != "sqlite" or _sqlite_path(url) is None:
        return
    raw = engine.raw_connection()
    try:
        driver = raw.driver_connection
        if driver is None:
            raise RuntimeError(f"no SQLite connection behind the pool's connection to {url!r}")
        driver.execute("PRAGMA journal_mode=WAL")  # outside a transaction (autocommit)
    finally:
        raw.close()


def _migration_engine(url: URL) -> Engine:
    """An engine for schema changes. On SQLite its connections run with foreign keys OFF: Alembic's
    batch mode rebuilds a table by copying it and dropping the old one, and with foreign keys on,
    that DROP would cascade into every table that references it (``tool_offloads`` → ``messages``).
    The references are checked once the change is made (:func:`_check_foreign_keys`)."""
    engine = create_db_engine(url)
    if url.get_backend_name() == "sqlite":

        @event.listens_for(engine, "connect")
        def _keys_off(dbapi_conn, _record) -> None:  # pragma: no cover - exercised by every migration
            dbapi_conn.execute("PRAGMA foreign_keys=OFF")

    return engine


def _check_foreign_keys(conn) -> None:
    if conn.dialect.name == "sqlite":
        broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise StoreError(f"migration left {len(broken)} broken references (first: {tuple(broken[0])}); nothing was changed")


def _alembic(url_or_path: str, action: str, revision: str) -> tuple[str | None, str | None]:
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    url = normalize_url(url_or_path)
    ensure_sqlite_file(url, create=action == "upgrade")
    engine = _migration_engine(url)
    try:
        check_reachable(engine, url)
        info = schema_info(engine)
        if info.status in ("too_new", "unstamped"):
            raise info.problem(url)  # type: ignore[misc]
        try:
            after: str | None = info.head
            if action == "upgrade":
                if info.status != "current":
                    cfg = _alembic_config()
                    with engine.begin() as conn:
                        cfg.attributes["connection"] = conn
                        command.upgrade(cfg, revision)
                        _check_foreign_keys(conn)
                        after = MigrationContext.configure(conn).get_current_revision()
                _enable_wal(engine, url)
            else:
                cfg = _alembic_config()
                with engine.begin() as conn:
                    cfg.attributes["connection"] = conn
                    command.downgrade(cfg, revision)
                    _check_foreign_keys(conn)
                    after = MigrationContext.configure(conn).get_current_revision()
        except (DBAPIError, SQLAlchemyError) as exc:
            raise translate_error(exc, url) from None
        return info.current, after
    finally:
        engine.dispose()


def migrate(url_or_path: str, revision: str = "head") -> tuple[str | None, str]:
    """Create or upgrade the schema to ``revision`` (default: the head), in one transaction.
    Returns (before, after)."""
    before, after = _alembic(url_or_path, "upgrade", revision)
    return before, after or code_head()


def downgrade(url_or_path: str, revision: str) -> tuple[str | None, str | None]:
    """Take the schema back to ``revision`` (``base`` removes it), in one transaction; for tests
    and for going back to an older program. Returns (before, after)."""
    return _alembic(url_or_path, "downgrade", revision)
