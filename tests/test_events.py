"""The event vocabulary: docs/events.md agrees with the payload types; payloads survive a JSON round
trip; readers never raise on whatever a database holds."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from engine.core.events import (
    EVENT_TYPES,
    Event,
    EventKind,
    ProviderErrorEvent,
    PrunedResult,
    PruneEvent,
    Record,
    RecoveredEvent,
    RetryEvent,
    SummaryRejectedEvent,
    SummaryUsage,
    parse_event,
    write_event,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"


# -- docs/events.md ------------------------------------------------------------------------------


def _sections(level: str) -> dict[str, str]:
    """Heading text → the section's body, for headings of ``level`` (## / ###)."""
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(rf"^{level} (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _kind_sections() -> dict[str, str]:
    """The sections whose heading is a backticked name: one per kind."""
    return {h.strip("`"): body for h, body in _sections("##").items() if re.fullmatch(r"`\w+`", h)}


def _rows(body: str) -> list[tuple[str, str]]:
    """(key, type cell) of every ``| `key` | type | meaning |`` row."""
    return [(m[1], m[2].strip()) for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", body, flags=re.M)]


def _doc_type(tp: Any) -> str:
    """How docs/events.md names a field type."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _doc_type(inner)
    if typing.get_origin(tp) is tuple:
        return "list of " + _doc_type(typing.get_args(tp)[0])
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    return names.get(tp) or tp.__name__


def _expected_rows(cls: type[Record]) -> list[tuple[str, str]]:
    hints = typing.get_type_hints(cls)
    optional = {f.name for f in dataclasses.fields(cls) if f.metadata}  # type: ignore[arg-type]
    return [(f.name, _doc_type(hints[f.name]) + (", only when set" if f.name in optional else "")) for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


def _entry_types() -> set[type[Record]]:
    """Every Record type a payload field holds (directly or as list elements)."""
    found: set[type[Record]] = set()
    for cls in EVENT_TYPES.values():
        for tp in typing.get_type_hints(cls).values():
            stack = [tp]
            while stack:
                t = stack.pop()
                stack.extend(typing.get_args(t))
                if isinstance(t, type) and issubclass(t, Record):
                    found.add(t)
    return found


def test_every_kind_has_exactly_one_payload_type() -> None:
    assert set(EVENT_TYPES) == set(EventKind)
    assert all(cls.kind is kind for kind, cls in EVENT_TYPES.items())
    assert len(set(EVENT_TYPES.values())) == len(EventKind)


def test_docs_list_every_kind_and_no_other() -> None:
    documented = list(_kind_sections())
    assert sorted(documented) == sorted(k.value for k in EventKind)
    assert len(documented) == len(set(documented))


@pytest.mark.parametrize("kind", list(EventKind), ids=str)
def test_docs_describe_each_payload_exactly(kind: EventKind) -> None:
    body = _kind_sections()[kind.value]
    cls = EVENT_TYPES[kind]
    assert re.search(rf"^Payload `{cls.__name__}`\.", body, flags=re.M), f"{kind}: payload type not named"
    triggers = re.search(r"Triggers: (.+?)\.\n", body, flags=re.S)
    assert triggers, f"{kind}: no Triggers line"
    named = [None if t == "null" else t for t in re.findall(r"`([a-z_]+)`", triggers[1])]
    assert sorted(named, key=str) == sorted(cls.triggers, key=str), kind
    assert _rows(body) == _expected_rows(cls), f"{kind}: the key table differs from {cls.__name__}"


def test_docs_describe_every_entry_object() -> None:
    entries = _sections("###")
    for cls in _entry_types():
        assert cls.__name__ in entries, cls.__name__
        assert _rows(entries[cls.__name__]) == _expected_rows(cls), cls.__name__


# -- writing ---------------------------------------------------------------------------------------


def test_to_data_writes_every_key_and_leaves_out_only_the_optional_unknowns() -> None:
    data = RetryEvent(attempt=1, failed_step=2, next_step=3).to_data()
    assert list(data) == ["attempt", "failed_step", "next_step", "tokens_before", "tokens_after", "generation_before", "generation_after", "summarizer_calls"]
    assert data["tokens_before"] is None  # unknown, written as null
    assert RetryEvent(recovery_error="OSError: disk").to_data()["recovery_error"] == "OSError: disk"
    nested = PruneEvent(pruned=(PrunedResult(message_id=4, tool="shell"),), failed=()).to_data()
    assert nested["pruned"] == [{"message_id": 4, "tool": "shell", "sha256": None, "path": None, "original_tokens": None, "preview_tokens": None}]
    assert nested["failed"] == [] and json.loads(json.dumps(nested)) == nested
    rejected = SummaryRejectedEvent(reason="empty", usage=SummaryUsage(http_requests=0, extractive=True)).to_data()
    assert rejected["usage"]["extractive"] is True and "error_code" not in rejected and "summary_tokens" not in rejected


class _Sink:
    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def add_event(self, kind, data, *, trigger=None, run_id=None) -> int:
        self.rows.append((kind, data, trigger, run_id))
        return len(self.rows)


def test_write_event_records_kind_data_trigger_and_run() -> None:
    sink = _Sink()
    event = ProviderErrorEvent(error_code="RATE_LIMITED", ephemeral=("note",))
    assert write_event(sink, event, trigger="provider", run_id=7) == 1
    ((kind, data, trigger, run_id),) = sink.rows
    assert kind is EventKind.PROVIDER_ERROR and data == event.to_data() and (trigger, run_id) == ("provider", 7)
    assert data["ephemeral"] == ["note"]


@pytest.mark.parametrize(("event", "bad"), [(RetryEvent(), None), (RetryEvent(), "pressure"), (ProviderErrorEvent(), "manual"), (EVENT_TYPES[EventKind.WAITING_FOR_USER](), "overflow")])
def test_write_event_refuses_a_trigger_the_kind_is_not_written_with(event: Event, bad: str | None) -> None:
    sink = _Sink()
    with pytest.raises(ValueError, match=event.kind.value):
        write_event(sink, event, trigger=bad)
    assert sink.rows == []


# -- round trip --------------------------------------------------------------------------------


def _values(tp: Any) -> st.SearchStrategy[Any]:
    """Values of a field type, ``None`` included (every field may be unknown)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return st.none() | _values(inner)
    if typing.get_origin(tp) is tuple:
        item = typing.get_args(tp)[0]
        return st.lists(_present(item), max_size=3).map(tuple)
    return _present(tp)


def _present(tp: Any) -> st.SearchStrategy[Any]:
    if isinstance(tp, type) and issubclass(tp, Record):
        return _records(tp)
    return {
        int: st.integers(min_value=-(2**53), max_value=2**53),
        float: st.floats(allow_nan=False, allow_infinity=False),
        str: st.text(max_size=20),
        bool: st.booleans(),
    }[tp]


def _records(cls: type[Record]) -> st.SearchStrategy[Record]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _values(hints[f.name]) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


_payloads = st.sampled_from(list(EVENT_TYPES.values())).flatmap(_records)


@settings(max_examples=300, deadline=None)
@given(_payloads)
def test_to_data_and_parse_event_round_trip_through_json(event: Event) -> None:
    stored = json.loads(json.dumps(event.to_data(), allow_nan=False))
    assert parse_event(event.kind.value, stored) == event
    assert parse_event(event.kind, stored) == event  # the enum member works as well as its value


# -- readers never raise ---------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_keys = st.sampled_from(sorted({k for cls in EVENT_TYPES.values() for k in cls.data_keys()} | {"usage", "pruned", "failed", "message_id", "tool", "extractive"}))
_garbage_data = st.dictionaries(_keys | st.text(max_size=8), _json, max_size=8) | _json | st.builds(object) | st.binary(max_size=4)
_garbage_kind = st.sampled_from([k.value for k in EventKind]) | st.text(max_size=12) | _json | st.builds(object)


def _well_typed(value: Any, tp: Any) -> bool:
    if value is None:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _well_typed(value, inner)
    if typing.get_origin(tp) is tuple:
        return isinstance(value, tuple) and all(v is not None and _well_typed(v, typing.get_args(tp)[0]) for v in value)
    if isinstance(tp, type) and issubclass(tp, Record):
        hints = typing.get_type_hints(tp)
        return isinstance(value, tp) and all(_well_typed(getattr(value, f.name), hints[f.name]) for f in dataclasses.fields(value))  # type: ignore[arg-type]
    if tp is int:
        return type(value) is int
    if tp is float:
        return type(value) is float
    return type(value) is tp


@settings(max_examples=500, deadline=None)
@given(_garbage_kind, _garbage_data)
def test_parse_event_never_raises_and_returns_only_well_typed_fields(kind: Any, data: Any) -> None:
    event = parse_event(kind, data)
    if event is None:
        return
    assert isinstance(event, EVENT_TYPES[EventKind(kind)])
    assert _well_typed(event, type(event))


def test_parse_event_on_wrong_shapes() -> None:
    assert parse_event("no_such_kind", {"tokens": 1}) is None
    assert parse_event(["prune"], {}) is None and parse_event(None, {}) is None
    assert parse_event("prune", ["not", "an", "object"]) is None and parse_event("prune", None) is None
    assert parse_event("prune", {}) == PruneEvent()  # every key missing: all unknown
    odd = parse_event(
        "prune",
        {
            "tokens_before": "12",  # a string is not a count
            "tokens_after": True,  # nor is a boolean
            "threshold": 6400.0,  # an integral number is
            "generation_before": 1.5,
            "duration_ms": 3,
            "pruned": [{"message_id": 3, "tool": 7}, "junk", None, 4],
            "failed": {"message_id": 1},
            "unknown_key": {"ignored": True},
        },
    )
    assert odd == PruneEvent(tokens_before=None, tokens_after=None, threshold=6400, generation_before=None, duration_ms=3.0, pruned=(PrunedResult(message_id=3),), failed=None)
    assert parse_event("provider_error", {"ephemeral": ["a", 1, None, "b"], "inband": 1, "status": None}) == ProviderErrorEvent(ephemeral=("a", "b"))
    assert parse_event("summary_rejected", {"usage": "lots"}) == SummaryRejectedEvent(usage=None)
