"""The per-step pressure check's quick path against a cold measure, with another writer in between.

The check (``Compactor.pressure``) answers an unchanged thread from one version read (the key row
and the newest completed request, :func:`engine.store.reads.quick_thread_read`) and the last
measurement of the same snapshot, and a thread that only grew by messages from that read plus the
new messages. Every answer here is compared with a cold measure: ``Store.snapshot`` read whole,
``build_surface`` → ``envelope_of`` → ``TokenMeter.measure`` for the routed model, and the route
with ``Store.last_completed_request``. The other writer is a second Service on the same database:
it appends, completes requests (twice for one request too), compacts by hand, reconfigures, pins.
SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from engine import snapshots
from engine.compaction.compactor import Outcome, RunState
from engine.core.messages import InvalidMessage, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.surface import build_surface, envelope_of
from engine.service import Service
from engine.store import Store, reads
from tests import door_ops

from .conftest import MODEL, PROVIDER, filler, finished_turns, new_thread, route

POLICIES = {"context_window": 8_000}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def factory(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def cold_tokens(svc: Service, key: str, run: RunState) -> int:
    """The routed model's measurement of the envelope, read and measured whole (no cache)."""
    snap = svc.store.snapshot(key, with_busy=False)
    routed = svc.store.last_completed_request(key)
    assert routed is not None
    return default_meter(routed.model).measure(envelope_of(snap, build_surface(snap, ephemeral=run.ephemeral))).total


def assert_exact(a: Service, key: str, run: RunState) -> Outcome:
    """``a``'s pressure check (through its cache) gives the cold measure's tokens, and its read the
    stored snapshot and route."""
    out = a.compactor.pressure(key, run)
    assert out.reason == "below_threshold", out.reason
    assert out.tokens_before == cold_tokens(a, key, run)
    snap, routed = a.snapshots.pressure_read(key)
    assert snap == a.store.snapshot(key, with_busy=False)
    assert routed == a.store.last_completed_request(key)
    return out


