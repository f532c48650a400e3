"""What-if runs: a recorded thread replayed through the engine under another policy, in a scratch copy.

:func:`run_whatif` reads a thread of the *source* store (keyset pages of messages, its system
prompt and tool schemas, its recorded model requests) and feeds it, in order, into a thread of a
*scratch* store: a temporary SQLite file with its own temporary Workdir, removed when the run ends
(finished, failed or cancelled). Nothing is ever written to the source database: it is only read.

The scratch thread is driven as the harness drives a live one (:mod:`engine.harness.loop`), by
:class:`EngineReplay`: a request of the user starts a run (its own :class:`RunState`); before every
model request the recorded agent made, the engine's pressure path runs (:meth:`Compactor.pressure`
over the incremental :class:`SnapshotCache`, what ``Service.compact_for_pressure`` calls) and the
envelope is measured (the compactor's measurement when it made one, else ``Compactor.measure``,
what ``Service.measure`` calls); the first request is recorded as completed, so the thread is
routed. A check that would find the envelope below the threshold (and so write nothing) is
answered from the tally's sum without the database; the messages are bulk-appended through the
write door, and the real check made, at the first step that reaches the threshold (see
:class:`EngineReplay`). A 100,000-message what-if takes minutes (docs/benchmarks.md).

Where the agent called the model: before each assistant message; for an imported thread with
recorded usage (Claude Code writes one response as several assistant messages), before the first
assistant message after the message of the previous recorded response (each recorded response is
one request), and before each assistant message after the last recorded one.

:class:`WhatIfRun` holds the figures of one run; the *recorded* run is the same figures from what
happened in the source: its model requests (our estimate, or the usage an imported source
reported), its compaction history and events, and for an imported thread the compactions the
source recorded. Pressures are ratios to each run's own context window.

Settings (:data:`SETTINGS`): the policy's own names, with the short names of the issue as aliases
(``retained_tail`` = ``retained_tail_ratio``, ``tool_result_limit`` = ``tool_result_limit_tokens``,
``preview_budget`` = ``preview_tokens``), plus ``summarizer``: ``extractive`` (the offline,
deterministic default) or ``openai:<base_url>#<model>`` (an OpenAI-compatible endpoint through
:mod:`engine.llm`; the API key, if any, from ``COMPACTION_SUMMARY_API_KEY``). A bad key or value
raises :class:`WhatIfSettingError` (``invalid_whatif_setting``) before anything runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from .compactor import Compactor, Measured, Outcome, RunState
from .errors import Cancelled, EngineError
from .events import EventKind
from .messages import Message
from .policy import CompactionPolicy, PolicyError, PolicySet, ResolvedPolicy
from .snapshots import SnapshotCache
from .store import Store
from .summarizers.extractive import ExtractiveSummarizer
from .summarizers.factory import ENV_API_KEY
from .summarizers.openai_compat import OpenAICompatSummarizer
from .summarizers.protocol import Summarizer, SummarizerError
from .units import is_closing_marker, is_request, starts_turn
from .workdir import Workdir

__all__ = [
    "ALIASES",
    "Cancelled",
    "EngineReplay",
    "ReplayStep",
    "SETTINGS",
    "WhatIfComparison",
    "WhatIfPoint",
    "WhatIfRun",
    "WhatIfSettingError",
    "WhatIfSummarizerFailed",
    "WhatIfSweep",
    "parse_settings",
    "parse_sweep",
    "recorded_run",
    "run_whatif",
    "run_sweep",
]

Progress = Callable[[int, int], None]
ShouldStop = Callable[[], bool]

#: messages read from the source at a time (keyset pages: memory stays bounded)
PAGE = 1000
#: at most this many values in one sweep
MAX_SWEEP = 50
#: the scratch thread's key
SCRATCH_KEY = "whatif"
#: route of the scratch thread when the source has none (the meter's default encoding)
FALLBACK_ROUTE = ("whatif", "unknown")


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhatIfPoint:
    """One model request of a run: the envelope's tokens as sent and what compaction did before it."""

    index: int
    tokens: int
    pressure: float
    #: compactions (prunes and summaries) made just before this request
    compactions: int
    summarizer_calls: int
    #: the current request was verbatim in the envelope (None: no current request / not known)
    request_kept: bool | None = None

    def to_json(self) -> dict:
        return {"index": self.index, "tokens": self.tokens, "pressure": round(self.pressure, 4), "compactions": self.compactions,
                "summarizer_calls": self.summarizer_calls, "request_kept": self.request_kept}


