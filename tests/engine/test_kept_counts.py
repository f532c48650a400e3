"""Token counts kept with each message (``messages.tokens`` / ``tokens_key``, migration 0003).

The write door stores every message's count as the meter counts it; a cold streamed measurement
(``SnapshotCache.thread_measure``, ``Service.compaction.status``) then sums those instead of reading and
encoding every text. A count is a cache: rows without one, with one under another key (another
encoding, an older framing), pruned rows (shown as their preview) and rows whose stored content
differs from what was written are counted from their text, and every measurement equals a full
re-read. SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import engine.store.door as door
from engine.compaction.compactor import RunState
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.meter import FRAMING_VERSION, default_meter
from engine.service import Service
from engine.snapshots import SnapshotCache
from engine.store.reads import CountedRow, ThreadReader
from tests import door_ops

from .conftest import MODEL, add, filler, finished_turns, new_thread, route, running_turn
from .test_incremental import assert_status, full


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def factory(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def kept(svc: Service, key: str) -> list[tuple[int, int | None, str | None]]:
    """(message id, tokens, tokens_key) of every row of ``key``, read straight from the table."""
    cid = svc.store.thread(key).id
    with svc.store.engine.connect() as conn:
        rows = conn.execute(text("SELECT id, tokens, tokens_key FROM messages WHERE conversation_id = :c ORDER BY id"), {"c": cid})
        return [(r[0], r[1], r[2]) for r in rows]


def forget_counts(svc: Service, key: str, *, key_value: str | None = None) -> None:
    """What a database written before 0003 (None) or under another key looks like."""
    cid = svc.store.thread(key).id
    with svc.store.engine.begin() as conn:
        if key_value is None:
            conn.execute(text("UPDATE messages SET tokens = NULL, tokens_key = NULL WHERE conversation_id = :c"), {"c": cid})
        else:
            conn.execute(text("UPDATE messages SET tokens_key = :k WHERE conversation_id = :c"), {"k": key_value, "c": cid})


def cold(svc: Service, key: str, **kw: Any) -> Any:
    """A measurement by a fresh cache (what a new process's first status does)."""
    return SnapshotCache(svc.store, **kw).thread_measure(key).measurement


def test_every_write_path_keeps_the_meters_count(factory: Any, new_key: Any) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 3)  # append_message
    call = ToolCall("c1", "query_kb", '{"q": "doc-7"}')
    door_ops.append_messages(svc.store, key, [assistant("looking", call), tool_result(call.id, filler(200, "result"), name="query_kb")])
    door_ops.bulk_append(svc.store, key, [user("bulk question"), assistant("bulk answer " + filler(50))])
    dangling = ToolCall("c2", "web_search", '{"q": "x"}')
    add(svc, key, user("one more"), assistant("", dangling))
    assert svc.runs.close_dangling_calls(key) == 1  # the closing marker is written by the door too
    meter = default_meter(svc.store.thread(key).model)
    stored = {m.id: m for m in svc.store.messages_after(key, None)}
    rows = kept(svc, key)
    assert len(rows) == len(stored) == 13
    for mid, tokens, tokens_key in rows:
        assert tokens_key == meter.count_key == f"{meter.encoding_name}/{FRAMING_VERSION}"
        assert tokens == meter.count_messages([stored[mid]], cache=False)[0]


def test_a_cold_status_uses_the_kept_counts_and_reads_no_text(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 8)
    running_turn(svc, key, rounds=3)
    framed: list[int] = []
    real = type(default_meter(None)).split_messages
    monkeypatch.setattr(type(default_meter(None)), "split_messages", lambda self, ms: (framed.append(len(ms)), real(self, ms))[1])
    kinds: list[type] = []
    real_read = ThreadReader.counted_messages_after
    monkeypatch.setattr(ThreadReader, "counted_messages_after",
                        lambda self, *a, **kw: [(kinds.append(type(m)), (m, n))[1] for m, n in real_read(self, *a, **kw)])
    assert cold(svc, key, page=7) == full(svc, key)[2]
    assert framed == [] or set(framed) == {0}  # nothing was framed or encoded
    assert len(kinds) == 23 and set(kinds) == {CountedRow}  # and no text was read: rows for counting only


