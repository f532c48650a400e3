"""Pressure compaction (docs/contract.md §2) through the real service on a real SQLite file."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from engine.compaction.compactor import RunState
from engine.compaction.summarizers.protocol import contains_verbatim
from engine.core.events import EventKind, SummaryRejectedEvent, parse_event
from engine.core.messages import META_PRUNED, ToolCall, assistant, tool_result, user
from engine.core.surface import build_surface, envelope_of
from engine.core.units import assert_valid_cut
from engine.service import open_service
from tests import door_ops

from .conftest import (
    CURRENT_REQUEST,
    MODEL,
    POLICY,
    WINDOW,
    Counting,
    Empty,
    Failing,
    Growing,
    Hooked,
    add,
    all_messages,
    assert_surface_valid,
    filler,
    finished_turns,
    new_thread,
    route,
    running_turn,
    thread_state,
)

THRESHOLD = WINDOW * 8 // 10


def assert_events_are_payloads(svc, key) -> list:
    """Every event row of the thread is exactly one payload of its kind: parsing it back and
    writing it again gives the stored ``data`` (no key the payload lacks, none of a wrong type)."""
    events = svc.reads.events(key)
    for e in events:
        payload = parse_event(e.kind, e.data)
        assert payload is not None and payload.kind == e.kind, e
        assert payload.to_data() == dict(e.data), e.kind
        assert e.trigger in payload.triggers, (e.kind, e.trigger)
    return [parse_event(e.kind, e.data) for e in events]


def over_threshold(svc, key, *, turns: int = 23, rounds: int = 1, result_tokens: int = 100) -> None:
    """Finished history plus a running turn, together above the threshold, with no result to prune."""
    new_thread(svc, key)
    finished_turns(svc, key, turns)
    running_turn(svc, key, rounds=rounds, result_tokens=result_tokens)
    route(svc, key)
    assert svc.compaction.status(key).tokens >= THRESHOLD


# -- below the threshold --------------------------------------------------------------------------


def test_below_threshold_does_nothing(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("below"))
    finished_turns(svc, key, 10)
    running_turn(svc, key)
    route(svc, key)
    before = thread_state(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert (out.action, out.reason) == ("none", "below_threshold")
    assert out.tokens_before == out.tokens_after < out.threshold == THRESHOLD
    assert out.generation_after == out.generation_before == 0
    assert counter.calls == 0
    assert thread_state(svc, key) == before  # no event, no history, no offload, state untouched


def test_no_completed_request_does_nothing_even_far_above_threshold(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("unrouted"))
    finished_turns(svc, key, 30)
    rid = door_ops.record_model_request(svc.store, key, provider="sim", model=MODEL)  # pending, never completed
    before = thread_state(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert out.reason == "no_completed_request" and counter.calls == 0
    assert thread_state(svc, key) == before
    door_ops.complete_model_request(svc.store, rid, outcome="ok")
    assert svc.steps.compact_for_pressure(key, RunState()).action == "summarized"


# -- prune alone ----------------------------------------------------------------------------------


def test_prune_alone_is_enough(make_service, new_key, tmp_path: Path):
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("prune"))
    finished_turns(svc, key, 4)
    log = "\n".join(f"2026-11-30T10:{i // 60:02d}:{i % 60:02d} worker-{i % 7} processed batch {i} in {i * 3 % 97} ms" for i in range(400))
    hits = json.dumps(
        {"results": [{"doc_id": f"doc-{i}", "title": f"Owner registry part {i}", "score": 0.9 - i / 100, "content": filler(60)} for i in range(40)]}
    )
    add(
        svc,
        key,
        user(CURRENT_REQUEST),
        assistant("", ToolCall("c-log", "read_log", '{"path": "/var/log/worker.log"}'), ToolCall("c-kb", "query_kb", '{"query": "doc-42"}')),
    )
    log_id, kb_id = add(svc, key, tool_result("c-log", log, name="read_log"), tool_result("c-kb", hits, name="query_kb"))
    route(svc, key)
    before = svc.compaction.status(key)
    assert before.tokens >= THRESHOLD

    out = svc.steps.compact_for_pressure(key, RunState())

    assert (out.action, out.reason) == ("pruned", "prune_enough")
    assert counter.calls == 0 and out.summarizer_calls == 0
    # the surface the compactor predicted before committing is the one the stored state gives
    fresh = svc.store.snapshot(key)
    assert out.measured is not None and out.measured.envelope == envelope_of(fresh, build_surface(fresh))
    assert out.measured.tokens == out.tokens_after == svc.compaction.status(key).tokens
    assert out.generation_after == before.generation + 1 == svc.reads.compaction_state(key).generation
    assert out.tokens_after < THRESHOLD <= out.tokens_before
    assert svc.reads.compaction_state(key).boundary is None  # nothing summarized

    offloads = svc.reads.offloads(key)
    assert set(offloads) == {log_id, kb_id}
    originals = {log_id: log, kb_id: hits}
    surface = {m.id: m for m in build_surface(svc.store.snapshot(key)).messages}
    for mid, off in offloads.items():
        sha = hashlib.sha256(originals[mid].encode("utf-8")).hexdigest()
        assert off.sha256 == sha
        path = Path(off.path)
        assert path.parent == tmp_path / "workdir" and sha in path.name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
        assert svc.reads.read_original(off) == originals[mid]
        shown = surface[mid]
        assert shown.content == off.preview and shown.metadata[META_PRUNED] == sha
        assert sha[:12] in shown.content and len(shown.content) < len(originals[mid])  # the frame names the file in short
    assert "doc-0" in surface[kb_id].content  # structured query_kb preview keeps identifiers
    (event,) = [e for e in svc.reads.events(key) if e.kind == "prune"]
    assert {p["message_id"] for p in event.data["pruned"]} == {log_id, kb_id}
    (prune,) = assert_events_are_payloads(svc, key)
    assert prune.kind is EventKind.PRUNE and prune.failed == () and (prune.generation_before, prune.generation_after) == (0, 1)
    assert {(p.message_id, p.tool, p.sha256, p.path) for p in prune.pruned} == {(i, o.tool_name, o.sha256, o.path) for i, o in offloads.items()}
    assert [h.kind for h in svc.reads.history(key)] == ["prune"]
    # the raw messages are never edited
    assert {m.id: m.content for m in all_messages(svc, key)}[log_id] == log


# -- prune not enough: one rolling summary -------------------------------------------------------


def test_prune_not_enough_one_summary(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("summary"))
    finished_turns(svc, key, 23)
    add(svc, key, user(CURRENT_REQUEST), assistant("Reading the export.", ToolCall("c1", "export", "{}")))
    big_id = add(svc, key, tool_result("c1", filler(3000, "export"), name="export"))[0]
    route(svc, key)
    count_before = svc.reads.message_count(key)

    out = svc.steps.compact_for_pressure(key, RunState())

    state = svc.reads.compaction_state(key)
    assert (out.action, out.reason) == ("summarized", "summarized")
    assert counter.calls == 1 == out.summarizer_calls
    assert out.generation_after == 2 == state.generation  # the prune's +1 and the summary's +1
    assert [h.kind for h in svc.reads.history(key)] == ["prune", "summary"]
    assert big_id in svc.reads.offloads(key)
    assert_valid_cut(all_messages(svc, key), state.boundary, running_turn=True)
    assert state.boundary < big_id and state.compact_count == 1
    assert contains_verbatim(state.summary, CURRENT_REQUEST)
    assert out.tokens_after < THRESHOLD and out.tokens_after == svc.compaction.status(key).tokens
    assert svc.reads.message_count(key) == count_before  # raw messages untouched
    # the summarizer saw the rolling inputs: the compacted range (pruned) and the current request
    (req,) = counter.requests
    assert req.current_request == CURRENT_REQUEST and req.previous_summary is None
    assert req.running_turn is False  # only finished turns were taken
    assert req.messages[-1].id == state.boundary
    # the surface starts with a real user message: no synthetic one
    surface = build_surface(svc.store.snapshot(key))
    assert surface.messages[0].role == "user" and surface.messages[0].id is not None
    assert not any(m.is_synthetic for m in surface.messages)
    events = [e.kind for e in svc.reads.events(key)]
    assert events == ["prune", "summary"]
    prune, summary = assert_events_are_payloads(svc, key)
    assert summary.tokens_after == out.tokens_after and summary.boundary_after == state.boundary == summary.selected_boundary
    assert summary.usage is not None and summary.usage.extractive is True and summary.summarizer == "counting"


def test_the_summary_request_carries_the_identifier_room(make_service, new_key):
    """The summarizer gets the summary budget and, for identifier lines only, the rest of the budget
    rule's total (issue 25: ⌊window / 16⌋ + 12 per identifier carried, at most 3/5 of the target)
    beside the current request copied verbatim (16 tokens), within the room under the target; window
    8,000, no identifier in the range: 516 = 400 of prose + 116)."""
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("idroom"))
    finished_turns(svc, key, 23)
    add(svc, key, user(CURRENT_REQUEST), assistant("Reading the export.", ToolCall("c1", "export", "{}")))
    add(svc, key, tool_result("c1", filler(3000, "export"), name="export"))
    route(svc, key)
    assert svc.steps.compact_for_pressure(key, RunState()).action == "summarized"
    (req,) = counter.requests
    assert (req.max_tokens, req.identifier_tokens, req.total_tokens) == (400, 116, 516)


def test_second_summary_is_rolling(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_key("rolling")
    over_threshold(svc, key)
    svc.steps.compact_for_pressure(key, RunState())
    first = svc.reads.compaction_state(key)
    finished_turns(svc, key, 30)  # more history arrives (the old running turn is finished now)
    add(svc, key, user("Next: also list doc-43."))
    seen = len(counter.requests)
    out = svc.steps.compact_for_pressure(key, RunState())
    second = svc.reads.compaction_state(key)
    assert out.action == "summarized" and second.boundary > first.boundary
    assert counter.requests[seen].previous_summary == first.summary
    assert contains_verbatim(second.summary, "Next: also list doc-43.")


# -- rejected summaries ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("summarizer", "reason"),
    [(Failing(), "summarizer_failed"), (Empty(), "empty"), (Growing(), "not_smaller")],
    ids=["fails", "empty", "not-smaller"],
)
def test_rejected_summary_persists_nothing(make_service, new_key, summarizer, reason):
    svc = make_service(summarizer)
    key = new_key("reject")
    over_threshold(svc, key, rounds=2)
    before = thread_state(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert summarizer.calls == 1
    assert out.action == "none" and out.reason == reason and out.generation_after == out.generation_before
    after = thread_state(svc, key)
    assert {k: v for k, v in after.items() if k != "events"} == {k: v for k, v in before.items() if k != "events"}
    kinds = [e.kind for e in after["events"]]
    assert kinds == ["summary_rejected", "breaker_tripped"]
    rejected = after["events"][0]
    assert rejected.data["reason"] == reason and rejected.trigger == "pressure"
    assert rejected.data["generation_after"] == rejected.data["generation_before"] == 0
    if reason == "summarizer_failed":
        assert rejected.data["error_code"] == "http_error"
    parsed, breaker = assert_events_are_payloads(svc, key)
    assert isinstance(parsed, SummaryRejectedEvent) and breaker.reason == reason
    # the keys that exist only in some cases: the error for a failed call, the cost for a rejected text
    present = {k for k in SummaryRejectedEvent.optional() if k in rejected.data}
    assert present == ({"error_code", "error_message"} if reason == "summarizer_failed" else {"usage", "summary_tokens"})
    assert_surface_valid(svc, key)
    assert build_surface(svc.store.snapshot(key)).summary is None


def test_cas_conflict_loser_writes_nothing(make_service, new_key):
    """While our summarizer runs, another writer compacts the thread first: our result is dropped."""
    key = new_key("cas")
    winner = make_service(Counting())
    seen: dict[str, object] = {}

    def compact_first(call: int) -> None:
        if call == 0:
            seen["result"] = winner.compaction.compact(key)
            seen["state"] = thread_state(winner, key)

    loser_summarizer = Hooked(compact_first)
    loser = make_service(loser_summarizer)
    over_threshold(loser, key)

    out = loser.steps.compact_for_pressure(key, RunState())

    assert seen["result"].status == "completed"
    assert loser_summarizer.calls == 1 and out.summarizer_calls == 1
    after = thread_state(loser, key)
    won = seen["state"]
    assert after["state"] == won["state"] and after["history"] == won["history"]
    assert after["history"] and {h.trigger for h in after["history"]} == {"manual"}  # nothing from the loser
    new_events = after["events"][len(won["events"]) :]
    assert new_events[0].kind == "summary_rejected" and new_events[0].data["reason"] == "cas_conflict"
    assert new_events[0].data["boundary_before"] is None
    assert {k for k in SummaryRejectedEvent.optional() if k in new_events[0].data} == {"error_message"}
    assert_events_are_payloads(loser, key)
    assert out.generation_after == out.generation_before == 0  # the loser measured generation 0 and did not move it
    assert_surface_valid(loser, key)


# -- the synthetic user message -------------------------------------------------------------------


def test_boundary_inside_running_turn_gets_synthetic_user_message(make_service, new_key):
    counter = Counting()
    policy = {**POLICY, "default": {**POLICY["default"], "loop_recent_tool_rounds": 1}}
    svc = make_service(counter, policy)
    key = new_thread(svc, new_key("synthetic"))
    running_turn(svc, key, rounds=30, result_tokens=1100)  # enough that pruning the older results is not enough
    route(svc, key)
    count_before = svc.reads.message_count(key)

    out = svc.steps.compact_for_pressure(key, RunState())

    state = svc.reads.compaction_state(key)
    msgs = all_messages(svc, key)
    assert out.action == "summarized" and counter.calls >= 1
    assert all(r.running_turn for r in counter.requests)  # the range lies in the running turn
    assert msgs[0].id < state.boundary < msgs[-1].id  # the user message went, later rounds stayed
    assert_valid_cut(msgs, state.boundary, running_turn=True)
    assert contains_verbatim(state.summary, CURRENT_REQUEST)
    surface = build_surface(svc.store.snapshot(key))
    first = surface.messages[0]
    assert first.role == "user" and first.metadata.get("synthetic") is True and first.id is None
    assert surface.messages[1].role == "assistant"
    assert [m for m in surface.messages if m.is_synthetic] == [first]
    # never persisted
    assert svc.reads.message_count(key) == count_before
    assert not any(m.metadata.get("synthetic") for m in all_messages(svc, key))


# -- ephemeral system messages ----------------------------------------------------------------------


def test_ephemeral_messages_survive_the_reload(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("ephemeral")
    over_threshold(svc, key)
    run = RunState(run_id=None)
    note = run.add_ephemeral("Background task finished: report-7.pdf is ready in the workspace.")

    out = svc.steps.compact_for_pressure(key, run)

    assert out.action == "summarized"
    measured = svc.steps.measure(key, ephemeral=run.ephemeral)
    assert measured.surface.summary is not None
    assert measured.surface.messages[-1] == note and measured.surface.messages[-1].is_ephemeral
    assert out.tokens_after == measured.tokens  # the whole envelope, the note included
    (summary_event,) = [e for e in svc.reads.events(key) if e.kind == "summary"]
    assert summary_event.data["tokens_after"] == out.tokens_after
    assert not any(m.content == note.content for m in all_messages(svc, key))  # never persisted


# -- the breaker and the round cap --------------------------------------------------------------


def test_breaker_stops_repeated_attempts_within_a_run(make_service, new_key):
    summarizer = Failing()
    svc = make_service(summarizer)
    key = new_key("breaker")
    over_threshold(svc, key)
    run = RunState()

    first = svc.steps.compact_for_pressure(key, run)
    assert summarizer.calls == 1 and run.breaker_tripped and first.reason == "summarizer_failed"

    second = svc.steps.compact_for_pressure(key, run)
    assert summarizer.calls == 1 and second.summarizer_calls == 0 and second.reason == "breaker_tripped"

    third = svc.steps.compact_for_pressure(key, RunState())  # a new run may try again
    assert summarizer.calls == 2 and third.summarizer_calls == 1
    assert [e.kind for e in svc.reads.events(key)] == ["summary_rejected", "breaker_tripped"] * 2
    breaker = assert_events_are_payloads(svc, key)[1]
    assert (breaker.reason, breaker.threshold, breaker.generation) == ("summarizer_failed", THRESHOLD, 0) and breaker.tokens >= THRESHOLD


@pytest.mark.parametrize("cap", [1, 2])
def test_max_compaction_rounds_caps_summary_calls(make_service, new_key, cap):
    """Far above the threshold, one summary call sees at most what a same-size model can read, so reaching the
    target takes several rounds; the cap stops after ``cap`` summarizer calls."""
    counter = Counting()
    svc = make_service(counter, {**POLICY, "default": {**POLICY["default"], "loop_max_compaction_rounds": cap}})
    key = new_key("rounds")
    over_threshold(svc, key, turns=100)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert counter.calls == cap == out.summarizer_calls
    assert out.reason == "max_rounds" and out.tokens_after > svc.policies.resolve("sim", MODEL).target_tokens
    assert len([h for h in svc.reads.history(key) if h.kind == "summary"]) == cap


def test_uncapped_rounds_need_more_than_two_calls(make_service, new_key):
    """The scenario above really needs more rounds (so the cap is what stopped it)."""
    counter = Counting()
    svc = make_service(counter)
    key = new_key("rounds")
    over_threshold(svc, key, turns=100)
    out = svc.steps.compact_for_pressure(key, RunState())
    assert counter.calls > 2 and out.reason == "summarized" and out.tokens_after < THRESHOLD


def test_each_summary_call_fits_a_same_window_model_with_the_previous_summary_and_the_budget(make_service, new_key):
    """The batch limit: the messages one call reads, the previous summary it rolls and the budget a
    model writes fit 90 % of the window (a single unit above that is taken whole; none here); the
    identifier room is not reserved, the extractive summary's id lines are not written by a model."""
    from engine.core.meter import default_meter

    counter = Counting()
    svc = make_service(counter)
    key = new_key("batches")
    over_threshold(svc, key, turns=100)
    svc.steps.compact_for_pressure(key, RunState())
    meter = default_meter(MODEL)
    assert len(counter.requests) > 2
    for req in counter.requests:
        read = sum(meter.count_message(m) for m in req.messages)
        previous = meter.count_text(req.previous_summary) if req.previous_summary else 0
        assert read + previous + req.max_tokens <= WINDOW * 9 // 10
    # rolling calls read less than the first: the previous summary takes its share
    first, later = counter.requests[0], counter.requests[1:-1]
    assert later and all(sum(map(meter.count_message, r.messages)) < sum(map(meter.count_message, first.messages)) for r in later)


