"""The agent loop without overflow: steps, tools, recorded requests, ephemeral notes, waiting for the user."""

from __future__ import annotations

import asyncio

import pytest

from engine.apps.harness.loop import ABORTED_TEXT, Tool, ToolRegistry, WaitForUser
from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.core.errors import ThreadBusy
from engine.core.messages import ToolCall
from engine.core.units import is_balanced
from engine.service import Service

from .conftest import MODEL, PROVIDER, THREAD, bulk, events, harness, kb_tool, results_per_call, run, run_info, stored


def test_a_tool_round_then_an_answer_completes_the_run(svc: Service, sim: ProviderSimulator) -> None:
    sim.script([Reply(tool_calls=(("query_kb", {"query": "refund policy"}),)), Reply(content="Refunds take 5 days.")])
    seen: list[dict] = []

    def kb(args: dict) -> str:
        seen.append(args)
        return "doc-7: refunds are processed within 5 business days"

    async def scenario():
        async with harness(svc, sim, [Tool("query_kb", kb)]) as h:
            return await h.run(THREAD, "How long do refunds take?")

    result = run(scenario)
    assert (result.status, result.steps, result.final.content) == ("completed", 2, "Refunds take 5 days.")
    assert seen == [{"query": "refund policy"}]
    msgs = stored(svc)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2].tool_call_id == msgs[1].tool_calls[0].id and msgs[2].content.startswith("doc-7")
    assert all(m.id is not None for m in msgs)
    # the second request carried the tool result to the model
    assert sim.requests[1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": msgs[1].tool_calls[0].id,
        "name": "query_kb",
        "content": msgs[2].content,
    }
    assert run_info(svc, result.run_id).status == "completed" and svc.store.busy_reason(THREAD) is None


def test_every_model_request_is_recorded_with_route_tokens_and_outcome(svc: Service, sim: ProviderSimulator) -> None:
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply.error(500, {"error": {"message": "upstream exploded", "type": "server_error"}})])

    async def scenario():
        async with harness(svc, sim, [kb_tool(bulk(200))]) as h:
            return await h.run(THREAD, "go")

    result = run(scenario)
    assert (result.status, result.error_code) == ("failed", "SERVER_ERROR")
    reqs = svc.store.model_requests(THREAD)
    at_sim = sim.requests
    assert len(reqs) == len(at_sim) == 2
    assert [(r.provider, r.model, r.run_id, r.step) for r in reqs] == [(PROVIDER, MODEL, result.run_id, 1), (PROVIDER, MODEL, result.run_id, 2)]
    # the engine's estimate is the simulator's own count (same meter, same envelope)
    assert [r.estimated_tokens for r in reqs] == [s.prompt_tokens for s in at_sim]
    assert reqs[1].estimated_tokens > reqs[0].estimated_tokens + 1000
    assert (reqs[0].outcome, reqs[0].reported_prompt_tokens, reqs[0].error_code) == ("ok", at_sim[0].prompt_tokens, None)
    assert reqs[0].reported_completion_tokens and reqs[0].reported_completion_tokens > 0
    assert (reqs[1].outcome, reqs[1].reported_prompt_tokens, reqs[1].error_code, reqs[1].error_message) == ("error", None, "SERVER_ERROR", "upstream exploded")


def test_tool_failures_become_results_the_model_reads(svc: Service, sim: ProviderSimulator) -> None:
    def broken(args: dict) -> str:
        raise KeyError("index missing")

    async def structured(args: dict) -> object:
        return {"hits": [args["q"]]}

    sim.script(
        [
            Reply(tool_calls=(("broken", {}), ("nope", {}), ("structured", {"q": "é"}))),
            Reply(content="ok"),
        ]
    )

    async def scenario():
        async with harness(svc, sim, [Tool("broken", broken), Tool("structured", structured)]) as h:
            return await h.run(THREAD, "go")

    assert run(scenario).status == "completed"
    results = [m.content for m in stored(svc) if m.role == "tool"]
    assert results == ["error: broken failed: KeyError: 'index missing'", "error: unknown tool 'nope'", '{"hits": ["é"]}']
    with pytest.raises(ValueError, match="registered twice"):
        ToolRegistry([kb_tool(), kb_tool()])


def test_malformed_arguments_are_an_error_result() -> None:
    registry = ToolRegistry([kb_tool()])
    text = asyncio.run(registry.call(ToolCall("c1", "query_kb", "[1, 2]")))
    assert text.startswith("error: the arguments for query_kb are not a JSON object")


def test_the_step_limit_fails_the_run(svc: Service, sim: ProviderSimulator) -> None:
    sim.fallback = Reply(tool_calls=(("query_kb", {"query": "again"}),))

    async def scenario():
        async with harness(svc, sim, [kb_tool()], max_steps=3) as h:
            return await h.run(THREAD, "loop forever")

    result = run(scenario)
    assert (result.status, result.error_code, result.steps) == ("failed", "max_steps", 3)
    info = run_info(svc, result.run_id)
    assert (info.status, info.error_code) == ("failed", "max_steps") and len(sim.requests) == 3
    assert is_balanced(stored(svc))


