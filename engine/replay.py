"""Replay of overflow recoveries: read the recorded events back, step by step (§6).

Nothing is re-executed against a provider. An episode starts at a ``provider_error`` event with
code ``CONTEXT_WINDOW_EXCEEDED`` and ends at the run's ``retry`` that led to a successful request
(``recovered``), at ``gave_up``, or at ``cancelled``. For every step the surface the model would
have seen is rebuilt from the append-only compaction history and offload records at that step's
generation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from .messages import META_EPHEMERAL, Message
from .views import CompactionEvent, CompactionState, Episode, HistoryRecord, Offload, ReplayStep, Snapshot
from .surface import build_surface

if TYPE_CHECKING:  # pragma: no cover
    from .store import Store

OVERFLOW_CODE = "CONTEXT_WINDOW_EXCEEDED"

#: event kind → replay step kind
_STEP_KINDS = {
    "provider_error": "provider_error",
    "prune": "prune",
    "summary": "summary",
    "summary_rejected": "summary_rejected",
    "retry": "retry",
    "gave_up": "gave_up",
    "cancelled": "cancelled",
    "recovered": "recovered",
}
_TERMINAL = {"gave_up": "gave_up", "cancelled": "cancelled", "recovered": "recovered"}


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
    offloads: dict[int, Offload],
    *,
    generation: int,
    last_message_id: int | None,
    ephemeral: Sequence[str] = (),
) -> tuple[Message, ...]:
    """The model-visible surface at a generation, limited to messages that existed then."""

    state = state_at(history, generation, snapshot.conversation_id)
    msgs = tuple(
        m
        for m in all_messages
        if m.id is not None
        and (state.boundary is None or m.id > state.boundary)
        and (last_message_id is None or m.id <= last_message_id)
    )
    offs = {k: v for k, v in offloads.items() if v.generation <= generation}
    snap = replace(snapshot, state=state, messages=msgs, offloads=offs)
    notes = [Message("system", text, metadata={META_EPHEMERAL: True}) for text in ephemeral]
    return build_surface(snap, ephemeral=notes).messages


def _step(event: CompactionEvent, attempt: int, surface: tuple[Message, ...] | None, summary: str | None) -> ReplayStep:
    d = event.data
    kind = _STEP_KINDS.get(event.kind, event.kind)
    gb, ga = d.get("generation_before"), d.get("generation_after")
    no_progress = kind in ("summary_rejected", "gave_up") or (kind in ("retry",) and gb is not None and ga is not None and ga <= gb)
    return ReplayStep(
        kind=kind,
        attempt=int(d.get("attempt", attempt) or attempt),
        error_code=d.get("error_code"),
        error_message=d.get("error_message"),
        tokens_before=d.get("tokens_before", d.get("tokens")),
        tokens_after=d.get("tokens_after"),
        generation_before=gb if gb is not None else d.get("generation"),
        generation_after=ga if ga is not None else d.get("generation"),
        no_progress=bool(no_progress or d.get("no_progress")),
        surface=surface,
        summary=summary,
        event_id=event.id,
        detail={k: v for k, v in d.items() if k not in ("error_message",)},
    )


def build_episodes(store: "Store", thread: str) -> list[Episode]:
    events = store.events(thread, limit=1_000_000)
    if not any(e.kind == "provider_error" and e.data.get("error_code") == OVERFLOW_CODE for e in events):
        return []
    history = store.history(thread, limit=1_000_000)
    snapshot = store.snapshot(thread)
    all_messages = store.messages_after(thread, None)
    offloads = dict(store.offloads(thread))
    episodes: list[Episode] = []
    current: list[ReplayStep] | None = None
    run_id: int | None = None
    attempt = 0
    last_id: int | None = None  # newest message when the provider refused: later steps add none

    last_gen = 0
    notes: list[str] = []

    def surface_for(e: CompactionEvent) -> tuple[tuple[Message, ...], str | None]:
        nonlocal last_gen
        d: dict[str, Any] = dict(e.data)
        gen = d.get("generation_after", d.get("generation"))
        if gen is None:  # e.g. "recovered": the surface is the one the last step left
            gen = d.get("generation_before", last_gen)
        last_gen = int(gen)
        st = state_at(history, int(gen), snapshot.conversation_id)
        return (
            surface_at(snapshot, history, all_messages, offloads, generation=int(gen), last_message_id=d.get("last_message_id", last_id), ephemeral=notes),
            st.summary,
        )

    for e in events:
        is_overflow = e.kind == "provider_error" and e.data.get("error_code") == OVERFLOW_CODE
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
        if e.kind not in _STEP_KINDS:
            continue
        if e.kind in ("prune", "summary", "summary_rejected") and e.trigger != "overflow":
            continue
        if is_overflow and current:
            attempt += 1
        if e.kind == "provider_error":
            last_id = e.data.get("last_message_id", last_id)
            notes = list(e.data.get("ephemeral") or ())
        surface, summary = surface_for(e)
        current.append(_step(e, attempt, surface, summary))
        outcome = _TERMINAL.get(e.kind)
        if outcome is not None:
            episodes.append(Episode(run_id=run_id, outcome=outcome, steps=tuple(current)))  # type: ignore[arg-type]
            current = None
    if current:
        episodes.append(_unterminated(run_id, current))
    return episodes


def _unterminated(run_id: int | None, steps: list[ReplayStep]) -> Episode:
    """An episode whose run never recorded an end: the retry is the last thing we know."""
    outcome = "recovered" if any(s.kind == "retry" for s in steps) else "gave_up"
    return Episode(run_id=run_id, outcome=outcome, steps=tuple(steps))  # type: ignore[arg-type]
