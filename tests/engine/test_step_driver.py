"""The one step driver (:mod:`engine.step`): the harness, the adapters and what-if run on it; a step
below the threshold is one transaction (intake + pressure check + request record) and its end one
more (usage + the response); intake asks the database's unique source key instead of scanning the
thread; the overflow protocol (classify → recover → retry only on progress → gave-up) in one place.

On SQLite and PostgreSQL: the transactions are counted on the store's engine (SQLAlchemy's
``begin`` event), so a read or a write outside the step's transaction is seen."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

import engine.adapters.core as adapters_core
import engine.apps.harness.loop as harness_loop
import engine.whatif.runs as whatif_runs
from engine.adapters.core import EngineThread
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.llm.errors import CONTEXT_WINDOW_EXCEEDED, ProviderError
from engine.service import RunState, Service
from engine.step import Failure, StepDriver

from .conftest import MODEL, PROVIDER, counted, filler, finished_turns, keyed, new_thread, route


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def make(request: pytest.FixtureRequest) -> Callable[..., Service]:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def transactions(svc: Service) -> contextlib.AbstractContextManager[list[int]]:
    """Counts the transactions begun on the store's engine inside the block (``[n]``)."""
    return counted(svc, "begin")


def test_the_harness_the_adapters_and_whatif_run_on_the_one_driver() -> None:
    assert harness_loop.StepDriver is adapters_core.StepDriver is whatif_runs.StepDriver is StepDriver
    for module in (harness_loop, adapters_core, whatif_runs):  # the overflow protocol is not written again
        assert not hasattr(module, "_describe") and not hasattr(module, "GaveUpEvent") and not hasattr(module, "RetryEvent"), module


def test_a_step_below_the_threshold_is_one_transaction_and_its_end_one_more(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("step"))
    route(svc, key)  # routed: the pressure check measures for real
    finished_turns(svc, key, 3)
    t = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL)
    t.configure("You are a careful support agent.", [])
    t.ensure_run()
    call = ToolCall("c1", "lookup", "{}")
    t.stage([keyed(user("Where is doc-42?"), "u1"), keyed(assistant("Looking.", call), "a1")])

    with transactions(svc) as n:
        c = t.begin_call()
    assert n == [1]  # intake, the pressure check and the request record: one transaction
    assert c.outcome is not None and c.outcome.reason == "below_threshold"
    assert c.tokens == svc.steps.measure(key, provider=PROVIDER, model=MODEL).tokens
    (pending,) = [r for r in svc.store.model_requests(key) if r.id == c.request_id]
    assert (pending.outcome, pending.estimated_tokens, pending.step) == ("pending", c.tokens, 1)
    assert [m.source_key for m in (s.message for s in svc.reads.messages_page(key)) if m.source_key] == ["u1", "a1"]

    t.driver.hold = 600.0  # the background writer stays out of this test
    with transactions(svc) as n:
        t.succeeded(c, prompt_tokens=c.tokens, completion_tokens=5, messages=[keyed(tool_result("c1", "found"), "t1")])
    assert n == [0]  # the usage and the response's messages: held for the next step's transaction
    assert [r.outcome for r in svc.store.model_requests(key) if r.id == c.request_id] == ["pending"]

    with transactions(svc) as n:
        c2 = t.begin_call()
    assert n == [1]  # the last call's usage and response, the intake, the pressure check and the request record
    done = [r for r in svc.store.model_requests(key) if r.id == c.request_id][0]
    assert (done.outcome, done.reported_prompt_tokens, done.reported_completion_tokens) == ("ok", c.tokens, 5)
    assert [s.message.source_key for s in svc.reads.messages_page(key)][-3:] == ["u1", "a1", "t1"]
    assert [r.outcome for r in svc.store.model_requests(key) if r.id == c2.request_id] == ["pending"]

    t.succeeded(c2, prompt_tokens=c2.tokens, completion_tokens=3, messages=[keyed(assistant("Found it."), "a2")])
    with transactions(svc) as n:
        t.end_run()
    assert n == [2]  # the held end of the last call, then the run's end
    assert [r.outcome for r in svc.store.model_requests(key)][-2:] == ["ok", "ok"]
    assert [s.message.source_key for s in svc.reads.messages_page(key)][-1] == "a2"
    assert svc.reads.thread(key).busy_reason is None


