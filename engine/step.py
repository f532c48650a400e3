"""One model step on a thread: the one driver the harness, the adapters and what-if run on.

A step, written once here:

1. **intake** of the messages that are new (a message whose ``source_key`` the thread already
   holds is skipped by the database's unique key), the **pressure check** and the **request
   record**, in ONE transaction when the thread is below its threshold (the hot path:
   :meth:`StepPort.begin_step`);
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
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Protocol, Sequence, TypeVar

from .compaction.compactor import Measured, Outcome, RunState
from .core.events import Event, GaveUpEvent, PressureFailedEvent, ProviderErrorEvent, RecoveredEvent, RetryEvent
from .core.messages import Message
from .core.policy import ResolvedPolicy
from .core.surface import SYNTHETIC_USER_TEXT
from .llm.errors import CONTEXT_WINDOW_EXCEEDED, ProviderError, is_context_overflow

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["SYNTHETIC_USER_TEXT", "Call", "Completion", "Failure", "StepDriver", "StepPort", "StepStart", "describe"]


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
    step number, and the pressure check's outcome."""

    measured: Measured
    request_id: int | None
    step: int
    outcome: Outcome | None = None

    @property
    def tokens(self) -> int:
        return self.measured.tokens


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

    # -- before the call ------------------------------------------------------------------------
    def prepare(self, run: RunState, step: int, *, messages: Sequence[Message] = (), running_turn: bool = True) -> Call:
        """Intake of ``messages``, pressure compaction, the measured request for this route and its
        record (one transaction when nothing needs compacting)."""
        port = self.port
        if self.held is None:  # (only this caller's thread sets it)
            start = port.begin_step(self.key, run, provider=self.provider, model=self.model, step=step, messages=messages, record=self.record)
        else:  # the previous call's usage and reply, first in this transaction (held again if it fails)
            with self._lock:  # waits for the background writer if it is writing it now
                held, self.held = self.held, None
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

    # -- after the call -------------------------------------------------------------------------
    def succeeded(self, call: Call, run: RunState, *, prompt_tokens: int | None, completion_tokens: int | None,
                  messages: Sequence[Message] = ()) -> list[int]:
        """The call returned: its usage, ``messages`` (the response, when the caller stores it now)
        and, closing an open recovery episode, ``recovered`` — one transaction. Returns the ids.
        With ``hold``, nothing is written now (returns ``[]``): the write is :attr:`held` for the
        next step's transaction (or :meth:`flush`)."""
        event = self._recovered(call, run)
        if self.hold is not None:
            held = Completion(call.request_id, prompt_tokens, completion_tokens, tuple(messages), run.run_id, event)
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
            self.held = Completion(call.request_id, prompt_tokens, completion_tokens, tuple(messages), run.run_id, event)
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
        held = self.held
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
        self.flush()  # (nothing is held after a prepare: its transaction wrote it)
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
                self._thread = threading.Thread(target=self._run, name="step-held-writer", daemon=True)
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
            driver._due(now=True)


_WRITER = _Writer()
atexit.register(_WRITER.drain)


def describe(exc: BaseException) -> str:
    """A failure in one line for an event: its type and message."""
    return f"{type(exc).__name__}: {exc}"
