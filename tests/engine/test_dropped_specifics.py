"""Every engine summary (pressure, overflow, manual) records the specifics it dropped on its
``summary`` event, on SQLite and PostgreSQL (docs/compaction.md "Dropped specifics")."""

from __future__ import annotations

import json

import pytest

import engine.compaction.compactor as compactor_module
from engine.compaction.compactor import RunState
from engine.compaction.summarizers.protocol import SummaryRequest, SummaryResult
from engine.core.events import EventKind, PruneEvent, SummaryEvent, parse_event
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.specifics import MAX_DROPPED, DroppedSpecific, expand_grouped

from .conftest import Counting, add, filler, finished_turns, new_thread, route

REQUEST = "Current request: update churn-2026.csv with the owners and report back."
PATH = "/srv/data/churn-2026.csv"


class Terse(Counting):
    """A summary that keeps the current request verbatim and names doc-77, nothing else (like a
    language model that paraphrases)."""

    name = "terse"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        text = f"{request.current_request or ''}\nEarlier: the owner registry is doc-77."
        return SummaryResult(text=text, model="terse", prompt_tokens=10, completion_tokens=10, calls=1, extractive=False)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def make(request: pytest.FixtureRequest):
    """A service factory on each backend."""
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def summary_events(svc, key) -> list[SummaryEvent]:
    """The thread's summary events, each checked to be exactly its stored data once parsed."""
    out = []
    for e in svc.reads.events(key):
        if e.kind != EventKind.SUMMARY:
            continue
        payload = parse_event(e.kind, e.data)
        assert isinstance(payload, SummaryEvent) and payload.to_data() == dict(e.data)
        assert json.loads(json.dumps(e.data)) == dict(e.data)
        out.append(payload)
    return out


def history_with_specifics(svc, key: str) -> None:
    """An old turn naming a path and two ids, then enough finished turns to be over the threshold."""
    new_thread(svc, key)
    add(svc, key, user("Where is the churn export, and who owns it?"), assistant(f"The export is {PATH}; owners are in doc-77 and doc-88."))
    finished_turns(svc, key, 23)


