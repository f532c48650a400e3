# Over 500 lines: every read use case of the store is one short method here, beside opening a database and the write door (Store.locked); the door, reads, fleet queries and import writes live in their own modules; the use-case write wrappers are gone (issue 24: callers open the door).
"""The session store: opening a database, the conversation row lock, and the keyset reads.

This package is the only place in the code with SQL. Callers get plain records from
:mod:`engine.core.views` and :class:`engine.core.messages.Message`, never ORM rows.

Writes: :meth:`Store.locked` opens the write door (:class:`engine.store.door.Locked`), a
transaction that holds the conversation row lock until it commits (PostgreSQL ``SELECT … FOR
UPDATE``; SQLite ``BEGIN IMMEDIATE``, which takes the database write lock) and checks the
conversation invariants. The store has no use-case write wrappers (issue 24): a caller opens the
door and calls the :class:`Locked` method (``with store.locked(key) as tx: tx.append_message(m)``);
creating a conversation and the store-wide settings are the only writes outside a conversation.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Callable, Iterator, Mapping, Sequence

from sqlalchemy import and_, bindparam, func, or_, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from ..core.errors import EngineError, ThreadNotFound
from ..core.messages import Message
from ..core.views import (
    ACTIVE_RUN_STATUSES,
    CompactionEvent,
    CompactionState,
    HistoryRecord,
    ModelRequest,
    Offload,
    PinInfo,
    RunInfo,
    Snapshot,
    SourceCompaction,
    StoredMessage,
    ThreadInfo,
)
from . import db
from .access import read_only_words, role_can_write
from .door import HEAD_COLUMNS, LedgerCache, Locked, lock_head, os_operator, session_operator
from .models import (
    CompactionEventRow,
    CompactionHistoryRow,
    CompactionStateRow,
    Conversation,
    MessagePin,
    MessageRow,
    ModelRequestRow,
    QueuedRequest,
    Run,
    Setting,
    SourceCompactionRow,
    ToolOffloadRow,
    utcnow,
)
from .reads import ConversationReader, HeldLease, busy_reasons, corrupt_from as _corrupt_from, database_errors, imported_facts, lend_held
from .records import (
    MESSAGE_COLUMNS,
    MESSAGE_TEXT_COLUMNS,
    aware,
    build_message,
    event_record,
    history_record,
    message_from_text_row,
    model_request_record,
    offload_record,
    run_record,
    source_compaction_record,
    state_record,
)
from .rules import CorruptRow, InvalidSetting, ReadOnlyDatabase, as_int, check_json, checked, clean_text

log = logging.getLogger(__name__)
#: the created / updated time of a thread whose row cannot be read (``ThreadInfo.error``)
_EPOCH = datetime.fromtimestamp(0, UTC)
#: the bounded text columns of a conversation (models.py; PostgreSQL enforces them, SQLite does not)
THREAD_KEY_MAX = 200
_CONVERSATION_LIMITS = {"title": 500, "agent": 200, "provider": 100, "model": 200}


def check_thread_key(key: Any) -> str:
    """A thread key as the store accepts it on both backends (``invalid_thread_key`` otherwise)."""
    if not key or not isinstance(key, str):
        raise EngineError("thread key must be a non-empty string", code="invalid_thread_key")
    return clean_text(key, "thread key", code="invalid_thread_key", limit=THREAD_KEY_MAX)


def _page_statement(text: bool, after: bool, before: bool, backward: bool) -> Any:
    """A timeline page of the thread ``:key``: the message columns (SQLite: JSON as text, decoded
    only when not empty; psycopg decodes JSON itself), then conversation id, created time and the
    offload's SHA-256 of each message."""
    cid = select(Conversation.id).where(Conversation.thread_key == bindparam("key")).scalar_subquery()
    columns = (*(MESSAGE_TEXT_COLUMNS if text else MESSAGE_COLUMNS), MessageRow.conversation_id, MessageRow.created_at, ToolOffloadRow.sha256)
    q = select(*columns).outerjoin(
        ToolOffloadRow, and_(ToolOffloadRow.message_id == MessageRow.id, ToolOffloadRow.reverted_generation.is_(None))
    ).where(MessageRow.conversation_id == cid)
    if after:
        q = q.where(MessageRow.id > bindparam("after"))
    if before:
        q = q.where(MessageRow.id < bindparam("before"))
    return q.order_by(MessageRow.id.desc() if backward else MessageRow.id).limit(bindparam("limit"))


