# Over 800 lines (818): the one step driver; the step, the overflow protocol, held completions and write-behind steps share the driver's state and its two locks; the background writer (_Writer, ~100 lines) could move to a module of its own with the held-completion and write-behind fields it reads.
"""One model step on a thread: the one driver the harness, the adapters and what-if run on.

A step, written once here:

1. **intake** of the messages that are new (a message whose ``source_key`` the thread already
   holds is skipped by the database's unique key), the **pressure check** and the **request
   record**, in ONE transaction when the thread is below its threshold (the hot path:
   :meth:`StepPort.begin_step`); a driver made with ``behind=True`` (the adapters) sends a steady
   step without reading the store and runs that transaction on the background writer while the
   model answers (:meth:`StepDriver.prepare`);
2. otherwise **pressure compaction** (prune, then a summary only if still at the threshold), outside
   the conversation lock (a summarizer call may take seconds); a compaction that fails
   operationally (database, Workdir) is recorded as ``pressure_failed`` and the step goes on with
   the persisted surface (§2.9); then the request record;
3. the **model call** through a function the caller supplies (:meth:`StepDriver.call` /
   :meth:`StepDriver.acall`), or by the caller between :meth:`StepDriver.prepare` and
   :meth:`StepDriver.succeeded` / :meth:`StepDriver.failed` where a framework's hooks split it;
4. the provider-reported **usage** (and the response's messages, in the same transaction); a
   driver made with ``hold=SECONDS`` (the adapters) keeps that write (a :class:`Completion`) and
   writes it first in the next step's one transaction instead of in a transaction of its own,
   or, when no step comes within ``SECONDS`` (a slow tool, a run that stops), on a background
   thread then, so a reader (the inspector) still sees the reply while the tools it asked for
   run. The request stays ``pending`` until that commit, so a crash in between loses no more
   than a crash during the call would. :meth:`StepDriver.flush` writes a held completion now
   (with messages to append, in one transaction): a caller ends a run, or gives up on it, only
   after flushing, so no request stays pending once a run is over;
5. **overflow recovery** (§3): a provider error is recorded (``provider_error``); a context
   overflow is recovered at most ``max_overflow_retries`` times per run and retried only when the
   surface generation grew (``retry``, then ``recovered`` once a retried step succeeds); otherwise
   a ``gave_up`` event says why and the caller raises (or reports) the ORIGINAL error.

The driver works on a :class:`StepPort`, what a step needs of a thread's store and compactor:
``svc.steps`` (:class:`engine.service.StepsFacet`) is one (the harness and the adapters); what-if's scratch copy
(:mod:`engine.whatif.runs`) gives its own. It holds no run state of its own beyond the open
recovery episode: the caller's :class:`RunState` carries the run id, notes and overflow count.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Protocol, Sequence, TypeVar

from .compaction.compactor import Measured, Outcome, RunState
from .core.events import Event, GaveUpEvent, PressureFailedEvent, ProviderErrorEvent, RecoveredEvent, RetryEvent
from .core.messages import Envelope, Message, Surface
from .core.policy import ResolvedPolicy
from .core.surface import SYNTHETIC_USER_TEXT
from .llm.errors import CONTEXT_WINDOW_EXCEEDED, ProviderError, is_context_overflow

log = logging.getLogger(__name__)

T = TypeVar("T")

#: the name of the background writer's thread (held completions, write-behind steps)
WRITER_THREAD = "step-writer"

__all__ = ["SYNTHETIC_USER_TEXT", "WRITER_THREAD", "Call", "Completion", "Failure", "StepDriver", "StepPort", "StepStart", "describe"]


@dataclass(frozen=True)
class Completion:
    """A succeeded call's write held for the next transaction on the thread (``StepDriver(hold=SECONDS)``):
    the request's usage (outcome ``ok``), the response's ``messages`` to append, and ``event``
    (``recovered``, trigger ``overflow``) — what :meth:`StepPort.finish_step` would have written."""

    request_id: int | None
    prompt_tokens: int | None
    completion_tokens: int | None
    messages: tuple[Message, ...] = ()
    run_id: int | None = None
    event: Event | None = None
    #: a write-behind call whose request the writer records (:attr:`Call.request_id` is set then):
    #: the request completed is that call's, read when this completion is written (after it)
    call: "Call | None" = field(default=None, compare=False, repr=False)

    def resolved(self) -> "Completion":
        """This completion with its request id read from its write-behind call (recorded by now)."""
        return self if self.call is None else replace(self, request_id=self.call.request_id, call=None)


@dataclass(frozen=True)
class StepStart:
    """What :meth:`StepPort.begin_step` did in its one transaction: the ids of the messages it
    appended (a held completion's first) and, when the pressure check settled the step (nothing
    to compact), its outcome, the request measured for the route and the recorded request's id.
    ``outcome is None``: compaction is needed; only the intake (and the completion) was committed."""

    ids: list[int] = field(default_factory=list)
    outcome: Outcome | None = None
    measured: Measured | None = None
    request_id: int | None = None


class StepPort(Protocol):
    """What the driver needs of a thread (``svc.steps``, :class:`engine.service.StepsFacet`, has all of it)."""

    def begin_step(self, key: str, run: RunState, *, provider: str, model: str, step: int,
                   messages: Sequence[Message] = (), record: bool = True, completion: Completion | None = None) -> StepStart: ...

    def compact_for_pressure(self, key: str, run: RunState, *, running_turn: bool = True) -> Outcome: ...

    def measure(self, key: str, *, ephemeral: Sequence[Message] = (), provider: str | None = None, model: str | None = None) -> Measured: ...

    def record_model_request(self, key: str, *, provider: str, model: str, run_id: int | None = None, step: int = 0,
                             estimated_tokens: int | None = None, threshold: int | None = None) -> int: ...

    def finish_step(self, key: str, request_id: int | None, *, outcome: str, reported_prompt_tokens: int | None = None,
                    reported_completion_tokens: int | None = None, error_code: str | None = None, error_message: str | None = None,
                    messages: Sequence[Message] = (), run_id: int | None = None, event: Event | None = None,
                    trigger: str | None = None) -> list[int]: ...

    def add_event(self, key: str, event: Event, *, trigger: str | None = None, run_id: int | None = None) -> int: ...

    def recover_overflow(self, key: str, run: RunState, *, provider: str | None = None, model: str | None = None) -> Outcome: ...

    def policy_for(self, provider: str | None, model: str | None) -> ResolvedPolicy: ...


@dataclass
class Call:
    """One model call in flight: the measured request, its recorded id (None when not recorded), the
    step number, and the pressure check's outcome.

    A write-behind call (``StepDriver(behind=True)``, see :meth:`StepDriver.prepare`) is sent before
    its step's transaction ran: ``projected`` is the surface it sends (the last one and the new
    messages after it), ``measured`` the last exact measurement until the writer's transaction
    replaces it with this step's, and ``request_id`` None until that transaction recorded it."""

    measured: Measured
    request_id: int | None
    step: int
    outcome: Outcome | None = None
    projected: Surface | None = None

    @property
    def tokens(self) -> int:
        return self.measured.tokens

    @property
    def surface(self) -> Surface:
        """The surface this call sends."""
        return self.projected if self.projected is not None else self.measured.envelope.surface

    @property
    def envelope(self) -> Envelope:
        """The whole request this call sends: the thread's system prompt and tools around :attr:`surface`."""
        env = self.measured.envelope
        return env if self.projected is None else replace(env, surface=self.projected)