def test_ephemeral_notes_ride_on_every_request_and_are_never_persisted(svc: Service, sim: ProviderSimulator) -> None:
    notes = ["Background task finished: export-42 is ready.", "Degraded mode: web search is offline."]
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(tool_calls=(("query_kb", {"query": "y"}),)), Reply(content="done")])

    async def scenario():
        async with harness(svc, sim, [kb_tool()]) as h:
            return await h.run(THREAD, "go", notes=notes)

    assert run(scenario).status == "completed"
    assert len(sim.requests) == 3
    for req in sim.requests:  # the notes are the last messages of every envelope, as system messages
        assert req.body["messages"][-2:] == [{"role": "system", "content": n} for n in notes]
    assert not any(n in m.content for m in stored(svc) for n in notes)
    assert not any(n in str(e.data) for e in svc.reads.events(THREAD) for n in notes)

    # the next run without notes does not see them
    sim.script([Reply(content="second")])

    async def again():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "again")

    assert run(again).status == "completed"
    assert not any(n in str(sim.requests[-1].body) for n in notes)


def _ask_tool(question: str = "Which region?") -> Tool:
    def ask(args: dict) -> str:
        raise WaitForUser(question)

    return Tool("ask_user", ask)


def test_wait_for_user_parks_the_run_and_resume_finishes_it(svc: Service, sim: ProviderSimulator) -> None:
    sim.script([Reply(tool_calls=(("ask_user", {}),)), Reply(content="Deploying to EU.")])
    seen: dict[str, object] = {}

    async def scenario():
        async with harness(svc, sim, [_ask_tool()]) as h:
            first = await h.run(THREAD, "Deploy it")
            seen["busy"] = await asyncio.to_thread(svc.store.busy_reason, THREAD)
            seen["requests"] = len(sim.requests)
            try:
                await asyncio.to_thread(svc.compaction.compact, THREAD)
            except ThreadBusy as exc:
                seen["compact"] = exc
            second = await h.resume(THREAD, first.run_id, "EU please")
            return first, second

    first, second = run(scenario)
    assert first.status == "waiting_for_user" and seen["busy"] == "waiting_for_user" and seen["requests"] == 1
    assert isinstance(seen["compact"], ThreadBusy)
    wait = events(svc, "waiting_for_user")
    assert len(wait) == 1 and wait[0].data["question"] == "Which region?" and wait[0].run_id == first.run_id
    assert (second.status, second.run_id, second.final.content) == ("completed", first.run_id, "Deploying to EU.")
    msgs = stored(svc)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2].content == "EU please" and msgs[2].tool_call_id == msgs[1].tool_calls[0].id
    assert run_info(svc, first.run_id).status == "completed" and svc.store.busy_reason(THREAD) is None
    # one run, one step sequence: the resumed step is step 2, not a second step 1
    assert [(r.run_id, r.step) for r in svc.store.model_requests(THREAD)] == [(first.run_id, 1), (first.run_id, 2)]
    assert (first.steps, second.steps) == (1, 2)


def test_resume_runs_the_parallel_calls_that_waited_behind_the_question(svc: Service, sim: ProviderSimulator) -> None:
    """Three parallel calls, the first asks the user: after the answer the other two still run, so
    the next request answers every call (an unanswered call is a 400 at any real provider)."""
    sim.script([Reply(tool_calls=(("ask_user", {}), ("query_kb", {"query": "a"}), ("query_kb", {"query": "b"}))), Reply(content="done")])
    ran: list[str] = []

    def kb(args: dict) -> str:
        ran.append(args["query"])
        return f"kb:{args['query']}"

    async def scenario():
        async with harness(svc, sim, [_ask_tool(), Tool("query_kb", kb)]) as h:
            first = await h.run(THREAD, "go")
            assert ran == []  # nothing after the question ran before the answer
            return await h.resume(THREAD, first.run_id, "yes")

    assert run(scenario).status == "completed"
    assert ran == ["a", "b"]
    msgs = stored(svc)
    assert set(results_per_call(msgs).values()) == {1} and is_balanced(msgs)
    assert [m.content for m in msgs if m.role == "tool"] == ["yes", "kb:a", "kb:b"]
    sent = sim.requests[-1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "tool"] == ["yes", "kb:a", "kb:b"]
    assert ABORTED_TEXT not in str(sent)


def test_notes_survive_waiting_for_the_user(svc: Service, sim: ProviderSimulator) -> None:
    sim.script([Reply(tool_calls=(("ask_user", {}),)), Reply(content="done")])

    async def scenario():
        async with harness(svc, sim, [_ask_tool()]) as h:
            first = await h.run(THREAD, "go", notes=["note: index rebuilt"])
            return await h.resume(THREAD, first.run_id, "fine")

    assert run(scenario).status == "completed"
    assert [r.body["messages"][-1] for r in sim.requests] == [{"role": "system", "content": "note: index rebuilt"}] * 2


def test_a_failing_pressure_check_is_recorded_and_the_run_goes_on(svc: Service, sim: ProviderSimulator, monkeypatch) -> None:
    """§2.9: an operational failure of pre-step compaction warns and continues from the
    persisted surface; it never fails the user's run."""

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(svc.compactor, "pressure", broken)
    monkeypatch.setattr(svc.compactor, "check", broken)  # the step's one-transaction check, too
    sim.script([Reply(content="Fine anyway.")])

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "Hello?")

    result = run(scenario)
    assert result.status == "completed" and result.final.content == "Fine anyway."
    (ev,) = events(svc, "pressure_failed")
    assert "disk full" in ev.data["error_message"]
