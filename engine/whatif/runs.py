"""What-if runs: the replay driver (:class:`EngineReplay`), the recorded run and the candidate runs in
a scratch copy (:func:`run_whatif`, :func:`run_sweep`); see :mod:`engine.whatif`."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ..compaction.compactor import Compactor, Measured, Outcome, RunState
from ..compaction.pruning import without_prune_specifics
from ..compaction.summarizers.protocol import Summarizer
from ..core.errors import Cancelled
from ..core.events import Event, EventKind
from ..core.messages import Message
from ..core.meter import TokenMeter, default_meter
from ..core.policy import PolicySet, ResolvedPolicy
from ..core.units import is_closing_marker, is_request, starts_turn
from ..core.workdir import Workdir
from ..snapshots import SnapshotCache
from ..step import Completion, StepDriver, StepStart
from ..store import Store
from ..store.db import code_head
from ..store.reads import thread_reading
from .dropped import recorded_dropped
from .results import WhatIfComparison, WhatIfPoint, WhatIfRun, WhatIfSweep
from .settings import (
    WhatIfSettingError,
    WhatIfSummarizerFailed,
    _policy_settings,
    _resolve_source,
    _source_thread,
    _Thread,
    candidate_policy,
    make_summarizer,
    parse_settings,
    validate_values,
)

Progress = Callable[[int, int], None]
ShouldStop = Callable[[], bool]

#: messages read from the source at a time (keyset pages: memory stays bounded)
PAGE = 1000
#: the scratch thread's key
SCRATCH_KEY = "whatif"
#: route of the scratch thread when the source has none (the meter's default encoding)
FALLBACK_ROUTE = ("whatif", "unknown")


# -- the replay driver ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayStep:
    """One model request of a replay: what the pressure path did and the envelope's size as sent.

    ``measured`` (with ``outcome``) is the pressure path's own measurement; both are ``None`` for a
    step the replay knew to be below the threshold without asking the database (see
    :class:`EngineReplay`), whose ``tokens`` is then the tally's sum."""

    index: int
    outcome: Outcome | None
    measured: Measured | None
    tokens: int
    #: generations the pressure path added before this request (prunes + summaries)
    compactions: int
    summarizer_calls: int
    #: the current request verbatim in the envelope (None: there is none)
    request_kept: bool | None