@dataclass
class _Ahead:
    """What a write-behind step (:meth:`StepDriver.prepare`) decides from without the store: the
    last surface sent (its message objects, which the next one extends), the last exact
    measurement of the thread (the writer's transaction) and its tokens, and the threshold."""

    surface: Surface
    measured: Measured
    tokens: int
    threshold: int


@dataclass
class _Job:
    """One write-behind step's transaction, for the writer: :meth:`StepPort.begin_step` of
    ``messages`` after ``completion``, for the ``call`` already sent, which was decided on the
    request having at most ``bound`` tokens."""

    run: RunState
    call: Call
    messages: tuple[Message, ...]
    completion: Completion | None
    bound: int


@dataclass(frozen=True)
class Failure:
    """What a failed call means: ``retry`` (the surface changed: send a new call), else the caller
    raises the original error. ``error`` is it as classified (None: not a provider error);
    ``reason`` why no retry (``not_overflow``, ``retries_exhausted``, ``no_progress``,
    ``recovery_failed``, ``cancelled``; None for an error that is not a provider's)."""

    retry: bool
    error: ProviderError | None
    reason: str | None = None


@dataclass
class StepDriver:
    """Model steps on one thread of a :class:`StepPort` for one route (see the module docstring).

    Blocking: every method does store (and maybe summarizer) work; async callers run them in a
    worker thread. ``record=False`` records no model requests (what-if records its own);
    ``pressure_failures=False`` raises a failing pressure compaction instead of recording it
    (§2.9 records it and goes on; a what-if replay that cannot compact says so). ``hold=SECONDS``
    keeps a succeeded call's write (:attr:`held`) for the next step's transaction, at most that
    long (see the module docstring); the caller then calls :meth:`flush` before it ends or
    abandons the run."""

    port: StepPort
    key: str
    provider: str
    model: str
    max_overflow_retries: int | None = None
    record: bool = True
    pressure_failures: bool = True
    #: a recovery episode is open: the last failed step was retried after a recovery
    recovering: bool = False
    #: keep a succeeded call's write for the next step's transaction, at most this many seconds (None: write it at once)
    hold: float | None = None
    #: the succeeded call's write not yet in the store (``hold``): the next :meth:`prepare`, :meth:`flush` or the
    #: background writer once ``hold`` seconds passed writes it
    held: Completion | None = None
    #: guards :attr:`held` against the background writer (held by it while it writes)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: when :attr:`held` is due for the background writer: ``hold`` seconds after it was last held
    _held_due: float = field(default=0.0, repr=False, compare=False)
    #: when the background writer comes to look at this driver (None: it is not to come; see :class:`_Writer`)
    _queued: float | None = field(default=None, repr=False, compare=False)
    #: write-behind (with ``hold``): a step that the thread's last exact measurement and an upper
    #: bound of its new messages show below the threshold is sent at once, its transaction run by
    #: the background writer during the model call (see :meth:`prepare`)
    behind: bool = False
    #: what a write-behind step decides from (None: the next step goes through the store first)
    _ahead: _Ahead | None = field(default=None, repr=False, compare=False)
    #: write-behind transactions not run yet, in order (the writer runs them; a sync point, :meth:`settle`, too)
    _jobs: deque[_Job] = field(default_factory=deque, repr=False, compare=False)
    #: one of them is running (on the writer or the caller's thread)
    _working: bool = field(default=False, repr=False, compare=False)
    #: guards :attr:`_ahead`, :attr:`_jobs`, :attr:`_working` and :attr:`_failed` (waited on by :meth:`settle`)
    _jobs_cond: threading.Condition = field(default_factory=threading.Condition, repr=False, compare=False)
    #: the first failed write-behind transaction's error and the jobs it and those after it were to write
    _failed: tuple[BaseException, list[_Job]] | None = field(default=None, repr=False, compare=False)

    # -- before the call ------------------------------------------------------------------------
    def prepare(self, run: RunState, step: int, *, messages: Sequence[Message] = (), running_turn: bool = True) -> Call:
        """Intake of ``messages``, pressure compaction, the measured request for this route and its
        record (one transaction when nothing needs compacting).

        Write-behind (``behind``, with ``hold``): when the last exact measurement of the thread
        plus the new messages (the held reply's and ``messages``; every tool call among them
        answered among them) stays below the threshold — told by an upper bound that encodes
        nothing (:meth:`engine.core.meter.TokenMeter.bound_messages`), or near the threshold by
        their exact count (which the transaction then finds in the meter's cache) — nothing is
        read or written here (:meth:`prepare_behind`): the call sends the last surface with the new
        messages after it (:attr:`Call.projected`, what the store's surface will be), and that same
        one transaction (intake, pressure check, request record) runs on the background writer
        while the model answers. The writer checks that the store's surface is the one sent and its
        count within what the step was decided on; when not (another writer moved the thread) it
        still records the request, and the next step goes through the store first. A failed
        write-behind transaction is raised by the next step (or :meth:`flush`), its messages held
        again so nothing is lost. A step that comes while the last one's transaction is still being
        written waits for it and is then decided as above. Anything else (a step at the threshold, notes, a recovery, a
        driver's first step) goes through the store first, after the queued transaction."""
        if self.behind and self.hold is not None:
            ahead = self.prepare_behind(run, step, messages=messages)
            if ahead is None and self._pending():  # the last step's transaction not written yet (the writer shares
                self.settle()  # the interpreter lock with the framework's threads): written, it is decided again
                ahead = self.prepare_behind(run, step, messages=messages)
            if ahead is not None:
                return ahead
            self.settle()
            self.forget()
        call = self._prepare(run, step, messages=messages, running_turn=running_turn)
        if self.behind and self.hold is not None:
            self._remember(call.measured, run)
        return call

    def _prepare(self, run: RunState, step: int, *, messages: Sequence[Message] = (), running_turn: bool = True) -> Call:
        port = self.port
        if self.held is None:  # (only this caller's thread sets it)
            start = port.begin_step(self.key, run, provider=self.provider, model=self.model, step=step, messages=messages, record=self.record)
        else:  # the previous call's usage and reply, first in this transaction (held again if it fails)
            with self._lock:  # waits for the background writer if it is writing it now
                held, self.held = self.held.resolved(), None  # (a write-behind call's request: recorded, settled before this)
            try:
                start = port.begin_step(self.key, run, provider=self.provider, model=self.model, step=step, messages=messages,
                                        record=self.record, completion=held)
            except BaseException:
                with self._lock:
                    self.held = self.held or held
                raise
        if start.outcome is not None and start.measured is not None:
            return Call(start.measured, start.request_id, step, start.outcome)
        try:
            outcome: Outcome | None = port.compact_for_pressure(self.key, run, running_turn=running_turn)
        except Exception as exc:
            if not self.pressure_failures:
                raise
            log.warning("pressure compaction failed on thread %r; continuing", self.key, exc_info=True)
            port.add_event(self.key, PressureFailedEvent(step=step, error_message=describe(exc)), trigger="pressure", run_id=run.run_id)
            outcome = None
        m = outcome.measured if outcome is not None else None
        if m is None or (m.policy.provider, m.policy.model) != (self.provider, self.model):
            m = port.measure(self.key, ephemeral=run.ephemeral, provider=self.provider, model=self.model)
        request_id = None
        if self.record:
            request_id = port.record_model_request(self.key, provider=self.provider, model=self.model, run_id=run.run_id, step=step,
                                                   estimated_tokens=m.tokens, threshold=m.policy.threshold)
        return Call(m, request_id, step, outcome)

    # -- write-behind ----------------------------------------------------------------------------
    def prepare_behind(self, run: RunState, step: int, *, messages: Sequence[Message] = ()) -> Call | None:
        """:meth:`prepare` when it is a write-behind step (it then never blocks): the call, its
        transaction queued for the writer; None when the step must go through the store first
        (nothing done: call :meth:`prepare`) — an async caller then needs no worker thread."""
        ahead = self._ahead
        if not self.behind or self.hold is None or ahead is None or run.ephemeral or self.recovering or self._failed is not None:
            return None
        m = ahead.measured
        if (m.policy.provider, m.policy.model) != (self.provider, self.model):
            return None
        if not self._lock.acquire(blocking=False):  # the writer is writing the held reply now: through the store, after it
            return None
        try:  # the held reply goes with this step's transaction, first (as prepare's)
            held = self.held
            new = (*held.messages, *messages) if held is not None else tuple(messages)
            if not _answered(new):
                return None
            with self._jobs_cond:
                if ahead is not self._ahead or self._jobs or self._working:
                    return None  # (the last one's transaction not written yet: settled first, so its failure is raised here)
            bound = m.meter.bound_messages(new)  # no encoding: enough far below the threshold
            if ahead.tokens + bound >= ahead.threshold:  # near it: their exact count (cached: the transaction counts them again)
                bound = sum(m.meter.count_messages(new))
            with self._jobs_cond:
                if ahead is not self._ahead or ahead.tokens + bound >= ahead.threshold:
                    return None
                last = ahead.surface
                projected = Surface(messages=(*last.messages, *new), summary=last.summary, boundary=last.boundary, generation=last.generation)
                call = Call(m, None, step, None, projected)
                self._jobs.append(_Job(run, call, tuple(messages), held, ahead.tokens + bound))
                ahead.surface = projected
            self.held = None
        finally:
            self._lock.release()
        _WRITER.schedule(self, time.monotonic())
        return call

    def _pending(self) -> bool:
        """A write-behind transaction is queued or running."""
        with self._jobs_cond:
            return bool(self._jobs) or self._working

    def _remember(self, m: Measured, run: RunState) -> None:
        """What the next write-behind step decides from: ``m``, the measurement of the call just prepared."""
        ahead = None
        if not run.ephemeral and (m.policy.provider, m.policy.model) == (self.provider, self.model):
            surface = m.envelope.surface
            if any(x.role != "system" for x in surface.messages):  # (else a synthetic user message would come first)
                ahead = _Ahead(surface, m, m.tokens, m.policy.threshold)
        with self._jobs_cond:
            self._ahead = ahead

    def forget(self) -> None:
        """The thread changed in a way the last measurement does not know (its configuration, a new
        run, a recovery): the next step goes through the store first."""
        with self._jobs_cond:
            self._ahead = None

    def settle(self) -> None:
        """Run the queued write-behind transactions now (waiting for the one the writer runs). When
        one failed, what it and those after it were to write is held again, in order (the first
        one's request completed with it; the failed calls' own requests were never recorded), and
        its error is raised: the next write (:meth:`flush`, a step) writes the rest."""
        if not self.behind:
            return
        self._work(steal=True)
        with self._jobs_cond:
            failed, self._failed = self._failed, None
        if failed is None:
            return
        exc, jobs = failed
        with self._lock:
            first = jobs[0].completion.resolved() if jobs[0].completion is not None else Completion(None, None, None, run_id=jobs[0].run.run_id)
            lost = [m for j in jobs for m in (*(j.completion.messages if j.completion is not None else ()), *j.messages)]
            held = self.held
            later = held.resolved().messages if held is not None else ()
            self.held = replace(first, messages=(*lost, *later))
        raise exc

    def _work(self, *, steal: bool) -> None:
        """Run the queued write-behind transactions in order: the writer (``steal=False``: it leaves
        them to whoever runs one now), or a caller about to write (waits for that one first)."""
        while True:
            with self._jobs_cond:
                while self._working:
                    if not steal:
                        return
                    self._jobs_cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
                if self._failed is not None:  # after a failed one: written again with it (settle)
                    self._failed[1].append(job)
                    continue
                self._working = True
            try:
                self._run_job(job)
            finally:
                with self._jobs_cond:
                    self._working = False
                    self._jobs_cond.notify_all()

    def _run_job(self, job: _Job) -> None:
        """One write-behind step's transaction (see :meth:`prepare`)."""
        call, run, port = job.call, job.run, self.port
        try:
            start = port.begin_step(self.key, run, provider=self.provider, model=self.model, step=call.step, messages=job.messages,
                                    record=self.record, completion=job.completion.resolved() if job.completion is not None else None)
            m, rid = start.measured, start.request_id
            same = start.outcome is not None and m is not None and call.projected is not None and _same_tail(m.envelope.surface, call.projected,
                                                                                                                 len(job.messages) + len(job.completion.messages if job.completion else ()))
            if start.outcome is None or m is None:  # the store says compact: another writer moved the thread meanwhile
                m = port.measure(self.key, ephemeral=run.ephemeral, provider=self.provider, model=self.model)
                if self.record:
                    rid = port.record_model_request(self.key, provider=self.provider, model=self.model, run_id=run.run_id, step=call.step,
                                                    estimated_tokens=m.tokens, threshold=m.policy.threshold)
        except BaseException as exc:  # noqa: BLE001 - raised by the next step (settle), its writes held again
            log.warning("a step's write on thread %r failed; the next step raises it", self.key, exc_info=True)
            with self._jobs_cond:
                if self._failed is None:
                    self._failed = (exc, [job])
                else:
                    self._failed[1].append(job)
                self._ahead = None
            return
        call.request_id, call.measured = rid, m
        same = same and m.tokens <= job.bound  # (the store's exact count within what the step was decided on)
        with self._jobs_cond:
            ahead = self._ahead
            if ahead is None:
                return
            if same:
                ahead.tokens, ahead.measured, ahead.threshold = m.tokens, m, m.policy.threshold
            else:
                log.warning("thread %r changed under a write-behind step (request %s); the next step reads it first", self.key, rid)
                self._ahead = None

    # -- after the call -------------------------------------------------------------------------
    def succeeded(self, call: Call, run: RunState, *, prompt_tokens: int | None, completion_tokens: int | None,
                  messages: Sequence[Message] = ()) -> list[int]:
        """The call returned: its usage, ``messages`` (the response, when the caller stores it now)
        and, closing an open recovery episode, ``recovered`` — one transaction. Returns the ids.
        With ``hold``, nothing is written now (returns ``[]``): the write is :attr:`held` for the
        next step's transaction (or :meth:`flush`)."""
        event = self._recovered(call, run)
        if self.hold is not None:
            held = Completion(call.request_id, prompt_tokens, completion_tokens, tuple(messages), run.run_id, event,
                              call if call.projected is not None else None)
            with self._lock:
                if self.held is not None:  # a second success without a step between: the first goes now
                    self._flush((), None)
                self.held = held
                due = self._held_due = time.monotonic() + self.hold
            _WRITER.schedule(self, due)
            self.recovering = False
            return []
        ids = self.port.finish_step(self.key, call.request_id, outcome="ok", reported_prompt_tokens=prompt_tokens,
                                    reported_completion_tokens=completion_tokens, messages=messages, run_id=run.run_id,
                                    event=event, trigger="overflow")
        self.recovering = False
        return ids

    def _recovered(self, call: Call, run: RunState) -> RecoveredEvent | None:
        """``recovered``, when this succeeded call closes an open recovery episode."""
        return RecoveredEvent(attempt=run.overflow_attempts, step=call.step, tokens=call.tokens) if self.recovering else None

    def hold_now(self, call: Call, run: RunState, *, prompt_tokens: int | None, completion_tokens: int | None,
                 messages: Sequence[Message] = ()) -> bool:
        """:meth:`succeeded` when it cannot block (``hold``, nothing held yet, the background writer
        not writing): the call's end held, True — an async caller then needs no worker thread for
        it. False: nothing done; call :meth:`succeeded` (which may write)."""
        if self.hold is None or self.held is not None or not self._lock.acquire(blocking=False):
            return False
        try:
            if self.held is not None:
                return False
            event = self._recovered(call, run)
            self.held = Completion(call.request_id, prompt_tokens, completion_tokens, tuple(messages), run.run_id, event,
                                   call if call.projected is not None else None)
            due = self._held_due = time.monotonic() + self.hold
        finally:
            self._lock.release()
        _WRITER.schedule(self, due)
        self.recovering = False
        return True

    def defer_now(self, messages: Sequence[Message], *, run_id: int | None = None) -> bool:
        """:meth:`defer` when it cannot block (``hold``, what is held is this run's or nothing, the
        background writer not writing): True. False: nothing done; call :meth:`defer`."""
        if self.hold is None or not self._lock.acquire(blocking=False):
            return False
        try:
            held = self.held
            if held is not None and held.run_id != run_id:
                return False
            self.held = _with_messages(held, messages, run_id)
            due = self._held_due = time.monotonic() + self.hold
        finally:
            self._lock.release()
        _WRITER.schedule(self, due)
        return True

    def flush(self, messages: Sequence[Message] = (), *, run_id: int | None = None) -> list[int]:
        """Write the :attr:`held` completion, if any, with ``messages`` appended after its own (run
        ``run_id``, default the held call's), in one transaction; just ``messages`` when nothing is
        held. Returns the ids appended. A failed write keeps the completion held."""
        self.settle()
        if self.held is None and not messages:
            return []
        with self._lock:
            return self._flush(messages, run_id)

    def defer(self, messages: Sequence[Message], *, run_id: int | None = None) -> None:
        """With ``hold``: append ``messages`` (run ``run_id``) with the held completion, after its own
        (one is held for them when none is), written as it is (the next step's transaction,
        :meth:`flush`, or the background writer ``hold`` seconds from now); without: now."""
        if self.hold is None:
            self.flush(messages, run_id=run_id)
            return
        with self._lock:
            held = self.held
            if held is not None and held.run_id != run_id:  # another run's: written first, on its own
                self._flush((), None)
                held = None
            self.held = _with_messages(held, messages, run_id)
            due = self._held_due = time.monotonic() + self.hold
        _WRITER.schedule(self, due)

    def _flush(self, messages: Sequence[Message], run_id: int | None) -> list[int]:
        held = self.held.resolved() if self.held is not None else None
        if held is None:
            if not messages:
                return []
            return self.port.finish_step(self.key, None, outcome="ok", messages=messages, run_id=run_id)
        ids = self.port.finish_step(self.key, held.request_id, outcome="ok", reported_prompt_tokens=held.prompt_tokens,
                                    reported_completion_tokens=held.completion_tokens, messages=[*held.messages, *messages],
                                    run_id=held.run_id if run_id is None else run_id, event=held.event, trigger="overflow")
        self.held = None
        return ids

    def _due(self, *, now: bool = False) -> float | None:
        """The background writer, come to look: the held completion written if it was held ``hold``
        seconds (or ``now``: at exit); else when it will have been (the writer comes back then),
        None when nothing is held (a step or a flush wrote it). A failure leaves it held: the next
        step's transaction writes it."""
        with self._jobs_cond:
            if self._jobs or self._working or self._failed is not None:  # a step's write comes first (settle: the caller's)
                return None if self._failed is not None else time.monotonic() + 0.005
        with self._lock:
            if self.held is None:
                return None
            if not now and time.monotonic() < self._held_due:
                return self._held_due
            try:
                self._flush((), None)
            except Exception:  # noqa: BLE001 - still held: the next step or flush writes it
                log.warning("could not write the last call's outcome on thread %r; the next step will", self.key, exc_info=True)
            return None

    def cancelled(self, call: Call, error_code: str, message: str) -> None:
        """The call was cancelled: its request completed as ``cancelled``."""
        self.flush()
        if call.request_id is not None:
            self.port.finish_step(self.key, call.request_id, outcome="cancelled", error_code=error_code, error_message=message)

    def failed(self, call: Call, run: RunState, err: ProviderError | None, *, message: str | None = None,
               cancelled: Callable[[], bool] = lambda: False) -> Failure:
        """The call failed with ``err`` (None: not a provider error; ``message`` describes it).
        Records the outcome and, for a context overflow, recovers (see the module docstring).
        ``cancelled()`` is asked after the error is recorded and after a recovery: True stops there
        (``reason="cancelled"``, no gave-up event: the caller cancels the run)."""
        port = self.port
        self.forget()  # a recovery changes the surface; the next step reads it
        self.flush()  # (nothing is held after a prepare: its transaction wrote it; a write-behind one's is run now)
        if call.request_id is not None:
            port.finish_step(self.key, call.request_id, outcome="error", error_code=err.code if err is not None else None,
                             error_message=err.message if err is not None else message)
        if err is None:
            return Failure(False, None)
        self._provider_error(call, err, run)
        if cancelled():
            return Failure(False, err, "cancelled")
        if not is_context_overflow(err):
            if self.recovering:
                self._gave_up(call, err, run, "not_overflow")
            return Failure(False, err, "not_overflow")
        limit = self.max_overflow_retries
        if limit is None:
            limit = port.policy_for(self.provider, self.model).policy.max_overflow_retries
        if run.overflow_attempts >= limit:
            self._gave_up(call, err, run, "retries_exhausted")
            return Failure(False, err, "retries_exhausted")
        run.overflow_attempts += 1
        crash: Exception | None = None
        try:
            outcome = port.recover_overflow(self.key, run, provider=self.provider, model=self.model)
        except Exception as exc:  # what already landed still counts: generation growth decides (§3.3)
            log.warning("overflow recovery failed on thread %r: %s", self.key, exc, exc_info=exc)
            crash = exc
            now = port.measure(self.key, ephemeral=run.ephemeral, provider=self.provider, model=self.model)
            outcome = Outcome.between("recovery_failed", call.measured, now)
        if cancelled():  # cancellation wins over a finished recovery
            return Failure(False, err, "cancelled")
        if not outcome.progressed:
            reason = "recovery_failed" if crash is not None else "no_progress"
            self._gave_up(call, err, run, reason, outcome=outcome, crash=crash)
            return Failure(False, err, reason)
        retry = RetryEvent(
            attempt=run.overflow_attempts,
            failed_step=call.step,
            next_step=call.step + 1,
            tokens_before=outcome.tokens_before,
            tokens_after=outcome.tokens_after,
            generation_before=outcome.generation_before,
            generation_after=outcome.generation_after,
            summarizer_calls=outcome.summarizer_calls,
            recovery_error=describe(crash) if crash is not None else None,
        )
        port.add_event(self.key, retry, trigger="overflow", run_id=run.run_id)
        self.recovering = True
        return Failure(True, err)

    # -- the whole call -------------------------------------------------------------------------
    def call(self, run: RunState, send: Callable[[Call], T], *, step: Callable[[], int],
             classify: Callable[[BaseException], ProviderError | None], done: Callable[[Call, T], Sequence[Any]],
             messages: Sequence[Message] = ()) -> T:
        """One model call with overflow retries, blocking: ``step()`` numbers each attempt,
        ``send(call)`` makes it, ``done(call, result)`` returns ``(prompt_tokens,
        completion_tokens, messages)`` to record; an error ``classify`` does not make retryable is
        re-raised as is. ``messages`` are taken in with the first attempt. (:meth:`acall` run
        with blocking ``send`` and ``io``: it never suspends.)"""

        async def sent(c: Call) -> T:
            return send(c)

        async def io(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        coro = self.acall(run, sent, step=step, classify=classify, done=done, messages=messages, io=io)
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        coro.close()
        raise RuntimeError("a blocking step suspended")

    async def acall(self, run: RunState, send: Callable[[Call], Awaitable[T]], *, step: Callable[[], int],
                    classify: Callable[[BaseException], ProviderError | None], done: Callable[[Call, T], Sequence[Any]],
                    messages: Sequence[Message] = (), io: Callable[..., Awaitable[Any]]) -> T:
        """:meth:`call` for an async model call; the blocking work runs through ``io(fn, *args,
        **kwargs)`` (``asyncio.to_thread``)."""
        intake = messages
        while True:
            c = await io(self.prepare, run, step(), messages=intake)
            intake = ()
            try:
                result = await send(c)
            except Exception as exc:
                if (await io(self.failed, c, run, classify(exc), message=describe(exc))).retry:
                    continue
                raise
            prompt, completion, out = await io(done, c, result)
            if not self.hold_now(c, run, prompt_tokens=prompt, completion_tokens=completion, messages=out):  # held: no thread needed
                await io(self.succeeded, c, run, prompt_tokens=prompt, completion_tokens=completion, messages=out)
            return result

    # -- events ---------------------------------------------------------------------------------
    def _provider_error(self, call: Call, err: ProviderError, run: RunState) -> None:
        snap = call.measured.snapshot
        event = ProviderErrorEvent(
            error_code=err.code,
            error_message=err.message,
            status=err.status,
            inband=err.inband,
            provider=self.provider,
            model=self.model,
            attempt=run.overflow_attempts + 1,
            step=call.step,
            tokens=call.tokens,
            tokens_before=call.tokens,
            threshold=call.measured.policy.threshold,
            generation=snap.state.generation,
            last_message_id=max((m.id for m in snap.messages if m.id is not None), default=snap.state.boundary),
            ephemeral=tuple(m.content for m in run.ephemeral),  # so the replay shows what was sent
        )
        self.port.add_event(self.key, event, trigger="overflow" if err.code == CONTEXT_WINDOW_EXCEEDED else "provider", run_id=run.run_id)

    def _gave_up(self, call: Call, err: ProviderError, run: RunState, reason: str, *, outcome: Outcome | None = None,
                 crash: Exception | None = None) -> None:
        event = GaveUpEvent(
            reason=reason,
            error_code=err.code,
            error_message=err.message,
            attempt=run.overflow_attempts,
            step=call.step,
            recovery_error=describe(crash) if crash is not None else None,
        )
        if outcome is not None:
            event = replace(
                event,
                tokens_before=outcome.tokens_before,
                tokens_after=outcome.tokens_after,
                generation_before=outcome.generation_before,
                generation_after=outcome.generation_after,
                summarizer_calls=outcome.summarizer_calls,
            )
        self.port.add_event(self.key, event, trigger="overflow", run_id=run.run_id)
        self.recovering = False


def _answered(messages: Sequence[Message]) -> bool:
    """Every tool call among ``messages`` answered among them and every result's call among them:
    appended after a surface, they change nothing before them (no closing marker, no orphan)."""
    calls = {c.id for m in messages for c in m.tool_calls}
    results = [m.tool_call_id for m in messages if m.role == "tool"]
    return len(results) == len(set(results)) == len(calls) and calls.issuperset(results)


def _same_tail(real: Surface, sent: Surface, new: int) -> bool:
    """``real`` (the store's surface after a write-behind step) is ``sent`` (the surface the call
    sent): the same header and length, and its ``new`` last messages the same messages (the ones
    before were checked when they were new)."""
    if (real.summary, real.boundary, real.generation) != (sent.summary, sent.boundary, sent.generation) or len(real.messages) != len(sent.messages):
        return False
    if not new:
        return True
    return all(a is b or (a.role, a.content, a.source_key, a.tool_call_id, a.tool_calls) == (b.role, b.content, b.source_key, b.tool_call_id, b.tool_calls)
               for a, b in zip(real.messages[-new:], sent.messages[-new:]))


def _with_messages(held: Completion | None, messages: Sequence[Message], run_id: int | None) -> Completion:
    """``messages`` (run ``run_id``) appended after what ``held`` appends; a completion of its own
    (no request) when nothing is held."""
    if held is None:
        return Completion(None, None, None, tuple(messages), run_id)
    return replace(held, messages=(*held.messages, *messages))


class _Writer:
    """One daemon thread writing the held completions whose time is up (:attr:`StepDriver.hold`): a
    heap of (time, driver), at most one entry per driver (:attr:`StepDriver._queued`). A driver
    whose completion a step wrote meanwhile, and which holds its next call's since, is put back for
    that one's time: in a steady loop (a model call every few ms) the thread comes once per ``hold``,
    not once per call (each visit takes the interpreter lock, often in the middle of a step)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, StepDriver]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, driver: StepDriver, when: float) -> None:
        """Come to look at ``driver`` at ``when`` (monotonic), unless it is to be looked at earlier."""
        with self._cond:
            queued = driver._queued
            if queued is not None and queued <= when:
                return  # that visit puts it back for its completion's time
            driver._queued = when
            n = next(self._seq)
            heapq.heappush(self._due, (when, n, driver))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=WRITER_THREAD, daemon=True)
                self._thread.start()
            elif self._due[0][1] == n:  # the earliest now: the thread waits for a later one (or none)
                self._cond.notify()

    def _next(self) -> StepDriver:
        """The next driver to look at, once it is time (waiting)."""
        with self._cond:
            while True:
                if not self._due:
                    self._cond.wait()
                    continue
                delay = self._due[0][0] - time.monotonic()
                if delay <= 0:
                    when, _, driver = heapq.heappop(self._due)
                    if driver._queued == when:
                        driver._queued = None
                    return driver
                self._cond.wait(delay)

    def _run(self) -> None:
        while True:
            driver = self._next()
            driver._work(steal=False)
            again = driver._due()
            if again is not None:
                self.schedule(driver, again)
            del driver

    def drain(self) -> None:
        """At exit: write what is still held now (best effort: a store already closed loses it, as a crash would)."""
        with self._cond:
            due, self._due = self._due, []
            for _, _, driver in due:
                driver._queued = None
        for _, _, driver in due:
            driver._work(steal=True)
            driver._due(now=True)


_WRITER = _Writer()
atexit.register(_WRITER.drain)


def describe(exc: BaseException) -> str:
    """A failure in one line for an event: its type and message."""
    return f"{type(exc).__name__}: {exc}"
