# Over 800 lines (1,163): the one reader of a conversation (ThreadReader: busy reasons, messages after the boundary, the snapshot head) and the quick version read the pressure check answers from (quick_thread_read, its own SQLite connection, lent to the write door with the journal of its own appends: lend_held, the writer's hand-off rebuilt as a read would) share the row-to-Message decoding and that connection; split them only together, with that decoding in a module of its own.
"""Reads of one conversation inside an open session: what the write door checks against and what
the store's queries share (busy reasons, the messages after the boundary, the compaction snapshot).

:class:`ConversationReader` never writes; :class:`engine.store.Locked` (the write door) extends it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import threading
import weakref
from collections import deque
from contextlib import contextmanager
from dataclasses import fields, replace
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

from sqlalchemy import Connection, LargeBinary, QueuePool, Select, Text, and_, bindparam, case, cast, event, func, select, type_coerce
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from ..core.errors import ThreadNotFound
from ..core.messages import Message, ToolCall
from ..core.units import current_request
from ..core.views import ACTIVE_RUN_STATUSES, CompactionState, ModelRequest, Offload, Snapshot, SourceCompaction
from . import db
from .invariants import CallLedger
from .models import (
    CompactionStateRow,
    Conversation,
    MessagePin,
    MessageRow,
    ModelRequestRow,
    QueuedRequest,
    Run,
    SourceCompactionRow,
    ThreadPolicyRow,
    ToolOffloadRow,
)
from .records import (
    MESSAGE_COLUMNS,
    MESSAGE_TEXT_COLUMNS,
    _json,
    _parts,
    build_message,
    checked_calls_and_meta,
    conversation_tools,
    message_from_text_row,
    model_request_record,
    offload_record,
    source_compaction_record,
    state_record,
    to_message,
    tool_calls_of,
)
from .rules import NUL_ESCAPE, CorruptRow, as_int

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

# -- imported threads: the source's compactions and a title where the source gave none -----------
#: characters of a thread's first request read for its fallback title (never a whole long message)
TITLE_SOURCE_CHARS = 4000
TITLE_CHARS = 80
_TAGGED_BLOCK = re.compile(r"<(uploaded_files|environment_context|system-reminder|user_instructions)>.*?(</\1>|$)", re.S)
_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")


def request_title(text: str | None, limit: int = TITLE_CHARS) -> str:
    """A thread title from the text of its first real user request: one line of at most ``limit``
    characters (cut with "…"). A SWE-agent / OpenHands task template gives its task (the
    ``<pr_description>`` or the text after ``ISSUE:``); tags and bookkeeping blocks are dropped."""
    if not text:
        return ""
    text = text.replace(NUL_ESCAPE, " ")
    m = re.search(r"<pr_description>(.*?)(</pr_description>|$)", text, re.S)
    if m and m.group(1).strip():
        text = m.group(1)
    else:
        m = re.search(r"^ISSUE:\s*\n(.*)", text, re.S | re.M)
        if m and m.group(1).strip():
            text = m.group(1)
    text = _TAG.sub(" ", _TAGGED_BLOCK.sub(" ", text))
    line = next((" ".join(ln.split()) for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def imported_facts(session: Session, conversation_ids: Sequence[int]) -> tuple[dict[int, int], dict[int, str]]:
    """For the listed conversations: how many compactions each one's source recorded (absent: none),
    and a fallback title (:func:`request_title` of the first user message that is no meta message)
    for each *imported* one whose stored title is empty. Two or three grouped queries, whatever
    the number of threads; read only, nothing is written back."""
    if not conversation_ids:
        return {}, {}
    ids = list(conversation_ids)
    counts = {cid: n for cid, n in session.execute(
        select(SourceCompactionRow.conversation_id, func.count(SourceCompactionRow.id))
        .where(SourceCompactionRow.conversation_id.in_(ids)).group_by(SourceCompactionRow.conversation_id))}
    untitled = list(session.scalars(select(Conversation.id).where(
        Conversation.id.in_(ids), Conversation.source_format.is_not(None), Conversation.title == "")))
    titles: dict[int, str] = {}
    if untitled:
        first = (select(func.min(MessageRow.id)).where(MessageRow.conversation_id.in_(untitled), MessageRow.role == "user",
                                                       MessageRow.meta_kind.is_(None)).group_by(MessageRow.conversation_id))
        for cid, text in session.execute(select(MessageRow.conversation_id, func.substr(MessageRow.content, 1, TITLE_SOURCE_CHARS))
                                         .where(MessageRow.id.in_(first))):
            title = request_title(text)
            if title:
                titles[cid] = title
    return counts, titles


# -- statements built once (building a select costs more than running it on the pre-step path) ------
#: ids are positive: "after None" is "after this", "before None" is "before this"
_NO_ID_BELOW, _NO_ID_ABOVE = -(2**62), 2**62


def _messages_statement(text: bool, limited: bool) -> Select[Any]:
    q = select(*(MESSAGE_TEXT_COLUMNS if text else MESSAGE_COLUMNS)).where(
        MessageRow.conversation_id == bindparam("cid"), MessageRow.id > bindparam("after")
    ).order_by(MessageRow.id)
    return q.limit(bindparam("limit")) if limited else q


#: (SQLite text columns, limited) -> the read of the messages after an id
_MESSAGES_AFTER = {(text, limited): _messages_statement(text, limited) for text in (True, False) for limited in (True, False)}


def _counted_statement(text: bool) -> Select[Any]:
    """The messages after an id as a tally reads them: id, role, calls, the id a result answers,
    metadata, and the count kept under ``:key`` (NULL when there is none, or when the message is
    pruned: it is shown, and counted, as its preview). No text is read: a cold status of a long
    thread would spend most of its time moving it. Rows without a count are then read whole
    (:data:`_MESSAGES_BY_ID`)."""
    offloads = ToolOffloadRow.__table__
    counted = and_(
        MessageRow.tokens_key == bindparam("key"), MessageRow.tokens.isnot(None),
        ~select(offloads.c.message_id).where(offloads.c.message_id == MessageRow.id, offloads.c.reverted_generation.is_(None)).exists(),
    )
    calls, meta = (type_coerce(MessageRow.tool_calls, Text), type_coerce(MessageRow.meta, Text)) if text else (MessageRow.tool_calls, MessageRow.meta)
    return select(MessageRow.id, MessageRow.role, calls, MessageRow.tool_call_id, meta, case((counted, MessageRow.tokens), else_=None)).where(
        MessageRow.conversation_id == bindparam("cid"), MessageRow.id > bindparam("after")
    ).order_by(MessageRow.id).limit(bindparam("limit"))


#: (SQLite text columns) -> whole messages by id (the rows of a counted read that have no count)
_MESSAGES_BY_ID = {
    text: select(*(MESSAGE_TEXT_COLUMNS if text else MESSAGE_COLUMNS)).where(MessageRow.id.in_(bindparam("ids", expanding=True))).order_by(MessageRow.id)
    for text in (True, False)
}


class CountedRow(NamedTuple):
    """A message read for counting only (:meth:`ThreadReader.counted_messages_after`): what a
    running tally needs of it (the attributes of :class:`Message` it reads), not its text."""

    id: int
    role: str
    call_ids: tuple[str, ...]
    tool_call_id: str | None
    metadata: Mapping[str, Any]


def _counted_row(id: Any, role: Any, calls: Any, tool_call_id: Any, meta: Any) -> CountedRow:
    """The :class:`CountedRow` of a counted row's (decoded) columns, checked as
    :func:`records.build_message` checks them: a corrupt one raises :class:`CorruptRow`."""
    calls, meta = checked_calls_and_meta(id, role, calls, tool_call_id, meta)
    ids = tuple(str(c.get("id") or "") for c in calls) if calls else ()
    return CountedRow(id, role, ids, tool_call_id, MappingProxyType(meta) if isinstance(meta, dict) and meta else _NO_METADATA)


def _decoded(texts: list[Any]) -> list[Any]:
    """SQLite JSON column texts, each decoded as :func:`records._json` decodes it, with one
    ``json.loads`` for all of them when they are all valid (a page of small values decodes several
    times faster); otherwise one by one, so a corrupt value is a ``CorruptJSON`` marker in its own row."""
    out = [None if t is None else t if t not in _EMPTY_TEXTS else _json(t) for t in texts]
    todo = [i for i, t in enumerate(texts) if t is not None and t not in _EMPTY_TEXTS]
    if not todo:
        return out
    try:
        values = json.loads("[" + ",".join(texts[i] for i in todo) + "]")
    except (ValueError, RecursionError):
        values = None
    if values is None or len(values) != len(todo):  # a corrupt text (or one holding several values)
        return [_json(t) for t in texts]
    for i, v in zip(todo, values):
        out[i] = v
    return out


_EMPTY_TEXTS = frozenset(("null", "[]", "{}", ""))
_NO_METADATA: Mapping[str, Any] = MappingProxyType({})


#: SQLite text columns -> the read of the messages after an id with their kept counts
_COUNTED_AFTER = {text: _counted_statement(text) for text in (True, False)}


def _with_counts_statement(text: bool) -> Select[Any]:
    """The messages after an id (:data:`_MESSAGES_AFTER`, limited) with the count kept under
    ``:key``, as :func:`_counted_statement` reads it (NULL: none, or pruned), last."""
    offloads = ToolOffloadRow.__table__
    counted = and_(
        MessageRow.tokens_key == bindparam("key"), MessageRow.tokens.isnot(None),
        ~select(offloads.c.message_id).where(offloads.c.message_id == MessageRow.id, offloads.c.reverted_generation.is_(None)).exists(),
    )
    return select(*(MESSAGE_TEXT_COLUMNS if text else MESSAGE_COLUMNS), case((counted, MessageRow.tokens), else_=None)).where(
        MessageRow.conversation_id == bindparam("cid"), MessageRow.id > bindparam("after")
    ).order_by(MessageRow.id).limit(bindparam("limit"))


#: SQLite text columns -> the read of the messages after an id with their kept counts
_WITH_COUNTS_AFTER = {text: _with_counts_statement(text) for text in (True, False)}
_USER_MESSAGES_BEFORE = (
    select(*MESSAGE_COLUMNS)
    .where(MessageRow.conversation_id == bindparam("cid"), MessageRow.role == "user", MessageRow.meta_kind.is_(None),
           MessageRow.id < bindparam("before"))
    .order_by(MessageRow.id.desc())
    .limit(bindparam("limit"))
)
_ACTIVE_RUNS = select(Run.status).where(Run.conversation_id == bindparam("cid"), Run.status.in_(ACTIVE_RUN_STATUSES))
_QUEUED = select(QueuedRequest.id).where(QueuedRequest.conversation_id == bindparam("cid"), QueuedRequest.status == "queued").limit(1)
_OFFLOADS = ToolOffloadRow.__table__
#: :meth:`ConversationReader.prunable`'s statements (built once; the ids are expanding parameters)
_TOOL_RESULTS_IN = select(MessageRow.id).where(MessageRow.conversation_id == bindparam("cid"), MessageRow.role == "tool",
                                               MessageRow.id.in_(bindparam("ids", expanding=True)), MessageRow.id > bindparam("after"))
_OFFLOADED_IN = select(ToolOffloadRow.message_id).where(ToolOffloadRow.message_id.in_(bindparam("ids", expanding=True)))
_PINNED_IN = select(MessagePin.message_id).where(MessagePin.conversation_id == bindparam("cid"),
                                                 MessagePin.message_id.in_(bindparam("ids", expanding=True)))
_OFFLOADS_AFTER = select(_OFFLOADS).where(
    _OFFLOADS.c.conversation_id == bindparam("cid"), _OFFLOADS.c.message_id > bindparam("after"), _OFFLOADS.c.reverted_generation.is_(None)
)
_REQUESTS = ModelRequestRow.__table__
_LAST_COMPLETED = (
    select(_REQUESTS).where(_REQUESTS.c.conversation_id == bindparam("cid"), _REQUESTS.c.outcome == "ok").order_by(_REQUESTS.c.id.desc()).limit(1)
)
_SOURCES_OF = select(SourceCompactionRow.__table__).where(SourceCompactionRow.conversation_id == bindparam("cid")).order_by(SourceCompactionRow.id)
_CONVERSATIONS, _STATES = Conversation.__table__, CompactionStateRow.__table__
#: a thread's key in one query: the conversation row's columns a snapshot needs and its compaction state
_THREAD_KEY = select(
    _CONVERSATIONS.c.id, _CONVERSATIONS.c.thread_key, _CONVERSATIONS.c.system_prompt, _CONVERSATIONS.c.tools, _CONVERSATIONS.c.provider,
    _CONVERSATIONS.c.model, _CONVERSATIONS.c.message_count, _CONVERSATIONS.c.last_message_id, _CONVERSATIONS.c.reported_context_window,
    _CONVERSATIONS.c.source_format, _STATES.c.conversation_id.label("state_of"), _STATES.c.boundary_message_id, _STATES.c.boundary_hash,
    _STATES.c.summary, _STATES.c.summary_tokens, _STATES.c.generation, _STATES.c.compact_count, _STATES.c.updated_at,
    _STATES.c.pins_version,
).select_from(_CONVERSATIONS.outerjoin(_STATES, _STATES.c.conversation_id == _CONVERSATIONS.c.id)).where(
    _CONVERSATIONS.c.thread_key == bindparam("key")
)


#: the same, by its public name (the write door reads a thread's key inside its own transaction)
THREAD_KEY = _THREAD_KEY


def _lenient_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


_PINS_OF = select(MessagePin.__table__.c.message_id).where(MessagePin.__table__.c.conversation_id == bindparam("cid")).order_by(MessagePin.__table__.c.message_id)
_POLICY_OF = select(ThreadPolicyRow.__table__.c.overrides).where(ThreadPolicyRow.__table__.c.conversation_id == bindparam("cid"))


def steering_of(conn: Connection, cid: int, state: CompactionState) -> dict[str, Any]:
    """The snapshot fields pins and the thread policy give (``pins``, ``pinned``, ``thread_policy``),
    read in this transaction; nothing is read for a thread never pinned nor given a policy
    (``pins_version`` 0). ``pinned`` holds the pinned messages at or before the boundary, widened
    to their tool rounds (a pin made before its result arrived keeps the result too)."""
    if not state.pins_version:
        return {}
    pins = frozenset(int(r[0]) for r in conn.execute(_PINS_OF, {"cid": cid}))
    policy = conn.execute(_POLICY_OF, {"cid": cid}).scalar()
    if isinstance(policy, str):
        policy = json.loads(policy)
    pinned: tuple[Message, ...] = ()
    if pins and state.boundary is not None and min(pins) <= state.boundary:
        text = conn.dialect.name == "sqlite"
        boundary = state.boundary

        def by_ids(ids: Sequence[int]) -> list[Message]:
            rows = conn.execute(_MESSAGES_BY_ID[text], {"ids": list(ids)}).all() if ids else []
            return [message_from_text_row(r) if text else build_message(*r) for r in rows]

        # the door pins a whole round (call and results) at once; a result that arrived after
        # its call was pinned is found by the call's ids
        found = by_ids([i for i in pins if i <= boundary])
        calls = [c.id for m in found if m.role == "assistant" for c in m.tool_calls]
        if calls:
            late = conn.execute(select(MessageRow.id).where(
                MessageRow.conversation_id == cid, MessageRow.role == "tool", MessageRow.id <= boundary,
                MessageRow.tool_call_id.in_(calls))).scalars().all()
            extra = [int(i) for i in late if int(i) not in pins]
            found = sorted(found + by_ids(extra), key=lambda m: m.id or 0)
        # a result pruned before it was pinned stays its preview (the offloads of a snapshot are those
        # after the boundary: a pinned one behind it is shown here already)
        rows = conn.execute(select(ToolOffloadRow.__table__).where(
            ToolOffloadRow.__table__.c.conversation_id == cid,
            ToolOffloadRow.__table__.c.message_id.in_([m.id for m in found if m.role == "tool"]))).all() if found else []
        shown = {r.message_id: offload_record(r) for r in rows if getattr(r, "reverted_generation", None) is None}
        from ..core.surface import shown_message  # pure
        pinned = tuple(shown_message(m, shown.get(m.id)) if m.id in shown else m for m in found)
    return {"pins": pins, "pinned": pinned, "thread_policy": dict(policy) if isinstance(policy, dict) and policy else None}


def _messages_after(conn: Connection, cid: int, boundary: int | None, limit: int | None) -> list[Message]:
    # plain column rows, not ORM objects: this is the pre-step hot path and may read a long thread.
    # SQLite returns JSON as text: read it as text and decode only what is not empty (a long
    # thread reads about twice as fast); psycopg decodes JSON itself
    text = conn.dialect.name == "sqlite"
    params: dict[str, Any] = {"cid": cid, "after": _NO_ID_BELOW if boundary is None else boundary}
    if limit is not None:
        params["limit"] = limit
    rows = conn.execute(_MESSAGES_AFTER[text, limit is not None], params).all()  # one fetchall, not a fetch per row
    return [message_from_text_row(r) for r in rows] if text else [build_message(*r) for r in rows]


def _counted_messages_after(conn: Connection, cid: int, after: int | None, key: str, limit: int) -> list[tuple[Message | CountedRow, int | None]]:
    text = conn.dialect.name == "sqlite"
    rows = conn.execute(_COUNTED_AFTER[text], {"cid": cid, "after": _NO_ID_BELOW if after is None else after, "key": key, "limit": limit}).all()
    if not rows:
        return []
    ids, roles, calls, answers, metas, counts = (list(c) for c in zip(*rows))
    if text:
        calls, metas = _decoded(calls), _decoded(metas)
    whole: dict[int, Message] = {}
    missing = [i for i, n in zip(ids, counts) if n is None]
    if missing:  # read whole, to be counted
        found = conn.execute(_MESSAGES_BY_ID[text], {"ids": missing}).all()
        whole = {r[0]: (message_from_text_row(r) if text else build_message(*r)) for r in found}
    return [
        (whole[i], None) if n is None else (_counted_row(i, role, c, answer, meta), n)
        for i, role, c, answer, meta, n in zip(ids, roles, calls, answers, metas, counts)
        if n is not None or i in whole
    ]


def _last_user_message(execute: Any, cid: int, batch: int) -> Message | None:
    """:meth:`ConversationReader.last_user_message`; ``execute`` is a session's (which flushes
    first) or a connection's."""
    before = _NO_ID_ABOVE
    while True:
        rows = execute(_USER_MESSAGES_BEFORE, {"cid": cid, "before": before, "limit": batch}).all()
        if not rows:
            return None
        found = current_request([build_message(*r) for r in reversed(rows)])
        if found is not None:
            return found
        before = rows[-1].id