def test_rows_without_counts_are_counted_from_their_text(factory: Any, new_key: Any) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 6)
    forget_counts(svc, key)  # a thread written before 0003
    assert {t for _, t, _ in kept(svc, key)} == {None}
    assert cold(svc, key, page=4) == full(svc, key)[2]
    add(svc, key, user("new question"))  # counted again from here on: a mix of both
    assert cold(svc, key, page=4) == full(svc, key)[2]
    assert_status(svc, key)


def test_counts_under_another_key_are_not_trusted(factory: Any, new_key: Any) -> None:
    """An older framing version, or another encoding (the route changed to a model of another
    family after the messages were written), gives other counts: those rows are counted again."""
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 5)
    forget_counts(svc, key, key_value=f"cl100k_base/{FRAMING_VERSION - 1}")
    assert cold(svc, key) == full(svc, key)[2]
    finished_turns(svc, key, 2)
    door_ops.set_route(svc.store, key, provider="openai", model="gpt-4o")  # o200k: every kept count is cl100k's
    assert cold(svc, key) == full(svc, key, model="gpt-4o")[2]
    assert_status(svc, key)


def test_pruned_results_count_as_their_preview(factory: Any, new_key: Any) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    route(svc, key)
    finished_turns(svc, key, 14)
    running_turn(svc, key, rounds=5, result_tokens=2600)  # over the result limit: pruned first
    outcome = svc.steps.compact_for_pressure(key, RunState(run_id=svc.runs.start_run(key)))
    assert outcome.progressed
    assert svc.store.snapshot(key).offloads  # something was pruned
    assert cold(svc, key, page=3) == full(svc, key)[2]
    assert_status(svc, key)


def test_content_the_data_rules_changed_is_not_counted_at_write(factory: Any, new_key: Any) -> None:
    """A NUL is escaped on the way in: the stored text is not what was counted, so no count is kept."""
    svc = factory()
    key = new_thread(svc, new_key())
    add(svc, key, user("before\x00after"), assistant("plain"))
    rows = kept(svc, key)
    assert rows[0][1] is None and rows[1][1] is not None
    assert cold(svc, key) == full(svc, key)[2]


def test_a_meter_that_cannot_count_never_refuses_a_write(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = factory()
    key = new_thread(svc, new_key())

    def broken(model: Any) -> Any:
        raise RuntimeError("tokenizer data missing")

    monkeypatch.setattr(door, "default_meter", broken)
    add(svc, key, user("still written"), assistant("and this"))
    door_ops.bulk_append(svc.store, key, [user("bulk too")])
    assert [t for _, t, _ in kept(svc, key)] == [None, None, None]
    monkeypatch.undo()
    assert cold(svc, key) == full(svc, key)[2]


def test_a_corrupt_counted_row_is_named_as_before(make_service: Any, new_key: Any) -> None:
    """A counted row is read without its text but its calls and metadata are still checked: one
    that cannot be read raises ``CorruptRow`` naming it, as the whole read does (SQLite: PostgreSQL's
    jsonb refuses such a value on the way in)."""
    from engine.store.rules import CorruptRow

    svc = make_service()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 2)
    ids = running_turn(svc, key, rounds=2)
    assert all(t is not None for _, t, _ in kept(svc, key))
    with svc.store.engine.begin() as conn:
        conn.execute(text("UPDATE messages SET tool_calls = '[{\"id\": ' WHERE id = :i"), {"i": ids[1]})
    with pytest.raises(CorruptRow) as err:
        cold(svc, key, page=3)
    assert str(ids[1]) in str(err.value) and "tool_calls" in str(err.value)
    with pytest.raises(CorruptRow):
        svc.store.snapshot(key)  # the whole read says the same


