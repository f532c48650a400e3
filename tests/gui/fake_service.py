# Over 800 lines: one stand-in implementing every method of InspectorService (tests/gui/test_service_api.py keeps it in step with the protocol); split, the protocol would be implemented in pieces.
"""An in-memory stand-in for ``engine.service.Service``: fast, scriptable, with races on demand.

It satisfies :class:`inspector_app.service_api.InspectorService` (the service API the inspector uses; ``test_service_api.py``
checks the signatures against the Protocol and the real service), records every call, and keeps offloaded tool results in a
real ``engine.core.workdir.Workdir`` so ``read_original`` verifies SHA-256 for real. Token badges come from a simple rule
(:func:`fake_tokens`), not the engine's meter: the real-service tests check real counts. ``threads``: tests/gui/fake_fleet.py.

The facets the inspector uses (``reads``, ``compaction``, ``steering``, ``imports``) are the fake itself
(``self.reads = self``, ...): one object implements every facet Protocol's methods, so a test may
script or patch ``fake.status`` and the GUI's ``service.compaction.status`` sees it."""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from engine.core.errors import Cancelled, EngineError, ThreadBusy, ThreadNotFound
from engine.core.messages import META_EPHEMERAL, Message, ToolCall, assistant, tool_result, user
from engine.core.specifics import dropped_at_compaction
from engine.core.surface import SYNTHETIC_USER_TEXT, shown_message
from engine.core.views import (
    CompactionCost,
    CompactionDiff,
    CompactionEntry,
    CompactionEvent,
    CompactionState,
    Episode,
    HistoryRecord,
    ManualResult,
    Offload,
    PinChange,
    PinInfo,
    PressurePoint,
    PressureStatus,
    ReplayStep,
    RequestEnvelope,
    SourceCompaction,
    StoredMessage,
    ThreadInfo,
    ThreadPolicyView,
    VisibleTokens,
)
from engine.core.workdir import Workdir
from tests.gui.fake_fleet import FakeThreads

if TYPE_CHECKING:
    from engine.service import ImportReport
    from engine.whatif import WhatIfComparison, WhatIfRun, WhatIfSweep

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def _with_id(m: Message, i: int) -> Message:
    return Message(m.role, m.content, id=i, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name, metadata=m.metadata)


@dataclass
class FakeThread:
    info: ThreadInfo
    messages: list[StoredMessage] = field(default_factory=list)
    state: CompactionState | None = None
    history: list[HistoryRecord] = field(default_factory=list)
    offloads: dict[int, Offload] = field(default_factory=dict)
    tokens: int = 0
    threshold: int = 100_000
    window: int = 128_000
    pressure: list[PressurePoint] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    sources: list[SourceCompaction] = field(default_factory=list)
    window_source: str | None = "catalog"
    window_detail: str | None = "gpt-4o in the catalogue"
    #: what a manual compaction of this thread answers instead of compacting (a scripted result)
    compact_result: ManualResult | None = None
    #: the system prompt and tool schema text the fake's envelopes count (system / tools categories)
    system_prompt: str = "You are a support agent. Be precise and cite invoice numbers."
    tools_text: str = "lookup_invoice(invoice) query_kb(q) web_search(q) mailer(to, body)"
    #: the ephemeral notes of the running request (shown last in its envelope)
    ephemeral: tuple[Message, ...] = ()