@dataclass(frozen=True)
class WhatIfRun:
    """The figures of one run over a whole thread: ``recorded`` (what happened) or a candidate policy.

    Pressures are ratios of the envelope's tokens to the run's context window; ``prompt_tokens`` is
    the sum of the envelopes sent over the session; ``steps_over_window`` the requests whose
    envelope was larger than the window. ``specifics_dropped`` (summed over the summaries'
    ``dropped_specifics``) and ``request_kept`` (the current request verbatim at every request) are
    ``None`` when unknown. Two runs compare equal whatever their ``duration_ms``."""

    label: str
    settings: Mapping[str, Any]
    requests: int
    compactions: int
    summarizer_calls: int
    peak_pressure: float
    mean_pressure: float
    prompt_tokens: int
    steps_over_window: int
    specifics_dropped: int | None
    request_kept: bool | None
    duration_ms: float = field(compare=False)
    #: compactions by kind ("prune", "summary", "manual")
    by_kind: Mapping[str, int] = field(default_factory=dict)
    #: requests whose envelope lacked the current request verbatim (None: not known)
    requests_without_request: int | None = None
    context_window: int | None = None
    #: one point per model request, in order (the GUI's chart)
    points: tuple[WhatIfPoint, ...] = field(default=(), repr=False)
    note: str | None = None

    def to_json(self, *, points: bool = False) -> dict:
        out = {
            "label": self.label,
            "settings": dict(self.settings),
            "context_window": self.context_window,
            "requests": self.requests,
            "compactions": self.compactions,
            "by_kind": dict(self.by_kind),
            "summarizer_calls": self.summarizer_calls,
            "peak_pressure": round(self.peak_pressure, 4),
            "mean_pressure": round(self.mean_pressure, 4),
            "prompt_tokens": self.prompt_tokens,
            "steps_over_window": self.steps_over_window,
            "specifics_dropped": self.specifics_dropped,
            "request_kept": self.request_kept,
            "requests_without_request": self.requests_without_request,
            "duration_ms": round(self.duration_ms, 1),
            "note": self.note,
        }
        if points:
            out["points"] = [p.to_json() for p in self.points]
        return out


@dataclass(frozen=True)
class WhatIfComparison:
    thread: str
    recorded: WhatIfRun
    candidate: WhatIfRun

    def to_json(self, *, points: bool = False) -> dict:
        return {"thread": self.thread, "recorded": self.recorded.to_json(points=points), "candidate": self.candidate.to_json(points=points)}


@dataclass(frozen=True)
class WhatIfSweep:
    thread: str
    parameter: str
    values: tuple
    runs: tuple[WhatIfRun, ...]
    recorded: WhatIfRun

    def to_json(self, *, points: bool = False) -> dict:
        return {
            "thread": self.thread,
            "parameter": self.parameter,
            "values": list(self.values),
            "recorded": self.recorded.to_json(points=points),
            "runs": [r.to_json(points=points) for r in self.runs],
        }


# -- settings ----------------------------------------------------------------------------------


class WhatIfSettingError(EngineError, ValueError):
    """A what-if setting that is unknown or has a bad value (one line; nothing was run)."""

    code = "invalid_whatif_setting"


#: the settings a what-if accepts: name -> kind ("ratio", "tokens", "count" or "summarizer")
SETTINGS: Mapping[str, str] = {
    "threshold_ratio": "ratio",
    "threshold_tokens": "tokens",
    "retained_tail_ratio": "ratio",
    "tool_result_limit_tokens": "tokens",
    "preview_tokens": "tokens",
    "context_window": "tokens",
    "summary_max_tokens": "tokens",
    "loop_recent_tool_rounds": "count",
    "loop_max_compaction_rounds": "count",
    "summarizer": "summarizer",
}
#: the issue's short names for the policy's keys
ALIASES: Mapping[str, str] = {
    "retained_tail": "retained_tail_ratio",
    "tool_result_limit": "tool_result_limit_tokens",
    "preview_budget": "preview_tokens",
    "window": "context_window",
}
_POLICY_KEYS = frozenset(f.name for f in fields(CompactionPolicy))


def _known() -> str:
    return ", ".join(list(SETTINGS) + [f"{a} (= {k})" for a, k in ALIASES.items()])


def canonical_key(key: Any) -> str:
    """The setting's name (an alias resolved); :class:`WhatIfSettingError` for an unknown one."""
    if not isinstance(key, str) or not key.strip():
        raise WhatIfSettingError(f"a setting needs a name (known: {_known()})")
    name = key.strip()
    name = ALIASES.get(name, name)
    if name not in SETTINGS:
        raise WhatIfSettingError(f"unknown what-if setting {key!r} (known: {_known()})")
    return name