def test_a_held_end_is_written_by_the_background_writer_when_no_step_comes(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("held"))
    route(svc, key)
    t = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL)
    t.ensure_run()
    call = ToolCall("c1", "lookup", "{}")
    t.stage([keyed(user("Where is doc-42?"), "u1")])
    c = t.begin_call()
    t.driver.hold = 0.05
    t.succeeded(c, prompt_tokens=c.tokens, completion_tokens=5, messages=[keyed(assistant("Looking.", call), "a1")])
    until = time.monotonic() + 30  # a wait, not a timing: the writer writes it 0.05 s after the call
    while t.driver.held is not None and time.monotonic() < until:
        time.sleep(0.01)
    assert t.driver.held is None
    assert [r.outcome for r in svc.store.model_requests(key) if r.id == c.request_id] == ["ok"]
    assert [s.message.source_key for s in svc.reads.messages_page(key)] == ["u1", "a1"]
    t.stage([keyed(tool_result("c1", "found"), "t1")])
    c2 = t.begin_call()  # nothing held: the step as before
    t.succeeded(c2, prompt_tokens=c2.tokens, completion_tokens=1, messages=[keyed(assistant("Done."), "a2")])
    t.end_run()
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok", "ok", "ok"]  # route()'s, then the two calls
    assert [s.message.source_key for s in svc.reads.messages_page(key)] == ["u1", "a1", "t1", "a2"]


def test_a_step_that_fails_after_a_held_end_still_records_that_end(make, new_key) -> None:
    from engine.core.messages import InvalidMessage

    svc = make()
    key = new_thread(svc, new_key("held-fail"))  # a call is answered once: the door refuses the second result
    route(svc, key)
    t = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL)
    t.ensure_run()
    t.stage([keyed(user("Where is doc-42?"), "u1")])
    c = t.begin_call()
    t.driver.hold = 600.0
    t.succeeded(c, prompt_tokens=c.tokens, completion_tokens=5, messages=[keyed(assistant("Looking.", ToolCall("c1", "lookup", "{}")), "a1")])
    t.stage([keyed(tool_result("c1", "found"), "t1"), keyed(tool_result("c1", "answered twice"), "t1-again")])
    with pytest.raises(InvalidMessage):
        t.call(lambda call: "never sent", lambda call, r: (None, None, []))
    # the refused intake rolled the step back; the held end was written on its own, then the run failed
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok", "ok"]  # route()'s, then the held one
    stored = [s.message for s in svc.reads.messages_page(key)]
    assert [m.source_key for m in stored] == ["u1", "a1", None]  # the failed run answers its open call (aborted)
    assert (stored[-1].tool_call_id, stored[-1].metadata.get("aborted")) == ("c1", True)
    assert [r.status for r in svc.store.runs(key)] == ["failed"]
    assert svc.reads.thread(key).busy_reason is None


def test_a_step_that_must_compact_commits_the_intake_then_compacts_outside_the_lock(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("press"))
    route(svc, key)
    finished_turns(svc, key, 20)  # ~5800 tokens: the next message crosses the 6400 threshold
    t = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL)
    t.ensure_run()
    t.stage([keyed(user("Now summarize everything: " + filler(800)), "big")])
    c = t.begin_call()
    assert c.outcome is not None and c.outcome.reason in ("summarized", "prune_enough", "max_rounds") and c.outcome.progressed
    assert svc.reads.compaction_state(key).summary and c.tokens < c.measured.policy.threshold
    assert any(s.message.source_key == "big" for s in svc.reads.messages_page(key, limit=1000))
    assert [r.estimated_tokens for r in svc.store.model_requests(key) if r.id == c.request_id] == [c.tokens]