#: (SQLite, after, before, backward) -> the statement of :meth:`Store.messages_page` (built once:
#: building a select costs more than running it)
_PAGE = {
    (text, after, before, before and not after): _page_statement(text, after, before, before and not after)
    for text in (True, False) for after in (True, False) for before in (True, False)
}
_MESSAGE_WIDTH = len(MESSAGE_COLUMNS)


def build_message_row(row: Any) -> Message:
    """:func:`build_message` of a row of :data:`MESSAGE_COLUMNS`."""
    return build_message(*row)


def _lock_statement(by_id: bool, for_update: bool, nowait: bool) -> Any:
    """The conversation row the write door locks, by id or by key (PostgreSQL: ``FOR UPDATE``,
    ``NOWAIT`` when asked; SQLite: ``BEGIN IMMEDIATE`` is the lock)."""
    q = select(*HEAD_COLUMNS).where(Conversation.id == bindparam("id") if by_id else Conversation.thread_key == bindparam("key"))
    return q.with_for_update(nowait=nowait) if for_update else q


#: (by id, FOR UPDATE, NOWAIT) -> (its name in the compiled cache, the statement) of
#: :meth:`Store.locked` (built once, compiled once per dialect: read on the driver's cursor,
#: :func:`engine.store.door.lock_head`, on every transaction of a model step)
_LOCK = {
    (i, f, n): (f"lock_head:{'id' if i else 'key'}{':update' if f else ''}{':nowait' if n else ''}", _lock_statement(i, f, n))
    for i in (True, False) for f in (True, False) for n in (True, False)
}


class DuplicateThread(EngineError):
    code = "duplicate_thread"


class ThreadLocked(db.DatabaseLocked):
    """``Store.locked(..., nowait=True)`` found the conversation locked by another writer."""

    code = "thread_locked"