@pytest.mark.parametrize("fixture", ["codex/2026", "claude-code/project", "openai-responses"])
def test_an_imported_session_keeps_counts_for_its_own_model(factory: Any, fixture: str) -> None:
    """An import sets the thread's route before it writes the messages, so their counts are kept
    under the encoding its status measures with (o200k for a Codex session, not cl100k)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "fixtures" / "sessions" / fixture
    path = next(p for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in (".jsonl", ".json") and not p.name.startswith("agent-"))
    svc = factory()
    for report in svc.imports.import_file(path):
        key = report.thread
        meter = default_meter(svc.store.thread(key).model)
        rows = kept(svc, key)
        assert rows and {k for _, _, k in rows} == {meter.count_key}
        assert cold(svc, key) == full(svc, key)[2]


# -- the stream worker process (a cold status of a huge thread) -------------------------------------


def test_a_cold_status_of_a_long_thread_runs_in_a_stream_worker(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads no message: another process streams the thread and sends back the
    tally, with progress; the measurement equals a full re-read, and the next one extends it here."""
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 10)
    running_turn(svc, key, rounds=3)
    reads: list[int] = []
    real_read = ThreadReader.counted_messages_after
    monkeypatch.setattr(ThreadReader, "counted_messages_after", lambda self, *a, **kw: (lambda out: reads.append(len(out)) or out)(real_read(self, *a, **kw)))
    cache = SnapshotCache(svc.store, page=4, worker_min_messages=10)
    seen: list[int] = []
    m = cache.thread_measure(key, progress=seen.append)
    assert m.measurement == full(svc, key)[2]
    assert reads == []  # nothing was read in this process
    assert seen == [4, 8, 12, 16, 20, 24, 27]  # the worker's progress, page by page
    assert cache._entries[key].messages is None
    add(svc, key, user("and one more?"))
    assert cache.thread_measure(key).measurement == full(svc, key)[2] and reads == [1]  # extended here


def test_a_stream_worker_that_fails_leaves_the_thread_to_this_process(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.snapshots as snapshots

    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 8)

    def broken(self: Any, job: Any, progress: Any) -> Any:
        raise RuntimeError("the stream worker exited (-9)")

    monkeypatch.setattr(snapshots._StreamWorker, "run", broken)
    assert SnapshotCache(svc.store, page=4, worker_min_messages=0).thread_measure(key).measurement == full(svc, key)[2]


def test_a_stream_worker_refuses_a_thread_whose_state_moved(factory: Any, new_key: Any) -> None:
    """The worker reads in its own transaction: when the thread's state is no longer the one the
    caller read (another process compacted it in between), it says so instead of counting."""
    import dataclasses
    import io
    import pickle

    import engine.snapshots as snapshots

    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 3)
    with svc.store.reading(key) as reader:
        cid, state = reader.conversation_id, reader.state()
    job = {"url": svc.store.url.render_as_string(hide_password=False), "key": key, "cid": cid, "state": state, "model": None, "after": None,
           "upto": None, "page": 5, "worker_min_messages": 10**9}

    def run(job: dict[str, Any]) -> list[Any]:
        out = io.BytesIO()
        snapshots._stream_worker_main(io.BytesIO(pickle.dumps(job)), out)
        out.seek(0)
        msgs = []
        while True:
            try:
                msgs.append(pickle.load(out))
            except EOFError:
                return msgs
            if msgs[-1][0] == "done":  # the tally's arrays follow, raw
                n = msgs[-1][4]
                msgs.append((snapshots._read_array(out, "q", n), snapshots._read_array(out, "i", n)))
                assert out.read() == b""
                return msgs

    done = run(job)
    ids, counts = done[-1]
    assert done[-2][0] == "done" and [m[1] for m in done[:-2]] == [5, 6]
    assert list(ids) == [m.id for m in svc.store.messages_after(key, None)] and sum(counts) == full(svc, key)[2].breakdown["user"] + full(svc, key)[2].breakdown["assistant"]
    assert run({**job, "state": dataclasses.replace(state, generation=state.generation + 1)}) == [("stale",)]
    assert run({**job, "key": "no-such-thread"})[0][0] == "error"