def full_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every whole read (one transaction through ``thread_reading``) the cache makes."""
    seen: list[str] = []
    real = snapshots.thread_reading

    def spy(store: Any, key: str) -> Any:
        seen.append(key)
        return real(store, key)

    monkeypatch.setattr(snapshots, "thread_reading", spy)
    return seen


def test_the_quick_check_equals_a_cold_measure_whatever_another_service_writes(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = factory(policies=POLICIES), factory(policies=POLICIES)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 12)
    run = RunState(run_id=None)
    run.add_ephemeral("Reminder: answer in English.")
    first = assert_exact(a, key, run)
    reads = full_reads(monkeypatch)

    # unchanged: one version read, no whole read, the same measurement
    again = a.compactor.pressure(key, run)
    assert reads == [] and again.measured is first.measured
    assert_exact(a, key, run)

    # messages appended by b (no user message): the quick read takes them, no whole read
    door_ops.append_message(b.store, key, assistant("a note from the other service"))
    grown = assert_exact(a, key, run)
    call = ToolCall("call-q1", "query_kb", '{"query": "doc-42 owner"}')
    door_ops.append_messages(b.store, key, [assistant("Looking it up.", call), tool_result(call.id, filler(300, "result"), name="query_kb")])
    rounds = assert_exact(a, key, run)
    assert reads == [] and first.tokens_before < grown.tokens_before < rounds.tokens_before

    # a new completed request by b: the route changes, read whole
    rid = door_ops.record_model_request(b.store, key, provider=PROVIDER, model=MODEL, estimated_tokens=1)
    door_ops.complete_model_request(b.store, rid, outcome="ok", reported_prompt_tokens=2000, reported_completion_tokens=5)
    assert_exact(a, key, run)
    assert a.snapshots.pressure_read(key)[1].reported_prompt_tokens == 2000
    # the same request completed again with other usage: the route's record changes too
    door_ops.complete_model_request(b.store, rid, outcome="ok", reported_prompt_tokens=2100, reported_completion_tokens=5)
    assert_exact(a, key, run)
    assert a.snapshots.pressure_read(key)[1].reported_prompt_tokens == 2100
    # a message and a completed request between two checks (a step of another driver)
    door_ops.append_message(b.store, key, assistant("the other driver's answer"))
    rid = door_ops.record_model_request(b.store, key, provider=PROVIDER, model=MODEL, estimated_tokens=1)
    door_ops.complete_model_request(b.store, rid, outcome="ok", reported_prompt_tokens=2200, reported_completion_tokens=5)
    assert_exact(a, key, run)
    assert a.snapshots.pressure_read(key)[1].id == rid

    # a compaction by hand from b: the boundary moves, a sees the compacted surface at once
    before = assert_exact(a, key, run).tokens_before
    done = b.compactor.manual(key)
    assert done.status == "completed", done
    after = assert_exact(a, key, run)
    assert after.tokens_before < before and a.store.snapshot(key).state.boundary is not None

    # configuration and pins by b
    with b.store.locked(key) as tx:
        tx.configure(system_prompt="You are a terse support agent who answers in one line.")
    assert_exact(a, key, run)
    last = a.store.snapshot(key).messages[-1].id
    assert last is not None
    with b.store.locked(key) as tx:
        tx.pin(last, operator="test")
    assert_exact(a, key, run)

    # a user message: the current request changes (read whole), then unchanged again
    door_ops.append_message(b.store, key, user("And who owns doc-42 now?"))
    assert_exact(a, key, run)
    del reads[:]
    assert_exact(a, key, run)
    assert reads == []


def test_a_busy_snapshot_is_not_served_to_the_pressure_path(factory: Any, new_key: Any) -> None:
    """A snapshot read with its busy reason (status) is never the quick path's answer (which reads
    no busy reason)."""
    svc = factory(policies=POLICIES)
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 2)
    door_ops.start_run(svc.store, key)
    assert svc.snapshots.snapshot(key, with_busy=True).busy_reason == "running"
    assert svc.snapshots.snapshot(key).busy_reason is None
    assert svc.snapshots.pressure_read(key)[0] == svc.store.snapshot(key, with_busy=False)


# -- the write door's hand-off (Store.on_appended -> SnapshotCache.appended) ---------------------------

needs_hook = pytest.mark.skipif(not hasattr(Store, "on_appended"), reason="the write door's append hook (notes/E-patches/door-append-hook.patch) is not applied")


def handed_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the id of every message the quick read took as the door handed it (none read)."""
    seen: list[int] = []
    real = reads.handed_message

    def spy(id: int, row: Any) -> Any:
        seen.append(id)
        return real(id, row)

    monkeypatch.setattr(reads, "handed_message", spy)
    return seen


@needs_hook
def test_what_this_process_appended_is_taken_as_handed_and_equals_a_cold_measure(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a = factory(policies=POLICIES)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 6)
    run = RunState(run_id=None)
    assert_exact(a, key, run)
    handed = handed_spy(monkeypatch)
    reads_whole = full_reads(monkeypatch)

    ids = door_ops.append_messages(a.store, key, [assistant("a note \x00 with a NUL"), assistant("and a second note")])
    assert_exact(a, key, run)
    assert handed == ids and reads_whole == []
    call = ToolCall("call-h1", "query_kb", '{"query": "doc-7 owner"}')
    ids = door_ops.append_messages(a.store, key, [assistant("Looking it up.", call),
                                        tool_result(call.id, filler(200, "result"), name="query_kb").with_content(filler(200, "result"), source="kb")])
    assert_exact(a, key, run)
    assert handed[-2:] == ids and reads_whole == []
    # the handed messages are the stored ones, field for field (metadata, calls, NUL escape)
    snap, _ = a.snapshots.pressure_read(key)
    assert snap.messages == a.store.snapshot(key, with_busy=False).messages


@needs_hook
def test_another_service_writing_in_between_makes_the_check_read_the_new_messages(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = factory(policies=POLICIES), factory(policies=POLICIES)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 6)
    run = RunState(run_id=None)
    assert_exact(a, key, run)
    handed = handed_spy(monkeypatch)

    # a appends, then b: the version grew by one more than a handed over, so both are read
    door_ops.append_message(a.store, key, assistant("a's note"))
    door_ops.append_message(b.store, key, assistant(filler(120, "b's longer note")))
    assert_exact(a, key, run)
    assert handed == []
    # b first, then a
    door_ops.append_message(b.store, key, assistant(filler(90, "b again")))
    door_ops.append_message(a.store, key, assistant("a again"))
    assert_exact(a, key, run)
    assert handed == []
    # a alone again: taken as handed
    mid = door_ops.append_message(a.store, key, assistant("a alone"))
    assert_exact(a, key, run)
    assert handed == [mid]
    # b appends after a's hand-off was taken, then a's next check: read (b's was not handed)
    door_ops.append_message(b.store, key, assistant("b alone"))
    assert_exact(a, key, run)
    assert handed == [mid]
    # a compaction by b after a's append: the state changed, read whole; nothing stale is kept
    door_ops.append_message(a.store, key, assistant("a before b's compaction"))
    assert b.compactor.manual(key).status == "completed"
    assert_exact(a, key, run)
    door_ops.append_message(a.store, key, assistant("a after b's compaction"))
    assert_exact(a, key, run)


