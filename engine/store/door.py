# Over 800 lines (1,217): the write door is the one place anything is written (docs/architecture.md, 'The one write door'): Locked's writes, the call ledger, the steady step's intake (take_in) and its raw driver-cursor writes (RawWrite) share the transaction and the ledger; the ledger cache and the compaction records could move to modules of their own (not split yet).
"""The write door: :class:`Locked`, the one transaction type through which anything is written to
a conversation (messages, queued requests, runs, model requests, events, compaction records).

It holds the conversation row lock (``Store.locked``) and enforces the conversation invariants in
the same transaction (:mod:`.invariants`): a write that breaks one raises
:class:`engine.core.messages.InvalidMessage` and leaves nothing of itself behind. ``Store.locked`` is
the only way in (the Store has no write methods of its own around it: the service facets, importing
and the compactor open the door); there is no second path.
"""

from __future__ import annotations

import getpass
import logging
import threading
from collections import namedtuple
from typing import Any, Iterable, Mapping, Sequence, cast

from sqlalchemy import BigInteger, Connection, CursorResult, bindparam, case, cast as sql_cast, func, insert, inspect, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from ..core.errors import CompareAndSwapConflict, EngineError, ThreadBusy
from ..core.events import EventKind
from ..core.messages import InvalidMessage, Message, ToolCall
from ..core.meter import default_meter
from ..core.units import META_MISSING_RESULT, dangling_calls
from ..core.views import ACTIVE_RUN_STATUSES, LockedThread, Offload
from .fleet import UNKNOWN_PPM, add_kept
from .invariants import CallLedger
from .models import (
    AUDIT_ACTIONS,
    AuditRow,
    CompactionEventRow,
    CompactionHistoryRow,
    CompactionStateRow,
    Conversation,
    MessagePin,
    MessageRow,
    ModelRequestRow,
    QueuedRequest,
    Run,
    ThreadPolicyRow,
    ToolOffloadRow,
    utcnow,
)
from .reads import THREAD_KEY, ConversationReader, ThreadReader, _raw, handed_message
from .records import MESSAGES, locked_thread_record, message_values, to_message
from .rules import check_json, clean_text, scrub_text
from .sources import SourceWrites

log = logging.getLogger(__name__)

ABORTED_TEXT = "aborted: the run was cancelled before this tool call ran"
#: the text of a closing marker (``close_dangling_calls``); the reason follows it
MISSING_RESULT_TEXT = "no result was recorded for this tool call"

MODEL_REQUEST_OUTCOMES: tuple[str, ...] = ("pending", "ok", "error", "cancelled")

_RUN_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "completed": ("running",),
    "failed": ("running", "waiting_for_user"),
    "waiting_for_user": ("running",),
    "running": ("waiting_for_user",),
    "cancelled": ("running", "waiting_for_user", "queued"),
}


class InvalidTransition(EngineError):
    code = "invalid_transition"


def event_kind(kind: EventKind | str, thread: str) -> str:
    """The stored value of an event kind; anything that is not an :class:`EventKind` member is
    refused (``invalid_event``)."""
    try:
        return EventKind(kind).value
    except ValueError:
        raise EngineError(
            f"thread {thread!r}: unknown event kind {kind!r} (expected one of {', '.join(k.value for k in EventKind)})",
            code="invalid_event",
        ) from None


def with_counts(conversation_model: str | None, rows: Sequence[dict[str, Any]], messages: Sequence[Message], *, cache: bool = True) -> None:
    """Fill ``tokens`` / ``tokens_key`` of new message rows (``message_values`` of ``messages``):
    each message's count as :func:`engine.core.meter.default_meter` of the thread's model counts it,
    under its ``count_key``. A row whose stored content differs from the message's (the data
    rules escaped a NUL) is left uncounted, as is every row when the meter cannot count (missing
    tokenizer data): a count is a cache a reader may trust, never a reason to refuse a write."""
    for row in rows:  # every row has both keys (an executemany takes its columns from the first)
        row["tokens"] = row["tokens_key"] = None
    try:
        meter = default_meter(conversation_model)
        counts = meter.count_messages(messages, cache=cache)
    except Exception:  # noqa: BLE001 - uncounted rows are counted when read
        log.warning("message token counts not recorded", exc_info=True)
        return
    key = meter.count_key
    for row, m, n in zip(rows, messages, counts):
        if row["content"] == m.content:
            row["tokens"], row["tokens_key"] = n, key


def os_operator() -> str:
    """The OS user running this process (the operator of a SQLite store); ``unknown`` when the
    platform cannot say."""
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # noqa: BLE001 - no login name (a container without USER / passwd entry)
        return "unknown"


def session_operator(session: Session) -> str:
    """Who acts in this session: the PostgreSQL role (``current_user``) on PostgreSQL, the OS user
    on SQLite (a file has no roles)."""
    if session.get_bind().dialect.name == "sqlite":
        return os_operator()
    return str(session.execute(text("SELECT current_user")).scalar_one())


#: one message row, its id back (Core: no statement built per row, the compiled form is cached)
_INSERT_MESSAGE = insert(MESSAGES).returning(MESSAGES.c.id)


def _columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """``message_values`` keyed by column (the attribute ``meta`` is the column ``metadata``)."""
    out = dict(row)
    out["metadata"] = out.pop("meta")
    return out