class EngineReplay:
    """Feeds messages into a thread of ``store`` as the harness produces them, running the engine's
    pressure path before each model request. The thread must exist (empty).

    Before a model request the pressure path measures the envelope and, below the threshold,
    returns without writing anything (``below_threshold``). The replay knows that outcome in
    advance: the envelope is the last measurement plus, for each message appended since, the
    meter's count of it — the per-message sum the incremental tally of :mod:`engine.snapshots`
    makes (no compaction happened since, so nothing else changed; ephemeral notes are the run's
    and none are added here). While that sum stays below the threshold the step costs no database
    work; the messages are written (one ``take_in``, the step's intake, through the write door, which checks the
    conversation invariants and stores each message's count from the meter's cache, where
    :meth:`add` put it: ``bulk_append``, the import path, counts every message again) and the real pressure path runs (``Compactor.pressure`` over the
    :class:`SnapshotCache`, what ``Service.steps.compact_for_pressure`` calls) at the first step whose sum
    reaches it, and also when a closing marker arrives (the surface may leave one out) or before
    the first measurement. Each real check compares its measurement with the sum; a difference
    (which would mean the sum missed something) switches the rest of the replay to a real check at
    every step and is counted in ``mismatches``. ``every_step=True`` (implied by
    ``record_requests``) makes every check real, the harness's exact sequence of reads.

    Only what the pressure path reads is written: the messages, and one completed model request
    (the first), which routes the thread (``Compactor.pressure`` reads only the newest completed
    request, for its route); ``record_requests=True`` records every request as the harness does
    (estimate, threshold, outcome ``ok``) in the transaction of the messages after it. Each
    request of the user starts a new in-memory :class:`RunState` (ephemeral notes, the breaker), as
    each harness run has its own; no run rows are written, as nothing reads them here."""

    def __init__(self, store: Store, key: str, *, compactor: Compactor, snapshots: SnapshotCache, route: tuple[str, str],
                 record_requests: bool = False, every_step: bool = False) -> None:
        self.store = store
        self.key = key
        self.compactor = compactor
        self.snapshots = snapshots
        self.route = route
        self.record_requests = record_requests
        self.every_step = every_step or record_requests
        self.run = RunState()
        self.steps = 0
        #: real pressure checks made, and those whose measurement differed from the tally's sum
        self.checks = 0
        self.mismatches = 0
        self._new_run = False
        self._routed = False
        self._pending: tuple[int, int] | None = None  # (estimated tokens, threshold) of the request to record
        self._buffer: list[Message] = []
        # the prediction: the last real measurement, and what was appended since
        self._last: Measured | None = None
        self._threshold = 0  # the last measurement's threshold (``policy.threshold`` computes it on every read)
        self._sum = 0
        self._blocked = True
        self._request_since = False
        self._kept: bool | None = None
        #: the step driver, on this scratch thread: no fast path (the replay predicts below-threshold
        #: steps itself), requests recorded by :meth:`flush`, a failing pressure check raised
        self.driver = StepDriver(_ReplayPort(compactor, snapshots), key, provider=route[0], model=route[1], record=False,
                                 pressure_failures=False)

    def add(self, message: Message) -> None:
        """A message the recorded agent produced or received (persisted with the next flush)."""
        if starts_turn(message):  # the user's message opens a new run (Service.runs.start_run)
            self._new_run = True
        m = _unsaved(message) if message.id is not None else message
        self._buffer.append(m)
        if self._last is not None and not self._blocked:
            if is_closing_marker(m):
                self._blocked = True
            else:
                self._sum += self._last.meter.count_message(m)
                self._request_since = self._request_since or is_request(m)

    def flush(self) -> None:
        """Write the buffered messages (and the pending request record) in one transaction."""
        if not self._buffer and self._pending is None:
            return
        provider, model = self.route
        with self.store.locked(self.key) as tx:
            if self._pending is not None:
                tokens, threshold = self._pending
                rid = tx.record_model_request(provider=provider, model=model, step=self.steps, estimated_tokens=tokens, threshold=threshold)
                tx.complete_model_request(rid, outcome="ok")
                self._pending = None
                self._routed = True
            if self._buffer:  # the step's intake (multi-row INSERTs); a fresh scratch thread holds none of them yet
                tx.take_in(self._buffer)
        self._buffer = []

    def step(self) -> ReplayStep:
        """A model request now: pressure compaction (when it can act), the envelope's size as sent."""
        if self._new_run:
            self.run, self._new_run = RunState(), False
        last = self._last
        if not self.every_step and last is not None and not self._blocked and self._routed_or_pending() and self._sum < self._threshold:
            kept = True if self._request_since else self._kept
            step = ReplayStep(self.steps, None, None, self._sum, 0, 0, kept)
            self.steps += 1
            return step
        predicted = self._sum if last is not None and not self._blocked else None
        self.flush()
        call = self.driver.prepare(self.run, self.steps)  # the harness's and the adapters' step (engine.step)
        outcome, m = call.outcome, call.measured
        assert outcome is not None  # pressure failures are raised here, not recorded
        self.checks += 1
        if predicted is not None and outcome.measured is not None and outcome.tokens_before != predicted:
            self.mismatches += 1
            self.every_step = True  # the sum missed something: ask the database at every step from now on
        if self.record_requests or not self._routed:
            self._pending = (m.tokens, m.policy.threshold)
        kept = request_kept(m)
        self._last, self._sum, self._request_since, self._kept = m, m.tokens, False, kept
        self._threshold = m.policy.threshold
        # the sum is exact only while the surface has a first non-system message (else appending
        # one changes the synthetic user message) and carries no ephemeral note
        self._blocked = self.run.ephemeral != [] or not any(x.role != "system" for x in m.surface.messages)
        step = ReplayStep(self.steps, outcome, m, m.tokens, max(0, outcome.generation_after - outcome.generation_before),
                          outcome.summarizer_calls, kept)
        self.steps += 1
        return step

    def _routed_or_pending(self) -> bool:
        return self._routed or self._pending is not None

    def finish(self) -> None:
        """Write what is still buffered."""
        self.flush()


