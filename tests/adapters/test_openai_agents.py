"""OpenAI Agents SDK: ``EngineSession`` and ``CompactionModel`` in real ``Runner.run`` loops with
``OpenAIChatCompletionsModel`` talking to the provider simulator over a socket."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from .conftest import (
    LONG,
    MODEL,
    PROSE,
    ROUNDS,
    RUNS,
    SYSTEM,
    assert_calls_answered,
    assert_pruned_and_summarized,
    assert_runs_stored_once,
    bulk,
    kinds,
    measured_in_call,
    multi_run_script,
    part,
    skip_without,
    stored_roles,
)

skip_without("agents", "openai-agents")

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled  # noqa: E402

from engine.adapters.core import AdapterError  # noqa: E402
from engine.adapters.openai_agents import CompactionModel, EngineSession, from_engine, to_engine  # noqa: E402
from engine.apps.harness.simulator import ProviderSimulator, Reply  # noqa: E402
from engine.core.events import EventKind  # noqa: E402
from engine.core.messages import META_PRUNED, Attachment, Reasoning  # noqa: E402

set_tracing_disabled(True)  # no trace export from tests


def result_of(q: str) -> str:
    return f"{q}: " + bulk(150)


@function_tool
def lookup(q: str) -> str:
    """Look something up in the knowledge base."""
    return result_of(q)


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def make_agent(sim: ProviderSimulator, session: EngineSession, **settings: Any) -> Agent:
    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim-key", max_retries=0, timeout=10)
    model = CompactionModel(OpenAIChatCompletionsModel(model=MODEL, openai_client=client), session)
    return Agent(name="support", instructions=SYSTEM, tools=[lookup], model=model, model_settings=ModelSettings(**settings))


def long_script(rounds: int = ROUNDS) -> list[Reply]:
    calls = [Reply(content=f"Step {i}. " + PROSE * 15, tool_calls=(("lookup", {"q": f"topic {i}"}),)) for i in range(rounds)]
    return [*calls, Reply(content="All topics are covered.")]


# -- mapping -------------------------------------------------------------------------------------
def test_items_round_trip_without_loss(make_service, key) -> None:
    items = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "What does this chart say?"}, {"type": "input_image", "image_url": "https://example.org/c.png", "detail": "auto"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Read the chart."}], "encrypted_content": "gAAA"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": '{"q": "chart"}'},
        {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "lookup", "arguments": '{"q": "axis"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "chart: revenue up"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "error: no axis"}], "status": "incomplete"},
        {"id": "msg_2", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Revenue is up.", "annotations": []}]},
    ]
    ours = to_engine(items)
    assert [m.role for m in ours] == ["developer", "user", "assistant", "tool", "tool", "assistant"]
    assert ours[1].content == "What does this chart say?" and ours[1].attachments == (Attachment("image", source="url", url="https://example.org/c.png"),)
    call_turn = ours[2]  # reasoning, text and both calls: one assistant message, kept together
    assert call_turn.content == "Let me look." and [(c.id, c.name, json.loads(c.arguments)) for c in call_turn.tool_calls] == [
        ("call_1", "lookup", {"q": "chart"}),
        ("call_2", "lookup", {"q": "axis"}),
    ]
    assert call_turn.reasoning == (Reasoning("", summary="Read the chart.", encrypted="gAAA"),)
    assert (ours[3].tool_call_id, ours[3].content) == ("call_1", "chart: revenue up")
    assert ours[4].content == "error: no axis" and ours[4].is_error and not ours[3].is_error
    assert [item for m in ours for item in from_engine(m)] == items
    svc = make_service(context_window=8000)  # through the write door and back
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, ours)
    stored = [s.message for s in svc.reads.messages_page(key)]
    assert [(m.role, m.reasoning, m.attachments, m.is_error) for m in stored] == [(m.role, m.reasoning, m.attachments, m.is_error) for m in ours]
    assert [item for m in stored for item in from_engine(m)] == items
    preview = from_engine(ours[3].with_content("preview", **{META_PRUNED: "abc"}), preview=True)
    assert preview == [{"type": "function_call_output", "call_id": "call_1", "output": "preview"}]


# -- a real agent -----------------------------------------------------------------------------------
def test_every_call_sends_the_stores_surface_whether_written_behind_or_not(make_service, sim, summarizer, key) -> None:
    """Steady steps are written behind (started without a worker thread or the store); steps that
    compact go through the store. Either way the model input is the store's surface at that step."""
    svc = make_service(**LONG)
    sim.script(long_script())
    session = EngineSession(key, service=svc)
    checked: list[bool] = []

    class Checked(CompactionModel):
        def _input(self, call: Any, input: object, synced: bool) -> Any:
            sent = super()._input(call, input, synced)
            m = measured_in_call(svc, self.session.thread, call, checked)
            assert synced and sent == EngineSession.items_of(m)
            return sent

    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim-key", max_retries=0, timeout=10)
    agent = Agent(name="support", instructions=SYSTEM, tools=[lookup], model=Checked(OpenAIChatCompletionsModel(model=MODEL, openai_client=client), session))
    run(Runner.run(agent, "Cover every topic in the knowledge base.", session=session, max_turns=50))
    assert len(checked) == ROUNDS + 1 and any(checked) and not all(checked)  # some behind, some through the store
    assert_pruned_and_summarized(svc, key)
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok"] * (ROUNDS + 1)