class _Rollback(Exception):
    pass


@needs_hook
def test_a_write_rolled_back_never_enters_the_cache(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rolled-back append hands nothing over: on SQLite the next message may take the very id the
    rolled-back one had, so a kept row would be counted in its place (a different count)."""
    a, b = factory(policies=POLICIES), factory(policies=POLICIES)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 6)
    run = RunState(run_id=None)
    assert_exact(a, key, run)
    handed = handed_spy(monkeypatch)
    heard: list[tuple[str, list[int]]] = []
    a.store.on_appended(lambda thread, rows: heard.append((thread, [i for i, _ in rows])))

    with pytest.raises(_Rollback):
        with a.store.locked(key) as tx:
            gone = tx.append_message(assistant(filler(400, "rolled back")))
            raise _Rollback
    assert heard == [] and not a.snapshots._handed.get(key)
    other = door_ops.append_message(b.store, key, assistant("b's short note"))  # SQLite: often the id `gone` had
    out = assert_exact(a, key, run)
    assert handed == [] and out.tokens_before == cold_tokens(a, key, run)
    if a.store.is_sqlite:
        assert other == gone  # the id was reused: what makes a kept row dangerous
    # a's own committed append afterwards is handed over again
    mine = door_ops.append_message(a.store, key, assistant("a's note after the rollback"))
    assert_exact(a, key, run)
    assert heard == [(key, [mine])] and handed == [mine]


def test_the_quick_reads_own_sqlite_connection_is_closed_with_the_store(make_service: Any, new_key: Any) -> None:
    svc = make_service(policies=POLICIES)
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 2)
    run = RunState(run_id=None)
    assert_exact(svc, key, run)
    engine = svc.store.engine
    held = reads._HELD.get(engine)
    assert held is not None
    svc.close()
    assert reads._HELD.get(engine) is None
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        held.cursor.execute("SELECT 1")


def test_a_failed_quick_read_gives_up_its_connection_and_the_next_check_opens_another(make_service: Any, new_key: Any) -> None:
    svc = make_service(policies=POLICIES)
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 2)
    run = RunState(run_id=None)
    assert_exact(svc, key, run)
    engine = svc.store.engine
    broken = reads._HELD[engine]
    broken.conn.close()  # the quick read's statement fails: the check reads in one transaction instead
    door_ops.append_message(svc.store, key, assistant("after the failure"))
    assert_exact(svc, key, run)
    assert reads._HELD.get(engine) is not broken
    door_ops.append_message(svc.store, key, assistant("and once more"))
    assert_exact(svc, key, run)
    assert reads._HELD[engine] is not broken


# -- the quick connection's PRAGMA data_version (SQLite) ------------------------------------------------


def version_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every version statement the quick read runs (after its data_version pragma)."""
    seen: list[str] = []
    real = reads._quick

    def spy(cursor: Any, plan: Any, key: str, *args: Any) -> Any:
        seen.append(key)
        return real(cursor, plan, key, *args)

    monkeypatch.setattr(reads, "_quick", spy)
    return seen


def _other_process(url: str, code: str) -> None:
    """Run ``code`` in a fresh interpreter with ``store`` open on ``url`` (another process's writer;
    ``door_ops``: the one-call door writes of the tests)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = ("import sys; sys.path.insert(0, {!r})\nfrom engine.store import Store\nfrom engine.core.messages import assistant\nfrom tests import door_ops\n"
              "store = Store.open({!r})\ntry:\n{}\nfinally:\n    store.close()\n").format(str(root), url, "\n".join("    " + line for line in code.splitlines()))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_an_unchanged_check_is_answered_from_data_version_until_anyone_else_commits(make_service: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_service(policies=POLICIES), make_service(policies=POLICIES)
    key = new_thread(a, new_key())
    other = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 4)
    run = RunState(run_id=None)
    assert_exact(a, key, run)
    a.compactor.pressure(key, run)  # the version now carries the quick connection's data_version
    versions = version_reads(monkeypatch)
    whole = full_reads(monkeypatch)
    first = a.compactor.pressure(key, run)
    a.compactor.pressure(key, run)
    assert versions == [] and whole == []  # the pragma alone

    # a commit by another connection of this process, to another thread: the version is read again (equal)
    door_ops.append_message(b.store, other, assistant("a note on another thread"))
    again = a.compactor.pressure(key, run)
    assert versions == [key] and whole == [] and again.measured is first.measured
    a.compactor.pressure(key, run)
    assert versions == [key]

    # another process writes between two checks: seen at once, exact
    url = a.store.url.render_as_string(hide_password=False)
    _other_process(url, f"door_ops.append_message(store, {key!r}, assistant('a note from another process'))")
    grown = assert_exact(a, key, run)
    assert grown.tokens_before > first.tokens_before and versions[-1] == key
    a.compactor.pressure(key, run)
    n = len(versions)
    a.compactor.pressure(key, run)
    assert len(versions) == n  # unchanged again: the pragma alone

    # another process changes no message, only the route (a completed request) and then the configuration
    _other_process(url, f"rid = door_ops.record_model_request(store, {key!r}, provider={PROVIDER!r}, model={MODEL!r}, estimated_tokens=1)\n"
                        "door_ops.complete_model_request(store, rid, outcome='ok', reported_prompt_tokens=3100, reported_completion_tokens=5)")
    a.compactor.pressure(key, run)
    assert a.snapshots.pressure_read(key)[1].reported_prompt_tokens == 3100
    assert_exact(a, key, run)
    _other_process(url, f"with store.locked({key!r}) as tx:\n    tx.configure(system_prompt='You answer in one short line, always.')")
    out = a.compactor.pressure(key, run)
    assert out.tokens_before == cold_tokens(a, key, run)
    assert a.snapshots.pressure_read(key)[0].system_prompt == "You answer in one short line, always."

    # this process's own append (handed over) and then unchanged checks
    door_ops.append_message(a.store, key, assistant("a's own note"))
    assert_exact(a, key, run)
    a.compactor.pressure(key, run)
    n = len(versions)
    a.compactor.pressure(key, run)
    assert len(versions) == n


def test_a_version_read_on_another_connection_never_takes_the_pragma_shortcut(make_service: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data_version is a property of one connection: a version read in a whole read (a pooled
    connection) or on a quick connection since replaced carries none that the pragma could match."""
    svc = make_service(policies=POLICIES)
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 2)
    run = RunState(run_id=None)
    assert_exact(svc, key, run)
    entry = svc.snapshots._entries[key]
    assert entry.version is not None and entry.version.seen is not None
    svc.snapshots.invalidate(key)
    svc.compactor.pressure(key, run)  # read whole: the version carries no data_version
    entry = svc.snapshots._entries[key]
    assert entry.version is not None and entry.version.seen is None
    versions = version_reads(monkeypatch)
    svc.compactor.pressure(key, run)
    assert versions == [key]
    svc.compactor.pressure(key, run)
    assert versions == [key]
    # the quick connection replaced: its token differs, the version is read again
    engine = svc.store.engine
    reads._forget_held(engine, reads._HELD[engine])
    svc.compactor.pressure(key, run)
    assert versions == [key, key]
    assert_exact(svc, key, run)


