"""LangChain v1: ``CompactionMiddleware`` in a real ``create_agent`` loop with ``ChatOpenAI`` talking
to the provider simulator over a socket."""

from __future__ import annotations

import asyncio
import json
import time
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

skip_without("langchain.agents", "langchain")
skip_without("langchain_openai", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from engine.adapters.core import HOLD_SECONDS  # noqa: E402
from engine.adapters.langchain import CompactionMiddleware, from_engine, to_engine  # noqa: E402
from engine.apps.harness.simulator import ProviderSimulator, Reply  # noqa: E402
from engine.core.events import EventKind  # noqa: E402
from engine.core.messages import META_PRUNED, Attachment, Reasoning, summary_message  # noqa: E402


@tool
def lookup(q: str) -> str:
    """Look something up in the knowledge base."""
    return f"{q}: " + bulk(150)


def agent_for(sim: ProviderSimulator, middleware: CompactionMiddleware) -> Any:
    model = ChatOpenAI(model=MODEL, base_url=sim.base_url, api_key="sim-key", max_retries=0, timeout=10)
    return create_agent(model, [lookup], system_prompt=SYSTEM, middleware=[middleware])


def long_script(rounds: int = ROUNDS) -> list[Reply]:
    calls = [Reply(content=f"Step {i}. " + PROSE * 15, tool_calls=(("lookup", {"q": f"topic {i}"}),)) for i in range(rounds)]
    return [*calls, Reply(content="All topics are covered.")]


# -- mapping -------------------------------------------------------------------------------------
def test_messages_round_trip_without_loss(make_service, key) -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.org/chart.png"}}
    originals = [
        SystemMessage("Be brief.", id="s1"),
        HumanMessage(content=[{"type": "text", "text": "What does this chart say?"}, image], id="h1"),
        AIMessage(
            content=[
                {"type": "thinking", "thinking": "The user wants the chart read.", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me look it up."},
            ],
            tool_calls=[{"id": "call_1", "name": "lookup", "args": {"q": "chart"}}, {"id": "call_2", "name": "lookup", "args": {"q": "axis"}}],
            id="a1",
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        ),
        ToolMessage("chart: revenue up", tool_call_id="call_1", name="lookup", id="t1"),
        ToolMessage("error: axis not found", tool_call_id="call_2", name="lookup", status="error", id="t2"),
        AIMessage("Revenue is up.", additional_kwargs={"reasoning_content": "Reading the result."}, id="a2"),
    ]
    ours = [to_engine(m) for m in originals]
    assert [m.role for m in ours] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert ours[1].content == "What does this chart say?" and ours[1].attachments == (Attachment("image", source="url", url="https://example.org/chart.png"),)
    assert ours[2].content == "Let me look it up." and [(c.id, c.name, json.loads(c.arguments)) for c in ours[2].tool_calls] == [
        ("call_1", "lookup", {"q": "chart"}),
        ("call_2", "lookup", {"q": "axis"}),
    ]
    assert ours[2].reasoning == (Reasoning("The user wants the chart read.", signature="sig-1"), Reasoning(redacted=True, encrypted="opaque"))
    assert (ours[3].tool_call_id, ours[3].name, ours[3].content) == ("call_1", "lookup", "chart: revenue up")
    assert ours[4].is_error and not ours[3].is_error
    assert ours[5].reasoning == (Reasoning("Reading the result."),)
    assert [m.source_key for m in ours] == ["lc:s1", "lc:h1", "lc:a1", "lc:t1", "lc:t2", "lc:a2"]
    assert [from_engine(m) for m in ours] == originals
    # stored through the write door and read back, as the store keeps it
    svc = make_service(context_window=8000)
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, ours)
    stored = [s.message for s in svc.reads.messages_page(key)]
    assert [(m.reasoning, m.attachments, m.is_error, m.source_key) for m in stored] == [(m.reasoning, m.attachments, m.is_error, m.source_key) for m in ours]
    assert [from_engine(m) for m in stored] == originals
    pruned = from_engine(ours[3].with_content("preview of the result", **{META_PRUNED: "abc"}), preview=True)
    assert isinstance(pruned, ToolMessage) and (pruned.content, pruned.tool_call_id, pruned.id) == ("preview of the result", "call_1", "t1")


# -- a real agent -----------------------------------------------------------------------------------
def test_a_long_tool_session_prunes_summarizes_and_persists(make_service, sim, summarizer, key) -> None:
    svc = make_service(**LONG)
    sim.script(long_script())
    agent = agent_for(sim, CompactionMiddleware(service=svc, thread=key, title="LangChain support agent"))
    out = agent.invoke({"messages": [HumanMessage("Cover every topic in the knowledge base.")]}, {"recursion_limit": 200})

    state = out["messages"]
    assert state[-1].content == "All topics are covered."
    # the graph state is whole: every tool result with its full text, nothing removed
    results = [m for m in state if isinstance(m, ToolMessage)]
    assert len(results) == ROUNDS and all(m.content == lookup.invoke({"q": f"topic {i}"}) for i, m in enumerate(results))
    # and the store has every message of it, in order, exactly once
    assert stored_roles(svc, key) == [{"human": "user", "ai": "assistant", "tool": "tool"}[m.type] for m in state]
    assert_calls_answered(svc, key)
    assert_pruned_and_summarized(svc, key)
    assert summarizer.calls >= 1
    info = svc.reads.thread(key)
    assert (info.title, info.agent, info.provider, info.model) == ("LangChain support agent", "langchain", "openai", MODEL)

    # every model call is recorded with the usage the provider reported; later calls got the compacted surface
    requests = svc.store.model_requests(key)
    assert len(requests) == len(sim.requests) == ROUNDS + 1
    assert [r.outcome for r in requests] == ["ok"] * (ROUNDS + 1)
    assert [r.reported_prompt_tokens for r in requests] == [r.prompt_tokens for r in sim.requests]
    for r in requests:  # our meter measured the real request (system message and tool schemas included)
        assert abs(r.estimated_tokens - r.reported_prompt_tokens) <= max(8, r.reported_prompt_tokens // 25), r
    last = sim.requests[-1].body["messages"]
    assert last[0] == {"role": "system", "content": SYSTEM}
    assert last[1]["role"] == "system" and "Summary of the earlier conversation" in last[1]["content"]
    assert len(last) < len(state) + 1
    full = sum(len(m.content) for m in results)
    sent = sum(len(m["content"]) for m in last if m["role"] == "tool")
    assert sent < full


def test_every_call_sends_the_stores_surface_whether_written_behind_or_not(make_service, sim, summarizer, key) -> None:
    """Steady steps are written behind (decided without the store, their transaction on the step
    driver's writer while the model answers); steps that compact go through the store. Either way
    what the model got is the store's surface at that step: looked at inside each model call."""
    svc = make_service(**LONG)
    sim.script(long_script())
    checked: list[bool] = []

    class Checked(CompactionMiddleware):
        def _compacted(self, request: Any, call: Any) -> Any:
            sent = super()._compacted(request, call)
            m = measured_in_call(svc, self.thread(), call, checked)
            surface = [*([summary_message(m.surface.summary)] if m.surface.summary else []), *m.surface.messages]
            assert [x.content for x in sent.messages] == [x.content for x in surface]
            return sent

    agent = agent_for(sim, Checked(service=svc, thread=key))
    agent.invoke({"messages": [HumanMessage("Cover every topic in the knowledge base.")]}, {"recursion_limit": 200})
    assert len(checked) == ROUNDS + 1 and any(checked) and not all(checked)  # some behind, some through the store
    assert_pruned_and_summarized(svc, key)
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok"] * (ROUNDS + 1)
    assert all(r.estimated_tokens for r in svc.store.model_requests(key))  # every request measured, behind or not


def test_an_overflow_recovers_by_compacting_and_retrying(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)  # the engine believes 8000: no pressure work
    sim.script(long_script(2))
    sim.context_window = 1800  # the provider refuses what the engine thought fits
    agent = agent_for(sim, CompactionMiddleware(service=svc, thread=key))
    out = agent.invoke({"messages": [HumanMessage("Cover two topics.")]})

    assert out["messages"][-1].content == "All topics are covered."
    outcomes = [r.outcome for r in sim.requests]
    assert "overflow" in outcomes and outcomes[-1] == "ok"
    got = kinds(svc, key)
    assert EventKind.PROVIDER_ERROR in got and EventKind.RETRY in got and EventKind.RECOVERED in got
    errors = [e for e in svc.reads.events(key) if e.kind == EventKind.PROVIDER_ERROR]
    assert errors[0].data["error_code"] == "CONTEXT_WINDOW_EXCEEDED" and errors[0].trigger == "overflow"
    recorded = svc.store.model_requests(key)
    assert [r.outcome for r in recorded] == ["error" if o == "overflow" else "ok" for o in outcomes]
    assert all(r.error_code == "CONTEXT_WINDOW_EXCEEDED" for r in recorded if r.outcome == "error")
    assert svc.reads.compaction_state(key).generation > 0
    (episode,) = svc.reads.replay(key)  # the inspector's replay view rebuilds the episode from the events
    assert episode.outcome == "recovered"
    assert outcomes == ["ok", "ok", "overflow", "ok"]
    assert sim.requests[-1].prompt_tokens < 1800 < sim.requests[-2].prompt_tokens
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == [lookup.invoke({"q": f"topic {i}"}) for i in range(2)]
    assert_calls_answered(svc, key)
    assert svc.reads.thread(key).busy_reason is None


def test_an_overflow_that_cannot_shrink_raises_the_original_error(make_service, sim, key) -> None:
    svc = make_service(context_window=8000)
    sim.context_window = 30  # nothing ever fits
    agent = agent_for(sim, CompactionMiddleware(service=svc, thread=key))
    with pytest.raises(openai.BadRequestError) as caught:  # what ChatOpenAI raised, unchanged
        agent.invoke({"messages": [HumanMessage("Hello there, please answer.")]})
    assert "maximum context length is 30 tokens" in str(caught.value)
    gave_up = [e for e in svc.reads.events(key) if e.kind == EventKind.GAVE_UP]
    assert len(gave_up) == 1 and gave_up[0].data["reason"] in ("no_progress", "retries_exhausted")
    assert len(sim.requests) <= 2  # at most max_overflow_retries (1) retries, and only after progress
    run = svc.store.runs(key)[-1]
    assert (run.status, run.error_code) == ("failed", "CONTEXT_WINDOW_EXCEEDED")
    assert svc.reads.thread(key).busy_reason is None


def test_a_failing_summarizer_loses_nothing_and_the_agent_goes_on(make_service, sim, summarizer, key) -> None:
    svc = make_service(context_window=3000, tool_result_limit_tokens=100_000)  # nothing to prune: a summary is needed
    summarizer.fail = True
    sim.script(long_script(8))
    agent = agent_for(sim, CompactionMiddleware(service=svc, thread=key))
    out = agent.invoke({"messages": [HumanMessage("Cover eight topics.")]}, {"recursion_limit": 100})

    assert out["messages"][-1].content == "All topics are covered."
    assert summarizer.calls >= 1
    got = kinds(svc, key)
    assert EventKind.SUMMARY_REJECTED in got and EventKind.SUMMARY not in got
    state = svc.reads.compaction_state(key)
    assert (state.boundary, state.summary) == (None, None)  # no error text stored as a summary
    assert stored_roles(svc, key) == [{"human": "user", "ai": "assistant", "tool": "tool"}[m.type] for m in out["messages"]]
    assert all(r.outcome == "ok" for r in svc.store.model_requests(key))
    last = sim.requests[-1].body["messages"]
    assert len(last) == len(out["messages"])  # system + everything but the final answer: nothing dropped


def test_the_async_agent_uses_the_same_path(make_service, sim, key) -> None:
    svc = make_service(**LONG)
    sim.script(long_script(3))
    agent = agent_for(sim, CompactionMiddleware(service=svc, thread=key))

    async def scenario() -> Any:
        return await agent.ainvoke({"messages": [HumanMessage("Cover three topics.")]})

    out = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert out["messages"][-1].content == "All topics are covered."
    assert stored_roles(svc, key) == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok"] * 4
    assert [r.status for r in svc.store.runs(key)] == ["completed"]


def test_the_thread_defaults_to_the_langgraph_thread_id(make_service, sim, key) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    svc = make_service(context_window=8000)
    sim.script([Reply("first"), Reply("second")])
    model = ChatOpenAI(model=MODEL, base_url=sim.base_url, api_key="sim-key", max_retries=0)
    agent = create_agent(model, [lookup], middleware=[CompactionMiddleware(service=svc)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": key}}
    agent.invoke({"messages": [HumanMessage("one")]}, config)
    agent.invoke({"messages": [HumanMessage("two")]}, config)  # the checkpointed history is not stored twice
    assert [(s.message.role, s.message.content) for s in svc.reads.messages_page(key)] == [("user", "one"), ("assistant", "first"), ("user", "two"), ("assistant", "second")]
    assert [r.status for r in svc.store.runs(key)] == ["completed", "completed"]


def test_the_inspector_sees_the_thread_while_the_agent_runs(make_service, sim, key, db_url, tmp_path) -> None:
    from engine.service import open_service

    svc = make_service(context_window=8000)
    seen: list[tuple[Any, ...]] = []

    @tool
    def peek(q: str) -> str:
        """Look something up."""
        inspector = open_service(db_url, workdir=tmp_path / "inspector-wd")  # another reader, as the GUI is
        try:
            # the reply is written with the next step, or after HOLD_SECONDS while the tool still runs
            until = time.monotonic() + 10 + HOLD_SECONDS
            while len(roles := [s.message.role for s in inspector.reads.messages_page(key)]) < 2 and time.monotonic() < until:
                time.sleep(0.02)
            listed = [t for t in inspector.reads.list_threads() if t.key == key]
            info = inspector.reads.thread(key)
            seen.append((len(listed), info.busy_reason, roles))
        finally:
            inspector.close()
        return "found"

    sim.script([Reply(tool_calls=(("peek", {"q": "x"}),)), Reply("done")])
    model = ChatOpenAI(model=MODEL, base_url=sim.base_url, api_key="sim-key", max_retries=0)
    create_agent(model, [peek], middleware=[CompactionMiddleware(service=svc, thread=key)]).invoke({"messages": [HumanMessage("go")]})
    assert seen == [(1, "running", ["user", "assistant"])]  # listed, busy, the call already stored
    assert svc.reads.thread(key).busy_reason is None
    assert [s.message.role for s in svc.reads.messages_page(key)] == ["user", "assistant", "tool", "assistant"]


def test_each_call_looks_only_at_the_messages_the_state_added(make_service, sim, key, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.adapters.core import EngineThread

    svc = make_service(context_window=100_000)
    sim.script([Reply(tool_calls=(("lookup", {"q": f"q{i}"}),)) for i in range(5)] + [Reply("done")])
    asked: list[str] = []
    knows = EngineThread.knows
    monkeypatch.setattr(EngineThread, "knows", lambda self, k: asked.append(k) or knows(self, k))
    agent_for(sim, CompactionMiddleware(service=svc, thread=key)).invoke({"messages": [HumanMessage("go", id="h")]})
    assert asked.count("lc:h") == 1  # the first call's message, never asked again: later calls skip the list seen before
    assert len(asked) == 1 + 2 * 5  # then each call: the reply and the tool result the state added
    assert stored_roles(svc, key) == ["user"] + ["assistant", "tool"] * 5 + ["assistant"]


def test_a_history_the_write_door_refuses_fails_the_run_and_leaves_the_thread_idle(make_service, sim, key) -> None:
    from engine.core.messages import InvalidMessage

    svc = make_service(context_window=8000)
    agent = agent_for(sim, CompactionMiddleware(service=svc, thread=key))
    orphan = ToolMessage("a result nobody asked for", tool_call_id="call_missing", id="t-orphan")
    with pytest.raises(InvalidMessage):  # providers reject an orphan result; the store refuses it first
        agent.invoke({"messages": [HumanMessage("hi", id="h"), orphan]})
    assert sim.requests == ()  # nothing was sent
    (run_info,) = svc.store.runs(key)
    assert (run_info.status, run_info.error_code) == ("failed", "invalid_message")
    assert svc.reads.thread(key).busy_reason is None and svc.reads.message_count(key) == 0



# -- several runs, the returned state passed back in (as users do) -----------------------------------
def test_runs_that_pass_the_state_back_store_each_message_once(make_service, sim, key) -> None:
    svc = make_service(**LONG)
    sim.script(multi_run_script())
    agent = agent_for(sim, CompactionMiddleware(service=svc, thread=key))
    state: list[Any] = []
    for r in range(RUNS):
        state = agent.invoke({"messages": [*state, HumanMessage(part(r))]}, {"recursion_limit": 100})["messages"]

    assert state[-1].content == f"Run {RUNS - 1} is done."
    assert_runs_stored_once(svc, sim, key)
    assert stored_roles(svc, key) == [{"human": "user", "ai": "assistant", "tool": "tool"}[m.type] for m in state]
