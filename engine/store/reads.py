"""Reads of one conversation inside an open session: what the write door checks against and what
the store's queries share (busy reasons, the messages after the boundary, the compaction snapshot).

:class:`ConversationReader` never writes; :class:`engine.store.Locked` (the write door) extends it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..messages import Message, ToolCall
from ..units import current_request
from ..views import ACTIVE_RUN_STATUSES, CompactionState, Offload, Snapshot
from .invariants import CallLedger
from .rules import as_int
from .models import CompactionStateRow, Conversation, MessageRow, QueuedRequest, Run, ToolOffloadRow
from .records import MESSAGE_COLUMNS, conversation_tools, MESSAGE_TEXT_COLUMNS, build_message, message_from_text_row, offload_record, state_record, to_message

#: why a thread is busy, strongest first: a running run wins over one waiting for the user, which
#: wins over a queued request (docs/schema.md, "Busy reasons"). The one definition of that order.
BUSY_PRECEDENCE: tuple[str, ...] = ("running", "waiting_for_user", "queued")


def busy_reasons(session: Session, conversation_ids: Sequence[int]) -> dict[int, str]:
    """The busy reason of each listed conversation that is busy (idle ones are absent)."""
    if not conversation_ids:
        return {}
    rank = {reason: i for i, reason in enumerate(BUSY_PRECEDENCE)}
    out: dict[int, str] = {}

    def offer(cid: int, reason: str) -> None:
        if cid not in out or rank[reason] < rank[out[cid]]:
            out[cid] = reason

    ids = list(conversation_ids)
    for cid, status in session.execute(
        select(Run.conversation_id, Run.status).where(Run.conversation_id.in_(ids), Run.status.in_(ACTIVE_RUN_STATUSES))
    ):
        offer(cid, status)
    for (cid,) in session.execute(
        select(QueuedRequest.conversation_id)
        .where(QueuedRequest.conversation_id.in_(ids), QueuedRequest.status == "queued")
        .distinct()
    ):
        offer(cid, "queued")
    return out


class ConversationReader:
    """Reads of one conversation in ``session`` (a read transaction, or the door's locked one)."""

    def __init__(self, session: Session, conv: Conversation) -> None:
        self.session = session
        self.conv = conv

    @property
    def conversation_id(self) -> int:
        return self.conv.id

    @property
    def thread_key(self) -> str:
        return self.conv.thread_key

    def message_count(self) -> int:
        """The conversation's stored message count (0 when the stored value is not a number)."""
        try:
            return int(self.conv.message_count or 0)
        except (TypeError, ValueError):
            return 0

    def last_message_id(self) -> int | None:
        """The id of the conversation's newest message as the write door recorded it (None when
        none is recorded or the stored value is not a number)."""
        try:
            value = self.conv.last_message_id
            return int(value) if value is not None else None
        except (TypeError, ValueError):
            return None

    def busy_reason(self) -> str | None:
        """Why the thread is busy (``running`` / ``waiting_for_user`` / ``queued``), or None if idle."""
        return busy_reasons(self.session, [self.conv.id]).get(self.conv.id)

    def state(self) -> CompactionState:
        return state_record(self.session.get(CompactionStateRow, self.conv.id), self.conv.id)

    def messages_after(self, boundary: int | None, *, limit: int | None = None) -> list[Message]:
        """Messages with an id above ``boundary`` (all when None), in id order; at most ``limit``.

        Messages are never changed once written and their ids grow under the conversation lock,
        so "after the last id seen" is exactly what was appended since (the incremental snapshot
        of :mod:`engine.snapshots` reads only that, a page at a time)."""
        # plain column rows, not ORM objects: this is the pre-step hot path and may read a long thread
        # SQLite returns JSON as text: read it as text and decode only what is not empty (a long
        # thread reads about twice as fast); psycopg decodes JSON itself
        text = self.session.get_bind().dialect.name == "sqlite"
        q = select(*(MESSAGE_TEXT_COLUMNS if text else MESSAGE_COLUMNS)).where(MessageRow.conversation_id == self.conv.id)
        if boundary is not None:
            q = q.where(MessageRow.id > boundary)
        q = q.order_by(MessageRow.id)
        if limit is not None:
            q = q.limit(limit)
        rows = self.session.connection().execute(q)  # Core: no ORM step for plain column rows
        return [message_from_text_row(r) for r in rows] if text else [build_message(*r) for r in rows]

    def message(self, message_id: int) -> Message | None:
        row = self.session.get(MessageRow, message_id)
        return to_message(row) if row is not None and row.conversation_id == self.conv.id else None

    def last_user_message(self, *, batch: int = 64) -> Message | None:
        """The user's current request, wherever the boundary is: the newest persisted user message
        that :func:`engine.units.current_request` accepts (not meta, not synthetic, not a command,
        its output or a reminder, not a carrier of tool results). Read newest first, ``batch`` user
        messages at a time, so a thread ending in many meta messages still costs a few queries."""
        q = select(*MESSAGE_COLUMNS).where(
            MessageRow.conversation_id == self.conv.id, MessageRow.role == "user", MessageRow.meta_kind.is_(None)
        )
        before: int | None = None
        while True:
            page = q if before is None else q.where(MessageRow.id < before)
            rows = self.session.execute(page.order_by(MessageRow.id.desc()).limit(batch)).all()
            if not rows:
                return None
            found = current_request([to_message(r) for r in reversed(rows)])
            if found is not None:
                return found
            before = rows[-1].id

    def offloads(self) -> dict[int, Offload]:
        rows = self.session.scalars(select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == self.conv.id))
        return {r.message_id: offload_record(r) for r in rows}

    def call_ledger(self) -> CallLedger:
        """The calls of the newest assistant message and which of them have a result (two queries)."""
        last = self.session.execute(
            select(*MESSAGE_COLUMNS)
            .where(MessageRow.conversation_id == self.conv.id, MessageRow.role == "assistant")
            .order_by(MessageRow.id.desc())
            .limit(1)
        ).first()
        if last is None or not last.tool_calls:
            return CallLedger(self.conv.thread_key)
        answered = self.session.scalars(
            select(MessageRow.tool_call_id).where(
                MessageRow.conversation_id == self.conv.id, MessageRow.role == "tool", MessageRow.id > last.id
            )
        )
        return CallLedger(self.conv.thread_key, to_message(last).tool_calls, (a for a in answered if a))

    def unanswered_calls(self) -> list[ToolCall]:
        """Calls of the newest assistant message that have no tool result yet."""
        return self.call_ledger().pending

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

    def offloads_after(self, boundary: int | None) -> dict[int, Offload]:
        """Offload records of the messages after ``boundary`` (those behind it are not on the surface)."""
        q = select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == self.conv.id)
        if boundary is not None:
            q = q.where(ToolOffloadRow.message_id > boundary)
        return {r.message_id: offload_record(r) for r in self.session.scalars(q)}

    def head(self, *, with_busy: bool = True, with_offloads: bool = True, with_request: bool = True) -> Snapshot:
        """The snapshot without its messages (``messages=()``): configuration, route, state, the
        offloads after the boundary, the current request and (``with_busy``) the busy reason. Read
        in this session's transaction; :mod:`engine.snapshots` adds the messages incrementally and
        skips the offloads (they change only with the generation) and the request (only with a new
        user message) when it knows them."""
        state = self.state()
        conv = self.conv
        return Snapshot(
            thread=conv.thread_key,
            conversation_id=conv.id,
            system_prompt=conv.system_prompt,
            tools=conversation_tools(conv),
            provider=conv.provider,
            model=conv.model,
            state=state,
            messages=(),
            offloads=self.offloads_after(state.boundary) if with_offloads else {},
            current_request=self.last_user_message() if with_request else None,
            busy_reason=self.busy_reason() if with_busy else None,  # type: ignore[arg-type]
            reported_context_window=as_int(conv.reported_context_window, "conversations", conv.id, "reported_context_window"),
            source_format=conv.source_format,
        )

    def snapshot(self, *, with_busy: bool = True) -> Snapshot:
        """State, messages after the boundary, their offloads and the current request (read in this
        session's transaction). ``with_busy=False`` skips the busy check."""
        head = self.head(with_busy=with_busy)
        return replace(head, messages=tuple(self.messages_after(head.state.boundary)))