_CONV = Conversation.__table__
_COUNTERS: dict[str, Any] = {"message_count": bindparam("count"), "last_message_id": bindparam("last"), "updated_at": bindparam("now")}
_KEPT_PLUS = _CONV.c.kept_tokens + bindparam("added")
#: an append's one UPDATE of the conversation row: its counters and, as :func:`.fleet.add_kept` rules,
#: the kept tokens plus the new rows' counts with the pressure recomputed (a never-measured thread
#: stays unknown); compiled once. ``_APPENDED_UNCOUNTED``: a row without a count makes the figure
#: unknown; ``_APPENDED``: counters only (the counts added nothing)
_APPENDED_COUNTED = update(_CONV).where(_CONV.c.id == bindparam("cid")).values(
    **_COUNTERS,
    kept_tokens=_KEPT_PLUS,
    pressure_ppm=case((_CONV.c.kept_tokens.is_(None), _CONV.c.pressure_ppm),
                      (_CONV.c.kept_threshold > 0, sql_cast(_KEPT_PLUS, BigInteger) * 1_000_000 // _CONV.c.kept_threshold),
                      else_=UNKNOWN_PPM),
)
_APPENDED_UNCOUNTED = update(_CONV).where(_CONV.c.id == bindparam("cid")).values(
    **_COUNTERS, kept_tokens=None, pressure_ppm=case((_CONV.c.kept_tokens.is_(None), _CONV.c.pressure_ppm), else_=UNKNOWN_PPM),
)
_APPENDED = update(_CONV).where(_CONV.c.id == bindparam("cid")).values(**_COUNTERS)
_APPENDED_STATEMENTS = {"appended_counted": _APPENDED_COUNTED, "appended_uncounted": _APPENDED_UNCOUNTED, "appended": _APPENDED}


_REQUESTS = ModelRequestRow.__table__
_OFFLOADS = ToolOffloadRow.__table__
#: a model request recorded / completed (compiled once: on every model step's path; no ORM object
#: of a request is loaded in the door, so there is nothing to synchronize)
_INSERT_REQUEST = insert(_REQUESTS).returning(_REQUESTS.c.id)
_COMPLETE_REQUEST = update(_REQUESTS).where(_REQUESTS.c.id == bindparam("rid"), _REQUESTS.c.conversation_id == bindparam("cid")).values(
    outcome=bindparam("outcome"), reported_prompt_tokens=bindparam("prompt"), reported_completion_tokens=bindparam("completion"),
    error_code=bindparam("code"), error_message=bindparam("message"),
)


#: which of some source keys a thread holds (one statement, compiled once: the keys are an expanding parameter)
_STORED_KEYS = select(MESSAGES.c.source_key).where(
    MESSAGES.c.conversation_id == bindparam("cid"), MESSAGES.c.source_key.in_(bindparam("keys", expanding=True))
)


#: the dialects with ``INSERT ... ON CONFLICT DO NOTHING`` (the step's intake, :meth:`Locked.take_in`)
_ON_CONFLICT = {"sqlite": sqlite, "postgresql": postgresql}
#: (column, key of a ``message_values`` row) of a message row as the step's intake writes it
_ROW_KEYS = tuple((c.key, "meta" if c.key == "metadata" else c.key) for c in MESSAGES.c if c.key != "id")
#: rows per INSERT of :meth:`Locked.take_in` (15 parameters a row: far below either database's limit)
TAKE_IN_ROWS = 64
#: per row position of a :func:`_multi_insert`, its (bind name, row key) pairs: built once, not per row
_TAKE_IN_NAMES = tuple(tuple((f"{c}_{i}", attr) for c, attr in _ROW_KEYS) for i in range(TAKE_IN_ROWS))
_REQUEST_KEYS = ("conversation_id", "run_id", "step", "provider", "model", "estimated_tokens", "threshold", "outcome")


def _multi_insert(dialect: str, n: int) -> Any:
    """``n`` message rows unless the thread holds their source key (NULL keys never conflict), the
    id and key of each row written back (no row: it was stored already); bind ``<column>_<i>``."""
    rows = [{c: bindparam(f"{c}_{i}", type_=MESSAGES.c[c].type) for c, _ in _ROW_KEYS} for i in range(n)]
    return (_ON_CONFLICT[dialect].insert(MESSAGES).values(rows)
            .on_conflict_do_nothing(index_elements=[MESSAGES.c.conversation_id, MESSAGES.c.source_key])
            .returning(MESSAGES.c.id, MESSAGES.c.source_key))


#: the same for one key (the common intake of a step: the last tool result); no expanding parameter to render
_STORED_KEY = select(MESSAGES.c.source_key).where(MESSAGES.c.conversation_id == bindparam("cid"), MESSAGES.c.source_key == bindparam("key"))


class RawWrite:
    """A write statement of the step's hot path compiled once per dialect and run on the driver's
    own cursor (a Core execution costs some 30 µs of Python per statement; this a few): the
    parameters go through the column types' own bind processors (the values a Core execution
    sends), Python-side column defaults not given are filled as Core fills them, the
    connection's ``before_cursor_execute`` listeners see the statement (statement counters), and a
    driver error is raised as Core raises it (``IntegrityError``, ``OperationalError``, ...)."""

    __slots__ = ("sql", "names", "processors", "defaults")

    def __init__(self, stmt: Any, dialect: Any, keys: Sequence[str] | None = None) -> None:
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys) if keys is not None else None)
        self.sql: str = compiled.string
        names = list(compiled.positiontup) if compiled.positional else list(compiled.bind_names.values())
        self.names: tuple[str, ...] = tuple(names)
        procs = compiled._bind_processors
        self.processors: tuple[Any, ...] = tuple(procs.get(n) for n in names)
        defaults: dict[str, Any] = {}
        for bind, name in compiled.bind_names.items():  # literal values (LIMIT 1, 'ok') and column defaults
            if bind.value is not None and not bind.required:
                defaults[name] = bind.value
        for col in (*compiled.insert_prefetch, *compiled.update_prefetch):
            default = col.default if col in compiled.insert_prefetch else col.onupdate
            if default is not None and default.is_scalar:
                defaults[col.key] = default.arg
            elif default is not None and default.is_callable:
                defaults[col.key] = default.arg  # called per execution (utcnow)
        self.defaults = defaults

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        """Run with ``params`` (by bind name) in ``conn``'s transaction; returns the driver's cursor
        (its rows, ``rowcount``); the caller closes it."""
        values = []
        defaults = self.defaults
        for name, proc in zip(self.names, self.processors):
            if name in params:
                v = params[name]
            else:
                v = defaults.get(name)
                if callable(v):
                    v = v(None)
            values.append(v if proc is None else proc(v))
        dialect = conn.dialect
        args: Any = tuple(values) if dialect.positional else dict(zip(self.names, values))
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        if conn._has_events or conn.engine._has_events:
            conn.dispatch.before_cursor_execute(conn, cursor, self.sql, args, None, False)
        dbapi = dialect.loaded_dbapi
        try:
            cursor.execute(self.sql, args)
        except dbapi.Error as exc:
            cursor.close()
            raise DBAPIError.instance(self.sql, args, exc, dbapi.Error, dialect=dialect) from exc
        return cursor


_RAW: dict[tuple[Any, ...], RawWrite] = {}


def raw_write(conn: Connection, name: Any, build: Any) -> RawWrite:
    """The :class:`RawWrite` ``name`` for ``conn``'s dialect (``build(dialect)`` gives ``(statement,
    column keys or None)`` the first time)."""
    dialect = conn.dialect
    key = (dialect.name, dialect.driver, dialect.paramstyle, name)
    found = _RAW.get(key)
    if found is None:
        stmt, keys = build(dialect)
        found = _RAW[key] = RawWrite(stmt, dialect, keys)
    return found


