"""A model step's transactions: the :class:`engine.step.StepPort` the step driver runs on (``StepDriver(svc.steps, ...)``).

Reached as ``svc.steps`` (:class:`engine.service.Service`); shares one :class:`ServiceCore` with the other facets."""

from __future__ import annotations

from typing import Any, Sequence

from ..compaction.compactor import Measured, Outcome, RunState
from ..core.events import Event, write_event
from ..core.messages import Message
from ..core.policy import ResolvedPolicy
from ..step import Completion, StepStart
from .core import ServiceCore


class StepsFacet:
    """A model step's transactions: the :class:`engine.step.StepPort` the step driver runs on (``StepDriver(svc.steps, ...)``)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def begin_step(self, key: str, run: RunState, *, provider: str, model: str, step: int,
                   messages: Sequence[Message] = (), record: bool = True, completion: Completion | None = None) -> StepStart:
        """A model step's hot path in ONE transaction through the write door: first ``completion``
        (the previous call's usage, reply and event, held by the driver: what :meth:`finish_step`
        writes), then ``messages`` not yet
        stored (their ``source_key`` asked of the database's unique key; one without a key is always
        new), the pressure check (:meth:`Compactor.check`, reading the snapshot in this transaction)
        and, when nothing needs compacting, the request record for ``(provider, model)``. When
        compaction is needed only the intake is committed (``StepStart.outcome`` is None): the
        driver then compacts outside the lock."""
        try:
            with self._core.store.locked(key) as tx:
                if completion is None:
                    ids = self._intake(tx, messages, run.run_id)
                else:  # its messages and the intake in one batch (the reply precedes the results it asked for)
                    self._complete(tx, completion)
                    ids = self._intake(tx, [*completion.messages, *messages], run.run_id)
                snap, routed = self._core.snapshots.pressure_read(key, reader=tx.thread_reader())
                try:  # measuring only (no I/O); a failure goes the slow path, which records it (§2.9)
                    checked = self._core.compactor.check(snap, routed, run)
                except Exception:  # noqa: BLE001 - the slow path measures again and records the failure (§2.9)
                    return StepStart(ids)
                if not isinstance(checked, Outcome):
                    return StepStart(ids)
                m = checked.measured
                if m is None or (m.policy.provider, m.policy.model) != (provider, model):
                    m = self._core.compactor.measure(snap, ephemeral=run.ephemeral, provider=provider, model=model)
                rid = None
                if record:
                    rid = tx.record_model_request(provider=provider, model=model, run_id=run.run_id, step=step,
                                                  estimated_tokens=m.tokens, threshold=m.policy.threshold)
                return StepStart(ids, checked, m, rid)
        except BaseException:
            self._core.snapshots.invalidate(key)  # it may have read this transaction's writes
            raise

    def finish_step(self, key: str, request_id: int | None, *, outcome: str, reported_prompt_tokens: int | None = None,
                    reported_completion_tokens: int | None = None, error_code: str | None = None, error_message: str | None = None,
                    messages: Sequence[Message] = (), run_id: int | None = None, event: Event | None = None,
                    trigger: str | None = None) -> list[int]:
        """How a model step ended, in one transaction: the request's outcome and usage, the
        response's ``messages`` not yet stored (as :meth:`begin_step` takes them in), and ``event``
        (``recovered``). ``request_id=None``: no request, the messages alone (an adapter storing
        what a framework hands back outside a model call). Returns the new ids."""
        with self._core.store.locked(key) as tx:
            if request_id is not None:
                tx.complete_model_request(request_id, outcome=outcome, reported_prompt_tokens=reported_prompt_tokens,
                                          reported_completion_tokens=reported_completion_tokens, error_code=error_code,
                                          error_message=error_message)
            ids = self._intake(tx, messages, run_id)
            if event is not None:
                write_event(tx, event, trigger=trigger, run_id=run_id)
            return ids

    @staticmethod
    def _complete(tx: Any, c: Completion) -> None:
        """A held completion's request and event (its messages go with the caller's intake)."""
        if c.request_id is not None:
            tx.complete_model_request(c.request_id, outcome="ok", reported_prompt_tokens=c.prompt_tokens,
                                      reported_completion_tokens=c.completion_tokens)
        if c.event is not None:
            write_event(tx, c.event, trigger="overflow", run_id=c.run_id)

    @staticmethod
    def _intake(tx: Any, messages: Sequence[Message], run_id: int | None) -> list[int]:
        """``messages`` the thread does not hold yet (by ``source_key``), appended: the door's
        :meth:`engine.store.door.Locked.take_in`."""
        return tx.take_in(messages, run_id=run_id) if messages else []

    def record_model_request(
        self,
        key: str,
        *,
        provider: str,
        model: str,
        run_id: int | None = None,
        step: int = 0,
        estimated_tokens: int | None = None,
        threshold: int | None = None,
    ) -> int:
        """Record a request about to be sent (outcome ``pending``); its route becomes the thread's."""
        with self._core.store.locked(key) as tx:
            return tx.record_model_request(
                provider=provider, model=model, run_id=run_id, step=step, estimated_tokens=estimated_tokens, threshold=threshold
            )

    def complete_model_request(
        self,
        key: str,
        request_id: int,
        *,
        outcome: str,
        reported_prompt_tokens: int | None = None,
        reported_completion_tokens: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        """Record how a request of thread ``key`` ended: ``ok`` (with the provider's usage),
        ``error`` or ``cancelled`` (with the error)."""
        with self._core.store.locked(key) as tx:
            tx.complete_model_request(
                request_id,
                outcome=outcome,
                reported_prompt_tokens=reported_prompt_tokens,
                reported_completion_tokens=reported_completion_tokens,
                error_code=error_code,
                error_message=error_message,
            )

    def add_event(self, key: str, event: Event, *, trigger: str | None = None, run_id: int | None = None) -> int:
        """Record one typed event (:mod:`engine.core.events`); a trigger its kind is never written with
        raises ``ValueError`` (before the lock is taken)."""
        event.check_trigger(trigger)
        with self._core.store.locked(key) as tx:
            return write_event(tx, event, trigger=trigger, run_id=run_id)

    def compact_for_pressure(self, key: str, run: RunState, *, running_turn: bool = True) -> Outcome:
        """Pressure compaction before a model step: prune, then summarize if still at the threshold."""
        outcome = self._core.compactor.pressure(key, run, running_turn=running_turn)
        self._core.remeasure([key])
        return outcome

    def recover_overflow(self, key: str, run: RunState, *, provider: str | None = None, model: str | None = None) -> Outcome:
        """Overflow recovery after the provider said the request is too long: prune without a
        threshold check, then one shrinking summary. ``Outcome.progressed`` says whether the
        surface changed (a retry only makes sense then)."""
        outcome = self._core.compactor.overflow(key, run, provider=provider, model=model)
        self._core.remeasure([key])
        return outcome

    def measure(self, key: str, *, ephemeral: Sequence[Message] = (), provider: str | None = None, model: str | None = None) -> Measured:
        """The envelope the model would get now (from a fresh snapshot) and its token count, for the
        given route (default: the thread's)."""
        # the compactor measures against a window the thread's source reported (for its own model)
        return self._core.compactor.measure(self._core.snapshots.snapshot(key, with_busy=True), ephemeral=ephemeral, provider=provider, model=model)

    def policy_for(self, provider: str | None, model: str | None, *, reported_window: int | None = None,
                   reported_by: str | None = None) -> ResolvedPolicy:
        """The policy resolved for one route (threshold, target, retries, …); ``reported_window``
        is a window the thread's source reported (used when no override names the route)."""
        return self._core.policies.resolve(provider, model, reported_window=reported_window, reported_by=reported_by)


__all__ = ["StepsFacet"]
