"""Overflow recovery in the loop (§3): generation growth is the only licence to
retry, the retry bound, cancellation winning, no orphan tool calls, and what never triggers recovery."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from engine.apps.harness.loop import ABORTED_TEXT, Tool
from engine.apps.harness.simulator import ProviderSimulator, Reply, SimRequest, overflow_body
from engine.core.units import is_balanced
from engine.llm.errors import CONTEXT_WINDOW_EXCEEDED
from engine.service import Service

from .conftest import (
    THREAD,
    SteeredSummarizer,
    bulk,
    events,
    harness,
    kb_tool,
    openai_overflow_text,
    results_per_call,
    run,
    run_info,
    seed_tool_round,
    seed_turns,
    stored,
)

BIG_RESULT_ROWS = 400  # ~2 800 tokens: over the 2 000-token tool-result limit, so prunable


def _kinds(svc: Service, run_id: int | None = None) -> list[str]:
    return [e.kind for e in events(svc, run_id=run_id)]


def test_a_recovery_that_changes_nothing_gives_up_with_the_original_error(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    sim.context_window = 2000  # the engine believes 8 000: no pressure work, the provider refuses

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "Please read all of this: " + bulk(430)), h.provider

    result, provider = run(scenario)
    assert len(provider.errors) == 1 and len(sim.requests) == 1  # no retry request was sent
    original = provider.errors[0]
    expected_text = openai_overflow_text(sim.requests[0].prompt_tokens, 2000)
    assert result.status == "failed"
    assert result.error is original  # the very object the adapter raised, not a re-wrapped copy
    assert (result.error_code, original.code, original.message, original.status) == (CONTEXT_WINDOW_EXCEEDED, CONTEXT_WINDOW_EXCEEDED, expected_text, 400)
    assert original.original["error"]["code"] == "context_length_exceeded"  # the provider's body, kept
    info = run_info(svc, result.run_id)
    assert (info.status, info.error_code, info.error_message) == ("failed", CONTEXT_WINDOW_EXCEEDED, expected_text)
    assert svc.reads.compaction_state(THREAD).generation == 0 and summarizer.calls == 0
    assert _kinds(svc) == ["provider_error", "gave_up"]
    gave_up = events(svc, "gave_up")[0].data
    assert (gave_up["reason"], gave_up["error_message"], gave_up["generation_before"], gave_up["generation_after"]) == ("no_progress", expected_text, 0, 0)
    assert svc.store.busy_reason(THREAD) is None


def test_a_prune_alone_authorizes_the_retry_as_a_new_step(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    big = bulk(BIG_RESULT_ROWS)
    sim.context_window = 2000
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(content="done")])

    async def scenario():
        async with harness(svc, sim, [kb_tool(big)]) as h:
            return await h.run(THREAD, "Look it up")

    result = run(scenario)
    assert (result.status, result.final.content, result.overflow_retries, result.steps) == ("completed", "done", 1, 3)
    assert [r.outcome for r in sim.requests] == ["ok", "overflow", "ok"]
    assert summarizer.calls == 0  # nothing summarizable: the user message cannot go without its round
    assert _kinds(svc) == ["provider_error", "prune", "retry", "recovered"]
    prune, retry = events(svc, "prune")[0], events(svc, "retry")[0]
    assert prune.trigger == retry.trigger == "overflow"
    assert (retry.data["generation_before"], retry.data["generation_after"]) == (0, 1)
    assert (retry.data["failed_step"], retry.data["next_step"]) == (2, 3)
    assert retry.data["tokens_after"] < 2000 < retry.data["tokens_before"]
    assert [(r.step, r.outcome) for r in svc.store.model_requests(THREAD)] == [(1, "ok"), (2, "error"), (3, "ok")]
    # the retried request carries the preview, the original stays in the store and the Workdir
    retried = sim.requests[2].body["messages"]
    tool_msg = next(m for m in retried if m["role"] == "tool")
    assert big not in tool_msg["content"] and prune.data["pruned"][0]["sha256"][:12] in tool_msg["content"]
    assert next(m for m in stored(svc) if m.role == "tool").content == big
    offload = next(iter(svc.reads.offloads(THREAD).values()))
    assert svc.reads.read_original(offload) == big


def test_notes_ride_through_a_summary_recovery_and_stay_out_of_the_summary(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    seed_turns(svc, 8)
    note = "Background job finished: report-991 is ready."
    sim.context_window = 1200
    sim.script([Reply(content="done")])

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "What is the status?", notes=[note])

    result = run(scenario)
    assert (result.status, result.overflow_retries, summarizer.calls) == ("completed", 1, 1)
    assert [r.outcome for r in sim.requests] == ["overflow", "ok"]
    assert all(r.body["messages"][-1] == {"role": "system", "content": note} for r in sim.requests)
    state = svc.reads.compaction_state(THREAD)
    assert state.generation == 1 and state.summary and note not in state.summary
    assert not any(note in m.content for m in stored(svc))


def _storm_history(svc: Service) -> None:
    """Summarizable turns and one prunable tool result: two recoveries can each make progress."""
    seed_turns(svc, 8)
    seed_tool_round(svc, bulk(BIG_RESULT_ROWS))


@pytest.mark.parametrize(("override", "retries"), [(None, 1), (0, 0), (2, 2)], ids=["default", "zero", "two"])
def test_the_retry_bound_holds_under_an_overflow_storm(
    make_service: Callable[..., Service], sim: ProviderSimulator, summarizer: SteeredSummarizer, override: int | None, retries: int
) -> None:
    svc = make_service(**({} if override is None else {"max_overflow_retries": override}))
    _storm_history(svc)
    summarizer.fail_first = 1  # recovery 1 progresses by its prune alone, recovery 2 by its summary
    sim.context_window = 100  # nothing ever fits: the provider always says too long

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "Now compare them all."), h.provider

    result, provider = run(scenario)
    assert [r.outcome for r in sim.requests] == ["overflow"] * (retries + 1)
    assert (result.status, result.overflow_retries) == ("failed", retries)
    assert result.error is provider.errors[-1] and result.error_code == CONTEXT_WINDOW_EXCEEDED
    retry_events = events(svc, "retry")
    assert [e.data["attempt"] for e in retry_events] == list(range(1, retries + 1))
    assert all(e.data["generation_after"] > e.data["generation_before"] for e in retry_events)
    assert events(svc, "gave_up")[0].data["reason"] == "retries_exhausted"
    assert summarizer.calls == retries
    if retries == 0:
        assert not events(svc, "prune", "summary", "summary_rejected") and svc.reads.compaction_state(THREAD).generation == 0


def test_zero_retries_disables_recovery_but_not_pressure(make_service: Callable[..., Service], sim: ProviderSimulator) -> None:
    svc = make_service(max_overflow_retries=0)
    huge = bulk(1000)  # ~7 000 tokens: over the 6 400 threshold once it is on the surface
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(content="done")])

    async def scenario():
        async with harness(svc, sim, [kb_tool(huge)]) as h:
            first = await h.run(THREAD, "Look it up")
            sim.context_window = 500
            second = await h.run(THREAD, "And now this: " + bulk(100))
            return first, second

    first, second = run(scenario)
    assert first.status == "completed"
    prune = events(svc, "prune")
    assert len(prune) == 1 and prune[0].trigger == "pressure" and prune[0].run_id == first.run_id
    assert (second.status, second.error_code, second.overflow_retries) == ("failed", CONTEXT_WINDOW_EXCEEDED, 0)
    assert [r.outcome for r in sim.requests] == ["ok", "ok", "overflow"]
    assert not [e for e in svc.reads.events(THREAD) if e.trigger == "overflow" and e.kind in ("prune", "summary", "retry")]
    assert events(svc, "gave_up")[0].data["reason"] == "retries_exhausted"


def test_the_retry_count_resets_when_the_run_settles(svc: Service, sim: ProviderSimulator) -> None:
    sim.context_window = 2000
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(content="one"), Reply(tool_calls=(("query_kb", {"query": "y"}),)), Reply(content="two")])

    async def scenario():
        async with harness(svc, sim, [kb_tool(bulk(BIG_RESULT_ROWS))]) as h:
            return await h.run(THREAD, "first"), await h.run(THREAD, "second")

    first, second = run(scenario)
    assert (first.status, first.overflow_retries, second.status, second.overflow_retries) == ("completed", 1, "completed", 1)
    assert [r.outcome for r in sim.requests] == ["ok", "overflow", "ok", "ok", "overflow", "ok"]
    assert [(e.run_id, e.data["attempt"]) for e in events(svc, "retry")] == [(first.run_id, 1), (second.run_id, 1)]
    assert not events(svc, "gave_up")


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (
            429,
            {"error": {"message": "Request too large for sim-8k on tokens per min (TPM): Limit 30000, Requested 42000 tokens.", "type": "tokens", "code": "rate_limit_exceeded"}},
            "RATE_LIMITED",
        ),
        (500, {"error": {"message": "The server had an error processing your request (too many tokens in flight).", "type": "server_error"}}, "SERVER_ERROR"),
    ],
    ids=["429-tokens", "500"],
)
def test_other_provider_errors_never_trigger_recovery(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer, status: int, body: dict, code: str) -> None:
    seed_turns(svc, 8)  # summarizable history and a prunable result: recovery *could* do something
    seed_tool_round(svc, bulk(BIG_RESULT_ROWS))
    sim.script([Reply.error(status, body)])

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "go"), h.provider

    result, provider = run(scenario)
    assert (result.status, result.error_code, result.overflow_retries) == ("failed", code, 0)
    assert result.error is provider.errors[0] and result.error.message == body["error"]["message"]
    assert len(sim.requests) == 1 and summarizer.calls == 0
    assert _kinds(svc) == ["provider_error"] and events(svc)[0].trigger == "provider"
    assert svc.reads.compaction_state(THREAD).generation == 0 and not svc.reads.offloads(THREAD)
    info = run_info(svc, result.run_id)
    assert (info.status, info.error_code, info.error_message) == ("failed", code, body["error"]["message"])


@pytest.mark.parametrize(("stream", "style"), [(False, "openai"), (True, "openai"), (False, "deepseek"), (True, "anthropic")])
def test_in_band_overflow_recovers_too(svc: Service, sim: ProviderSimulator, stream: bool, style: str) -> None:
    sim.context_window, sim.inband, sim.error_style = 2000, True, style
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(content="done")])

    async def scenario():
        async with harness(svc, sim, [kb_tool(bulk(BIG_RESULT_ROWS))], stream=stream) as h:
            return await h.run(THREAD, "Look it up")

    result = run(scenario)
    assert [(r.outcome, r.status, r.stream) for r in sim.requests] == [("ok", 200, stream), ("overflow", 200, stream), ("ok", 200, stream)]
    assert (result.status, result.final.content, result.overflow_retries) == ("completed", "done", 1)
    err = events(svc, "provider_error")[0].data
    assert (err["error_code"], err["inband"]) == (CONTEXT_WINDOW_EXCEEDED, True)
    assert _kinds(svc) == ["provider_error", "prune", "retry", "recovered"]


def test_a_recovery_crash_after_the_prune_landed_still_retries(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    """Persisted progress authorizes the retry even if the summary step then blows up."""
    seed_turns(svc, 8)
    summarizer.crash = RuntimeError("summarizer backend exploded")
    sim.context_window = 2500
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(content="done")])

    async def scenario():
        async with harness(svc, sim, [kb_tool(bulk(BIG_RESULT_ROWS))]) as h:
            return await h.run(THREAD, "Look it up")

    result = run(scenario)
    assert summarizer.calls == 1
    assert (result.status, result.overflow_retries) == ("completed", 1)
    assert [r.outcome for r in sim.requests] == ["ok", "overflow", "ok"]
    retry = events(svc, "retry")[0].data
    assert retry["generation_after"] == retry["generation_before"] + 1
    # the crash is contained by the compactor: a rejected summary with the reason, history intact
    rejected = events(svc, "summary_rejected")[0].data
    assert rejected["error_code"] == "summarizer_crashed" and "exploded" in rejected["error_message"]


def test_a_recovery_crash_before_any_replacement_reports_the_original_error(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    seed_turns(svc, 8)  # summarizable, nothing to prune
    summarizer.crash = RuntimeError("summarizer backend exploded")
    sim.context_window = 200

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "go"), h.provider

    result, provider = run(scenario)
    assert summarizer.calls == 1 and len(sim.requests) == 1
    assert (result.status, result.error_code) == ("failed", CONTEXT_WINDOW_EXCEEDED) and result.error is provider.errors[0]
    info = run_info(svc, result.run_id)
    assert (info.status, info.error_code, info.error_message) == ("failed", CONTEXT_WINDOW_EXCEEDED, provider.errors[0].message)
    gave_up = events(svc, "gave_up")[0].data
    assert gave_up["reason"] == "no_progress"
    rejected = events(svc, "summary_rejected")[0].data
    assert rejected["error_code"] == "summarizer_crashed" and "summarizer backend exploded" in rejected["error_message"]
    assert svc.store.busy_reason(THREAD) is None


# -- cancellation ---------------------------------------------------------------------------------


def test_cancel_before_the_first_step(svc: Service, sim: ProviderSimulator) -> None:
    async def scenario():
        cancel = asyncio.Event()
        cancel.set()
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "never asked", cancel=cancel)

    result = run(scenario)
    assert result.status == "cancelled" and len(sim.requests) == 0
    assert run_info(svc, result.run_id).status == "cancelled" and svc.store.busy_reason(THREAD) is None
    assert [m.content for m in stored(svc)] == ["never asked"]


def test_cancel_while_recovery_runs_wins_over_its_progress(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    seed_turns(svc, 8)
    sim.context_window = 300

    async def scenario():
        loop, cancel = asyncio.get_running_loop(), asyncio.Event()
        summarizer.on_call = lambda request: loop.call_soon_threadsafe(cancel.set)
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "go", cancel=cancel)

    result = run(scenario)
    assert summarizer.calls == 1 and events(svc, "summary")  # the recovery work itself finished
    assert svc.reads.compaction_state(THREAD).generation == 1
    assert result.status == "cancelled" and len(sim.requests) == 1  # but no retry was sent
    assert not events(svc, "retry") and events(svc, "cancelled")
    assert run_info(svc, result.run_id).status == "cancelled" and svc.store.busy_reason(THREAD) is None


def test_cancel_arriving_with_the_overflow_skips_recovery(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    seed_turns(svc, 8)
    seed_tool_round(svc, bulk(BIG_RESULT_ROWS))
    status, body = overflow_body("openai", tokens=9000, window=8000, max_tokens=None)

    async def scenario():
        loop, cancel = asyncio.get_running_loop(), asyncio.Event()

        def refuse(request: SimRequest) -> Reply:  # the user presses stop as the provider refuses
            loop.call_soon_threadsafe(cancel.set)
            return Reply.error(status, body)

        sim.script([refuse])
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "go", cancel=cancel)

    result = run(scenario)
    assert result.status == "cancelled" and len(sim.requests) == 1
    assert summarizer.calls == 0 and not svc.reads.offloads(THREAD) and svc.reads.compaction_state(THREAD).generation == 0
    assert _kinds(svc) == ["provider_error", "cancelled"]


def test_task_cancellation_mid_request_records_the_run_as_cancelled(svc: Service, sim: ProviderSimulator) -> None:
    arrived = threading.Event()

    def slow(request: SimRequest) -> Reply:
        arrived.set()
        return Reply(content="too late", delay=5)

    sim.script([slow])

    async def scenario():
        async with harness(svc, sim) as h:
            task = asyncio.create_task(h.run(THREAD, "go"))
            assert await asyncio.to_thread(arrived.wait, 3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    run(scenario)
    (info,) = svc.store.runs(THREAD)
    assert info.status == "cancelled" and svc.store.busy_reason(THREAD) is None
    (req,) = svc.store.model_requests(THREAD)
    assert (req.outcome, req.error_code) == ("cancelled", "CANCELLED")
    assert [m.role for m in stored(svc)] == ["user"] and events(svc, "cancelled")


PARALLEL = Reply(tool_calls=(("first", {}), ("second", {}), ("third", {})))


def _assert_no_orphans(svc: Service, ran: list[str], aborted: int) -> None:
    msgs = stored(svc)
    assert is_balanced(msgs)
    counts = results_per_call(msgs)
    assert len(counts) == 3 and set(counts.values()) == {1}  # every call has exactly one result
    results = [m for m in msgs if m.role == "tool"]
    assert [m.name for m in results] == ["first", "second", "third"]
    assert [m.content == ABORTED_TEXT for m in results] == [False] * len(ran) + [True] * aborted
    assert all(m.metadata.get("aborted") for m in results if m.content == ABORTED_TEXT)
    assert events(svc, "cancelled")[0].data["aborted_calls"] == aborted


def test_cancel_between_parallel_calls_records_aborted_results(svc: Service, sim: ProviderSimulator) -> None:
    sim.script([PARALLEL])
    ran: list[str] = []

    async def scenario():
        cancel = asyncio.Event()

        def first(args: dict) -> str:
            ran.append("first")
            cancel.set()  # the user pressed stop while the first call ran
            return "first done"

        tools = [Tool("first", first), Tool("second", lambda a: ran.append("second") or "x"), Tool("third", lambda a: ran.append("third") or "x")]
        async with harness(svc, sim, tools) as h:
            return await h.run(THREAD, "go", cancel=cancel)

    result = run(scenario)
    assert result.status == "cancelled" and ran == ["first"] and len(sim.requests) == 1
    _assert_no_orphans(svc, ran, aborted=2)
    assert run_info(svc, result.run_id).status == "cancelled"


def test_task_cancellation_inside_a_tool_records_aborted_results(svc: Service, sim: ProviderSimulator) -> None:
    sim.script([PARALLEL])
    ran: list[str] = []

    async def scenario():
        entered = asyncio.Event()

        async def second(args: dict) -> str:
            entered.set()
            await asyncio.Event().wait()  # never finishes on its own
            return "unreachable"

        tools = [Tool("first", lambda a: ran.append("first") or "ok"), Tool("second", second), Tool("third", lambda a: ran.append("third") or "x")]
        async with harness(svc, sim, tools) as h:
            task = asyncio.create_task(h.run(THREAD, "go"))
            await asyncio.wait_for(entered.wait(), 3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    run(scenario)
    assert ran == ["first"]
    _assert_no_orphans(svc, ran, aborted=2)
    assert svc.store.runs(THREAD)[0].status == "cancelled"


def test_task_cancellation_while_the_tool_call_message_is_being_stored(svc: Service, sim: ProviderSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The assistant message lands in a worker thread; a cancellation arriving meanwhile must not
    record the run as cancelled first and leave three orphan calls behind it."""
    sim.script([PARALLEL])
    entered, release = threading.Event(), threading.Event()
    real_finish = svc.steps.finish_step

    def slow_finish(key, request_id, **kwargs):  # the reply is stored with the request's outcome
        if any(m.role == "assistant" for m in kwargs.get("messages", ())):
            entered.set()
            release.wait(5)
        return real_finish(key, request_id, **kwargs)

    monkeypatch.setattr(svc.steps, "finish_step", slow_finish)

    async def scenario():
        async with harness(svc, sim, [Tool(n, lambda a: "x") for n in ("first", "second", "third")]) as h:
            task = asyncio.create_task(h.run(THREAD, "go"))
            assert await asyncio.to_thread(entered.wait, 3)
            task.cancel()
            await asyncio.sleep(0.05)  # let the cancellation be handled before the write finishes
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task

    run(scenario)
    _assert_no_orphans(svc, [], aborted=3)
    assert svc.store.runs(THREAD)[0].status == "cancelled" and svc.store.busy_reason(THREAD) is None


def test_an_unexpected_harness_error_fails_the_run_instead_of_leaving_it_busy(svc: Service, sim: ProviderSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}), ("query_kb", {"query": "y"})))])
    real_append = svc.runs.append_message

    def failing_append(key, message, **kwargs):
        if message.role == "tool":
            raise OSError("disk full")
        return real_append(key, message, **kwargs)

    monkeypatch.setattr(svc.runs, "append_message", failing_append)

    async def scenario():
        async with harness(svc, sim, [kb_tool()]) as h:
            with pytest.raises(OSError, match="disk full"):
                await h.run(THREAD, "go")

    run(scenario)
    (info,) = svc.store.runs(THREAD)
    assert (info.status, info.error_code, info.error_message) == ("failed", "harness_error", "OSError: disk full")
    assert svc.store.busy_reason(THREAD) is None  # manual compaction and new runs are possible again
    assert is_balanced(stored(svc)) and events(svc, "harness_error")[0].data["aborted_calls"] == 2
