"""The incremental snapshot and measurement (engine.snapshots) against a full re-read, step by step.

Every comparison is with what the engine computed before the cache existed: ``Store.snapshot`` read
whole, then ``build_surface`` → ``envelope_of`` → ``TokenMeter.measure``. SQLite and PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Sequence

import pytest

from engine import snapshots
from engine.compaction.compactor import RunState
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.surface import build_surface, envelope_of
from engine.service import Service
from engine.snapshots import SnapshotCache
from engine.store.reads import ThreadReader
from tests import door_ops

from .conftest import MODEL, PROVIDER, Counting, add, filler, finished_turns, new_thread, route, running_turn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from traces import generate  # noqa: E402  (benchmarks/traces.py: seeded traces)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def factory(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def full(svc: Service, key: str, ephemeral: Sequence[Message] = (), model: str | None = None) -> tuple[Any, Any, Any]:
    """(snapshot, surface, measurement) read and measured whole, as before the cache."""
    snap = svc.store.snapshot(key, with_busy=False)
    surface = build_surface(snap, ephemeral=ephemeral)
    return snap, surface, default_meter(model or snap.model).measure(envelope_of(snap, surface))


def assert_same(cache: SnapshotCache, svc: Service, key: str, ephemeral: Sequence[Message] = (), model: str | None = None) -> int:
    """The cache's snapshot, surface and measurement equal the full read; returns the tokens."""
    snap, surface, measurement = full(svc, key, ephemeral, model)
    got = cache.snapshot(key)
    assert got == snap
    meter = default_meter(model or snap.model)
    got_surface, got_env, got_measurement = cache.measure(got, meter, ephemeral=ephemeral)
    assert got_surface == surface
    assert got_env == envelope_of(snap, surface)
    assert got_measurement == measurement
    return measurement.total