def _busy_reason(conn: Connection, cid: int) -> str | None:
    statuses = {status for (status,) in conn.execute(_ACTIVE_RUNS, {"cid": cid})}
    for reason in BUSY_PRECEDENCE:
        if reason in statuses:
            return reason
    return "queued" if conn.execute(_QUEUED, {"cid": cid}).first() is not None else None


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
        return _lenient_int(self.conv.message_count) or 0

    def last_message_id(self) -> int | None:
        """The id of the conversation's newest message as the write door recorded it (None when
        none is recorded or the stored value is not a number)."""
        return _lenient_int(self.conv.last_message_id)

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
        return _messages_after(self.session.connection(), self.conv.id, boundary, limit)  # Core: no ORM step

    def message(self, message_id: int) -> Message | None:
        row = self.session.get(MessageRow, message_id)
        return to_message(row) if row is not None and row.conversation_id == self.conv.id else None

    def last_user_message(self, *, batch: int = 64) -> Message | None:
        """The user's current request, wherever the boundary is: the newest persisted user message
        that :func:`engine.core.units.current_request` accepts (not meta, not synthetic, not a command,
        its output or a reminder, not a carrier of tool results). Read newest first, ``batch`` user
        messages at a time, so a thread ending in many meta messages still costs a few queries."""
        return _last_user_message(self.session.execute, self.conv.id, batch)

    def offloads(self) -> dict[int, Offload]:
        rows = self.session.scalars(select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == self.conv.id, ToolOffloadRow.reverted_generation.is_(None)))
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
        cid, execute = self.conv.id, self.session.execute  # the session's: pending changes are flushed first
        after = _NO_ID_BELOW if st.boundary is None else st.boundary
        ok = set(execute(_TOOL_RESULTS_IN, {"cid": cid, "ids": list(message_ids), "after": after}).scalars())
        done = set(execute(_OFFLOADED_IN, {"ids": list(ok)}).scalars())
        if st.pins_version:  # a pinned result is never pruned (pinned since the caller's snapshot too)
            done |= set(execute(_PINNED_IN, {"cid": cid, "ids": list(ok)}).scalars())
        return [i for i in message_ids if i in ok and i not in done]

    def offloads_after(self, boundary: int | None) -> dict[int, Offload]:
        """Offload records of the messages after ``boundary`` (those behind it are not on the surface)."""
        q = select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == self.conv.id, ToolOffloadRow.reverted_generation.is_(None))
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
            **steering_of(self.session.connection(), conv.id, state),
        )

    def snapshot(self, *, with_busy: bool = True) -> Snapshot:
        """State, messages after the boundary, their offloads and the current request (read in this
        session's transaction). ``with_busy=False`` skips the busy check."""
        head = self.head(with_busy=with_busy)
        return replace(head, messages=tuple(self.messages_after(head.state.boundary)))