#: (slot setter, field name) of every field of :class:`Message` but ``id``, and the setter of ``id``
_COPIED: tuple[tuple[Callable[[Message, Any], None], str], ...] = tuple(
    (Message.__dict__[f.name].__set__, f.name) for f in fields(Message) if f.name != "id")
_set_id: Callable[[Message, Any], None] = Message.__dict__["id"].__set__


def _unsaved(message: Message) -> Message:
    """``replace(message, id=None)``, the same message, without ``dataclasses.replace``'s cost: a
    copy of every field (the message was checked when it was made, and ``id`` is not checked),
    ~10 times cheaper on the 100,000 messages of a big what-if."""
    copy = object.__new__(Message)
    for set_field, name in _COPIED:
        set_field(copy, getattr(message, name))
    _set_id(copy, None)
    return copy


class _ReplayPort:
    """What :class:`engine.step.StepDriver` needs of the scratch thread for a pressure step: the
    compactor's pressure path and measurement over the replay's snapshot cache (what
    ``Service.steps.compact_for_pressure`` / ``Service.steps.measure`` call), no one-transaction fast path.

    The replay's driver records nothing (``record=False``) and raises a failing pressure check
    (``pressure_failures=False``), and the replay never reports a call's end: the port's writing
    methods are never reached, and refuse with an error saying so if they ever are."""

    def __init__(self, compactor: Compactor, snapshots: SnapshotCache) -> None:
        self.compactor = compactor
        self.snapshots = snapshots

    def begin_step(self, key: str, run: RunState, *, provider: str, model: str, step: int,
                   messages: Sequence[Message] = (), record: bool = True, completion: Completion | None = None) -> StepStart:
        if completion is not None:
            raise _unreachable("complete a model call")
        return StepStart()

    def compact_for_pressure(self, key: str, run: RunState, *, running_turn: bool = True) -> Outcome:
        return self.compactor.pressure(key, run, running_turn=running_turn)

    def measure(self, key: str, *, ephemeral: Sequence[Message] = (), provider: str | None = None, model: str | None = None) -> Measured:
        return self.compactor.measure(self.snapshots.snapshot(key, with_busy=True), ephemeral=ephemeral, provider=provider, model=model)

    def policy_for(self, provider: str | None, model: str | None) -> ResolvedPolicy:
        return self.compactor.policies.resolve(provider, model)

    def record_model_request(self, key: str, *, provider: str, model: str, run_id: int | None = None, step: int = 0,
                             estimated_tokens: int | None = None, threshold: int | None = None) -> int:
        raise _unreachable("record a model request")

    def finish_step(self, key: str, request_id: int | None, *, outcome: str, reported_prompt_tokens: int | None = None,
                    reported_completion_tokens: int | None = None, error_code: str | None = None, error_message: str | None = None,
                    messages: Sequence[Message] = (), run_id: int | None = None, event: Event | None = None,
                    trigger: str | None = None) -> list[int]:
        raise _unreachable("finish a model call")

    def add_event(self, key: str, event: Event, *, trigger: str | None = None, run_id: int | None = None) -> int:
        raise _unreachable(f"record a {event.kind} event")

    def recover_overflow(self, key: str, run: RunState, *, provider: str | None = None, model: str | None = None) -> Outcome:
        raise _unreachable("recover from a context overflow")


def _unreachable(what: str) -> RuntimeError:
    return RuntimeError(f"the what-if replay does not {what}: its step driver records nothing and makes no model calls")


def request_kept(m: Measured) -> bool | None:
    """Was the current request verbatim in the envelope: the message itself on the surface (a user
    message is never pruned), or its text inside the summary? None when there is none."""
    snap = m.snapshot
    req = snap.current_request
    if req is None or not is_request(req):
        return None
    boundary = snap.state.boundary
    if boundary is None or (req.id is not None and req.id > boundary):
        return True
    return bool(snap.state.summary) and req.content in (snap.state.summary or "")