def parse_value(key: str, value: Any) -> Any:
    """``value`` (text from the command line, or a number) as setting ``key`` takes it."""
    kind = SETTINGS[key]
    if kind == "summarizer":
        return _summarizer_spec(value)
    text = value.strip().replace("_", "") if isinstance(value, str) else value
    if isinstance(text, bool) or text is None or text == "":
        raise WhatIfSettingError(f"{key} needs a value, got {value!r}")
    if kind == "ratio":
        try:
            number = float(text)
        except (TypeError, ValueError):
            raise WhatIfSettingError(f"{key} must be a number in (0, 1], got {value!r}") from None
        if not (0 < number <= 1):
            raise WhatIfSettingError(f"{key} must be in (0, 1], got {value!r}")
        return number
    try:
        number = int(text) if isinstance(text, str) else text
    except ValueError:
        raise WhatIfSettingError(f"{key} must be a whole number of {'tokens' if kind == 'tokens' else 'rounds'}, got {value!r}") from None
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int):
        raise WhatIfSettingError(f"{key} must be a whole number, got {value!r}")
    low = 1 if kind == "tokens" or key == "loop_max_compaction_rounds" else 0
    if number < low:
        raise WhatIfSettingError(f"{key} must be >= {low}, got {value!r}")
    return number