class ThreadReader:
    """The reads :mod:`engine.snapshots` makes of one thread, on a plain Core connection in one
    read transaction (:func:`thread_reading`): the same answers as :class:`ConversationReader`
    (which its methods mirror) without an ORM session, with statements built once. The key (the
    conversation row's columns and the compaction state) comes from one query made on opening;
    an unchanged thread costs that query alone."""

    def __init__(self, conn: Connection, row: Any) -> None:
        self.conn = conn
        self.row = row

    @property
    def conversation_id(self) -> int:
        return self.row.id

    @property
    def thread_key(self) -> str:
        return self.row.thread_key

    def message_count(self) -> int:
        return _lenient_int(self.row.message_count) or 0

    def last_message_id(self) -> int | None:
        return _lenient_int(self.row.last_message_id)

    def state(self) -> CompactionState:
        return state_record(self.row if self.row.state_of is not None else None, self.row.id)

    def messages_after(self, boundary: int | None, *, limit: int | None = None) -> list[Message]:
        return _messages_after(self.conn, self.row.id, boundary, limit)

    def counted_messages_after(self, after: int | None, *, key: str, limit: int) -> list[tuple[Message | CountedRow, int | None]]:
        """At most ``limit`` messages with an id above ``after``, in id order, each with the token
        count the write door kept for it under ``key`` (``TokenMeter.count_key``) or None. A
        message with a count (and not pruned) comes as a :class:`CountedRow`, without its text:
        for counting only, never for showing or sending; any other as the whole message."""
        return _counted_messages_after(self.conn, self.row.id, after, key, limit)

    def messages_with_counts_after(self, after: int | None, *, key: str, limit: int) -> list[tuple[Message, int | None]]:
        """At most ``limit`` messages with an id above ``after``, in id order (as
        :meth:`messages_after`), each with the count of :meth:`counted_messages_after` (kept under
        ``key``, None when there is none or the message is pruned), in one statement (what-if
        reads its source so and hands the counts to its meter)."""
        text = self.conn.dialect.name == "sqlite"
        rows = self.conn.execute(_WITH_COUNTS_AFTER[text], {"cid": self.row.id, "after": _NO_ID_BELOW if after is None else after, "key": key,
                                                            "limit": limit}).all()
        return [(message_from_text_row(r[:-1]) if text else build_message(*r[:-1]), None if r[-1] is None else int(r[-1])) for r in rows]

    def last_user_message(self, *, batch: int = 64) -> Message | None:
        return _last_user_message(self.conn.execute, self.row.id, batch)

    def busy_reason(self) -> str | None:
        return _busy_reason(self.conn, self.row.id)

    def offloads_after(self, boundary: int | None) -> dict[int, Offload]:
        rows = self.conn.execute(_OFFLOADS_AFTER, {"cid": self.row.id, "after": _NO_ID_BELOW if boundary is None else boundary})
        return {r.message_id: offload_record(r) for r in rows}

    def version(self) -> "ThreadVersion | None":
        """The thread's :class:`ThreadVersion` in this read (what :func:`quick_thread_read` compares)."""
        return thread_version_in(self.conn, self.row.thread_key)

    def last_completed_request(self) -> ModelRequest | None:
        """The newest completed model request (``Store.last_completed_request``), in this read."""
        row = self.conn.execute(_LAST_COMPLETED, {"cid": self.row.id}).first()
        return model_request_record(row) if row is not None else None

    def source_meta(self) -> Mapping[str, Any]:
        """The thread's per-session source facts (``conversations.source_meta``), in this read."""
        meta = self.conn.execute(select(_CONVERSATIONS.c.source_meta).where(_CONVERSATIONS.c.id == self.row.id)).scalar()
        return meta if isinstance(meta, dict) else {}

    def source_compactions(self) -> list[SourceCompaction]:
        """The compactions the thread's source recorded (``Store.source_compactions``), in this read."""
        return [source_compaction_record(r) for r in self.conn.execute(_SOURCES_OF, {"cid": self.row.id})]

    def head(self, *, with_busy: bool = True, offloads: Mapping[int, Offload] | None = None, current: tuple[Message | None] | None = None) -> Snapshot:
        """:meth:`ConversationReader.head`; ``offloads`` and ``current`` (a 1-tuple: the current
        request) are taken as given when known (they are read otherwise)."""
        row = self.row
        state = self.state()
        return Snapshot(
            thread=row.thread_key,
            conversation_id=row.id,
            system_prompt=row.system_prompt,
            tools=conversation_tools(row),
            provider=row.provider,
            model=row.model,
            state=state,
            messages=(),
            offloads=self.offloads_after(state.boundary) if offloads is None else offloads,
            current_request=self.last_user_message() if current is None else current[0],
            busy_reason=self.busy_reason() if with_busy else None,  # type: ignore[arg-type]
            reported_context_window=as_int(row.reported_context_window, "conversations", row.id, "reported_context_window"),
            source_format=row.source_format,
            **steering_of(self.conn, row.id, state),
        )


