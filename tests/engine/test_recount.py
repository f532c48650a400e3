"""``compaction recount``: counts kept for the messages of a database written before migration
0003 (or under another key), through the door, a batch at a time; a cold status then reads no
text. Both backends."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from engine.apps.cli import EXIT_FAILED, EXIT_OK, main
from engine.core.messages import user
from engine.core.meter import default_meter
from engine.service import open_service
from engine.store.reads import CountedRow, ThreadReader

from .conftest import add, finished_turns, new_thread, running_turn
from .test_incremental import assert_status, full
from .test_kept_counts import cold, forget_counts, kept


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def factory(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def test_recount_keeps_the_door_counts_and_a_cold_status_then_reads_no_text(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 8)
    running_turn(svc, key, rounds=3)
    written = kept(svc, key)  # what the door kept when the rows were written
    expected = full(svc, key)[2]
    forget_counts(svc, key)  # a thread from before 0003
    progress: list[int] = []
    assert svc.compaction.recount(key, batch=5, progress=progress.append) == len(written)
    assert kept(svc, key) == written  # the same counts under the same key as the door's
    assert progress == sorted(progress) and progress[-1] == len(written) and len(progress) >= len(written) // 5
    kinds: list[type] = []
    real_read = ThreadReader.counted_messages_after
    monkeypatch.setattr(ThreadReader, "counted_messages_after", lambda self, *a, **kw: [(kinds.append(type(m)), (m, n))[1] for m, n in real_read(self, *a, **kw)])
    assert cold(svc, key, page=7) == expected
    assert kinds and set(kinds) == {CountedRow}  # no text read any more
    assert svc.compaction.recount(key) == 0  # nothing left to count: idempotent
    assert_status(svc, key)


def test_recount_takes_rows_counted_under_another_key_and_leaves_the_rest(factory: Any, new_key: Any) -> None:
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 4)
    forget_counts(svc, key, key_value="p50k_base/1")  # counted for another encoding
    add(svc, key, user("a newer question, counted by the door"))
    before = kept(svc, key)
    n = svc.compaction.recount(key, batch=3)
    after = kept(svc, key)
    assert n == len(before) - 1 and after[-1] == before[-1]  # the door's count of the newest row untouched
    key_now = default_meter(svc.store.thread(key).model).count_key
    assert {k for _, _, k in after} == {key_now}
    assert cold(svc, key) == full(svc, key)[2]


def test_recount_beside_a_writer_loses_nothing(factory: Any, new_key: Any) -> None:
    """Intake keeps writing while the recount runs (its lock is taken a batch at a time): one pass
    counts every row written before it, the writer's rows keep the door's counts."""
    svc = factory()
    key = new_thread(svc, new_key())
    finished_turns(svc, key, 30)
    forget_counts(svc, key)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(10):
                finished_turns(svc, key, 1)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    svc.compaction.recount(key, batch=4)
    t.join(timeout=60)
    assert not t.is_alive() and not errors
    assert all(tokens is not None for _, tokens, _ in kept(svc, key))
    assert cold(svc, key) == full(svc, key)[2]


def test_cli_recount_every_thread_and_a_corrupt_one_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'recount.db'}"
    svc = open_service(url, workdir=tmp_path / "wd", create=True)
    keys = [new_thread(svc, f"t{i}") for i in range(3)]
    for key in keys:
        finished_turns(svc, key, 3)
        forget_counts(svc, key)
    counts = {key: len(kept(svc, key)) for key in keys}
    bad = kept(svc, keys[2])[1][0]
    with svc.store.engine.begin() as conn:  # another program broke a row of the third thread
        conn.execute(text("UPDATE messages SET tool_calls = '[{\"id\": ' WHERE id = :i"), {"i": bad})
    svc.close()
    assert main(["recount", "--db", url, "--json"]) == EXIT_FAILED
    out = json.loads(capsys.readouterr().out)
    assert out["recounted"] == {k: counts[k] for k in keys[:2]} and out["total"] == counts[keys[0]] + counts[keys[1]]
    assert list(out["errors"]) == [keys[2]] and "corrupt row in messages" in out["errors"][keys[2]]
    assert main(["recount", "--db", url, "--thread", keys[0]]) == EXIT_OK
    assert capsys.readouterr().out.splitlines() == [f"{keys[0]}: 0 messages recounted", "total: 0 in 1 thread"]
    assert main(["recount", "--db", url, "--thread", "no-such-thread"]) == 2
    assert "no thread" in capsys.readouterr().err
