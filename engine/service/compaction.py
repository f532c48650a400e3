"""Compaction by hand and its undo, the pressure figures, the summarizer, and what-if replays.

Reached as ``svc.compaction`` (:class:`engine.service.Service`); shares one :class:`ServiceCore` with the other facets."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .. import history, whatif
from ..compaction.plan import CompactionPlan, plan_manual
from ..compaction.summarizers.extractive import ExtractiveSummarizer
from ..compaction.summarizers.factory import make_summarizer, provenance
from ..core.config import Settings as UserSettings
from ..core.errors import EngineError
from ..core.events import EventKind
from ..core.messages import Message
from ..core.meter import default_meter
from ..core.surface import shown_message
from ..core.views import (  # issue 23
    ManualResult,
    Offload,
    PressurePoint,
    PressureStatus,
    RevertResult,
    RevertTarget,
    StoredMessage,
    VisibleTokens,
)
from ..store import (
    reverts as _reverts,
)
from ..store.reads import thread_reading
from ..whatif import WhatIfComparison, WhatIfSweep
from .core import ServiceCore


class CompactionFacet:
    """Compaction by hand and its undo, the pressure figures, the summarizer, and what-if replays."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def compact(self, key: str, *, summarizer: str | None = None, operator: str | None = None,
                instructions: str | None = None, reason: str | None = None) -> ManualResult:
        """Manual compaction (§4). Raises :class:`engine.core.errors.ThreadBusy` on a busy thread.
        ``summarizer="extractive"``: this one compaction with the offline extractive summarizer
        (offered when the configured model's summary was rejected); ``None``: the configured one.
        ``operator``: who asks (recorded in the event); ``None``: the ``operator.name`` setting."""
        if summarizer not in (None, "configured", "extractive"):
            raise EngineError(f"summarizer must be 'extractive' or None, not {summarizer!r}", code="invalid_argument")
        if operator is None:
            try:
                operator = UserSettings().value("operator.name") or None
            except EngineError:
                operator = None
        result = self._core.compactor.manual(key, summarizer=ExtractiveSummarizer() if summarizer == "extractive" else None, operator=operator,
                                       instructions=instructions, reason=reason, audit=self._core.store.operator())
        self._core.remeasure([key])  # only after a compaction: a refused one writes nothing at all
        return result

    def plan(self, key: str, *, trigger: str = "manual") -> CompactionPlan:
        """What a compaction of thread ``key`` would do at this moment, without doing it. ``manual``
        (Compact now, :func:`engine.compaction.plan.plan_manual`): the range its first summary call takes,
        that request's budgets and the projected envelope. ``pressure`` (before the next model
        step, :func:`engine.compaction.plan.plan_pressure`, measured for the route of the newest completed
        request; ``no_completed_request`` when there is none): whether it is due, the tool results
        the prune step offloads, and the first summary call as the thread stands (after a prune the
        compactor plans that call again). ``overflow`` (recovery after a context-overflow error,
        :func:`engine.compaction.plan.plan_overflow`, for the thread's route): the prune and the head range,
        or ``nothing_to_compact`` when neither would change the surface. A run's ephemeral notes
        and breaker are not known here (none, not tripped). Reads the thread once (no lock, no
        busy check) and writes nothing."""
        core = self._core
        if trigger not in ("manual", "pressure", "overflow"):
            raise EngineError(f"trigger must be 'manual', 'pressure' or 'overflow', not {trigger!r}", code="invalid_argument")
        snap = core.store.snapshot(key, with_busy=False)
        if trigger == "manual":  # against the threshold Compact now compacts at (a recorded one: Compactor.as_recorded)
            return plan_manual(core.compactor.as_recorded(core.compactor.measure(snap), core.store.last_completed_request(key)))
        if trigger == "overflow":
            return core.compactor.plan_overflow(core.compactor.measure(snap))
        routed = core.store.last_completed_request(key)
        m = core.compactor.measure(snap, provider=routed.provider if routed else None, model=routed.model if routed else None)
        if routed is None:  # pressure is measured for a completed request's route: none yet, no compaction
            return CompactionPlan("pressure", False, "no_completed_request", m.tokens, m.policy.threshold, m.policy.target_tokens)
        return core.compactor.plan_pressure(m)

    def revert(self, key: str, *, reason: str | None = None, display_name: str | None = None) -> RevertResult:
        """Revert the thread's last compaction of ours, or redo it when the last act was a revert
        (:meth:`engine.compaction.compactor.Compactor.revert`): under the row lock and the idle check
        (:class:`engine.core.errors.ThreadBusy`), a new generation, one event and one audit row.
        ``display_name``: ``None`` takes the ``operator.name`` setting."""
        if display_name is None:
            try:
                display_name = UserSettings().value("operator.name") or None
            except EngineError:
                display_name = None
        result = self._core.compactor.revert(key, display_name=display_name, reason=reason)
        self._core.remeasure([key])
        return result

    def revert_target(self, key: str) -> RevertTarget:
        """What Revert on thread ``key`` would do now (read only, no lock): the summary card's button."""
        return _reverts.revert_target(self._core.store, key)

    def status(self, key: str, *, remember: bool = True) -> PressureStatus:
        """The pressure of a thread for its next turn.

        Measured incrementally (:class:`engine.snapshots.SnapshotCache`, shared with the pressure
        path): each call reads the thread's key (state, configuration, busy reason) and only the
        messages appended since the last call, in one read transaction, so an unchanged thread
        costs a few small queries and one new message one count. A compaction or prune (by any
        process) changes the key and the thread is measured again, streamed in pages: a thread of
        any length is measured in bounded memory. ``progress(messages_counted)``, when given, is
        called after each page of such a cold measurement. ``remember`` (default): store the figures
        with the thread for the thread list (``svc.threads``; once per measured state, never waiting
        for a writer); a read-only command (``compaction status``) passes False and writes nothing."""
        return self._core.status(key, remember=remember)

    def status_with_progress(self, key: str, progress: Any) -> PressureStatus:
        """:meth:`status`, calling ``progress(messages_counted)`` after each page of a cold
        measurement (a huge thread measured for the first time, or after a compaction)."""
        return self._core.status(key, progress)

    def pressure_history(self, key: str) -> list[PressurePoint]:
        """Every recorded model request with the compaction (if any) that happened just before it.

        An imported request (``origin="imported"``) has no estimate of ours: its point is the
        prompt size the source reported, against the threshold in force for the thread now (the
        source's reported window included), and ``compaction="recorded"`` marks a compaction the
        source recorded since its previous request."""
        requests = self._core.store.model_requests(key, limit=100_000)
        events = [e for e in self._core.store.events(key, limit=100_000) if e.kind in (EventKind.PRUNE, EventKind.SUMMARY)]
        recorded: list[int] = []
        imported_threshold: int | None = None
        if any(r.origin == "imported" for r in requests):
            info = self._core.store.thread(key)
            recorded = sorted(c.after_message_id or 0 for c in self._core.store.source_compactions(key))
            known = self._core.policies.resolve_known(info.provider, info.model, reported_window=info.reported_context_window,
                                                reported_by=info.source_format)
            imported_threshold = known.threshold if known is not None else None  # no window known: no threshold line
        return history.pressure_points(requests, events, recorded, imported_threshold)

    def visible_tokens(self, key: str, stored: Sequence[StoredMessage], offloads: Mapping[int, Offload]) -> VisibleTokens:
        """Token badges for ``stored`` (messages of thread ``key``), counted with the meter of the
        thread's routed model: each message as the model sees it (a pruned tool result as its
        preview, :func:`engine.core.surface.shown_message`), and the full original of each pruned one."""
        meter = default_meter(self._core.store.thread(key).model)
        shown = [shown_message(s.message, offloads.get(s.id)) for s in stored]
        seen = dict(zip((s.id for s in stored), meter.count_messages(shown)))
        pruned = [s for s, m in zip(stored, shown) if m is not s.message]
        original = dict(zip((s.id for s in pruned), meter.count_messages([s.message for s in pruned]))) if pruned else {}
        return VisibleTokens(seen=seen, original=original)

    def recount(self, key: str, *, batch: int = 2000, progress: Callable[[int], None] | None = None) -> int:
        """Keep a token count with every message of ``key`` that has none under the thread's count
        key (rows written before migration 0003, or counted for another model's encoding), so a
        cold status reads no text for them (``compaction recount``, docs/cli.md). A batch is read
        and counted outside the conversation lock (message rows never change) and its counts
        written through the door under it, so intake waits at most for one batch's write.
        ``progress(recounted)`` after each batch. Returns how many rows took a count."""
        meter = default_meter(self._core.store.thread(key).model)
        after: int | None = None
        done = 0
        while True:
            with thread_reading(self._core.store, key) as reader:
                rows = reader.counted_messages_after(after, key=meter.count_key, limit=batch)
            if not rows:
                return done
            after = rows[-1][0].id
            todo = [m for m, n in rows if n is None and isinstance(m, Message)]  # a row without a count comes whole
            if todo:
                counts = meter.count_messages(todo, cache=False)
                with self._core.store.locked(key) as tx:
                    done += tx.record_counts({m.id: n for m, n in zip(todo, counts) if m.id is not None}, meter.count_key)
            if progress is not None:
                progress(done)

    def summarizer_info(self) -> dict[str, str | None]:
        """Who writes this service's summaries: ``summarizer`` (name) and ``summarizer_host``."""
        return provenance(self._core.summarizer)

    def reload_summarizer(self) -> dict[str, str | None]:
        """Build the summarizer again from the user's settings (after Preferences changed them);
        raises :class:`engine.compaction.summarizers.SummarizerError` (``config``) when they do not make one."""
        summarizer = make_summarizer()
        self._core.summarizer = summarizer
        self._core.compactor.summarizer = summarizer
        return provenance(summarizer)

    def whatif(self, key: str, settings: Mapping[str, Any], *, progress: Any = None, should_stop: Any = None) -> WhatIfComparison:
        """Replay the thread in a scratch copy under ``settings`` and compare with what happened."""
        return whatif.run_whatif(self._core.store, key, settings, policies=self._core.policies, progress=progress, should_stop=should_stop)

    def whatif_sweep(self, key: str, parameter: str, values: Sequence[Any], *, settings: Mapping[str, Any] | None = None,
                     progress: Any = None, should_stop: Any = None) -> WhatIfSweep:
        """:meth:`whatif` for each of ``values`` of one ``parameter``."""
        return whatif.run_sweep(self._core.store, key, parameter, values, policies=self._core.policies, settings=settings,
                                progress=progress, should_stop=should_stop)


__all__ = ["CompactionFacet"]
