# Over 800 lines (806): the compactor's three triggers (pressure, overflow, manual) and the revert share its measure, prune and summary paths (one summary path); revert_last (~70 lines) could move to a module of its own once it takes the store and the measure it needs instead of the Compactor (else the two modules import each other, which the import contracts refuse).
"""The compactor: pressure (§2), overflow (§3) and manual (§4) compaction over one thread.

Plan, then apply (issue 24). Every decision is a pure function of a :class:`Measured` snapshot
(its surface, :func:`engine.core.surface.build_surface`; its envelope and measurement; the resolved
policy) in :mod:`engine.compaction.plan`: whether to compact, which tool results to prune, which units a
summary takes and its budgets, as a :class:`engine.compaction.plan.CompactionPlan`
(:func:`~engine.compaction.plan.plan_pressure`, :func:`~engine.compaction.plan.plan_overflow`,
:func:`~engine.compaction.plan.plan_manual`). The :class:`Compactor` applies a plan against the store, the
Workdir and a summarizer: the prune step (:meth:`Compactor._prune`), then the one summary path
shared by every trigger (:meth:`Compactor._summarize`), planning again from what each write
left. One meter (the :mod:`engine.core.meter` singleton for the routed model) and one lock
(:meth:`engine.store.Store.locked`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, Mapping, Sequence, cast

from ..core.errors import CannotCompact, CompareAndSwapConflict, rejection_detail
from ..core.events import (
    BreakerTrippedEvent,
    DroppedEntry,
    Event,
    PrunedResult,
    PruneEvent,
    PruneFailedEvent,
    PruneFailure,
    SummaryEvent,
    SummaryRejectedEvent,
    SummaryUsage,
    write_event,
)
from ..core.messages import META_EPHEMERAL, Envelope, Message, Surface, summary_message
from ..core.meter import Measurement, TokenMeter, default_meter
from ..core.policy import THREAD_INSTRUCTIONS, PolicySet, ResolvedPolicy, recorded_threshold
from ..core.previews import replacement_preview
from ..core.specifics import dropped_at_compaction
from ..core.surface import build_surface, envelope_of, history_part
from ..core.units import Selection, Turn, build_units, pinned_rounds, starts_turn
from ..core.views import ManualResult, ModelRequest, Offload, RevertResult, Snapshot
from ..core.workdir import Workdir
from ..store import Locked, Store
from .plan import (
    IDENTIFIER_ROOM_SHARE,
    CompactionPlan,
    StaleRule,
    identifier_budget,
    manual_selection,
    plan_manual,
    plan_overflow,
    plan_pressure,
    request_text,
    summary_budget,
    summary_ceiling,
    turn_over,
    unpinned_history,
)
from .pruning import STALE_PREVIEW_SHARE, Pruned, PruneReport, prune_dropped, prune_surface, stale_results
from .summarizers.factory import provenance
from .summarizers.protocol import MAX_TOKEN_BYTES, REJECT_NOT_SMALLER, Summarizer, SummarizerError, SummaryRequest, validate_summary

log = logging.getLogger(__name__)

Trigger = Literal["pressure", "overflow", "manual"]

# the pure decisions (summary budget rule, projection, batch cut, which turns are cut into rounds)
# live in engine.compaction.plan; re-exported here for the callers that know them from this module
__all__ = ["IDENTIFIER_ROOM_SHARE", "Compactor", "Measured", "Outcome", "RunState", "identifier_budget", "pinned_tokens", "revert_last", "standing_instructions",
           "summary_budget", "summary_ceiling", "unpinned"]


# -- results ----------------------------------------------------------------------------------


@dataclass
class RunState:
    """Per-run memory of the automatic paths: ephemeral notes, the breaker, overflow attempts."""

    run_id: int | None = None
    ephemeral: list[Message] = field(default_factory=list)
    breaker_tripped: bool = False
    overflow_attempts: int = 0

    def add_ephemeral(self, text: str) -> Message:
        m = Message("system", text, metadata={META_EPHEMERAL: True})
        self.ephemeral.append(m)
        return m


@dataclass(frozen=True)
class Outcome:
    """What one automatic compaction did. ``measured`` is the surface as it stands afterwards (the
    caller sends exactly that, without measuring again); ``None`` when nothing was measured."""

    reason: str
    tokens_before: int
    tokens_after: int
    threshold: int
    generation_before: int
    generation_after: int
    summarizer_calls: int = 0
    boundary_before: int | None = None
    boundary_after: int | None = None
    measured: "Measured | None" = field(default=None, compare=False, repr=False)

    @property
    def action(self) -> Literal["none", "pruned", "summarized"]:
        if self.boundary_after != self.boundary_before:
            return "summarized"
        return "pruned" if self.generation_after > self.generation_before else "none"

    @property
    def progressed(self) -> bool:
        return self.generation_after > self.generation_before

    @classmethod
    def between(cls, reason: str, start: "Measured", end: "Measured", calls: int = 0, threshold: int | None = None) -> "Outcome":
        a, b, limit = start.snapshot.state, end.snapshot.state, end.policy.threshold if threshold is None else threshold
        return cls(reason, start.tokens, end.tokens, limit, a.generation, b.generation, calls, a.boundary, b.boundary, end)


@dataclass(frozen=True)
class _Attempt:
    advanced: bool
    reason: str | None
    calls: int
    generation: int
    boundary: int | None
    tokens_after: int
    compacted_messages: int
    #: a rejected summary's cause in words (:func:`engine.core.errors.rejection_detail` of its event)
    detail: str | None = None


@dataclass(frozen=True)
class Measured:
    """A snapshot with its surface, envelope, measurement and the resolved policy."""

    snapshot: Snapshot
    surface: Surface
    envelope: Envelope
    measurement: Measurement
    policy: ResolvedPolicy
    meter: TokenMeter

    @property
    def tokens(self) -> int:
        return self.measurement.total


class Compactor:
    """Runs compaction for threads of one store."""

    def __init__(self, store: Store, *, summarizer: Summarizer, workdir: Workdir, policies: PolicySet) -> None:
        self.store = store
        self.summarizer = summarizer
        self.workdir = workdir
        self.policies = policies
        #: the Service's incremental snapshots (:class:`engine.snapshots.SnapshotCache`); None: read and measure whole
        self.snapshots: Any = None
        self._measured: dict[str, tuple[tuple[Any, ...], Measured]] = {}  # thread -> (what, its measure)
        self._resolved: tuple[tuple[Any, ...], ResolvedPolicy] | None = None
        self._threshold: tuple[ResolvedPolicy | None, int] = (None, 0)

    def _snapshot(self, thread: str) -> Snapshot:
        """The thread's snapshot for the automatic paths (no busy check), read incrementally."""
        return self.snapshots.snapshot(thread) if self.snapshots is not None else self.store.snapshot(thread, with_busy=False)

    def _locked_snapshot(self, thread: str, tx: Locked) -> Snapshot:
        """The thread's snapshot in the row lock's transaction: through the incremental snapshots
        (the held one when the key row is unchanged, else what changed since), else read whole."""
        if self.snapshots is not None:
            return self.snapshots.pressure_read(thread, reader=tx.thread_reader())[0]
        return tx.snapshot(with_busy=False)

    # -- measuring ------------------------------------------------------------------------
    def measure(self, snapshot: Snapshot, *, ephemeral: Sequence[Message] = (), provider: str | None = None, model: str | None = None) -> Measured:
        """The snapshot measured for a route (the same snapshot object, route, notes, policies: the last one)."""
        provider, model = provider or snapshot.provider, model or snapshot.model
        how, last = (snapshot, provider, model, tuple(ephemeral), self.policies), self._measured.get(snapshot.thread)
        if last is None or last[0][0] is not snapshot or last[0][4] is not self.policies or last[0] != how:
            self._measured = self._measured if len(self._measured) < 64 else {}  # bounded: each holds a snapshot
            last = self._measured[snapshot.thread] = (how, self._measure(snapshot, ephemeral=ephemeral, provider=provider, model=model))
        return last[1]

    def _measure(self, snapshot: Snapshot, *, ephemeral: Sequence[Message], provider: str | None, model: str | None) -> Measured:
        # a window the thread's source reported (Codex) counts for the thread's own model (§7)
        reported = snapshot.reported_context_window if model == snapshot.model else None
        policy = self._resolve(provider, model, reported, snapshot.source_format if reported else None, snapshot.thread_policy)
        meter = default_meter(model)
        if self.snapshots is not None:  # the cache's latest snapshot: O(new messages); any other: whole
            surface, env, measurement = self.snapshots.measure(snapshot, meter, ephemeral=ephemeral)
            return Measured(snapshot, surface, env, measurement, policy, meter)
        surface = build_surface(snapshot, ephemeral=ephemeral)
        env = envelope_of(snapshot, surface)
        return Measured(snapshot, surface, env, meter.measure(env), policy, meter)

    def _resolve(self, provider: str | None, model: str | None, reported: int | None, reported_by: str | None, thread: Any) -> ResolvedPolicy:
        # policies.resolve is pure (the policies are immutable): the last answer is kept
        key, last = (self.policies, provider, model, reported, reported_by, thread), self._resolved
        if last is None or last[0][0] is not self.policies or last[0] != key:
            last = self._resolved = (key, self.policies.resolve(provider, model, reported_window=reported, reported_by=reported_by, thread=thread))
        return last[1]

    # -- §2 pressure ----------------------------------------------------------------------
    def check(self, snap: Snapshot, routed: ModelRequest | None, run: RunState) -> Outcome | Measured:
        """The pressure check alone (§2), writing nothing: the :class:`Outcome` when the step needs
        no compaction (no completed request yet, below the threshold, automatic compaction off),
        else the :class:`Measured` envelope compaction starts from. ``routed`` is the newest
        completed request (its route is what pressure measures for)."""
        if routed is None:
            g = snap.state.generation
            return Outcome("no_completed_request", 0, 0, 0, g, g, 0, snap.state.boundary, snap.state.boundary)
        m = self.measure(snap, ephemeral=run.ephemeral, provider=routed.provider, model=routed.model)
        self._threshold = kept = t if (t := self._threshold)[0] is m.policy else (m.policy, m.policy.threshold)  # exact arithmetic: kept
        if m.tokens < kept[1]:
            return Outcome.between("below_threshold", m, m, threshold=kept[1])
        if not m.policy.policy.auto:
            return Outcome.between("auto_off", m, m)
        return m

    def pressure(self, thread: str, run: RunState, *, running_turn: bool = True) -> Outcome:
        """Pressure compaction before a model step (§2)."""
        if self.snapshots is not None:  # the route and the snapshot in one read transaction
            snap, routed = self.snapshots.pressure_read(thread)
        else:
            routed = self.store.last_completed_request(thread)
            snap = self._snapshot(thread)
        checked = self.check(snap, routed, run)
        if isinstance(checked, Outcome):
            return checked
        assert routed is not None
        route = {"provider": routed.provider, "model": routed.model}
        start = m = checked
        threshold = m.policy.threshold
        m = self._prune(thread, m, self.plan_pressure(m, summary=False), trigger="pressure", run=run)  # the prune step first
        if m.tokens < threshold:
            return Outcome.between("prune_enough", start, m)
        if run.breaker_tripped:
            return Outcome.between("breaker_tripped", start, m)
        calls = 0
        reason = "max_rounds"
        rounds = m.policy.policy.loop_max_compaction_rounds
        for call in range(rounds):
            plan = plan_pressure(m, stale=None, running_turn=running_turn, call=call)  # this summary call, on what the last write left
            if not plan.summarizes:  # no attempt was made, so no breaker (§2.8): later steps may free units
                reason = "nothing_to_compact"
                break
            att = self._summarize(thread, m, plan, kind="summary", run_id=run.run_id, running_turn=running_turn)
            calls += att.calls
            if not att.advanced:
                reason = att.reason or "no_progress"
                self._trip(thread, run, reason, m)
                break
            m = self.measure(self._snapshot(thread), ephemeral=run.ephemeral, **route)
            if m.tokens <= m.policy.target_tokens:
                reason = "summarized"
                break
        if m.tokens > m.policy.target_tokens and pinned_tokens(m) > m.policy.target_tokens:
            reason = "pinned_over_target"  # the pins alone hold more than compaction aims at
        return Outcome.between(reason, start, m, calls)

    def plan_pressure(self, m: Measured, *, running_turn: bool = True, breaker_tripped: bool = False, summary: bool = True) -> CompactionPlan:
        """:func:`engine.compaction.plan.plan_pressure` of ``m`` with this compactor's prune rule: what
        :meth:`pressure` does first (the prune step) and its first summary call as ``m`` stands."""
        return plan_pressure(m, stale=self.stale_rule(m), running_turn=running_turn, breaker_tripped=breaker_tripped, summary=summary)

    def plan_overflow(self, m: Measured) -> CompactionPlan:
        """:func:`engine.compaction.plan.plan_overflow` of ``m`` with this compactor's prune rule."""
        return plan_overflow(m, stale=self.stale_rule(m))

    @staticmethod
    def stale_rule(m: Measured) -> StaleRule:
        """The results the prune step treats as stale (:func:`engine.compaction.pruning.stale_results`: before
        the retained tail and the newest ``loop_recent_tool_rounds`` rounds) and their preview share."""
        ids = stale_results(unpinned(m), message_tokens=m.meter.count_message, tail_tokens=m.policy.retained_tail_tokens,
                            recent_rounds=m.policy.policy.loop_recent_tool_rounds)
        return StaleRule(ids, STALE_PREVIEW_SHARE)

    # -- §3 overflow ----------------------------------------------------------------------
    def overflow(self, thread: str, run: RunState, *, provider: str | None = None, model: str | None = None) -> Outcome:
        """Overflow recovery work (§3.2): prune without a threshold check, then one shrinking summary
        of the largest balanced head range that keeps the newest unit. Progress = generation growth."""
        start = m = self.measure(self._snapshot(thread), ephemeral=run.ephemeral, provider=provider, model=model)
        plan = self.plan_overflow(m)
        if not plan.possible:  # nothing to prune or summarize: the surface cannot change (no progress)
            return Outcome.between("overflow", start, m)
        if plan.prune:  # the summary is planned again on what the prune left
            m = self._prune(thread, m, plan, trigger="overflow", run=run)
            plan = plan_overflow(m, stale=None)
        calls = 0
        if plan.summarizes:
            att = self._summarize(thread, m, plan, kind="summary", run_id=run.run_id, running_turn=True)
            calls = att.calls
            if att.advanced:
                m = self.measure(self._snapshot(thread), ephemeral=run.ephemeral, provider=provider, model=model)
        return Outcome.between("overflow", start, m, calls)

    # -- §4 manual ------------------------------------------------------------------------
    def manual(self, thread: str, *, summarizer: Summarizer | None = None, operator: str | None = None,
               instructions: str | None = None, reason: str | None = None, audit: str | None = None) -> ManualResult:
        """Manual compaction (§4): row lock from the idle check to the commit, summarizer included.

        The finished last turn is split into its request and one unit per round
        (``split_last_turn``) and the retained tail is counted in tokens over every unit, so an idle
        agent trajectory (one request, hundreds of rounds) compacts too. A compaction that leaves
        the thread at or over its threshold says so (``still_over_threshold`` and ``note``).

        ``instructions`` (else the thread's standing ones) go to the summarizer and into the event;
        pinned messages stay verbatim, and when they alone hold more than the target the result
        says so (reason ``pinned_over_target``). ``audit``: the operator (database role / OS
        user) an audit row names, written in this transaction with ``reason`` and the state
        before and after; None writes none."""
        failure: CannotCompact | None = None
        with self.store.locked(thread) as tx:
            tx.require_idle()
            last = tx.thread_reader().last_completed_request()
            m = self.as_recorded(self.measure(tx.snapshot()), last)
            before = m.tokens
            start_state = m.snapshot.state
            if instructions is None or not instructions.strip():
                instructions = standing_instructions(m.snapshot)

            def audited(result: ManualResult) -> ManualResult:
                if audit is not None:
                    tx.record_audit(
                        "compact", operator=audit, display_name=operator, reason=reason,
                        before={"boundary": start_state.boundary, "generation": start_state.generation, "tokens": before},
                        after={"status": result.status, "reason": result.reason, "boundary": result.boundary, "generation": result.generation,
                               "tokens": result.after_tokens, "instructions": instructions or None},
                    )
                return result

            plan = plan_manual(m)
            if not plan.summarizes:
                state = m.snapshot.state
                over, note = self._over_threshold(m, reached_limit=False, nothing_selectable=True)
                why: str | None = "insufficient_history"
                if pinned_tokens(m) > m.policy.target_tokens:
                    why, note = "pinned_over_target", pins_note(m)
                return audited(ManualResult("no_op", why, before, before, 0, state.boundary, state.generation, 0, still_over_threshold=over, note=note))
            calls = compacted = 0
            att = None
            more = False  # stopped at the call limit with more to take
            limit = max(1, m.policy.policy.loop_max_compaction_rounds)
            for call in range(limit):
                att = self._summarize(thread, m, plan, kind="manual", run_id=None, running_turn=False, tx=tx, summarizer=summarizer, operator=operator,
                                      instructions=instructions)
                calls += att.calls
                if not att.advanced:
                    break
                compacted += att.compacted_messages
                m = self.as_recorded(self.measure(tx.snapshot()), last)
                if call + 1 == limit:  # no further call: only whether there was more to take
                    more = bool(manual_selection(m).units)
                    break
                plan = plan_manual(m, call=call + 1)  # the next call, on what this one left
                if not plan.summarizes:
                    break
            assert att is not None
            if compacted == 0:
                audited(ManualResult("no_op", "summary_rejected", before, before, 0, start_state.boundary, start_state.generation, calls))
                failure = CannotCompact(f"summary rejected ({att.reason}); nothing was changed", code="summary_rejected", reason=att.reason)
                if att.detail:  # the cause it had in hand: no caller pages the events to find it again
                    failure.explain(att.detail)
            else:
                state = m.snapshot.state
                over, note = self._over_threshold(m, reached_limit=more, rejected=None if att.advanced else att.reason)
                why = None
                if m.tokens > m.policy.target_tokens and pinned_tokens(m) > m.policy.target_tokens:
                    why, note = "pinned_over_target", pins_note(m) + (f"; {note}" if note else "")
                return audited(ManualResult("completed", why, before, m.tokens, compacted, state.boundary, state.generation, calls, still_over_threshold=over, note=note))
        raise failure  # the rejection event above was committed with the (otherwise unchanged) lock transaction

    @staticmethod
    def as_recorded(m: Measured, last: ModelRequest | None) -> Measured:
        """``m`` under the threshold the thread's last completed request recorded, when this
        process would only assume its window (:func:`engine.core.policy.recorded_threshold`: an
        agent ran it under a policy this process lacks), as the thread's status measures it: a
        compaction by hand plans against the threshold the list, the header and the gauge show."""
        snap = m.snapshot
        threshold = recorded_threshold(m.policy, last, snap.provider, snap.model, snap.thread_policy)
        if threshold is None or threshold > m.policy.context_window:
            return m
        return replace(m, policy=replace(m.policy, policy=m.policy.policy.with_overrides({"threshold_tokens": threshold})))

    def _over_threshold(self, m: Measured, *, reached_limit: bool, nothing_selectable: bool = False, rejected: str | None = None) -> tuple[bool, str | None]:
        """(still at or over the threshold, why in words) for a manual result."""
        threshold = m.policy.threshold
        if m.tokens < threshold:
            return False, None
        parts = m.measurement.breakdown
        fixed, summary = parts["system"] + parts["tools"], parts["summary"]
        kept = history_part(m.surface)
        kept_tokens = sum(m.meter.count_message(x) for x in kept)
        head = f"{m.tokens:,} tokens, threshold {threshold:,}"
        if rejected is not None:
            return True, f"{head}: a later summary was rejected ({rejected}); compact again to retry"
        if reached_limit:
            return True, f"{head}: stopped after loop_max_compaction_rounds ({m.policy.policy.loop_max_compaction_rounds}) summary calls; compact again to continue"
        units = build_units(kept, running_turn=False, split_last_turn=True, split_turn=_split_turn(m))
        open_unit = next((u for u in units if u.open), None)
        if open_unit is not None:
            return True, f"{head}: message #{open_unit.first_id} has a call without a result, so it and everything after it stay verbatim"
        if fixed >= threshold:
            return True, f"{head}: the system prompt, system notes and tool schemas alone take {fixed:,} tokens"
        what = "nothing before the retained tail can be summarized" if nothing_selectable else "the rest is the retained tail"
        costs = [(sum(m.meter.count_message(x) for x in u.messages), u.first_id) for u in units]
        big, big_id = max(costs, key=lambda c: c[0]) if costs else (0, None)
        request = request_text(m)
        why = f"; the largest unit kept, from message #{big_id}, is {big:,} tokens and is indivisible" if big_id is not None else ""
        if request and m.meter.count_text(request) * 2 >= threshold:
            why += f"; the current request alone is {m.meter.count_text(request):,} tokens and stays verbatim"
        return True, f"{head}: {what} ({kept_tokens:,} tokens kept verbatim; system prompt and tools {fixed:,}, summary {summary:,}{why})"

    # -- shared steps ---------------------------------------------------------------------
    def _prune(self, thread: str, m: Measured, plan: CompactionPlan, *, trigger: Trigger, run: RunState) -> Measured:
        """Apply the prune step of ``plan`` (§2.3): offload the results it names (over the limit,
        and those before the protected tail whose preview is smaller, at the stale budget); both
        keep their ids in the preview and cost no summarizer call. A result the Workdir refuses stays
        (a ``prune_failed`` event); one another writer pruned meanwhile is left to it."""
        if not plan.prune:
            return m
        pol = m.policy.policy
        started = time.perf_counter()
        report = prune_surface(
            unpinned(m),
            workdir=self.workdir,
            count_tokens=m.meter.count_text,
            limit_tokens=pol.tool_result_limit_tokens,
            preview_tokens=pol.preview_tokens,
            stale=frozenset(plan.prune_stale),
            only=frozenset(plan.prune),  # the plan's candidates (the same rule): no other result is looked at
        )
        if not report.pruned:
            if report.failed:
                self._record(thread, PruneFailedEvent(failed=_failures(report)), trigger=trigger, run_id=run.run_id)
            return m
        pruned = {p.message_id: p for p in report.pruned if p.message_id is not None}
        # what the previews leave out, against the surface after the prune (outside the row lock)
        left_out = prune_dropped(report, m.surface.messages, system_prompt=m.envelope.system_prompt,
                                 summary=m.surface.summary, current_request=request_text(m))
        with self.store.locked(thread) as tx:
            # another run may have pruned some of these, or moved the boundary past them, meanwhile
            ids = tx.prunable(list(pruned))
            current = self._locked_snapshot(thread, tx)
            if not ids:  # nothing left for us: measure what the other writer left
                return self.measure(current, ephemeral=run.ephemeral, provider=m.policy.provider, model=m.policy.model)
            before_gen = current.state.generation
            offloads = [pruned[i].offload for i in ids]  # generation None: the store sets it
            predicted = {o.message_id: replace(o, generation=before_gen + 1) for o in offloads}
            after = self.measure(_with_offloads(current, predicted, generation=before_gen + 1), ephemeral=run.ephemeral, provider=m.policy.provider, model=m.policy.model)
            gen = tx.record_prune(offloads, trigger=trigger, run_id=run.run_id, tokens_before=m.tokens, tokens_after=after.tokens)
            event = PruneEvent(
                tokens_before=m.tokens,
                tokens_after=after.tokens,
                threshold=m.policy.threshold,
                generation_before=before_gen,
                generation_after=gen,
                boundary=after.snapshot.state.boundary,
                pruned=tuple(
                    PrunedResult(message_id=o.message_id, tool=o.tool_name, sha256=o.sha256, path=o.path, original_tokens=o.original_tokens, preview_tokens=o.preview_tokens,
                                 **_left_out_counts(pruned[o.message_id]))
                    for o in offloads
                ),
                failed=_failures(report),
                duration_ms=_ms_since(started),
                **(left_out if set(ids) == set(pruned) else prune_dropped(report, m.surface.messages, system_prompt=m.envelope.system_prompt,
                                                                          summary=m.surface.summary, current_request=request_text(m), ids=set(ids))),
            )
            write_event(tx, event, trigger=trigger, run_id=run.run_id)
        return after

    def _summarize(
        self,
        thread: str,
        m: Measured,
        plan: CompactionPlan,
        *,
        kind: str,
        run_id: int | None,
        running_turn: bool,
        tx: Locked | None = None,
        summarizer: Summarizer | None = None,
        operator: str | None = None,
        instructions: str | None = None,
    ) -> _Attempt:
        """The one summary path: summarize the range ``plan`` selected within its budgets, validate,
        compare-and-swap, record (the event under ``plan.trigger``)."""
        started = time.perf_counter()
        sel, trigger = plan.selection, cast(Trigger, plan.trigger)
        assert sel is not None
        snap = m.snapshot
        state = snap.state
        meter = m.meter
        current = request_text(m)
        replaced = sum(meter.count_message(x) for x in sel.messages) + (meter.count_text(state.summary) if state.summary else 0)
        summarizer = summarizer if summarizer is not None else self.summarizer  # a manual compaction may choose its own
        who = provenance(summarizer)  # who writes it: name and endpoint host (never the key)
        summarizer_name = who["summarizer"]
        # the keys both the summary and the rejection event carry
        base: dict[str, Any] = dict(
            tokens_before=m.tokens,
            threshold=m.policy.threshold,
            target=m.policy.target_tokens,
            boundary_before=state.boundary,
            generation_before=state.generation,
            selected_boundary=sel.boundary,
            selected_messages=len(sel.messages),
            replaced_tokens=replaced,
            summarizer=summarizer_name,
        )
        if who["summarizer_host"]:
            base["summarizer_host"] = who["summarizer_host"]
        if operator:
            base["operator"] = operator  # who asked for a manual compaction (the user's display name)
        if instructions is None:  # an automatic compaction follows the thread's standing instructions
            instructions = standing_instructions(snap)
        if instructions:
            base["instructions"] = instructions
        pins = pinned_rounds(history_part(m.surface), snap.pins) if snap.pins else frozenset()
        if pins:
            base["pinned"] = tuple(sorted(pins))  # kept verbatim on the surface, outside the summary

        def reject(reason: str, calls: int, **extra: Any) -> _Attempt:
            event = SummaryRejectedEvent(**base, reason=reason, calls=calls, generation_after=state.generation, duration_ms=_ms_since(started), **extra)
            self._record(thread, event, trigger=trigger, run_id=run_id, tx=tx)
            detail = rejection_detail(CannotCompact("", reason=reason), {**base, "reason": reason, **extra})
            return _Attempt(False, reason, calls, state.generation, state.boundary, m.tokens, 0, detail)

        request = SummaryRequest(
            messages=sel.messages,
            previous_summary=state.summary,
            current_request=current,
            # finished turns only (no turn_user/round unit taken): the range is not in the running turn
            running_turn=running_turn and _in_last_turn(sel, history_part(m.surface)),
            max_tokens=plan.max_tokens,  # the budget rule (engine.compaction.plan.summary_request_budgets)
            identifier_tokens=plan.identifier_tokens,
            retries=m.policy.policy.summary_retries,
            # what stays verbatim after the range (pinned messages too): the identifiers it mentions are kept first
            retained=tuple(x for x in history_part(m.surface) if x.id is not None and (x.id > sel.boundary or x.id in pins)) if sel.boundary is not None else (),
            instructions=instructions or None,
        )
        try:
            result = summarizer.summarize(request)
        except SummarizerError as exc:
            return reject("summarizer_failed", 1, error_code=exc.code, error_message=exc.message)
        except Exception as exc:  # a third-party summarizer's bug: reject, keep history, carry on
            log.warning("summarizer %s crashed on thread %r", summarizer_name, thread, exc_info=True)
            return reject("summarizer_failed", 1, error_code="summarizer_crashed", error_message=f"{type(exc).__name__}: {exc}")
        # ``calls`` counts summarizer invocations; HTTP requests (retries included) are in ``usage``
        why = validate_summary(result, replaced_tokens=replaced, count_tokens=meter.count_text, current_request=current)
        usage = SummaryUsage(http_requests=result.calls, prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens, model=result.model, extractive=result.extractive)
        if why is not None:
            huge = len(result.text.encode("utf-8", "surrogatepass")) // MAX_TOKEN_BYTES >= replaced  # never tokenized
            return reject(why, 1, usage=usage, summary_tokens=None if huge else meter.count_text(result.text))
        assert sel.boundary is not None
        # the compare-and-swap hash is over the STORED message (a pruned result's surface is its preview)
        boundary_msg = next(x for x in snap.messages if x.id == sel.boundary)
        # the new surface, measured before persisting: the event carries exact before/after tokens
        kept = tuple(x for x in snap.messages if x.id is not None and x.id > sel.boundary)
        new_snap = _replace_snapshot(snap, boundary=sel.boundary, summary=result.text, messages=kept)
        if pins:  # pinned messages the new boundary passes stay on the surface
            new_snap = replace(new_snap, pins=snap.pins | pins,
                               pinned=tuple(x for x in snap.pinned + snap.messages if x.id is not None and x.id in pins and x.id <= sel.boundary))
        ephemeral = [x for x in m.surface.messages if x.is_ephemeral]  # the whole envelope, as before
        after = self.measure(new_snap, ephemeral=ephemeral, provider=m.policy.provider, model=m.policy.model)
        summary_tokens = meter.count_message(summary_message(result.text))  # what it costs in the envelope (the gauge's "summary")
        if after.tokens >= m.tokens:  # smaller than what it replaces, yet the envelope would grow (its framing, a request kept verbatim)
            return reject(REJECT_NOT_SMALLER, 1, usage=usage, summary_tokens=meter.count_text(result.text),
                          error_message=f"the request after it would be {after.tokens:,} tokens, not fewer than the {m.tokens:,} before")
        specifics = _dropped(sel, state.summary, result.text, after, request)  # pure: before the row lock

        def persist(t: Locked) -> int:
            gen = t.persist_summary(
                expected_boundary=state.boundary,
                expected_boundary_hash=state.boundary_hash,
                new_boundary=sel.boundary,  # type: ignore[arg-type]
                new_boundary_hash=boundary_msg.content_hash(),
                summary=result.text,
                summary_tokens=summary_tokens,
                kind=kind,
                trigger=trigger,
                run_id=run_id,
                tokens_before=m.tokens,
                tokens_after=after.tokens,
                expected_pins_version=state.pins_version,
            )
            event = SummaryEvent(
                **base,
                tokens_after=after.tokens,
                boundary_after=sel.boundary,
                generation_after=gen,
                summary_tokens=summary_tokens,
                usage=usage,
                calls=1,
                dropped_identifiers=len(result.dropped_identifiers),
                duration_ms=_ms_since(started),
                **specifics,
            )
            write_event(t, event, trigger=trigger, run_id=run_id)
            return gen

        try:
            if tx is not None:
                gen = persist(tx)
            else:
                with self.store.locked(thread) as t:
                    gen = persist(t)
        except CompareAndSwapConflict as exc:
            return reject("cas_conflict", 1, error_message=exc.message)
        return _Attempt(True, None, 1, gen, sel.boundary, after.tokens, len(sel.messages))

    def _trip(self, thread: str, run: RunState, reason: str, m: Measured) -> None:
        """No progress: no further automatic summary attempt in this run (§2.8)."""
        run.breaker_tripped = True
        event = BreakerTrippedEvent(reason=reason, tokens=m.tokens, threshold=m.policy.threshold, generation=m.snapshot.state.generation)
        self._record(thread, event, trigger="pressure", run_id=run.run_id)

    # -- revert / redo of the last compaction (issue 23; the work is in revert_last) -------
    def revert(self, thread: str, *, display_name: str | None = None, reason: str | None = None) -> RevertResult:
        """Revert the thread's last compaction of ours, or redo it when the last act was a revert."""
        return revert_last(self, thread, display_name=display_name, reason=reason)

    def _record(self, thread: str, event: Event, *, trigger: Trigger, run_id: int | None, tx: Locked | None = None) -> None:
        """Write ``event`` in ``tx``, or on its own (outside the row lock) when there is none."""
        if tx is not None:
            write_event(tx, event, trigger=trigger, run_id=run_id)
        else:
            event.check_trigger(trigger)  # a wrong trigger is refused before the lock is taken
            with self.store.locked(thread) as t:
                write_event(t, event, trigger=trigger, run_id=run_id)


