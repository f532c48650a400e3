"""The service's use cases over the write door: what the harness and the inspector call instead of
reaching into the store or the compactor (runs, model requests, events, measuring, token badges)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.core.errors import EngineError, ThreadBusy
from engine.core.events import RetryEvent
from engine.core.messages import META_PRUNED, InvalidMessage, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.views import Offload, VisibleTokens
from engine.service import Service, open_service
from tests import door_ops

from .conftest import POLICY, Counting, ServiceFactory, filler


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def svc(request: pytest.FixtureRequest) -> Iterator[Service]:
    factory: ServiceFactory = request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")
    yield factory()


def _prune(svc: Service, key: str, message_id: int, preview: str) -> None:
    with svc.store.locked(key) as tx:
        tx.record_prune(
            [Offload(message_id=message_id, tool_name="query_kb", path="/nowhere/x", sha256="ab" * 32, preview=preview, original_tokens=0, preview_tokens=0)],
            trigger="manual",
        )


def test_visible_tokens_count_what_the_model_sees_with_the_routed_models_meter(svc: Service, new_key) -> None:
    key = new_key("badges")
    svc.runs.create_thread(key)
    call = ToolCall("c1", "query_kb", '{"q": "延迟"}')
    svc.runs.append_messages(key, [user("结论：延迟上升与重排模型的批大小调整有关。"), assistant("", call), tool_result("c1", filler(800, "结果"), name="query_kb"), assistant("好的")])
    stored = svc.reads.messages_page(key)
    _prune(svc, key, stored[2].id, "预览：结果的前几行")
    offloads = svc.reads.offloads(key)
    for model in ("m", "gpt-4o"):  # cl100k, then o200k: the thread's route picks the meter
        door_ops.set_route(svc.store, key, provider="sim", model=model)
        meter = default_meter(model)
        got = svc.compaction.visible_tokens(key, stored, offloads)
        assert isinstance(got, VisibleTokens)
        pruned = stored[2].message
        shown = pruned.with_content("预览：结果的前几行", **{META_PRUNED: "ab" * 32})
        assert got.seen == {s.id: meter.count_message(shown if s.id == pruned.id else s.message) for s in stored}
        assert got.original == {pruned.id: meter.count_message(pruned)}
        assert got.original[pruned.id] > got.seen[pruned.id]
    assert svc.compaction.visible_tokens(key, [], offloads) == VisibleTokens(seen={}, original={})
    assert default_meter("m").count_message(stored[0].message) != default_meter("gpt-4o").count_message(stored[0].message)


def test_record_prune_takes_the_one_offload_record_and_sets_its_generation(svc: Service, new_key) -> None:
    key = new_key("offload")
    svc.runs.create_thread(key)
    ids = svc.runs.append_messages(key, [user("q"), assistant("", ToolCall("c", "t", "{}")), tool_result("c", "full text", name="t")])
    new = Offload(message_id=ids[2], tool_name="t", path="/p", sha256="cd" * 32, preview="pre", original_tokens=3, preview_tokens=1)
    assert new.generation is None
    with svc.store.locked(key) as tx:
        assert tx.record_prune([new], trigger="pressure") == 1
    stored = svc.reads.offloads(key)[ids[2]]
    assert (stored.generation, stored.preview, stored.sha256) == (1, "pre", "cd" * 32)


def test_a_run_from_start_to_user_wait_to_resume(svc: Service, new_key) -> None:
    key = new_key("run")
    svc.runs.create_thread(key)
    schemas = [{"type": "function", "function": {"name": "ask_user"}}]
    run = svc.runs.start_run(key, message=user("delete the branches"), tools=schemas)
    assert svc.store.conversation_config(key)[1] == tuple(schemas)
    with pytest.raises(ThreadBusy):
        svc.runs.start_run(key, message=user("a second run"))
    assert [s.message.content for s in svc.reads.messages_page(key)] == ["delete the branches"]  # the refused run wrote nothing
    ask, later = ToolCall("a1", "ask_user", "{}"), ToolCall("a2", "shell", "{}")
    svc.runs.append_message(key, assistant("", ask, later), run_id=run)
    svc.runs.wait_for_user(key, run, call=ask, question="Delete 14 branches?")
    assert svc.reads.thread(key).busy_reason == "waiting_for_user"
    assert [(e.kind, e.data) for e in svc.reads.events(key)] == [("waiting_for_user", {"tool": "ask_user", "call_id": "a1", "question": "Delete 14 branches?"})]
    rest = svc.runs.resume_run(key, run, "yes")
    assert [c.id for c in rest] == ["a2"] and svc.reads.thread(key).busy_reason == "running"
    assert svc.reads.messages_page(key)[-1].message.tool_call_id == "a1"
    svc.runs.append_message(key, tool_result("a2", "deleted"), run_id=run)
    svc.runs.append_message(key, assistant("Done."), run_id=run)
    svc.runs.finish_run(key, run)
    assert svc.store.runs(key)[-1].status == "completed" and svc.reads.thread(key).busy_reason is None


def test_model_requests_through_the_service(svc: Service, new_key) -> None:
    key, other = new_key("req"), new_key("req-other")
    svc.runs.create_thread(key)
    svc.runs.create_thread(other)
    assert svc.runs.last_completed_request(key) is None
    rid = svc.steps.record_model_request(key, provider="sim", model="m", step=1, estimated_tokens=900, threshold=6400)
    with pytest.raises(EngineError) as err:  # a request belongs to its thread
        svc.steps.complete_model_request(other, rid, outcome="ok")
    assert err.value.code == "not_found"
    with pytest.raises(EngineError) as err:
        svc.steps.complete_model_request(key, rid, outcome="fine")
    assert err.value.code == "invalid_outcome"
    assert svc.runs.last_completed_request(key) is None
    svc.steps.complete_model_request(key, rid, outcome="ok", reported_prompt_tokens=950, reported_completion_tokens=12)
    last = svc.runs.last_completed_request(key)
    assert last is not None and (last.id, last.reported_prompt_tokens, last.provider, last.model) == (rid, 950, "sim", "m")
    assert svc.reads.thread(key).model == "m"


def test_policies_have_one_holder_and_measure_takes_a_route(tmp_path) -> None:
    svc = open_service(f"sqlite:///{tmp_path / 'policy.db'}", workdir=tmp_path / "wd", summarizer=Counting(), policies=POLICY, create=True)
    try:
        assert svc.policies is svc.compactor.policies
        svc.steering.set_policy({**POLICY, "models": [{"provider": "sim", "model": "small", "context_window": 4000}]})
        assert svc.policies is svc.compactor.policies
        assert svc.steps.policy_for("sim", "small").context_window == 4000 and svc.steps.policy_for("sim", "m").context_window == 8000
        svc.runs.create_thread("measure")
        svc.runs.append_message("measure", user("hello"))
        assert svc.steps.measure("measure", provider="sim", model="small").policy.threshold == svc.steps.policy_for("sim", "small").threshold
        assert svc.steps.measure("measure").policy.threshold == svc.steps.policy_for(None, None).threshold
        svc.steps.add_event("measure", RetryEvent(attempt=1), trigger="overflow")
        assert [(e.kind, e.trigger) for e in svc.reads.events("measure")] == [("retry", "overflow")]
    finally:
        svc.close()


def test_start_run_with_an_orphan_starts_nothing(svc: Service, new_key) -> None:
    key = new_key("start")
    svc.runs.create_thread(key)
    with pytest.raises(InvalidMessage):
        svc.runs.start_run(key, message=tool_result("x", "?"))
    assert svc.store.runs(key) == [] and svc.reads.thread(key).busy_reason is None
