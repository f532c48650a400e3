"""The one event vocabulary: every kind of row in ``compaction_events`` and its typed payload.

Pure (no I/O). Writers build one payload per event (a frozen dataclass below, one per
:class:`EventKind`) and record it with :func:`write_event` in a transaction of the store's write door; the store refuses any kind that
is not an :class:`EventKind`. Readers (replay, the inspector, the CLI) turn a stored row back into a
payload with :func:`parse_event`.
``docs/events.md`` lists every kind with its triggers and keys; ``tests/test_events.py`` fails
when the two disagree.

Rules (the same for every payload):

- Every field is ``None`` when unknown: readers must expect any key to be missing, because a
  database written by another platform may hold anything.
- :meth:`Event.to_data` writes every field; ``None`` becomes JSON ``null``, except the fields
  declared with :func:`_only_when_set` (listed in ``Event.optional``), which are left out when
  ``None`` (e.g. ``recovery_error`` exists only when a recovery raised). This reproduces exactly
  the ``data`` objects the writers recorded before this module existed.
- :func:`parse_event` never raises: an unknown kind or a ``data`` that is not an object gives
  ``None``; a missing key, or a value of the wrong type, gives ``None`` for that field; unknown
  keys are ignored; list elements of the wrong type are dropped.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Mapping, Protocol, Union

from .specifics import DroppedSpecifics

__all__ = [
    "BreakerTrippedEvent",
    "CancelledEvent",
    "DroppedEntry",
    "EVENT_TYPES",
    "Event",
    "EventKind",
    "EventSink",
    "GaveUpEvent",
    "HarnessErrorEvent",
    "PressureFailedEvent",
    "ProviderErrorEvent",
    "PruneEvent",
    "PruneFailedEvent",
    "PruneFailure",
    "PrunedResult",
    "Record",
    "RecoveredEvent",
    "RetryEvent",
    "SummaryEvent",
    "SummaryRejectedEvent",
    "SummaryUsage",
    "WaitingForUserEvent",
    "parse_event",
    "write_event",
]


class EventKind(StrEnum):
    PRUNE = "prune"
    PRUNE_FAILED = "prune_failed"
    SUMMARY = "summary"
    SUMMARY_REJECTED = "summary_rejected"
    BREAKER_TRIPPED = "breaker_tripped"
    PRESSURE_FAILED = "pressure_failed"
    PROVIDER_ERROR = "provider_error"
    RETRY = "retry"
    RECOVERED = "recovered"
    GAVE_UP = "gave_up"
    CANCELLED = "cancelled"
    HARNESS_ERROR = "harness_error"
    WAITING_FOR_USER = "waiting_for_user"
    REVERT = "revert"
    REDO = "redo"


_OMIT = "omit_when_none"


def _only_when_set() -> Any:
    """A field that :meth:`Record.to_data` leaves out when it is ``None``."""
    return field(default=None, metadata={_OMIT: True})


class Record:
    """A JSON object with typed fields: an event payload or one entry of a list inside one."""

    __slots__ = ()

    def to_data(self) -> dict[str, Any]:
        """The JSON object to store (lists for tuples, objects for nested records)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get(_OMIT):
                continue
            out[f.name] = _to_json(value)
        return out

    @classmethod
    def from_data(cls, data: Any) -> "Record | None":
        """Tolerant read of :meth:`to_data`'s output: ``None`` unless ``data`` is an object."""
        if not isinstance(data, Mapping):
            return None
        hints = _hints(cls)
        return cls(**{f.name: _coerce(hints[f.name], data.get(f.name)) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


class Event(Record):
    """Base of the payload types. ``kind`` names the row kind; ``triggers`` the ``trigger`` column
    values this kind is written with (``None``: no trigger)."""

    __slots__ = ()
    kind: ClassVar[EventKind]
    triggers: ClassVar[tuple[str | None, ...]]

    @classmethod
    def optional(cls) -> tuple[str, ...]:
        """Fields left out of :meth:`to_data` when unknown (all others are always written)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(_OMIT))  # type: ignore[arg-type]

    @classmethod
    def data_keys(cls) -> tuple[str, ...]:
        """Every key :meth:`to_data` may write, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def check_trigger(self, trigger: str | None) -> str | None:
        """``trigger`` if this kind is written with it; ``ValueError`` otherwise (a writer's bug)."""
        if trigger not in self.triggers:
            raise ValueError(f"a {self.kind} event is written with trigger {' / '.join(map(str, self.triggers))}, not {trigger!r}")
        return trigger


class EventSink(Protocol):
    """What records an event row inside a transaction: ``engine.store.Locked``."""

    def add_event(self, kind: EventKind, data: Mapping[str, Any], *, trigger: str | None = None, run_id: int | None = None) -> int: ...


def write_event(sink: EventSink, event: Event, *, trigger: str | None = None, run_id: int | None = None) -> int:
    """Record ``event`` in the transaction ``sink``; checks the trigger against the kind
    (``ValueError``). Returns the row id."""
    return sink.add_event(event.kind, event.to_data(), trigger=event.check_trigger(trigger), run_id=run_id)


# -- entries of the list-valued keys ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrunedResult(Record):
    """One tool result a prune replaced by its preview (an entry of ``Prune.pruned``)."""

    message_id: int | None = None
    tool: str | None = None
    sha256: str | None = None
    path: str | None = None
    original_tokens: int | None = None
    preview_tokens: int | None = None
    #: specifics the original showed, and how many of them its preview leaves out (the full text is
    #: in the Workdir); absent on events written before prunes recorded them
    specifics_seen: int | None = _only_when_set()
    left_out: int | None = _only_when_set()


@dataclass(frozen=True, slots=True)
class PruneFailure(Record):
    """A tool result that should have been pruned but whose Workdir write failed (it stays)."""

    message_id: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryUsage(Record):
    """What one summarizer invocation cost."""

    http_requests: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    extractive: bool | None = None


@dataclass(frozen=True, slots=True)
class DroppedEntry(Record):
    """One specific a summary dropped (an entry of ``summary.dropped``; see engine/core/specifics.py)."""

    kind: str | None = None
    value: str | None = None
    referenced: bool | None = None


# -- the payloads, one per kind ------------------------------------------------------------------

_COMPACTION_TRIGGERS: tuple[str | None, ...] = ("pressure", "overflow")


@dataclass(frozen=True, slots=True)
class PruneEvent(Event):
    """Tool results replaced by previews (their full text was saved first); generation + 1."""

    kind: ClassVar[EventKind] = EventKind.PRUNE
    triggers: ClassVar[tuple[str | None, ...]] = _COMPACTION_TRIGGERS

    tokens_before: int | None = None
    tokens_after: int | None = None
    threshold: int | None = None
    generation_before: int | None = None
    generation_after: int | None = None
    boundary: int | None = None
    pruned: tuple[PrunedResult, ...] | None = None
    failed: tuple[PruneFailure, ...] | None = None
    duration_ms: float | None = None
    #: what the pruned results showed that neither their previews nor the rest of the surface after
    #: the prune shows, with the keys and meaning of a ``summary`` event's (engine.compaction.pruning.prune_dropped);
    #: absent on events written before prunes recorded them
    specifics_seen: int | None = _only_when_set()
    dropped_specifics: int | None = _only_when_set()
    dropped_referenced: int | None = _only_when_set()
    dropped: tuple[DroppedEntry, ...] | None = _only_when_set()
    dropped_truncated: bool | None = _only_when_set()
    specifics_ms: float | None = _only_when_set()

    def specifics(self) -> "DroppedSpecifics | None":
        """The dropped specifics as :class:`engine.core.specifics.DroppedSpecifics`; ``None`` for an
        event written before prunes recorded them."""
        return DroppedSpecifics.from_json(self)


@dataclass(frozen=True, slots=True)
class PruneFailedEvent(Event):
    """Every Workdir write of a prune failed: nothing was replaced."""

    kind: ClassVar[EventKind] = EventKind.PRUNE_FAILED
    triggers: ClassVar[tuple[str | None, ...]] = _COMPACTION_TRIGGERS

    failed: tuple[PruneFailure, ...] | None = None


@dataclass(frozen=True, slots=True)
class SummaryEvent(Event):
    """A summary replaced a prefix of the history (compare-and-swap succeeded); generation + 1."""

    kind: ClassVar[EventKind] = EventKind.SUMMARY
    triggers: ClassVar[tuple[str | None, ...]] = ("pressure", "overflow", "manual")

    tokens_before: int | None = None
    tokens_after: int | None = None
    threshold: int | None = None
    target: int | None = None
    boundary_before: int | None = None
    boundary_after: int | None = None
    generation_before: int | None = None
    generation_after: int | None = None
    selected_boundary: int | None = None
    selected_messages: int | None = None
    replaced_tokens: int | None = None
    summary_tokens: int | None = None
    summarizer: str | None = None
    #: the host of the summarizer's endpoint (a model summary; never the key); absent for the offline one
    summarizer_host: str | None = _only_when_set()
    #: the display name of the person who asked for a manual compaction (settings' ``operator.name``)
    operator: str | None = _only_when_set()
    #: the instructions the compaction followed (a manual compaction's, or the thread's standing ones)
    instructions: str | None = _only_when_set()
    #: ids of the pinned messages (their tool rounds included) kept verbatim outside the summary
    pinned: tuple[int, ...] | None = _only_when_set()
    usage: SummaryUsage | None = None
    calls: int | None = None
    #: identifiers of the range the summarizer reported leaving out for its budget
    dropped_identifiers: int | None = None
    duration_ms: float | None = None
    #: specifics visible before (range + previous summary) and shown neither by the summary nor the
    #: surface after it (engine.core.specifics.dropped_specifics); None on events written before
    specifics_seen: int | None = None
    dropped_specifics: int | None = None
    dropped_referenced: int | None = None
    dropped: tuple[DroppedEntry, ...] | None = None
    dropped_truncated: bool | None = None
    specifics_ms: float | None = None

    def specifics(self) -> "DroppedSpecifics | None":
        """The dropped specifics as :class:`engine.core.specifics.DroppedSpecifics`; ``None`` for an
        event written before they were recorded."""
        return DroppedSpecifics.from_json(self)


@dataclass(frozen=True, slots=True)
class SummaryRejectedEvent(Event):
    """A summary attempt that changed nothing (only this row was written)."""

    kind: ClassVar[EventKind] = EventKind.SUMMARY_REJECTED
    triggers: ClassVar[tuple[str | None, ...]] = ("pressure", "overflow", "manual")

    reason: str | None = None
    tokens_before: int | None = None
    threshold: int | None = None
    target: int | None = None
    boundary_before: int | None = None
    generation_before: int | None = None
    generation_after: int | None = None
    selected_boundary: int | None = None
    selected_messages: int | None = None
    replaced_tokens: int | None = None
    summarizer: str | None = None
    summarizer_host: str | None = _only_when_set()
    operator: str | None = _only_when_set()
    instructions: str | None = _only_when_set()
    pinned: tuple[int, ...] | None = _only_when_set()
    calls: int | None = None
    duration_ms: float | None = None
    error_code: str | None = _only_when_set()
    error_message: str | None = _only_when_set()
    summary_tokens: int | None = _only_when_set()
    usage: SummaryUsage | None = _only_when_set()


@dataclass(frozen=True, slots=True)
class BreakerTrippedEvent(Event):
    """A summary attempt made no progress: no more automatic summaries in this run."""

    kind: ClassVar[EventKind] = EventKind.BREAKER_TRIPPED
    triggers: ClassVar[tuple[str | None, ...]] = ("pressure",)

    reason: str | None = None
    tokens: int | None = None
    threshold: int | None = None
    generation: int | None = None


@dataclass(frozen=True, slots=True)
class PressureFailedEvent(Event):
    """Pressure compaction raised (database, Workdir); the step went on from the persisted surface."""

    kind: ClassVar[EventKind] = EventKind.PRESSURE_FAILED
    triggers: ClassVar[tuple[str | None, ...]] = ("pressure",)

    step: int | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderErrorEvent(Event):
    """A model request failed; the error as normalized, and the request that got it."""

    kind: ClassVar[EventKind] = EventKind.PROVIDER_ERROR
    triggers: ClassVar[tuple[str | None, ...]] = ("overflow", "provider")

    error_code: str | None = None
    error_message: str | None = None
    status: int | None = None
    inband: bool | None = None
    provider: str | None = None
    model: str | None = None
    attempt: int | None = None
    step: int | None = None
    tokens: int | None = None
    tokens_before: int | None = None
    threshold: int | None = None
    generation: int | None = None
    last_message_id: int | None = None
    ephemeral: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class RetryEvent(Event):
    """Overflow recovery grew the generation: the failed step is retried as a new step."""

    kind: ClassVar[EventKind] = EventKind.RETRY
    triggers: ClassVar[tuple[str | None, ...]] = ("overflow",)

    attempt: int | None = None
    failed_step: int | None = None
    next_step: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    generation_before: int | None = None
    generation_after: int | None = None
    summarizer_calls: int | None = None
    recovery_error: str | None = _only_when_set()


@dataclass(frozen=True, slots=True)
class RecoveredEvent(Event):
    """The first request after a retry succeeded: the overflow episode is over."""

    kind: ClassVar[EventKind] = EventKind.RECOVERED
    triggers: ClassVar[tuple[str | None, ...]] = ("overflow",)

    attempt: int | None = None
    step: int | None = None
    tokens: int | None = None


@dataclass(frozen=True, slots=True)
class GaveUpEvent(Event):
    """Overflow recovery could not help; the run failed with the provider's original error."""

    kind: ClassVar[EventKind] = EventKind.GAVE_UP
    triggers: ClassVar[tuple[str | None, ...]] = ("overflow",)

    reason: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    attempt: int | None = None
    step: int | None = None
    tokens_before: int | None = _only_when_set()
    tokens_after: int | None = _only_when_set()
    generation_before: int | None = _only_when_set()
    generation_after: int | None = _only_when_set()
    summarizer_calls: int | None = _only_when_set()
    recovery_error: str | None = _only_when_set()


@dataclass(frozen=True, slots=True)
class CancelledEvent(Event):
    """The run was cancelled; its calls that never ran were answered with an aborted result."""

    kind: ClassVar[EventKind] = EventKind.CANCELLED
    triggers: ClassVar[tuple[str | None, ...]] = ("overflow", None)

    aborted_calls: int | None = None
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class HarnessErrorEvent(Event):
    """The harness itself failed (not the provider): the run failed, its open calls were aborted."""

    kind: ClassVar[EventKind] = EventKind.HARNESS_ERROR
    triggers: ClassVar[tuple[str | None, ...]] = ("overflow", None)

    aborted_calls: int | None = None
    attempt: int | None = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class WaitingForUserEvent(Event):
    """A tool asked the user a question: the run waits for the answer."""

    kind: ClassVar[EventKind] = EventKind.WAITING_FOR_USER
    triggers: ClassVar[tuple[str | None, ...]] = (None,)

    tool: str | None = None
    call_id: str | None = None
    question: str | None = None


@dataclass(frozen=True, slots=True)
class RevertEvent(Event):
    """An operator reverted the thread's last compaction of ours: the boundary and summary before
    it, and the results its prunes replaced, are back (a new generation; nothing deleted)."""

    kind: ClassVar[EventKind] = EventKind.REVERT
    triggers: ClassVar[tuple[str | None, ...]] = ("manual",)

    generation_before: int | None = None
    generation_after: int | None = None
    boundary_before: int | None = None
    boundary_after: int | None = None
    #: the compaction history rows undone (one compaction: its prunes and summaries)
    history_ids: tuple[int, ...] | None = None
    #: the tool results shown verbatim again (their originals verified by SHA-256 in the Workdir)
    restored_results: tuple[int, ...] | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    operator: str | None = None
    display_name: str | None = _only_when_set()
    reason: str | None = _only_when_set()


@dataclass(frozen=True, slots=True)
class RedoEvent(Event):
    """An operator reverted a revert: the compaction it undid is back as it was (a new generation)."""

    kind: ClassVar[EventKind] = EventKind.REDO
    triggers: ClassVar[tuple[str | None, ...]] = ("manual",)

    generation_before: int | None = None
    generation_after: int | None = None
    boundary_before: int | None = None
    boundary_after: int | None = None
    #: the compaction history rows applied again
    history_ids: tuple[int, ...] | None = None
    #: the tool results shown as their previews again
    repruned_results: tuple[int, ...] | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    operator: str | None = None
    display_name: str | None = _only_when_set()
    reason: str | None = _only_when_set()


#: the payload type of every kind
EVENT_TYPES: Mapping[EventKind, type[Event]] = types.MappingProxyType(
    {
        cls.kind: cls
        for cls in (
            PruneEvent,
            PruneFailedEvent,
            SummaryEvent,
            SummaryRejectedEvent,
            BreakerTrippedEvent,
            PressureFailedEvent,
            ProviderErrorEvent,
            RetryEvent,
            RecoveredEvent,
            GaveUpEvent,
            CancelledEvent,
            HarnessErrorEvent,
            WaitingForUserEvent,
            RevertEvent,
            RedoEvent,
        )
    }
)
assert set(EVENT_TYPES) == set(EventKind), "every EventKind needs exactly one payload type"


def parse_event(kind: Any, data: Any) -> Event | None:
    """The payload of a stored event row, or ``None`` for an unknown kind or a ``data`` that is not
    a JSON object. Never raises: fields missing or of the wrong type are ``None``."""
    try:
        cls = EVENT_TYPES.get(EventKind(kind))
    except (ValueError, TypeError):
        return None
    if cls is None:
        return None
    return cls.from_data(data)  # type: ignore[return-value]


# -- JSON conversion ------------------------------------------------------------------------------


def _to_json(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_data()
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a record class, read once per class."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _coerce(tp: Any, value: Any) -> Any:
    """``value`` read as type ``tp`` (``X | None``, ``int``, ``float``, ``str``, ``bool``, a
    :class:`Record`, ``tuple[X, ...]``), or ``None`` when it is not one."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(inner[0], value) if len(inner) == 1 else None
    if value is None:
        return None
    if origin is tuple:
        (item, *_rest) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            return None
        items = (_coerce(item, v) for v in value)
        return tuple(v for v in items if v is not None)
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_data(value)
    if tp is bool:
        return value if isinstance(value, bool) else None
    if tp is int:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        return int(value) if isinstance(value, float) and value.is_integer() else None
    if tp is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if tp is str:
        return value if isinstance(value, str) else None
    return None


def written_by(data: Mapping[str, Any] | None) -> str | None:
    """Who wrote a compaction's summary, in words, from its ``summary`` (or ``summary_rejected``)
    event payload: ``extractive summarizer (offline)`` or ``model gpt-4o-mini at api.openai.com``;
    ``None`` when the payload does not say (an event written before it was recorded)."""
    if not isinstance(data, Mapping):
        return None
    name = data.get("summarizer")
    usage = data.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    host = data.get("summarizer_host")
    if usage.get("extractive") is True or name == "extractive":
        return "extractive summarizer (offline)"
    model = usage.get("model") if isinstance(usage.get("model"), str) and usage.get("model") else None
    if model is None and isinstance(name, str) and ":" in name:
        model = name.split(":", 1)[1]
    if model is None:
        return f"summarizer {name}" if isinstance(name, str) and name else None
    return f"model {model} at {host}" if isinstance(host, str) and host else f"model {model}"
