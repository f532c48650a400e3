"""Write-behind steps (:meth:`engine.step.StepDriver.prepare` with ``behind=True``, the LangChain
adapter's driver): a steady step below the threshold is sent without touching the store, and its one
transaction runs on the step driver's writer while the model answers; the surface it sent is the
store's; a step near the threshold, one with an unanswered call, or one after another writer moved
the thread goes through the store first; a failed transaction is raised by the next step and loses
nothing. On SQLite and PostgreSQL, with real services (another service on the same database plays
another process)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from engine.adapters.core import EngineThread
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.service import RunState, Service
from engine.step import WRITER_THREAD, Call, StepDriver
from engine.store.db import DatabaseUnreachable

from .conftest import MODEL, PROVIDER, counted, filler, finished_turns, keyed, new_thread, route


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def make(request: pytest.FixtureRequest) -> Callable[..., Service]:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def shown(messages: Any) -> list[tuple[str, str, str | None]]:
    return [(m.role, m.content, m.source_key) for m in messages]


def requests(svc: Service, key: str) -> dict[int, Any]:
    return {r.id: r for r in svc.store.model_requests(key)}


def behind_thread(svc: Service, key: str) -> EngineThread:
    t = EngineThread(svc, key, "test", provider=PROVIDER, model=MODEL, behind=True)
    t.configure("You are a careful support agent.", [])
    t.ensure_run()
    t.driver.hold = 600.0  # the held reply goes with the next step (the writer's hold timer stays out)
    return t


def first_call(t: EngineThread) -> Call:
    """The first step of a driver (through the store), answered with a tool call held for the next."""
    t.stage([keyed(user("Where is doc-42?"), "u1")])
    c = t.begin_call()
    assert c.projected is None  # a driver's first step reads the store: nothing to decide from yet
    t.succeeded(c, prompt_tokens=c.tokens, completion_tokens=5, messages=[keyed(assistant("Looking.", ToolCall("c1", "lookup", "{}")), "a1")])
    return c


def test_a_steady_step_is_sent_without_the_store_and_written_behind_as_the_one_transaction(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("behind"))
    route(svc, key)
    finished_turns(svc, key, 3)
    t = behind_thread(svc, key)
    c1 = first_call(t)

    t.stage([keyed(tool_result("c1", "doc-42 is owned by Ana."), "t1")])
    with counted(svc, "before_cursor_execute", this_thread=True) as n:
        c2 = t.begin_call()
    assert n == [0] and c2.projected is not None  # decided without the store
    assert shown(c2.surface.messages)[-3:] == [("user", "Where is doc-42?", "u1"), ("assistant", "Looking.", "a1"),
                                               ("tool", "doc-42 is owned by Ana.", "t1")]

    t.driver.settle()  # (the writer ran it meanwhile, or runs it now)
    store = svc.steps.measure(key, provider=PROVIDER, model=MODEL)
    assert shown(store.surface.messages) == shown(c2.surface.messages)  # the surface sent is the store's
    assert c2.tokens == store.tokens  # the writer's exact count
    reqs = requests(svc, key)
    assert (reqs[c2.request_id].outcome, reqs[c2.request_id].estimated_tokens, reqs[c2.request_id].step) == ("pending", store.tokens, 2)
    assert reqs[c1.request_id].outcome == "ok"  # the held reply went first in step 2's transaction

    t.succeeded(c2, prompt_tokens=c2.tokens, completion_tokens=4, messages=[keyed(assistant("Ana owns it."), "a2")])
    t.end_run()
    reqs = requests(svc, key)
    assert [reqs[c.request_id].outcome for c in (c1, c2)] == ["ok", "ok"]
    assert (reqs[c2.request_id].reported_prompt_tokens, reqs[c2.request_id].reported_completion_tokens) == (c2.tokens, 4)
    assert [s.message.source_key for s in svc.reads.messages_page(key)][-4:] == ["u1", "a1", "t1", "a2"]
    assert svc.reads.thread(key).busy_reason is None


def test_near_the_threshold_a_step_is_decided_on_its_exact_count(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("near"))
    route(svc, key)
    finished_turns(svc, key, 18)
    t = behind_thread(svc, key)
    c1 = first_call(t)
    room = c1.measured.policy.threshold - c1.tokens
    result = filler(room // 3, "doc-42:")  # its tokens fit, its bytes (the upper bound) do not
    assert len(result.encode()) > room
    t.stage([keyed(tool_result("c1", result), "t1")])
    c2 = t.begin_call()
    assert c2.projected is not None  # counted exactly: below the threshold, behind
    t.driver.settle()
    assert c2.tokens == svc.steps.measure(key, provider=PROVIDER, model=MODEL).tokens < c2.measured.policy.threshold

    t.succeeded(c2, prompt_tokens=c2.tokens, completion_tokens=1, messages=[keyed(assistant("Looking further.", ToolCall("c2", "lookup", "{}")), "a2")])
    t.stage([keyed(tool_result("c2", filler(room, "doc-43:")), "t2")])  # over the threshold: through the store, which compacts
    c3 = t.begin_call()
    assert c3.projected is None and c3.outcome is not None and c3.outcome.action != "none"
    assert c3.tokens < c3.measured.policy.threshold


def test_a_step_with_an_unanswered_call_goes_through_the_store(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("open-call"))
    route(svc, key)
    t = behind_thread(svc, key)
    first_call(t)
    c2 = t.begin_call()  # the held reply's call has no result among the new messages
    assert c2.projected is None
    t.stage([keyed(tool_result("c1", "found"), "t1")])
    t.succeeded(c2, prompt_tokens=c2.tokens, completion_tokens=1, messages=[])
    c3 = t.begin_call()
    assert c3.projected is None  # a result for a call sent before the new messages: through the store too
    t.succeeded(c3, prompt_tokens=c3.tokens, completion_tokens=1, messages=[keyed(assistant("Found it."), "a3")])
    t.stage([keyed(user("Thanks. And doc-44?"), "u2")])
    c4 = t.begin_call()
    assert c4.projected is not None  # every call answered: behind again
    t.driver.settle()
    assert shown(svc.steps.measure(key, provider=PROVIDER, model=MODEL).surface.messages) == shown(c4.surface.messages)


def test_a_thread_another_writer_moved_is_recorded_then_read_again(make, new_key, caplog: pytest.LogCaptureFixture) -> None:
    svc = make()
    key = new_thread(svc, new_key("moved"))
    route(svc, key)
    t = behind_thread(svc, key)
    first_call(t)
    t.stage([keyed(tool_result("c1", "found"), "t1")])
    c2 = t.begin_call()
    assert c2.projected is not None
    t.succeeded(c2, prompt_tokens=c2.tokens, completion_tokens=1, messages=[keyed(assistant("Found it."), "a2")])
    t.driver.settle()

    other = make()  # another process on the same store appends to the thread
    other.runs.append_message(key, user("Support here: please also check doc-43."))
    t.stage([keyed(user("Thanks. And doc-44?"), "u2")])
    with caplog.at_level(logging.WARNING, logger="engine.step"):
        c3 = t.begin_call()  # the driver does not know yet: sent behind
        assert c3.projected is not None
        t.driver.settle()
    assert any("changed under a write-behind step" in r.getMessage() for r in caplog.records)
    assert requests(svc, key)[c3.request_id].outcome == "pending"  # recorded all the same

    t.succeeded(c3, prompt_tokens=c3.tokens, completion_tokens=1, messages=[keyed(assistant("Checking both."), "a3")])
    c4 = t.begin_call()  # read from the store first: the other writer's message is in it
    assert c4.projected is None
    assert "Support here: please also check doc-43." in [m.content for m in c4.surface.messages]
    t.succeeded(c4, prompt_tokens=c4.tokens, completion_tokens=1, messages=[keyed(assistant("Both are Ana's."), "a4")])
    t.end_run()
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok"] * 5  # route()'s and the four calls


class Wrapped:
    """The service's step port, as is but for what a subclass overrides."""

    def __init__(self, port: Any) -> None:
        self.port = port

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)