@contextmanager
def thread_reading(store: Any, key: str) -> Iterator[ThreadReader]:
    """One consistent read transaction on thread ``key`` of ``store`` (an :class:`engine.store.Store`;
    not imported: it imports this module) on a plain connection (REPEATABLE READ on PostgreSQL; a
    SQLite read transaction is one WAL snapshot), as ``Store.reading``."""
    with database_errors(store.url), store.engine.connect() as conn:
        if not store.is_sqlite:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        row = conn.execute(_THREAD_KEY, {"key": key}).first()
        if row is None:
            raise ThreadNotFound(f"no thread {key!r}")
        yield ThreadReader(conn, row)
        conn.rollback()


@contextmanager
def database_errors(url: Any) -> Iterator[None]:
    """How a database failure reads for a user, for every transaction of the store: a constraint
    the caller handles (``IntegrityError``) as is; a connection or server problem as
    ``db.translate_error``; a row SQLAlchemy cannot read as :class:`CorruptRow`."""
    try:
        yield
    except IntegrityError:
        raise
    except DBAPIError as exc:
        raise db.translate_error(exc, url) from None
    except ValueError as exc:
        corrupt = corrupt_from(exc)
        if corrupt is None:
            raise
        raise corrupt from None


def corrupt_from(exc: Exception) -> CorruptRow | None:
    """A value error SQLAlchemy raised while reading a row (an unparsable SQLite timestamp) as a
    :class:`CorruptRow`; None for anything else (the one rule: ``store`` uses it too)."""
    detail = str(exc)
    if isinstance(exc, ValueError) and "isoformat" in detail:
        return CorruptRow(None, None, None, f"a timestamp that cannot be read ({detail.split(':', 1)[-1].strip()[:60]})")
    return None