def driver_rows(conn: Connection, name: str, stmt: Any, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of the SELECT ``stmt`` (``name``: its name in the compiled cache of
    :func:`engine.store.reads._raw`) run on the driver's cursor in ``conn``'s transaction, each
    value through its column type's result processor (the values a Core execution gives); the
    connection's ``before_cursor_execute`` listeners see it; a driver error is raised as Core's."""
    raw = _raw(name, stmt, conn.dialect)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        if conn._has_events or conn.engine._has_events:
            conn.dispatch.before_cursor_execute(conn, cursor, raw.sql, params, None, False)
        dbapi = conn.dialect.loaded_dbapi
        try:
            return raw.rows(cursor, params)
        except dbapi.Error as exc:
            raise DBAPIError.instance(raw.sql, params, exc, dbapi.Error, dialect=conn.dialect) from exc
    finally:
        cursor.close()


def lock_head(conn: Connection, name: str, stmt: Any, params: Mapping[str, Any]) -> "ConvHead | None":
    """The locked conversation row (``stmt``: a select of :data:`HEAD_COLUMNS`, with ``FOR UPDATE``
    on PostgreSQL) as a :class:`ConvHead`, read on the driver's cursor (:func:`driver_rows`: the
    write door's first statement on every model step); None when there is no such thread."""
    rows = driver_rows(conn, name, stmt, params)
    return ConvHead(*rows[0]) if rows else None


#: the conversation columns the write door's hot path reads (the step's intake, request record and
#: completion): what ``Store.locked`` selects with the lock, a plain row instead of a loaded
#: :class:`Conversation` (the ORM row is loaded only when a write or a read asks for ``conv``)
HEAD_COLUMNS = (_CONV.c.id, _CONV.c.thread_key, _CONV.c.created_at, _CONV.c.last_message_id, _CONV.c.message_count,
                _CONV.c.provider, _CONV.c.model)


class ConvHead:
    """The locked conversation row's :data:`HEAD_COLUMNS` (mutable: the door's own appends move
    its counters, as they move the loaded row's)."""

    __slots__ = ("id", "thread_key", "created_at", "last_message_id", "message_count", "provider", "model")

    def __init__(self, id: int, thread_key: str, created_at: Any, last_message_id: int | None, message_count: int,
                 provider: str | None, model: str | None) -> None:
        self.id, self.thread_key, self.created_at = id, thread_key, created_at
        self.last_message_id, self.message_count, self.provider, self.model = last_message_id, message_count, provider, model


class LedgerCache:
    """The call ledger of each thread as its last write transaction in this process committed it
    (one per :class:`engine.store.Store`): the next transaction on that thread starts from it and
    skips the two queries that read it, when the locked conversation row shows nothing was appended
    since (same key, creation time, last message id and message count; every append through the
    door moves the last two, in this process or another)."""

    LIMIT = 4096  # threads held; beyond, forgotten (read again when next written)
    #: threads whose last appended rows are held (:attr:`Locked.earlier`), and rows held per thread
    RECENT_LIMIT = 64
    RECENT_ROWS = 16

    def __init__(self) -> None:
        self._held: dict[int, tuple[tuple[Any, ...], CallLedger]] = {}
        #: per thread: (stamp, after, rows): the thread's messages with an id above ``after`` are
        #: exactly ``rows`` ((id, column values) as the door wrote them), as of the stamp
        self._recent: dict[int, tuple[tuple[Any, ...], int, list[tuple[int, dict[str, Any]]]]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _stamp(conv: Conversation | ConvHead) -> tuple[Any, ...]:
        return (conv.thread_key, conv.created_at, conv.last_message_id, conv.message_count)

    def seed(self, door: "Locked") -> None:
        """Give ``door`` the ledger kept for its thread if the row says it is still current, and the
        rows the last transactions appended (:attr:`Locked.earlier`) on the same condition."""
        head = door.conv_head
        with self._lock:
            held = self._held.get(head.id)
            recent = self._recent.get(head.id)
        stamp = self._stamp(head)
        if held is not None and held[0] == stamp:
            door._ledger = held[1].copy()
        if recent is not None and recent[0] == stamp:
            door.appended_after, door.earlier = recent[1], recent[2]

    def keep(self, door: "Locked") -> None:
        """After ``door``'s transaction committed: keep the ledger it holds (if it read one) and the
        last rows appended (when the door knows every message after some id)."""
        ledger = door._ledger
        head = door.conv_head
        after = door.appended_after
        rows: list[tuple[int, dict[str, Any]]] = []
        if after is not None:
            rows = door.earlier + door.appended if door.appended else door.earlier
            if len(rows) > self.RECENT_ROWS:
                after, rows = rows[-self.RECENT_ROWS - 1][0], rows[-self.RECENT_ROWS:]
        stamp = self._stamp(head)
        with self._lock:
            if ledger is not None:
                if len(self._held) >= self.LIMIT:
                    self._held.clear()
                self._held[head.id] = (stamp, ledger.copy())
            if after is None:
                self._recent.pop(head.id, None)
            else:
                if len(self._recent) >= self.RECENT_LIMIT and head.id not in self._recent:
                    self._recent.clear()
                self._recent[head.id] = (stamp, after, rows)


#: a thread's key row as :data:`engine.store.reads.THREAD_KEY` selects it (read on the driver's cursor)
_KeyRow = namedtuple("_KeyRow", [c.key for c in THREAD_KEY.selected_columns])  # type: ignore[misc]


class DoorReader(ThreadReader):
    """:class:`ThreadReader` in the write door's transaction: the messages after the thread's last
    message id at the lock are the ones the door appended since (nothing else writes the thread
    while it holds the lock), and before them those its store's last transactions on the thread
    appended when the locked row shows nothing else was (:class:`LedgerCache`), handed over as written (``reads.handed_message``: the message a read
    of the row gives) instead of read back; anything else is read."""

    def __init__(self, conn: Connection, row: Any, door: "Locked") -> None:
        super().__init__(conn, row)
        self._door = door

    def messages_after(self, boundary: int | None, *, limit: int | None = None) -> list[Message]:
        door = self._door
        after = door.appended_after
        if boundary is not None and after is not None and boundary >= after:
            rows = [(i, r) for i, r in (door.earlier + door.appended if door.earlier else door.appended) if i > boundary]
            return [handed_message(i, r) for i, r in (rows[:limit] if limit is not None else rows)]
        return super().messages_after(boundary, limit=limit)


class Locked(SourceWrites, ConversationReader):
    """A transaction holding one conversation's row lock: the write door. Use only inside
    ``Store.locked``; it commits when the block ends and rolls back if the block raises."""

    def __init__(self, session: Session | Connection, conv: Conversation | ConvHead) -> None:
        self._conv: Conversation | None = None
        self._head: ConvHead | None = conv if isinstance(conv, ConvHead) else None
        self._conn: Connection | None = session if isinstance(session, Connection) else None
        self._session: Session | None = None
        super().__init__(cast(Session, session), cast(Conversation, conv))  # sets ``session`` and ``conv`` (the properties below)
        self._ledger: CallLedger | None = None
        #: (id, column values) of every message :meth:`append_messages` or :meth:`take_in` wrote, in
        #: order: what ``Store.locked`` hands its append listeners once the transaction committed
        #: (and :class:`DoorReader` hands the pressure check)
        self.appended: list[tuple[int, dict[str, Any]]] = []
        #: an id after which :attr:`earlier` + :attr:`appended` are every message of the thread: its
        #: last message id when the lock was taken, or earlier when the store's :class:`LedgerCache`
        #: knew the rows its last transactions appended (``earlier``); None once another path
        #: appended (:class:`DoorReader` then reads them)
        self.appended_after: int | None = self.conv_head.last_message_id
        self.earlier: list[tuple[int, dict[str, Any]]] = []
        #: rows :attr:`appended`'s writes changed (each append: its rows and the conversation row's
        #: one UPDATE): a transaction whose connection changed exactly these wrote nothing else
        self.append_changes = 0

    @property
    def session(self) -> Session:
        """The ORM session of this transaction. A door opened on a Core connection (``Store.locked``:
        the step's hot path needs no unit of work) makes one, bound to that connection and its
        transaction, the first time something asks; :meth:`flush` writes its pending changes
        before the transaction commits."""
        if self._session is None:
            assert self._conn is not None
            self._session = Session(bind=self._conn, expire_on_commit=False)  # joins the transaction, never commits it
        return self._session

    @session.setter
    def session(self, value: Session | Connection) -> None:
        if isinstance(value, Session):
            self._session = value

    def connection(self) -> Connection:
        """The transaction's connection (Core statements: no unit of work involved)."""
        return self._conn if self._conn is not None else self.session.connection()

    def flush(self) -> None:
        """Write the ORM session's pending changes, if a session was made (before the commit)."""
        if self._session is not None:
            self._session.flush()

    def close(self) -> None:
        """Close the ORM session made for a Core-opened door (its objects stay readable, detached)."""
        if self._session is not None and self._conn is not None:
            self._session.close()

    @property
    def conv(self) -> Conversation:
        """The locked conversation row as a loaded :class:`Conversation` (loaded on first use when
        the door was opened on its :class:`ConvHead`: the lock is held already, so this is a plain
        read of the row as this transaction left it). Writes to it are flushed with the transaction."""
        if self._conv is None:
            assert self._head is not None
            conv = self.session.get(Conversation, self._head.id)
            assert conv is not None  # locked: nobody deleted it
            self._conv = conv
        return self._conv

    @conv.setter
    def conv(self, value: Conversation | ConvHead) -> None:
        if isinstance(value, Conversation):
            self._conv = value

    @property
    def conv_head(self) -> Conversation | ConvHead:
        """What the hot path reads of the locked row (id, key, counters, route): the loaded row
        once there is one (it may have been changed), else the row read with the lock."""
        if self._conv is not None:
            return self._conv
        assert self._head is not None
        return self._head

    def thread(self) -> LockedThread:
        """The locked thread's columns as this transaction sees them now: a frozen copy
        (:class:`engine.core.views.LockedThread`). Callers outside the store read these, never the ORM
        row; a later write in this transaction shows in the next call, not in this record."""
        return locked_thread_record(self.conv)

    @property
    def conversation_id(self) -> int:
        return self.conv_head.id

    @property
    def thread_key(self) -> str:
        return self.conv_head.thread_key

    def record_counts(self, counts: Mapping[int, int], key: str) -> int:
        """Keep the token count of messages already written (``compaction recount``: rows from
        before counts were kept, or counted under another key): ``counts`` maps a message id of
        this thread to its count under ``key`` (``TokenMeter.count_key``). Only the count columns
        change (message rows are otherwise never updated); ids of other threads are ignored.
        Returns how many rows took the count."""
        if not counts:
            return 0
        stmt = (
            update(MESSAGES)
            .where(MESSAGES.c.id == bindparam("mid"), MESSAGES.c.conversation_id == self.conv.id)
            .values(tokens=bindparam("n"), tokens_key=key)
            .execution_options(synchronize_session=False)
        )
        result = self.session.connection().execute(stmt, [{"mid": i, "n": int(n)} for i, n in counts.items()])
        return int(result.rowcount or 0)

    def configure(self, *, system_prompt: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Set the agent's system prompt and tool schemas (part of every envelope of this thread)."""
        if system_prompt is not None:
            self.conv.system_prompt = clean_text(system_prompt, "system prompt", code="invalid_thread")
        if tools is not None:
            tool_list = [dict(t) for t in tools]
            check_json(tool_list, "tool schemas", code="invalid_thread")
            self.conv.tools = tool_list
        self.conv.updated_at = utcnow()  # part of every envelope: readers' cached status is stale

    def set_route(self, *, provider: str, model: str) -> None:
        """The route (provider, model) the thread's next requests are measured for."""
        self.conv.provider = clean_text(provider, "provider", code="invalid_thread", limit=100)
        self.conv.model = clean_text(model, "model", code="invalid_thread", limit=200)

    def require_idle(self) -> None:
        reason = self.busy_reason()
        if reason is not None:
            raise ThreadBusy(self.conv_head.thread_key, reason)

    # -- messages -------------------------------------------------------------------------
    def stored_source_keys(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` a message of this thread already holds, asked of the unique
        ``(conversation_id, source_key)`` index (a few keys: a few index probes; no scan of the
        thread). The step driver's intake skips those (engine.step)."""
        wanted = list(dict.fromkeys(keys))
        found: set[str] = set()
        conn = self.connection()
        if len(wanted) == 1:
            found.update(conn.execute(_STORED_KEY, {"cid": self.conv_head.id, "key": wanted[0]}).scalars())
            return found
        for i in range(0, len(wanted), 500):
            found.update(conn.execute(_STORED_KEYS, {"cid": self.conv_head.id, "keys": wanted[i : i + 500]}).scalars())
        return found

    def thread_reader(self) -> ThreadReader:
        """The snapshot reads (:class:`engine.store.reads.ThreadReader`) inside this transaction,
        its own writes included (flushed first): the step driver checks the pressure in the
        transaction of its intake and request record. The thread's key row is read on the
        driver's cursor (the values a Core read gives); the messages this transaction appended
        are handed over as written, not read back (:class:`DoorReader`)."""
        self.flush()
        conn = self.connection()
        rows = driver_rows(conn, "thread_key", THREAD_KEY, {"key": self.conv_head.thread_key})
        return DoorReader(conn, _KeyRow(*rows[0]), self)

    def call_ledger(self) -> CallLedger:
        """The pending calls as of this transaction's writes (read once, then kept up to date)."""
        if self._ledger is None:
            self._ledger = super().call_ledger()
        return self._ledger

    def append_message(self, message: Message, *, run_id: int | None = None) -> int:
        return self.append_messages([message], run_id=run_id)[0]

    def append_messages(self, messages: Sequence[Message], *, run_id: int | None = None) -> list[int]:
        """Append in order; returns the new ids (monotonic: physical order).

        Every message is checked against the invariants before the first is written: one that
        breaks them raises :class:`engine.core.messages.InvalidMessage` and none is written."""
        if not messages:
            return []
        ledger = self.call_ledger().copy()
        ledger.admit_all(messages)
        head = self.conv_head
        rows = [message_values(head.id, m, run_id) for m in messages]
        with_counts(head.model, rows, messages)
        conn = self.connection()  # the Table's one cached INSERT, the values as parameters
        try:
            ids = [conn.execute(_INSERT_MESSAGE, _columns(row)).scalar_one() for row in rows]
        except IntegrityError as exc:
            raise self._duplicate_key(exc) from None
        self._ledger = ledger
        self._appended(conn, rows, ids)
        self.appended.extend(zip(ids, rows))
        return ids

    def take_in(self, messages: Sequence[Message], *, run_id: int | None = None) -> list[int]:
        """Append those of ``messages`` the thread does not hold yet (by ``source_key``, asked of the
        unique ``(conversation_id, source_key)`` key; a message without one is always new; a key
        twice in ``messages``: its first); returns the new ids. The step driver's intake
        (engine.service.steps): the outcome of :meth:`stored_source_keys` then
        :meth:`append_messages` of the rest, with the key probe folded into each INSERT
        (``ON CONFLICT DO NOTHING``) when the whole batch passes the call ledger as it is (the
        steady step); otherwise (a batch repeating a stored result, …) exactly that probe, then
        append. The invariants hold either way; a batch whose stored part hid a violation of the
        rest raises :class:`engine.core.messages.InvalidMessage` after its rows were sent, which the
        caller's transaction then undoes (``Store.locked`` rolls back)."""
        batch: list[Message] = []
        keys: set[str] = set()
        for m in messages:
            if m.source_key is not None:
                if m.source_key in keys:
                    continue
                keys.add(m.source_key)
            batch.append(m)
        if not batch:
            return []
        conn = self.connection()
        ledger = self.call_ledger().copy()
        try:
            if conn.dialect.name not in _ON_CONFLICT:
                raise InvalidMessage("no ON CONFLICT form for this dialect")
            ledger.admit_all(batch)
        except InvalidMessage:  # the probe, then append: the same outcome, the same error
            stored = self.stored_source_keys(keys) if keys else set()
            new = [m for m in batch if m.source_key is None or m.source_key not in stored]
            return self.append_messages(new, run_id=run_id) if new else []
        head = self.conv_head
        rows = [message_values(head.id, m, run_id) for m in batch]
        with_counts(head.model, rows, batch)
        kept: list[tuple[Message, dict[str, Any], int]] = []
        try:
            for i in range(0, len(batch), TAKE_IN_ROWS):
                kept.extend(self._insert_new(conn, batch[i : i + TAKE_IN_ROWS], rows[i : i + TAKE_IN_ROWS]))
        except IntegrityError as exc:  # as append_messages reports it
            raise self._duplicate_key(exc) from None
        if len(kept) != len(batch):  # some were stored already: the ledger of what was written
            ledger = self.call_ledger().copy()
            ledger.admit_all([m for m, _, _ in kept])
        self._ledger = ledger
        if not kept:
            return []
        ids = [i for _, _, i in kept]
        written = [r for _, r, _ in kept]
        self._appended(conn, written, ids)
        self.appended.extend(zip(ids, written))
        return ids

    @staticmethod
    def _insert_new(conn: Connection, batch: Sequence[Message], rows: Sequence[dict[str, Any]]) -> list[tuple[Message, dict[str, Any], int]]:
        """One multi-row ``INSERT ... ON CONFLICT (conversation_id, source_key) DO NOTHING RETURNING
        id, source_key`` of ``rows`` (at most :data:`TAKE_IN_ROWS`; their keys distinct): the
        (message, row, id) of those written, in ``batch`` order. The rows are inserted in VALUES
        order (ids grow with it: the thread's physical order); RETURNING gives them in no promised
        order, so they are matched by id order and source key (a row without a key always goes in)."""
        n = len(rows)
        if n > TAKE_IN_ROWS:
            raise ValueError(f"take_in: at most {TAKE_IN_ROWS} rows per INSERT (got {n})")
        stmt = raw_write(conn, ("take_in", n), lambda dialect: (_multi_insert(dialect.name, n), None))
        params: dict[str, Any] = {}
        for names, row in zip(_TAKE_IN_NAMES, rows):
            for name, attr in names:
                params[name] = row[attr]
        cursor = stmt.execute(conn, params)
        try:
            got = sorted((int(r[0]), r[1]) for r in cursor.fetchall())
        finally:
            cursor.close()
        if len(got) == n:
            return [(m, row, i) for m, row, (i, _) in zip(batch, rows, got)]
        written = {k for _, k in got if k is not None}
        new = [(m, row) for m, row in zip(batch, rows) if row["source_key"] is None or row["source_key"] in written]
        if len(new) != len(got):  # cannot happen: every row without a conflict is returned
            raise EngineError(f"take_in: {len(got)} rows returned for {len(new)} written", code="store_error")
        return [(m, row, i) for (m, row), (i, _) in zip(new, got)]

    def _appended(self, conn: Any, rows: Sequence[Mapping[str, Any]], ids: Sequence[int]) -> None:
        """The conversation row after an append of ``rows`` (ids ``ids``): one UPDATE (compiled
        once) of its counters and kept tokens; the loaded row takes the counters as committed
        values, so the unit of work writes no second UPDATE of them."""
        conv = self._conv
        if conv is not None and inspect(conv).modified:
            self.flush()  # a pending change of the row goes first (the UPDATE below sets absolute counters)
        head = self.conv_head
        counts = [r.get("tokens") for r in rows]
        name = "appended_uncounted" if any(n is None for n in counts) else "appended_counted" if any(counts) else "appended"
        stmt = _APPENDED_STATEMENTS[name]
        count, last, now = head.message_count + len(ids), ids[-1], utcnow()
        raw_write(conn, name, lambda _dialect: (stmt, None)).execute(
            conn, {"cid": head.id, "count": count, "last": last, "now": now, "added": sum(int(n or 0) for n in counts)}).close()
        if conv is not None:
            set_committed_value(conv, "message_count", count)
            set_committed_value(conv, "last_message_id", last)
            set_committed_value(conv, "updated_at", now)
        if self._head is not None:
            self._head.message_count, self._head.last_message_id = count, last
        self.append_changes += len(ids) + 1

    def bulk_append(self, messages: Iterable[Message], *, run_id: int | None = None, batch: int = 5000) -> int:
        """Fast path for imports and benchmarks (Core executemany). Returns the number appended.

        Checks the invariants as the messages stream by (no query per row); a violation anywhere
        raises :class:`engine.core.messages.InvalidMessage` and undoes the batches already sent (they
        run inside a savepoint), so nothing of this call is written.

        Goes through the Table, not the mapped class: the ORM bulk path splits a batch into one
        statement per run of rows with the same NULL columns (~2 rows each for a real conversation)."""
        self.appended_after = None  # not in ``appended``
        ledger = self.call_ledger().copy()
        admit = ledger.admit
        cid = self.conv.id
        try:
            n = self._bulk_insert(messages, admit, cid, run_id, batch)
        except IntegrityError as exc:
            raise self._duplicate_key(exc) from None
        self._ledger = ledger
        return self._after_bulk(n, cid)

    def _duplicate_key(self, exc: IntegrityError) -> EngineError:
        """The one constraint a valid message can break: its ``source_key`` is already stored."""
        return EngineError(
            f"thread {self.conv_head.thread_key!r}: a message with that source_key is already stored ({str(exc.orig).splitlines()[0]})",
            code="duplicate_source_key",
        )

    def _bulk_insert(self, messages: Iterable[Message], admit: Any, cid: int, run_id: int | None, batch: int) -> int:
        n = 0
        buf: list[dict[str, Any]] = []
        sent: list[Message] = []
        model = self.conv.model

        def flush() -> None:
            # counted without the meter's cache: an import of a million messages keeps no texts alive
            with_counts(model, buf, sent, cache=False)
            self.session.execute(insert(MESSAGES), buf)
            add_kept(self.session, cid, buf)

        with self.session.begin_nested():
            for m in messages:
                admit(m)
                values = message_values(cid, m, run_id)
                values["metadata"] = values.pop("meta")  # the column's name; "meta" is the attribute
                buf.append(values)
                sent.append(m)
                if len(buf) >= batch:
                    flush()
                    n += len(buf)
                    buf, sent = [], []
            if buf:
                flush()
                n += len(buf)
        return n

    def _after_bulk(self, n: int, cid: int) -> int:
        if n >= 10_000 and not self.session.get_bind().dialect.name == "sqlite":
            # fresh planner statistics: without them PostgreSQL picks slow plans for keyset pages
            # right after a large import (measured: a middle page 11.7 ms -> 3.0 ms at 20k rows)
            self.session.execute(text("ANALYZE messages"))
        if n:
            self.conv.message_count += n
            self.conv.last_message_id = self.session.scalar(select(func.max(MessageRow.id)).where(MessageRow.conversation_id == cid))
            self.conv.updated_at = utcnow()
        return n

    def unanswered_calls(self) -> list[ToolCall]:
        """Calls of the newest assistant message that have no tool result yet (this transaction's
        own appends included)."""
        return self.call_ledger().pending

    def close_dangling_calls(self, reason: str) -> int:
        """On an idle thread (``thread_busy`` otherwise, nothing written), give every call after the
        boundary that no result answers a closing marker: a ``tool`` result whose text says no
        result was recorded (and why), metadata ``{"missing_result": True, "reason": reason}``.
        Returns how many were written.

        The door can only append, so the marker of a call of an older round lands at the end of
        the thread: it is admitted because :func:`engine.core.units.dangling_calls` found that call
        without a result, and :mod:`engine.core.units` reads it as closing that call (a late closure),
        not as an orphan. Markers for the newest assistant message's calls go through the ledger
        like any result."""
        self.require_idle()
        boundary = self.state().boundary
        messages = self.messages_after(boundary)
        groups = dangling_calls(messages)
        if not groups:
            return 0
        text = f"[{MISSING_RESULT_TEXT}: {reason}]" if reason else f"[{MISSING_RESULT_TEXT}]"
        newest = next((m for m in reversed(messages) if m.role == "assistant"), None)
        pending = {c.id for c in self.call_ledger().pending}

        def marker(c: ToolCall) -> Message:
            return Message("tool", text, tool_call_id=c.id, name=c.name, metadata={META_MISSING_RESULT: True, "reason": reason})

        late = [marker(c) for g in groups if g.assistant is not newest for c in g.calls]
        current = [marker(c) for g in groups if g.assistant is newest for c in g.calls if c.id in pending]
        late += [marker(c) for g in groups if g.assistant is newest for c in g.calls if c.id not in pending]
        rows = [message_values(self.conv.id, m, None) for m in late]
        with_counts(self.conv.model, rows, late)
        if rows:
            self.appended_after = None  # not in ``appended``
        ids = [self.session.execute(insert(MessageRow).values(**row).returning(MessageRow.id)).scalar_one() for row in rows]
        add_kept(self.session, self.conv.id, rows)
        if ids:
            self.conv.message_count += len(ids)
            self.conv.last_message_id = ids[-1]
            self.conv.updated_at = utcnow()
        return len(ids) + len(self.append_messages(current))

    # -- queued requests and runs ---------------------------------------------------------
    def queue_request(self, content: str) -> int:
        row = QueuedRequest(conversation_id=self.conv.id, content=clean_text(content, "request content"), status="queued")
        self.session.add(row)
        self.session.flush()
        self.conv.updated_at = utcnow()
        return row.id

    def take_queued_request(self) -> tuple[int, str] | None:
        """The oldest queued request, marked started (FIFO)."""
        row = self.session.scalars(
            select(QueuedRequest)
            .where(QueuedRequest.conversation_id == self.conv.id, QueuedRequest.status == "queued")
            .order_by(QueuedRequest.id)
            .limit(1)
        ).first()
        if row is None:
            return None
        row.status = "started"
        return row.id, row.content

    def cancel_queued_requests(self) -> int:
        res = self.session.execute(
            update(QueuedRequest)
            .where(QueuedRequest.conversation_id == self.conv.id, QueuedRequest.status == "queued")
            .values(status="cancelled")
        )
        return cast("CursorResult[Any]", res).rowcount or 0  # an UPDATE's result is a cursor result

    def start_run(self, *, request_id: int | None = None) -> int:
        """Start a run. At most one active (running or waiting) run per thread."""
        active = self.session.scalar(
            select(Run.status).where(Run.conversation_id == self.conv.id, Run.status.in_(ACTIVE_RUN_STATUSES)).limit(1)
        )
        if active is not None:
            raise ThreadBusy(self.conv.thread_key, active)
        if request_id is not None:
            req = self.session.get(QueuedRequest, request_id)
            if req is None or req.conversation_id != self.conv.id:
                raise InvalidTransition(f"request {request_id} does not belong to thread {self.conv.thread_key!r}")
            if req.status == "queued":
                req.status = "started"
        run = Run(conversation_id=self.conv.id, status="running", request_id=request_id)
        self.session.add(run)
        self.session.flush()
        self.conv.updated_at = utcnow()
        return run.id

    def set_run_status(self, run_id: int, status: str, *, error_code: str | None = None, error_message: str | None = None) -> None:
        run = self.session.get(Run, run_id)
        if run is None or run.conversation_id != self.conv.id:
            raise InvalidTransition(f"run {run_id} does not belong to thread {self.conv.thread_key!r}")
        allowed = _RUN_TRANSITIONS.get(status)
        if allowed is None:
            raise InvalidTransition(f"unknown run status {status!r}")
        if run.status not in allowed:
            raise InvalidTransition(f"run {run_id} cannot go from {run.status} to {status}")
        run.status = status
        run.error_code = scrub_text(error_code)[:64] if isinstance(error_code, str) else error_code
        run.error_message = scrub_text(error_message)
        if status in ("completed", "failed", "cancelled"):
            run.finished_at = utcnow()
        self.conv.updated_at = utcnow()

    def settle_run(
        self,
        run_id: int,
        status: str,
        *,
        aborted_text: str = ABORTED_TEXT,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> int:
        """End a run as ``status`` (cancelled / failed) and give every call of the last assistant
        message that never ran an aborted result, so no orphan tool call is left (§3.5).
        Returns how many calls were answered; raises :class:`InvalidTransition` if already settled."""
        self.set_run_status(run_id, status, error_code=error_code, error_message=error_message)
        calls = self.unanswered_calls()
        if calls:
            self.append_messages(
                [Message("tool", aborted_text, tool_call_id=c.id, name=c.name, metadata={"aborted": True}) for c in calls],
                run_id=run_id,
            )
        return len(calls)

    # -- model requests and events --------------------------------------------------------
    def record_model_request(
        self,
        *,
        provider: str,
        model: str,
        run_id: int | None = None,
        step: int = 0,
        estimated_tokens: int | None = None,
        threshold: int | None = None,
    ) -> int:
        """Record a request about to be sent (outcome ``pending``); its route becomes the thread's.
        One INSERT (not through the unit of work: it is on every model step's path)."""
        head = self.conv_head
        conn = self.connection()
        cursor = raw_write(conn, "insert_request", lambda _dialect: (_INSERT_REQUEST, _REQUEST_KEYS)).execute(conn, {
            "conversation_id": head.id, "run_id": run_id, "step": step, "provider": provider, "model": model,
            "estimated_tokens": estimated_tokens, "threshold": threshold, "outcome": "pending",
        })
        try:
            rid = cursor.fetchone()[0]
        finally:
            cursor.close()
        if (head.provider, head.model) != (provider, model):
            self.conv.provider, self.conv.model = provider, model  # loads the row (a new route: rare)
        return int(rid)

    def complete_model_request(
        self,
        request_id: int,
        *,
        outcome: str,
        reported_prompt_tokens: int | None = None,
        reported_completion_tokens: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        """Record how a request ended (``ok`` / ``error`` / ``cancelled``) and the provider's usage
        (one UPDATE of this thread's row: no read first)."""
        if outcome not in MODEL_REQUEST_OUTCOMES:
            raise EngineError(f"unknown model request outcome {outcome!r}", code="invalid_outcome")
        conn = self.connection()
        cursor = raw_write(conn, "complete_request", lambda _dialect: (_COMPLETE_REQUEST, None)).execute(conn, {
            "rid": request_id, "cid": self.conv_head.id, "outcome": outcome, "prompt": reported_prompt_tokens,
            "completion": reported_completion_tokens, "code": error_code, "message": scrub_text(error_message),
        })
        rowcount = cursor.rowcount
        cursor.close()
        if rowcount != 1:
            raise EngineError(f"no model request {request_id} on thread {self.conv_head.thread_key!r}", code="not_found")

    def add_event(self, kind: EventKind | str, data: Mapping[str, Any], *, trigger: str | None = None, run_id: int | None = None) -> int:
        """Record one event. ``kind`` must be an :class:`engine.core.events.EventKind` member (or its
        value); anything else raises ``invalid_event`` and nothing is written."""
        row = CompactionEventRow(
            conversation_id=self.conv_head.id, run_id=run_id, kind=event_kind(kind, self.conv_head.thread_key), trigger=trigger,
            data=scrub_text(dict(data)),
        )
        self.session.add(row)
        self.session.flush()
        return row.id

    # -- compaction records ---------------------------------------------------------------
    def _state_row(self) -> CompactionStateRow:
        row = self.session.get(CompactionStateRow, self.conv.id)
        if row is None:
            row = CompactionStateRow(conversation_id=self.conv.id, generation=0, compact_count=0, summary_tokens=0)
            self.session.add(row)
            self.session.flush()
        return row

    def record_prune(
        self,
        offloads: Sequence[Offload],
        *,
        trigger: str,
        run_id: int | None = None,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
    ) -> int:
        """Record replacements whose Workdir writes succeeded; bump the generation. Returns it.

        Each offload's ``generation`` is ignored: every one gets the generation this prune creates.
        Every offload must still be :meth:`prunable` (raises ``already_pruned`` otherwise, nothing
        written): the generation only grows when the surface really changes."""
        if not offloads:
            raise EngineError("record_prune needs at least one offload", code="empty_prune")
        ids = [o.message_id for o in offloads]
        if self.prunable(ids) != ids:
            raise EngineError("a tool result was already pruned, is behind the boundary, or is not a tool result", code="already_pruned")
        st = self._state_row()
        before = st.generation
        after = before + 1
        cid = self.conv.id
        rows = [
            {
                "conversation_id": cid,
                "message_id": o.message_id,
                "tool_name": clean_text(o.tool_name, "tool name")[:200],  # a display label: cut, not refused
                "path": o.path,
                "sha256": o.sha256,
                "preview": o.preview,
                "original_tokens": o.original_tokens,
                "preview_tokens": o.preview_tokens,
                "generation": after,
            }
            for o in offloads
        ]
        try:  # one Core executemany (no unit of work, no ids read back: nothing holds the rows as objects)
            self.connection().execute(insert(_OFFLOADS), rows)
        except IntegrityError:
            raise EngineError("a tool result was already pruned (offload exists)", code="already_pruned") from None
        st.generation = after
        st.updated_at = utcnow()
        self.session.add(
            CompactionHistoryRow(
                conversation_id=self.conv.id,
                run_id=run_id,
                kind="prune",
                trigger=trigger,
                generation_before=before,
                generation_after=after,
                boundary_before=st.boundary_message_id,
                boundary_after=st.boundary_message_id,
                pruned_message_ids=ids,
                tokens_before=tokens_before,
                tokens_after=tokens_after,
            )
        )
        try:
            self.session.flush()
        except IntegrityError:
            raise EngineError("a tool result was already pruned (offload exists)", code="already_pruned") from None
        return after

    def persist_summary(
        self,
        *,
        expected_boundary: int | None,
        expected_boundary_hash: str | None,
        new_boundary: int,
        new_boundary_hash: str,
        summary: str,
        summary_tokens: int,
        kind: str,
        trigger: str,
        run_id: int | None = None,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
        expected_pins_version: int | None = None,
    ) -> int:
        """Compare-and-swap the boundary and rolling summary; bump generation and count.
        ``expected_pins_version``: the pins version the summary was computed under (None: not
        compared); a pin or policy change since then is a conflict too.

        Raises :class:`CompareAndSwapConflict` (nothing written) if the stored boundary or the hash of
        the boundary message no longer matches what the caller compacted against. The summary is
        stored under the data rules (NUL escaped; a lone surrogate refused: ``invalid_summary``)."""
        summary = clean_text(summary, "summary", code="invalid_summary")
        st = self._state_row()
        if expected_pins_version is not None and (st.pins_version or 0) != expected_pins_version:
            raise CompareAndSwapConflict(
                f"pins or the thread policy changed: expected version {expected_pins_version}, found {st.pins_version}; nothing written"
            )
        if st.boundary_message_id != expected_boundary or (st.boundary_hash or None) != (expected_boundary_hash or None):
            raise CompareAndSwapConflict(
                f"boundary moved: expected {expected_boundary}, found {st.boundary_message_id}; nothing written"
            )
        if expected_boundary is not None and new_boundary <= expected_boundary:
            raise CompareAndSwapConflict(f"new boundary {new_boundary} does not advance past {expected_boundary}")
        msg = self.message(new_boundary)
        if msg is None or msg.content_hash() != new_boundary_hash:
            raise CompareAndSwapConflict(f"boundary message {new_boundary} changed or is missing; nothing written")
        before = st.generation
        self.session.add(
            CompactionHistoryRow(
                conversation_id=self.conv.id,
                run_id=run_id,
                kind=kind,
                trigger=trigger,
                generation_before=before,
                generation_after=before + 1,
                boundary_before=st.boundary_message_id,
                boundary_after=new_boundary,
                summary=summary,
                tokens_before=tokens_before,
                tokens_after=tokens_after,
            )
        )
        st.boundary_message_id = new_boundary
        st.boundary_hash = new_boundary_hash
        st.summary = summary
        st.summary_tokens = summary_tokens
        st.generation = before + 1
        st.compact_count += 1
        self.conv.compactions += 1  # the thread list's compactions sort (migration 0006)
        st.updated_at = utcnow()
        self.conv.updated_at = utcnow()
        self.session.flush()
        return st.generation

    # -- pins and the thread policy -----------------------------------------------------------
    def _bump_pins(self) -> int:
        st = self._state_row()
        st.pins_version = (st.pins_version or 0) + 1
        st.updated_at = utcnow()
        self.conv.updated_at = utcnow()
        return st.pins_version

    def pin_round(self, message_id: int) -> list[int]:
        """The ids a pin of ``message_id`` covers: the message, and for a message of a tool round
        the whole round as stored now (the call and every result answering it). Raises
        ``message_not_found`` for an id that is not a message of this thread."""
        from ..core.units import pinned_rounds  # pure

        msg = self.message(int(message_id))
        if msg is None:
            raise EngineError(f"thread {self.conv.thread_key!r} has no message #{message_id}", code="message_not_found")
        around: list[Message] = [msg]
        if msg.role == "tool" and msg.tool_call_id:
            # its call: the newest assistant message before it that made the call
            q = (select(MessageRow).where(MessageRow.conversation_id == self.conv.id, MessageRow.role == "assistant",
                                          MessageRow.id < msg.id).order_by(MessageRow.id.desc()).limit(200))
            for row in self.session.scalars(q):
                cand = to_message(row)
                if any(c.id == msg.tool_call_id for c in cand.tool_calls):
                    around.insert(0, cand)
                    break
        head = around[0]
        calls = [c.id for c in head.tool_calls] if head.role == "assistant" else []
        if calls:
            q = select(MessageRow).where(MessageRow.conversation_id == self.conv.id, MessageRow.role == "tool",
                                         MessageRow.id > head.id, MessageRow.tool_call_id.in_(calls)).order_by(MessageRow.id)
            around = [head] + [to_message(r) for r in self.session.scalars(q)]
        return sorted(pinned_rounds(around, {int(message_id)}))

    def pinned_ids(self) -> list[int]:
        """The ids pinned in this thread (as stored), in id order."""
        q = select(MessagePin.message_id).where(MessagePin.conversation_id == self.conv.id).order_by(MessagePin.message_id)
        return [int(i) for i in self.session.scalars(q)]

    def pin(self, message_id: int, *, operator: str, reason: str | None = None) -> list[int]:
        """Pin a message and its tool round (:meth:`pin_round`); bump ``pins_version``. Returns the
        ids newly pinned (empty when all were pinned already: nothing changes)."""
        ids = self.pin_round(message_id)
        have = set(self.pinned_ids())
        new = [i for i in ids if i not in have]
        if not new:
            return []
        why = clean_text(reason, "reason", code="invalid_pin") if reason else None
        who = clean_text(operator, "operator", code="invalid_pin")[:200]
        for i in new:
            self.session.add(MessagePin(conversation_id=self.conv.id, message_id=i, pinned_at=utcnow(), pinned_by=who, reason=why))
        self._bump_pins()
        try:
            self.session.flush()
        except IntegrityError:
            raise EngineError("the message was pinned by another writer at the same time; try again", code="pin_conflict") from None
        return new

    def unpin(self, message_id: int) -> list[int]:
        """Unpin a message and its tool round; bump ``pins_version``. Returns the ids unpinned."""
        ids = set(self.pin_round(message_id))
        gone = [i for i in self.pinned_ids() if i in ids]
        if not gone:
            return []
        for row in self.session.scalars(select(MessagePin).where(MessagePin.conversation_id == self.conv.id, MessagePin.message_id.in_(gone))):
            self.session.delete(row)
        self._bump_pins()
        self.session.flush()
        return gone

    def thread_policy(self) -> dict[str, Any]:
        """This thread's policy overrides (empty when none)."""
        row = self.session.get(ThreadPolicyRow, self.conv.id)
        return dict(row.overrides) if row is not None and isinstance(row.overrides, dict) else {}

    def set_thread_policy(self, overrides: Mapping[str, Any], *, operator: str) -> None:
        """Replace this thread's policy overrides (an empty mapping removes them); bump
        ``pins_version`` so cached snapshots and compactions in flight see the change."""
        values = dict(overrides)
        check_json(values, "thread policy", code="invalid_policy")
        row = self.session.get(ThreadPolicyRow, self.conv.id)
        if row is None:
            row = ThreadPolicyRow(conversation_id=self.conv.id, overrides=values, updated_at=utcnow(), updated_by=operator[:200])
            self.session.add(row)
        else:
            row.overrides = values
            row.updated_at = utcnow()
            row.updated_by = operator[:200]
        self._bump_pins()
        self.session.flush()

    # -- audit ----------------------------------------------------------------------------
    def operator(self) -> str:
        """Who acts in this transaction (:func:`session_operator`)."""
        return session_operator(self.session)

    def record_audit(
        self,
        action: str,
        *,
        operator: str | None = None,
        display_name: str | None = None,
        reason: str | None = None,
        before: Mapping[str, Any] | None = None,
        after: Mapping[str, Any] | None = None,
    ) -> int:
        """Write one audit row for an operator action on this thread, in this transaction (so it
        is kept exactly when the action is). ``action`` is one of :data:`AUDIT_ACTIONS` (else
        ``invalid_audit``, nothing written); ``operator`` defaults to :meth:`operator`;
        ``before`` / ``after`` are JSON objects describing the state. Returns the row id."""
        if action not in AUDIT_ACTIONS:
            raise EngineError(f"unknown audit action {action!r} (expected one of {', '.join(AUDIT_ACTIONS)})", code="invalid_audit")
        who = operator if operator else self.operator()
        for name, value in (("before", before), ("after", after)):
            if value is not None:
                check_json(dict(value), f"audit {name}", code="invalid_audit")
        row = AuditRow(
            conversation_id=self.conv.id,
            thread_key=self.conv.thread_key,
            action=action,
            operator=clean_text(str(who), "operator", code="invalid_audit")[:200],
            display_name=(clean_text(display_name, "display name", code="invalid_audit", limit=200) or None) if display_name else None,
            reason=(clean_text(reason, "reason", code="invalid_audit") or None) if reason else None,
            at=utcnow(),
            before=dict(before) if before is not None else None,
            after=dict(after) if after is not None else None,
        )
        self.session.add(row)
        self.session.flush()
        return row.id
