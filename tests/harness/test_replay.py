"""Replay of overflow recoveries recorded by real harness runs: episodes, steps and rebuilt surfaces."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timezone

from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.replay import episodes_from
from engine.core.events import parse_event
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.views import CompactionEvent, CompactionState, HistoryRecord, Offload, Snapshot
from engine.llm.errors import CONTEXT_WINDOW_EXCEEDED
from engine.service import Service
from tests import door_ops

from .conftest import THREAD, SteeredSummarizer, bulk, harness, kb_tool, openai_overflow_text, run, seed_turns

BIG = bulk(400)


def assert_rows_are_payloads(svc: Service) -> None:
    """What the harness and the compactor recorded is exactly one payload per row (docs/events.md)."""
    for e in svc.reads.events(THREAD):
        payload = parse_event(e.kind, e.data)
        assert payload is not None and payload.to_data() == dict(e.data), e.kind
        assert e.trigger in payload.triggers, (e.kind, e.trigger)


def _prune_recovery(svc: Service, sim: ProviderSimulator) -> None:
    sim.context_window = 2000
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(content="all done")])

    async def scenario():
        async with harness(svc, sim, [kb_tool(BIG)]) as h:
            return await h.run(THREAD, "Look it up")

    assert run(scenario).status == "completed"


def test_a_pruned_recovery_replays_step_by_step(svc: Service, sim: ProviderSimulator) -> None:
    _prune_recovery(svc, sim)
    (episode,) = svc.reads.replay(THREAD)
    assert episode.outcome == "recovered" and episode.run_id == svc.store.runs(THREAD)[0].id
    assert [s.kind for s in episode.steps] == ["provider_error", "prune", "retry", "recovered"]
    err, prune, retry, recovered = episode.steps
    assert (err.error_code, err.error_message) == (CONTEXT_WINDOW_EXCEEDED, openai_overflow_text(sim.requests[1].prompt_tokens, 2000))
    assert err.tokens_before == sim.requests[1].prompt_tokens
    assert (retry.generation_before, retry.generation_after, retry.no_progress) == (0, 1, False)
    assert retry.tokens_before == err.tokens_before and retry.tokens_after == sim.requests[2].prompt_tokens
    # the surface at each step: the full result before the prune, its preview after
    tool_before = next(m for m in err.surface if m.role == "tool")
    tool_after = next(m for m in retry.surface if m.role == "tool")
    assert tool_before.content == BIG and tool_after.content != BIG and prune.detail["pruned"][0]["sha256"][:12] in tool_after.content
    # and only messages that existed then: the final answer came after the recovery
    for step in episode.steps:
        assert "all done" not in [m.content for m in step.surface], step.kind
    assert_rows_are_payloads(svc)


def test_an_episode_that_gives_up_keeps_the_original_error(svc: Service, sim: ProviderSimulator) -> None:
    sim.context_window = 1000

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "Read this: " + bulk(200))

    result = run(scenario)
    (episode,) = svc.reads.replay(THREAD)
    assert episode.outcome == "gave_up" and [s.kind for s in episode.steps] == ["provider_error", "gave_up"]
    gave_up = episode.steps[-1]
    assert (gave_up.error_code, gave_up.error_message) == (CONTEXT_WINDOW_EXCEEDED, result.error.message)
    assert gave_up.no_progress and (gave_up.generation_before, gave_up.generation_after) == (0, 0)
    assert_rows_are_payloads(svc)


def test_a_summary_recovery_shows_the_summary_and_the_smaller_surface(svc: Service, sim: ProviderSimulator) -> None:
    seed_turns(svc, 8)
    sim.context_window = 1200
    sim.script([Reply(content="answered from the summary")])

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "What is the status of the rollout?")

    assert run(scenario).status == "completed"
    (episode,) = svc.reads.replay(THREAD)
    assert [s.kind for s in episode.steps] == ["provider_error", "summary", "retry", "recovered"]
    err, summary, retry, _ = episode.steps
    assert summary.summary and "What is the status of the rollout?" in summary.summary
    assert any(m.content.startswith("Answer 0") for m in err.surface)  # compacted away by the summary
    assert not any(m.content.startswith("Answer") for m in summary.surface) and err.summary is None
    assert len(retry.surface) < len(err.surface) and retry.tokens_after < 1200 < retry.tokens_before
    assert svc.reads.compaction_state(THREAD).summary == summary.summary
    assert_rows_are_payloads(svc)


def test_cancellation_during_recovery_ends_the_episode_as_cancelled(svc: Service, sim: ProviderSimulator, summarizer: SteeredSummarizer) -> None:
    seed_turns(svc, 8)
    sim.context_window = 300

    async def scenario():
        loop, cancel = asyncio.get_running_loop(), asyncio.Event()
        summarizer.on_call = lambda request: loop.call_soon_threadsafe(cancel.set)
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "go", cancel=cancel)

    assert run(scenario).status == "cancelled"
    (episode,) = svc.reads.replay(THREAD)
    assert episode.outcome == "cancelled" and [s.kind for s in episode.steps] == ["provider_error", "summary", "cancelled"]
    assert_rows_are_payloads(svc)


def test_each_run_has_its_own_episode(svc: Service, sim: ProviderSimulator) -> None:
    _prune_recovery(svc, sim)
    sim.context_window = 300  # the next run cannot fit whatever recovery does

    async def scenario():
        async with harness(svc, sim) as h:
            return await h.run(THREAD, "and now " + bulk(100))

    second = run(scenario)
    episodes = svc.reads.replay(THREAD)
    assert [(e.run_id, e.outcome) for e in episodes] == [(svc.store.runs(THREAD)[0].id, "recovered"), (second.run_id, "gave_up")]


def test_a_retry_that_fails_otherwise_ends_its_episode_and_hides_no_later_one(svc: Service, sim: ProviderSimulator) -> None:
    """After a successful recovery the retried request fails with a 500: the episode ended without
    recovering (gave_up, with that error), and the next run's episode is still found."""
    sim.context_window = 2000
    sim.script([Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply.error(500, {"error": {"message": "backend down", "type": "server_error"}})])

    async def scenario():
        async with harness(svc, sim, [kb_tool(BIG)]) as h:
            first = await h.run(THREAD, "Look it up")
            sim.context_window = 300
            second = await h.run(THREAD, "and now " + bulk(100))
            return first, second

    first, second = run(scenario)
    assert (first.status, first.error_code, first.overflow_retries) == ("failed", "SERVER_ERROR", 1)
    episodes = svc.reads.replay(THREAD)
    assert [(e.run_id, e.outcome) for e in episodes] == [(first.run_id, "gave_up"), (second.run_id, "gave_up")]
    assert [s.kind for s in episodes[0].steps] == ["provider_error", "prune", "retry", "provider_error", "gave_up"]
    assert (episodes[0].steps[-1].error_code, episodes[0].steps[-1].error_message) == ("SERVER_ERROR", "backend down")
    assert_rows_are_payloads(svc)