def test_nothing_to_compact_does_not_trip_the_breaker(make_service, new_key):
    """A summary that advanced, then nothing left outside the protected recent rounds, is not a
    failed attempt (§2.8): once more rounds arrive in the same run, older rounds can be summarized."""
    counter = Counting()
    svc = make_service(counter, {**POLICY, "default": {**POLICY["default"], "loop_recent_tool_rounds": 3}})
    key = new_thread(svc, new_key("protected"))
    finished_turns(svc, key, 6)
    running_turn(svc, key, rounds=3, result_tokens=1850)  # the three protected rounds alone exceed the target
    route(svc, key)
    run = RunState()

    first = svc.steps.compact_for_pressure(key, run)
    assert (first.action, first.reason, first.summarizer_calls) == ("summarized", "nothing_to_compact", 1)
    assert not run.breaker_tripped and "breaker_tripped" not in [e.kind for e in svc.reads.events(key)]

    for r in (3, 4, 5, 6):  # the same run goes on: more rounds than pruning the unprotected ones can absorb
        call = ToolCall(f"call-{r}", "query_kb", "{}")
        add(svc, key, assistant(f"Step {r}.", call), tool_result(call.id, filler(1850, f"result {r}"), name="query_kb"))
    boundary = svc.reads.compaction_state(key).boundary
    second = svc.steps.compact_for_pressure(key, run)
    assert second.action == "summarized" and second.summarizer_calls >= 1 and counter.calls >= 2
    assert svc.reads.compaction_state(key).boundary > boundary
    assert_valid_cut(all_messages(svc, key), svc.reads.compaction_state(key).boundary, running_turn=True)