def _summarizer_spec(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WhatIfSettingError(f"summarizer must be 'extractive' or 'openai:<base_url>#<model>', got {value!r}")
    spec = value.strip()
    if spec == "extractive":
        return spec
    if spec.startswith("openai:"):
        rest = spec[len("openai:"):]
        url, sep, model = rest.rpartition("#")
        if not sep or not url or not model.strip():
            raise WhatIfSettingError(f"summarizer {spec!r}: name the model after '#': openai:<base_url>#<model>")
        if not url.startswith(("http://", "https://")):
            raise WhatIfSettingError(f"summarizer {spec!r}: the base URL must start with http:// or https://")
        return f"openai:{url}#{model.strip()}"
    raise WhatIfSettingError(f"summarizer must be 'extractive' or 'openai:<base_url>#<model>', got {value!r}")


def parse_settings(settings: Mapping[str, Any] | Iterable[str]) -> dict[str, Any]:
    """Settings by canonical name with parsed values, from a mapping or ``key=value`` texts.
    A key given twice (also as alias and name) is an error."""
    pairs: list[tuple[Any, Any]]
    if isinstance(settings, Mapping):
        pairs = list(settings.items())
    else:
        pairs = []
        for item in settings:
            if not isinstance(item, str) or "=" not in item:
                raise WhatIfSettingError(f"a setting is key=value, got {item!r}")
            k, _, v = item.partition("=")
            pairs.append((k, v))
    out: dict[str, Any] = {}
    for k, v in pairs:
        name = canonical_key(k)
        if name in out:
            raise WhatIfSettingError(f"{name} is set twice")
        out[name] = parse_value(name, v)
    return out


def parse_sweep(spec: str) -> tuple[str, tuple[Any, ...]]:
    """``key=start:stop:step`` (stop included when reached) or ``key=a,b,c``: the key and its values."""
    if not isinstance(spec, str) or "=" not in spec:
        raise WhatIfSettingError(f"a sweep is key=start:stop:step or key=a,b,c, got {spec!r}")
    k, _, rest = spec.partition("=")
    key = canonical_key(k)
    rest = rest.strip()
    if ":" in rest and SETTINGS[key] != "summarizer":
        parts = rest.split(":")
        if len(parts) != 3:
            raise WhatIfSettingError(f"sweep {spec!r}: a range is start:stop:step")
        try:
            start, stop, step = (Decimal(p.strip().replace("_", "")) for p in parts)
        except InvalidOperation:
            raise WhatIfSettingError(f"sweep {spec!r}: start, stop and step must be numbers") from None
        if step <= 0 or stop < start:
            raise WhatIfSettingError(f"sweep {spec!r}: the step must be > 0 and stop >= start")
        count = int((stop - start) / step) + 1
        if count > MAX_SWEEP:
            raise WhatIfSettingError(f"sweep {spec!r} has {count} values; at most {MAX_SWEEP}")
        raw = [str(start + i * step) for i in range(count)]
    else:
        raw = [p for p in (x.strip() for x in _split_list(rest, key)) if p]
        if not raw:
            raise WhatIfSettingError(f"sweep {spec!r} names no values")
        if len(raw) > MAX_SWEEP:
            raise WhatIfSettingError(f"sweep {spec!r} has {len(raw)} values; at most {MAX_SWEEP}")
    values = tuple(parse_value(key, v) for v in raw)
    return key, values


def _split_list(text: str, key: str) -> list[str]:
    # a summarizer spec holds ':' and may hold ',' in a URL only rarely: split on ',' anyway
    return text.split(",")


def validate_values(parameter: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    """A sweep's parameter and values given as data (the GUI): canonical name, parsed values."""
    key = canonical_key(parameter)
    if not values:
        raise WhatIfSettingError(f"a sweep over {key} needs at least one value")
    if len(values) > MAX_SWEEP:
        raise WhatIfSettingError(f"a sweep has at most {MAX_SWEEP} values, got {len(values)}")
    return key, tuple(parse_value(key, v) for v in values)


class WhatIfSummarizerFailed(EngineError):
    """The candidate's summarizer failed (an endpoint that cannot be reached, refuses, times out):
    the what-if stops, as its figures would not say what that summarizer does. Nothing is kept."""

    code = "whatif_summarizer_failed"


# -- the candidate policy ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Thread:
    """What the what-if needs of the source thread (read once)."""

    key: str
    provider: str | None
    model: str | None
    reported_window: int | None
    source_format: str | None
    message_count: int


def _source_thread(source: Store, key: str) -> _Thread:
    info = source.thread(key)  # ThreadNotFound for a missing thread
    return _Thread(key, info.provider, info.model, info.reported_context_window, info.source_format, info.message_count)


def _resolve_source(policies: PolicySet, t: _Thread) -> ResolvedPolicy:
    return policies.resolve(t.provider, t.model, reported_window=t.reported_window, reported_by=t.source_format if t.reported_window else None)


def _policy_settings(policy: ResolvedPolicy) -> dict[str, Any]:
    p = policy.policy
    return {
        "threshold_ratio": p.threshold_ratio,
        "threshold_tokens": p.threshold_tokens,
        "retained_tail_ratio": p.retained_tail_ratio,
        "tool_result_limit_tokens": p.tool_result_limit_tokens,
        "preview_tokens": p.preview_tokens,
        "context_window": policy.context_window,
        "summary_max_tokens": p.summary_max_tokens,
        "loop_recent_tool_rounds": p.loop_recent_tool_rounds,
        "loop_max_compaction_rounds": p.loop_max_compaction_rounds,
    }


def candidate_policy(policies: PolicySet, t: _Thread, settings: Mapping[str, Any]) -> tuple[ResolvedPolicy, str]:
    """The policy the candidate runs under (the source's policy for the thread's route, with
    ``settings`` applied) and its summarizer spec. A combination that makes no policy (a preview
    as large as the limit, a threshold above the window …) raises :class:`WhatIfSettingError`."""
    base = _resolve_source(policies, t)
    overrides = {k: v for k, v in settings.items() if k in _POLICY_KEYS and k != "context_window"}
    window = settings.get("context_window", base.context_window)
    if "threshold_ratio" in settings and "threshold_tokens" not in settings:
        overrides["threshold_tokens"] = None  # a ratio asked for wins over an absolute threshold in force
    try:
        policy = base.policy.with_overrides(overrides)
        resolved = replace(base, policy=replace(policy, context_window=window), context_window=window, window_source="override",
                           window_detail="what-if setting" if "context_window" in settings else base.window_detail)
        resolved.threshold, resolved.target_tokens, resolved.retained_tail_tokens  # raise PolicyError when unusable
    except PolicyError as exc:
        raise WhatIfSettingError(f"these settings make no policy: {exc.message}") from None
    return resolved, settings.get("summarizer", "extractive")


def make_summarizer(spec: str) -> Summarizer:
    """The summarizer a spec names (see :func:`_summarizer_spec`)."""
    if spec == "extractive":
        return ExtractiveSummarizer()
    url, _, model = spec[len("openai:"):].rpartition("#")
    try:
        return OpenAICompatSummarizer(url, model, api_key=os.environ.get(ENV_API_KEY) or None)
    except SummarizerError as exc:
        raise WhatIfSettingError(f"summarizer {spec!r}: {exc.message}") from None


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
    work; the messages are written (one ``bulk_append`` through the write door, which checks the
    conversation invariants) and the real pressure path runs (``Compactor.pressure`` over the
    :class:`SnapshotCache`, what ``Service.compact_for_pressure`` calls) at the first step whose sum
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
        self._sum = 0
        self._blocked = True
        self._request_since = False
        self._kept: bool | None = None

    def add(self, message: Message) -> None:
        """A message the recorded agent produced or received (persisted with the next flush)."""
        if starts_turn(message):  # the user's message opens a new run (Service.start_run)
            self._new_run = True
        m = replace(message, id=None) if message.id is not None else message
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
            if self._buffer:
                tx.bulk_append(self._buffer)
        self._buffer = []

    def step(self) -> ReplayStep:
        """A model request now: pressure compaction (when it can act), the envelope's size as sent."""
        if self._new_run:
            self.run, self._new_run = RunState(), False
        last = self._last
        if not self.every_step and last is not None and not self._blocked and self._routed_or_pending() and self._sum < last.policy.threshold:
            kept = True if self._request_since else self._kept
            step = ReplayStep(self.steps, None, None, self._sum, 0, 0, kept)
            self.steps += 1
            return step
        predicted = self._sum if last is not None and not self._blocked else None
        self.flush()
        provider, model = self.route
        outcome = self.compactor.pressure(self.key, self.run)  # = Service.compact_for_pressure
        self.checks += 1
        if predicted is not None and outcome.measured is not None and outcome.tokens_before != predicted:
            self.mismatches += 1
            self.every_step = True  # the sum missed something: ask the database at every step from now on
        m = outcome.measured
        if m is None or (m.policy.provider, m.policy.model) != self.route:  # = AgentHarness._pre_step
            m = self.compactor.measure(self.snapshots.snapshot(self.key, with_busy=True), ephemeral=self.run.ephemeral, provider=provider, model=model)
        if self.record_requests or not self._routed:
            self._pending = (m.tokens, m.policy.threshold)
        kept = request_kept(m)
        self._last, self._sum, self._request_since, self._kept = m, m.tokens, False, kept
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


def _source_messages(source: Store, key: str) -> Iterator[Message]:
    after: int | None = None
    while True:
        page = source.messages_page(key, after_id=after, limit=PAGE)
        if not page:
            return
        for s in page:
            yield s.message
        after = page[-1].id


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
    if source_compactions:
        dropped = None  # not recorded by the source
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


def _candidate(source: Store, t: _Thread, policy: ResolvedPolicy, spec: str, settings: Mapping[str, Any], *, label: str,
               ticker: _Ticker, should_stop: ShouldStop | None, summarizer: Summarizer | None, scratch_root: str | None) -> WhatIfRun:
    """One candidate run in its own scratch copy (removed afterwards, whatever happens)."""
    started = time.perf_counter()
    route = (t.provider, t.model) if t.provider and t.model else FALLBACK_ROUTE
    system_prompt, tools, _, _ = source.conversation_config(t.key)
    directory = tempfile.mkdtemp(prefix="compaction-whatif-", dir=scratch_root or _scratch_root(t.message_count))
    scratch: Store | None = None
    try:
        scratch = Store.open(f"sqlite:///{Path(directory) / 'scratch.db'}", create=True)
        scratch.create_conversation(SCRATCH_KEY, title=f"what-if of {t.key}"[:200], provider=route[0], model=route[1],
                                    system_prompt=system_prompt, tools=tools)
        compactor = Compactor(scratch, summarizer=summarizer or make_summarizer(spec), workdir=Workdir(Path(directory) / "workdir"),
                              policies=_scratch_policies(policy, route))
        snapshots = SnapshotCache(scratch)
        compactor.snapshots = snapshots
        replay = EngineReplay(scratch, SCRATCH_KEY, compactor=compactor, snapshots=snapshots, route=route)
        stats = _Stats(policy.context_window)
        rule = _StepRule(*_response_ends(source, t.key))
        for m in _source_messages(source, t.key):
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
    every model request and raises :class:`engine.errors.Cancelled`. ``summarizer``, when given,
    replaces the one the settings name (tests, benchmarks: e.g. a counting wrapper)."""
    parsed = parse_settings(settings)
    t = _source_thread(source, key)
    policy, spec = candidate_policy(policies, t, parsed)
    ticker = _Ticker(progress, t.message_count)
    _check(should_stop)
    recorded = recorded_run(source, key, policies=policies, thread=t)
    candidate = _candidate(source, t, policy, spec, parsed, label=_label(parsed), ticker=ticker, should_stop=should_stop,
                           summarizer=summarizer, scratch_root=scratch_root)
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
    recorded = recorded_run(source, key, policies=policies, thread=t)
    runs = []
    for v, policy, spec in plans:
        s = {**base, name: v}
        runs.append(_candidate(source, t, policy, spec, s, label=_label(s), ticker=ticker, should_stop=should_stop,
                               summarizer=summarizer_factory() if summarizer_factory else None, scratch_root=scratch_root))
    ticker.tick(0, force=True)
    return WhatIfSweep(key, name, parsed_values, tuple(runs), recorded)


def _label(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
