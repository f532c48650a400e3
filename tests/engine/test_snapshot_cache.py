"""The snapshot cache (engine.snapshots) against the database it reads: a new message extends it,
a prune and a summary invalidate it, whoever made them: here another Service / Store on the same
database (SQLite and PostgreSQL); a compaction by another process is in test_incremental.py.
After each, the pressure the first service computes (its pressure check, its measure, its
status) equals a full re-read: no stale pressure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.compaction.compactor import RunState
from engine.core.messages import assistant, system, user
from engine.core.meter import TokenMeter, default_meter
from engine.core.surface import build_surface, envelope_of
from engine.core.views import Offload
from engine.service import Service
from engine.store.reads import ThreadReader

from .conftest import MODEL, PROVIDER, finished_turns, new_thread, route, running_turn
from .test_incremental import count_reads


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def factory(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def full_tokens(svc: Service, key: str, run: RunState | None = None) -> int:
    """The routed model's measurement of the envelope, read and measured whole (no cache)."""
    snap = svc.store.snapshot(key, with_busy=False)
    surface = build_surface(snap, ephemeral=run.ephemeral if run else ())
    return default_meter(MODEL).measure(envelope_of(snap, surface)).total


def assert_fresh(svc: Service, key: str, run: RunState) -> int:
    """Every pressure figure of ``svc`` (through its cache) equals a full re-read; returns it."""
    want = full_tokens(svc, key, run)
    assert svc.steps.measure(key, ephemeral=run.ephemeral, model=MODEL).tokens == want
    snap, routed = svc.snapshots.pressure_read(key)
    assert snap == svc.store.snapshot(key, with_busy=False) and routed == svc.store.last_completed_request(key)
    status = svc.compaction.status(key)
    snap = svc.store.snapshot(key)
    assert status.tokens == default_meter(snap.model).measure(envelope_of(snap, build_surface(snap))).total
    assert (status.generation, status.boundary) == (snap.state.generation, snap.state.boundary)
    return want


def test_new_message_prune_and_summary_by_another_service(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Service ``a`` keeps the thread in its cache (pressure path and status); service ``b``, on
    the same database, appends, prunes and summarizes. ``a`` extends its entry by the one new
    message, and measures the pruned and then the summarized surface at once."""
    policies = {"context_window": 8000}
    a, b = factory(policies=policies), factory(policies=policies)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 6)
    run = RunState(run_id=b.runs.start_run(key))
    first = assert_fresh(a, key, run)

    # a new message (by b): a reads only it
    sizes = count_reads(monkeypatch)
    b.runs.append_message(key, assistant("a note from the other service"), run_id=run.run_id)
    sizes.clear()
    grown = assert_fresh(a, key, run)
    assert grown > first and sizes and set(sizes) == {1}

    # a prune (by b): tool results over the limit are replaced by previews; the generation moves
    running_turn(b, key, rounds=3, result_tokens=2600)  # over the 2000-token limit
    before = assert_fresh(a, key, run)
    g0 = a.compaction.status(key).generation
    pruned = b.steps.compact_for_pressure(key, run)
    assert pruned.progressed and b.store.offloads(key), pruned.reason
    assert a.compaction.status(key).generation > g0
    after_prune = assert_fresh(a, key, run)
    assert after_prune < before
    # a's own pressure check decides on the pruned surface, not on what it held
    out = a.steps.compact_for_pressure(key, run)
    assert out.tokens_before == after_prune

    # a summary (by b): the boundary moves
    finished_turns(b, key, 14)
    assert_fresh(a, key, run)
    b.runs.finish_run(key, run.run_id)
    assert b.compaction.compact(key).status == "completed"
    state = a.compaction.status(key)
    assert state.boundary is not None and state.compact_count >= 1
    run2 = RunState(run_id=a.runs.start_run(key))
    after_summary = assert_fresh(a, key, run2)
    out = a.steps.compact_for_pressure(key, run2)
    assert out.tokens_before == after_summary


def test_an_unchanged_thread_is_answered_from_the_cache(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key row unchanged (no message, no configuration, no state change): the same snapshot
    and measurement objects, no message read; a busy change or a new configuration is seen."""
    svc = factory()
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 4)
    svc.snapshots.snapshot(key)  # the pressure path holds the thread; status then measures that entry
    measured = svc.snapshots.thread_measure(key)
    snap = svc.snapshots.snapshot(key)
    sizes = count_reads(monkeypatch)
    assert svc.snapshots.snapshot(key) is snap
    assert svc.snapshots.thread_measure(key).measurement is measured.measurement
    assert svc.snapshots.snapshot(key) is snap
    assert sizes == []
    run = svc.runs.start_run(key)
    assert svc.compaction.status(key).busy_reason == "running"
    assert svc.snapshots.snapshot(key, with_busy=True).busy_reason == "running"
    assert svc.snapshots.snapshot(key).busy_reason is None
    svc.runs.finish_run(key, run)
    svc.runs.configure(key, system_prompt="You are terse.")
    again = svc.snapshots.snapshot(key)
    assert again.system_prompt == "You are terse." and again == svc.store.snapshot(key, with_busy=False)
    assert svc.compaction.status(key).tokens == default_meter(None).measure(envelope_of(again, build_surface(again))).total
    assert sizes == []  # none of this read a message
    svc.runs.append_message(key, user("and one more question"))
    assert svc.snapshots.thread_measure(key).last_request == svc.store.last_completed_request(key)
    assert sizes == [1]


