"""Pydantic AI: ``EngineCompaction`` as a capability (and as a history processor) of real agents
with ``OpenAIChatModel`` talking to the provider simulator over a socket."""

from __future__ import annotations

import asyncio
import json
from typing import Any

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

skip_without("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.capabilities import ProcessHistory  # noqa: E402
from pydantic_ai.exceptions import ModelHTTPError  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ImageUrl,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

from engine.adapters.core import surface_items  # noqa: E402
from engine.adapters.pydantic_ai import EngineCompaction, from_engine, system_parts, to_engine  # noqa: E402
from engine.apps.harness.simulator import ProviderSimulator, Reply  # noqa: E402
from engine.core.events import EventKind  # noqa: E402
from engine.core.messages import META_PRUNED, Attachment, Reasoning  # noqa: E402


def result_of(q: str) -> str:
    return f"{q}: " + bulk(150)


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def result_tool(q: str) -> str:
    """Look something up in the knowledge base."""
    return result_of(q)


result_tool.__name__ = "lookup"


def make_agent(sim: ProviderSimulator, compaction: EngineCompaction | None = None, **kwargs: Any) -> Agent:
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=sim.base_url, api_key="sim-key"))
    agent = Agent(model, instructions=SYSTEM, capabilities=[compaction] if compaction else [], retries=0, **kwargs)

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up in the knowledge base."""
        return result_of(q)

    return agent


def long_script(rounds: int = ROUNDS) -> list[Reply]:
    calls = [Reply(content=f"Step {i}. " + PROSE * 15, tool_calls=(("lookup", {"q": f"topic {i}"}),)) for i in range(rounds)]
    return [*calls, Reply(content="All topics are covered.")]


# -- mapping -------------------------------------------------------------------------------------
def test_messages_round_trip_without_loss(make_service, key) -> None:
    originals = [
        ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart(["What does this chart say?", ImageUrl("https://example.org/c.png")])]),
        ModelResponse(
            parts=[
                ThinkingPart("The user wants the chart read.", signature="sig-1"),
                TextPart("Let me look."),
                ToolCallPart("lookup", {"q": "chart"}, tool_call_id="call_1"),
                ToolCallPart("lookup", '{"q": "axis"}', tool_call_id="call_2"),
            ],
            model_name=MODEL,
        ),
        ModelRequest(parts=[ToolReturnPart("lookup", "chart: revenue up", tool_call_id="call_1"), ToolReturnPart("lookup", "no axis", tool_call_id="call_2", outcome="failed")]),
        ModelResponse(parts=[TextPart("Revenue is up.")], model_name=MODEL),
    ]
    ours = to_engine(originals)
    assert [m.role for m in ours] == ["user", "assistant", "tool", "tool", "assistant"]  # the system prompt is the thread's
    assert ours[0].content == "What does this chart say?" and ours[0].attachments == (Attachment("image", media_type="image/png", source="url", url="https://example.org/c.png"),)
    assert ours[1].content == "Let me look." and [(c.id, c.name, json.loads(c.arguments)) for c in ours[1].tool_calls] == [
        ("call_1", "lookup", {"q": "chart"}),
        ("call_2", "lookup", {"q": "axis"}),
    ]
    assert ours[1].reasoning == (Reasoning("The user wants the chart read.", signature="sig-1"),)
    assert (ours[2].tool_call_id, ours[2].name, ours[2].content) == ("call_1", "lookup", "chart: revenue up")
    assert ours[3].is_error and not ours[2].is_error
    svc = make_service(context_window=8000)  # through the write door and back
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, ours)
    stored = [s.message for s in svc.reads.messages_page(key)]
    assert [(m.reasoning, m.attachments, m.is_error, m.source_key) for m in stored] == [(m.reasoning, m.attachments, m.is_error, m.source_key) for m in ours]
    back = from_engine([(m, False) for m in stored])
    first = back[0]
    assert isinstance(first, ModelRequest)
    back[0] = ModelRequest(parts=[*system_parts(originals), *first.parts], timestamp=first.timestamp, instructions=first.instructions, run_id=first.run_id, metadata=first.metadata)
    assert back == originals
    pruned = from_engine([(stored[2].with_content("preview", **{META_PRUNED: "abc"}), True)])
    assert isinstance(pruned[0], ModelRequest) and pruned[0].parts[0].content == "preview" and pruned[0].parts[0].tool_call_id == "call_1"


# -- a real agent -----------------------------------------------------------------------------------
def test_every_call_sends_the_stores_surface_whether_written_behind_or_not(make_service, sim, summarizer, key) -> None:
    """Steady steps are written behind (prepared without a worker thread or the store); steps that
    compact go through the store. Either way the request is the store's surface at that step."""
    svc = make_service(**LONG)
    sim.script(long_script())
    checked: list[bool] = []

    class Checked(EngineCompaction):
        def _surface(self, call: Any, messages: Any) -> Any:
            sent = super()._surface(call, messages)
            m = measured_in_call(svc, self.engine, call, checked)
            assert [(i.kind, i.message.content) for i in surface_items(call)] == [(i.kind, i.message.content) for i in surface_items(m)]
            return sent

    run(make_agent(sim, Checked(service=svc, thread=key)).run("Cover every topic in the knowledge base."))
    assert len(checked) == ROUNDS + 1 and any(checked) and not all(checked)  # some behind, some through the store
    assert_pruned_and_summarized(svc, key)
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok"] * (ROUNDS + 1)