# -- the quick connection lent to this process's write door (SQLite) ------------------------------------


def test_own_writes_on_the_quick_connection_are_journaled_and_every_one_that_is_not_an_append_is_seen(
        make_service: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The door writes on the quick connection when it is free: its commits leave that connection's
    data_version as it was, so the check knows them from the connection's journal. An append alone
    needs no version statement; a transaction that wrote anything else (a completed request, a
    configuration, a compaction, a bulk append, one that failed) makes the check read the version."""
    a = make_service(policies=POLICIES)
    key = new_thread(a, new_key())
    other = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 12)
    run = RunState(run_id=None)
    assert_exact(a, key, run)
    engine = a.store.engine
    held = reads._HELD[engine]
    versions = version_reads(monkeypatch)
    whole = full_reads(monkeypatch)

    # this process's appends, on the quick connection: no version statement, exact
    serial = held.serial
    door_ops.append_message(a.store, key, assistant("a's own note"))
    assert held.serial == serial + 1 and held.journal[-1][2] is not None  # the door ran there, an append alone
    assert_exact(a, key, run)
    door_ops.append_messages(a.store, key, [assistant("two"), assistant("notes")])
    door_ops.append_message(a.store, other, assistant("a note on another thread"))
    assert_exact(a, key, run)
    assert versions == [] and whole == []

    # a completed request written by this same process: not an append, the version is read
    rid = door_ops.record_model_request(a.store, key, provider=PROVIDER, model=MODEL, estimated_tokens=1)
    door_ops.complete_model_request(a.store, rid, outcome="ok", reported_prompt_tokens=3300, reported_completion_tokens=5)
    assert held.journal[-1][2] is None
    assert_exact(a, key, run)
    assert a.snapshots.pressure_read(key)[1].reported_prompt_tokens == 3300 and versions
    # an append and a completion in one transaction (a step's reply): read, exact
    n = len(versions)
    with a.store.locked(key) as tx:
        tx.append_message(assistant("the reply"))
        rid = tx.record_model_request(provider=PROVIDER, model=MODEL, estimated_tokens=1)
        tx.complete_model_request(rid, outcome="ok", reported_prompt_tokens=3400, reported_completion_tokens=5)
    assert_exact(a, key, run)
    assert a.snapshots.pressure_read(key)[1].reported_prompt_tokens == 3400 and len(versions) > n

    # a configuration by this process (no message): seen
    with a.store.locked(key) as tx:
        tx.configure(system_prompt="You answer in one short line, always.")
    assert_exact(a, key, run)
    assert a.snapshots.pressure_read(key)[0].system_prompt == "You answer in one short line, always."

    # a failed transaction (an invalid message: nothing written) and then an append: exact
    with pytest.raises(InvalidMessage):
        door_ops.append_message(a.store, key, tool_result("no-such-call", "orphan", name="query_kb"))
    door_ops.append_message(a.store, key, assistant("after the refusal"))
    assert_exact(a, key, run)

    # a bulk append (its rows are not handed over): read, exact
    door_ops.bulk_append(a.store, key, [assistant(f"bulk {i}") for i in range(3)])
    assert_exact(a, key, run)

    # more of this process's transactions than the journal holds: read, exact
    for i in range(reads._Held.JOURNAL + 2):
        door_ops.append_message(a.store, other, assistant(f"elsewhere {i}"))
    door_ops.append_message(a.store, key, assistant("and one here"))
    n = len(versions)
    assert_exact(a, key, run)
    assert len(versions) > n

    # a compaction by hand by this process: the boundary moves, seen at once
    before = assert_exact(a, key, run).tokens_before
    assert a.compactor.manual(key).status == "completed"
    after = assert_exact(a, key, run)
    assert after.tokens_before < before


def test_own_appends_with_another_process_writing_in_between_are_exact(make_service: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer's commit between this process's own appends moves the quick connection's
    data_version: the check reads the version and the messages, never just the handed rows."""
    a = make_service(policies=POLICIES)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 3)
    run = RunState(run_id=None)
    assert_exact(a, key, run)
    url = a.store.url.render_as_string(hide_password=False)
    versions = version_reads(monkeypatch)
    door_ops.append_message(a.store, key, assistant("a's note"))
    _other_process(url, f"door_ops.append_message(store, {key!r}, assistant('a note from another process'))")
    door_ops.append_message(a.store, key, assistant("a's second note"))
    grown = assert_exact(a, key, run)
    assert versions and a.snapshots.pressure_read(key)[0].messages[-2].content == "a note from another process"
    _other_process(url, f"with store.locked({key!r}) as tx:\n    tx.configure(system_prompt='Answer briefly.')")
    door_ops.append_message(a.store, key, assistant("a's third note"))
    assert assert_exact(a, key, run).tokens_before != grown.tokens_before
    assert a.snapshots.pressure_read(key)[0].system_prompt == "Answer briefly."