class FakeService:
    """Threads kept in memory; thread-safe; ``calls`` lists (method, args) in call order."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Workdir(workdir)
        self.threads: FakeThreads = FakeThreads(self)  # by key; also the ``svc.threads`` facet
        #: the facets: this fake itself (see the module docstring)
        self.reads = self.compaction = self.steering = self.imports = self
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.compact_race: str | None = None  # busy reason to raise on compact although status said idle
        #: raised by ``compact`` when set (a rejected summary, a refusal)
        self.compact_error: Exception | None = None
        #: what ``summarizer_info`` names as the configured summarizer
        self.summarizer_name = "extractive"
        self.closed = False
        #: set to make ``import_file`` wait until the event is set (a slow import, to watch its progress)
        self.import_gate: threading.Event | None = None
        #: thread key -> an event ``status_with_progress`` waits for after its first page (a slow
        #: cold measurement of that thread, to watch its progress)
        self.status_gates: dict[str, threading.Event] = {}
        self._lock = threading.RLock()
        #: issue 23: pinned ids and thread policies by thread; what the GUI asked
        self._pins: dict[str, set[int]] = {}
        self._policies: dict[str, dict[str, Any]] = {}
        self.steering_calls: list[tuple[Any, ...]] = []
        self.compact_instructions: list[tuple[str, str | None, str | None]] = []
        self._next_id = 1
        #: request envelopes built (their indexes, in order) and the names of the threads that built them
        self.built: list[int] = []
        self.built_on: set[str] = set()

    # -- building scenarios --------------------------------------------------------------------
    def add_thread(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        title: str | None = None,
        busy: str | None = None,
        tokens: int = 40_000,
        threshold: int = 100_000,
        prune: Sequence[int] = (),
    ) -> FakeThread:
        """A thread with ``messages`` (ids assigned in order); ``prune`` lists indexes of tool
        results to offload (saved in the Workdir; the model sees a preview)."""
        cid = len(self.threads) + 1
        stored: list[StoredMessage] = []
        offloads: dict[int, Offload] = {}
        for index, m in enumerate(messages):
            msg = _with_id(m, self._next_id)
            self._next_id += 1
            sha = None
            if index in prune:
                saved = self.workdir.save(msg.name or "tool", msg.content)
                sha = saved.sha256
                offloads[msg.id] = Offload(msg.id, msg.name or "tool", saved.path, sha, f"[preview of {msg.name}] " + msg.content[:40], 900, 40, 1, T0)
            stored.append(StoredMessage(msg, cid, T0 + timedelta(minutes=index), sha))
        info = ThreadInfo(cid, key, title or key, "support-agent", "openai", "gpt-4o", len(stored), 0, 0, None, busy, T0, T0)
        thread = FakeThread(info, stored, CompactionState(cid), offloads=offloads, tokens=tokens, threshold=threshold)
        self.threads[key] = thread
        thread.pressure = self._pressure_of(thread)
        return thread

    def _pressure_of(self, t: FakeThread) -> list[PressurePoint]:
        """One point per request of the fake's envelopes (the chart and the replay agree), marked
        with the compaction that happened right before it."""
        out: list[PressurePoint] = []
        generation = 0
        for index, pos, record, breakdown in self._plan(t):
            now = record.generation_after if record else 0
            marker = record.kind if record is not None and now != generation else None
            generation = now
            out.append(PressurePoint(index + 1, 1 + self._turn_start(t, pos), index, sum(breakdown.values()), t.threshold, marker, t.messages[pos - 1].created_at))
        return out

    def set_boundary(self, key: str, boundary: int, summary: str, *, kind: str = "summary", trigger: str = "pressure") -> None:
        t = self.threads[key]
        assert t.state is not None
        gen = t.state.generation + 1
        t.state = replace(t.state, boundary=boundary, summary=summary, summary_tokens=len(summary) // 4 + 1, generation=gen, compact_count=t.state.compact_count + 1, updated_at=T0 + timedelta(hours=1))
        t.history.append(HistoryRecord(len(t.history) + 1, t.info.id, kind, trigger, gen - 1, gen, None, boundary, summary, (), 95_000, 30_000, T0 + timedelta(hours=1)))  # type: ignore[arg-type]
        t.info = replace(t.info, generation=gen, compact_count=t.state.compact_count, boundary=boundary)
        t.pressure = self._pressure_of(t)

    def append(self, key: str, m: Message) -> StoredMessage:
        with self._lock:
            t = self.threads[key]
            stored = StoredMessage(_with_id(m, self._next_id), t.info.id, T0 + timedelta(days=1))
            self._next_id += 1
            t.messages.append(stored)
            t.info = replace(t.info, message_count=len(t.messages))
            return stored

    def _record(self, name: str, *args: Any) -> FakeThread | None:
        with self._lock:
            self.calls.append((name, args))
            if args and isinstance(args[0], str):
                if args[0] not in self.threads:
                    raise ThreadNotFound(f"no thread {args[0]!r}")
                return self.threads[args[0]]
        return None

    def called(self, name: str) -> int:
        with self._lock:
            return sum(1 for n, _ in self.calls if n == name)

    # -- the service API -----------------------------------------------------------------------
    def list_threads(self, text: str | None = None, after_key: str | None = None, limit: int = 500) -> list[ThreadInfo]:
        self._record("list_threads")
        infos = sorted((t.info for t in self.threads.values()), key=lambda i: i.key)
        if text:
            infos = [i for i in infos if text.lower() in (i.title + i.key).lower()]
        if after_key is not None:
            infos = [i for i in infos if i.key > after_key]
        return infos[:limit]

    def thread(self, key: str) -> ThreadInfo:
        t = self._record("thread", key)
        assert t is not None
        return t.info

    def messages_page(self, key: str, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500) -> list[StoredMessage]:
        """Ascending keyset pages like the store: the first ``limit`` after ``after_id``, or with
        only ``before_id`` the last ``limit`` before it. Recorded as (key, after_id, limit, before_id)."""
        t = self._record("messages_page", key, after_id, limit, before_id)
        assert t is not None
        rows = [m for m in t.messages if (after_id is None or m.id > after_id) and (before_id is None or m.id < before_id)]
        if before_id is not None and after_id is None:
            return rows[-limit:] if limit > 0 else []
        return rows[:limit]

    def message_count(self, key: str) -> int:
        t = self._record("message_count", key)
        assert t is not None
        return len(t.messages)

    def versions(self, key: str | None = None) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
        """Marks like the store's: the list's from every thread's header, the thread's from what
        its panels show (header, state, messages, tokens, points, episodes, sources)."""
        t = self._record("versions", key) if key is not None else None
        with self._lock:
            listing = tuple(sorted(((x.info.key, x.info) for x in self.threads.values()), key=lambda p: p[0]))
            if t is None:
                return listing, None
            last = t.messages[-1].id if t.messages else None
            return listing, (t.info, t.state, len(t.messages), last, t.tokens, t.threshold, tuple(t.pressure), tuple(t.episodes), tuple(t.sources), len(t.history))

    def compaction_state(self, key: str) -> CompactionState:
        t = self._record("compaction_state", key)
        assert t is not None and t.state is not None
        return t.state

    def history(self, key: str) -> list[HistoryRecord]:
        t = self._record("history", key)
        assert t is not None
        return list(t.history)

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000,
               kinds: Sequence[str] | None = None) -> list[CompactionEvent]:
        self._record("events", key)
        return []

    def offloads(self, key: str, message_ids: Sequence[int] | None = None) -> dict[int, Offload]:
        t = self._record("offloads", key)
        assert t is not None
        return {i: o for i, o in t.offloads.items() if message_ids is None or i in message_ids}

    def read_original(self, offload: Offload) -> str:
        self._record("read_original")
        return self.workdir.read(offload.sha256, path=offload.path)

    def status(self, key: str, *, remember: bool = True) -> PressureStatus:
        t = self._record("status", key)
        assert t is not None and t.state is not None
        parts = {"system": 0.08, "tools": 0.05, "summary": 0.07 if t.state.summary else 0.0, "user": 0.15, "assistant": 0.25}
        breakdown = {k: int(t.tokens * v) for k, v in parts.items()}
        breakdown["tool_results"] = t.tokens - sum(breakdown.values())
        return PressureStatus(
            key, t.tokens, t.threshold, t.window, breakdown, t.state.boundary, t.state.generation, t.state.compact_count, t.info.busy_reason,
            window_source=t.window_source, window_detail=t.window_detail,
        )  # fmt: skip

    #: messages per page of the fake's cold measurement (the engine streams pages too)
    STATUS_PAGE = 150

    def status_with_progress(self, key: str, progress: Callable[[int], None]) -> PressureStatus:
        """Like the engine's cold measurement: ``progress(messages_counted)`` after each page of
        the thread's messages (:attr:`STATUS_PAGE` each), then :meth:`status`. A gate in
        :attr:`status_gates` for ``key`` holds it after its first page until the gate opens."""
        t = self._record("status_with_progress", key)
        assert t is not None
        with self._lock:
            total = len(t.messages)
        gate = self.status_gates.get(key)
        counted = 0
        while counted < total:
            counted = min(total, counted + self.STATUS_PAGE)
            progress(counted)
            if gate is not None:
                gate.wait(10)
        return self.status(key)

    def pressure_history(self, key: str) -> list[PressurePoint]:
        t = self._record("pressure_history", key)
        assert t is not None
        return list(t.pressure)

    # -- issue 23: revert / redo, audit, access (the fake: nothing to revert, an empty log, writable) --
    def revert(self, key: str, *, reason: str | None = None, display_name: str | None = None) -> Any:
        from engine.core.errors import NotRevertible

        self._record("revert", key)
        raise NotRevertible(f"thread {key!r} has no compaction to revert", code="nothing_to_revert")

    def revert_target(self, key: str) -> Any:
        from engine.core.views import RevertTarget

        return RevertTarget(None, (), "nothing_to_revert", f"thread {key!r} has no compaction to revert")

    def audit(
        self, *, thread: str | None = None, operator: str | None = None, actions: Sequence[str] | None = None, after_id: int | None = None, limit: int = 200
    ) -> list[Any]:
        return []

    def audit_operators(self) -> list[str]:
        return []

    def access(self) -> dict[str, Any]:
        return {"writable": True, "reason": None, "words": None, "operator": "fake"}

    # -- steering (issue 23) -------------------------------------------------------------
    def pins(self, key: str) -> list[PinInfo]:
        self._record("pins", key)
        return [PinInfo(i, None, "tester") for i in sorted(self._pins.get(key, set()))]

    def pin(self, key: str, message_id: int, *, reason: str | None = None, display_name: str | None = None, unpin: bool = False) -> PinChange:
        self._record("pin", key, message_id)
        have = self._pins.setdefault(key, set())
        changed = (message_id,) if (message_id in have) == unpin else ()
        (have.discard if unpin else have.add)(message_id)
        self.steering_calls.append(("unpin" if unpin else "pin", key, message_id, reason))
        return PinChange(key, message_id, "unpin" if unpin else "pin", (message_id,), changed, len(self.steering_calls))

    def thread_policy(self, key: str) -> ThreadPolicyView:
        self._record("thread_policy", key)
        own = dict(self._policies.get(key, {}))
        values = {"threshold_ratio": own.get("threshold_ratio", 0.8), "context_window": own.get("context_window", 8000),
                  "retained_tail_ratio": own.get("retained_tail_ratio", 0.16)}
        origins = {k: "thread" if k in own else "store default" for k in values}
        window = int(values["context_window"])
        threshold = int(window * float(values["threshold_ratio"]))
        return ThreadPolicyView(key, "sim", "m", values, origins, window, "thread" if "context_window" in own else "assumed", threshold,
                                threshold // 2, int(window * float(values["retained_tail_ratio"])),
                                {k: v for k, v in own.items() if k != "instructions"}, own.get("instructions"))

    def set_thread_policy(self, key: str, values: Mapping[str, Any] | None = None, *, unset: Sequence[str] = (),
                          reason: str | None = None, display_name: str | None = None) -> ThreadPolicyView:
        self._record("set_thread_policy", key)
        own = self._policies.setdefault(key, {})
        for k in unset:
            own.pop(k, None)
        for k, v in (values or {}).items():
            if v is None or v == "":
                own.pop(k, None)
            else:
                own[k] = v
        self.steering_calls.append(("policy", key, dict(own), reason))
        return self.thread_policy(key)

    def compact(self, key: str, *, summarizer: str | None = None, operator: str | None = None,
                instructions: str | None = None, reason: str | None = None) -> ManualResult:
        self.compact_instructions.append((key, instructions, reason))
        t = self._record("compact", key)
        assert t is not None and t.state is not None
        if self.compact_race:
            raise ThreadBusy(key, self.compact_race)
        if self.compact_error is not None:
            raise self.compact_error
        if t.info.busy_reason:
            raise ThreadBusy(key, t.info.busy_reason)
        if t.compact_result is not None:
            return t.compact_result
        with self._lock:
            users = [m.id for m in t.messages if m.message.role == "user"]
            if len(users) < 2:
                return ManualResult("no_op", "insufficient_history", t.tokens, t.tokens, 0, t.state.boundary, t.state.generation, 0)
            boundary = users[-1] - 1
            before = t.tokens
            self.set_boundary(key, boundary, "Manual summary of everything before the last turn.", kind="manual", trigger="manual")
            t.tokens = before // 3
            compacted = sum(1 for m in t.messages if m.id <= boundary)
            return ManualResult("completed", None, before, t.tokens, compacted, boundary, t.state.generation, 1)

    def summarizer_info(self) -> dict[str, str | None]:
        self._record("summarizer_info")
        return {"summarizer": self.summarizer_name, "summarizer_host": None}

    def reload_summarizer(self) -> dict[str, str | None]:
        return {"summarizer": "extractive", "summarizer_host": None}

    def replay(self, key: str) -> list[Episode]:
        t = self._record("replay", key)
        assert t is not None
        return list(t.episodes)

    def visible_tokens(self, key: str, stored: Sequence[StoredMessage], offloads: Mapping[int, Offload]) -> VisibleTokens:
        """:func:`fake_tokens` of each message as the model sees it (a pruned one as its preview)."""
        self._record("visible_tokens", key)
        seen = {s.id: fake_tokens(offloads[s.id].preview if s.id in offloads else s.message.content, s.message) for s in stored}
        original = {s.id: fake_tokens(s.message.content, s.message) for s in stored if s.id in offloads}
        return VisibleTokens(seen, original)

    def source_compactions(self, key: str) -> list[SourceCompaction]:
        t = self._record("source_compactions", key)
        assert t is not None
        return list(t.sources)

    def discover_sessions(self, folders: Sequence[str] = (), *, home: str | None = None) -> "list[Any]":
        """The real discovery on disk (``home``: a test's fake home), none marked imported."""
        from engine.discovery import discover

        return discover(folders, home=home)

    def follow_sessions(self, folders: Sequence[str] = (), *, home: str | None = None, on_reports: Any = None,
                        on_error: Any = None, debounce_ms: int = 400) -> Any:
        """The real follower, writing through :meth:`import_file`."""
        from engine.discovery import SessionFollower

        return SessionFollower(lambda p, _fmt: self.import_file(p), folders=folders, home=home, on_reports=on_reports,
                               on_error=on_error, debounce_ms=debounce_ms).start()

    def import_file(self, path: str | os.PathLike[str], *, format: str | None = None, thread: str | None = None) -> "list[ImportReport]":
        """A JSON or JSONL file becomes a thread ``<format>:<stem>`` (default format
        ``claude-code``) of one turn with a recorded compaction after its first message; anything
        else is an ``import_format`` error, like the real importers. A second import of the same
        file writes nothing."""
        from engine.service import ImportReport

        with self._lock:
            self.calls.append(("import_file", (str(path),)))
        if self.import_gate is not None:
            self.import_gate.wait(10)
        p = Path(path)
        text = p.read_text(encoding="utf-8", errors="replace").lstrip()
        if not text.startswith(("{", "[")):
            raise EngineError(f"{p}: not a claude-code session (no JSON entries)", code="import_format")
        fmt = format or "claude-code"
        key = thread or f"{fmt}:{p.stem}"
        with self._lock:
            if key in self.threads:
                return [ImportReport(key, str(p), fmt, 0, 0, 0, already_stored=len(self.threads[key].messages))]
            messages = [user("Please fix the failing test."), assistant("", ToolCall("t1", "Bash", '{"command": "pytest -x"}')),
                        tool_result("t1", "1 failed", name="Bash"), assistant("Fixed: the test passes now.")]  # fmt: skip
            t = self.add_thread(key, messages, title=f"Imported {p.stem}")
            t.info = replace(t.info, provider="anthropic", model="claude-sonnet-4-5", source_format=fmt, source_file=str(p), source_session_id=p.stem)
            t.sources = [SourceCompaction(1, t.info.id, fmt, "summary", "auto", 155_000, "Summary the source wrote.", t.messages[0].id, None, None, "cb-1", None)]
            return [ImportReport(key, str(p), fmt, 4, 1, 1, warnings=(f"{p}:3: malformed JSON (skipped)",), created=True, requests=2)]

    # -- issue #14 ---------------------------------------------------------------------------
    # The fake's model requests: one per assistant message (the request that produced it). A
    # compaction (history record with ``boundary_after`` b) is in force for every request whose
    # newest message is past b; a pruned tool result shows as its preview once its turn is over.

    def _requests(self, t: FakeThread) -> list[int]:
        """Positions (in ``t.messages``) of the assistant messages: request i produced message i."""
        return [i for i, s in enumerate(t.messages) if s.message.role == "assistant" and i > 0]

    def _turn_start(self, t: FakeThread, upto: int) -> int:
        """Position of the user message that opened the turn containing position ``upto - 1``."""
        for i in range(upto - 1, -1, -1):
            if t.messages[i].message.role == "user":
                return i
        return 0

    def _surface(self, t: FakeThread, upto: int, boundary: int | None) -> tuple[tuple[Message, ...], tuple[int, ...]]:
        """The messages (positions < ``upto``, ids past ``boundary``) as the model sees them, and
        the ids shown as previews."""
        turn = self._turn_start(t, upto)
        shown: list[Message] = []
        pruned: list[int] = []
        for i, s in enumerate(t.messages[:upto]):
            if boundary is not None and s.id <= boundary:
                continue
            offload = t.offloads.get(s.id) if i < turn else None
            if offload is not None:
                pruned.append(s.id)
            shown.append(shown_message(s.message, offload))
        if shown and shown[0].role != "user":
            shown.insert(0, Message("user", SYNTHETIC_USER_TEXT, metadata={"synthetic": True}))
        return tuple(shown), tuple(pruned)

    def _plan(self, t: FakeThread) -> list[tuple[int, int, HistoryRecord | None, dict[str, int]]]:
        """(index, position, record in force, token breakdown) of every request, in one pass with
        prefix sums (a 20,000-message thread's pressure points are cheap; the surfaces themselves
        are built only by :meth:`_envelopes`)."""
        n = len(t.messages)
        cats = ("user", "assistant", "tool_results", "system")
        full = {c: [0] * (n + 1) for c in cats}
        seen = {c: [0] * (n + 1) for c in cats}
        last_user = [0] * (n + 1)  # last_user[i]: position of the last user message before i
        lu = 0
        for i, st in enumerate(t.messages):
            m = st.message
            c = {"user": "user", "assistant": "assistant", "tool": "tool_results"}.get(m.role, "system")
            tok = fake_tokens(m.content, m)
            offload = t.offloads.get(st.id) if m.role == "tool" else None
            shown_tok = fake_tokens(offload.preview, m) if offload is not None else tok
            for k in cats:
                full[k][i + 1] = full[k][i] + (tok if k == c else 0)
                seen[k][i + 1] = seen[k][i] + (shown_tok if k == c else 0)
            if m.role == "user":
                lu = i
            last_user[i + 1] = lu
        ids = [st.id for st in t.messages]
        base = {"system": fake_tokens(t.system_prompt, user("")), "tools": len(t.tools_text) // 4}
        notes = sum(fake_tokens(e.content, e) for e in t.ephemeral)
        positions = self._requests(t)
        out: list[tuple[int, int, HistoryRecord | None, dict[str, int]]] = []
        for index, pos in enumerate(positions):
            last_id = ids[pos - 1]
            records = [h for h in t.history if h.boundary_after is not None and last_id > h.boundary_after]
            record = records[-1] if records else None
            start = min(bisect.bisect_right(ids, record.boundary_after or 0), pos) if record is not None else 0
            turn = max(start, last_user[pos])
            breakdown = {**base, "summary": fake_tokens(record.summary, user("")) if record and record.summary else 0}
            for k in cats:
                breakdown[k] = seen[k][turn] - seen[k][start] + full[k][pos] - full[k][turn]
            if start < pos and t.messages[start].message.role != "user":
                breakdown["user"] += fake_tokens(SYNTHETIC_USER_TEXT, user(""))
            if index == len(positions) - 1 and t.info.busy_reason is not None:
                breakdown["system"] += notes  # the running request's ephemeral notes
            breakdown["system"] += base["system"]
            out.append((index, pos, record, breakdown))
        return out

    def _envelope(self, t: FakeThread, plan: Sequence[tuple[int, int, HistoryRecord | None, dict[str, int]]], index: int) -> RequestEnvelope:
        """Request ``index``'s envelope (its surface built now)."""
        _i, pos, record, breakdown = plan[index]
        last = t.messages[pos - 1]
        boundary = record.boundary_after if record else None
        summary = record.summary if record else None
        messages, pruned = self._surface(t, pos, boundary)
        running = index == len(plan) - 1 and t.info.busy_reason is not None
        ephemeral = tuple(e if e.is_ephemeral else e.with_content(e.content, **{META_EPHEMERAL: True}) for e in t.ephemeral) if running else ()
        messages += ephemeral
        note = "imported: the source's own prompt is not stored; rebuilt from its messages" if t.info.source_format else None
        return RequestEnvelope(
            index=index, request_id=index + 1, run_id=1 + self._turn_start(t, pos), step=index, created_at=last.created_at,
            generation=record.generation_after if record else 0, boundary=boundary, summary=summary, messages=messages,
            pruned_ids=pruned, ephemeral=ephemeral, tokens=sum(breakdown.values()), breakdown=breakdown,
            reported_prompt_tokens=None, context_window=t.window, threshold=t.threshold, outcome="completed",
            origin="imported" if t.info.source_format else "engine", exact=not t.info.source_format,
            note=note, estimated_tokens=sum(breakdown.values()), last_message_id=last.id,
        )  # fmt: skip

    def _envelopes(self, t: FakeThread) -> list[RequestEnvelope]:
        plan = self._plan(t)
        return [self._envelope(t, plan, i) for i in range(len(plan))]

    def request_envelopes(self, key: str) -> Sequence[RequestEnvelope]:
        """A lazy sequence like the real service's: each envelope is built when indexed (counted
        in ``built``, with the thread that built it in ``built_on``)."""
        t = self._record("request_envelopes", key)
        assert t is not None
        with self._lock:
            return FakeEnvelopes(self, t, self._plan(t))

    def _compactions(self, t: FakeThread) -> list[HistoryRecord | SourceCompaction]:
        """Engine records and the source's compactions, in thread order."""
        def at(c: HistoryRecord | SourceCompaction) -> int:
            return (c.boundary_after if isinstance(c, HistoryRecord) else c.after_message_id) or 0

        return sorted([*t.history, *t.sources], key=at)

    def _categories(self, t: FakeThread, summary: str | None, messages: Sequence[Message]) -> dict[str, int]:
        """:data:`engine.core.views.DIFF_CATEGORIES` of one side of a compaction."""
        out = {"system": fake_tokens(t.system_prompt, user("")), "tools": len(t.tools_text) // 4, "summary": fake_tokens(summary, user("")) if summary else 0, "messages": 0, "previews": 0}
        for m in messages:
            out["previews" if m.metadata.get("pruned") else "messages"] += fake_tokens(m.content, m)
        out["total"] = sum(out.values())
        return out

    def _diff(self, t: FakeThread, index: int, c: HistoryRecord | SourceCompaction, previous: str | None) -> CompactionDiff:
        if isinstance(c, HistoryRecord):
            start, end, summary, origin = c.boundary_before, c.boundary_after, c.summary, "engine"
            kind, trigger, created, gen = c.kind, c.trigger, c.created_at, (c.generation_before, c.generation_after)
        else:
            start = (c.replaced_first_id - 1) if c.replaced_first_id is not None else None
            end, summary, origin = c.replaced_last_id if c.replaced_last_id is not None else c.after_message_id, c.summary, c.source
            kind, trigger, created, gen = c.kind, c.trigger, None, (None, None)
        end = end or 0
        # the compaction happened at the first request past its boundary (or after the last message)
        positions = [p for p in self._requests(t) if t.messages[p - 1].id > end]
        upto = positions[0] if positions else len(t.messages)
        before, _ = self._surface(t, upto, start)
        after, pruned_ids = self._surface(t, upto, end)
        summarized = tuple(s.message for s in t.messages[:upto] if (start is None or s.id > start) and s.id <= end)
        kept = tuple(m for m in after if m.id is not None and m.id > end)
        request = next((m.content for m in reversed(after) if m.role == "user" and not m.is_synthetic), None)
        dropped = dropped_at_compaction(summarized=[m for m in before if m.id is not None and m.id <= end], previous_summary=previous, summary=summary,
                                        kept=after, system_prompt=t.system_prompt, current_request=request, retained=kept)  # fmt: skip
        return CompactionDiff(
            index=index, kind=kind, trigger=trigger, origin=origin, created_at=created, generation_before=gen[0], generation_after=gen[1],
            previous_summary=previous, summarized=summarized, summary=summary, kept=kept,
            pruned=tuple(t.offloads[i] for i in pruned_ids if i in t.offloads),
            tokens_before=self._categories(t, previous, before), tokens_after=self._categories(t, summary, after), dropped=dropped,
            note=None if origin == "engine" else f"recorded by {origin}: the surface is rebuilt from the imported messages",
            before=before, after=after, record_id=c.id,
        )  # fmt: skip

    def _diffs(self, t: FakeThread) -> list[CompactionDiff]:
        out: list[CompactionDiff] = []
        previous: str | None = None
        for n, c in enumerate(self._compactions(t), start=1):
            out.append(self._diff(t, n, c, previous))
            previous = c.summary or previous
        return out

    def compaction_diff(self, key: str, compaction: int | None = None) -> CompactionDiff:
        t = self._record("compaction_diff", key, compaction)
        assert t is not None
        with self._lock:
            diffs = self._diffs(t)
        if not diffs:
            raise EngineError(f"thread {key!r} has no compactions", code="no_compaction")
        if compaction is None:
            return diffs[-1]
        if not 1 <= compaction <= len(diffs):
            raise EngineError(f"thread {key!r} has {len(diffs)} compaction(s); there is no compaction {compaction}", code="no_compaction")
        return diffs[compaction - 1]

    def compaction_history(self, key: str) -> list[CompactionEntry]:
        t = self._record("compaction_history", key)
        assert t is not None
        with self._lock:
            diffs, envelopes = self._diffs(t), self._envelopes(t)
        out: list[CompactionEntry] = []
        for n, d in enumerate(diffs):
            nxt = diffs[n + 1].kept[0].id if n + 1 < len(diffs) and diffs[n + 1].kept and diffs[n + 1].kept[0].id is not None else None
            following = [e for e in envelopes if e.boundary is not None and e.summary == d.summary and (nxt is None or (e.last_message_id or 0) < nxt)]
            saved = max(0, d.tokens_before["total"] - d.tokens_after["total"]) * len(following)
            spent = sum(fake_tokens(m.content, m) for m in d.summarized) + (d.tokens_before["summary"] if d.previous_summary else 0)
            cost = CompactionCost(spent, d.tokens_after["summary"], saved, len(following), "meter", t.info.model, None, None, "the fake service knows no prices")
            out.append(CompactionEntry(d.index, d.kind, d.trigger, d.origin, d.created_at, d.tokens_before["total"], d.tokens_after["total"], d.summary, d.dropped, cost, d.note))
        return out

    def export_history(self, key: str, format: str = "md") -> str:
        self._record("export_history", key, format)
        entries = self.compaction_history(key)
        if format == "json":
            return json.dumps({"thread": key, "compactions": [_entry_json(e) for e in entries]}, indent=2)
        if format != "md":
            raise EngineError(f"unknown export format {format!r} (md or json)", code="invalid_format")
        lines = [f"# Compaction history of {key}", ""]
        for e in entries:
            lines += [f"## {e.index}. {e.kind} ({e.trigger or 'unknown trigger'}, {e.origin})", "",
                      f"- tokens: {e.tokens_before:,} → {e.tokens_after:,}",
                      f"- dropped specifics: {len(e.dropped.dropped) if e.dropped else 'not recorded'}", "", e.summary or "(no summary)", ""]  # fmt: skip
        return "\n".join(lines)

    #: what the fake's what-if accepts (the real one: engine/whatif/)
    WHATIF_KEYS = ("threshold_ratio", "retained_tail", "tool_result_limit", "preview_budget", "summarizer", "context_window")
    #: seconds each simulated request of a what-if takes (a slow run, to watch progress and cancel)
    whatif_delay: float = 0.0

    def _whatif_run(self, t: FakeThread, label: str, settings: Mapping[str, Any], tick: Callable[[], None]) -> "WhatIfRun":
        """The fake's engine: per request, the surface since the current boundary; over
        ``threshold_ratio`` of the window it summarizes all but the last ``retained_tail`` messages."""
        from engine.whatif import WhatIfPoint, WhatIfRun

        started = time.perf_counter()
        for name, value in settings.items():
            if name not in self.WHATIF_KEYS:
                raise EngineError(f"unknown what-if setting {name!r} (one of {', '.join(self.WHATIF_KEYS)})", code="invalid_setting")
            if name != "summarizer" and (not isinstance(value, (int, float)) or value <= 0 or (name == "threshold_ratio" and value > 1)):
                raise EngineError(f"bad value {value!r} for what-if setting {name!r}", code="invalid_setting")
        window = int(settings.get("context_window", t.window))
        threshold = float(settings.get("threshold_ratio", t.threshold / t.window)) * window
        tail = int(settings.get("retained_tail", 4))
        base = fake_tokens(t.system_prompt, user("")) + len(t.tools_text) // 4
        prefix = [0]
        for st in t.messages:
            prefix.append(prefix[-1] + fake_tokens(st.message.content, st.message))
        boundary, summary_tokens, compactions, points = -1, 0, 0, []
        for index, pos in enumerate(self._requests(t)):
            tick()
            tokens = base + summary_tokens + prefix[pos] - prefix[boundary + 1]
            compacted = 0
            if tokens > threshold and pos - tail > boundary + 1:
                summary_tokens = max(8, (prefix[pos - tail] - prefix[boundary + 1]) // 5)
                boundary, compactions, compacted = pos - tail - 1, compactions + 1, 1
                tokens = base + summary_tokens + prefix[pos] - prefix[boundary + 1]
            points.append(WhatIfPoint(index, tokens, tokens / window, compacted, compacted))
        pressures = [p.pressure for p in points] or [0.0]
        return WhatIfRun(
            label=label, settings=dict(settings), requests=len(points), compactions=compactions, summarizer_calls=compactions,
            peak_pressure=max(pressures), mean_pressure=sum(pressures) / len(pressures), prompt_tokens=sum(p.tokens for p in points),
            steps_over_window=sum(1 for p in points if p.tokens > window), specifics_dropped=None, request_kept=True,
            duration_ms=(time.perf_counter() - started) * 1000, by_kind={"summary": compactions} if compactions else {}, points=tuple(points),
        )  # fmt: skip

    def _recorded_run(self, t: FakeThread) -> "WhatIfRun":
        from engine.whatif import WhatIfPoint, WhatIfRun

        points = tuple(
            WhatIfPoint(p.step, p.tokens, p.tokens / t.window, 1 if p.compaction else 0, 1 if p.compaction in ("summary", "manual") else 0) for p in self._pressure_of(t)
        )
        pressures = [p.pressure for p in points] or [0.0]
        kinds: dict[str, int] = {}
        for h in t.history:
            kinds[h.kind] = kinds.get(h.kind, 0) + 1
        return WhatIfRun(
            label="recorded", settings={"threshold_ratio": t.threshold / t.window, "context_window": t.window}, requests=len(points),
            compactions=len(t.history), summarizer_calls=sum(1 for h in t.history if h.kind != "prune"), peak_pressure=max(pressures),
            mean_pressure=sum(pressures) / len(pressures), prompt_tokens=sum(p.tokens for p in points),
            steps_over_window=sum(1 for p in points if p.tokens > t.window), specifics_dropped=None, request_kept=True, duration_ms=0.0,
            by_kind=kinds, points=points,
        )  # fmt: skip

    def _ticker(self, total: int, progress: Callable[[int, int], None] | None, should_stop: Callable[[], bool] | None) -> Callable[[], None]:
        done = [0]

        def tick() -> None:
            if should_stop is not None and should_stop():
                raise Cancelled()
            if self.whatif_delay:
                time.sleep(self.whatif_delay)
            done[0] += 1
            if progress is not None:
                progress(done[0], total)

        return tick

    def whatif(
        self,
        key: str,
        settings: Mapping[str, Any],
        *,
        progress: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> "WhatIfComparison":
        from engine.whatif import WhatIfComparison

        t = self._record("whatif", key, dict(settings))
        assert t is not None
        with self._lock:
            recorded = self._recorded_run(t)
        tick = self._ticker(recorded.requests, progress, should_stop)
        return WhatIfComparison(key, recorded, self._whatif_run(t, "candidate", settings, tick))

    def whatif_sweep(
        self,
        key: str,
        parameter: str,
        values: Sequence[Any],
        *,
        settings: Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> "WhatIfSweep":
        from engine.whatif import WhatIfSweep

        t = self._record("whatif_sweep", key, parameter, tuple(values))
        assert t is not None
        with self._lock:
            recorded = self._recorded_run(t)
        tick = self._ticker(recorded.requests * len(values), progress, should_stop)
        runs = tuple(self._whatif_run(t, f"{parameter}={v}", {**(settings or {}), parameter: v}, tick) for v in values)
        return WhatIfSweep(key, parameter, tuple(values), runs, recorded)

    def close(self) -> None:
        self.closed = True


class FakeEnvelopes(Sequence[RequestEnvelope]):
    """:meth:`FakeService.request_envelopes`'s answer: built when indexed, like the engine's."""

    def __init__(self, service: FakeService, thread: FakeThread, plan: Sequence[tuple[int, int, HistoryRecord | None, dict[str, int]]]) -> None:
        self._service, self._thread, self._plan = service, thread, list(plan)

    def __len__(self) -> int:
        return len(self._plan)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"no request {index}")
        service = self._service
        with service._lock:
            service.built.append(index)
            service.built_on.add(threading.current_thread().name)
        return service._envelope(self._thread, self._plan, index)


def _entry_json(e: CompactionEntry) -> dict[str, Any]:
    cost = e.cost
    return {
        "index": e.index, "kind": e.kind, "trigger": e.trigger, "origin": e.origin,
        "created_at": e.created_at.isoformat() if e.created_at else None,
        "tokens_before": e.tokens_before, "tokens_after": e.tokens_after, "summary": e.summary,
        "dropped": e.dropped.to_json() if e.dropped is not None else None,
        "cost": None if cost is None else {"summarizer_prompt_tokens": cost.summarizer_prompt_tokens, "summarizer_completion_tokens": cost.summarizer_completion_tokens,
                                            "saved_prompt_tokens": cost.saved_prompt_tokens, "following_requests": cost.following_requests, "source": cost.source},
    }  # fmt: skip


def fake_tokens(content: str, m: Message) -> int:
    """The fake's token rule: four per message, one per four characters of text and tool arguments."""
    return 4 + (len(content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)) // 4


# -- scenarios ---------------------------------------------------------------------------------


def support_conversation() -> list[Message]:
    """Three finished turns: plain chat, parallel tool calls with a big result, an orphan result."""
    return [
        user("My invoice #4411 shows the wrong VAT rate."),
        assistant("Let me look that up.", ToolCall("c1", "lookup_invoice", '{"invoice": 4411}')),
        tool_result("c1", '{"invoice": 4411, "vat": 0.19, "country": "AT"}', name="lookup_invoice"),
        assistant("The invoice used 19% but Austria is 20%. I will correct it."),
        user("Thanks. Can you also check the knowledge base on reverse charge?"),
        assistant("", ToolCall("c2", "query_kb", '{"q": "reverse charge"}'), ToolCall("c3", "web_search", '{"q": "EU reverse charge B2B"}')),
        tool_result("c2", "Reverse charge applies to B2B services within the EU. " * 80, name="query_kb"),
        tool_result("c3", '{"results": [{"title": "VAT rules", "url": "https://example.eu/vat"}]}', name="web_search"),
        assistant("Reverse charge applies when both parties are VAT-registered businesses."),
        user("Great, please send me the corrected invoice."),
        tool_result("c9", "late result of a call nobody made", name="mailer"),
        assistant("Done: the corrected invoice is on its way."),
    ]


def long_conversation(n: int) -> list[Message]:
    """``n`` messages of finished turns of 4-7 messages (some with parallel calls), so that page
    edges cut turns and rounds at every possible place."""
    out: list[Message] = []
    i = 0
    while len(out) < n:
        out.append(user(f"question {i}: where is order {1000 + i}?"))
        calls = [ToolCall(f"c{i}", "lookup_order", f'{{"order": {1000 + i}}}')] + ([ToolCall(f"d{i}", "track", f'{{"order": {1000 + i}}}')] if i % 3 == 0 else [])
        out.append(assistant("", *calls))
        out.extend(tool_result(c.id, f'{{"order": {1000 + i}, "status": "shipped", "call": "{c.id}"}}', name=c.name) for c in calls)
        if i % 4 == 1:
            out.append(assistant("Checking the carrier as well.", ToolCall(f"e{i}", "carrier", "{}")))
            out.append(tool_result(f"e{i}", "DHL, on time", name="carrier"))
        out.append(assistant(f"Order {1000 + i} has shipped."))
        i += 1
    return out[:n]


def install_demo(service: FakeService) -> None:
    """The threads the window tests use: compacted (idle), running, waiting, queued, long."""
    t = service.add_thread("acme-vat", support_conversation(), title="ACME VAT correction", prune=(6,), tokens=62_000)
    service.set_boundary("acme-vat", t.messages[3].id, "User reported invoice #4411 with 19% VAT; corrected to 20% (AT).")
    t.episodes = [
        Episode(7, "recovered", (
            ReplayStep("provider_error", 1, error_code="CONTEXT_WINDOW_EXCEEDED", error_message="maximum context length is 128000", tokens_before=131_000, generation_before=1),
            ReplayStep("prune", 1, tokens_before=131_000, tokens_after=104_000, generation_before=1, generation_after=2, surface=tuple(m.message for m in t.messages[4:])),
            ReplayStep("summary", 1, tokens_before=104_000, tokens_after=61_000, generation_before=2, generation_after=3, surface=(user("(summary)"),) + tuple(m.message for m in t.messages[9:]), summary="short summary"),
            ReplayStep("recovered", 1, tokens_after=61_000, generation_after=3),
        )),
        Episode(9, "gave_up", (
            ReplayStep("provider_error", 1, error_code="CONTEXT_WINDOW_EXCEEDED", error_message="too long", tokens_before=140_000),
            ReplayStep("summary_rejected", 1, tokens_before=140_000, tokens_after=140_000, no_progress=True),
            ReplayStep("gave_up", 1, error_code="CONTEXT_WINDOW_EXCEEDED", error_message="too long"),
        )),
    ]
    running = support_conversation()[:5] + [assistant("", ToolCall("c7", "lookup_invoice", '{"invoice": 4412}'))]
    service.add_thread("beta-running", running, title="Beta refund (running)", busy="running", tokens=86_000)
    service.add_thread("gamma-waiting", support_conversation()[:4], title="Gamma login issue", busy="waiting_for_user")
    service.add_thread("delta-queued", support_conversation()[:4], title="Delta export", busy="queued")
    long: list[Message] = []
    for i in range(400):
        long += [user(f"question {i} about the export format"), assistant(f"answer {i}: use CSV with UTF-8")]
    service.add_thread("omega-long", long, title="Omega long thread", tokens=84_900)