class FailingOnce(Wrapped):
    """The step port whose second step transaction (the first write-behind one, on the writer
    thread or on the caller's when it settles first) fails as a database that went away fails."""

    def __init__(self, port: Any) -> None:
        super().__init__(port)
        self.begun = 0
        self.threads: list[str] = []

    def begin_step(self, *args: Any, **kwargs: Any) -> Any:
        self.begun += 1
        self.threads.append(threading.current_thread().name)
        if self.begun == 2:
            raise DatabaseUnreachable("cannot open the database: disk I/O error")
        return self.port.begin_step(*args, **kwargs)


def test_a_failed_write_behind_transaction_is_raised_by_the_next_step_and_loses_nothing(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("failed-behind"))
    route(svc, key)
    port = FailingOnce(svc.steps)
    d = StepDriver(port, key, PROVIDER, MODEL, hold=600.0, behind=True)
    run = RunState(run_id=svc.runs.start_run(key))
    c1 = d.prepare(run, 1, messages=[keyed(user("Where is doc-42?"), "u1")])
    d.succeeded(c1, run, prompt_tokens=c1.tokens, completion_tokens=5, messages=[keyed(assistant("Looking.", ToolCall("c1", "lookup", "{}")), "a1")])
    c2 = d.prepare(run, 2, messages=[keyed(tool_result("c1", "doc-42 is owned by Ana."), "t1")])
    assert c2.projected is not None
    d.succeeded(c2, run, prompt_tokens=c2.tokens, completion_tokens=3, messages=[keyed(assistant("Ana owns it."), "a2")])

    with pytest.raises(DatabaseUnreachable):  # the next step says so (its model call is not made)
        d.prepare(run, 3, messages=[keyed(user("Thanks."), "u2")])
    assert port.begun == 2 and port.threads[0] == threading.current_thread().name
    d.flush()  # what the failed transaction and the call after it were to write, in order
    assert [s.message.source_key for s in svc.reads.messages_page(key)] == ["u1", "a1", "t1", "a2"]
    reqs = svc.store.model_requests(key)
    assert [(r.id, r.outcome) for r in reqs][-1] == (c1.request_id, "ok")  # step 1's reply completed it
    assert len(reqs) == 2  # route()'s and step 1's: step 2's request was never recorded (its transaction failed)
    c3 = d.prepare(run, 3, messages=[keyed(user("Thanks."), "u2")])  # the store is back: through it first
    assert c3.projected is None and c3.request_id is not None


