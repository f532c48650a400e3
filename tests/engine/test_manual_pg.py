"""Manual compaction under the conversation row lock on a real PostgreSQL server (§4.1, §4.4).

The lock is held from the idle check to the commit, the summarizer call included: concurrent
intake waits for the commit, then proceeds. Waits are bounded and ordered with Events. The lock
scenario also runs on SQLite (its lock is an immediate write transaction).
"""

from __future__ import annotations

import threading

import pytest

from engine.core.errors import ThreadBusy
from engine.core.messages import user
from engine.core.surface import build_surface
from engine.store import ThreadLocked
from tests.store.support import fingerprint

from .conftest import Blocking, Counting, thread_state
from .test_manual import long_thread, make_busy

WAIT = 20.0  # upper bound for anything that must happen; the test never sleeps this long when it works


def _run(fn, out: dict, name: str) -> threading.Thread:
    def target() -> None:
        try:
            out[name] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test through ``out``
            out[name] = exc

    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("factory", [pytest.param("make_pg_service", marks=pytest.mark.postgres), "make_service"])
def test_lock_is_held_through_the_summarizer_and_intake_waits(request, new_key, factory):
    make = request.getfixturevalue(factory)
    blocking = Blocking(timeout=WAIT)
    compactor_svc = make(blocking)
    intake_svc = make(Counting())  # another client of the same database (own connections)
    key = new_key("locked")
    long_thread(intake_svc, key)
    count = intake_svc.reads.message_count(key)
    out: dict = {}

    manual = _run(lambda: compactor_svc.compaction.compact(key), out, "manual")
    assert blocking.entered.wait(WAIT), "the summarizer was never called"

    # the lock is held while the summarizer runs: a no-wait attempt fails at once
    with pytest.raises(ThreadLocked):
        with intake_svc.store.locked(key, nowait=True):
            pass
    appended = threading.Event()
    intake = _run(lambda: (intake_svc.runs.append_message(key, user("New question while compacting: doc-43?")), appended.set())[0], out, "intake")
    assert not appended.wait(1.0), "intake did not wait for the manual compaction's commit"
    assert intake_svc.reads.compaction_state(key).generation == 0  # readers see the committed state only
    assert "intake" not in out

    blocking.release.set()
    manual.join(WAIT)
    intake.join(WAIT)
    assert not manual.is_alive() and not intake.is_alive()
    result, new_id = out["manual"], out["intake"]
    assert not isinstance(result, BaseException), result
    assert not isinstance(new_id, BaseException), new_id

    assert result.status == "completed" and blocking.calls == result.summarizer_calls >= 1
    assert new_id > result.boundary  # appended after the commit, so never part of the summary
    assert intake_svc.reads.message_count(key) == count + 1
    surface = build_surface(intake_svc.store.snapshot(key))
    assert surface.messages[-1].id == new_id and surface.generation == result.generation


@pytest.mark.postgres
@pytest.mark.parametrize("reason", ["running", "waiting_for_user", "queued"])
def test_busy_thread_on_postgres_writes_nothing(make_pg_service, pg_url, new_key, reason):
    counter = Counting()
    svc = make_pg_service(counter)
    key = new_key("pg-busy")
    long_thread(svc, key)
    make_busy(svc, key, reason)
    before, tables_before = thread_state(svc, key), fingerprint(pg_url)

    with pytest.raises(ThreadBusy) as caught:
        svc.compaction.compact(key)

    assert (caught.value.code, caught.value.reason) == ("thread_busy", reason)
    assert counter.calls == 0
    assert thread_state(svc, key) == before
    assert fingerprint(pg_url) == tables_before  # every table, byte for byte


@pytest.mark.postgres
def test_manual_compaction_on_postgres_completes(make_pg_service, new_key):
    counter = Counting()
    svc = make_pg_service(counter)
    key = new_key("pg-manual")
    long_thread(svc, key)
    r = svc.compaction.compact(key)
    state = svc.reads.compaction_state(key)
    assert r.status == "completed" and (r.boundary, r.generation) == (state.boundary, state.generation)
    assert r.summarizer_calls == counter.calls and r.after_tokens == svc.compaction.status(key).tokens < r.before_tokens