def test_pressure_read_sees_a_new_completed_request(factory: Any, new_key: Any) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 2)
    assert svc.snapshots.pressure_read(key)[1] is None
    rid = route(svc, key)
    snap, routed = svc.snapshots.pressure_read(key)
    assert routed is not None and routed.id == rid and routed == svc.store.last_completed_request(key)
    assert (routed.provider, routed.model) == (PROVIDER, MODEL)
    assert snap == svc.store.snapshot(key, with_busy=False)


def test_prune_summary_and_revert_keep_the_held_messages(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's own prune and summary move the compaction state; its held entry is rebased on
    the new state (the messages it holds after the new boundary kept, none read again) and still
    equals a whole re-read; a revert moves the boundary back, so the entry is read whole again."""
    policies = {"context_window": 8000}
    svc = factory(policies=policies)
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 6)
    run = RunState(run_id=svc.runs.start_run(key))
    running_turn(svc, key, rounds=3, result_tokens=2600)  # over the 2000-token prune limit
    assert_fresh(svc, key, run)

    svc.snapshots.snapshot(key)  # the pressure path holds the thread
    sizes = count_reads(monkeypatch)
    pruned = svc.compactor.pressure(key, run)  # the pressure path alone (svc.steps also remeasures for the list)
    assert pruned.progressed and svc.store.offloads(key), pruned.reason
    sizes.clear()
    requests: list[int] = []
    real = ThreadReader.last_user_message
    monkeypatch.setattr(ThreadReader, "last_user_message", lambda self, **kw: requests.append(1) or real(self, **kw))
    held = svc.snapshots.snapshot(key)
    assert sizes == [0]  # rebased on the pruned state: the held messages kept, only what is newer read (nothing)
    assert requests == []  # nothing appended since: the held current request stays
    assert held == svc.store.snapshot(key, with_busy=False)
    assert any(m.id in svc.store.offloads(key) for m in held.messages)  # the previews are shown
    assert_fresh(svc, key, run)

    finished_turns(svc, key, 14)
    svc.runs.finish_run(key, run.run_id)
    assert svc.compaction.compact(key).status == "completed"
    run2 = RunState(run_id=svc.runs.start_run(key))
    assert_fresh(svc, key, run2)
    after_summary = svc.snapshots.snapshot(key)
    boundary = svc.compaction.status(key).boundary
    assert boundary is not None and all(m.id is not None and m.id > boundary for m in after_summary.messages)
    assert after_summary == svc.store.snapshot(key, with_busy=False)

    svc.runs.finish_run(key, run2.run_id)
    undone = svc.compaction.revert(key)
    assert undone.action == "revert" and undone.boundary_after != undone.boundary_before
    reverted = svc.snapshots.snapshot(key)
    assert reverted == svc.store.snapshot(key, with_busy=False)
    assert len(reverted.messages) > len(after_summary.messages)  # the summarized messages are back
    run3 = RunState(run_id=svc.runs.start_run(key))
    assert_fresh(svc, key, run3)


def test_a_prune_carries_the_tally_over_with_the_previews_and_what_came_since(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``a`` measured the thread; ``b`` appends a round and prunes it. ``a``'s entry is rebased
    on the pruned state with its tally carried over (the pruned results repriced as their
    previews, the new messages added): no message it had counted is counted again, and every
    figure equals a whole re-read."""
    policies = {"context_window": 8000}
    a, b = factory(policies=policies), factory(policies=policies)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 6)
    run = RunState(run_id=b.runs.start_run(key))
    assert_fresh(a, key, run)
    held = len(a.snapshots.snapshot(key).messages)

    running_turn(b, key, rounds=3, result_tokens=2600)  # over the 2000-token limit; a has not read it
    pruned = b.steps.compact_for_pressure(key, run)
    assert pruned.progressed and b.store.offloads(key), pruned.reason
    counted: list[int] = []
    real = TokenMeter.count_messages

    def spy(self: TokenMeter, messages: Any, **kw: Any) -> list[int]:
        counted.append(len(messages))
        return real(self, messages, **kw)

    monkeypatch.setattr(TokenMeter, "count_messages", spy)
    snap, _ = a.snapshots.pressure_read(key)
    m = a.compactor.measure(snap, ephemeral=run.ephemeral, model=MODEL)
    assert counted and max(counted) < held  # only what came since, not the history again
    assert m.tokens == full_tokens(a, key, run)
    assert_fresh(a, key, run)


