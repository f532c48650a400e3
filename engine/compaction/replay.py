"""Replay of overflow recoveries: read the recorded events back, step by step (§6).

Nothing is re-executed against a provider. An episode starts at a ``provider_error`` event with
code ``CONTEXT_WINDOW_EXCEEDED`` and ends at the run's ``retry`` that led to a successful request
(``recovered``), at ``gave_up``, or at ``cancelled``. For every step the surface the model would
have seen is rebuilt (by :func:`engine.core.surface.build_surface`) from the append-only compaction
history and offload records at that step's generation.

A reader only: events are interpreted through :func:`engine.core.events.parse_event` (a row of an unknown
kind, or with keys of the wrong type, is skipped or read as "unknown", never an error), and the rows
come from the caller (:func:`episodes_from`) or from anything shaped like the store
(:class:`ReplaySource`, for :func:`build_episodes`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Collection, Literal, Mapping, Protocol, Sequence

from ..core.events import (
    CancelledEvent,
    Event,
    EventKind,
    GaveUpEvent,
    ProviderErrorEvent,
    PruneEvent,
    RecoveredEvent,
    RetryEvent,
    SummaryEvent,
    SummaryRejectedEvent,
    parse_event,
)
from ..core.messages import META_EPHEMERAL, Message
from ..core.surface import build_surface
from ..core.views import CompactionEvent, CompactionState, Episode, HistoryRecord, Offload, ReplayStep, Snapshot

__all__ = ["OVERFLOW_CODE", "ReplaySource", "build_episodes", "episodes_from", "ephemeral_notes", "pins_at", "snapshot_at", "state_at", "surface_at"]

OVERFLOW_CODE = "CONTEXT_WINDOW_EXCEEDED"

#: event kinds that are steps of an episode
_STEP_KINDS = frozenset(
    {
        EventKind.PROVIDER_ERROR,
        EventKind.PRUNE,
        EventKind.SUMMARY,
        EventKind.SUMMARY_REJECTED,
        EventKind.RETRY,
        EventKind.GAVE_UP,
        EventKind.CANCELLED,
        EventKind.RECOVERED,
    }
)
#: compaction kinds written by every trigger: only the overflow ones belong to an episode
_COMPACTION_KINDS = frozenset({EventKind.PRUNE, EventKind.SUMMARY, EventKind.SUMMARY_REJECTED})
EpisodeOutcome = Literal["recovered", "gave_up", "cancelled"]
_TERMINAL: dict[str, EpisodeOutcome] = {EventKind.GAVE_UP: "gave_up", EventKind.CANCELLED: "cancelled",
                                        EventKind.RECOVERED: "recovered"}


class ReplaySource(Protocol):
    """The reads replay needs (``engine.store.Store`` has them)."""

    def events(self, key: str, *, limit: int = ...) -> Sequence[CompactionEvent]: ...

    def history(self, key: str, *, limit: int = ...) -> Sequence[HistoryRecord]: ...

    def snapshot(self, key: str) -> Snapshot: ...

    def messages_after(self, key: str, boundary: int | None) -> Sequence[Message]: ...

    def offloads(self, key: str) -> Mapping[int, Offload]: ...


def state_at(history: Sequence[HistoryRecord], generation: int, conversation_id: int) -> CompactionState:
    """The compaction state as it was at ``generation``, from the append-only history."""
    boundary: int | None = None
    summary: str | None = None
    for h in history:
        if h.generation_after > generation:
            break
        if h.kind != "prune":
            boundary, summary = h.boundary_after, h.summary
    return CompactionState(conversation_id=conversation_id, boundary=boundary, summary=summary, generation=generation)


def surface_at(
    snapshot: Snapshot,
    history: Sequence[HistoryRecord],
    all_messages: Sequence[Message],
    offloads: Mapping[int, Offload],
    *,
    generation: int,
    last_message_id: int | None,
    ephemeral: Sequence[str] = (),
    pinned: Collection[int] = (),
) -> tuple[Message, ...]:
    """The model-visible surface at a generation, limited to messages that existed then;
    ``pinned``: the ids kept verbatim behind the boundary then (:func:`pins_at`)."""
    snap = snapshot_at(snapshot, history, all_messages, offloads, generation=generation, last_message_id=last_message_id, pinned=pinned)
    return build_surface(snap, ephemeral=ephemeral_notes(ephemeral)).messages


def snapshot_at(
    snapshot: Snapshot,
    history: Sequence[HistoryRecord],
    all_messages: Sequence[Message],
    offloads: Mapping[int, Offload],
    *,
    generation: int,
    last_message_id: int | None,
    state: CompactionState | None = None,
    message_ids: Sequence[int] | None = None,
    pinned: Collection[int] = (),
) -> Snapshot:
    """``snapshot`` as it was at ``generation``: the state then (``state`` when the caller already
    has it), the messages after its boundary that existed then (id at most ``last_message_id``),
    the offloads recorded by then. With ``message_ids`` (the ascending ids of ``all_messages``) the
    messages are cut by bisection (O(log n) plus the slice), else filtered."""
    if state is None:
        state = state_at(history, generation, snapshot.conversation_id)
    msgs = _between(all_messages, state.boundary, last_message_id, message_ids)
    offs = {k: v for k, v in offloads.items() if v.generation is not None and v.generation <= generation}
    kept: tuple[Message, ...] = ()
    if pinned and state.boundary is not None:  # pinned messages behind the boundary stayed on the surface
        wanted = {i for i in pinned if i <= state.boundary and (last_message_id is None or i <= last_message_id)}
        kept = tuple(m for m in _between(all_messages, None, state.boundary, message_ids) if m.id in wanted) if wanted else ()
    return replace(snapshot, state=state, messages=msgs, offloads=offs, pins=frozenset(pinned), pinned=kept)


def pins_at(events: Sequence[CompactionEvent], generation: int) -> frozenset[int]:
    """The pinned ids in force at ``generation``: those the newest summary event at or before it
    recorded (``SummaryEvent.pinned``); empty before the first pinned compaction."""
    best: tuple[int, frozenset[int]] | None = None
    for e in events:
        if e.kind != "summary" or not isinstance(e.data, Mapping):
            continue
        after = e.data.get("generation_after")
        if isinstance(after, int) and after <= generation and (best is None or after >= best[0]):
            ids = e.data.get("pinned") or ()
            best = (after, frozenset(i for i in ids if isinstance(i, int)))
    return best[1] if best is not None else frozenset()


def ephemeral_notes(texts: Sequence[str]) -> list[Message]:
    """Recorded ephemeral note texts as the system messages the run sent."""
    return [Message("system", text, metadata={META_EPHEMERAL: True}) for text in texts]


def _between(messages: Sequence[Message], after: int | None, upto: int | None, ids: Sequence[int] | None) -> tuple[Message, ...]:
    if ids is not None:  # ascending ids of ``messages``: bisect
        lo = 0 if after is None else bisect.bisect_right(ids, after)
        hi = len(ids) if upto is None else bisect.bisect_right(ids, upto)
        return tuple(messages[lo:hi])
    return tuple(
        m for m in messages
        if m.id is not None and (after is None or m.id > after) and (upto is None or m.id <= upto)
    )


@dataclass(frozen=True)
class _Figures:
    """What a step shows of its event, whatever its kind (``None``: the kind does not record it)."""

    attempt: int | None = None
    error_code: str | None = None
    error_message: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    generation_before: int | None = None
    generation_after: int | None = None


def _figures(p: Event) -> _Figures:
    if isinstance(p, ProviderErrorEvent):
        tokens = p.tokens_before if p.tokens_before is not None else p.tokens
        return _Figures(p.attempt, p.error_code, p.error_message, tokens, None, p.generation, p.generation)
    if isinstance(p, (PruneEvent, SummaryEvent)):
        return _Figures(None, None, None, p.tokens_before, p.tokens_after, p.generation_before, p.generation_after)
    if isinstance(p, SummaryRejectedEvent):
        return _Figures(None, p.error_code, p.error_message, p.tokens_before, None, p.generation_before, p.generation_after)
    if isinstance(p, RetryEvent):
        return _Figures(p.attempt, None, None, p.tokens_before, p.tokens_after, p.generation_before, p.generation_after)
    if isinstance(p, GaveUpEvent):
        return _Figures(p.attempt, p.error_code, p.error_message, p.tokens_before, p.tokens_after, p.generation_before, p.generation_after)
    if isinstance(p, RecoveredEvent):
        return _Figures(p.attempt, tokens_before=p.tokens)
    if isinstance(p, CancelledEvent):
        return _Figures(p.attempt)
    return _Figures()


def _step(event: CompactionEvent, p: Event, attempt: int, surface: tuple[Message, ...] | None, summary: str | None) -> ReplayStep:
    f = _figures(p)
    gb, ga = f.generation_before, f.generation_after
    no_progress = p.kind in (EventKind.SUMMARY_REJECTED, EventKind.GAVE_UP) or (p.kind == EventKind.RETRY and gb is not None and ga is not None and ga <= gb)
    data = event.data if isinstance(event.data, Mapping) else {}
    return ReplayStep(
        kind=p.kind.value,
        attempt=f.attempt or attempt,
        error_code=f.error_code,
        error_message=f.error_message,
        tokens_before=f.tokens_before,
        tokens_after=f.tokens_after,
        generation_before=gb,
        generation_after=ga,
        no_progress=no_progress,
        surface=surface,
        summary=summary,
        event_id=event.id,
        detail={k: v for k, v in data.items() if k != "error_message"},  # as recorded, unknown keys too
    )


def _is_overflow(p: Event | None) -> bool:
    return isinstance(p, ProviderErrorEvent) and p.error_code == OVERFLOW_CODE


def build_episodes(source: ReplaySource, thread: str) -> list[Episode]:
    """Every overflow-recovery episode of ``thread``; reads the rest only when there is one."""
    events = source.events(thread, limit=1_000_000)
    if not any(_is_overflow(parse_event(e.kind, e.data)) for e in events):
        return []
    return episodes_from(
        events,
        history=source.history(thread, limit=1_000_000),
        snapshot=source.snapshot(thread),
        messages=source.messages_after(thread, None),
        offloads=source.offloads(thread),
    )


def episodes_from(
    events: Sequence[CompactionEvent],
    *,
    history: Sequence[HistoryRecord],
    snapshot: Snapshot,
    messages: Sequence[Message],
    offloads: Mapping[int, Offload],
) -> list[Episode]:
    """The episodes in ``events`` (in id order), surfaces rebuilt from ``history``, every persisted
    message of the thread (``messages``) and its offload records. Pure."""
    episodes: list[Episode] = []
    current: list[ReplayStep] | None = None
    run_id: int | None = None
    attempt = 0
    last_id: int | None = None  # newest message when the provider refused: later steps add none
    last_gen = 0
    notes: tuple[str, ...] = ()

    def surface_for(p: Event) -> tuple[tuple[Message, ...], str | None]:
        nonlocal last_gen
        f = _figures(p)
        gen = f.generation_after if f.generation_after is not None else f.generation_before
        if gen is None:  # e.g. "recovered": the surface is the one the last step left
            gen = last_gen
        last_gen = gen
        st = state_at(history, gen, snapshot.conversation_id)
        return (
            surface_at(snapshot, history, messages, offloads, generation=gen, last_message_id=last_id, ephemeral=notes,
                       pinned=pins_at(events, gen)),
            st.summary,
        )

    for e in events:
        p = parse_event(e.kind, e.data)
        is_overflow = _is_overflow(p)
        if current is not None and e.run_id is not None and e.run_id != run_id:
            # the run recorded no end (its process died): close it, or it would hide every later episode
            episodes.append(_unterminated(run_id, current))
            current = None
        if current is None:
            if not is_overflow:
                continue
            current, run_id, attempt = [], e.run_id, 1
        elif e.run_id != run_id:
            continue  # an event outside any run
        if p is None or p.kind not in _STEP_KINDS:
            continue
        if p.kind in _COMPACTION_KINDS and e.trigger != "overflow":
            continue
        if is_overflow and current:
            attempt += 1
        if isinstance(p, ProviderErrorEvent):
            if p.last_message_id is not None:
                last_id = p.last_message_id
            notes = p.ephemeral or ()
        surface, summary = surface_for(p)
        current.append(_step(e, p, attempt, surface, summary))
        outcome = _TERMINAL.get(p.kind)
        if outcome is not None:
            episodes.append(Episode(run_id=run_id, outcome=outcome, steps=tuple(current)))
            current = None
    if current:
        episodes.append(_unterminated(run_id, current))
    return episodes


def _unterminated(run_id: int | None, steps: list[ReplayStep]) -> Episode:
    """An episode whose run never recorded an end: the retry is the last thing we know."""
    outcome: EpisodeOutcome = "recovered" if any(s.kind == EventKind.RETRY for s in steps) else "gave_up"
    return Episode(run_id=run_id, outcome=outcome, steps=tuple(steps))