# -- the source's steps ----------------------------------------------------------------------------


def _source_messages(source: Store, key: str, meter: TokenMeter | None = None) -> Iterator[Message]:
    """The thread's messages in id order, in keyset pages of :data:`PAGE`, each page in one read
    transaction (``ThreadReader.messages_after``: the messages alone, not a timeline page's
    offload and creation time). With ``meter``, each page is read with the counts the source kept
    for its messages under ``meter.count_key`` (``ThreadReader.messages_with_counts_after``, the
    same statement), handed to the meter (:func:`_remember_counts`): replaying them encodes none
    of them again."""
    remember = getattr(meter, "remember", None) if meter is not None else None
    after: int | None = None
    while True:
        with thread_reading(source, key) as reader:
            if remember is None or meter is None:
                page = reader.messages_after(after, limit=PAGE)
            else:
                counted = reader.messages_with_counts_after(after, key=meter.count_key, limit=PAGE)
                page = [m for m, _ in counted]
                _remember_counts(remember, counted)
        if not page:
            return
        yield from page
        after = page[-1].id


def _remember_counts(remember: Callable[[Sequence[Message], Sequence[int]], None], counted: Sequence[tuple[Message, int | None]]) -> None:
    """Hand the meter the counts the source kept (``TokenMeter.remember``, when this meter has
    it): the write door stored the meter's own count of each message, so the replay's sums, the
    scratch door's counts and the compactor's reads answer from the meter's cache. A message
    without a kept count (pruned in the source, written before counts were kept, another
    encoding) is counted as before."""
    known = [m for m, n in counted if n is not None]
    if known:
        remember(known, [n for _, n in counted if n is not None])


def _requests(source: Store, key: str) -> Iterator[Any]:
    after: int | None = None
    while True:
        page = source.model_requests(key, after_id=after, limit=PAGE)
        if not page:
            return
        yield from page
        after = page[-1].id


def _response_ends(source: Store, key: str) -> tuple[frozenset[int], int | None]:
    """Message ids that end an imported response (its recorded usage), and the largest one."""
    ends = {r.message_id for r in _requests(source, key) if r.origin == "imported" and r.message_id is not None}
    return frozenset(ends), (max(ends) if ends else None)


#: a sweep keeps the source's messages in memory (read once for all its runs) up to this many
HELD_MESSAGES = 20_000


class _SourceView:
    """What every run of a what-if reads of the source thread: its system prompt and tool schemas,
    the ends of its recorded responses, and its messages in order. ``hold=True`` (a sweep of a
    thread of at most :data:`HELD_MESSAGES`) reads the messages once and keeps them for every run;
    else each run reads them again in keyset pages (memory stays bounded)."""

    def __init__(self, source: Store, key: str, *, hold: bool, meter: TokenMeter | None = None) -> None:
        self.source, self.key = source, key
        self.system_prompt, self.tools, _, _ = source.conversation_config(key)
        self.ends, self.last_end = _response_ends(source, key)
        #: the scratch thread's meter, handed the counts the source kept (see :func:`_remember_counts`)
        self.meter = meter
        self._held: list[Message] | None = list(_source_messages(source, key, meter)) if hold else None

    def messages(self) -> Iterator[Message]:
        return iter(self._held) if self._held is not None else _source_messages(self.source, self.key, self.meter)


class _StepRule:
    """Decides, message by message, where the recorded agent called the model."""

    def __init__(self, ends: frozenset[int], last_end: int | None) -> None:
        self.ends, self.last_end = ends, last_end
        self.armed = True

    def before(self, m: Message) -> bool:
        if m.role != "assistant":
            fire = False
        elif self.last_end is None or (m.id is not None and m.id > self.last_end):
            fire = True
        else:
            fire = self.armed
            self.armed = False
        if m.id is not None and m.id in self.ends:
            self.armed = True
        return fire