# -- the quick read of the pressure check ----------------------------------------------------------


class _RawStatement:
    """A SELECT compiled once for the store's dialect and run on the driver's own cursor, its rows
    given SQLAlchemy's own result processing (the column types' result processors: the same values
    a Core execution gives). What the per-step pressure check uses to see that nothing changed: a
    Core execution costs some 30 µs of Python per statement, this a few."""

    __slots__ = ("sql", "names", "defaults", "processors", "positional")

    def __init__(self, stmt: Select[Any], dialect: Any) -> None:
        compiled = stmt.compile(dialect=dialect)
        self.sql = compiled.string
        self.positional = compiled.positiontup if compiled.positional else None
        self.defaults = {name: bind.value for bind, name in compiled.bind_names.items()}  # the literals (LIMIT 1, 'ok')
        self.names = tuple(c.key for c in stmt.selected_columns)
        self.processors = tuple(c.type._cached_result_processor(dialect, None) for c in stmt.selected_columns)

    def binder(self, name: str) -> Any:
        """A function of one value giving the driver's parameters with ``name`` set to it and the
        others to the statement's literals (what :meth:`rows` builds, without the merge per call)."""
        if self.positional is None:
            base = dict(self.defaults)
            return lambda value: {**base, name: value}
        template = [self.defaults.get(n) for n in self.positional]
        at = [i for i, n in enumerate(self.positional) if n == name]
        if len(at) == 1 and at[0] == len(template) - 1:  # the usual case: the last one
            head = tuple(template[:-1])
            return lambda value: (*head, value)

        def params(value: Any) -> tuple[Any, ...]:
            got = list(template)
            for i in at:
                got[i] = value
            return tuple(got)

        return params

    def rows(self, cursor: Any, params: Mapping[str, Any], *, process: bool = True) -> list[tuple[Any, ...]]:
        """The rows for ``params``; ``process=False``: as the driver gives them."""
        merged = {**self.defaults, **params}
        cursor.execute(self.sql, tuple(merged[n] for n in self.positional) if self.positional is not None else merged)
        procs = self.processors
        if not process or not any(procs):
            return [tuple(r) for r in cursor.fetchall()]
        return [tuple(v if p is None else p(v) for p, v in zip(procs, r)) for r in cursor.fetchall()]


_REQUEST_COLUMNS = tuple(_REQUESTS.c)
_OK = _REQUESTS.alias("ok")
_NEWEST_OK = (
    select(_OK.c.id).where(_OK.c.conversation_id == _CONVERSATIONS.c.id, _OK.c.outcome == "ok")
    .order_by(_OK.c.id.desc()).limit(1).correlate(_CONVERSATIONS).scalar_subquery()
)
_KEY_WIDTH = len(_THREAD_KEY.selected_columns)
#: a thread's version: its key (:data:`_THREAD_KEY`'s columns) and its newest completed request
#: (:data:`_LAST_COMPLETED`'s columns, NULLs when there is none) in one statement
def _version_statement(blobs: bool) -> Select[Any]:
    """``blobs`` (SQLite): the long texts (system prompt, tools, summary) read as their bytes, which
    compare the same and cost no UTF-8 decoding (a 20 kB summary: some 10 µs a read)."""
    big = ("system_prompt", "tools", "summary")
    key = [cast(c, LargeBinary).label(c.key) if blobs and c.key in big else c for c in _THREAD_KEY.selected_columns]
    return (
        select(*key, *_REQUEST_COLUMNS)
        .select_from(_CONVERSATIONS.outerjoin(_STATES, _STATES.c.conversation_id == _CONVERSATIONS.c.id)
                     .outerjoin(_REQUESTS, _REQUESTS.c.id == _NEWEST_OK))
        .where(_CONVERSATIONS.c.thread_key == bindparam("key"))
    )


