"""The invariants of docs/schema.md, checked on one thread through the public service API: what
``compaction check`` reports and what the inspector shows for the open thread.

:func:`check_thread` is a pure function over what the public service API returns
(:class:`ThreadReader`): the thread header, its compaction state and history, every message page,
its offloads and their saved originals. It judges:

- ``message_count``: the stored count equals the rows read;
- ``boundary_missing``: the boundary points at a message of the thread;
- ``boundary_hash``: the boundary hash is the boundary message's content hash;
- ``boundary_splits_round``: the boundary lies on a unit end (no call at or before it is answered
  after it);
- ``generation_history``: every generation step has one history row (``after = before + 1``,
  chained from 0 to the current generation); ``compact_count``: the summaries among them;
  ``history_boundary``: the newest summary's ``boundary_after`` is the boundary;
- ``tool_without_call_id``, ``orphan_result``, ``answered_twice``: the call rules of the write door;
- ``offload_missing``, ``offload_mismatch``, ``offload_unreadable``, ``offload_not_tool_result``:
  every offload's original is in the Workdir and hashes to its SHA-256, and belongs to a tool result;
- ``tools_not_list``: the thread's tools are a list of objects;
- ``unreadable``: a part of the thread cannot be read at all (the reason in words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Protocol, Sequence

from .errors import describe_failure
from .messages import Message
from .views import CompactionState, HistoryRecord, Offload, StoredMessage, ThreadInfo

__all__ = ["PAGE", "Finding", "ServiceReader", "ThreadReader", "check_thread"]

PAGE = 1000  # messages (and threads, history rows) read per call


@dataclass(frozen=True)
class Finding:
    """One violation: the thread, the check that failed, what is wrong in words, and the id of the
    message (or history row) it is about when there is one."""

    thread: str
    check: str
    message: str
    id: int | None = None


class ThreadReader(Protocol):
    """What :func:`check_thread` reads (the service's query methods; ``history_all`` and
    ``tools`` read every history row and the stored tool schemas)."""

    def thread(self, key: str) -> ThreadInfo: ...
    def compaction_state(self, key: str) -> CompactionState: ...
    def history_all(self, key: str) -> Sequence[HistoryRecord]: ...
    def messages_page(self, key: str, *, after_id: int | None = None, limit: int = 500) -> list[StoredMessage]: ...
    def offloads(self, key: str) -> dict[int, Offload]: ...
    def read_original(self, offload: Offload) -> str: ...
    def tools(self, key: str) -> Any: ...


def _reason(exc: BaseException) -> str:
    return describe_failure(exc)[1]


def _readable_prefix(reader: ThreadReader, key: str, after: int | None, exc: Exception) -> tuple[list[StoredMessage], Exception]:
    """The longest page after ``after`` that can still be read (halving the page size), and the
    failure of reading one row more: the bad row is the one right after the returned rows."""
    good: list[StoredMessage] = []
    limit = PAGE // 2
    while limit >= 1:
        start = good[-1].id if good else after
        try:
            rows = reader.messages_page(key, after_id=start, limit=limit)
        except Exception as failure:  # noqa: BLE001 - the bad row is within these ``limit`` rows
            exc = failure
            limit //= 2
            continue
        good += rows
        if len(rows) < limit:  # the end, read without failing this time: the first failure stands
            break
    return good, exc


def check_thread(reader: ThreadReader, key: str) -> list[Finding]:
    """Every violation of docs/schema.md found in thread ``key`` (empty: none)."""
    out: list[Finding] = []

    def found(check: str, message: str, id: int | None = None) -> None:
        out.append(Finding(key, check, message, id))

    try:
        info = reader.thread(key)
        state = reader.compaction_state(key)
    except Exception as exc:  # noqa: BLE001 - reported, the other threads are still checked
        found("unreadable", f"the thread cannot be read: {_reason(exc)}")
        return out
    try:
        tools = reader.tools(key)
        if not isinstance(tools, (list, tuple)) or not all(isinstance(t, dict) for t in tools):
            found("tools_not_list", f"tools must be a list of objects, found {type(tools).__name__ if not isinstance(tools, (list, tuple)) else 'a list with non-objects'}")
    except Exception as exc:  # noqa: BLE001
        found("unreadable", f"the thread's tools cannot be read: {_reason(exc)}")

    # -- messages: count, call rules, the boundary --------------------------------------------
    kinds: dict[int, str] = {}
    count = 0
    boundary_message: Message | None = None
    pending: dict[str, bool] = {}  # calls of the newest assistant message → answered
    open_at_boundary: set[str] = set()
    after: int | None = None
    complete = True
    while True:
        try:
            page = reader.messages_page(key, after_id=after, limit=PAGE)
        except Exception as exc:  # noqa: BLE001
            page, exc = _readable_prefix(reader, key, after, exc)  # the rows before the bad one are still checked
            last = page[-1].id if page else after
            where = f"after #{last}" if last is not None else "first"
            found("unreadable", f"the message {where} cannot be read: {_reason(exc)}", last)
            complete = False
        for stored in page:
            m = stored.message
            count += 1
            kinds[stored.id] = m.role
            if m.role == "assistant":  # a newer assistant message replaces the pending calls with its own
                pending = {c.id: False for c in m.tool_calls}
            elif m.role == "tool":
                call = m.tool_call_id
                if not call:
                    found("tool_without_call_id", f"tool result #{stored.id} has no tool_call_id", stored.id)
                elif call in pending and not pending[call]:
                    pending[call] = True
                    if call in open_at_boundary:
                        found("boundary_splits_round", f"the boundary #{state.boundary} lies between call {call!r} and its result #{stored.id}", stored.id)
                elif call in pending:
                    found("answered_twice", f"tool result #{stored.id} answers call {call!r} a second time", stored.id)
                else:
                    found("orphan_result", f"tool result #{stored.id} answers {call!r}, which is not a pending call", stored.id)
            if stored.id == state.boundary:
                boundary_message = m
                open_at_boundary = {c for c, answered in pending.items() if not answered}
        if not complete or len(page) < PAGE:
            break
        after = page[-1].id
    if complete and count != info.message_count:
        found("message_count", f"message_count is {info.message_count} but the thread has {count} messages")
    if state.boundary is not None and complete:
        if boundary_message is None:
            found("boundary_missing", f"the boundary points at message #{state.boundary}, which is not in the thread", state.boundary)
        elif state.boundary_hash and boundary_message.content_hash() != state.boundary_hash:
            found("boundary_hash", f"the boundary hash does not match message #{state.boundary}'s content", state.boundary)

    # -- generation vs history ----------------------------------------------------------------
    try:
        history = sorted(reader.history_all(key), key=lambda h: h.id)
    except Exception as exc:  # noqa: BLE001
        found("unreadable", f"the compaction history cannot be read: {_reason(exc)}")
        history = None
    if history is not None:
        expected = 0
        for h in history:
            if h.generation_after != h.generation_before + 1:
                found("generation_history", f"history row {h.id} goes from generation {h.generation_before} to {h.generation_after} (one step expected)", h.id)
            elif h.generation_before != expected:
                found("generation_history", f"history row {h.id} starts at generation {h.generation_before}, the previous row ended at {expected}", h.id)
            expected = h.generation_after
        if expected != state.generation:
            found("generation_history", f"the generation is {state.generation} but the history rows reach {expected} ({len(history)} rows)")
        summaries = [h for h in history if h.kind in ("summary", "manual")]
        if len(summaries) != state.compact_count:
            found("compact_count", f"compact_count is {state.compact_count} but the history holds {len(summaries)} summaries")
        if summaries and summaries[-1].boundary_after != state.boundary:
            found("history_boundary", f"the newest summary (history row {summaries[-1].id}) set boundary #{summaries[-1].boundary_after}, the state says #{state.boundary}", summaries[-1].id)

    # -- offloads ------------------------------------------------------------------------------
    try:
        offloads = reader.offloads(key)
    except Exception as exc:  # noqa: BLE001
        found("unreadable", f"the offload records cannot be read: {_reason(exc)}")
        offloads = {}
    for message_id, offload in sorted(offloads.items()):
        if complete and kinds.get(message_id) != "tool":
            what = "is not in the thread" if message_id not in kinds else f"is a {kinds[message_id]} message"
            found("offload_not_tool_result", f"the offload of #{message_id} belongs to no tool result (the message {what})", message_id)
        try:
            reader.read_original(offload)
        except Exception as exc:  # noqa: BLE001
            code = getattr(exc, "code", "")
            check = {"workdir_missing": "offload_missing", "workdir_integrity": "offload_mismatch"}.get(code, "offload_unreadable")
            found(check, f"the original of #{message_id} ({offload.sha256[:12]}…): {_reason(exc)}", message_id)
    return out


class ServiceReader:
    """:class:`ThreadReader` over an open :class:`engine.service.Service` (duck-typed: any object
    whose ``reads`` facet has its query methods). Every history row is read a page at a time
    (``reads.history_page``) and the stored tools with ``reads.tools``; a stand-in facet without
    them gives its ``history`` and no tools to check."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc

    def __getattr__(self, name: str) -> Any:  # thread, compaction_state, messages_page, offloads, read_original
        return getattr(self.svc.reads, name)

    def history_all(self, key: str) -> list[HistoryRecord]:
        page_of = getattr(self.svc.reads, "history_page", None)
        if page_of is None:
            return list(self.svc.reads.history(key))
        rows: list[HistoryRecord] = []
        after: int | None = None
        while True:
            page = page_of(key, after_id=after, limit=PAGE)
            rows.extend(page)
            if len(page) < PAGE:
                return rows
            after = page[-1].id

    def tools(self, key: str) -> Any:
        tools_of = getattr(self.svc.reads, "tools", None)
        return [] if tools_of is None else tools_of(key)

    def thread_keys(self, after: str | None = None) -> Iterator[str]:
        """Every thread key in key order (those after ``after``), a page at a time."""
        while True:
            page = self.svc.reads.list_threads(after_key=after, limit=PAGE)
            yield from (t.key for t in page)
            if len(page) < PAGE:
                return
            after = page[-1].key