def test_an_episode_whose_process_died_does_not_hide_the_next_run(svc: Service) -> None:
    """Run 1 recorded an overflow, a prune and a retry, then nothing (the agent process died)."""
    svc.runs.append_message(THREAD, Message("user", "first"))
    dead = svc.runs.start_run(THREAD)
    err = {"error_code": CONTEXT_WINDOW_EXCEEDED, "error_message": "too long", "generation": 0, "tokens": 900, "last_message_id": 1}
    door_ops.add_event(svc.store, THREAD, "provider_error", err, trigger="overflow", run_id=dead)
    door_ops.add_event(svc.store, THREAD, "retry", {"attempt": 1, "generation_before": 0, "generation_after": 1}, trigger="overflow", run_id=dead)
    svc.runs.cancel_run(THREAD, dead)
    svc.runs.append_message(THREAD, Message("user", "second"))
    live = svc.runs.start_run(THREAD)
    door_ops.add_event(svc.store, THREAD, "provider_error", {**err, "last_message_id": 2}, trigger="overflow", run_id=live)
    gave_up = {"reason": "no_progress", "error_code": CONTEXT_WINDOW_EXCEEDED, "error_message": "too long", "generation_before": 0, "generation_after": 0}
    door_ops.add_event(svc.store, THREAD, "gave_up", gave_up, trigger="overflow", run_id=live)
    episodes = svc.reads.replay(THREAD)
    assert [(e.run_id, e.outcome, [s.kind for s in e.steps]) for e in episodes] == [
        (dead, "recovered", ["provider_error", "retry"]),
        (live, "gave_up", ["provider_error", "gave_up"]),
    ]
    assert [m.content for m in episodes[0].steps[0].surface] == ["first"]
    assert [m.content for m in episodes[1].steps[1].surface] == ["first", "second"]