_VERSION = {blobs: _version_statement(blobs) for blobs in (True, False)}
#: positions of the message counters in a version (an append changes these and nothing else): adjacent
_COUNTERS = tuple(i for i, c in enumerate(_THREAD_KEY.selected_columns) if c.key in ("message_count", "last_message_id"))
assert len(_COUNTERS) == 2 and _COUNTERS[1] == _COUNTERS[0] + 1
_COUNT, _AFTER_COUNTERS = _COUNTERS[0], _COUNTERS[1] + 1
_REQUEST_ROW = NamedTuple("_REQUEST_ROW", [(c.key, Any) for c in _REQUEST_COLUMNS])  # type: ignore[misc]


class ThreadVersion:
    """What :func:`quick_thread_read` compares: a thread's key row and newest completed request as
    the driver gives them (equal values: the same snapshot, the same route)."""

    __slots__ = ("values", "_processors", "seen", "data_version", "serial")

    def __init__(self, values: tuple[Any, ...], processors: Sequence[Any], seen: int | None = None, data_version: Any = None,
                 serial: int = 0) -> None:
        self.values = values
        self._processors = processors
        #: the quick read's own connection (:attr:`_Held.token`) this version was read on, that
        #: connection's ``PRAGMA data_version`` in the same read (None: read elsewhere) and how many
        #: write transactions the door had run on it by then (:attr:`_Held.serial`)
        self.seen = seen
        self.data_version = data_version
        self.serial = serial

    @property
    def stable(self) -> tuple[Any, ...]:
        """The key without the message counters (equal: only messages were appended)."""
        values = self.values
        return values[: _COUNTERS[0]] + values[_COUNTERS[1] + 1 : _KEY_WIDTH]

    @property
    def last_message_id(self) -> int | None:
        return _lenient_int(self.values[_COUNTERS[1]])

    @property
    def request(self) -> tuple[Any, ...]:
        return self.values[_KEY_WIDTH:]

    def last_completed_request(self) -> ModelRequest | None:
        """The newest completed request this version holds (``ThreadReader.last_completed_request``:
        the same values, through the columns' result processors)."""
        row = self.request
        if row[0] is None:
            return None
        procs = self._processors[_KEY_WIDTH:]
        return model_request_record(_REQUEST_ROW(*(v if p is None else p(v) for p, v in zip(procs, row))))  # type: ignore[arg-type]


_RAW: dict[tuple[str, str, str, str], _RawStatement] = {}


def _raw(name: str, stmt: Select[Any], dialect: Any) -> _RawStatement:
    key = (dialect.name, dialect.driver, dialect.paramstyle, name)  # the SQL text depends on the driver's paramstyle
    found = _RAW.get(key)
    if found is None:
        found = _RAW[key] = _RawStatement(stmt, dialect)
    return found


def thread_version_in(conn: Connection, key: str) -> ThreadVersion | None:
    """The thread's :class:`ThreadVersion` read on ``conn``, in its transaction (the version of what
    a :class:`ThreadReader` on that connection reads); None when there is no such thread."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        statement = _raw("version", _VERSION[conn.dialect.name == "sqlite"], conn.dialect)
        rows = statement.rows(cursor, {"key": key}, process=False)
    finally:
        cursor.close()
    return ThreadVersion(rows[0], statement.processors) if rows else None


_MESSAGE_FIELDS = tuple(f.name for f in fields(Message))
assert _MESSAGE_FIELDS == ("role", "content", "id", "tool_calls", "tool_call_id", "name", "metadata", "reasoning", "attachments", "is_error",
                           "meta_kind", "source_key"), _MESSAGE_FIELDS
_set = object.__setattr__


def handed_message(id: int, row: Mapping[str, Any]) -> Message:
    """The message a read of the row the write door just wrote gives: the door's column values
    (``records.message_values``: text already as stored) with each JSON column as the decoder a
    read goes through gives it back from the text written (``message_from_text_row``, SQLite's
    text path; a PostgreSQL ``json`` column keeps the text as written, so its read decodes the
    same text): :func:`_as_read`, a copy without the text round trip when that is the same."""
    calls, meta, parts = row["tool_calls"], row["meta"], row["parts"]
    # the fields set directly: the door wrote them from a valid Message (its checks passed), so
    # neither build_message's checks nor Message.__post_init__ have anything to refuse or convert
    # here (one step's check: a few µs); each JSON column as a read decodes it, then as
    # build_message takes it (records._message: its metadata frozen, no copy of the fresh dict)
    meta = _as_read(meta)
    kind, m = row["meta_kind"], object.__new__(Message)
    _set(m, "role", row["role"])
    _set(m, "content", row["content"])
    _set(m, "id", id)
    _set(m, "tool_calls", tool_calls_of(_as_read(calls)) if calls else ())
    _set(m, "tool_call_id", row["tool_call_id"])
    _set(m, "name", row["name"])
    _set(m, "metadata", MappingProxyType(meta) if isinstance(meta, dict) and meta else _NO_METADATA)
    reasoning, attachments = _parts(_as_read(parts)) if parts else ((), ())
    _set(m, "reasoning", reasoning)
    _set(m, "attachments", attachments)
    _set(m, "is_error", bool(row["is_error"]))
    _set(m, "meta_kind", kind if isinstance(kind, str) and kind else None)
    _set(m, "source_key", row["source_key"] or None)
    return m


def _as_read(value: Any) -> Any:
    """A JSON column value the door wrote as a read decodes it (``records._json`` of its
    ``json.dumps`` text): a copy (:func:`_read_copy`) when it holds only types that read back as
    themselves, else through the text itself."""
    if value is None:
        return None
    copy = _read_copy(value)
    return _json(json.dumps(value)) if copy is _NOT_PLAIN else copy


_NOT_PLAIN = object()


def _read_copy(value: Any) -> Any:
    """``json.loads(json.dumps(value))`` made without the text, for a value of dicts with text keys,
    lists, text, integers, booleans, None and finite floats, each of exactly that type (every one
    reads back as an equal value of its own type, a dict in its order); :data:`_NOT_PLAIN` for
    anything else (a tuple, a number key, a subclass, NaN: the text decides)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        return value if math.isfinite(value) else _NOT_PLAIN
    if t is list:
        items = []
        for v in value:
            c = _read_copy(v)
            if c is _NOT_PLAIN:
                return c
            items.append(c)
        return items
    if t is dict:
        out = {}
        for k, v in value.items():
            c = _read_copy(v) if type(k) is str else _NOT_PLAIN
            if c is _NOT_PLAIN:
                return c
            out[k] = c
        return out
    return _NOT_PLAIN