# -- runs ------------------------------------------------------------------------------------------


class _Stats:
    def __init__(self, window: int) -> None:
        self.window = window
        self.points: list[WhatIfPoint] = []
        self.tokens = 0
        self.peak = 0.0
        self.over = 0
        self.calls = 0
        self.lost = 0
        self.known_kept = 0

    def add(self, tokens: int, *, compactions: int = 0, calls: int = 0, kept: bool | None = None) -> None:
        pressure = tokens / self.window if self.window else 0.0
        self.points.append(WhatIfPoint(len(self.points), tokens, pressure, compactions, calls, kept))
        self.tokens += tokens
        self.peak = max(self.peak, pressure)
        self.over += tokens > self.window
        self.calls += calls
        if kept is not None:
            self.known_kept += 1
            self.lost += not kept

    def run(self, label: str, settings: Mapping[str, Any], *, compactions: Mapping[str, int], calls: int, dropped: int | None,
            started: float, kept_known: bool, note: str | None = None) -> WhatIfRun:
        n = len(self.points)
        return WhatIfRun(
            label=label,
            settings=dict(settings),
            requests=n,
            compactions=sum(compactions.values()),
            summarizer_calls=calls,
            peak_pressure=self.peak,
            mean_pressure=(self.tokens / n / self.window) if n and self.window else 0.0,
            prompt_tokens=self.tokens,
            steps_over_window=self.over,
            specifics_dropped=dropped,
            request_kept=(self.lost == 0 if self.known_kept else None) if kept_known else None,
            duration_ms=(time.perf_counter() - started) * 1000,
            by_kind=dict(sorted(compactions.items())),
            requests_without_request=self.lost if kept_known else None,
            context_window=self.window,
            points=tuple(self.points),
            note=note,
        )


def _summary_figures(store: Store, key: str) -> tuple[int, int | None]:
    """(summarizer calls, specifics dropped) from the thread's summary events: ``calls`` of the
    summaries and of the rejected ones; ``dropped_specifics`` summed where recorded (None when
    no summary recorded it)."""
    calls = 0
    dropped: int | None = None
    summaries = 0
    after: int | None = None
    kinds = [EventKind.SUMMARY.value, EventKind.SUMMARY_REJECTED.value]
    while True:
        page = store.events(key, after_id=after, limit=PAGE, kinds=kinds)
        if not page:
            break
        for e in page:
            data = e.data if isinstance(e.data, Mapping) else {}
            c = data.get("calls")
            calls += c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else (1 if e.kind == EventKind.SUMMARY.value else 0)
            if e.kind == EventKind.SUMMARY.value:
                summaries += 1
                d = data.get("dropped_specifics")
                if isinstance(d, int) and not isinstance(d, bool) and d >= 0:
                    dropped = (dropped or 0) + d
        after = page[-1].id
    return calls, (0 if summaries == 0 else dropped)


def _last_failure(store: Store) -> str:
    """The error the newest rejected summary of the scratch thread recorded, in words."""
    events = store.events(SCRATCH_KEY, limit=PAGE, kinds=[EventKind.SUMMARY_REJECTED.value])
    data = events[-1].data if events and isinstance(events[-1].data, Mapping) else {}
    message, code = data.get("error_message"), data.get("error_code")
    return str(message or code or "no detail recorded")