def test_prune_write_failure_is_fail_closed(sqlite_url, new_key, tmp_path: Path):
    """The Workdir cannot be written: nothing is replaced or recorded as pruned (§2.3)."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the workdir should be")
    svc = open_service(sqlite_url, workdir=blocker / "wd", summarizer=Counting(), policies=POLICY)
    try:
        key = new_thread(svc, new_key("prune-fail"))
        finished_turns(svc, key, 4)
        add(svc, key, user(CURRENT_REQUEST), assistant("", ToolCall("c1", "read_log", "{}")))
        (big,) = add(svc, key, tool_result("c1", filler(6000, "log"), name="read_log"))
        route(svc, key)

        out = svc.steps.compact_for_pressure(key, RunState())

        assert svc.reads.offloads(key) == {} and not [h for h in svc.reads.history(key) if h.kind == "prune"]
        failed = [e for e in svc.reads.events(key) if e.kind == "prune_failed"]
        assert failed and failed[0].data["failed"][0]["message_id"] == big
        assert_events_are_payloads(svc, key)
        shown = {m.id: m for m in build_surface(svc.store.snapshot(key)).messages}
        assert shown[big].content == filler(6000, "log") and META_PRUNED not in shown[big].metadata
        assert out.action != "pruned"
    finally:
        svc.close()


def test_summarizer_sees_the_pruned_surface_and_events_carry_the_record(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("pruned-range"))
    add(svc, key, user("First: fetch the export."), assistant("", ToolCall("c0", "export", "{}")))
    (old_big,) = add(svc, key, tool_result("c0", filler(3000, "export"), name="export"))
    add(svc, key, assistant("Exported."))
    finished_turns(svc, key, 21)
    running_turn(svc, key)
    route(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert out.action == "summarized" and counter.calls == 1
    seen = {m.id: m for m in counter.requests[0].messages}
    off = svc.reads.offloads(key)[old_big]
    assert seen[old_big].content == off.preview and seen[old_big].metadata[META_PRUNED] == off.sha256
    (prune,) = [e for e in svc.reads.events(key) if e.kind == "prune"]
    (summary,) = [e for e in svc.reads.events(key) if e.kind == "summary"]
    state = svc.reads.compaction_state(key)
    d = summary.data
    assert prune.data["tokens_before"] == out.tokens_before > prune.data["tokens_after"] == d["tokens_before"]
    assert (d["tokens_after"], d["threshold"]) == (out.tokens_after, THRESHOLD)
    assert (d["boundary_before"], d["boundary_after"]) == (None, state.boundary)
    assert (d["generation_before"], d["generation_after"]) == (1, 2) and d["calls"] == 1
    assert d["summary_tokens"] == state.summary_tokens and "usage" in d and d["duration_ms"] >= 0


def test_a_crashing_summarizer_is_a_rejection_not_a_crash(tmp_path) -> None:
    """A summarizer that raises something other than SummarizerError (a plug-in's bug) loses nothing:
    the attempt is rejected with a clear reason and the run carries on (§2.9: warn and continue)."""
    from engine.compaction.compactor import RunState
    from engine.core.messages import ToolCall, assistant, tool_result, user
    from engine.service import open_service

    class Crashing:
        name = "crashing"

        def summarize(self, request):
            raise RuntimeError("boom")

    svc = open_service(str(tmp_path / "c.db"), workdir=tmp_path / "wd", summarizer=Crashing(), create=True,
                       policies={"context_window": 4000, "default": {"tool_result_limit_tokens": 100000, "preview_tokens": 50}})
    try:
        svc.runs.create_thread("t", provider="sim", model="m")
        for i in range(30):
            svc.runs.append_message("t", user(f"question {i} " + "words " * 120))
            svc.runs.append_message("t", assistant("", ToolCall(f"c{i}", "shell", "{}")))
            # short enough that no stale result is pruned first (a 50-token preview holds the frame now)
            svc.runs.append_message("t", tool_result(f"c{i}", "output " * 20, name="shell"))
            svc.runs.append_message("t", assistant(f"answer {i}"))
        rid = door_ops.record_model_request(svc.store, "t", provider="sim", model="m", estimated_tokens=1)
        door_ops.complete_model_request(svc.store, rid, outcome="ok")
        before = svc.reads.compaction_state("t")
        out = svc.compactor.pressure("t", RunState())
        assert out.reason == "summarizer_failed"
        assert svc.reads.compaction_state("t") == before
        (ev,) = [e for e in svc.reads.events("t") if e.kind == "summary_rejected"]
        assert ev.data["error_code"] == "summarizer_crashed" and "boom" in ev.data["error_message"]
        assert_events_are_payloads(svc, "t")
    finally:
        svc.close()


def test_older_mid_size_results_are_pruned_before_any_summary_and_keep_their_ids(make_service, new_key):
    """Results under the limit but before the protected tail are offloaded when their preview is
    smaller: under pressure this alone can be enough, and costs no summarizer call (§2.3)."""
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("stale"))
    add(svc, key, user(CURRENT_REQUEST))
    for r in range(8):  # 8 results of ~1,000 tokens: each under the 2,000 limit, together over the threshold
        call = ToolCall(f"kb-{r}", "query_kb", json.dumps({"query": f"doc-42 owner, try {r}"}))
        rows = [{"doc_id": f"doc-{r}{i:02d}", "title": f"Owners list {r}.{i}", "content": filler(150)} for i in range(5)]
        add(svc, key, assistant(f"Searching ({r}).", call), tool_result(call.id, json.dumps({"results": rows}), name="query_kb"))
    route(svc, key)
    before = svc.compaction.status(key)
    assert before.tokens >= before.threshold

    out = svc.steps.compact_for_pressure(key, RunState())

    assert (out.action, out.reason, counter.calls) == ("pruned", "prune_enough", 0)
    pruned = svc.reads.offloads(key)
    assert 0 < len(pruned) < 8  # the newest rounds (the protected tail) stay whole
    shown = "\n".join(m.content for m in build_surface(svc.store.snapshot(key)).messages)
    # every id still visible (a bare cell of a compact record line since issue 25, not a quoted JSON value)
    assert all(re.search(rf"(?<![\w-])doc-{r}{i:02d}(?![\w-])", shown) for r in range(8) for i in range(5))
