"""Queued requests, runs, their transitions and the busy reason."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.core.errors import ThreadBusy
from engine.store import InvalidTransition, Store
from engine.store.models import Run
from tests import door_ops


def test_queued_requests_are_taken_fifo(store: Store, conv: str) -> None:
    ids = [door_ops.queue_request(store, conv, f"request {i}") for i in range(3)]
    assert ids == sorted(ids)
    assert store.queued_requests(conv) == [(ids[0], "request 0"), (ids[1], "request 1"), (ids[2], "request 2")]
    with store.locked(conv) as tx:
        assert tx.take_queued_request() == (ids[0], "request 0")
        assert tx.take_queued_request() == (ids[1], "request 1")
    assert store.queued_requests(conv) == [(ids[2], "request 2")]
    with store.locked(conv) as tx:
        assert tx.take_queued_request() == (ids[2], "request 2")
        assert tx.take_queued_request() is None
    assert store.queued_requests(conv) == [] and store.busy_reason(conv) is None


def test_queues_are_per_conversation(store: Store, new_key: Callable[[str], str]) -> None:
    a, b = new_key("a"), new_key("b")
    store.create_conversation(a)
    store.create_conversation(b)
    door_ops.queue_request(store, a, "for a")
    with store.locked(b) as tx:
        assert tx.take_queued_request() is None
    assert [c for _, c in store.queued_requests(a)] == ["for a"]


def test_cancel_queued_requests(store: Store, conv: str) -> None:
    door_ops.queue_request(store, conv, "one")
    door_ops.queue_request(store, conv, "two")
    with store.locked(conv) as tx:
        assert tx.cancel_queued_requests() == 2
        assert tx.cancel_queued_requests() == 0
    assert store.queued_requests(conv) == [] and store.busy_reason(conv) is None


def test_start_run_from_a_queued_request_marks_it_started(store: Store, conv: str) -> None:
    req = door_ops.queue_request(store, conv, "do it")
    run = door_ops.start_run(store, conv, request_id=req)
    assert store.queued_requests(conv) == []
    [info] = store.runs(conv)
    assert (info.id, info.status, info.conversation_id, info.finished_at) == (run, "running", store.thread(conv).id, None)


def test_start_run_refuses_a_foreign_request(store: Store, new_key: Callable[[str], str]) -> None:
    a, b = new_key("a"), new_key("b")
    store.create_conversation(a)
    store.create_conversation(b)
    foreign = door_ops.queue_request(store, b, "b's")
    with pytest.raises(InvalidTransition, match="does not belong"):
        door_ops.start_run(store, a, request_id=foreign)
    assert store.runs(a) == [] and store.queued_requests(b) == [(foreign, "b's")]


@pytest.mark.parametrize("active", ["running", "waiting_for_user"])
def test_start_run_is_refused_while_a_run_is_active(store: Store, conv: str, active: str) -> None:
    run = door_ops.start_run(store, conv)
    if active == "waiting_for_user":
        door_ops.interrupt_run(store, conv, run)
    with pytest.raises(ThreadBusy) as err:
        door_ops.start_run(store, conv)
    assert err.value.reason == active and err.value.code == "thread_busy"
    assert [r.id for r in store.runs(conv)] == [run]


def test_a_new_run_may_start_after_the_last_finished(store: Store, conv: str) -> None:
    first = door_ops.start_run(store, conv)
    door_ops.finish_run(store, conv, first)
    second = door_ops.start_run(store, conv)
    assert second > first
    assert [(r.id, r.status) for r in store.runs(conv)] == [(first, "completed"), (second, "running")]


def test_run_lifecycle_through_the_store_shortcuts(store: Store, conv: str) -> None:
    run = door_ops.start_run(store, conv)
    door_ops.interrupt_run(store, conv, run)
    assert store.runs(conv)[0].status == "waiting_for_user"
    door_ops.resume_run(store, conv, run)
    assert store.runs(conv)[0].status == "running"
    door_ops.finish_run(store, conv, run, failed=True, error_code="provider_error", error_message="502 from upstream")
    [info] = store.runs(conv)
    assert (info.status, info.error_code, info.error_message) == ("failed", "provider_error", "502 from upstream")
    assert info.finished_at is not None and info.finished_at >= info.created_at
    cancelled = door_ops.start_run(store, conv)
    door_ops.cancel_run(store, conv, cancelled)
    assert store.runs(conv)[1].status == "cancelled" and store.runs(conv)[1].finished_at is not None


VALID = [
    ("running", "completed"),
    ("running", "failed"),
    ("running", "waiting_for_user"),
    ("running", "cancelled"),
    ("waiting_for_user", "running"),
    ("waiting_for_user", "failed"),
    ("waiting_for_user", "cancelled"),
]
FINAL = ["completed", "failed", "cancelled"]
INVALID = [
    ("running", "running"),
    ("running", "queued"),
    ("waiting_for_user", "waiting_for_user"),
    ("waiting_for_user", "completed"),
    *[(final, target) for final in FINAL for target in ["running", "waiting_for_user", "completed", "failed", "cancelled"]],
    ("running", "paused"),
]


def _run_in(store: Store, key: str, status: str) -> int:
    """A run brought into ``status`` through valid transitions."""
    run = door_ops.start_run(store, key)
    if status != "running":  # running → waiting_for_user / completed / failed / cancelled are all valid
        with store.locked(key) as tx:
            tx.set_run_status(run, status)
    return run


@pytest.mark.parametrize(("start", "target"), VALID)
def test_valid_transitions(store: Store, conv: str, start: str, target: str) -> None:
    run = _run_in(store, conv, start)
    with store.locked(conv) as tx:
        tx.set_run_status(run, target)
    info = store.runs(conv)[0]
    assert info.status == target
    assert (info.finished_at is not None) == (target in FINAL)


@pytest.mark.parametrize(("start", "target"), INVALID)
def test_invalid_transitions_are_refused_and_change_nothing(store: Store, conv: str, start: str, target: str) -> None:
    run = _run_in(store, conv, start)
    before = store.runs(conv)
    with pytest.raises(InvalidTransition):
        with store.locked(conv) as tx:
            tx.set_run_status(run, target)
    assert store.runs(conv) == before and before[0].status == start


def test_set_run_status_refuses_a_foreign_or_unknown_run(store: Store, new_key: Callable[[str], str]) -> None:
    a, b = new_key("a"), new_key("b")
    store.create_conversation(a)
    store.create_conversation(b)
    foreign = door_ops.start_run(store, b)
    with pytest.raises(InvalidTransition, match="does not belong"):
        door_ops.finish_run(store, a, foreign)
    with pytest.raises(InvalidTransition, match="does not belong"):
        door_ops.finish_run(store, a, 10**12)
    assert store.runs(b)[0].status == "running"


def test_busy_reason_each_reason_and_precedence(store: Store, conv: str) -> None:
    def reasons() -> tuple[str | None, str | None, str | None]:
        with store.locked(conv) as tx:
            locked_reason = tx.busy_reason()
        return store.busy_reason(conv), locked_reason, store.thread(conv).busy_reason

    assert reasons() == (None, None, None)
    req = door_ops.queue_request(store, conv, "later")
    assert reasons() == ("queued",) * 3
    run = door_ops.start_run(store, conv)  # a run without the request: the request stays queued
    assert reasons() == ("running",) * 3  # running > queued
    door_ops.interrupt_run(store, conv, run)
    assert reasons() == ("waiting_for_user",) * 3  # waiting_for_user > queued
    door_ops.finish_run(store, conv, run, failed=True)
    assert reasons() == ("queued",) * 3
    with store.locked(conv) as tx:
        assert tx.take_queued_request() == (req, "later")
    assert reasons() == (None, None, None)


def test_busy_reason_running_beats_waiting_for_user(store: Store, conv: str) -> None:
    """Two active runs cannot be created through the API; the precedence still holds if a platform
    wrote them (the check reads every active run)."""
    run = door_ops.start_run(store, conv)
    door_ops.interrupt_run(store, conv, run)
    with store.locked(conv) as tx:
        tx.session.add(Run(conversation_id=tx.conversation_id, status="running"))
    assert store.busy_reason(conv) == "running" == store.thread(conv).busy_reason


def test_require_idle(store: Store, conv: str) -> None:
    with store.locked(conv) as tx:
        tx.require_idle()
    door_ops.queue_request(store, conv, "x")
    with pytest.raises(ThreadBusy) as err:
        with store.locked(conv) as tx:
            tx.require_idle()
    assert err.value.reason == "queued" and conv in err.value.message


def test_cancel_run_answers_the_calls_that_never_ran(store: Store, conv: str) -> None:
    """A run cancelled while waiting for the user leaves no orphan tool call (§3.5), whoever cancels it."""
    from engine.core.messages import ToolCall, assistant, tool_result
    from engine.core.units import is_balanced

    run = door_ops.start_run(store, conv)
    door_ops.append_message(store, conv, assistant("", ToolCall("a", "shell"), ToolCall("b", "ask_user"), ToolCall("c", "shell")), run_id=run)
    door_ops.append_message(store, conv, tool_result("a", "ok", name="shell"), run_id=run)
    door_ops.interrupt_run(store, conv, run)
    assert door_ops.cancel_run(store, conv, run) == 2
    msgs = store.messages_after(conv, None)
    assert is_balanced(msgs)
    aborted = [m for m in msgs if m.metadata.get("aborted")]
    assert [m.tool_call_id for m in aborted] == ["b", "c"]
    assert store.busy_reason(conv) is None
    with pytest.raises(InvalidTransition):  # already settled: nothing more is written
        door_ops.cancel_run(store, conv, run)
    assert len(store.messages_after(conv, None)) == len(msgs)
