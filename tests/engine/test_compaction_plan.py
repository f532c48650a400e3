"""Compaction as plan, then apply (issue 24): the pure plans of Compact now, of the pressure path
(prune first, a summary only when the prune is not enough) and of overflow recovery, each applied
as planned, and the detail a refused compaction carries. Real service on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from engine.compaction.compactor import Compactor, RunState
from engine.compaction.plan import CompactionPlan, StaleRule, plan_manual, plan_overflow, plan_pressure, prune_candidates
from engine.compaction.pruning import STALE_PREVIEW_SHARE, prune_surface, stale_results
from engine.core.errors import CannotCompact
from engine.core.messages import META_PRUNED, Message, ToolCall, assistant, tool_result, user
from engine.core.workdir import Workdir

from .conftest import (
    CURRENT_REQUEST,
    POLICY,
    WINDOW,
    Counting,
    Failing,
    Growing,
    add,
    filler,
    finished_turns,
    new_thread,
    route,
    running_turn,
    thread_state,
)


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

    from engine.apps.cli import main

    svc = make_service(Counting())
    key = new_key("plan-cli")
    long_thread(svc, key)
    before = thread_state(svc, key)
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # the CLI's own policies (not the test service's window)
    # every figure of the plan; its ``selection`` (the units with their messages) is no figure
    assert set(data) == {"thread"} | {f.name for f in dataclasses.fields(CompactionPlan)} - {"selection"}
    assert data["thread"] == key and data["trigger"] == "manual" and data["tokens_before"] > 0
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan"]) == 0
    assert "nothing written" in capsys.readouterr().out
    assert thread_state(svc, key) == before


# -- pressure and overflow: plan, then apply --------------------------------------------------


def big_results_thread(svc, key: str) -> tuple[int, int]:
    """Four finished turns and a running one whose two tool results (a log, a search answer) are
    over the tool-result limit: the pressure path prunes them and needs no summary."""
    new_thread(svc, key)
    finished_turns(svc, key, 4)
    log = "\n".join(f"2026-11-30T10:{i // 60:02d}:{i % 60:02d} worker-{i % 7} processed batch {i} in {i * 3 % 97} ms" for i in range(400))
    hits = json.dumps({"results": [{"doc_id": f"doc-{i}", "title": f"Owner registry part {i}", "score": 0.9 - i / 100, "content": filler(60)} for i in range(40)]})
    add(svc, key, user(CURRENT_REQUEST),
        assistant("", ToolCall("c-log", "read_log", '{"path": "/var/log/worker.log"}'), ToolCall("c-kb", "query_kb", '{"query": "doc-42"}')))
    log_id, kb_id = add(svc, key, tool_result("c-log", log, name="read_log"), tool_result("c-kb", hits, name="query_kb"))
    route(svc, key)
    return log_id, kb_id


def long_running_thread(svc, key: str) -> None:
    """Over the threshold with nothing to prune: the pressure path summarizes the oldest turns."""
    new_thread(svc, key)
    finished_turns(svc, key, 23)
    running_turn(svc, key)
    route(svc, key)


def measured_for_pressure(svc, key: str):
    routed = svc.store.last_completed_request(key)
    return svc.compactor.measure(svc.store.snapshot(key, with_busy=False), provider=routed.provider, model=routed.model)


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
def test_pressure_plan_prunes_what_the_pressure_path_prunes(request, new_key, backend):
    make = request.getfixturevalue("make_service" if backend == "sqlite" else "make_pg_service")
    counter = Counting()
    svc = make(counter)
    key = new_key("plan-prune")
    log_id, kb_id = big_results_thread(svc, key)
    before = thread_state(svc, key)
    plan = svc.compaction.plan(key, trigger="pressure")
    assert thread_state(svc, key) == before and counter.calls == 0  # planning writes nothing
    assert plan.trigger == "pressure" and plan.possible and plan.tokens_before >= plan.threshold
    assert set(plan.prune) == {log_id, kb_id} and plan.prune_tokens > 4000
    out = svc.steps.compact_for_pressure(key, RunState())
    assert (out.action, out.reason) == ("pruned", "prune_enough") and counter.calls == 0
    (event,) = [e for e in thread_state(svc, key)["events"] if e.kind == "prune"]
    assert {r["message_id"] for r in event.data["pruned"]} == set(plan.prune)
    assert event.data["tokens_before"] == plan.tokens_before
    again = svc.compaction.plan(key, trigger="pressure")  # pruned: nothing left to prune, and under the threshold
    assert (again.possible, again.reason, again.prune) == (False, "below_threshold", ())


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
def test_pressure_summarizes_the_planned_range_with_the_planned_budgets(request, new_key, backend):
    make = request.getfixturevalue("make_service" if backend == "sqlite" else "make_pg_service")
    counter = Counting()
    svc = make(counter)
    key = new_key("plan-pressure")
    long_running_thread(svc, key)
    plan = svc.compaction.plan(key, trigger="pressure")
    assert plan.possible and plan.prune == () and plan.summarizes and plan.reason is None
    assert plan.expected_after is not None and plan.expected_after < plan.tokens_before
    out = svc.steps.compact_for_pressure(key, RunState())
    assert out.action == "summarized"
    first = counter.requests[0]
    assert len(first.messages) == plan.selected_messages
    assert first.messages[0].id == plan.first_selected and first.messages[-1].id == plan.selected_boundary
    assert (first.max_tokens, first.identifier_tokens) == (plan.max_tokens, plan.identifier_tokens)
    event = next(e for e in thread_state(svc, key)["events"] if e.kind == "summary")
    assert (event.data["selected_boundary"], event.data["selected_messages"]) == (plan.selected_boundary, plan.selected_messages)
    assert (event.data["replaced_tokens"], event.data["tokens_before"]) == (plan.replaced_tokens, plan.tokens_before)


def test_pressure_plan_is_pure(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("plan-pressure-pure")
    long_running_thread(svc, key)
    plan = svc.compaction.plan(key, trigger="pressure")
    m = measured_for_pressure(svc, key)
    svc.close()  # no store behind it any more: the decision needs none
    assert Compactor.stale_rule(m).share == STALE_PREVIEW_SHARE
    assert plan_pressure(m, stale=Compactor.stale_rule(m)) == plan
    tripped = plan_pressure(m, stale=Compactor.stale_rule(m), breaker_tripped=True)  # the run's breaker: no summary planned
    assert (tripped.possible, tripped.reason, tripped.summarizes, tripped.selected_messages) == (False, "breaker_tripped", False, 0)
    prune_only = plan_pressure(m, stale=Compactor.stale_rule(m), summary=False)
    assert (prune_only.possible, prune_only.reason, prune_only.summarizes) == (False, None, False)
    later = plan_pressure(m, stale=None, call=1)  # a later call of a started compaction: the same range
    assert later.selected_boundary == plan.selected_boundary and later.summarizes


def test_pressure_plan_says_why_nothing_is_done(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("plan-pressure-none")
    new_thread(svc, key)
    finished_turns(svc, key, 30)
    assert svc.compaction.plan(key, trigger="pressure").reason == "no_completed_request"
    route(svc, key)
    assert svc.compaction.plan(key, trigger="pressure").summarizes
    small = new_key("plan-pressure-small")
    new_thread(svc, small)
    finished_turns(svc, small, 3)
    route(svc, small)
    below = svc.compaction.plan(small, trigger="pressure")
    assert (below.possible, below.reason, below.prune, below.selected_messages) == (False, "below_threshold", (), 0)
    off = make_service(Counting(), policies={**POLICY, "default": {**POLICY["default"], "auto": False}})
    assert off.compaction.plan(key, trigger="pressure").reason == "auto_off"
    assert off.steps.compact_for_pressure(key, RunState()).reason == "auto_off"


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
def test_overflow_recovery_applies_its_plan(request, new_key, backend):
    make = request.getfixturevalue("make_service" if backend == "sqlite" else "make_pg_service")
    counter = Counting()
    svc = make(counter)
    key = new_key("plan-overflow")
    long_running_thread(svc, key)
    plan = svc.compaction.plan(key, trigger="overflow")
    assert plan.trigger == "overflow" and plan.possible and plan.prune == () and plan.summarizes
    out = svc.steps.recover_overflow(key, RunState())
    assert out.progressed and out.summarizer_calls == 1
    (first,) = counter.requests
    assert (len(first.messages), first.messages[-1].id) == (plan.selected_messages, plan.selected_boundary)
    assert (first.max_tokens, first.identifier_tokens) == (plan.max_tokens, plan.identifier_tokens)
    event = next(e for e in thread_state(svc, key)["events"] if e.kind == "summary")
    assert event.trigger == "overflow" and event.data["selected_boundary"] == plan.selected_boundary


def test_overflow_plan_with_big_results_prunes_them_first(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("plan-overflow-prune")
    log_id, kb_id = big_results_thread(svc, key)
    plan = svc.compaction.plan(key, trigger="overflow")
    assert plan.possible and set(plan.prune) == {log_id, kb_id}
    out = svc.steps.recover_overflow(key, RunState())
    assert out.progressed
    (event,) = [e for e in thread_state(svc, key)["events"] if e.kind == "prune"]
    assert event.trigger == "overflow" and {r["message_id"] for r in event.data["pruned"]} == set(plan.prune)


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
def test_overflow_with_nothing_to_do_recovers_nothing_and_writes_nothing(request, new_key, backend):
    make = request.getfixturevalue("make_service" if backend == "sqlite" else "make_pg_service")
    counter = Counting()
    svc = make(counter)
    key = new_key("plan-overflow-none")
    new_thread(svc, key)
    add(svc, key, user(CURRENT_REQUEST))
    route(svc, key)
    plan = svc.compaction.plan(key, trigger="overflow")
    assert (plan.possible, plan.reason, plan.prune, plan.summarizes) == (False, "nothing_to_compact", (), False)
    m = svc.compactor.measure(svc.store.snapshot(key, with_busy=False))
    assert plan_overflow(m, stale=Compactor.stale_rule(m)) == plan  # pure
    before = thread_state(svc, key)
    out = svc.steps.recover_overflow(key, RunState())
    assert not out.progressed and out.summarizer_calls == 0 and counter.calls == 0  # the surface provably did not change
    assert thread_state(svc, key) == before


def test_prune_candidates_are_what_prune_surface_prunes(tmp_path):
    """The pure candidates equal the results :func:`engine.compaction.pruning.prune_surface` offloads (no
    Workdir failure here), stale or not, already pruned ones left out."""
    from engine.core.meter import default_meter

    meter = default_meter("m")
    history: list[Message] = []
    for i in range(12):
        call = ToolCall(f"c{i}", "query_kb", '{"q": 1}')
        size = (100, 400, 900, 2500)[i % 4]
        result = tool_result(call.id, filler(size, f"result {i} doc-{i}"), name="query_kb")
        if i == 3:
            result = replace(result, metadata={META_PRUNED: True})
        history += [assistant(f"step {i}", call), result]
    history = [replace(x, id=n + 1) for n, x in enumerate(history)]
    stale = stale_results(history, message_tokens=meter.count_message, tail_tokens=1280, recent_rounds=2)
    assert stale  # some results lie before the protected tail
    ids, stale_ids, tokens = prune_candidates(history, meter.count_text, limit_tokens=2000, preview_tokens=600, stale=StaleRule(stale, STALE_PREVIEW_SHARE))
    report = prune_surface(history, workdir=Workdir(tmp_path / "wd"), count_tokens=meter.count_text, limit_tokens=2000, preview_tokens=600, stale=stale)
    assert not report.failed
    assert ids == tuple(p.message_id for p in report.pruned)
    assert set(stale_ids) == set(ids) & stale and 8 not in ids and 16 in ids  # #8 (2,500 tokens) is marked pruned already; #16 the same size is not
    assert tokens == sum(meter.count_text(x.content) for x in history if x.id in ids)
    # the compactor hands prune_surface only the stale candidates: the same results, the same previews
    again = prune_surface(history, workdir=Workdir(tmp_path / "wd2"), count_tokens=meter.count_text, limit_tokens=2000, preview_tokens=600, stale=stale_ids)
    assert [(p.message_id, p.preview, p.preview_tokens) for p in again.pruned] == [(p.message_id, p.preview, p.preview_tokens) for p in report.pruned]


def test_cli_compact_plan_pressure(make_service, new_key, sqlite_url, capsys):
    from engine.apps.cli import main

    svc = make_service(Counting())
    key = new_key("plan-cli-pressure")
    log_id, kb_id = big_results_thread(svc, key)
    before = thread_state(svc, key)
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan", "pressure", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["trigger"] == "pressure" and "selection" not in data and data["tokens_before"] > 0
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan", "pressure"]) == 0
    assert "nothing written" in capsys.readouterr().out  # the CLI's own policies: a 128k window, under its threshold
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan", "overflow"]) == 0
    assert "nothing written" in capsys.readouterr().out
    assert thread_state(svc, key) == before


def test_cli_shows_the_prune_and_the_summary_of_a_pressure_plan(make_service, new_key, sqlite_url, capsys, monkeypatch):
    """The text of ``--plan pressure`` for the test policy's plan (the CLI's own policies have a 128k
    window): the results it prunes, then the summary it would make if the prune is not enough."""
    from engine.apps.cli import main
    from engine.service.compaction import CompactionFacet

    svc = make_service(Counting())
    key = new_key("plan-cli-text")
    log_id, kb_id = big_results_thread(svc, key)
    finished_turns(svc, key, 20)
    route(svc, key)
    plan = svc.compaction.plan(key, trigger="pressure")
    assert plan.prune and plan.summarizes
    monkeypatch.setattr(CompactionFacet, "plan", lambda self, k, trigger="manual": plan)
    assert main(["compact", "--db", sqlite_url, "--thread", key, "--plan", "pressure"]) == 0
    text = capsys.readouterr().out
    assert f"would prune {len(plan.prune)} tool result(s) (#{log_id}, #{kb_id}: {plan.prune_tokens} tokens now" in text
    assert "then, if the prune leaves the thread at or over the threshold, the first call" in text
    assert f"would summarize {plan.selected_messages} messages" in text and text.rstrip().endswith("nothing written")