# -- small helpers ----------------------------------------------------------------------------


def standing_instructions(snap: Snapshot) -> str | None:
    """The thread's standing compaction instructions (its policy's ``instructions``), or None."""
    value = (snap.thread_policy or {}).get(THREAD_INSTRUCTIONS)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _pins_of(m: Measured) -> frozenset[int]:
    return pinned_rounds(history_part(m.surface), m.snapshot.pins) if m.snapshot.pins else frozenset()


def unpinned(m: Measured) -> tuple[Message, ...]:
    """The surface's history without the pinned messages (widened to their tool rounds): what
    compaction may prune or summarize (:func:`engine.compaction.plan.unpinned_history`). A pinned message
    stays verbatim in its place."""
    return unpinned_history(m)


def pinned_tokens(m: Measured) -> int:
    """Tokens the pinned messages take on the surface (they count against the envelope)."""
    pins = _pins_of(m)
    return sum(m.meter.count_message(x) for x in history_part(m.surface) if x.id in pins) if pins else 0


def pins_note(m: Measured) -> str:
    pins = _pins_of(m)
    return (f"pinned messages alone hold {pinned_tokens(m):,} tokens, over the target of {m.policy.target_tokens:,} "
            f"({len(pins)} pinned message{'s' if len(pins) != 1 else ''}); unpin some to compact further")