def assert_status(svc: Service, key: str) -> None:
    """``Service.compaction.status`` (streamed tally) equals the full measurement for the thread's model."""
    snap, _, measurement = full(svc, key)
    st = svc.compaction.status(key)
    assert (st.tokens, dict(st.breakdown), st.generation, st.boundary) == (measurement.total, dict(measurement.breakdown), snap.state.generation, snap.state.boundary)


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records how many messages each read of the messages after an id returned (``messages_after``,
    the held path, and ``counted_messages_after``, the streamed one)."""
    sizes: list[int] = []
    real = ThreadReader.messages_after
    real_counted = ThreadReader.counted_messages_after

    def spy(self: ThreadReader, boundary: int | None, *, limit: int | None = None) -> list[Message]:
        out = real(self, boundary, limit=limit)
        sizes.append(len(out))
        return out

    def spy_counted(self: ThreadReader, after: int | None, *, key: str, limit: int) -> list[Any]:
        out = real_counted(self, after, key=key, limit=limit)
        sizes.append(len(out))
        return out

    real_quick = snapshots.quick_thread_read

    def spy_quick(store: Any, key: str, known: Any, after: int | None, limit: int) -> Any:
        version, new = real_quick(store, key, known, after, limit)
        if new is not None:  # the quick read of the held path read these messages
            sizes.append(len(new))
        return version, new

    monkeypatch.setattr(ThreadReader, "messages_after", spy)
    monkeypatch.setattr(ThreadReader, "counted_messages_after", spy_counted)
    monkeypatch.setattr(snapshots, "quick_thread_read", spy_quick)
    return sizes


# -- step by step on a replayed trace --------------------------------------------------------------


@pytest.mark.parametrize("family", ["research", "coding"])
def test_every_step_of_a_replayed_trace_matches_a_full_read(factory: Any, new_key: Any, family: str) -> None:
    """The benchmark replay (a run per user turn, the pressure path before every model step, a
    completed request after it): at every step the incremental snapshot, surface, measurement and
    pressure decision equal a full re-read, through the prunes and summaries the trace causes."""
    trace = generate(family, 10_000)
    window = 8192
    svc = factory(summarizer=Counting(), policies={"context_window": window, "default": {"summary_max_tokens": 1024}})
    streamed = SnapshotCache(svc.store, page=7)  # a separate cache streaming in tiny pages
    key = new_key(family)
    svc.runs.create_thread(key, title=trace.name, system_prompt=trace.system_prompt, tools=trace.tools)
    run: RunState | None = None
    steps = compactions = 0

    def step() -> None:
        nonlocal steps, compactions
        assert run is not None
        before = assert_same(svc.snapshots, svc, key, run.ephemeral, MODEL)
        threshold = svc.steps.policy_for(PROVIDER, MODEL).threshold
        outcome = svc.steps.compact_for_pressure(key, run)
        assert (outcome.reason == "below_threshold") == (before < threshold) or outcome.reason == "no_completed_request"
        compactions += outcome.progressed
        after = assert_same(svc.snapshots, svc, key, run.ephemeral, MODEL)
        if outcome.measured is not None:
            assert outcome.measured.tokens == after
        m = streamed.thread_measure(key)
        assert m.measurement == full(svc, key)[2]
        rid = svc.steps.record_model_request(key, provider=PROVIDER, model=MODEL, run_id=run.run_id, estimated_tokens=after)
        svc.steps.complete_model_request(key, rid, outcome="ok", reported_prompt_tokens=after, reported_completion_tokens=100)
        assert_status(svc, key)
        steps += 1

    for m in trace.messages:
        if m.role == "user":
            if run is not None:
                svc.runs.finish_run(key, run.run_id)  # type: ignore[arg-type]
            svc.runs.append_message(key, m)
            run = RunState(run_id=svc.runs.start_run(key))
            run.add_ephemeral(f"note before turn {steps}")
            continue
        if m.role == "assistant":
            step()
        svc.runs.append_message(key, m, run_id=run.run_id if run else None)
    step()
    assert steps > 3 and compactions >= 1  # the trace did compact: invalidation was exercised


# -- invalidation: a new message, a prune, a summary (also by another service / process) -------------


def test_a_new_message_costs_only_itself(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 6)
    first = svc.compaction.status(key)
    sizes = count_reads(monkeypatch)
    assert svc.compaction.status(key) == first and sizes == []  # the row's newest id is the one seen: no read
    svc.runs.append_message(key, user("one more question, please"))
    sizes.clear()
    later = svc.compaction.status(key)
    assert sizes == [1] and later.tokens > first.tokens
    assert_status(svc, key)
    sizes.clear()
    assert_same(svc.snapshots, svc, key)
    # the held snapshot is read whole once (it keeps the messages), then one message at a time
    svc.runs.append_message(key, assistant("an answer"))
    sizes.clear()
    snap = svc.snapshots.snapshot(key)
    assert sizes == [1] and snap == svc.store.snapshot(key, with_busy=False)


def test_a_prune_and_a_summary_by_another_service_are_seen(factory: Any, new_key: Any) -> None:
    """Two services on one database: the second prunes and then summarizes; the first's cached
    status and snapshot follow at once (the key is read from the database, never from memory)."""
    a, b = factory(), factory()
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 14)
    running_turn(a, key, rounds=5, result_tokens=2600)  # results over the limit: pruned first
    assert_status(a, key)
    assert_same(a.snapshots, a, key)
    before = a.compaction.status(key)
    run = RunState(run_id=b.runs.start_run(key))
    outcome = b.steps.compact_for_pressure(key, run)
    assert outcome.progressed
    after = a.compaction.status(key)
    assert after.generation > before.generation and after.tokens < before.tokens
    assert_status(a, key)
    assert_same(a.snapshots, a, key)
    # the pressure path of the first service now measures the compacted thread, not its memory
    out = a.steps.compact_for_pressure(key, RunState(run_id=run.run_id))
    assert out.tokens_before == full(a, key, model=MODEL)[2].total or out.progressed


def compact_in_another_process(svc: Service, key: str, workdir: Path) -> tuple[str, int]:
    """A manual compaction of ``key`` by another OS process on ``svc``'s database: (status, generation)."""
    script = textwrap.dedent(
        f"""
        from engine.service import open_service
        from engine.compaction.summarizers.extractive import ExtractiveSummarizer
        svc = open_service({svc.store.url.render_as_string(hide_password=False)!r}, workdir={str(workdir)!r},
                           summarizer=ExtractiveSummarizer(), policies={{"context_window": 8000}})
        r = svc.compaction.compact({key!r})
        print(r.status, r.generation)
        svc.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status, generation = done.stdout.split()
    return status, int(generation)


def test_a_compaction_by_another_process_is_seen(factory: Any, new_key: Any, tmp_path: Path) -> None:
    """Another OS process compacts a thread this service holds in its cache (status and the
    pressure path): no stale pressure afterwards, its pressure check measures the compacted surface."""
    svc = factory(policies={"context_window": 8000})
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 30)
    before = svc.compaction.status(key)
    assert_same(svc.snapshots, svc, key)
    run = RunState(run_id=svc.runs.start_run(key))
    held = svc.steps.compact_for_pressure(key, run)  # the pressure path holds the thread
    svc.runs.finish_run(key, run.run_id)
    status, generation = compact_in_another_process(svc, key, tmp_path / "other")
    assert status == "completed"
    after = svc.compaction.status(key)
    assert after.generation == generation > before.generation
    assert after.boundary is not None and after.tokens < before.tokens
    assert_status(svc, key)
    assert_same(svc.snapshots, svc, key)
    run = RunState(run_id=svc.runs.start_run(key))
    out = svc.steps.compact_for_pressure(key, run)
    assert out.generation_before == generation and out.boundary_before == after.boundary
    assert out.tokens_before == full(svc, key, run.ephemeral, MODEL)[2].total < held.tokens_before


def test_closing_markers_and_the_synthetic_message_match(factory: Any, new_key: Any) -> None:
    """A dangling call closed late (its marker moved after the round) and, after a summary, a
    marker whose call is behind the boundary (left out) and a first message that is not a user's."""
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 3)
    call = ToolCall("c-dangling", "query_kb", "{}")
    add(svc, key, user("look it up"), assistant("calling", call))
    other = ToolCall("c-ok", "query_kb", "{}")
    add(svc, key, assistant("and this", other), tool_result(other.id, "found", name="query_kb"), assistant("done"))
    assert_status(svc, key)
    assert_same(svc.snapshots, svc, key)
    assert svc.runs.close_dangling_calls(key) == 1  # a late closing marker, appended at the end
    assert_status(svc, key)
    assert_same(svc.snapshots, svc, key)
    finished_turns(svc, key, 20)
    assert svc.compaction.compact(key).status == "completed"
    add(svc, key, assistant("a new assistant message"))
    assert_status(svc, key)
    assert_same(svc.snapshots, svc, key)
    assert_same(SnapshotCache(svc.store, page=3), svc, key)