def test_pressure_summary_records_what_it_dropped(make, new_key):
    svc = make(Terse())
    key = new_key("pressure")
    history_with_specifics(svc, key)
    # the running turn: its query_kb result is over the tool-result limit, so it is pruned to a
    # preview that keeps its ids; doc-88 is then on the surface only through that preview
    hits = json.dumps({"results": [{"doc_id": "doc-88", "title": "Owner registry", "content": filler(2600)}]})
    add(svc, key, user(REQUEST), assistant("Looking up the owners.", ToolCall("c1", "query_kb", '{"query": "churn owners"}')))
    (result_id,) = add(svc, key, tool_result("c1", hits, name="query_kb"))
    route(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert out.action == "summarized"
    assert result_id in svc.reads.offloads(key) and "doc-88" in svc.reads.offloads(key)[result_id].preview
    (event,) = summary_events(svc, key)
    # seen: the path and both ids of the summarized range; doc-77 is in the summary, doc-88 in the
    # preview; the path is dropped, and the request names its file, so it is referenced
    assert (event.specifics_seen, event.dropped_specifics, event.dropped_referenced, event.dropped_truncated) == (3, 1, 1, False)
    assert [(d.kind, d.value, d.referenced) for d in event.dropped or ()] == [("path", PATH, True)]
    assert event.specifics_ms is not None and 0 <= event.specifics_ms <= event.duration_ms
    found = event.specifics()
    assert found is not None and found.dropped == (DroppedSpecific("path", PATH, True),)


def test_with_the_extractive_summary_dropped_is_what_its_text_leaves_out(make, new_key):
    svc = make(Counting())  # the offline extractive summarizer: it lists identifiers and paths within its budget
    key = new_key("extractive")
    history_with_specifics(svc, key)
    add(svc, key, user(REQUEST), assistant("Checking."))
    route(svc, key)

    assert svc.steps.compact_for_pressure(key, RunState()).action == "summarized"

    (event,) = summary_events(svc, key)
    summary = svc.reads.compaction_state(key).summary or ""
    assert event.specifics_seen == 3
    assert {d.value for d in event.dropped or ()} == {v for v in (PATH, "doc-77", "doc-88") if v not in expand_grouped(summary)}  # its grouped ids read back


def test_manual_summary_records_and_caps_the_list(make, new_key):
    svc = make(Terse())
    key = new_key("manual")
    new_thread(svc, key)
    many = [f"ticket-{1000 + i}" for i in range(MAX_DROPPED + 40)]
    add(svc, key, user("Where is the churn export?"), assistant(f"The export is {PATH}; owners are in doc-77 and doc-88."))
    add(svc, key, user("List the open tickets."), assistant("Open: " + ", ".join(many)))
    finished_turns(svc, key, 12)
    add(svc, key, user(f"{REQUEST} Also close {many[-1]}."), assistant("Done."))

    result = svc.compaction.compact(key)

    assert result.status == "completed"
    (event,) = summary_events(svc, key)
    assert [e.trigger for e in svc.reads.events(key) if e.kind == EventKind.SUMMARY] == ["manual"]
    # seen: the path, doc-77, doc-88 and the tickets; the summary names doc-77 and the last ticket's
    # request (the request is kept verbatim), so everything else is dropped
    assert event.specifics_seen == 3 + len(many)
    assert event.dropped_specifics == 2 + len(many) - 1 and event.dropped_truncated is True
    listed = [(d.kind, d.value, d.referenced) for d in event.dropped or ()]
    assert len(listed) == MAX_DROPPED
    assert ("path", PATH, True) in listed  # the request names its file: referenced, listed first
    assert event.dropped_referenced == 1
    assert ("identifier", many[-1], True) not in listed  # the summary carries the request that names it


def test_overflow_summary_records_too(make, new_key):
    svc = make(Terse())
    key = new_key("overflow")
    history_with_specifics(svc, key)
    add(svc, key, user(REQUEST), assistant("Working."))
    route(svc, key)

    out = svc.steps.recover_overflow(key, RunState())

    assert out.progressed
    events = summary_events(svc, key)
    assert events and events[0].specifics_seen is not None and events[0].dropped_specifics is not None
    assert [e.trigger for e in svc.reads.events(key) if e.kind == EventKind.SUMMARY] == ["overflow"] * len(events)


def test_a_failing_comparison_never_costs_the_summary(make, new_key, monkeypatch):
    def broken(**_: object) -> None:
        raise RuntimeError("extractor bug")

    monkeypatch.setattr(compactor_module, "dropped_at_compaction", broken)
    svc = make(Terse())
    key = new_key("broken")
    history_with_specifics(svc, key)
    add(svc, key, user(REQUEST), assistant("Working."))
    route(svc, key)

    assert svc.steps.compact_for_pressure(key, RunState()).action == "summarized"

    (event,) = summary_events(svc, key)
    assert (event.specifics_seen, event.dropped_specifics, event.dropped, event.specifics_ms) == (None, None, None, None)
    assert event.specifics() is None and svc.reads.compaction_state(key).summary


def test_a_prune_records_what_its_previews_leave_out(make, new_key):
    """A prune records the dropped specifics a summary records (issue 25; prunes recorded none
    before): the preview keeps the ids of what it replaced, so none of them is among them."""
    svc = make(Terse())
    key = new_key("prune")
    new_thread(svc, key)
    finished_turns(svc, key, 15)
    hits = json.dumps({"results": [{"doc_id": f"doc-{i}", "title": f"Registry {i}", "content": filler(60)} for i in range(40)]})
    add(svc, key, user(REQUEST), assistant("", ToolCall("c1", "query_kb", '{"query": "owners"}')))
    (rid,) = add(svc, key, tool_result("c1", hits, name="query_kb"))
    route(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert out.action == "pruned" and not summary_events(svc, key)
    preview = svc.reads.offloads(key)[rid].preview
    assert all(f"doc-{i}" in preview for i in range(40))
    (event,) = [parse_event(e.kind, e.data) for e in svc.reads.events(key) if e.kind == EventKind.PRUNE]
    assert isinstance(event, PruneEvent) and event.specifics_seen is not None and event.specifics_seen >= 40
    found = event.specifics()
    assert found is not None and not any(d.value.startswith("doc-") for d in found.dropped)
    (result,) = event.pruned or ()
    assert result.message_id == rid and result.specifics_seen is not None and result.left_out is not None
