"""Manual compaction (§4) through the real service on a real SQLite file."""

from __future__ import annotations

import pytest

from engine.compaction.summarizers.protocol import contains_verbatim
from engine.core.errors import CannotCompact, ThreadBusy
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.surface import build_surface
from engine.core.units import assert_valid_cut

from .conftest import (
    WINDOW,
    Counting,
    Failing,
    Growing,
    add,
    all_messages,
    assert_surface_valid,
    filler,
    finished_turns,
    new_thread,
    thread_state,
)


def make_busy(svc, key: str, reason: str) -> None:
    """Put the thread into one of the three busy states."""
    if reason == "running":
        svc.runs.start_run(key)
    elif reason == "waiting_for_user":
        svc.runs.interrupt_run(key, svc.runs.start_run(key))
    else:
        svc.runs.queue_request(key, "Please also check doc-43.")
    assert svc.reads.thread(key).busy_reason == reason


def long_thread(svc, key: str, turns: int = 20) -> None:
    new_thread(svc, key)
    finished_turns(svc, key, turns)
    add(svc, key, user("Last question: who owns doc-42?"))


@pytest.mark.parametrize("reason", ["running", "waiting_for_user", "queued"])
def test_busy_thread_is_refused_and_nothing_changes(make_service, new_key, reason):
    counter = Counting()
    svc = make_service(counter)
    key = new_key("busy")
    long_thread(svc, key)
    make_busy(svc, key, reason)
    before = thread_state(svc, key)

    with pytest.raises(ThreadBusy) as caught:
        svc.compaction.compact(key)

    assert caught.value.code == "thread_busy" and caught.value.reason == reason
    assert caught.value.to_json()["error"] == {"code": "thread_busy", "message": caught.value.message, "reason": reason}
    assert counter.calls == 0
    assert thread_state(svc, key) == before  # nothing queued, nothing written, no event


def test_idle_again_after_the_run_finishes(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("idle-again")
    long_thread(svc, key)
    run = svc.runs.start_run(key)
    with pytest.raises(ThreadBusy):
        svc.compaction.compact(key)
    svc.runs.finish_run(key, run)
    assert svc.compaction.compact(key).status == "completed"


@pytest.mark.parametrize("turns", [0, 1, 3])
def test_insufficient_history_is_a_no_op(make_service, new_key, turns):
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("short"))
    finished_turns(svc, key, turns)  # 3 turns (~900 tokens) all fit the retained tail (1280)
    before = thread_state(svc, key)

    r = svc.compaction.compact(key)

    assert (r.status, r.reason) == ("no_op", "insufficient_history")
    assert r.before_tokens == r.after_tokens == svc.compaction.status(key).tokens
    assert (r.compacted_messages, r.boundary, r.generation, r.summarizer_calls) == (0, None, 0, 0)
    assert counter.calls == 0
    assert thread_state(svc, key) == before