class Store:
    """One session database. Thread-safe: each operation uses its own session and connection."""

    def __init__(self, engine: Engine, url, schema: db.SchemaInfo) -> None:
        self.engine = engine
        self.url = url
        self.schema = schema
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._ledgers = LedgerCache()
        self._append_listeners: list[Callable[[str, Sequence[tuple[int, dict[str, Any]]]], None]] = []

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, url_or_path: str, *, create: bool = False, read_only: bool = False) -> "Store":
        """Open a session database. ``create=True`` creates or upgrades the schema first.

        Raises a :class:`db.StoreError` subclass with a one-line message for a bad URL, an
        unreachable server, a file that is not a database, or a missing / outdated schema. A
        schema newer than the code opens read-only: every write raises :class:`db.SchemaTooNew`."""
        if not isinstance(url_or_path, str) or not url_or_path.strip():
            raise db.InvalidDatabaseURL("empty database URL: name a SQLite file or a postgresql:// URL")
        url = db.normalize_url(url_or_path)
        if create:
            db.migrate(url.render_as_string(hide_password=False))
        db.ensure_sqlite_file(url, create=False)
        forced = read_only  # ``--read-only``: SQLite opened ``mode=ro``, every write refused (issue 23)
        read_only = db.sqlite_read_only(url) or forced
        engine = db.create_db_engine(url, read_only=read_only)
        try:
            info = db.check_schema(engine, url)
        except db.StoreError:
            engine.dispose()
            raise
        except (DBAPIError, SQLAlchemyError) as exc:
            engine.dispose()
            raise db.translate_error(exc, url) from None
        if info.status in ("missing", "outdated", "unstamped"):
            engine.dispose()
            raise info.problem(url)  # type: ignore[misc]
        store = cls(engine, url, info)
        store.read_only = read_only
        store.read_only_reason = "forced" if forced else ("file" if read_only else None)
        return store

    @classmethod
    def attach(cls, url_or_path: str) -> "Store":
        """A read-only store on a database another process of this program has opened (and whose
        schema it checked): no schema check and no migration code loaded (engine.snapshots' stream
        worker, a process that only reads). Every write raises ``read_only``."""
        url = db.normalize_url(url_or_path)
        store = cls(db.create_db_engine(url, read_only=db.sqlite_read_only(url)), url, db.SchemaInfo(status="current", current=None, head=""))
        store.read_only = True
        return store

    #: opened read-only (a SQLite file or directory without write permission): every write raises ``read_only``
    read_only = False
    #: why: ``file`` (no write permission), ``forced`` (``--read-only``), ``role`` (the database role
    #: cannot write: ``engine.store.access.role_can_write``); None when writable
    read_only_reason: str | None = None

    @property
    def writable(self) -> bool:
        return self.schema.status == "current" and not self.read_only

    _operator: str | None = None

    def operator(self) -> str:
        """Who acts on this store: the PostgreSQL role this connection logs in as
        (``current_user``), or the OS user on SQLite. Asked once, then remembered."""
        if self._operator is None:
            if self.is_sqlite:
                self._operator = os_operator()
            else:
                with self._session(write=False) as s:
                    self._operator = session_operator(s)
        return self._operator

    @property
    def display_url(self) -> str:
        return db.display_url(self.url)

    def close(self) -> None:
        self.engine.dispose()

    def on_appended(self, listener: Callable[[str, Sequence[tuple[int, dict[str, Any]]]], None]) -> None:
        """Call ``listener(thread_key, [(id, column values), ...])`` after each committed write
        transaction of :meth:`locked` that appended messages (``Locked.append_messages``), in this
        process only; never for a transaction that rolled back. It runs in the writer's thread,
        after the commit: it must be quick and must not raise (the snapshot cache keeps the rows,
        :meth:`engine.snapshots.SnapshotCache.appended`)."""
        self._append_listeners.append(listener)

    _role_checked = False

    def check_role(self) -> bool:
        """Whether the PostgreSQL role may write (asked once, on the first write or access
        question, not at open: opening stays three statements); a role that may not makes the
        store read-only (``read_only_reason`` ``role``), so a write is refused in words before the
        database answers with a permission error. True on SQLite."""
        if not self._role_checked and not self.read_only and not self.is_sqlite:
            self._role_checked = True
            if not role_can_write(self.engine):
                self.read_only, self.read_only_reason = True, "role"
        return not (self.read_only and self.read_only_reason == "role")

    def _check_writable(self) -> None:
        self.check_role()
        if self.read_only:
            if self.read_only_reason in ("role", "forced"):
                raise ReadOnlyDatabase(f"{self.display_url}: {read_only_words(self.read_only_reason)}; nothing was written")
            raise ReadOnlyDatabase(f"{self.display_url} is read-only (no write permission); nothing was written")
        problem = self.schema.problem(self.url)
        if problem is not None:
            raise problem

    # -- transactions ---------------------------------------------------------------------
    @contextmanager
    def _session(self, *, write: bool, nowait: bool = False, consistent: bool = False) -> Iterator[Session]:
        if write:
            self._check_writable()
        with database_errors(self.url), Session(self.engine, expire_on_commit=False) as s:
            if self.is_sqlite:  # a SQLite read transaction is already one snapshot (WAL)
                s.connection(
                    execution_options={"sqlite_begin": "IMMEDIATE" if write else "DEFERRED", "sqlite_nowait": nowait}
                )
            elif consistent and not write:
                s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            yield s
            if write:
                s.commit()
            else:
                s.rollback()

    @contextmanager
    def locked(self, thread: str | int, *, nowait: bool = False) -> Iterator[Locked]:
        """Open the write door (:class:`Locked`): hold the conversation row lock until the block
        ends; commit on success, roll back on error. ``thread`` is a thread key or a conversation id.

        Waits for another holder (SQLite: up to the busy timeout); ``nowait=True`` raises
        :class:`ThreadLocked` at once instead."""
        acquired = False
        door: Locked | None = None
        lease: HeldLease | None = None
        try:
            self._check_writable()
            # on a SQLite file, the pressure check's own connection when it is free (its data_version
            # then moves only for other writers: reads.quick_thread_read)
            lease = lend_held(self.engine) if self.is_sqlite else None
            # a Core connection (no ORM session per transaction: the door makes one if a write needs it)
            with database_errors(self.url), (lease.connect() if lease is not None else self.engine.connect()) as conn:
                if self.is_sqlite:
                    conn.execution_options(sqlite_begin="IMMEDIATE", sqlite_nowait=nowait)
                try:
                    with conn.begin():  # commits when the block ends, rolls back if it raises
                        by_id = isinstance(thread, int)
                        name, q = _LOCK[(by_id, not self.is_sqlite, nowait and not self.is_sqlite)]
                        head = lock_head(conn, name, q, {"id" if by_id else "key": thread})  # on the driver's cursor
                        if head is None:
                            raise ThreadNotFound(f"no thread {thread!r}")
                        acquired = True
                        door = Locked(conn, head)  # the ORM row only if something asks for door.conv
                        self._ledgers.seed(door)
                        yield door
                        door.flush()  # the ORM session's pending writes, inside the transaction
                finally:
                    if door is not None:
                        door.close()  # before the connection goes back to the pool
            if lease is not None:
                lease.committed(door.conv_head.thread_key, door.appended, door.append_changes)
                lease.release(door.conv_head.thread_key)
                lease = None
            self._ledgers.keep(door)  # committed
            if door.appended:
                for listener in self._append_listeners:
                    try:
                        listener(door.conv_head.thread_key, door.appended)
                    except Exception:  # noqa: BLE001 - committed already: a listener's failure is never the writer's
                        log.exception("append listener failed on thread %r", door.conv_head.thread_key)
        except db.DatabaseLocked:
            if acquired:
                raise
            raise ThreadLocked(f"thread {thread!r} is locked by another writer; try again later") from None
        finally:
            if lease is not None:  # not committed (or not known to be)
                lease.release(door.conv_head.thread_key if door is not None else str(thread))

    @contextmanager
    def locked_or_created(self, key: str, *, title: str = "") -> Iterator[tuple[Locked, bool]]:
        """The write door on thread ``key``, creating the thread in the same transaction when it
        does not exist: ``(door, created)``. An import writes a whole session in one transaction,
        so a failure leaves no empty thread behind. Two creators racing on PostgreSQL: the second
        fails with :class:`DuplicateThread` and writes nothing."""
        key = check_thread_key(key)
        with self._session(write=True) as s:
            q = select(Conversation).where(Conversation.thread_key == key)
            if not self.is_sqlite:
                q = q.with_for_update()
            conv = s.scalars(q).first()
            created = conv is None
            if conv is None:
                conv = Conversation(thread_key=key, title=clean_text(title, "thread title", code="invalid_thread")[:500],
                                    system_prompt="", tools=[], message_count=0)
                s.add(conv)
                try:
                    s.flush()
                except IntegrityError:
                    raise DuplicateThread(f"thread {key!r} was created by another writer at the same time; try again") from None
                s.add(CompactionStateRow(conversation_id=conv.id, generation=0, compact_count=0, summary_tokens=0))
                s.flush()
            yield Locked(s, conv), created

    # -- settings -------------------------------------------------------------------------
    def get_setting(self, key: str) -> dict[str, Any] | None:
        with self._session(write=False) as s:
            row = s.get(Setting, key)
            if row is None:
                return None
            value = row.value
        try:
            value = checked(value, "settings", key, "value")
        except CorruptRow as exc:
            raise InvalidSetting(f"setting {key!r} cannot be read: {exc.why}; set it again") from None
        if not isinstance(value, dict):
            raise InvalidSetting(f"setting {key!r} must be a JSON object, not {type(value).__name__ if value is not None else 'null'}; set it again")
        return dict(value)

    def put_setting(self, key: str, value: Mapping[str, Any]) -> None:
        """Insert or replace a setting (last writer wins; two first writes racing on PostgreSQL
        retry as an update instead of failing on the primary key)."""
        for attempt in range(2):
            try:
                with self._session(write=True) as s:
                    row = s.get(Setting, key)
                    if row is None:
                        s.add(Setting(key=key, value=dict(value)))
                    else:
                        row.value = dict(value)
                        row.updated_at = utcnow()
                return
            except IntegrityError:
                if attempt:
                    raise

    # -- conversations --------------------------------------------------------------------
    def create_conversation(
        self,
        key: str,
        *,
        title: str = "",
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> int:
        key = check_thread_key(key)
        named = {f: clean_text(v, f"thread {f}", code="invalid_thread", limit=n)
                 for f, n, v in [(f, n, {"title": title, "agent": agent, "provider": provider, "model": model}[f]) for f, n in _CONVERSATION_LIMITS.items()]}
        tool_list = [dict(t) for t in tools]
        check_json(tool_list, "tool schemas", code="invalid_thread")
        try:
            with self._session(write=True) as s:
                conv = Conversation(
                    thread_key=key,
                    title=named["title"],
                    agent=named["agent"],
                    provider=named["provider"],
                    model=named["model"],
                    system_prompt=clean_text(system_prompt, "system prompt", code="invalid_thread"),
                    tools=tool_list,
                    message_count=0,
                )
                s.add(conv)
                s.flush()
                s.add(CompactionStateRow(conversation_id=conv.id, generation=0, compact_count=0, summary_tokens=0))
                return conv.id
        except IntegrityError:
            raise DuplicateThread(f"thread {key!r} already exists") from None

    def conversation_config(self, key: str) -> tuple[str, tuple[dict[str, Any], ...], str | None, str | None]:
        """(system prompt, tool schemas, provider, model) of a thread, as stored: ``tools`` that is
        JSON but not a list is returned as it is (``compaction check`` reports it; the snapshot
        read refuses it as ``corrupt_row``); text that is not JSON raises ``corrupt_row``."""
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            tools = checked(conv.tools, "conversations", conv.id, "tools")
            return conv.system_prompt, tuple(tools) if isinstance(tools, list) else (() if tools is None else tools), conv.provider, conv.model

    @staticmethod
    def _conv(s: Session, key: str | int) -> Conversation:
        q = select(Conversation).where(Conversation.id == key if isinstance(key, int) else Conversation.thread_key == key)
        conv = s.scalars(q).first()
        if conv is None:
            raise ThreadNotFound(f"no thread {key!r}")
        return conv

    def busy_reason(self, key: str) -> str | None:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return busy_reasons(s, [conv.id]).get(conv.id)

    # -- model requests -------------------------------------------------------------------
    def last_completed_request(self, key: str) -> ModelRequest | None:
        """The newest completed, routed model request (pressure compaction needs one)."""
        # one Core query on a plain connection (no ORM session): this runs before every model step
        requests, conversations = ModelRequestRow.__table__, Conversation.__table__
        q = (
            select(requests)
            .join(conversations, conversations.c.id == requests.c.conversation_id)
            .where(conversations.c.thread_key == key, requests.c.outcome == "ok")
            .order_by(requests.c.id.desc())
            .limit(1)
        )
        try:
            with self.engine.connect() as conn:
                row = conn.execute(q).first()
        except DBAPIError as exc:
            raise db.translate_error(exc, self.url) from None
        if row is None:
            self.message_count(key)  # ThreadNotFound for a thread that does not exist
            return None
        return model_request_record(row)

    def model_requests(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[ModelRequest]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(ModelRequestRow).where(ModelRequestRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(ModelRequestRow.id > after_id)
            return [model_request_record(r) for r in s.scalars(q.order_by(ModelRequestRow.id).limit(limit))]

    # -- queries for the inspector (keyset paged) -----------------------------------------
    def list_threads(self, *, text: str | None = None, after_key: str | None = None, limit: int = 500) -> list[ThreadInfo]:
        with self._session(write=False) as s:
            q = select(Conversation, CompactionStateRow).outerjoin(
                CompactionStateRow, CompactionStateRow.conversation_id == Conversation.id
            )
            if text:
                needle = text.lower()  # a literal substring: % and _ are not wildcards
                q = q.where(
                    or_(
                        func.lower(Conversation.thread_key).contains(needle, autoescape=True),
                        func.lower(Conversation.title).contains(needle, autoescape=True),
                    )
                )
            if after_key is not None:
                q = q.where(Conversation.thread_key > after_key)
            q = q.order_by(Conversation.thread_key).limit(limit)
            try:
                rows = s.execute(q).all()
            except (ValueError, DBAPIError) as exc:  # a row SQLAlchemy cannot even load: one thread at a time
                if isinstance(exc, ValueError) and _corrupt_from(exc) is None:
                    raise
                s.rollback()
                return self._list_threads_one_by_one(s, q)
            ids = [c.id for c, _ in rows]
            busy = busy_reasons(s, ids)
            sources, titles = imported_facts(s, ids)
            return [self._safe_thread_info(c.id, c.thread_key, lambda c=c, st=st: self._thread_info(
                c, st, busy.get(c.id), sources.get(c.id, 0), titles.get(c.id))) for c, st in rows]

    def _list_threads_one_by_one(self, s: Session, q: Any) -> list[ThreadInfo]:
        """:meth:`list_threads` when one of the listed rows cannot be loaded: the ids and keys
        first, then each thread alone, a broken one listed with its ``error``."""
        keys = s.execute(q.with_only_columns(Conversation.id, Conversation.thread_key)).all()
        busy = busy_reasons(s, [cid for cid, _ in keys])
        out: list[ThreadInfo] = []
        for cid, key in keys:
            def load(cid: int = cid) -> ThreadInfo:
                with s.begin_nested():
                    c = s.get(Conversation, cid)
                    return self._thread_info(c, s.get(CompactionStateRow, cid), busy.get(cid))  # type: ignore[arg-type]
            out.append(self._safe_thread_info(cid, key, load))
        return out

    def _safe_thread_info(self, cid: int, key: str, load: Any) -> ThreadInfo:
        """``load()``, or a placeholder :class:`ThreadInfo` whose ``error`` says why it failed (the
        list goes on past one broken thread; a warning is logged)."""
        try:
            return load()
        except (CorruptRow, ValueError, TypeError, OverflowError, DBAPIError) as exc:
            corrupt = exc if isinstance(exc, CorruptRow) else _corrupt_from(exc) if isinstance(exc, ValueError) else None
            if corrupt is None and isinstance(exc, DBAPIError):
                corrupt = db.translate_error(exc, self.url)  # type: ignore[assignment]
            reason = corrupt.message if corrupt is not None else f"unreadable row ({exc})"
            if isinstance(corrupt, CorruptRow) and corrupt.table is None:
                reason = CorruptRow("conversations", cid, corrupt.column, corrupt.why).message
            log.warning("thread %r cannot be listed: %s", key, reason)
            return ThreadInfo(id=cid, key=key, title="", agent=None, provider=None, model=None, message_count=0, generation=0,
                              compact_count=0, boundary=None, busy_reason=None, created_at=_EPOCH, updated_at=_EPOCH, error=reason)

    def thread(self, key: str) -> ThreadInfo:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            st = s.get(CompactionStateRow, conv.id)
            sources, titles = imported_facts(s, [conv.id]) if conv.source_format is not None else ({}, {})
            return self._thread_info(conv, st, busy_reasons(s, [conv.id]).get(conv.id), sources.get(conv.id, 0), titles.get(conv.id))

    @staticmethod
    def _thread_info(c: Conversation, st: CompactionStateRow | None, busy: str | None, source_compactions: int = 0,
                     fallback_title: str | None = None) -> ThreadInfo:
        """``source_compactions``: how many the source recorded (counted in ``compact_count``);
        ``fallback_title``: an imported thread's title when its source gave none (read-time only)."""
        return ThreadInfo(
            id=c.id,
            key=c.thread_key,
            title=c.title or fallback_title or "",
            agent=c.agent,
            provider=c.provider,
            model=c.model,
            message_count=as_int(c.message_count, "conversations", c.id, "message_count") or 0,
            generation=(as_int(st.generation, "compaction_state", c.id, "generation") or 0) if st else 0,
            compact_count=((as_int(st.compact_count, "compaction_state", c.id, "compact_count") or 0) if st else 0) + source_compactions,
            boundary=as_int(st.boundary_message_id, "compaction_state", c.id, "boundary_message_id") if st else None,
            busy_reason=busy,  # type: ignore[arg-type]
            created_at=aware(c.created_at),
            updated_at=aware(c.updated_at),
            source_format=c.source_format,
            source_file=c.source_file,
            source_session_id=c.source_session_id,
            source_cwd=c.source_cwd,
            reported_context_window=c.reported_context_window,
            parent_source_session_id=c.parent_source_session_id,
            parent_thread=(c.source_meta or {}).get("parent_thread") if isinstance(c.source_meta, dict) else None,
            source_compact_count=source_compactions,
            kept_tokens=c.kept_tokens,
            threshold=c.kept_threshold,
            window=c.kept_window,
        )

    def source_compactions(self, key: str) -> list[SourceCompaction]:
        """The compactions the thread's source recorded, in order (empty for a live thread)."""
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(SourceCompactionRow).where(SourceCompactionRow.conversation_id == conv.id)
            return [source_compaction_record(r) for r in s.scalars(q.order_by(SourceCompactionRow.id))]

    def follow_position(self, key: str) -> tuple[int | None, int | None]:
        """(byte offset, line) a ``--follow`` of the thread's source file resumes from."""
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return conv.follow_offset, conv.follow_line

    def imported_sources(self) -> list[tuple[str, str, datetime | None]]:
        """(source file as recorded, thread key, last written) of every imported thread: what
        discovery compares the sessions on disk with (``engine.discovery``)."""
        with self._session(write=False) as s:
            q = select(Conversation.source_file, Conversation.thread_key, Conversation.updated_at).where(
                Conversation.source_file.is_not(None)).order_by(Conversation.thread_key)
            return [(str(f), str(k), aware(u) if u is not None else None) for f, k, u in s.execute(q).all()]

    def messages_page(
        self, key: str, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500
    ) -> list[StoredMessage]:
        """A page of messages in ascending id order: the first ``limit`` after ``after_id``, or the
        last ``limit`` before ``before_id`` (keyset; never OFFSET).

        One statement (the conversation found by its key inside it), plain column rows instead of
        ORM objects; only an empty page asks whether the thread exists."""
        if limit <= 0:
            return []
        backward = before_id is not None and after_id is None
        params: dict[str, Any] = {"key": key, "limit": limit}
        if after_id is not None:
            params["after"] = after_id
        if before_id is not None:
            params["before"] = before_id
        with self._session(write=False) as s:
            statement = _PAGE[self.is_sqlite, after_id is not None, before_id is not None, backward]
            rows = s.execute(statement, params).all()
            if not rows:
                self._conv(s, key)  # ThreadNotFound, or a thread with no message there
                return []
        if backward:
            rows = rows[::-1]
        build = message_from_text_row if self.is_sqlite else build_message_row
        return [
            StoredMessage(message=build(r[:_MESSAGE_WIDTH]), conversation_id=r[-3], created_at=aware(r[-2]), offload_sha256=r[-1])
            for r in rows
        ]

    def message_count(self, key: str) -> int:
        with self._session(write=False) as s:
            return self._conv(s, key).message_count

    def versions(self, key: str | None = None) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
        """Cheap marks of what a reader shows, to tell whether anything changed since it last
        looked (a few aggregate reads on indexed columns, no message or event body):

        - of the thread list: (threads, newest thread id, latest ``updated_at`` of a thread and of
          a compaction state, total messages, the busy threads and why);
        - of thread ``key`` (None without one): (messages, last message id, boundary, generation,
          compactions, busy reason, events and the last event id, model requests, the last one's
          id and how many are pending, the source's compactions, ``updated_at`` of the thread and
          of its compaction state). Raises ``ThreadNotFound`` when ``key`` is not a thread."""
        with self._session(write=False) as s:
            listing = s.execute(select(func.count(Conversation.id), func.max(Conversation.id), func.max(Conversation.updated_at), func.sum(Conversation.message_count))).one()
            states = s.scalar(select(func.max(CompactionStateRow.updated_at)))
            active = s.execute(select(Run.conversation_id, Run.status).where(Run.status.in_(ACTIVE_RUN_STATUSES)).order_by(Run.conversation_id, Run.status)).all()
            queued = s.scalars(select(QueuedRequest.conversation_id).where(QueuedRequest.status == "queued").distinct().order_by(QueuedRequest.conversation_id)).all()
            marks = (*listing, states, tuple(map(tuple, active)), tuple(queued))
            if key is None:
                return marks, None
            conv = self._conv(s, key)
            st = s.get(CompactionStateRow, conv.id)
            cid = conv.id
            last_message = s.scalar(select(func.max(MessageRow.id)).where(MessageRow.conversation_id == cid))
            events = s.execute(select(func.count(CompactionEventRow.id), func.max(CompactionEventRow.id)).where(CompactionEventRow.conversation_id == cid)).one()
            requests = s.execute(
                select(func.count(ModelRequestRow.id), func.max(ModelRequestRow.id), func.count(ModelRequestRow.id).filter(ModelRequestRow.outcome == "pending"))
                .where(ModelRequestRow.conversation_id == cid)
            ).one()
            sources = s.scalar(select(func.count(SourceCompactionRow.id)).where(SourceCompactionRow.conversation_id == cid))
            thread = (
                conv.message_count, last_message,
                st.boundary_message_id if st else None, st.generation if st else 0, st.compact_count if st else 0,
                busy_reasons(s, [cid]).get(cid), *events, *requests, sources, conv.updated_at, st.updated_at if st else None,
            )  # fmt: skip
            return marks, thread

    def count_messages(self, key: str, *, after_id: int | None = None) -> int:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(func.count()).select_from(MessageRow).where(MessageRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(MessageRow.id > after_id)
            return int(s.scalar(q) or 0)

    def snapshot(self, key: str, *, with_busy: bool = True) -> Snapshot:
        """State, messages after the boundary, their offloads and the current request, read in one
        transaction (REPEATABLE READ on PostgreSQL, so all statements see the same snapshot).
        ``with_busy=False`` skips the busy check (the pre-step pressure path does not need it)."""
        with self._session(write=False, consistent=True) as s:
            return ConversationReader(s, self._conv(s, key)).snapshot(with_busy=with_busy)

    @contextmanager
    def reading(self, key: str) -> Iterator[ConversationReader]:
        """One consistent read transaction on thread ``key`` (REPEATABLE READ on PostgreSQL; a
        SQLite read transaction is one WAL snapshot): every read of the yielded
        :class:`ConversationReader` sees the same state. Used by :mod:`engine.snapshots` to read
        a thread's head and its new messages together, and to stream a long thread in pages."""
        with self._session(write=False, consistent=True) as s:
            # the conversation and its state in one query (the state then comes from the session)
            q = select(Conversation, CompactionStateRow).outerjoin(
                CompactionStateRow, CompactionStateRow.conversation_id == Conversation.id
            ).where(Conversation.thread_key == key)
            row = s.execute(q).first()
            if row is None:
                raise ThreadNotFound(f"no thread {key!r}")
            yield ConversationReader(s, row[0])

    def messages_after(self, key: str, boundary: int | None) -> list[Message]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return ConversationReader(s, conv).messages_after(boundary)

    def compaction_state(self, key: str) -> CompactionState:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return state_record(s.get(CompactionStateRow, conv.id), conv.id)

    def history(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[HistoryRecord]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(CompactionHistoryRow).where(CompactionHistoryRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(CompactionHistoryRow.id > after_id)
            return [history_record(r) for r in s.scalars(q.order_by(CompactionHistoryRow.id).limit(limit))]

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000, kinds: Sequence[str] | None = None) -> list[CompactionEvent]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(CompactionEventRow).where(CompactionEventRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(CompactionEventRow.id > after_id)
            if kinds:
                q = q.where(CompactionEventRow.kind.in_(list(kinds)))
            return [event_record(r) for r in s.scalars(q.order_by(CompactionEventRow.id).limit(limit))]

    def offloads(self, key: str, message_ids: Sequence[int] | None = None) -> dict[int, Offload]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == conv.id, ToolOffloadRow.reverted_generation.is_(None))
            if message_ids is not None:
                if not message_ids:
                    return {}
                q = q.where(ToolOffloadRow.message_id.in_(list(message_ids)))
            return {r.message_id: offload_record(r) for r in s.scalars(q)}

    def runs(self, key: str, *, limit: int = 1000) -> list[RunInfo]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return [run_record(r) for r in s.scalars(select(Run).where(Run.conversation_id == conv.id).order_by(Run.id).limit(limit))]

    def queued_requests(self, key: str) -> list[tuple[int, str]]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return [
                (r.id, r.content)
                for r in s.scalars(
                    select(QueuedRequest)
                    .where(QueuedRequest.conversation_id == conv.id, QueuedRequest.status == "queued")
                    .order_by(QueuedRequest.id)
                )
            ]

    # -- pins (read) ----------------------------------------------------------------------
    def pins(self, key: str) -> list[PinInfo]:
        """The messages pinned in thread ``key`` (as stored: a pin of a round has one row per message), in id order."""
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            rows = s.scalars(select(MessagePin).where(MessagePin.conversation_id == conv.id).order_by(MessagePin.message_id)).all()
            return [PinInfo(message_id=int(r.message_id), pinned_at=aware(r.pinned_at), pinned_by=r.pinned_by, reason=r.reason) for r in rows]