def test_recovered_step_shows_the_surface_the_retry_sent(tmp_path) -> None:
    """The "recovered" event carries no generation: its step must show the surface left by the
    recovery (previews), not the surface at generation 0 (full tool outputs)."""
    from engine.apps.demo import build_demo
    from engine.service import open_service

    db = tmp_path / "demo.db"
    build_demo(str(db))
    svc = open_service(str(db))
    try:
        (episode,) = svc.reads.replay("overflow-recovers")
        retry = next(s for s in episode.steps if s.kind == "retry")
        recovered = episode.steps[-1]
        assert recovered.kind == "recovered" and recovered.surface is not None
        assert [m.content for m in recovered.surface] == [m.content for m in (retry.surface or ())]
        assert any(m.metadata.get("pruned") for m in recovered.surface)
    finally:
        svc.close()


def test_replay_reads_whatever_a_platform_recorded_without_failing() -> None:
    """Rows of an unknown kind, keys of the wrong type and a ``data`` that is not an object are read
    as "unknown" (or skipped), never an error; the surfaces still come from the history."""
    at = datetime(2026, 12, 1, tzinfo=UTC)
    messages = (
        user("find it", id=1),
        assistant("", ToolCall("c1", "query_kb"), id=2),
        tool_result("c1", BIG, name="query_kb", id=3),
        assistant("found", id=4),  # written after the refused request
    )
    snapshot = Snapshot("t", 1, "sys", (), "sim", "m", CompactionState(1, generation=1), messages, {}, None, None)
    history = [HistoryRecord(1, 1, "prune", "overflow", 0, 1, None, None, None, (3,), 900, 300, at)]
    offloads = {3: Offload(3, "query_kb", "/wd/q", "ab" * 32, "[preview]", 900, 9, 1)}

    def row(i: int, kind: object, data: object, trigger: str | None = "overflow") -> CompactionEvent:
        return CompactionEvent(i, 1, 5, kind, trigger, at, data)  # type: ignore[arg-type]

    events = [
        row(1, "provider_error", {"error_code": CONTEXT_WINDOW_EXCEEDED, "generation": 0, "last_message_id": 3, "ephemeral": ["note", 7], "tokens": "many"}),
        row(2, "a_kind_from_the_future", {"x": 1}),
        row(3, "prune", {"generation_before": 0, "generation_after": 1}, trigger="pressure"),  # not part of the episode
        row(4, "retry", {"attempt": "two", "generation_before": 0, "generation_after": 1.0, "tokens_before": [1]}),
        row(5, "recovered", "not an object"),
    ]
    (episode,) = episodes_from(events, history=history, snapshot=snapshot, messages=messages, offloads=offloads)
    assert episode.outcome == "recovered" and [s.kind for s in episode.steps] == ["provider_error", "retry"]
    err, retry = episode.steps
    assert (err.attempt, err.tokens_before, err.generation_before) == (1, None, 0)
    assert [m.content for m in err.surface] == ["find it", "", BIG, "note"] and err.surface[-1].is_ephemeral
    assert (retry.attempt, retry.tokens_before, retry.generation_before, retry.generation_after) == (1, None, 0, 1)
    assert [m.content for m in retry.surface] == ["find it", "", "[preview]", "note"]
    assert retry.detail["attempt"] == "two"  # the detail is what was recorded