def test_completed_result_fields(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_key("manual")
    long_thread(svc, key)
    count = svc.reads.message_count(key)

    r = svc.compaction.compact(key)

    state = svc.reads.compaction_state(key)
    msgs = all_messages(svc, key)
    assert r.status == "completed" and r.reason is None
    assert r.summarizer_calls == counter.calls >= 1
    assert r.boundary == state.boundary and r.generation == state.generation == r.summarizer_calls
    assert r.compacted_messages == sum(1 for m in msgs if m.id <= r.boundary)
    assert r.after_tokens == svc.compaction.status(key).tokens < r.before_tokens
    assert_valid_cut(msgs, r.boundary, running_turn=False)
    assert contains_verbatim(state.summary, "Last question: who owns doc-42?")
    assert svc.reads.message_count(key) == count
    history = svc.reads.history(key)
    assert [(h.kind, h.trigger) for h in history] == [("manual", "manual")] * r.summarizer_calls
    assert history[0].boundary_before is None and history[-1].boundary_after == r.boundary
    assert [e.kind for e in svc.reads.events(key)] == ["summary"] * r.summarizer_calls
    # the retained tail stays verbatim and the surface starts with a user message
    surface = build_surface(svc.store.snapshot(key))
    assert surface.messages[0].role == "user" and not any(m.is_synthetic for m in surface.messages)
    assert surface.messages[-1].content == "Last question: who owns doc-42?"
    # everything before the tail is summarized now: a second press is a no-op
    again = svc.compaction.compact(key)
    assert (again.status, again.reason, again.generation) == ("no_op", "insufficient_history", r.generation)


@pytest.mark.parametrize(("summarizer", "reason"), [(Failing(), "summarizer_failed"), (Growing(), "not_smaller")])
def test_rejected_manual_summary_changes_nothing_but_records_why(make_service, new_key, summarizer, reason):
    svc = make_service(summarizer)
    key = new_key("manual-reject")
    long_thread(svc, key)
    before = thread_state(svc, key)

    with pytest.raises(CannotCompact) as caught:
        svc.compaction.compact(key)

    assert caught.value.code == "summary_rejected" and caught.value.reason == reason
    after = thread_state(svc, key)
    assert {k: v for k, v in after.items() if k != "events"} == {k: v for k, v in before.items() if k != "events"}
    (event,) = after["events"]
    assert (event.kind, event.trigger, event.data["reason"]) == ("summary_rejected", "manual", reason)
    assert_surface_valid(svc, key)


# -- idle agent trajectories (one request, hundreds of tool rounds) --------------------------------

TRAJECTORY_REQUEST = "Fix the failing refund test in tests/test_refunds.py and explain the cause."


def trajectory(svc, key: str, rounds: int = 300) -> None:
    """One request and ``rounds`` finished tool rounds (~95 tokens each): one finished turn."""
    new_thread(svc, key)
    add(svc, key, user(TRAJECTORY_REQUEST))
    for i in range(rounds):
        call = ToolCall(f"call-{i}", "bash", f'{{"command": "pytest tests/test_refunds.py -k case_{i}"}}')
        add(svc, key, assistant(f"Step {i}: run case {i}.", call), tool_result(call.id, filler(60, f"case {i} output, see src/refunds/case_{i}.py"), name="bash"))


def test_a_300_round_single_request_trajectory_compacts_to_the_target(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_key("trajectory")
    trajectory(svc, key)
    status = svc.compaction.status(key)
    assert status.tokens > 4 * status.threshold  # far over: the old whole-turn rule was a no_op here

    r = svc.compaction.compact(key)

    target = status.threshold // 2
    assert r.status == "completed" and r.reason is None
    assert r.after_tokens <= target < r.before_tokens  # the target is reached, not just "smaller"
    assert not r.still_over_threshold and r.note is None
    assert r.summarizer_calls == counter.calls <= 5
    msgs = all_messages(svc, key)
    assert_valid_cut(msgs, r.boundary, running_turn=True)  # a round end inside the one turn
    state = svc.reads.compaction_state(key)
    assert contains_verbatim(state.summary, TRAJECTORY_REQUEST)  # the request is behind the boundary now
    assert all(req.current_request == TRAJECTORY_REQUEST and not req.running_turn for req in counter.requests)
    surface = build_surface(svc.store.snapshot(key))
    assert surface.messages[0].is_synthetic  # the tail starts with a round, so the synthetic user opens it
    assert surface.messages[-1].role == "tool" and surface.messages[-1].tool_call_id == "call-299"
    assert_surface_valid(svc, key)
    assert svc.compaction.status(key).tokens == r.after_tokens
    # the last call was told what stays verbatim (its identifiers are kept first), and every summary
    # event says how many identifiers the summarizer had to leave out
    assert [x.id for x in counter.requests[-1].retained] == [x.id for x in surface.messages if x.id is not None]
    events = [e for e in svc.reads.events(key) if e.kind == "summary"]
    assert len(events) == r.summarizer_calls and all(isinstance(e.data["dropped_identifiers"], int) for e in events)


def test_a_manual_compaction_that_cannot_reach_the_threshold_says_why(make_service, new_key):
    svc = make_service(Counting(), policies={"context_window": WINDOW, "default": {"summary_max_tokens": 400, "retained_tail_ratio": 0.2}})
    key = new_key("too-big")
    new_thread(svc, key)
    finished_turns(svc, key, 12)
    add(svc, key, user("Summarize the appendix."), assistant(filler(7000, "The appendix, in full:")))  # the newest unit alone

    r = svc.compaction.compact(key)

    status = svc.compaction.status(key)
    assert r.status == "completed" and r.after_tokens == status.tokens >= status.threshold
    assert r.still_over_threshold and r.note is not None
    assert f"threshold {status.threshold:,}" in r.note and "retained tail" in r.note


def test_a_no_op_over_the_threshold_is_still_honest(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("no-op-over")
    new_thread(svc, key)
    add(svc, key, user("Summarize the appendix."), assistant(filler(7000, "The appendix, in full:")))

    r = svc.compaction.compact(key)

    assert (r.status, r.reason) == ("no_op", "insufficient_history")
    assert r.still_over_threshold and "nothing before the retained tail" in (r.note or "")


def test_a_parallel_call_with_missing_results_on_an_idle_thread_is_closed_and_compaction_proceeds(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_key("parallel-missing")
    trajectory(svc, key, rounds=120)
    calls = [ToolCall(f"p-{x}", "read_file", f'{{"path": "src/refunds/{x}.py"}}') for x in "abcd"]
    add(svc, key, assistant("Reading the four modules at once.", *calls))
    add(svc, key, tool_result("p-a", filler(40, "module a"), name="read_file"), tool_result("p-c", filler(40, "module c"), name="read_file"))
    # the thread is idle and two results never came: the same closing mechanism as cancellation
    for call_id in ("p-b", "p-d"):
        add(svc, key, tool_result(call_id, "[no result was recorded for this call]", name="read_file", missing_result=True))

    r = svc.compaction.compact(key)

    assert r.status == "completed" and r.after_tokens <= svc.compaction.status(key).threshold // 2
    assert counter.calls == r.summarizer_calls >= 1
    surface = build_surface(svc.store.snapshot(key))
    tail = [m.tool_call_id for m in surface.messages if m.role == "tool"][-4:]
    assert tail == ["p-a", "p-c", "p-b", "p-d"]  # every call on the surface has its (recorded) result
    assert_surface_valid(svc, key)


def test_an_older_dangling_call_closed_on_the_idle_thread_unblocks_compaction(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("older-dangling")
    new_thread(svc, key)
    add(svc, key, user(TRAJECTORY_REQUEST))
    calls = [ToolCall(f"p-{x}", "read_file", f'{{"path": "src/refunds/{x}.py"}}') for x in "abcd"]
    add(svc, key, assistant("Reading the four modules at once.", *calls))
    add(svc, key, tool_result("p-a", "module a", name="read_file"), tool_result("p-c", "module c", name="read_file"))
    for i in range(120):  # the agent went on without the two results
        call = ToolCall(f"call-{i}", "bash", f'{{"command": "pytest -k case_{i}"}}')
        add(svc, key, assistant(f"Step {i}.", call), tool_result(call.id, filler(60, f"case {i}"), name="bash"))
    assert svc.compaction.compact(key).status == "no_op"  # the open parallel round blocks everything after it

    svc.runs.close_dangling_calls(key)
    r = svc.compaction.compact(key)

    assert r.status == "completed" and not r.still_over_threshold
    assert_surface_valid(svc, key)


def test_a_window_the_source_reported_is_the_one_compaction_uses(make_service, new_key):
    """A Codex rollout records its model's window: the compactor (every trigger measures through it)
    uses it (override → reported → catalogue → assumed), not the catalogue's or the assumed one."""
    from dataclasses import replace

    svc = make_service(Counting(), policies={"context_window": 128_000})
    key = new_key("reported")
    long_thread(svc, key)
    snap = replace(svc.store.snapshot(key), provider="openai", model="gpt-5.5", reported_context_window=8000, source_format="codex")
    m = svc.compactor.measure(snap)
    assert (m.policy.context_window, m.policy.window_source) == (8000, "reported")
    other = svc.compactor.measure(snap, model="gpt-4o")  # another model's request: not its window
    assert other.policy.window_source != "reported"


def test_the_retained_tail_gives_way_to_the_identifiers_a_summary_carries(make_service, new_key):
    """An identifier-dense trajectory whose long request and retained tail (a file read) fill the
    target: the tail gives way, down to the newest round, so the summary can carry the paths the
    searches showed (docs/compaction.md, "Summary budget"; before: the tail stayed and most were lost)."""
    from engine.core.specifics import expand_grouped, extract_identifiers

    counter = Counting()
    svc = make_service(counter)
    key = new_key("dense")
    new_thread(svc, key)
    request = "Fix the quoted header bug in the CSV reader. " + " ".join(f"Instruction {i}: edit only what the issue needs." for i in range(120))
    add(svc, key, user(request))
    for i in range(24):
        call = ToolCall(f"call-{i}", "bash", '{"command": "step"}')
        if i % 4 == 2:
            out = f"[File: /repo/csvkit/file_{i:03d}.py]\n" + "\n".join(f"{n}: parse the header row and the strict value buffer" for n in range(70))
        else:
            out = "\n".join(f"/repo/csvkit/mod{i:02d}/reader_{n:03d}.py ({n % 7 + 1} matches)" for n in range(14))
        add(svc, key, assistant(f"Step {i}.", call), tool_result(call.id, out, name="bash"))
    ids = set()
    for m in all_messages(svc, key):
        if m.role == "tool":
            ids.update(extract_identifiers(m.content))
    status = svc.compaction.status(key)
    assert status.tokens >= status.threshold

    r = svc.compaction.compact(key)

    assert r.status == "completed" and r.after_tokens <= status.threshold // 2 and r.summarizer_calls == counter.calls
    surface = build_surface(svc.store.snapshot(key))
    shown = expand_grouped("\n".join([svc.reads.compaction_state(key).summary or "", *(x.content for x in surface.messages)]))
    kept = ids & set(extract_identifiers(shown))
    assert len(kept) >= 0.9 * len(ids), (len(kept), len(ids))
    assert contains_verbatim(svc.reads.compaction_state(key).summary, request)
    tail = [x for x in surface.messages if x.id is not None]
    assert tail[-1].role == "tool" and tail[-1].tool_call_id == "call-23"  # the newest round stays
    assert not any(x.role == "tool" and x.tool_call_id == "call-22" for x in tail)  # the file read before it gave way
    assert_surface_valid(svc, key)
