# Over 500 lines: the one reader of a thread's compaction history (placement of every request, the diffs of ours and of a source's compactions, their cost; money in prices.py, export in export.py) by design; each part is a few small methods over one read of the thread.
"""The reader of a thread's compaction history (diffs, request envelopes, cost); see :mod:`engine.history`."""

from __future__ import annotations

import bisect
import itertools
import threading
import weakref
from collections import Counter
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Callable, Iterator, Literal, Mapping, Protocol, Sequence, overload

from ..compaction.replay import OVERFLOW_CODE, ephemeral_notes, pins_at, snapshot_at, state_at
from ..compaction.summarizers.protocol import instruction_terms
from ..core.errors import EngineError
from ..core.events import EventKind, ProviderErrorEvent, PruneEvent, RetryEvent, SummaryEvent, parse_event, written_by
from ..core.messages import META_PRUNED, Message
from ..core.meter import TokenMeter, default_meter
from ..core.previews import replacement_preview
from ..core.specifics import DroppedSpecifics, dropped_at_compaction
from ..core.surface import build_surface, envelope_of
from ..core.units import current_request
from ..core.views import (
    DIFF_CATEGORIES,
    CompactionCost,
    CompactionDiff,
    CompactionEntry,
    CompactionEvent,
    CompactionState,
    HistoryRecord,
    ModelRequest,
    Offload,
    RequestEnvelope,
    Snapshot,
    SourceCompaction,
    StoredMessage,
    ThreadInfo,
)
from .prices import price_cost

__all__ = [
    "EXPORT_FORMAT",
    "SOURCE_CLEARED_TEXT",
    "CompactionNotFound",
    "HistorySource",
    "InvalidExport",
    "RequestEnvelopes",
    "ThreadHistory",
    "compaction_cost",
    "compaction_diff",
    "compaction_history",
    "read_history",
    "request_envelope",
    "request_envelopes",
]

#: ``format`` of the JSON export (and its ``version``)
EXPORT_FORMAT = "compaction-history"
EXPORT_VERSION = 1
#: what a tool result the source cleared (Claude Code microcompaction) reads as in a rebuilt envelope
SOURCE_CLEARED_TEXT = "[tool result cleared by the source]"
META_SOURCE_CLEARED = "source_cleared"
_PAGE = 5000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class CompactionNotFound(EngineError):
    """``--compaction N`` names no compaction of the thread (or the thread has none)."""

    code = "compaction_not_found"


class InvalidExport(EngineError):
    """Text given to :func:`load_export` is not a compaction-history JSON export."""

    code = "invalid_export"


class HistorySource(Protocol):
    """The reads history needs (``engine.store.Store`` has them)."""

    def thread(self, key: str) -> ThreadInfo: ...

    def snapshot(self, key: str, *, with_busy: bool = ...) -> Snapshot: ...

    def messages_page(self, key: str, *, after_id: int | None = ..., before_id: int | None = ..., limit: int = ...) -> list[StoredMessage]: ...

    def history(self, key: str, *, after_id: int | None = ..., limit: int = ...) -> Sequence[HistoryRecord]: ...

    def events(self, key: str, *, after_id: int | None = ..., limit: int = ..., kinds: Sequence[str] | None = ...) -> Sequence[CompactionEvent]: ...

    def offloads(self, key: str) -> Mapping[int, Offload]: ...

    def model_requests(self, key: str, *, after_id: int | None = ..., limit: int = ...) -> Sequence[ModelRequest]: ...

    def source_compactions(self, key: str) -> Sequence[SourceCompaction]: ...


# -- reading a thread once ---------------------------------------------------------------------


def _paged(read: Callable[..., Sequence[Any]], key: str, *, after: int | None = None, **kw: Any) -> list[Any]:
    out: list[Any] = []
    while True:
        page = list(read(key, after_id=after, limit=_PAGE, **kw))
        out.extend(page)
        if len(page) < _PAGE:
            return out
        after = page[-1].id