def test_configuration_and_route_changes_are_seen(factory: Any, new_key: Any) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 4)
    assert_status(svc, key)
    assert_same(svc.snapshots, svc, key)
    svc.runs.configure(key, system_prompt=filler(300, "new prompt"), tools=[{"type": "function", "function": {"name": "x", "parameters": {}}}])
    assert_status(svc, key)
    assert_same(svc.snapshots, svc, key)
    door_ops.set_route(svc.store, key, provider="openai", model="gpt-4o")  # another encoding (o200k)
    assert_status(svc, key)
    assert_same(svc.snapshots, svc, key, model="gpt-4o")


def test_imported_anchor_counts_only_what_came_after(factory: Any, new_key: Any) -> None:
    """``anchored_tokens`` of an imported request: its reported prompt plus the tokens of the
    messages after it, now taken from the tally's per-message counts."""
    svc = factory()
    key = new_thread(svc, new_key())
    ids = finished_turns(svc, key, 5)
    st = svc.compaction.status(key)
    meter = default_meter(None)
    after = [m for m in svc.store.snapshot(key).messages if m.id is not None and m.id > ids[3]]
    assert svc.snapshots.thread_measure(key).tokens_after(ids[3]) == sum(meter.count_messages(after))
    assert st.anchored_tokens is None


def test_streamed_cold_measurement_reports_progress_and_keeps_no_messages(factory: Any, new_key: Any) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 10)
    cache = SnapshotCache(svc.store, page=4)
    seen: list[int] = []
    m = cache.thread_measure(key, progress=seen.append)
    assert seen == [4, 8, 12, 16, 20] and m.measurement == full(svc, key)[2]
    entry = cache._entries[key]
    assert entry.messages is None and entry.snapshot is None  # nothing of the thread is held


def test_a_worker_process_counts_the_same(factory: Any, new_key: Any) -> None:
    """The cold streamed measurement of a long thread whose rows have no kept counts (written
    before 0003) has a worker process encode each page while the next is read: the counts are
    the same as in this process."""
    from sqlalchemy import text

    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 12)
    running_turn(svc, key, rounds=3)
    with svc.store.engine.begin() as conn:  # what a thread written before the counts were kept looks like
        conn.execute(text("UPDATE messages SET tokens = NULL, tokens_key = NULL WHERE conversation_id = :c"), {"c": svc.store.thread(key).id})
    with_worker = SnapshotCache(svc.store, page=5, worker_min_messages=0)
    seen: list[int] = []
    m = with_worker.thread_measure(key, progress=seen.append)
    assert m.measurement == full(svc, key)[2] == SnapshotCache(svc.store, page=5, worker=False).thread_measure(key).measurement
    assert seen[-1] == len(svc.store.snapshot(key).messages) and len(seen) > 3
    svc.runs.append_message(key, user("and now?"))
    assert with_worker.thread_measure(key).measurement == full(svc, key)[2]