def test_a_prune_measured_before_it_is_written_is_measured_from_the_tally(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The latest snapshot with more results pruned (what a prune measures before writing them)
    is measured from the held tally repriced, not whole: the same figures as a whole measurement,
    notes included; a snapshot of other messages is measured whole."""
    svc = factory(policies={"context_window": 8000})
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 4)
    running_turn(svc, key, rounds=3, result_tokens=600)
    meter = default_meter(MODEL)
    snap = svc.snapshots.snapshot(key)
    svc.snapshots.measure(snap, meter)  # the tally of the latest snapshot
    results = [m for m in snap.messages if m.role == "tool"]

    def offload(m: Any, preview: str) -> Offload:
        return Offload(m.id, m.name or "tool", f"/wd/{m.id}", f"{m.id:064x}", preview, 600, 20)

    wholes: list[int] = []
    real = TokenMeter.measure

    def spy(self: TokenMeter, env: Any) -> Any:
        wholes.append(1)
        return real(self, env)

    monkeypatch.setattr(TokenMeter, "measure", spy)
    notes = [system("a note of the run")]
    one = replace(snap, offloads={**snap.offloads, results[0].id: offload(results[0], "[a preview of the first result]")},
                  state=replace(snap.state, generation=snap.state.generation + 1))
    two = replace(one, offloads={**one.offloads, results[1].id: offload(results[1], "[another preview]")})
    for predicted in (one, two):
        surface, env, got = svc.snapshots.measure(predicted, meter, ephemeral=notes)
        assert wholes == []
        assert got == real(meter, envelope_of(predicted, build_surface(predicted, ephemeral=notes)))
        assert surface == build_surface(predicted, ephemeral=notes)
    svc.snapshots.measure(replace(one, messages=snap.messages[1:]), meter)
    assert wholes == [1]  # other messages: measured whole