class HeldOnTheWriter(Wrapped):
    """The step port whose transactions on the writer thread wait for ``release``."""

    def __init__(self, port: Any) -> None:
        super().__init__(port)
        self.entered = threading.Event()
        self.release = threading.Event()

    def begin_step(self, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == WRITER_THREAD:
            self.entered.set()
            self.release.wait(20)
        return self.port.begin_step(*args, **kwargs)


def test_a_step_that_comes_while_the_last_transaction_is_written_waits_for_it_and_goes_behind(make, new_key) -> None:
    svc = make()
    key = new_thread(svc, new_key("pending"))
    route(svc, key)
    port = HeldOnTheWriter(svc.steps)
    d = StepDriver(port, key, PROVIDER, MODEL, hold=600.0, behind=True)
    run = RunState(run_id=svc.runs.start_run(key))
    c1 = d.prepare(run, 1, messages=[keyed(user("Where is doc-42?"), "u1")])
    d.succeeded(c1, run, prompt_tokens=c1.tokens, completion_tokens=5, messages=[keyed(assistant("Looking.", ToolCall("c1", "lookup", "{}")), "a1")])
    c2 = d.prepare(run, 2, messages=[keyed(tool_result("c1", "doc-42 is owned by Ana."), "t1")])
    assert c2.projected is not None and port.entered.wait(20)  # its transaction is on the writer, held there
    d.succeeded(c2, run, prompt_tokens=c2.tokens, completion_tokens=3, messages=[keyed(assistant("Ana owns it."), "a2")])
    threading.Timer(0.2, port.release.set).start()
    c3 = d.prepare(run, 3, messages=[keyed(user("Thanks. And doc-44?"), "u2")])  # waits for step 2's, then behind
    assert c3.projected is not None and c2.request_id is not None
    d.succeeded(c3, run, prompt_tokens=c3.tokens, completion_tokens=1, messages=[keyed(assistant("Checking."), "a3")])
    d.flush()
    assert shown(svc.steps.measure(key, provider=PROVIDER, model=MODEL).surface.messages)[-1:] == [("assistant", "Checking.", "a3")]
    assert [s.message.source_key for s in svc.reads.messages_page(key)] == ["u1", "a1", "t1", "a2", "u2", "a3"]
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok"] * 4  # route()'s and the three calls