def quick_thread_read(store: Any, key: str, known: ThreadVersion, after: int | None, limit: int,
                      handed: Sequence[tuple[int, Mapping[str, Any]]] = ()) -> tuple[ThreadVersion | None, list[Message] | None]:
    """The per-step pressure check's read: thread ``key``'s version and, when it differs from
    ``known`` by appended messages only (the same key and request but the counters), the messages
    with an id above ``after`` (at most ``limit``) up to the version's last message id; else None
    for them. Run on a driver connection, each statement on its own (a message is never changed
    and its id grows under the conversation lock, so the messages up to the version's last
    message id are the version's). (None, None) when the thread is gone. ``known`` itself when
    nothing changed (or an equal one that carries the quick connection's ``data_version``).

    ``handed``: (id, column values) of messages this process's write door committed to the thread
    after ``after`` (``Store.on_appended``), in id order. When they are exactly what the version
    added (as many as its message count grew by, the last one its last message id), they are the
    messages and none is read; anything else (another writer appended too) reads them.

    On a SQLite file the read runs on a connection of its own (:class:`_Held`), which first asks
    its ``PRAGMA data_version``: the value changes on a connection exactly when another
    connection (of this process or another) committed since its last read, so while it gives the
    value a version was read with there (``ThreadVersion.seen``, ``data_version``), every commit
    since was made on this connection itself. The write door runs its transactions on it when it
    is free (:func:`lend_held`), and each one is journaled there (:attr:`_Held.journal`): none
    since the version, the version is still the database's; only appends whose rows are exactly
    the ``handed`` ones (nothing else written: :meth:`_Held.committed`), the version is ``known``
    with its counters moved, and no statement is run. Anything else reads the version."""
    engine = store.engine
    held = _held_connection(engine)
    if held is not None and held.lock.acquire(blocking=False):
        try:
            cursor = held.cursor
            cursor.execute("PRAGMA data_version")
            seen = cursor.fetchall()[0][0]  # before the version: a commit in between only makes it older
            if known.seen == held.token and seen == known.data_version:  # since known: only this connection's own commits
                if held.serial == known.serial:
                    if not handed:
                        return known, None
                else:
                    own = _own_appends(held, key, known, after, handed)
                    if own is not None:
                        return own
            return _quick(cursor, held.plan, key, known, after, limit, handed, held.token, seen, held.serial)
        except BaseException:
            _forget_held(engine, held)  # a failed statement: the next read opens another (this one is closed)
            raise
        finally:
            held.lock.release()
    raw = engine.raw_connection()
    try:
        return _quick(raw.cursor(), _quick_plan(engine.dialect), key, known, after, limit, handed, None, None, 0)  # the cursor closes with the connection
    finally:
        raw.close()


def _own_appends(held: "_Held", key: str, known: ThreadVersion, after: int | None,
                 handed: Sequence[tuple[int, Mapping[str, Any]]]) -> tuple[ThreadVersion, list[Message] | None] | None:
    """The version after ``known`` when no other connection committed since it was read on
    ``held`` and the door's transactions there since (its journal) only appended messages: to
    thread ``key`` exactly the ``handed`` rows (then ``known`` with its counters moved by them, and
    those messages), to other threads anything (then ``known``). None when the journal does not
    reach back to ``known``, a transaction wrote anything else, or the rows differ."""
    since = held.serial - known.serial
    journal = held.journal
    if since <= 0 or since > len(journal) or journal[-since][0] != known.serial + 1:  # the journal no longer reaches back to known
        return None
    if since == 1:  # the usual case: one transaction since the last check
        _, thread, rows = journal[-1]
        if rows is None:
            return None
        ids: Sequence[int] = rows if thread == key else ()
    else:
        got: list[int] = []
        for _, thread, rows in itertools.islice(journal, len(journal) - since, None):
            if rows is None:  # it wrote more than messages (or its outcome is unknown)
                return None
            if thread == key:
                got.extend(rows)
        ids = got
    if len(ids) != len(handed) or any(i != h[0] for i, h in zip(ids, handed)):
        return None
    if not ids:
        return ThreadVersion(known.values, known._processors, held.token, known.data_version, held.serial), None
    values = known.values
    count = values[_COUNT]
    if not isinstance(count, int) or isinstance(count, bool) or (after is not None and ids[0] <= after):
        return None
    # what the door's UPDATE wrote: the count it locked plus the rows, the last row's id
    moved = (*values[:_COUNT], count + len(ids), ids[-1], *values[_AFTER_COUNTERS:])
    return (ThreadVersion(moved, known._processors, held.token, known.data_version, held.serial),
            [handed_message(i, r) for i, r in handed])


class _QuickPlan:
    """The statements of :func:`_quick` for one dialect, compiled once."""

    __slots__ = ("version", "sql", "params", "after", "text")

    def __init__(self, dialect: Any) -> None:
        text = self.text = dialect.name == "sqlite"
        self.version = _raw("version", _VERSION[text], dialect)
        self.sql, self.params = self.version.sql, self.version.binder("key")
        self.after = _raw(f"after{text}", _MESSAGES_AFTER[text, True], dialect)


_PLANS: dict[tuple[str, str, str], _QuickPlan] = {}


def _quick_plan(dialect: Any) -> _QuickPlan:
    key = (dialect.name, dialect.driver, dialect.paramstyle)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _QuickPlan(dialect)
    return plan


def _quick(cursor: Any, plan: _QuickPlan, key: str, known: ThreadVersion, after: int | None, limit: int,
           handed: Sequence[tuple[int, Mapping[str, Any]]], token: int | None, seen: Any,
           serial: int) -> tuple[ThreadVersion | None, list[Message] | None]:
    """:func:`quick_thread_read` on ``cursor``; ``token``, ``seen``, ``serial``: the held
    connection's token, its ``data_version`` read just before and its door transactions so far
    (None, None, 0: not read there)."""
    cursor.execute(plan.sql, plan.params(key))
    rows = cursor.fetchall()  # all: a statement left unfinished would keep its read transaction open
    if not rows:
        return None, None
    values, was = tuple(rows[0]), known.values
    if seen is None:
        token = None
    if values == was:
        return (known if token is None else ThreadVersion(was, known._processors, token, seen, serial)), None
    version = ThreadVersion(values, plan.version.processors, token, seen, serial)
    # the same key and request but the counters (adjacent): only messages were appended
    if values[_AFTER_COUNTERS:] != was[_AFTER_COUNTERS:] or values[:_COUNT] != was[:_COUNT]:
        return version, None
    upto = version.last_message_id
    text = plan.text
    if (handed and upto is not None and handed[-1][0] == upto and (after is None or handed[0][0] > after)
            and values[_COUNT] - was[_COUNT] == len(handed)):
        return version, [handed_message(i, r) for i, r in handed]
    got = plan.after.rows(cursor, {"cid": values[0], "after": _NO_ID_BELOW if after is None else after, "limit": limit})
    if len(got) >= limit:  # more than a page: the caller reads them in pages
        return version, None
    messages = [message_from_text_row(r) if text else build_message(*r) for r in got]
    return version, [m for m in messages if upto is not None and m.id is not None and m.id <= upto]