def _split_turn(m: Measured) -> Callable[[Turn], bool]:
    """Which earlier finished turns are cut into their rounds: those larger than the target (any
    turn is divisible at its tool rounds, whatever follows it)."""
    return turn_over(m.policy.target_tokens, m.meter.count_message)


def _in_last_turn(sel: Selection, history: Sequence[Message]) -> bool:
    """Whether the selection ends inside the newest turn (no request starts after its boundary):
    only then does it lie in the running turn. A finished turn cut into rounds does not."""
    if not sel.units or all(u.kind == "turn" for u in sel.units) or sel.boundary is None:
        return False
    return not any(x.id is not None and x.id > sel.boundary and starts_turn(x) for x in history)


def _dropped(sel: Selection, previous: str | None, summary: str, after: Measured, request: SummaryRequest) -> dict[str, Any]:
    """The ``summary`` event's dropped-specifics keys: what the model saw of the summarized range
    (previews for pruned results, tool calls with their arguments) and the previous summary, against
    the new summary and the new surface (system prompt, kept messages as shown, ephemeral notes;
    tool schemas are not specifics); referenced by the current request and the retained tail. A
    failure here never costs the summary: the keys stay unknown."""
    started = time.perf_counter()
    try:
        found = dropped_at_compaction(
            summarized=sel.messages,
            previous_summary=previous,
            summary=summary,
            kept=after.surface.messages,
            system_prompt=after.envelope.system_prompt,
            current_request=request.current_request,
            retained=request.retained,
            shown=replacement_preview,
        )
    except Exception:  # a bug in a pure extractor must not lose a summary
        log.warning("dropped specifics failed", exc_info=True)
        return {}
    fields = found.event_fields()
    fields["dropped"] = tuple(DroppedEntry(kind=d.kind, value=d.value, referenced=d.referenced) for d in found.dropped)
    return {**fields, "specifics_ms": _ms_since(started)}


