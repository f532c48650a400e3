"""An in-memory stand-in for ``engine.service.Service``: fast, scriptable, with races on demand.

It satisfies :class:`inspector_app.service_api.InspectorService` (the service API the inspector
uses; ``test_service_api.py`` checks the signatures against the Protocol and the real service),
records every call, and keeps offloaded tool results in a real ``engine.workdir.Workdir`` so
``read_original`` verifies SHA-256 for real. Token badges come from a simple rule
(:func:`fake_tokens`), not the engine's meter: the real-service tests check real counts.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine.errors import EngineError, ThreadBusy, ThreadNotFound
from engine.messages import Message, ToolCall, assistant, tool_result, user
from engine.views import (
    CompactionEvent,
    CompactionState,
    Episode,
    HistoryRecord,
    ManualResult,
    Offload,
    PressurePoint,
    PressureStatus,
    ReplayStep,
    SourceCompaction,
    StoredMessage,
    ThreadInfo,
    VisibleTokens,
)
from engine.workdir import Workdir

if TYPE_CHECKING:
    from engine.service import ImportReport

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)


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


class FakeService:
    """Threads kept in memory; thread-safe; ``calls`` lists (method, args) in call order."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Workdir(workdir)
        self.threads: dict[str, FakeThread] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.compact_race: str | None = None  # busy reason to raise on compact although status said idle
        self.closed = False
        #: set to make ``import_file`` wait until the event is set (a slow import, to watch its progress)
        self.import_gate: threading.Event | None = None
        self._lock = threading.RLock()
        self._next_id = 1

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
        thread.pressure = [PressurePoint(i + 1, 1, i, 20_000 + 9_000 * i, threshold, "prune" if i == 4 else None, T0) for i in range(8)]
        self.threads[key] = thread
        return thread

    def set_boundary(self, key: str, boundary: int, summary: str, *, kind: str = "summary", trigger: str = "pressure") -> None:
        t = self.threads[key]
        assert t.state is not None
        gen = t.state.generation + 1
        t.state = replace(t.state, boundary=boundary, summary=summary, summary_tokens=len(summary) // 4 + 1, generation=gen, compact_count=t.state.compact_count + 1, updated_at=T0 + timedelta(hours=1))
        t.history.append(HistoryRecord(len(t.history) + 1, t.info.id, kind, trigger, gen - 1, gen, None, boundary, summary, (), 95_000, 30_000, T0 + timedelta(hours=1)))  # type: ignore[arg-type]
        t.info = replace(t.info, generation=gen, compact_count=t.state.compact_count, boundary=boundary)

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

    def compaction_state(self, key: str) -> CompactionState:
        t = self._record("compaction_state", key)
        assert t is not None and t.state is not None
        return t.state

    def history(self, key: str) -> list[HistoryRecord]:
        t = self._record("history", key)
        assert t is not None
        return list(t.history)

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[CompactionEvent]:
        self._record("events", key)
        return []

    def offloads(self, key: str, message_ids: Sequence[int] | None = None) -> dict[int, Offload]:
        t = self._record("offloads", key)
        assert t is not None
        return {i: o for i, o in t.offloads.items() if message_ids is None or i in message_ids}

    def read_original(self, offload: Offload) -> str:
        self._record("read_original")
        return self.workdir.read(offload.sha256, path=offload.path)

    def status(self, key: str) -> PressureStatus:
        t = self._record("status", key)
        assert t is not None and t.state is not None
        parts = {"system": 0.08, "tools": 0.05, "summary": 0.07 if t.state.summary else 0.0, "user": 0.15, "assistant": 0.25}
        breakdown = {k: int(t.tokens * v) for k, v in parts.items()}
        breakdown["tool_results"] = t.tokens - sum(breakdown.values())
        return PressureStatus(
            key, t.tokens, t.threshold, t.window, breakdown, t.state.boundary, t.state.generation, t.state.compact_count, t.info.busy_reason,
            window_source=t.window_source, window_detail=t.window_detail,
        )  # fmt: skip

    def pressure_history(self, key: str) -> list[PressurePoint]:
        t = self._record("pressure_history", key)
        assert t is not None
        return list(t.pressure)

    def compact(self, key: str) -> ManualResult:
        t = self._record("compact", key)
        assert t is not None and t.state is not None
        if self.compact_race:
            raise ThreadBusy(key, self.compact_race)
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

    def close(self) -> None:
        self.closed = True


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