class _Held:
    """A SQLite file's driver connection kept for the quick read alone, out of the pool (a pool
    checkout and check-in cost about what the version statement does), and lent to the write
    door for one transaction at a time when it is free (:func:`lend_held`: its commits then leave
    its ``data_version`` and its page cache as they were, and are journaled here). Used by one
    caller at a time (``lock``; a caller that finds it busy takes a pooled one). In autocommit
    (the store's connections run with ``isolation_level=None``), so a read holds no transaction
    between checks. Closed when the engine is disposed (``Store.close``)."""

    __slots__ = ("conn", "cursor", "lock", "pid", "token", "plan", "serial", "journal", "__weakref__")

    #: door transactions remembered (:attr:`journal`)
    JOURNAL = 32

    def __init__(self, engine: Any) -> None:
        fairy = engine.raw_connection()
        fairy.detach()  # no longer the pool's: the pool may open another in its place
        self.conn = fairy
        self.cursor = fairy.cursor()
        self.lock = threading.Lock()
        self.pid = os.getpid()
        #: this connection among every one made (a version read here carries it: ``ThreadVersion.seen``)
        self.token = next(_TOKENS)
        self.plan = _quick_plan(engine.dialect)
        #: write transactions the door ran here (committed or not), and the last :data:`JOURNAL` of
        #: them: (serial, thread key, ids of the messages it appended when that is all it wrote, else None)
        self.serial = 0
        self.journal: deque[tuple[int, str, tuple[int, ...] | None]] = deque(maxlen=self.JOURNAL)

    def drop(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 - closing a connection that failed
            pass


class HeldLease:
    """The quick read's connection (:class:`_Held`) lent to one write transaction of the door
    (``Store.locked``), its lock held until :meth:`release`. Its commits do not move its own
    ``PRAGMA data_version`` (nor empty its page cache, as another connection's commit does), so
    each one is journaled: a quick read then knows the whole change since a version it read."""

    __slots__ = ("engine", "held", "changes", "done")

    def __init__(self, engine: Any, held: _Held) -> None:
        self.engine, self.held = engine, held
        self.changes = held.conn.dbapi_connection.total_changes  # rows changed on it so far
        self.done = False

    def connect(self) -> Connection:
        """A Core connection on the lent driver connection: what ``engine.connect()`` gives (its
        events, the store's begin hook), except that closing it keeps the driver connection here
        instead of checking it into the pool (its checkout count stays above zero)."""
        fairy = self.held.conn
        fairy._counter += 1  # Connection.close() takes it back to 1: no check-in of a connection the pool does not own
        return Connection(self.engine, connection=fairy)

    def committed(self, thread: str, appended: Sequence[tuple[int, Any]], changes: int) -> None:
        """The transaction committed: journal it, with the ids of ``appended`` when the rows it
        changed on the connection are exactly the ``changes`` its appends made (nothing else
        written: no request, state, configuration or other row)."""
        total = self.held.conn.dbapi_connection.total_changes - self.changes
        self._journal(thread, tuple(i for i, _ in appended) if total == changes and appended else None)

    def release(self, thread: str) -> None:
        """Give the connection back to the quick read; a transaction that did not reach
        :meth:`committed` is journaled as unknown (a quick read then reads the version), and a
        connection left in a transaction or closed by a failure is dropped."""
        held = self.held
        try:
            if not self.done:
                self._journal(thread, None)
                driver = held.conn.dbapi_connection
                if driver is None or driver.in_transaction:
                    _forget_held(self.engine, held)
        except Exception:  # noqa: BLE001 - a connection that cannot say its state is not kept
            _forget_held(self.engine, held)
        finally:
            held.lock.release()

    def _journal(self, thread: str, ids: tuple[int, ...] | None) -> None:
        held = self.held
        held.serial += 1
        held.journal.append((held.serial, thread, ids))
        self.done = True


def lend_held(engine: Any) -> HeldLease | None:
    """The quick read's connection for one write transaction of the door, when the engine has
    one (a SQLite file whose pressure checks made it) and nobody uses it now; else None (the
    door takes a pooled connection)."""
    held = _HELD.get(engine)
    if held is None or held.pid != os.getpid() or not hasattr(held.conn, "_counter") or not held.lock.acquire(blocking=False):
        return None
    try:
        if held.conn.dbapi_connection is not None:
            return HeldLease(engine, held)
    except Exception:  # noqa: BLE001 - a connection that cannot say what it changed is not lent
        pass
    held.lock.release()
    _forget_held(engine, held)  # closed under the quick read (a failure): the next read opens another
    return None


_HELD: "weakref.WeakKeyDictionary[Any, _Held]" = weakref.WeakKeyDictionary()
_TOKENS = itertools.count(1)
_HELD_LOCK = threading.Lock()


def _held_connection(engine: Any) -> _Held | None:
    """The quick read's own connection to a SQLite file (None for PostgreSQL, where a statement
    is a round trip anyway, and for an in-memory database, whose pool holds its one connection)."""
    held = _HELD.get(engine)
    if held is not None and held.pid == os.getpid():
        return held
    if engine.dialect.name != "sqlite" or not isinstance(engine.pool, QueuePool):
        return None
    with _HELD_LOCK:
        held = _HELD.get(engine)
        if held is None or held.pid != os.getpid():
            if held is None:
                event.listen(engine, "engine_disposed", _dispose_held)
            held = _HELD[engine] = _Held(engine)  # a forked child's copy is left alone (the parent's)
        return held


def _forget_held(engine: Any, held: _Held) -> None:
    with _HELD_LOCK:
        if _HELD.get(engine) is held:
            del _HELD[engine]
    held.drop()


def _dispose_held(engine: Any) -> None:
    with _HELD_LOCK:
        held = _HELD.pop(engine, None)
    if held is not None and held.pid == os.getpid():
        with held.lock:
            held.drop()