def _left_out_counts(p: Pruned) -> dict[str, int]:
    """A pruned result's specifics and how many its preview leaves out (event keys of PrunedResult)."""
    return {} if p.left_out is None else {"specifics_seen": p.left_out.seen, "left_out": p.left_out.dropped_count or 0}


def _failures(report: PruneReport) -> tuple[PruneFailure, ...]:
    return tuple(PruneFailure(message_id=f.message_id, reason=f.reason) for f in report.failed)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _with_offloads(snap: Snapshot, extra: Mapping[int, Offload], *, generation: int) -> Snapshot:
    return replace(snap, offloads={**snap.offloads, **extra}, state=replace(snap.state, generation=generation))


def _replace_snapshot(snap: Snapshot, *, boundary: int, summary: str, messages: tuple[Message, ...]) -> Snapshot:
    return replace(snap, messages=messages, state=replace(snap.state, boundary=boundary, summary=summary))


# -- revert / redo (issue 23) ------------------------------------------------------------------


def revert_last(compactor: Compactor, thread: str, *, display_name: str | None = None, reason: str | None = None) -> RevertResult:
    """Revert the thread's last compaction of ours (or, of a revert, redo it) as a new generation,
    through the write door: row lock, idle check, compare-and-swap against the state read under the
    lock, the results its prunes replaced verified against their SHA-256 in the Workdir, one
    ``revert`` / ``redo`` event and one audit row with the operator, all in one transaction."""
    from ..core.errors import NotRevertible
    from ..core.events import RedoEvent, RevertEvent
    from ..core.workdir import WorkdirError, sha256_text
    from ..store.reverts import apply_revert, plan_revert

    with compactor.store.locked(thread) as tx:
        tx.require_idle()
        start = compactor.measure(tx.snapshot())
        plan = plan_revert(tx)
        if plan.action == "revert":  # the originals must come back verbatim, or nothing changes
            for mid, (sha, tool, path) in plan.results.items():
                try:
                    original = compactor.workdir.read(sha, tool, path)
                except WorkdirError as exc:
                    raise NotRevertible(f"the original of tool result #{mid} cannot come back: {exc.message}; nothing was changed", code="original_missing") from None
                stored = tx.message(mid)
                if stored is None or not isinstance(stored.content, str) or sha256_text(stored.content) != sha or original != stored.content:
                    raise NotRevertible(f"tool result #{mid} no longer matches its saved original (SHA-256 {sha[:12]}…); nothing was changed", code="original_missing")
        meter = start.meter
        summary_tokens = meter.count_message(summary_message(plan.summary)) if plan.summary is not None else 0
        measured: list[Measured] = []

        def measure_after() -> int:
            measured.append(compactor.measure(tx.snapshot()))
            return measured[0].tokens

        gen, _ = apply_revert(tx, plan, summary_tokens=summary_tokens, tokens_before=start.tokens, measure=measure_after)
        end = measured[0]
        operator = tx.operator()
        common: dict[str, Any] = dict(
            generation_before=plan.generation,
            generation_after=gen,
            boundary_before=plan.boundary_now,
            boundary_after=plan.boundary,
            history_ids=plan.history_ids,
            tokens_before=start.tokens,
            tokens_after=end.tokens,
            operator=operator,
            display_name=display_name or None,
            reason=reason or None,
        )
        results = tuple(plan.results)
        event = RevertEvent(**common, restored_results=results) if plan.action == "revert" else RedoEvent(**common, repruned_results=results)
        write_event(tx, event, trigger="manual")
        state = {"generation": plan.generation, "boundary": plan.boundary_now, "tokens": start.tokens}
        audit_id = tx.record_audit(
            plan.action,
            operator=operator,
            display_name=display_name,
            reason=reason,
            before=state,
            after={"generation": gen, "boundary": plan.boundary, "tokens": end.tokens, "history_ids": list(plan.history_ids), "results": list(results)},
        )
    return RevertResult(
        action=plan.action,
        thread=thread,
        generation_before=plan.generation,
        generation_after=gen,
        boundary_before=plan.boundary_now,
        boundary_after=plan.boundary,
        history_ids=plan.history_ids,
        results=results,
        tokens_before=start.tokens,
        tokens_after=end.tokens,
        operator=operator,
        audit_id=audit_id,
    )