def _history_kinds(store: Store, key: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    after: int | None = None
    while True:
        page = store.history(key, after_id=after, limit=PAGE)
        if not page:
            return counts
        for h in page:
            counts[h.kind] = counts.get(h.kind, 0) + 1
        after = page[-1].id


def recorded_run(source: Store, key: str, *, policies: PolicySet, thread: _Thread | None = None) -> WhatIfRun:
    """The figures of what actually happened on thread ``key`` (read only): one point per recorded
    model request (our estimate of what was sent; for an imported request the prompt size the
    source reported), compactions from the compaction history (plus, for an imported thread, the
    compactions the source recorded), summarizer calls and dropped specifics from the events."""
    started = time.perf_counter()
    t = thread or _source_thread(source, key)
    policy = _resolve_source(policies, t)
    stats = _Stats(policy.context_window)
    for r in _requests(source, key):
        tokens = r.reported_prompt_tokens if r.origin == "imported" else (r.estimated_tokens if r.estimated_tokens is not None else r.reported_prompt_tokens)
        if tokens is None:
            continue
        stats.add(int(tokens))
    kinds = _history_kinds(source, key)
    calls, dropped = _summary_figures(source, key)
    notes = []
    source_compactions = source.source_compactions(key) if t.source_format else []
    for c in source_compactions:
        name = f"source {c.kind}"
        kinds[name] = kinds.get(name, 0) + 1
        calls += c.kind == "summary"
    if source_compactions:  # the source recorded none: the history's count (the before/after view's)
        dropped = recorded_dropped(source, key)
        notes.append(f"{len(source_compactions)} compactions recorded by {t.source_format}")
    if not stats.points:
        notes.append("no model request recorded: pressure figures are 0")
    settings = _policy_settings(policy)
    settings["summarizer"] = _recorded_summarizer(source, key)
    return stats.run("recorded", settings, compactions=kinds, calls=calls, dropped=dropped, started=started, kept_known=False,
                     note="; ".join(notes) or None)


def _recorded_summarizer(source: Store, key: str) -> str | None:
    events = source.events(key, limit=1, kinds=[EventKind.SUMMARY.value])
    name = events[0].data.get("summarizer") if events and isinstance(events[0].data, Mapping) else None
    return name if isinstance(name, str) else None


def _scratch_policies(policy: ResolvedPolicy, route: tuple[str, str]) -> PolicySet:
    """A policy set in which the scratch thread's route resolves to exactly ``policy``."""
    default = replace(policy.policy, context_window=None)
    return PolicySet(default=default, overrides={route: {"context_window": policy.context_window}}, default_window=policy.context_window)


class _Ticker:
    """Progress over a whole what-if (a sweep: every run), called at most ~200 times per run."""

    def __init__(self, progress: Progress | None, total: int, runs: int = 1) -> None:
        self.progress = progress
        self.total = max(1, total) * runs
        self.done = 0
        self.every = max(1, total // 200)
        self._last = 0

    def tick(self, n: int = 1, *, force: bool = False) -> None:
        self.done = min(self.total, self.done + n)
        if self.progress is not None and (force or self.done - self._last >= self.every):
            self._last = self.done
            self.progress(self.done, self.total)


def _check(should_stop: ShouldStop | None) -> None:
    if should_stop is not None and should_stop():
        raise Cancelled("what-if cancelled; its scratch copy was removed and the source is unchanged")


def _candidate(view: _SourceView, t: _Thread, policy: ResolvedPolicy, spec: str, settings: Mapping[str, Any], *, label: str,
               ticker: _Ticker, should_stop: ShouldStop | None, summarizer: Summarizer | None, scratch_root: str | None) -> WhatIfRun:
    """One candidate run in its own scratch copy (removed afterwards, whatever happens)."""
    started = time.perf_counter()
    route = (t.provider, t.model) if t.provider and t.model else FALLBACK_ROUTE
    system_prompt, tools = view.system_prompt, view.tools
    directory = tempfile.mkdtemp(prefix="compaction-whatif-", dir=scratch_root or _scratch_root(t.message_count))
    scratch: Store | None = None
    try:
        scratch = open_scratch(Path(directory) / "scratch.db")
        scratch.create_conversation(SCRATCH_KEY, title=f"what-if of {t.key}"[:200], provider=route[0], model=route[1],
                                    system_prompt=system_prompt, tools=tools)
        compactor = Compactor(scratch, summarizer=summarizer or make_summarizer(spec), workdir=Workdir(Path(directory) / "workdir", durable=False),
                              policies=_scratch_policies(policy, route))
        snapshots = SnapshotCache(scratch)
        compactor.snapshots = snapshots
        replay = EngineReplay(scratch, SCRATCH_KEY, compactor=compactor, snapshots=snapshots, route=route)
        stats = _Stats(policy.context_window)
        rule = _StepRule(view.ends, view.last_end)
        with without_prune_specifics():  # the prune events' specifics: in the scratch copy only, read by no figure
            for m in view.messages():
                if rule.before(m):
                    _check(should_stop)
                    s = replay.step()
                    if s.outcome is not None and s.outcome.reason == "summarizer_failed":
                        raise WhatIfSummarizerFailed(f"the summarizer {spec!r} failed ({_last_failure(scratch)}); the what-if was stopped and nothing was kept")
                    stats.add(s.tokens, compactions=s.compactions, calls=s.summarizer_calls, kept=s.request_kept)
                replay.add(m)
                ticker.tick()
            replay.finish()
        _check(should_stop)
        kinds = _history_kinds(scratch, SCRATCH_KEY)
        calls, dropped = _summary_figures(scratch, SCRATCH_KEY)
        shown = {**_policy_settings(policy), "summarizer": spec}
        notes = [] if stats.points else ["the thread has no assistant message: no model request to replay"]
        if replay.mismatches:
            notes.append(f"{replay.mismatches} pressure check(s) measured other than the tally's sum; every later step was checked against the database")
        return stats.run(label, shown, compactions=kinds, calls=max(calls, stats.calls), dropped=dropped, started=started, kept_known=True,
                         note="; ".join(notes) or None)
    finally:
        if scratch is not None:
            scratch.close()
        shutil.rmtree(directory, ignore_errors=True)


_collector_lock = threading.Lock()
#: what-ifs inside :func:`no_automatic_collection` now, and whether the collector was on before the first
_collector_holders = 0
_collector_was_on = False


@contextmanager
def no_automatic_collection() -> Iterator[None]:
    """Within this block (a whole :func:`run_whatif` or :func:`run_sweep`), Python's cyclic garbage
    collector makes no automatic collection (``gc.disable``); it is on again when the last such
    block in the process ends (what-ifs on several threads: counted), if it was on before the
    first, and its next collection comes when the scratch copies' objects are gone.

    Why: a what-if keeps building long-lived objects (the scratch surface's messages, the meter's
    and the extractors' caches, bounded), and each collection walks them again, finding almost no
    garbage: on a 100,000-message what-if the collector made 19 full collections, 3.4 s of its
    25 s, and ~2,800 young ones, ~0.4 s more; one collection at the end of the replay finds about
    6,700 unreachable objects of 339,000 tracked, the same number with or without the young
    collections (20,000 messages: 6,907 both ways), and the peak memory is the same (377 MB
    against 376 MB). A sweep of the 607-message session leaves ~51,000 (its runs' scratch stores),
    collected after it in 0.18 s. The collector is process-wide: other threads make no automatic
    collection during a what-if either (reference counting frees what holds no cycle, as always)."""
    global _collector_holders, _collector_was_on
    with _collector_lock:
        if _collector_holders == 0:
            _collector_was_on = gc.isenabled()
            gc.disable()
        _collector_holders += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_holders -= 1
            if _collector_holders == 0 and _collector_was_on:
                gc.enable()


_templates_lock = threading.Lock()
#: the bytes of an empty scratch database at the code's schema head, by head (one per process)
_templates: dict[str, bytes] = {}


def open_scratch(path: Path) -> Store:
    """A new, empty scratch store at ``path`` (a SQLite file) at the code's schema head.

    Creating the schema runs the migrations (Alembic: ~0.3 s, most of a short what-if); the first
    scratch copy of the process is migrated that way and its bytes kept, and every later one is
    those bytes written to its own file (about a millisecond), then opened (and its schema checked)
    as any database. The template is taken after its store is closed, so SQLite has moved the
    write-ahead log into the file: the bytes are the whole database."""
    head = code_head()
    with _templates_lock:
        image = _templates.get(head)
        if image is None:
            first = path.with_name(path.name + ".template")
            Store.open(f"sqlite:///{first}", create=True).close()
            image = first.read_bytes()
            for leftover in (first, first.with_name(first.name + "-wal"), first.with_name(first.name + "-shm")):
                leftover.unlink(missing_ok=True)
            _templates[head] = image
    path.write_bytes(image)
    return Store.open(f"sqlite:///{path}")


#: a memory-backed file system for the scratch copy when it has room (commits and Workdir writes
#: then cost no disk flush: measured 2x faster per model step); else the system's temp directory
SHM = "/dev/shm"


def _scratch_root(messages: int) -> str | None:
    """Where the scratch copy goes: :data:`SHM` when it exists and keeps 1 GiB free beyond ~8 KiB a
    message (database, indexes and Workdir of the copy), else the default temporary directory."""
    try:
        st = os.statvfs(SHM)
    except (OSError, AttributeError):
        return None
    free = st.f_bavail * st.f_frsize
    return SHM if os.access(SHM, os.W_OK) and free > (1 << 30) + 8192 * messages else None


def run_whatif(
    source: Store,
    key: str,
    settings: Mapping[str, Any] | Iterable[str],
    *,
    policies: PolicySet,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
    summarizer: Summarizer | None = None,
    scratch_root: str | None = None,
) -> WhatIfComparison:
    """Thread ``key`` of ``source`` replayed under ``settings`` (see :data:`SETTINGS`), against what
    was recorded. ``progress(done, total)`` counts messages fed; ``should_stop()`` is polled before
    every model request and raises :class:`engine.core.errors.Cancelled`. ``summarizer``, when given,
    replaces the one the settings name (tests, benchmarks: e.g. a counting wrapper)."""
    parsed = parse_settings(settings)
    t = _source_thread(source, key)
    policy, spec = candidate_policy(policies, t, parsed)
    ticker = _Ticker(progress, t.message_count)
    _check(should_stop)
    with no_automatic_collection():
        recorded = recorded_run(source, key, policies=policies, thread=t)
        candidate = _candidate(_SourceView(source, key, hold=False, meter=_scratch_meter(t)), t, policy, spec, parsed, label=_label(parsed), ticker=ticker,
                               should_stop=should_stop, summarizer=summarizer, scratch_root=scratch_root)
    ticker.tick(0, force=True)
    return WhatIfComparison(key, recorded, candidate)


def run_sweep(
    source: Store,
    key: str,
    parameter: str,
    values: Sequence[Any],
    *,
    policies: PolicySet,
    settings: Mapping[str, Any] | Iterable[str] | None = None,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
    summarizer_factory: Callable[[], Summarizer] | None = None,
    scratch_root: str | None = None,
) -> WhatIfSweep:
    """One candidate run per value of ``parameter`` (the other ``settings`` fixed), in order;
    every value is validated before the first run. Deterministic with the extractive summarizer."""
    name, parsed_values = validate_values(parameter, values)
    base = parse_settings(settings or {})
    if name in base:
        raise WhatIfSettingError(f"{name} is both swept and set")
    t = _source_thread(source, key)
    plans = [(v, *candidate_policy(policies, t, {**base, name: v})) for v in parsed_values]
    ticker = _Ticker(progress, t.message_count, runs=len(plans))
    _check(should_stop)
    runs = []
    with no_automatic_collection():
        recorded = recorded_run(source, key, policies=policies, thread=t)
        view = _SourceView(source, key, hold=t.message_count <= HELD_MESSAGES, meter=_scratch_meter(t))  # read once for every run
        for v, policy, spec in plans:
            s = {**base, name: v}
            runs.append(_candidate(view, t, policy, spec, s, label=_label(s), ticker=ticker, should_stop=should_stop,
                                   summarizer=summarizer_factory() if summarizer_factory else None, scratch_root=scratch_root))
    ticker.tick(0, force=True)
    return WhatIfSweep(key, name, parsed_values, tuple(runs), recorded)


def _scratch_meter(t: _Thread) -> TokenMeter:
    """The meter the scratch thread counts with (its route's model, as :func:`_candidate` routes it)."""
    return default_meter(t.model if t.provider and t.model else FALLBACK_ROUTE[1])


def _label(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