@overload
def _aware(t: datetime) -> datetime: ...
@overload
def _aware(t: datetime | None) -> datetime | None: ...
def _aware(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _parse_ts(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return _aware(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None


@dataclass(frozen=True)
class _Compaction:
    """One item of the thread's compaction list (ours or the source's), in time order."""

    index: int  # 1-based
    origin: str  # "engine" or the source format
    at: datetime | None
    record: HistoryRecord | None = None
    source: SourceCompaction | None = None
    event: CompactionEvent | None = None

    @property
    def kind(self) -> str:
        return self.record.kind if self.record is not None else self.imported.kind

    @property
    def trigger(self) -> str | None:
        return self.record.trigger if self.record is not None else self.imported.trigger

    @property
    def imported(self) -> SourceCompaction:
        """The source's compaction (for an item that is not one of ours)."""
        if self.source is None:
            raise ValueError(f"compaction #{self.index} has neither an engine record nor a source compaction")
        return self.source


@dataclass(frozen=True)
class _SourceView:
    """The source's own compaction state at a point: its summary in force, the message id ranges
    its summaries replaced, the tool results its prunes cleared."""

    summary: SourceCompaction | None = None
    hidden: tuple[tuple[int, int], ...] = ()
    cleared: frozenset[int] | set[int] = frozenset()


@dataclass
class _Sides:
    """A surface measured: the envelope's messages split by category."""

    snapshot: Snapshot
    messages: tuple[Message, ...]
    summary: str | None
    tokens: dict[str, int]
    total: int
    breakdown: Mapping[str, int]


class ThreadHistory:
    """Everything recorded about one thread's compactions and requests, read once; envelopes,
    diffs and costs are computed from it on demand. Build with :func:`read_history`."""

    def __init__(
        self,
        key: str,
        *,
        info: ThreadInfo,
        snapshot: Snapshot,
        stored: Sequence[StoredMessage],
        history: Sequence[HistoryRecord],
        events: Sequence[CompactionEvent],
        offloads: Mapping[int, Offload],
        requests: Sequence[ModelRequest],
        source_compactions: Sequence[SourceCompaction],
    ) -> None:
        self.key = key
        self.info = info
        self.snapshot = snapshot
        self.messages: list[Message] = [s.message for s in stored]
        self.ids: list[int] = [s.id for s in stored]
        self.by_id: dict[int, int] = {i: n for n, i in enumerate(self.ids)}
        # newest message written at or before a time: sorted times + the running max of ids
        order = sorted(range(len(stored)), key=lambda n: stored[n].created_at)
        self._times = [_aware(stored[n].created_at) for n in order]
        top: list[int] = []
        best = -1
        for n in order:
            best = max(best, self.ids[n])
            top.append(best)
        self._top = top
        self.history = list(history)
        # generation in force at a time: sorted record times + the running max of generations
        timed = sorted(((_aware(h.created_at), h.generation_after) for h in self.history if h.created_at is not None),
                       key=lambda x: x[0])
        self._gen_times = [t for t, _ in timed]
        self._gen_top = list(itertools.accumulate((g for _, g in timed), max))
        self.offloads = dict(offloads)
        self.requests = list(requests)
        self._engine_requests = sorted((r for r in self.requests if r.origin == "engine"), key=lambda r: _aware(r.created_at))
        self._engine_times = [_aware(r.created_at) for r in self._engine_requests]
        self.source = list(source_compactions)
        self.events = list(events)
        self.last_event_id: int | None = self.events[-1].id if self.events else None
        #: the summary events that kept pinned messages (issue 23): the surfaces they left show them
        self._pin_events = [e for e in self.events if e.kind == "summary" and isinstance(e.data, Mapping) and e.data.get("pinned")]
        self._errors: dict[tuple[int | None, int | None], ProviderErrorEvent] = {}
        self._notes: dict[int | None, tuple[str, ...]] = {}
        self._retries: dict[tuple[int | None, int | None], RetryEvent] = {}
        self._by_generation: dict[tuple[str, int], CompactionEvent] = {}
        for e in self.events:
            p = parse_event(e.kind, e.data)
            if isinstance(p, ProviderErrorEvent):
                self._errors.setdefault((e.run_id, p.step), p)
                if p.ephemeral and e.run_id is not None:
                    self._notes.setdefault(e.run_id, tuple(p.ephemeral))
            elif isinstance(p, RetryEvent):
                self._retries[(e.run_id, p.next_step)] = p
            elif isinstance(p, (SummaryEvent, PruneEvent)) and p.generation_after is not None:
                self._by_generation[("prune" if isinstance(p, PruneEvent) else "summary", p.generation_after)] = e
        self.compactions = self._list_compactions()

    # -- placement ----------------------------------------------------------------------
    def last_message_at(self, t: datetime | None) -> int | None:
        """The newest message written at or before ``t``."""
        if t is None:
            return self.ids[-1] if self.ids else None
        n = bisect.bisect_right(self._times, _aware(t))
        return self._top[n - 1] if n else None

    def generation_at(self, t: datetime | None) -> int:
        """The generation in force at ``t`` (the last history record written by then)."""
        if t is None:
            return self.history[-1].generation_after if self.history else 0
        n = bisect.bisect_right(self._gen_times, _aware(t))
        return self._gen_top[n - 1] if n else 0

    def _list_compactions(self) -> list[_Compaction]:
        items: list[tuple[datetime, int, int, _Compaction]] = []
        for h in self.history:
            ev = self._by_generation.get(("prune" if h.kind == "prune" else "summary", h.generation_after))
            items.append((_aware(h.created_at) or _EPOCH, 1, h.id, _Compaction(0, "engine", _aware(h.created_at), record=h, event=ev)))
        for c in self.source:
            at = _parse_ts(c.source_timestamp) or _aware(c.created_at)
            items.append((at or _EPOCH, 0, c.id, _Compaction(0, c.source, at, source=c)))
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        return [replace(c, index=i) for i, (_, _, _, c) in enumerate(items, 1)]

    def compaction(self, index: int | None) -> _Compaction:
        if not self.compactions:
            raise CompactionNotFound(f"thread {self.key!r} has no compactions")
        if index is None:
            return self.compactions[-1]
        if not isinstance(index, int) or isinstance(index, bool) or not 1 <= index <= len(self.compactions):
            raise CompactionNotFound(
                f"thread {self.key!r} has {len(self.compactions)} compaction{'s' if len(self.compactions) != 1 else ''}: "
                f"--compaction takes 1 to {len(self.compactions)}, not {index!r}"
            )
        return self.compactions[index - 1]

    # -- measuring ------------------------------------------------------------------------
    def _measure(self, snap: Snapshot, model: str | None, notes: Sequence[str] = ()) -> _Sides:
        surface = build_surface(snap, ephemeral=ephemeral_notes(notes))
        env = envelope_of(snap, surface)
        meter = default_meter(model)
        m = meter.measure(env)
        pruned = [x for x in surface.messages if x.metadata.get(META_PRUNED) or x.metadata.get(META_SOURCE_CLEARED)]
        previews = sum(meter.count_messages(pruned)) if pruned else 0
        b = m.breakdown
        tokens = {"system": b["system"], "tools": b["tools"], "summary": b["summary"], "previews": previews}
        tokens["messages"] = m.total - sum(tokens.values())
        tokens["total"] = m.total
        return _Sides(snap, surface.messages, surface.summary, {k: tokens[k] for k in DIFF_CATEGORIES}, m.total, dict(b))

    def _engine_snapshot(self, generation: int, last_id: int | None, state: CompactionState | None = None) -> Snapshot:
        return snapshot_at(self.snapshot, self.history, self.messages, self.offloads, generation=generation,
                           last_message_id=last_id, state=state, message_ids=self.ids, pinned=pins_at(self._pin_events, generation))

    def _source_state(self, before: int | None = None, *, until: SourceCompaction | None = None) -> _SourceView:
        """What the source's model saw of a prompt made of the messages with id < ``before`` (or:
        right before compaction ``until``): its summary in force, the ranges its summaries replaced,
        the results its prunes cleared."""
        view = _SourceView()
        for c in self.source:
            if until is not None and c.id == until.id:
                break
            at = c.after_message_id if c.after_message_id is not None else 0
            if before is not None and at >= before:
                continue
            view = self._apply(view, c)
        return view

    def _apply(self, view: _SourceView, c: SourceCompaction) -> _SourceView:
        if c.kind != "summary":
            return replace(view, cleared=view.cleared | set(self._cleared_by(c)))
        hidden = view.hidden
        if c.replaced_first_id is not None and c.replaced_last_id is not None:
            hidden = (*hidden, (c.replaced_first_id, c.replaced_last_id))
        elif c.after_message_id is not None:  # none of what it replaced was imported: all before it
            hidden = (*hidden, (self.ids[0] if self.ids else 0, c.after_message_id))
        return replace(view, summary=c, hidden=hidden)

    def _cleared_by(self, c: SourceCompaction) -> list[int]:
        if c.replaced_first_id is None or c.replaced_last_id is None:
            return []
        lo = bisect.bisect_left(self.ids, c.replaced_first_id)
        hi = bisect.bisect_right(self.ids, c.replaced_last_id)
        wanted = set(c.forgotten)
        return [m.id for m in self.messages[lo:hi] if m.role == "tool" and m.id is not None and (not wanted or m.tool_call_id in wanted)]

    def _source_snapshot(self, view: _SourceView, upto: int | None) -> Snapshot:
        """The source's view as a snapshot: its summary, what it put back (``kept``), the messages
        it had not replaced up to ``upto``, cleared results as :data:`SOURCE_CLEARED_TEXT`."""
        summary_c = view.summary
        hi = len(self.ids) if upto is None else bisect.bisect_right(self.ids, upto)
        msgs: list[Message] = _kept_messages(summary_c) if summary_c is not None else []
        for m in self.messages[:hi]:
            if m.id is not None and any(a <= m.id <= b for a, b in view.hidden):
                continue
            if m.id in view.cleared:
                m = replace(m.with_content(SOURCE_CLEARED_TEXT, **{META_SOURCE_CLEARED: True}), attachments=())
            msgs.append(m)
        boundary = max((b for _, b in view.hidden), default=None)
        state = CompactionState(conversation_id=self.snapshot.conversation_id, boundary=boundary,
                                summary=summary_c.summary if summary_c is not None else None, generation=0)
        return replace(self.snapshot, state=state, messages=tuple(msgs), offloads={})

    # -- envelopes ------------------------------------------------------------------------
    def envelope(self, index: int) -> RequestEnvelope:
        """The envelope of request ``index`` (0-based, id order)."""
        if not 0 <= index < len(self.requests):
            raise IndexError(f"thread {self.key!r} has {len(self.requests)} recorded requests; no request {index}")
        r = self.requests[index]
        if r.origin == "imported":
            return self._imported_envelope(index, r)
        return self._engine_envelope(index, r)

    def _engine_envelope(self, index: int, r: ModelRequest) -> RequestEnvelope:
        err = self._errors.get((r.run_id, r.step)) if r.run_id is not None else None
        placed_by = "time"
        if err is not None and err.generation is not None:
            gen, last_id, placed_by = err.generation, err.last_message_id, "provider_error"
        else:
            gen, last_id = self.generation_at(r.created_at), self.last_message_at(r.created_at)
        notes = self._notes.get(r.run_id, ()) if r.run_id is not None else ()
        state = state_at(self.history, gen, self.snapshot.conversation_id)
        state = replace(state, generation=gen)
        sides = self._measure(self._engine_snapshot(gen, last_id, state), r.model, notes)
        notes_msgs = tuple(m for m in sides.messages if m.is_ephemeral)
        exact = r.estimated_tokens is not None and sides.total == r.estimated_tokens
        note = None
        if r.estimated_tokens is None:
            note = "no estimate was recorded with this request: the envelope is rebuilt from the history"
        elif not exact:
            note = (f"rebuilt envelope counts {sides.total:,} tokens, the engine recorded {r.estimated_tokens:,} "
                    f"(placed by {placed_by}; the system prompt or tools may have changed since)")
        step_kind = None
        retry = self._retries.get((r.run_id, r.step))
        if err is not None and err.error_code == OVERFLOW_CODE:
            step_kind = "provider_error"
        elif retry is not None:
            step_kind = "retry"
        return RequestEnvelope(
            index=index, request_id=r.id, run_id=r.run_id, step=r.step, created_at=r.created_at,
            generation=gen, boundary=state.boundary, summary=state.summary, messages=sides.messages,
            pruned_ids=tuple(m.id for m in sides.messages if m.id is not None and m.metadata.get(META_PRUNED)),
            ephemeral=notes_msgs, tokens=sides.total, breakdown=sides.breakdown,
            reported_prompt_tokens=r.reported_prompt_tokens, context_window=r.context_window, threshold=r.threshold,
            outcome=r.outcome, origin=r.origin, exact=exact, note=note, estimated_tokens=r.estimated_tokens,
            last_message_id=last_id, episode_step=step_kind,
        )

    def _imported_envelope(self, index: int, r: ModelRequest) -> RequestEnvelope:
        before = r.message_id if r.message_id is not None else (self.ids[-1] + 1 if self.ids else 0)
        n = bisect.bisect_left(self.ids, before)
        last_id = self.ids[n - 1] if n else None
        view = self._source_state(before)
        snap = self._source_snapshot(view, last_id)
        sides = self._measure(snap, r.model or self.info.model)
        note = "imported: the source's own system prompt and tools are not recorded; tokens is our count of the stored messages"
        if view.summary is not None and view.summary.summary is None:
            note += "; the source kept its summary only encrypted"
        return RequestEnvelope(
            index=index, request_id=r.id, run_id=r.run_id, step=r.step, created_at=r.created_at,
            generation=0, boundary=snap.state.boundary, summary=snap.state.summary, messages=sides.messages,
            pruned_ids=tuple(m.id for m in sides.messages if m.id is not None and m.metadata.get(META_SOURCE_CLEARED)),
            ephemeral=(), tokens=sides.total, breakdown=sides.breakdown,
            reported_prompt_tokens=r.reported_prompt_tokens, context_window=r.context_window, threshold=r.threshold,
            outcome=r.outcome, origin=r.origin, exact=False, note=note, estimated_tokens=r.estimated_tokens,
            last_message_id=last_id,
        )

    # -- diffs ----------------------------------------------------------------------------
    def diff(self, index: int | None = None) -> CompactionDiff:
        c = self.compaction(index)
        return self._engine_diff(c) if c.record is not None else self._source_diff(c)

    def _engine_diff(self, c: _Compaction) -> CompactionDiff:
        h = c.record
        assert h is not None
        last_id = self.last_message_at(h.created_at)
        following = self.following_requests(c)
        model = following[0].model if following else self.info.model  # the route it was measured for
        sb = state_at(self.history, h.generation_before, self.snapshot.conversation_id)
        sa = state_at(self.history, h.generation_after, self.snapshot.conversation_id)
        before = self._measure(self._engine_snapshot(h.generation_before, last_id, replace(sb, generation=h.generation_before)), model)
        after = self._measure(self._engine_snapshot(h.generation_after, last_id, replace(sa, generation=h.generation_after)), model)
        lo, hi = h.boundary_before, h.boundary_after
        summarized: tuple[Message, ...] = ()
        if h.kind != "prune" and hi is not None and hi != lo:
            kept_pinned = pins_at(self._pin_events, h.generation_after)  # pinned: kept verbatim, not summarized
            summarized = tuple(m for m in before.messages if m.id is not None and (lo is None or m.id > lo) and m.id <= hi and m.id not in kept_pinned)
        kept = tuple(m for m in after.messages if m.id is not None)
        pruned = tuple(self.offloads[i] for i in h.pruned_message_ids if i in self.offloads)
        notes: list[str] = []
        if h.tokens_before is not None and h.tokens_before != before.total:
            notes.append(f"the compaction measured {h.tokens_before:,} tokens before it (with the run's ephemeral notes "
                         f"and the route's meter); the rebuilt surface counts {before.total:,}")
        dropped, why = self._recorded_dropped(c, summarized, before, after, last_id)
        if why:
            notes.append(why)
        if h.tokens_before is not None:
            measured: tuple[int | None, int | None, str] = (h.tokens_before, h.tokens_after, "compactor")
        else:
            measured = (before.total, after.total, "rebuilt")
        return CompactionDiff(
            index=c.index, kind=h.kind, trigger=h.trigger, origin="engine", created_at=h.created_at,
            generation_before=h.generation_before, generation_after=h.generation_after,
            previous_summary=sb.summary, summarized=summarized, summary=sa.summary, kept=kept, pruned=pruned,
            tokens_before=before.tokens, tokens_after=after.tokens, dropped=dropped, note="; ".join(notes) or None,
            before=before.messages, after=after.messages, record_id=h.id,
            measured_before=measured[0], measured_after=measured[1], measured_by=measured[2],
            written_by=written_by(c.event.data) if h.kind != "prune" and c.event is not None and c.event.kind == "summary" else None,
            **_instructed(c.event.data if h.kind != "prune" and c.event is not None and c.event.kind == "summary" else None, sa.summary, after.messages),
        )

    def request_before(self, last_id: int | None) -> Message | None:
        """The user's current request when message ``last_id`` was the newest (visible or not)."""
        hi = len(self.ids) if last_id is None else bisect.bisect_right(self.ids, last_id)
        return current_request(self.messages[max(0, hi - 5000):hi])

    def _recorded_dropped(self, c: _Compaction, summarized: Sequence[Message], before: _Sides, after: _Sides,
                          last_id: int | None) -> tuple[DroppedSpecifics | None, str | None]:
        data = c.event.data if c.event is not None and isinstance(c.event.data, Mapping) else {}
        recorded = _dropped_from_event(data)
        if recorded is not None:
            return recorded, None
        h = c.record
        assert h is not None
        if c.kind == "prune":  # what the previews left out (the full texts are in the Workdir)
            replaced = set(h.pruned_message_ids)
            originals = [m for m in before.messages if m.id in replaced]
            computed = _compute_dropped(originals, after, self.snapshot.system_prompt, previous=None, summary=after.summary,
                                        request=self.request_before(last_id), retained=after.messages)
            return computed, "what the previews left out computed now from the stored results (not recorded with the prune)"
        retained = [m for m in before.messages if m.id is not None and h.boundary_after is not None and m.id > h.boundary_after]
        computed = _compute_dropped(summarized, after, self.snapshot.system_prompt, previous=before.summary, summary=after.summary,
                                    request=self.request_before(last_id), retained=retained)
        return computed, "dropped specifics computed now from the rebuilt surfaces (not recorded with the compaction)"

    def _source_diff(self, c: _Compaction) -> CompactionDiff:
        sc = c.source
        assert sc is not None
        upto = sc.after_message_id if sc.after_message_id is not None else 0
        view = self._source_state(until=sc)
        prev = view.summary
        before = self._measure(self._source_snapshot(view, upto), self.info.model)
        now = self._apply(view, sc)
        after = self._measure(self._source_snapshot(now, upto), self.info.model)
        after_ids = {m.id for m in after.messages if m.id is not None}
        summarized: tuple[Message, ...] = ()
        newly_cleared: list[int] = []
        if sc.kind == "summary":
            summarized = tuple(m for m in before.messages if m.id is not None and m.id not in after_ids)
        else:
            newly_cleared = sorted(set(now.cleared) - set(view.cleared))
        kept = tuple(m for m in after.messages if not m.metadata.get(META_SOURCE_CLEARED))
        notes = [f"recorded by {sc.source}; the tokens by category are our count of the stored messages (the source's own system prompt and tools are not recorded)"]
        if sc.tokens_before is not None:
            notes.append(f"the source reported {sc.tokens_before:,} tokens before it")
        if sc.kind == "summary" and sc.summary is None:
            notes.append("the source kept its summary only encrypted")
        if sc.kind == "summary" and sc.replaced_first_id is None:
            notes.append("none of the messages it replaced were imported")
        cleared_msgs = tuple(self.messages[self.by_id[i]] for i in newly_cleared if i in self.by_id)
        request = self.request_before(upto)
        if sc.kind == "prune":  # the source cleared them whole (no preview): what they alone showed is gone
            retained = [m for m in after.messages if m.id is not None and m.id > (sc.replaced_last_id or 0)]
            dropped = _compute_dropped(cleared_msgs, after, self.snapshot.system_prompt, previous=None, summary=after.summary,
                                       request=request, retained=retained)
        else:
            retained = [m for m in after.messages if m.id is not None]
            dropped = _compute_dropped(summarized, after, self.snapshot.system_prompt, previous=before.summary, summary=sc.summary,
                                       request=request, retained=retained)
        tb, ta, by = self._source_figures(c, self.following_requests(c), lambda: (before.total, after.total))
        return CompactionDiff(
            index=c.index, kind=sc.kind, trigger=sc.trigger, origin=sc.source, created_at=c.at,
            generation_before=None, generation_after=None, previous_summary=prev.summary if prev is not None else None,
            summarized=summarized, summary=sc.summary if sc.kind == "summary" else (prev.summary if prev is not None else None),
            kept=kept, pruned=(), tokens_before=before.tokens, tokens_after=after.tokens, dropped=dropped,
            note="; ".join(notes), before=before.messages, after=after.messages, record_id=sc.id, cleared=cleared_msgs,
            measured_before=tb, measured_after=ta, measured_by="source" if by == "recorded" else "rebuilt",
        )

    # -- cost -----------------------------------------------------------------------------
    def following_requests(self, c: _Compaction) -> list[ModelRequest]:
        """The requests that went out with this compaction in force, until the next one of the same
        origin (ours affect engine requests, the source's its imported ones)."""
        same = [x for x in self.compactions if (x.record is not None) == (c.record is not None)]
        nxt = next((x for x in same if x.index > c.index), None)
        if c.record is not None:
            lo = bisect.bisect_left(self._engine_times, _aware(c.record.created_at))
            hi = (bisect.bisect_left(self._engine_times, _aware(nxt.record.created_at))
                  if nxt is not None and nxt.record is not None else len(self._engine_times))
            return self._engine_requests[lo:hi]
        sc = c.source
        assert sc is not None
        after = sc.after_message_id or 0
        until = nxt.source.after_message_id if nxt is not None and nxt.source is not None else None
        return [r for r in self.requests if r.origin == "imported" and r.message_id is not None and r.message_id > after
                and (until is None or r.message_id <= until)]

    def cost(self, index: int | None = None, *, diff: CompactionDiff | None = None) -> CompactionCost:
        c = self.compaction(index)
        following = self.following_requests(c)
        # what the summarizer cost
        sp: int | None
        scp: int | None
        summarizer_model: str | None = None
        extractive = False
        if c.kind == "prune":
            sp, scp, extractive = 0, 0, True
        elif c.event is not None and isinstance(c.event.data, Mapping):
            p = parse_event(c.event.kind, c.event.data)
            usage = p.usage if isinstance(p, SummaryEvent) else None
            if usage is not None and usage.extractive:
                sp, scp, extractive = 0, 0, True
            else:
                sp = usage.prompt_tokens if usage is not None else None
                scp = usage.completion_tokens if usage is not None else None
            summarizer_model = usage.model if usage is not None else None
        else:
            sp = scp = None
        # what it saved on each following request
        if c.record is not None:
            h = c.record
            if h.tokens_before is not None and h.tokens_after is not None:
                delta = h.tokens_before - h.tokens_after
            else:
                d = diff or self.diff(c.index)
                delta = d.tokens_before["total"] - d.tokens_after["total"]
            # every following request has a reported and a measured size: saved in the provider's tokens
            anchors = [(r.reported_prompt_tokens, r.estimated_tokens) for r in following
                       if r.reported_prompt_tokens and r.estimated_tokens]
            recorded = bool(following) and len(anchors) == len(following)
            if recorded:
                saved = sum(_scale(delta, reported, estimated) for reported, estimated in anchors)
            else:
                saved = delta * len(following)
            source: Literal["recorded", "meter"] = "recorded" if recorded else "meter"
        else:
            d = diff or self.diff(c.index)
            tb, ta = d.measured_before or 0, d.measured_after or 0
            source = "recorded" if d.measured_by == "source" else "meter"
            saved = (tb - ta) * len(following)
        models = Counter(r.model for r in following if r.model)
        model = models.most_common(1)[0][0] if models else self.info.model
        provider = next((r.provider for r in following if r.model == model), self.info.provider)
        return price_cost(
            summarizer_prompt_tokens=sp, summarizer_completion_tokens=scp, saved_prompt_tokens=saved,
            following_requests=len(following), source=source, model=model, provider=provider,
            summarizer_model=summarizer_model, extractive=extractive,
        )

    def _source_figures(self, c: _Compaction, following: Sequence[ModelRequest],
                        counted: Callable[[], tuple[int, int]]) -> tuple[int, int, Literal["recorded", "meter"]]:
        """Tokens before / after a source's compaction on one scale: the source's own figures when
        it reported both sides (a prune's ``preTokens`` and ``tokensSaved``; a summary's
        ``preTokens`` and the prompt it reported at its next request), else our count of both."""
        sc = c.source
        assert sc is not None
        saved = sc.details.get("tokens_saved") if isinstance(sc.details, Mapping) else None
        if sc.tokens_before is not None and isinstance(saved, int) and not isinstance(saved, bool):
            return sc.tokens_before, sc.tokens_before - saved, "recorded"
        nxt = following[0].reported_prompt_tokens if following else None
        if sc.kind == "summary" and sc.tokens_before is not None and nxt is not None:
            return sc.tokens_before, nxt, "recorded"
        tb, ta = counted()
        return tb, ta, "meter"

    # -- entries --------------------------------------------------------------------------
    def entry(self, index: int) -> CompactionEntry:
        c = self.compaction(index)
        d = self.diff(index)
        return CompactionEntry(  # the diff's measured figures: THE before / after of the compaction
            index=c.index, kind=c.kind, trigger=c.trigger, origin=c.origin, created_at=c.at, tokens_before=d.measured_before,
            tokens_after=d.measured_after, summary=d.summary if c.kind != "prune" else None, dropped=d.dropped,
            cost=self.cost(index, diff=d), note=d.note, record_id=d.record_id, written_by=d.written_by,
        )

    def entries(self) -> list[CompactionEntry]:
        return [self.entry(c.index) for c in self.compactions]


def _scale(delta: int, reported: int, estimated: int) -> int:
    """``delta`` in the provider's tokens: the meter's anchoring (scaled by reported / estimated,
    rounded half up), the sign kept for a compaction that grew the prompt."""
    scaled = TokenMeter.anchor(abs(delta), reported_prompt_tokens=reported, estimated_at_report=estimated).anchored
    return scaled if delta >= 0 else -scaled


def _kept_messages(c: SourceCompaction) -> list[Message]:
    out: list[Message] = []
    for k in c.kept:
        role = k.get("role") if isinstance(k, Mapping) else None
        text = k.get("text") if isinstance(k, Mapping) else None
        if role not in ("user", "assistant", "system", "developer") or not isinstance(text, str):
            continue
        try:
            out.append(Message(role, text, meta_kind=k.get("meta_kind") if isinstance(k.get("meta_kind"), str) else None))
        except EngineError:
            continue
    return out


# -- dropped specifics -------------------------------------------------------------------------------


def _dropped_from_event(data: Mapping[str, Any]) -> DroppedSpecifics | None:
    """The dropped specifics recorded with a summary or prune event (the same keys), or None when
    it has none (an event written before they existed)."""
    return DroppedSpecifics.from_json(data) if isinstance(data.get("specifics_seen"), int) else None


def _compute_dropped(replaced: Sequence[Message], after: _Sides, system_prompt: str, *, previous: str | None,
                     summary: str | None, request: Message | None, retained: Sequence[Message]) -> DroppedSpecifics:
    """What the compactor records (``engine.compaction.compactor._dropped``), for a compaction that did not
    record it: what the model saw of the replaced range (+ the previous summary) against the summary
    and the surface after it (system prompt, messages as shown); referenced by the current request
    and the retained tail."""
    return dropped_at_compaction(
        summarized=replaced,
        previous_summary=previous,
        summary=summary,
        kept=after.messages,
        system_prompt=system_prompt,
        current_request=request.content if request is not None else None,
        retained=retained,
        shown=replacement_preview,
    )


# -- reading, with a small cache so stepping request by request reads the thread once ------------

#: the events history reads (what a provider error, a retry, a summary or a prune recorded)
_EVENT_KINDS = [EventKind.PROVIDER_ERROR.value, EventKind.RETRY.value, EventKind.SUMMARY.value, EventKind.PRUNE.value]

_cache: "weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, ThreadHistory]]]" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _fingerprint(info: ThreadInfo) -> Any:
    return (info.id, info.message_count, info.generation, info.compact_count, info.updated_at)


def _requests_unchanged(source: HistorySource, key: str, cached: Sequence[ModelRequest]) -> bool:
    """Whether the thread's requests are still ``cached``: only rows from the oldest one not
    finished yet (``pending``, the one a completion may change) on are read again."""
    start = next((i for i, r in enumerate(cached) if r.outcome == "pending"), len(cached))
    after = cached[start - 1].id if start else None
    return _paged(source.model_requests, key, after=after) == list(cached[start:])


def read_history(source: HistorySource, key: str) -> ThreadHistory:
    """Read thread ``key`` once (``ThreadNotFound`` for an unknown key). A second read of an
    unchanged thread from the same source returns the same object: the store is asked only for the
    thread row and the requests after the last finished one (cheap enough to call on every step)."""
    info = source.thread(key)
    fp = _fingerprint(info)
    try:
        with _cache_lock:
            hit = _cache.get(source, {}).get(key)
    except TypeError:  # a source that cannot be weakly referenced: no cache
        hit = None
    if (hit is not None and hit[0] == fp and _requests_unchanged(source, key, hit[1].requests)
            and not source.events(key, after_id=hit[1].last_event_id, limit=1, kinds=_EVENT_KINDS)):
        return hit[1]
    th = ThreadHistory(
        key,
        info=info,
        snapshot=source.snapshot(key, with_busy=False),
        stored=_paged(source.messages_page, key),
        history=_paged(source.history, key),
        events=_paged(source.events, key, kinds=_EVENT_KINDS),
        offloads=source.offloads(key),
        requests=_paged(source.model_requests, key),
        source_compactions=source.source_compactions(key),
    )
    try:
        with _cache_lock:
            _cache.setdefault(source, {})
            per = _cache[source]
            per.clear()  # one thread per source: bounded memory
            per[key] = (fp, th)
    except TypeError:
        pass
    return th


class RequestEnvelopes(SequenceABC[RequestEnvelope]):
    """Every recorded request's envelope, built when indexed (nothing kept between calls)."""

    def __init__(self, history: ThreadHistory) -> None:
        self.history = history

    def __len__(self) -> int:
        return len(self.history.requests)

    @overload
    def __getitem__(self, index: int) -> RequestEnvelope: ...

    @overload
    def __getitem__(self, index: slice) -> list[RequestEnvelope]: ...

    def __getitem__(self, index: int | slice) -> RequestEnvelope | list[RequestEnvelope]:
        if isinstance(index, slice):
            return [self.history.envelope(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        return self.history.envelope(index)

    def __iter__(self) -> Iterator[RequestEnvelope]:
        for i in range(len(self)):
            yield self.history.envelope(i)


def request_envelopes(source: HistorySource, key: str) -> RequestEnvelopes:
    """The envelope of every recorded model request of ``key`` (imported ones too), in id order:
    a lazy sequence (``len``, indexing, iteration; ``list(...)`` materializes it)."""
    return RequestEnvelopes(read_history(source, key))


def request_envelope(source: HistorySource, key: str, index: int) -> RequestEnvelope:
    """The envelope of request ``index`` (0-based; negative counts from the end) of ``key``;
    ``IndexError`` out of range."""
    return request_envelopes(source, key)[index]


def compaction_diff(source: HistorySource, key: str, compaction: int | None = None) -> CompactionDiff:
    """Before/after of compaction ``compaction`` (1-based, :func:`compaction_history` order; None:
    the latest). :class:`CompactionNotFound` when there is no such compaction."""
    return read_history(source, key).diff(compaction)


def compaction_cost(source: HistorySource, key: str, compaction: int | None = None) -> CompactionCost:
    """What compaction ``compaction`` (as in :func:`compaction_diff`) cost against what it saved."""
    return read_history(source, key).cost(compaction)


def compaction_history(source: HistorySource, key: str) -> list[CompactionEntry]:
    """Every compaction of ``key`` (ours and the source's recorded ones), in time order."""
    return read_history(source, key).entries()


def _instructed(data: Mapping[str, Any] | None, summary: str | None, after: Sequence[Message]) -> dict[str, Any]:
    """The diff's ``instructions`` and, for each term they name, whether it survived the compaction
    (in the summary, or verbatim on the surface after it)."""
    text = data.get("instructions") if isinstance(data, Mapping) else None
    if not isinstance(text, str) or not text.strip():
        return {}
    shown = [summary or ""] + [m.content for m in after] + [c.arguments for m in after for c in m.tool_calls]
    kept = tuple((t, any(t in s for s in shown) or (t.startswith("#") and t[1:].isdigit() and any(m.id == int(t[1:]) for m in after)))
                 for t in instruction_terms(text))
    return {"instructions": text, "instructions_kept": kept}