def test_a_long_tool_session_prunes_summarizes_and_persists(make_service, sim, summarizer, key) -> None:
    svc = make_service(**LONG)
    sim.script(long_script())
    session = EngineSession(key, service=svc, title="Agents SDK support agent")
    result = run(Runner.run(make_agent(sim, session), "Cover every topic in the knowledge base.", session=session, max_turns=50))

    assert result.final_output == "All topics are covered."
    assert stored_roles(svc, key) == ["user"] + ["assistant", "tool"] * ROUNDS + ["assistant"]
    tools = [s.message for s in svc.reads.messages_page(key, limit=1000) if s.message.role == "tool"]
    assert [m.content for m in tools] == [result_of(f"topic {i}") for i in range(ROUNDS)]  # stored whole
    assert_calls_answered(svc, key)
    assert_pruned_and_summarized(svc, key)
    assert summarizer.calls >= 1
    info = svc.reads.thread(key)
    assert (info.title, info.agent, info.provider, info.model) == ("Agents SDK support agent", "openai_agents", "openai", MODEL)
    requests = svc.store.model_requests(key)
    assert len(requests) == len(sim.requests) == ROUNDS + 1 and {r.outcome for r in requests} == {"ok"}
    assert [r.reported_prompt_tokens for r in requests] == [r.prompt_tokens for r in sim.requests]
    for r in requests:
        assert abs(r.estimated_tokens - r.reported_prompt_tokens) <= max(8, r.reported_prompt_tokens // 25), r
    last = sim.requests[-1].body["messages"]
    assert last[0] == {"role": "system", "content": SYSTEM}
    assert any(m["role"] == "system" and "Summary of the earlier conversation" in m["content"] for m in last[1:])
    # what the next run reads: the compacted surface, calls paired with their outputs
    items = run(session.get_items())
    assert items[0]["role"] == "system" and "Summary of the earlier conversation" in items[0]["content"]
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    assert calls == outputs and calls
    assert sum(len(i["output"]) for i in items if i.get("type") == "function_call_output") < sum(len(m.content) for m in tools if m.tool_call_id in outputs)


def test_a_second_run_reads_the_session_and_adds_to_the_same_thread(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.script([Reply(tool_calls=(("lookup", {"q": "a"}),)), Reply("first"), Reply("second")])
    session = EngineSession(key, service=svc)


    async def two_runs() -> tuple[Any, Any]:  # one event loop for the client's connections
        agent = make_agent(sim, session)
        return await Runner.run(agent, "one", session=session), await Runner.run(agent, "two", session=session)

    first, second = run(two_runs())
    assert (first.final_output, second.final_output) == ("first", "second")
    assert stored_roles(svc, key) == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [r.status for r in svc.store.runs(key)] == ["completed", "completed"]
    sent = sim.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_added_items_go_with_the_next_model_call_and_are_read_back_before_it(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    session = EngineSession(key, service=svc)
    session.thread.driver.hold = 600.0  # the background writer stays out of this test
    run(session.add_items([{"role": "user", "content": "hi"}]))
    assert stored_roles(svc, key) == []  # held for the next model call's transaction
    assert [i["content"] for i in run(session.get_items())] == ["hi"]  # a read of the session writes them first
    assert stored_roles(svc, key) == ["user"]

    sim.script([Reply(tool_calls=(("lookup", {"q": "a"}),)), Reply("done")])
    result = run(Runner.run(make_agent(sim, session), "go", session=session))
    assert result.final_output == "done"
    assert stored_roles(svc, key) == ["user", "user", "assistant", "tool", "assistant"]
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok", "ok"]
    assert [r.status for r in svc.store.runs(key)] == ["completed"]


def test_added_items_are_written_by_the_background_writer_when_no_call_comes(make_service, key) -> None:
    import time

    from engine.adapters.core import HOLD_SECONDS

    svc = make_service(context_window=8000)
    session = EngineSession(key, service=svc)
    run(session.add_items([{"role": "user", "content": "hi"}]))
    until = time.monotonic() + 10 + HOLD_SECONDS  # a wait, not a timing: written HOLD_SECONDS after the add
    while not stored_roles(svc, key) and time.monotonic() < until:
        time.sleep(0.02)
    assert stored_roles(svc, key) == ["user"] and session.thread.driver.held is None


def test_an_overflow_recovers_by_compacting_and_retrying(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.script(long_script(2))
    sim.context_window = 1800
    session = EngineSession(key, service=svc)
    result = run(Runner.run(make_agent(sim, session), "Cover two topics.", session=session))

    assert result.final_output == "All topics are covered."
    assert [r.outcome for r in sim.requests] == ["ok", "ok", "overflow", "ok"]
    assert sim.requests[-1].prompt_tokens < 1800 < sim.requests[-2].prompt_tokens
    got = kinds(svc, key)
    assert [k for k in got if k in (EventKind.PROVIDER_ERROR, EventKind.RETRY, EventKind.RECOVERED)] == ["provider_error", "retry", "recovered"]
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok", "ok", "error", "ok"]
    assert_calls_answered(svc, key)
    assert [s.message.content for s in svc.reads.messages_page(key) if s.message.role == "tool"] == [result_of("topic 0"), result_of("topic 1")]


def test_an_overflow_that_cannot_shrink_raises_the_original_error(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.context_window = 30
    session = EngineSession(key, service=svc)
    with pytest.raises(openai.BadRequestError) as caught:
        run(Runner.run(make_agent(sim, session), "Hello there, please answer.", session=session))
    assert "maximum context length is 30 tokens" in str(caught.value)
    assert [e.data["reason"] for e in svc.reads.events(key) if e.kind == EventKind.GAVE_UP] in (["no_progress"], ["retries_exhausted"])
    run_info = svc.store.runs(key)[-1]
    assert (run_info.status, run_info.error_code) == ("failed", "CONTEXT_WINDOW_EXCEEDED")
    assert svc.reads.thread(key).busy_reason is None


def test_a_failing_summarizer_loses_nothing_and_the_agent_goes_on(make_service, sim, summarizer, key) -> None:
    svc = make_service(context_window=6000, tool_result_limit_tokens=100_000)
    summarizer.fail = True
    sim.script(long_script(6))
    session = EngineSession(key, service=svc)
    result = run(Runner.run(make_agent(sim, session), "Cover six topics.", session=session, max_turns=30))

    assert result.final_output == "All topics are covered."
    assert summarizer.calls >= 1
    got = kinds(svc, key)
    assert EventKind.SUMMARY_REJECTED in got and EventKind.SUMMARY not in got
    state = svc.reads.compaction_state(key)
    assert (state.boundary, state.summary) == (None, None)
    assert stored_roles(svc, key) == ["user"] + ["assistant", "tool"] * 6 + ["assistant"]
    assert len(sim.requests[-1].body["messages"]) == 1 + 1 + 2 * 6  # system, request, every round: nothing dropped


def test_pop_is_refused_and_clear_starts_a_fresh_thread(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.script([Reply("hello")])
    session = EngineSession(key, service=svc)
    run(Runner.run(make_agent(sim, session), "hi", session=session))
    with pytest.raises(AdapterError):
        run(session.pop_item())
    run(session.clear_session())
    assert session.session_id == f"{key}~2" and run(session.get_items()) == []
    assert stored_roles(svc, key) == ["user", "assistant"]  # the old thread stays for the inspector


def test_a_streamed_run_is_compacted_and_recorded_the_same_way(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.script(long_script(2))
    sim.context_window = 1800  # the third call overflows before its stream opens, and recovers
    session = EngineSession(key, service=svc)

    async def streamed() -> Any:
        # the SDK asks a non-OpenAI host for streamed usage only when told to
        result = Runner.run_streamed(make_agent(sim, session, include_usage=True), "Cover two topics.", session=session)
        async for _ in result.stream_events():
            pass
        return result

    result = run(streamed())
    assert result.final_output == "All topics are covered."
    assert [(r.outcome, r.stream) for r in sim.requests] == [("ok", True), ("ok", True), ("overflow", True), ("ok", True)]
    recorded = svc.store.model_requests(key)
    assert [r.outcome for r in recorded] == ["ok", "ok", "error", "ok"]
    assert [r.reported_prompt_tokens for r in recorded if r.outcome == "ok"] == [r.prompt_tokens for r in sim.requests if r.outcome == "ok"]
    assert stored_roles(svc, key) == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [r.status for r in svc.store.runs(key)] == ["completed"]



# -- several runs on one session (the SDK's way to pass the history back in) ---------------------
def test_runs_on_one_session_store_each_item_once(make_service, sim, key) -> None:
    svc = make_service(**LONG)
    sim.script(multi_run_script())
    session = EngineSession(key, service=svc)

    async def runs() -> Any:
        agent = make_agent(sim, session)
        for r in range(RUNS):
            result = await Runner.run(agent, part(r), session=session, max_turns=30)
        return result

    assert run(runs()).final_output == f"Run {RUNS - 1} is done."
    assert_runs_stored_once(svc, sim, key)
