"""The session store: repositories over the schema, the conversation row lock, keyset queries.

This package is the only place in the code with SQL. Callers get plain records from
:mod:`engine.views` and :class:`engine.messages.Message`, never ORM rows.

The lock: :meth:`Store.locked` opens a transaction that holds the conversation row lock until it
commits (PostgreSQL ``SELECT … FOR UPDATE``; SQLite ``BEGIN IMMEDIATE``, which takes the database
write lock). Normal intake (append a message, queue a request, start / finish / interrupt / cancel
a run) and compaction writes all go through it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping, Sequence

from sqlalchemy import func, insert, or_, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from ..errors import CompareAndSwapConflict, EngineError, ThreadBusy, ThreadNotFound
from ..messages import InvalidMessage, Message, ToolCall
from ..views import (
    ACTIVE_RUN_STATUSES,
    CompactionEvent,
    CompactionState,
    HistoryRecord,
    ModelRequest,
    Offload,
    RunInfo,
    Snapshot,
    StoredMessage,
    ThreadInfo,
)
from . import db
from .models import (
    CompactionEventRow,
    CompactionHistoryRow,
    CompactionStateRow,
    Conversation,
    MessageRow,
    ModelRequestRow,
    QueuedRequest,
    Run,
    Setting,
    ToolOffloadRow,
    utcnow,
)


_MESSAGES = MessageRow.__table__


ABORTED_TEXT = "aborted: the run was cancelled before this tool call ran"


class InvalidTransition(EngineError):
    code = "invalid_transition"


class DuplicateThread(EngineError):
    code = "duplicate_thread"


class ThreadLocked(db.DatabaseLocked):
    """``Store.locked(..., nowait=True)`` found the conversation locked by another writer."""

    code = "thread_locked"


def _aware(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


_MESSAGE_COLUMNS = (MessageRow.id, MessageRow.role, MessageRow.content, MessageRow.tool_calls, MessageRow.tool_call_id, MessageRow.name, MessageRow.meta)


def _to_message(row: Any) -> Message:
    """A domain message from an ORM row or a plain row of :data:`_MESSAGE_COLUMNS`."""
    raw_calls = row.tool_calls or []
    if not isinstance(raw_calls, list) or not all(isinstance(c, dict) for c in raw_calls):
        raise InvalidMessage(f"message {row.id}: tool_calls must be a list of objects")
    try:
        calls = tuple(
            ToolCall(id=str(c.get("id") or ""), name=str(c.get("name") or ""), arguments=c.get("arguments") if isinstance(c.get("arguments"), str) else "{}")
            for c in raw_calls
        )
    except InvalidMessage as exc:
        raise InvalidMessage(f"message {row.id} has a malformed tool call: {exc.message}") from None
    return Message(
        role=row.role,  # type: ignore[arg-type]
        content=row.content,
        id=row.id,
        tool_calls=calls,
        tool_call_id=row.tool_call_id,
        name=row.name,
        metadata=row.meta or {},
    )


def _message_values(conversation_id: int, m: Message, run_id: int | None) -> dict[str, Any]:
    if m.id is not None:
        raise EngineError(f"message already persisted with id {m.id}", code="already_persisted")
    return {
        "conversation_id": conversation_id,
        "role": m.role,
        "content": m.content,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls] or None,
        "tool_call_id": m.tool_call_id,
        "name": m.name,
        "meta": dict(m.metadata) or None,
        "run_id": run_id,
        "created_at": utcnow(),
    }


def _state(row: CompactionStateRow | None, conversation_id: int) -> CompactionState:
    if row is None:
        return CompactionState(conversation_id=conversation_id)
    return CompactionState(
        conversation_id=conversation_id,
        boundary=row.boundary_message_id,
        summary=row.summary,
        summary_tokens=row.summary_tokens,
        generation=row.generation,
        boundary_hash=row.boundary_hash,
        compact_count=row.compact_count,
        updated_at=_aware(row.updated_at),
    )


def _offload(row: ToolOffloadRow) -> Offload:
    return Offload(
        message_id=row.message_id,
        tool_name=row.tool_name,
        path=row.path,
        sha256=row.sha256,
        preview=row.preview,
        original_tokens=row.original_tokens,
        preview_tokens=row.preview_tokens,
        generation=row.generation,
        created_at=_aware(row.created_at),
    )


def _event(row: CompactionEventRow) -> CompactionEvent:
    return CompactionEvent(
        id=row.id,
        conversation_id=row.conversation_id,
        run_id=row.run_id,
        kind=row.kind,
        trigger=row.trigger,
        created_at=_aware(row.created_at),  # type: ignore[arg-type]
        data=dict(row.data or {}),
    )


def _history(row: CompactionHistoryRow) -> HistoryRecord:
    return HistoryRecord(
        id=row.id,
        conversation_id=row.conversation_id,
        kind=row.kind,  # type: ignore[arg-type]
        trigger=row.trigger,
        generation_before=row.generation_before,
        generation_after=row.generation_after,
        boundary_before=row.boundary_before,
        boundary_after=row.boundary_after,
        summary=row.summary,
        pruned_message_ids=tuple(row.pruned_message_ids or ()),
        tokens_before=row.tokens_before,
        tokens_after=row.tokens_after,
        created_at=_aware(row.created_at),  # type: ignore[arg-type]
    )


def _run(row: Run) -> RunInfo:
    return RunInfo(
        id=row.id,
        conversation_id=row.conversation_id,
        status=row.status,  # type: ignore[arg-type]
        created_at=_aware(row.created_at),  # type: ignore[arg-type]
        finished_at=_aware(row.finished_at),
        error_code=row.error_code,
        error_message=row.error_message,
    )


def _model_request(row: ModelRequestRow) -> ModelRequest:
    return ModelRequest(
        id=row.id,
        conversation_id=row.conversation_id,
        run_id=row.run_id,
        step=row.step,
        provider=row.provider,
        model=row.model,
        estimated_tokens=row.estimated_tokens,
        threshold=row.threshold,
        reported_prompt_tokens=row.reported_prompt_tokens,
        reported_completion_tokens=row.reported_completion_tokens,
        outcome=row.outcome,
        error_code=row.error_code,
        error_message=row.error_message,
        created_at=_aware(row.created_at),  # type: ignore[arg-type]
    )


# -- the locked transaction -------------------------------------------------------------------


@dataclass(frozen=True)
class NewOffload:
    """An offload to record together with a prune (the Workdir write already succeeded)."""

    message_id: int
    tool_name: str
    path: str
    sha256: str
    preview: str
    original_tokens: int
    preview_tokens: int


_RUN_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "completed": ("running",),
    "failed": ("running", "waiting_for_user"),
    "waiting_for_user": ("running",),
    "running": ("waiting_for_user",),
    "cancelled": ("running", "waiting_for_user", "queued"),
}


class Locked:
    """A transaction holding one conversation's row lock. Use only inside ``Store.locked``."""

    def __init__(self, session: Session, conv: Conversation) -> None:
        self.session = session
        self.conv = conv

    @property
    def conversation_id(self) -> int:
        return self.conv.id

    @property
    def thread_key(self) -> str:
        return self.conv.thread_key

    def configure(self, *, system_prompt: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Set the agent's system prompt and tool schemas (part of every envelope of this thread)."""
        if system_prompt is not None:
            self.conv.system_prompt = system_prompt
        if tools is not None:
            self.conv.tools = [dict(t) for t in tools]
        self.conv.updated_at = utcnow()  # part of every envelope: readers' cached status is stale

    # -- idle check -----------------------------------------------------------------------
    def busy_reason(self) -> str | None:
        """Why the thread is busy (``running`` / ``waiting_for_user`` / ``queued``), or None if idle."""
        s = self.session
        statuses = set(
            s.scalars(
                select(Run.status).where(Run.conversation_id == self.conv.id, Run.status.in_(ACTIVE_RUN_STATUSES))
            )
        )
        if "running" in statuses:
            return "running"
        if "waiting_for_user" in statuses:
            return "waiting_for_user"
        queued = s.scalar(
            select(QueuedRequest.id).where(QueuedRequest.conversation_id == self.conv.id, QueuedRequest.status == "queued").limit(1)
        )
        return "queued" if queued is not None else None

    def require_idle(self) -> None:
        reason = self.busy_reason()
        if reason is not None:
            raise ThreadBusy(self.conv.thread_key, reason)

    # -- intake ---------------------------------------------------------------------------
    def append_message(self, message: Message, *, run_id: int | None = None) -> int:
        return self.append_messages([message], run_id=run_id)[0]

    def append_messages(self, messages: Sequence[Message], *, run_id: int | None = None) -> list[int]:
        """Append in order; returns the new ids (monotonic: physical order)."""
        if not messages:
            return []
        ids: list[int] = []
        for m in messages:
            ids.append(self.session.execute(insert(MessageRow).values(**_message_values(self.conv.id, m, run_id)).returning(MessageRow.id)).scalar_one())
        self.conv.message_count += len(ids)
        self.conv.last_message_id = ids[-1]
        self.conv.updated_at = utcnow()
        return ids

    def bulk_append(self, messages: Iterable[Message], *, run_id: int | None = None, batch: int = 5000) -> int:
        """Fast path for imports and benchmarks (Core executemany). Returns the number appended.

        Goes through the Table, not the mapped class: the ORM bulk path splits a batch into one
        statement per run of rows with the same NULL columns (~2 rows each for a real conversation)."""
        n = 0
        buf: list[dict[str, Any]] = []
        for m in messages:
            values = _message_values(self.conv.id, m, run_id)
            values["metadata"] = values.pop("meta")  # the column's name; "meta" is the attribute
            buf.append(values)
            if len(buf) >= batch:
                self.session.execute(insert(_MESSAGES), buf)
                n += len(buf)
                buf = []
        if buf:
            self.session.execute(insert(_MESSAGES), buf)
            n += len(buf)
        if n >= 10_000 and not self.session.get_bind().dialect.name == "sqlite":
            # fresh planner statistics: without them PostgreSQL picks slow plans for keyset pages
            # right after a large import (measured: a middle page 11.7 ms -> 3.0 ms at 20k rows)
            self.session.execute(text("ANALYZE messages"))
        if n:
            self.conv.message_count += n
            self.conv.last_message_id = self.session.scalar(
                select(func.max(MessageRow.id)).where(MessageRow.conversation_id == self.conv.id)
            )
            self.conv.updated_at = utcnow()
        return n

    def queue_request(self, content: str) -> int:
        row = QueuedRequest(conversation_id=self.conv.id, content=content, status="queued")
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
        run.error_code = error_code
        run.error_message = error_message
        if status in ("completed", "failed", "cancelled"):
            run.finished_at = utcnow()
        self.conv.updated_at = utcnow()

    def unanswered_calls(self) -> list[ToolCall]:
        """Calls of the newest assistant message that have no tool result yet."""
        last = self.session.scalars(
            select(MessageRow)
            .where(MessageRow.conversation_id == self.conv.id, MessageRow.role == "assistant")
            .order_by(MessageRow.id.desc())
            .limit(1)
        ).first()
        if last is None or not last.tool_calls:
            return []
        answered = set(
            self.session.scalars(
                select(MessageRow.tool_call_id).where(
                    MessageRow.conversation_id == self.conv.id, MessageRow.role == "tool", MessageRow.id > last.id
                )
            )
        )
        return [c for c in _to_message(last).tool_calls if c.id not in answered]

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

    def cancel_queued_requests(self) -> int:
        res = self.session.execute(
            update(QueuedRequest)
            .where(QueuedRequest.conversation_id == self.conv.id, QueuedRequest.status == "queued")
            .values(status="cancelled")
        )
        return res.rowcount or 0

    # -- compaction state -----------------------------------------------------------------
    def _state_row(self) -> CompactionStateRow:
        row = self.session.get(CompactionStateRow, self.conv.id)
        if row is None:
            row = CompactionStateRow(conversation_id=self.conv.id, generation=0, compact_count=0, summary_tokens=0)
            self.session.add(row)
            self.session.flush()
        return row

    def state(self) -> CompactionState:
        return _state(self.session.get(CompactionStateRow, self.conv.id), self.conv.id)

    def messages_after(self, boundary: int | None) -> list[Message]:
        # plain column rows, not ORM objects: this is the pre-step hot path and may read a long thread
        q = select(*_MESSAGE_COLUMNS).where(MessageRow.conversation_id == self.conv.id)
        if boundary is not None:
            q = q.where(MessageRow.id > boundary)
        return [_to_message(r) for r in self.session.execute(q.order_by(MessageRow.id))]

    def message(self, message_id: int) -> Message | None:
        row = self.session.get(MessageRow, message_id)
        return _to_message(row) if row is not None and row.conversation_id == self.conv.id else None

    def last_user_message(self) -> Message | None:
        """The newest persisted user message (the user's current request), wherever the boundary is."""
        row = self.session.scalars(
            select(MessageRow)
            .where(MessageRow.conversation_id == self.conv.id, MessageRow.role == "user")
            .order_by(MessageRow.id.desc())
            .limit(1)
        ).first()
        return _to_message(row) if row is not None else None

    def offloads(self) -> dict[int, Offload]:
        rows = self.session.scalars(select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == self.conv.id))
        return {r.message_id: _offload(r) for r in rows}

    def prunable(self, message_ids: Sequence[int]) -> list[int]:
        """The ids that may still be pruned: tool results of this thread, after the boundary, not
        offloaded yet (a concurrent run or a moved boundary may have taken the others)."""
        if not message_ids:
            return []
        st = self.state()
        q = select(MessageRow.id).where(
            MessageRow.conversation_id == self.conv.id, MessageRow.role == "tool", MessageRow.id.in_(list(message_ids))
        )
        if st.boundary is not None:
            q = q.where(MessageRow.id > st.boundary)
        ok = set(self.session.scalars(q))
        done = set(self.session.scalars(select(ToolOffloadRow.message_id).where(ToolOffloadRow.message_id.in_(list(ok)))))
        return [i for i in message_ids if i in ok and i not in done]

    def record_prune(
        self,
        offloads: Sequence[NewOffload],
        *,
        trigger: str,
        run_id: int | None = None,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
    ) -> int:
        """Record replacements whose Workdir writes succeeded; bump the generation. Returns it.

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
        for o in offloads:
            self.session.add(
                ToolOffloadRow(
                    conversation_id=self.conv.id,
                    message_id=o.message_id,
                    tool_name=o.tool_name,
                    path=o.path,
                    sha256=o.sha256,
                    preview=o.preview,
                    original_tokens=o.original_tokens,
                    preview_tokens=o.preview_tokens,
                    generation=after,
                )
            )
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
                pruned_message_ids=[o.message_id for o in offloads],
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
    ) -> int:
        """Compare-and-swap the boundary and rolling summary; bump generation and count.

        Raises :class:`CompareAndSwapConflict` (nothing written) if the stored boundary or the hash of
        the boundary message no longer matches what the caller compacted against."""
        st = self._state_row()
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
        st.updated_at = utcnow()
        self.conv.updated_at = utcnow()
        self.session.flush()
        return st.generation

    def snapshot(self, *, with_busy: bool = True) -> Snapshot:
        return _snapshot(self.session, self.conv, with_busy=with_busy)

    def add_event(self, kind: str, data: Mapping[str, Any], *, trigger: str | None = None, run_id: int | None = None) -> int:
        return _add_event(self.session, self.conv.id, kind, data, trigger=trigger, run_id=run_id)


def _snapshot(session: Session, conv: Conversation, *, with_busy: bool = True) -> Snapshot:
    tx = Locked(session, conv)
    state = tx.state()
    q = select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == conv.id)
    if state.boundary is not None:  # offloads behind the boundary are not on the surface
        q = q.where(ToolOffloadRow.message_id > state.boundary)
    return Snapshot(
        thread=conv.thread_key,
        conversation_id=conv.id,
        system_prompt=conv.system_prompt,
        tools=tuple(conv.tools or ()),
        provider=conv.provider,
        model=conv.model,
        state=state,
        messages=tuple(tx.messages_after(state.boundary)),
        offloads={r.message_id: _offload(r) for r in session.scalars(q)},
        current_request=tx.last_user_message(),
        busy_reason=tx.busy_reason() if with_busy else None,  # type: ignore[arg-type]
    )


def _add_event(session: Session, conversation_id: int, kind: str, data: Mapping[str, Any], *, trigger: str | None, run_id: int | None) -> int:
    row = CompactionEventRow(conversation_id=conversation_id, run_id=run_id, kind=kind, trigger=trigger, data=dict(data))
    session.add(row)
    session.flush()
    return row.id


# -- the store --------------------------------------------------------------------------------


class Store:
    """One session database. Thread-safe: each operation uses its own session and connection."""

    def __init__(self, engine: Engine, url, schema: db.SchemaInfo) -> None:
        self.engine = engine
        self.url = url
        self.schema = schema
        self.is_sqlite = engine.dialect.name == "sqlite"

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, url_or_path: str, *, create: bool = False) -> "Store":
        """Open a session database. ``create=True`` creates or upgrades the schema first.

        Raises a :class:`db.StoreError` subclass with a one-line message for a bad URL, an
        unreachable server, a file that is not a database, or a missing / outdated schema. A
        schema newer than the code opens read-only: every write raises :class:`db.SchemaTooNew`."""
        url = db.normalize_url(url_or_path)
        if create:
            db.migrate(url.render_as_string(hide_password=False))
        db.ensure_sqlite_file(url, create=False)
        engine = db.create_db_engine(url)
        try:
            db.check_reachable(engine, url)
            info = db.schema_info(engine)
        except db.StoreError:
            engine.dispose()
            raise
        except (DBAPIError, SQLAlchemyError) as exc:
            engine.dispose()
            raise db.translate_error(exc, url) from None
        if info.status in ("missing", "outdated", "unstamped"):
            engine.dispose()
            raise info.problem(url)  # type: ignore[misc]
        return cls(engine, url, info)

    @property
    def writable(self) -> bool:
        return self.schema.status == "current"

    @property
    def display_url(self) -> str:
        return db.display_url(self.url)

    def close(self) -> None:
        self.engine.dispose()

    def _check_writable(self) -> None:
        problem = self.schema.problem(self.url)
        if problem is not None:
            raise problem

    # -- transactions ---------------------------------------------------------------------
    @contextmanager
    def _session(self, *, write: bool, nowait: bool = False, consistent: bool = False) -> Iterator[Session]:
        if write:
            self._check_writable()
        try:
            with Session(self.engine, expire_on_commit=False) as s:
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
        except IntegrityError:
            raise  # a constraint the caller handles (e.g. DuplicateThread), not a connection problem
        except DBAPIError as exc:
            raise db.translate_error(exc, self.url) from None

    @contextmanager
    def locked(self, thread: str | int, *, nowait: bool = False) -> Iterator[Locked]:
        """Hold the conversation row lock until the block ends; commit on success, roll back on error.

        Waits for another holder (SQLite: up to the busy timeout); ``nowait=True`` raises
        :class:`ThreadLocked` at once instead."""
        acquired = False
        try:
            with self._session(write=True, nowait=nowait) as s:
                q = select(Conversation).where(
                    Conversation.id == thread if isinstance(thread, int) else Conversation.thread_key == thread
                )
                if not self.is_sqlite:
                    q = q.with_for_update(nowait=nowait)
                conv = s.scalars(q).first()
                if conv is None:
                    raise ThreadNotFound(f"no thread {thread!r}")
                acquired = True
                yield Locked(s, conv)
        except db.DatabaseLocked:
            if acquired:
                raise
            raise ThreadLocked(f"thread {thread!r} is locked by another writer; try again later") from None

    # -- settings -------------------------------------------------------------------------
    def get_setting(self, key: str) -> dict[str, Any] | None:
        with self._session(write=False) as s:
            row = s.get(Setting, key)
            return dict(row.value) if row is not None else None

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
        if not key or not isinstance(key, str):
            raise EngineError("thread key must be a non-empty string", code="invalid_thread_key")
        try:
            with self._session(write=True) as s:
                conv = Conversation(
                    thread_key=key,
                    title=title,
                    agent=agent,
                    provider=provider,
                    model=model,
                    system_prompt=system_prompt,
                    tools=[dict(t) for t in tools],
                    message_count=0,
                )
                s.add(conv)
                s.flush()
                s.add(CompactionStateRow(conversation_id=conv.id, generation=0, compact_count=0, summary_tokens=0))
                return conv.id
        except IntegrityError:
            raise DuplicateThread(f"thread {key!r} already exists") from None

    def conversation_config(self, key: str) -> tuple[str, tuple[dict[str, Any], ...], str | None, str | None]:
        """(system prompt, tool schemas, provider, model) of a thread."""
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return conv.system_prompt, tuple(conv.tools or ()), conv.provider, conv.model

    def set_route(self, key: str, *, provider: str, model: str) -> None:
        with self.locked(key) as tx:
            tx.conv.provider = provider
            tx.conv.model = model

    @staticmethod
    def _conv(s: Session, key: str | int) -> Conversation:
        q = select(Conversation).where(Conversation.id == key if isinstance(key, int) else Conversation.thread_key == key)
        conv = s.scalars(q).first()
        if conv is None:
            raise ThreadNotFound(f"no thread {key!r}")
        return conv

    # -- intake shortcuts (each takes the lock) ------------------------------------------
    def append_message(self, key: str, message: Message, *, run_id: int | None = None) -> int:
        with self.locked(key) as tx:
            return tx.append_message(message, run_id=run_id)

    def queue_request(self, key: str, content: str) -> int:
        with self.locked(key) as tx:
            return tx.queue_request(content)

    def start_run(self, key: str, *, request_id: int | None = None) -> int:
        with self.locked(key) as tx:
            return tx.start_run(request_id=request_id)

    def finish_run(self, key: str, run_id: int, *, failed: bool = False, error_code: str | None = None, error_message: str | None = None) -> None:
        with self.locked(key) as tx:
            tx.set_run_status(run_id, "failed" if failed else "completed", error_code=error_code, error_message=error_message)

    def interrupt_run(self, key: str, run_id: int) -> None:
        with self.locked(key) as tx:
            tx.set_run_status(run_id, "waiting_for_user")

    def resume_run(self, key: str, run_id: int) -> None:
        with self.locked(key) as tx:
            tx.set_run_status(run_id, "running")

    def cancel_run(self, key: str, run_id: int) -> int:
        """Cancel a run; calls it left unanswered get aborted results. Returns how many."""
        with self.locked(key) as tx:
            return tx.settle_run(run_id, "cancelled")

    def busy_reason(self, key: str) -> str | None:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return Locked(s, conv).busy_reason()

    # -- model requests -------------------------------------------------------------------
    def record_model_request(
        self,
        key: str,
        *,
        provider: str,
        model: str,
        run_id: int | None = None,
        step: int = 0,
        estimated_tokens: int | None = None,
        threshold: int | None = None,
    ) -> int:
        with self._session(write=True) as s:
            conv = self._conv(s, key)
            row = ModelRequestRow(
                conversation_id=conv.id,
                run_id=run_id,
                step=step,
                provider=provider,
                model=model,
                estimated_tokens=estimated_tokens,
                threshold=threshold,
                outcome="pending",
            )
            s.add(row)
            conv.provider, conv.model = provider, model
            s.flush()
            return row.id

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
        with self._session(write=True) as s:
            row = s.get(ModelRequestRow, request_id)
            if row is None:
                raise EngineError(f"no model request {request_id}", code="not_found")
            row.outcome = outcome
            row.reported_prompt_tokens = reported_prompt_tokens
            row.reported_completion_tokens = reported_completion_tokens
            row.error_code = error_code
            row.error_message = error_message

    def last_completed_request(self, key: str) -> ModelRequest | None:
        """The newest completed, routed model request (pressure compaction needs one)."""
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            row = s.scalars(
                select(ModelRequestRow)
                .where(ModelRequestRow.conversation_id == conv.id, ModelRequestRow.outcome == "ok")
                .order_by(ModelRequestRow.id.desc())
                .limit(1)
            ).first()
            return _model_request(row) if row is not None else None

    def model_requests(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[ModelRequest]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(ModelRequestRow).where(ModelRequestRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(ModelRequestRow.id > after_id)
            return [_model_request(r) for r in s.scalars(q.order_by(ModelRequestRow.id).limit(limit))]

    def add_event(self, key: str, kind: str, data: Mapping[str, Any], *, trigger: str | None = None, run_id: int | None = None) -> int:
        """Record an event outside a lock (e.g. a provider error observed by the harness)."""
        with self._session(write=True) as s:
            conv = self._conv(s, key)
            return _add_event(s, conv.id, kind, data, trigger=trigger, run_id=run_id)

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
            rows = s.execute(q.order_by(Conversation.thread_key).limit(limit)).all()
            ids = [c.id for c, _ in rows]
            busy = self._busy_map(s, ids)
            return [self._thread_info(c, st, busy.get(c.id)) for c, st in rows]

    def thread(self, key: str) -> ThreadInfo:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            st = s.get(CompactionStateRow, conv.id)
            return self._thread_info(conv, st, self._busy_map(s, [conv.id]).get(conv.id))

    @staticmethod
    def _busy_map(s: Session, ids: Sequence[int]) -> dict[int, str]:
        if not ids:
            return {}
        out: dict[int, str] = {}
        order = {"queued": 0, "waiting_for_user": 1, "running": 2}
        for cid, status in s.execute(
            select(Run.conversation_id, Run.status).where(Run.conversation_id.in_(ids), Run.status.in_(ACTIVE_RUN_STATUSES))
        ):
            if order[status] > order.get(out.get(cid, ""), -1):
                out[cid] = status
        for (cid,) in s.execute(
            select(QueuedRequest.conversation_id)
            .where(QueuedRequest.conversation_id.in_(ids), QueuedRequest.status == "queued")
            .distinct()
        ):
            out.setdefault(cid, "queued")
        return out

    @staticmethod
    def _thread_info(c: Conversation, st: CompactionStateRow | None, busy: str | None) -> ThreadInfo:
        return ThreadInfo(
            id=c.id,
            key=c.thread_key,
            title=c.title,
            agent=c.agent,
            provider=c.provider,
            model=c.model,
            message_count=c.message_count,
            generation=st.generation if st else 0,
            compact_count=st.compact_count if st else 0,
            boundary=st.boundary_message_id if st else None,
            busy_reason=busy,  # type: ignore[arg-type]
            created_at=_aware(c.created_at),  # type: ignore[arg-type]
            updated_at=_aware(c.updated_at),  # type: ignore[arg-type]
        )

    def messages_page(
        self, key: str, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500
    ) -> list[StoredMessage]:
        """A page of messages in ascending id order: the first ``limit`` after ``after_id``, or the
        last ``limit`` before ``before_id`` (keyset; never OFFSET)."""
        if limit <= 0:
            return []
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(MessageRow, ToolOffloadRow.sha256).outerjoin(
                ToolOffloadRow, ToolOffloadRow.message_id == MessageRow.id
            ).where(MessageRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(MessageRow.id > after_id)
            if before_id is not None:
                q = q.where(MessageRow.id < before_id)
            if before_id is not None and after_id is None:
                rows = list(s.execute(q.order_by(MessageRow.id.desc()).limit(limit)).all())
                rows.reverse()
            else:
                rows = list(s.execute(q.order_by(MessageRow.id).limit(limit)).all())
            return [
                StoredMessage(message=_to_message(r), conversation_id=conv.id, created_at=_aware(r.created_at), offload_sha256=sha)  # type: ignore[arg-type]
                for r, sha in rows
            ]

    def message_count(self, key: str) -> int:
        with self._session(write=False) as s:
            return self._conv(s, key).message_count

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
            return _snapshot(s, self._conv(s, key), with_busy=with_busy)

    def messages_after(self, key: str, boundary: int | None) -> list[Message]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return Locked(s, conv).messages_after(boundary)

    def compaction_state(self, key: str) -> CompactionState:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return _state(s.get(CompactionStateRow, conv.id), conv.id)

    def history(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[HistoryRecord]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(CompactionHistoryRow).where(CompactionHistoryRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(CompactionHistoryRow.id > after_id)
            return [_history(r) for r in s.scalars(q.order_by(CompactionHistoryRow.id).limit(limit))]

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000, kinds: Sequence[str] | None = None) -> list[CompactionEvent]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(CompactionEventRow).where(CompactionEventRow.conversation_id == conv.id)
            if after_id is not None:
                q = q.where(CompactionEventRow.id > after_id)
            if kinds:
                q = q.where(CompactionEventRow.kind.in_(list(kinds)))
            return [_event(r) for r in s.scalars(q.order_by(CompactionEventRow.id).limit(limit))]

    def offloads(self, key: str, message_ids: Sequence[int] | None = None) -> dict[int, Offload]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            q = select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == conv.id)
            if message_ids is not None:
                if not message_ids:
                    return {}
                q = q.where(ToolOffloadRow.message_id.in_(list(message_ids)))
            return {r.message_id: _offload(r) for r in s.scalars(q)}

    def runs(self, key: str, *, limit: int = 1000) -> list[RunInfo]:
        with self._session(write=False) as s:
            conv = self._conv(s, key)
            return [_run(r) for r in s.scalars(select(Run).where(Run.conversation_id == conv.id).order_by(Run.id).limit(limit))]

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

