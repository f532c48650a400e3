"""Manual compaction (§4) through the real service on a real SQLite file."""

from __future__ import annotations

import pytest

from engine.surface import build_surface
from engine.errors import CannotCompact, ThreadBusy
from engine.messages import user
from engine.summarizers.protocol import contains_verbatim
from engine.units import assert_valid_cut

from .conftest import (
    Counting,
    Failing,
    Growing,
    add,
    all_messages,
    assert_surface_valid,
    finished_turns,
    new_thread,
    thread_state,
)


def make_busy(svc, key: str, reason: str) -> None:
    """Put the thread into one of the three busy states."""
    if reason == "running":
        svc.start_run(key)
    elif reason == "waiting_for_user":
        svc.interrupt_run(key, svc.start_run(key))
    else:
        svc.queue_request(key, "Please also check doc-43.")
    assert svc.thread(key).busy_reason == reason


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
        svc.compact(key)

    assert caught.value.code == "thread_busy" and caught.value.reason == reason
    assert caught.value.to_json()["error"] == {"code": "thread_busy", "message": caught.value.message, "reason": reason}
    assert counter.calls == 0
    assert thread_state(svc, key) == before  # nothing queued, nothing written, no event


def test_idle_again_after_the_run_finishes(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("idle-again")
    long_thread(svc, key)
    run = svc.start_run(key)
    with pytest.raises(ThreadBusy):
        svc.compact(key)
    svc.finish_run(key, run)
    assert svc.compact(key).status == "completed"


@pytest.mark.parametrize("turns", [0, 1, 3])
def test_insufficient_history_is_a_no_op(make_service, new_key, turns):
    counter = Counting()
    svc = make_service(counter)
    key = new_thread(svc, new_key("short"))
    finished_turns(svc, key, turns)  # 3 turns (~900 tokens) all fit the retained tail (1280)
    before = thread_state(svc, key)

    r = svc.compact(key)

    assert (r.status, r.reason) == ("no_op", "insufficient_history")
    assert r.before_tokens == r.after_tokens == svc.status(key).tokens
    assert (r.compacted_messages, r.boundary, r.generation, r.summarizer_calls) == (0, None, 0, 0)
    assert counter.calls == 0
    assert thread_state(svc, key) == before


def test_completed_result_fields(make_service, new_key):
    counter = Counting()
    svc = make_service(counter)
    key = new_key("manual")
    long_thread(svc, key)
    count = svc.message_count(key)

    r = svc.compact(key)

    state = svc.compaction_state(key)
    msgs = all_messages(svc, key)
    assert r.status == "completed" and r.reason is None
    assert r.summarizer_calls == counter.calls >= 1
    assert r.boundary == state.boundary and r.generation == state.generation == r.summarizer_calls
    assert r.compacted_messages == sum(1 for m in msgs if m.id <= r.boundary)
    assert r.after_tokens == svc.status(key).tokens < r.before_tokens
    assert_valid_cut(msgs, r.boundary, running_turn=False)
    assert contains_verbatim(state.summary, "Last question: who owns doc-42?")
    assert svc.message_count(key) == count
    history = svc.history(key)
    assert [(h.kind, h.trigger) for h in history] == [("manual", "manual")] * r.summarizer_calls
    assert history[0].boundary_before is None and history[-1].boundary_after == r.boundary
    assert [e.kind for e in svc.events(key)] == ["summary"] * r.summarizer_calls
    # the retained tail stays verbatim and the surface starts with a user message
    surface = build_surface(svc.store.snapshot(key))
    assert surface.messages[0].role == "user" and not any(m.is_synthetic for m in surface.messages)
    assert surface.messages[-1].content == "Last question: who owns doc-42?"
    # everything before the tail is summarized now: a second press is a no-op
    again = svc.compact(key)
    assert (again.status, again.reason, again.generation) == ("no_op", "insufficient_history", r.generation)


@pytest.mark.parametrize(("summarizer", "reason"), [(Failing(), "summarizer_failed"), (Growing(), "not_smaller")])
def test_rejected_manual_summary_changes_nothing_but_records_why(make_service, new_key, summarizer, reason):
    svc = make_service(summarizer)
    key = new_key("manual-reject")
    long_thread(svc, key)
    before = thread_state(svc, key)

    with pytest.raises(CannotCompact) as caught:
        svc.compact(key)

    assert caught.value.code == "summary_rejected" and caught.value.reason == reason
    after = thread_state(svc, key)
    assert {k: v for k, v in after.items() if k != "events"} == {k: v for k, v in before.items() if k != "events"}
    (event,) = after["events"]
    assert (event.kind, event.trigger, event.data["reason"]) == ("summary_rejected", "manual", reason)
    assert_surface_valid(svc, key)