def test_a_long_tool_session_prunes_summarizes_and_persists(make_service, sim, summarizer, key) -> None:
    svc = make_service(**LONG)
    sim.script(long_script())
    compaction = EngineCompaction(service=svc, thread=key, title="Pydantic AI support agent")
    result = run(make_agent(sim, compaction).run("Cover every topic in the knowledge base."))

    assert result.output == "All topics are covered."
    history = result.all_messages()
    assert [p.content for m in history for p in m.parts if isinstance(p, ToolReturnPart)] == [result_of(f"topic {i}") for i in range(ROUNDS)]
    assert stored_roles(svc, key) == [m.role for m in to_engine(history)]
    assert_calls_answered(svc, key)
    assert_pruned_and_summarized(svc, key)
    assert summarizer.calls >= 1
    info = svc.reads.thread(key)
    assert (info.title, info.agent, info.provider, info.model) == ("Pydantic AI support agent", "pydantic_ai", "openai", MODEL)
    requests = svc.store.model_requests(key)
    assert len(requests) == len(sim.requests) == ROUNDS + 1 and {r.outcome for r in requests} == {"ok"}
    assert [r.reported_prompt_tokens for r in requests] == [r.prompt_tokens for r in sim.requests]
    for r in requests:
        assert abs(r.estimated_tokens - r.reported_prompt_tokens) <= max(8, r.reported_prompt_tokens // 25), r
    last = sim.requests[-1].body["messages"]
    # Pydantic AI sends the agent's instructions after the system prompt parts of the history, so the
    # summary (a system prompt part of the first request) comes first
    assert {"role": "system", "content": SYSTEM} in last[:2]
    assert any(m["role"] == "system" and "Summary of the earlier conversation" in m["content"] for m in last[:2])
    assert [r.status for r in svc.store.runs(key)] == ["completed"]


def test_the_next_run_continues_the_thread_without_storing_twice(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.script([Reply(tool_calls=(("lookup", {"q": "a"}),)), Reply("first"), Reply("second")])
    compaction = EngineCompaction(service=svc, thread=key)

    async def two_runs() -> Any:
        agent = make_agent(sim, compaction)
        first = await agent.run("one")
        return await agent.run("two", message_history=first.all_messages())

    assert run(two_runs()).output == "second"
    assert stored_roles(svc, key) == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [r.status for r in svc.store.runs(key)] == ["completed", "completed"]


def test_an_overflow_recovers_through_the_model_request_error_hook(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.script(long_script(2))
    sim.context_window = 1800
    result = run(make_agent(sim, EngineCompaction(service=svc, thread=key)).run("Cover two topics."))

    assert result.output == "All topics are covered."
    assert [r.outcome for r in sim.requests] == ["ok", "ok", "overflow", "ok"]
    assert sim.requests[-1].prompt_tokens < 1800 < sim.requests[-2].prompt_tokens
    got = kinds(svc, key)
    assert [k for k in got if k in (EventKind.PROVIDER_ERROR, EventKind.RETRY, EventKind.RECOVERED)] == ["provider_error", "retry", "recovered"]
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok", "ok", "error", "ok"]
    # the agent's own history is whole: both results with their full text
    assert [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)] == [result_of("topic 0"), result_of("topic 1")]
    assert_calls_answered(svc, key)


def test_an_overflow_that_cannot_shrink_raises_the_original_error(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.context_window = 30
    with pytest.raises(ModelHTTPError) as caught:
        run(make_agent(sim, EngineCompaction(service=svc, thread=key)).run("Hello there, please answer."))
    assert caught.value.status_code == 400 and "maximum context length is 30 tokens" in str(caught.value)
    assert [e.data["reason"] for e in svc.reads.events(key) if e.kind == EventKind.GAVE_UP] in (["no_progress"], ["retries_exhausted"])
    run_info = svc.store.runs(key)[-1]
    assert (run_info.status, run_info.error_code) == ("failed", "CONTEXT_WINDOW_EXCEEDED")
    assert svc.reads.thread(key).busy_reason is None


def test_a_failing_summarizer_loses_nothing_and_the_agent_goes_on(make_service, sim, summarizer, key) -> None:
    svc = make_service(context_window=6000, tool_result_limit_tokens=100_000)
    summarizer.fail = True
    sim.script(long_script(6))
    result = run(make_agent(sim, EngineCompaction(service=svc, thread=key)).run("Cover six topics."))

    assert result.output == "All topics are covered."
    assert summarizer.calls >= 1
    got = kinds(svc, key)
    assert EventKind.SUMMARY_REJECTED in got and EventKind.SUMMARY not in got
    assert (svc.reads.compaction_state(key).boundary, svc.reads.compaction_state(key).summary) == (None, None)
    assert stored_roles(svc, key) == ["user"] + ["assistant", "tool"] * 6 + ["assistant"]
    assert len(sim.requests[-1].body["messages"]) == 1 + 1 + 2 * 6


def test_the_history_processor_alone_prunes_and_summarizes(make_service, sim, key) -> None:
    svc = make_service(**LONG)
    sim.script(long_script())
    compaction = EngineCompaction(service=svc, thread=key)
    agent = make_agent(sim)
    agent = Agent(agent.model, instructions=SYSTEM, capabilities=[ProcessHistory(compaction.history_processor)], tools=[result_tool], retries=0)
    result = run(agent.run("Cover every topic."))
    compaction.end(result)

    assert result.output == "All topics are covered."
    assert stored_roles(svc, key)[: 2 * ROUNDS + 1] == ["user"] + ["assistant", "tool"] * ROUNDS
    assert_pruned_and_summarized(svc, key)
    requests = svc.store.model_requests(key)  # recorded, each completed when its response showed up
    assert [r.outcome for r in requests] == ["ok"] * (ROUNDS + 1)
    assert [r.reported_prompt_tokens for r in requests] == [r.prompt_tokens for r in sim.requests]
    assert [r.status for r in svc.store.runs(key)] == ["completed"]



# -- several runs, the returned history passed back in (as users do) ---------------------------------
def test_runs_that_pass_the_history_back_store_each_message_once_as_a_capability(make_service, sim, key) -> None:
    svc = make_service(**LONG)
    sim.script(multi_run_script())
    compaction = EngineCompaction(service=svc, thread=key)

    async def runs() -> Any:
        agent = make_agent(sim, compaction)
        history = None
        for r in range(RUNS):
            result = await agent.run(part(r), message_history=history)
            history = result.all_messages()
        return result

    assert run(runs()).output == f"Run {RUNS - 1} is done."
    # Pydantic AI sends the agent's instructions after the history's system parts (the summary)
    assert_runs_stored_once(svc, sim, key, system_first=False)


def test_runs_that_pass_the_history_back_store_each_message_once_as_a_history_processor(make_service, sim, key) -> None:
    """The history processor's output becomes the run's history (summary, synthetic request,
    previews): passed back in, none of it is stored as the agent's own, the summary is sent once."""
    svc = make_service(**LONG)
    sim.script(multi_run_script())
    compaction = EngineCompaction(service=svc, thread=key)
    agent = Agent(make_agent(sim).model, instructions=SYSTEM, capabilities=[ProcessHistory(compaction.history_processor)], tools=[result_tool], retries=0)

    async def runs() -> Any:
        history = None
        for r in range(RUNS):
            result = await agent.run(part(r), message_history=history)
            await asyncio.to_thread(compaction.end, result)
            history = result.all_messages()
        return result

    assert run(runs()).output == f"Run {RUNS - 1} is done."
    assert_runs_stored_once(svc, sim, key, system_first=False)
    # instructions and tool schemas are measured: our estimate is the provider's count
    for r in svc.store.model_requests(key):
        assert abs(r.estimated_tokens - r.reported_prompt_tokens) <= max(8, r.reported_prompt_tokens // 25), r