def test_intake_asks_the_unique_key_and_never_scans_the_thread(make, new_key, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = make()
    key = new_thread(svc, new_key("dedup"))
    history = [keyed(user(f"question {i}") if i % 2 == 0 else assistant(f"answer {i}"), f"k{i}") for i in range(400)]
    first = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL)
    first.stage(history)
    first.begin_call()
    first.end_run()

    def scan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the thread was paged through to find its source keys")

    monkeypatch.setattr(svc.reads, "messages_page", scan)
    monkeypatch.setattr(svc.store, "messages_page", scan)
    again = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL)  # another process: knows nothing
    again.stage([*history, keyed(user("question 400"), "k400"), history[3], Message("user", "no key")])
    again.begin_call()
    monkeypatch.undo()
    stored = [s.message for s in svc.reads.messages_page(key, limit=1000)]
    assert [m.source_key for m in stored] == [f"k{i}" for i in range(401)] + [None]
    assert stored[-1].content == "no key"


def test_the_overflow_protocol_recovers_on_progress_and_gives_up_without(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("overflow"))
    route(svc, key)
    finished_turns(svc, key, 12)
    run = RunState(run_id=svc.runs.start_run(key))
    driver = StepDriver(svc.steps, key, provider=PROVIDER, model=MODEL)
    overflow = ProviderError(CONTEXT_WINDOW_EXCEEDED, "maximum context length exceeded", provider=PROVIDER, status=400)

    c = driver.prepare(run, 1)
    failure = driver.failed(c, run, overflow)
    assert failure.retry and run.overflow_attempts == 1 and driver.recovering
    c2 = driver.prepare(run, 2)
    assert c2.tokens < c.tokens
    driver.succeeded(c2, run, prompt_tokens=c2.tokens, completion_tokens=3)
    kinds = [str(e.kind) for e in svc.reads.events(key)]
    assert [k for k in kinds if k in ("provider_error", "retry", "recovered", "gave_up")] == ["provider_error", "retry", "recovered"]
    assert [r.outcome for r in svc.store.model_requests(key)][-2:] == ["error", "ok"]

    # the bound reached: given up at once, the original error is the caller's, a gave-up says why
    capped = StepDriver(svc.steps, key, provider=PROVIDER, model=MODEL, max_overflow_retries=1)
    c4 = capped.prepare(run, 3)
    assert capped.failed(c4, run, overflow) == Failure(False, overflow, "retries_exhausted")
    assert [e.data["reason"] for e in svc.reads.events(key) if str(e.kind) == "gave_up"] == ["retries_exhausted"]
    # not a provider error: recorded with its words, no recovery, no event
    c5 = capped.prepare(run, 4)
    before = len(svc.reads.events(key))
    assert capped.failed(c5, run, None, message="OSError: socket closed") == Failure(False, None)
    assert len(svc.reads.events(key)) == before
    last = [r for r in svc.store.model_requests(key) if r.id == c5.request_id][0]
    assert (last.outcome, last.error_code, last.error_message) == ("error", None, "OSError: socket closed")


def test_an_end_held_at_once_needs_no_thread_and_never_waits_for_the_writer(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("now"))
    route(svc, key)
    t = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL)
    t.ensure_run()
    t.stage([keyed(user("Where is doc-42?"), "u1")])
    c = t.begin_call()
    t.driver.hold = 600.0
    reply = keyed(assistant("Looking.", ToolCall("c1", "lookup", "{}")), "a1")
    with t.driver._lock:  # the background writer writing: it would wait, so it is not done now
        assert not t.succeeded_now(c, prompt_tokens=c.tokens, completion_tokens=5, messages=[reply])
    assert t.driver.held is None and not t.knows("a1")  # nothing done: the caller calls succeeded
    with transactions(svc) as n:
        assert t.succeeded_now(c, prompt_tokens=c.tokens, completion_tokens=5, messages=[reply])
    assert n == [0] and t.driver.held is not None and t.knows("a1")
    assert t.defer_now([keyed(tool_result("c1", "found"), "t1")])  # a session's items join what is held
    assert [m.source_key for m in t.driver.held.messages] == ["a1", "t1"]  # type: ignore[union-attr]
    with transactions(svc) as n:
        t.end_run()
    assert n == [2]  # what is held, then the run's end
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok", "ok"]  # route()'s, then this call's
    assert [s.message.source_key for s in svc.reads.messages_page(key)] == ["u1", "a1", "t1"]
