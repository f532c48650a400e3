"""The conversation lock across real connections: who waits, who does not, nowait.

PostgreSQL: ``SELECT … FOR UPDATE`` on the conversation row (per conversation). SQLite:
``BEGIN IMMEDIATE`` (one writer for the whole file; readers never wait in WAL mode).
Each scenario is driven by events with bounded waits, never by sleeps alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
import pytest

from engine.core.errors import ThreadBusy
from engine.core.messages import user
from engine.store import Locked, Store, StoreError, ThreadLocked
from tests import door_ops

LIMIT = 10.0  # seconds: the bound on every wait that is expected to end
STILL_WAITING = 0.5  # seconds a blocked writer must still be blocked


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as ex:
        yield ex


@contextmanager
def lock_held(store: Store, key: str, pool: ThreadPoolExecutor, inside: Callable[[Locked], object] | None = None) -> Iterator[None]:
    """Thread A takes ``store.locked(key)``, runs ``inside``, and holds the lock until the block ends."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with store.locked(key) as tx:
            if inside is not None:
                inside(tx)
            held.set()
            if not release.wait(LIMIT):
                raise TimeoutError("the test never released the lock")

    fut = pool.submit(holder)
    try:
        if not held.wait(LIMIT):
            fut.result(timeout=LIMIT)  # surfaces the holder's error
            pytest.fail("lock holder did not start")
        yield
    finally:
        release.set()
        fut.result(timeout=LIMIT)


def _new_pair(store: Store, new_key: Callable[[str], str]) -> tuple[str, str]:
    a, b = new_key("a"), new_key("b")
    store.create_conversation(a)
    store.create_conversation(b)
    return a, b


INTAKE: dict[str, Callable[[Store, str], object]] = {
    "append_message": lambda s, k: door_ops.append_message(s, k, user("from intake")),
    "queue_request": lambda s, k: door_ops.queue_request(s, k, "queued by intake"),
    "start_run": lambda s, k: door_ops.start_run(s, k),
}


@pytest.mark.parametrize("op", list(INTAKE))
def test_intake_on_a_locked_conversation_waits_until_release(
    store: Store, new_key: Callable[[str], str], pool: ThreadPoolExecutor, op: str
) -> None:
    a, _ = _new_pair(store, new_key)
    with lock_held(store, a, pool, inside=lambda tx: tx.append_message(user("written under the lock"))):
        waiting: Future = pool.submit(INTAKE[op], store, a)
        with pytest.raises(TimeoutError):
            waiting.result(timeout=STILL_WAITING)
        assert not waiting.done()
    waiting.result(timeout=LIMIT)  # proceeds once the holder committed
    if op == "append_message":
        assert [m.content for m in store.messages_after(a, None)] == ["written under the lock", "from intake"]
    else:
        assert store.busy_reason(a) == ("queued" if op == "queue_request" else "running")


@pytest.mark.postgres
def test_postgres_intake_on_another_conversation_does_not_wait(pg_url: str, new_key: Callable[[str], str], pool: ThreadPoolExecutor) -> None:
    store = Store.open(pg_url)
    try:
        a, b = _new_pair(store, new_key)
        with lock_held(store, a, pool):
            started = time.monotonic()
            other = pool.submit(door_ops.append_message, store, b, user("not blocked"))
            other.result(timeout=LIMIT)  # would hang until release if it waited for a's lock
            assert time.monotonic() - started < STILL_WAITING * 4
            assert [m.content for m in store.messages_after(b, None)] == ["not blocked"]
            # and a is still locked at this point
            with pytest.raises(ThreadLocked):
                with store.locked(a, nowait=True):
                    pass
    finally:
        store.close()


def test_sqlite_a_second_writer_waits_for_the_first_even_on_another_conversation(
    sqlite_url: str, new_key: Callable[[str], str], pool: ThreadPoolExecutor
) -> None:
    store = Store.open(sqlite_url)
    try:
        a, b = _new_pair(store, new_key)
        with lock_held(store, a, pool):
            other = pool.submit(door_ops.append_message, store, b, user("waits for the file's write lock"))
            with pytest.raises(TimeoutError):
                other.result(timeout=STILL_WAITING)
        other.result(timeout=LIMIT)
        assert [m.content for m in store.messages_after(b, None)] == ["waits for the file's write lock"]
    finally:
        store.close()


def test_nowait_raises_a_clear_store_error_promptly(store: Store, new_key: Callable[[str], str], pool: ThreadPoolExecutor) -> None:
    a, _ = _new_pair(store, new_key)
    with lock_held(store, a, pool):
        started = time.monotonic()
        with pytest.raises(ThreadLocked) as err:
            with store.locked(a, nowait=True) as tx:
                tx.append_message(user("must not be written"))
        elapsed = time.monotonic() - started
    assert elapsed < 2.0
    exc = err.value
    assert isinstance(exc, StoreError) and not isinstance(exc, psycopg.Error)
    assert exc.code == "thread_locked" and a in exc.message and "\n" not in exc.message
    assert "connect" not in exc.message  # not mistaken for an unreachable server
    assert exc.__cause__ is None and exc.__suppress_context__
    # once released, nowait succeeds; the refused write never happened
    with store.locked(a, nowait=True) as tx:
        tx.append_message(user("after release"))
    assert [m.content for m in store.messages_after(a, None)] == ["after release"]


def test_readers_do_not_wait_and_do_not_see_uncommitted_writes(store: Store, new_key: Callable[[str], str], pool: ThreadPoolExecutor) -> None:
    a, _ = _new_pair(store, new_key)
    door_ops.append_message(store, a, user("committed"))
    with lock_held(store, a, pool, inside=lambda tx: tx.append_message(user("uncommitted"))):
        read = pool.submit(lambda: [s.message.content for s in store.messages_page(a)])
        assert read.result(timeout=LIMIT) == ["committed"]
        assert store.thread(a).message_count == 1
    assert [s.message.content for s in store.messages_page(a)] == ["committed", "uncommitted"]


def test_the_idle_check_and_the_write_are_serialized(store: Store, new_key: Callable[[str], str], pool: ThreadPoolExecutor) -> None:
    """Manual compaction's guarantee: between the holder's idle check and its commit, no intake can
    start a run; the waiting intake then sees the holder's committed state."""
    a, _ = _new_pair(store, new_key)

    def check_idle_then_start(tx: Locked) -> None:
        tx.require_idle()
        tx.start_run()

    with lock_held(store, a, pool, inside=check_idle_then_start):
        second = pool.submit(door_ops.start_run, store, a)
        with pytest.raises(TimeoutError):
            second.result(timeout=STILL_WAITING)
    with pytest.raises(ThreadBusy) as err:
        second.result(timeout=LIMIT)
    assert err.value.reason == "running"
    assert len(store.runs(a)) == 1
