"""Compaction as plan, then apply (issue 24): the pure plan of Compact now, and the detail a refused
compaction carries. Real service on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from engine.errors import CannotCompact
from engine.messages import user
from engine.plan import CompactionPlan, plan_manual

from .conftest import Counting, Failing, Growing, add, finished_turns, new_thread, thread_state


def long_thread(svc, key: str, turns: int = 20) -> None:
    new_thread(svc, key)
    finished_turns(svc, key, turns)
    add(svc, key, user("Last question: who owns doc-42?"))


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
def test_plan_is_pure_and_writes_nothing(request, new_key, backend):
    make = request.getfixturevalue("make_service" if backend == "sqlite" else "make_pg_service")
    counter = Counting()
    svc = make(counter)
    key = new_key("plan-pure")
    long_thread(svc, key)
    before = thread_state(svc, key)
    plan = svc.compaction.plan(key)
    measured = svc.compactor.measure(svc.store.snapshot(key, with_busy=False))
    svc.close()  # no store behind it any more: the decision needs none
    again = plan_manual(measured)
    assert isinstance(plan, CompactionPlan) and again == plan
    assert plan.possible and plan.trigger == "manual" and plan.reason is None
    assert plan.selected_messages > 0 and plan.removed_tokens > 0 and plan.max_tokens > 0
    assert plan.expected_after is not None and plan.expected_after < plan.tokens_before
    assert counter.calls == 0
    svc2 = make(counter)
    assert thread_state(svc2, key) == before  # no event, no generation, nothing written


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
def test_compact_applies_the_plan(request, new_key, backend):
    make = request.getfixturevalue("make_service" if backend == "sqlite" else "make_pg_service")
    counter = Counting()
    svc = make(counter)
    key = new_key("plan-apply")
    long_thread(svc, key)
    plan = svc.compaction.plan(key)
    result = svc.compaction.compact(key)
    assert result.status == "completed"
    first = counter.requests[0]
    assert len(first.messages) == plan.selected_messages
    assert first.messages[0].id == plan.first_selected and first.messages[-1].id == plan.selected_boundary
    assert (first.max_tokens, first.identifier_tokens) == (plan.max_tokens, plan.identifier_tokens)
    event = next(e for e in thread_state(svc, key)["events"] if e.kind == "summary")
    assert event.data["selected_boundary"] == plan.selected_boundary
    assert event.data["selected_messages"] == plan.selected_messages
    assert event.data["replaced_tokens"] == plan.replaced_tokens
    assert event.data["tokens_before"] == plan.tokens_before


def test_plan_of_a_thread_with_nothing_to_compact(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("plan-none")
    new_thread(svc, key)
    add(svc, key, user("hello"))
    plan = svc.compaction.plan(key)
    assert (plan.possible, plan.reason, plan.selected_messages, plan.selected_boundary) == (False, "insufficient_history", 0, None)
    r = svc.compaction.compact(key)
    assert (r.status, r.reason) == ("no_op", plan.reason)


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
@pytest.mark.parametrize(("summarizer", "reason", "words"), [(Failing, "summarizer_failed", "endpoint returned 503"), (Growing, "not_smaller", "tokens")])
def test_cannot_compact_carries_the_rejection_detail(request, new_key, backend, summarizer, reason, words):
    make = request.getfixturevalue("make_service" if backend == "sqlite" else "make_pg_service")
    svc = make(summarizer())
    key = new_key("plan-reject")
    long_thread(svc, key)
    with pytest.raises(CannotCompact) as caught:
        svc.compaction.compact(key)
    exc = caught.value
    assert exc.code == "summary_rejected" and exc.reason == reason
    assert exc.detail and words in exc.detail  # in hand when raised: nobody pages the events for it
    assert exc.message == f"summary rejected ({reason}: {exc.detail}); nothing was changed"
    assert exc.to_json()["error"]["detail"] == exc.detail
    (event,) = thread_state(svc, key)["events"]
    assert event.kind == "summary_rejected" and event.data["reason"] == reason


def test_cli_compact_plan_writes_nothing(make_service, new_key, sqlite_url, capsys):
    import dataclasses
    import json

    from engine.cli import main

    svc = make_service(Counting())
    key = new_key("plan-cli")
    long_thread(svc, key)
    before = thread_state(svc, key)
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # the CLI's own policies (not the test service's window)
    assert set(data) == {"thread"} | {f.name for f in dataclasses.fields(CompactionPlan)}
    assert data["thread"] == key and data["trigger"] == "manual" and data["tokens_before"] > 0
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan"]) == 0
    assert "nothing written" in capsys.readouterr().out
    assert thread_state(svc, key) == before
