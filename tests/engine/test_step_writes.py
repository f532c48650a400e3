"""The write door's per-step writes, as cheap as they can be and still whole (issue 24).

An append writes the conversation row ONCE (its counters, and the kept tokens plus the new rows'
counts with the pressure recomputed, as :func:`engine.store.fleet.add_kept` rules), a model request
is recorded by one INSERT and completed by one UPDATE; the values are what they were when each was
its own statement. SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from engine.core.messages import Message, assistant, user
from engine.core.meter import default_meter
from engine.service import Service
from engine.store.fleet import UNKNOWN_PPM
from tests.store.support import conversation_counters

from .conftest import ServiceFactory, new_thread


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def svc(request: pytest.FixtureRequest) -> Iterator[Service]:
    factory: ServiceFactory = request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")
    yield factory()


def row(svc: Service, key: str) -> dict[str, Any]:
    with svc.store.engine.connect() as conn:
        r = conn.execute(sa.text("SELECT kept_tokens, kept_threshold, pressure_ppm, message_count, last_message_id, updated_at "
                                 "FROM conversations WHERE thread_key = :k"), {"k": key}).one()
    return dict(r._mapping)


def measured(svc: Service, key: str, kept: int | None, threshold: int | None) -> None:
    """The row as a status leaves it (kept tokens and threshold written back)."""
    ppm = kept * 1_000_000 // threshold if kept is not None and threshold else UNKNOWN_PPM
    with svc.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE conversations SET kept_tokens = :kept, kept_threshold = :t, pressure_ppm = :ppm WHERE thread_key = :k"),
                     {"kept": kept, "t": threshold, "ppm": ppm, "k": key})


class Statements:
    """The SQL statements run on ``engine`` inside the block."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.seen: list[str] = []

    def _count(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.seen.append(" ".join(statement.split()))

    def __enter__(self) -> "Statements":
        sa.event.listen(self.engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *exc: Any) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._count)

    def updates_of(self, table: str) -> int:
        return sum(s.upper().startswith(f"UPDATE {table.upper()} ") for s in self.seen)


def count(svc: Service, key: str, messages: list[Message]) -> int:
    return sum(default_meter(svc.store.thread(key).model).count_messages(messages))


def test_an_append_writes_the_conversation_row_once_with_its_counters_and_kept_tokens(svc: Service, new_key: Any) -> None:
    key = new_thread(svc, new_key("one-update"))
    with svc.store.locked(key) as tx:
        tx.append_messages([user("what is the refund policy?")])
    measured(svc, key, 1_000, 8_000)
    new = [assistant("Thirty days, with the receipt."), user("and for digital goods?")]
    before = row(svc, key)
    with Statements(svc.store.engine) as st, svc.store.locked(key) as tx:
        ids = tx.append_messages(new)
        assert tx.conv.message_count == before["message_count"] + 2 and tx.conv.last_message_id == ids[-1]
    assert st.updates_of("conversations") == 1, st.seen  # was two: the kept tokens, then the counters
    after = row(svc, key)
    kept = 1_000 + count(svc, key, new)
    assert (after["kept_tokens"], after["pressure_ppm"]) == (kept, kept * 1_000_000 // 8_000)
    assert (after["message_count"], after["last_message_id"]) == (before["message_count"] + 2, ids[-1])
    assert after["updated_at"] >= before["updated_at"]
    count_, last, rows = conversation_counters(svc.store.engine, key)
    assert (count_, last) == (rows, ids[-1])


def test_an_append_to_a_thread_never_measured_keeps_its_figure_unknown(svc: Service, new_key: Any) -> None:
    key = new_thread(svc, new_key("unmeasured"))
    with svc.store.locked(key) as tx:
        tx.append_messages([user("hello")])
    after = row(svc, key)
    assert (after["kept_tokens"], after["pressure_ppm"], after["message_count"]) == (None, UNKNOWN_PPM, 1)


def test_a_row_without_a_count_makes_the_figure_unknown(svc: Service, new_key: Any) -> None:
    key = new_thread(svc, new_key("uncounted"))
    with svc.store.locked(key) as tx:
        tx.append_messages([user("hello")])
    measured(svc, key, 500, 4_000)
    with svc.store.locked(key) as tx:  # stored content differs from the message's (NUL escaped): left uncounted
        tx.append_messages([assistant("a\x00b")])
    after = row(svc, key)
    assert (after["kept_tokens"], after["pressure_ppm"], after["message_count"]) == (None, UNKNOWN_PPM, 2)


def test_a_pending_change_of_the_row_and_an_append_in_one_transaction_both_land(svc: Service, new_key: Any) -> None:
    key = new_thread(svc, new_key("pending"))
    with svc.store.locked(key) as tx:
        tx.configure(system_prompt="You answer in French.")
        tx.append_messages([user("bonjour")])
        tx.set_route(provider="openai", model="gpt-4o")
        tx.append_messages([assistant("Bonjour !")])
    info = svc.store.thread(key)
    with svc.store.engine.connect() as conn:
        prompt = conn.execute(sa.text("SELECT system_prompt FROM conversations WHERE thread_key = :k"), {"k": key}).scalar_one()
    assert (prompt, info.provider, info.model) == ("You answer in French.", "openai", "gpt-4o")
    count_, last, rows = conversation_counters(svc.store.engine, key)
    assert (count_, rows) == (2, 2)


def test_a_request_is_recorded_by_one_insert_and_completed_by_one_update(svc: Service, new_key: Any) -> None:
    key = new_thread(svc, new_key("request"))
    with Statements(svc.store.engine) as st, svc.store.locked(key) as tx:
        rid = tx.record_model_request(provider="openai", model="gpt-4o", step=1, estimated_tokens=120, threshold=8_000)
    assert sum(s.upper().startswith("INSERT INTO MODEL_REQUESTS") for s in st.seen) == 1
    with Statements(svc.store.engine) as st, svc.store.locked(key) as tx:
        tx.complete_model_request(rid, outcome="ok", reported_prompt_tokens=130, reported_completion_tokens=9)
    assert st.updates_of("model_requests") == 1
    [req] = [r for r in svc.store.model_requests(key) if r.id == rid]
    assert (req.outcome, req.step, req.estimated_tokens, req.threshold, req.reported_prompt_tokens, req.reported_completion_tokens) == (
        "ok", 1, 120, 8_000, 130, 9)
    assert (req.provider, req.model) == ("openai", "gpt-4o") and req.created_at is not None
    info = svc.store.thread(key)
    assert (info.provider, info.model) == ("openai", "gpt-4o")  # the request's route became the thread's


# -- durability (SQLite): synchronous=NORMAL in WAL mode, docs/architecture.md "Durability" ---------
def test_a_wal_store_commits_with_synchronous_normal_and_a_plain_file_keeps_full(tmp_path: Any) -> None:
    from engine.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'wal.db'}", create=True)
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    finally:
        store.close()
    plain = sa.create_engine(f"sqlite:///{tmp_path / 'plain.db'}")
    from engine.store.db import _install_sqlite_hooks

    _install_sqlite_hooks(plain)
    with plain.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL: not in WAL, not touched
    plain.dispose()


def test_every_commit_survives_the_process_dying_right_after_it(tmp_path: Any) -> None:
    """The agent process killed (``os._exit``: no close, no checkpoint, nothing flushed by Python)
    right after a step's commits: a fresh process finds the messages and the completed request."""
    import subprocess
    import sys
    import textwrap

    url = f"sqlite:///{tmp_path / 'crash.db'}"
    code = textwrap.dedent(f"""
        import os
        from engine.core.messages import assistant, user
        from engine.store import Store
        store = Store.open({url!r}, create=True)
        with store.locked_or_created("t") as (tx, _):
            tx.append_messages([user("hello")])
        with store.locked("t") as tx:
            rid = tx.record_model_request(provider="openai", model="gpt-4o", step=1)
        with store.locked("t") as tx:
            tx.complete_model_request(rid, outcome="ok", reported_prompt_tokens=12, reported_completion_tokens=3)
            tx.append_messages([assistant("hi there")])
        os._exit(9)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    assert (tmp_path / "crash.db-wal").exists()  # the commits are in the WAL, never checkpointed
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT role, content FROM messages ORDER BY id")).all() == [("user", "hello"), ("assistant", "hi there")]
        assert conn.execute(sa.text("SELECT outcome, reported_prompt_tokens FROM model_requests")).all() == [("ok", 12)]
        assert conn.execute(sa.text("SELECT message_count FROM conversations")).scalar_one() == 2
    engine.dispose()


def test_stored_source_keys_answers_one_key_and_several_alike(svc: Service, new_key: Any) -> None:
    """The intake's question (one key: an equality probe; several: one IN list) gives the same
    answers, only this thread's keys, never another's."""
    key, other = new_thread(svc, new_key("keys")), new_thread(svc, new_key("keys-other"))
    with svc.store.locked(key) as tx:
        tx.append_messages([Message("user", "a", source_key="k1"), Message("assistant", "b", source_key="k2")])
    with svc.store.locked(other) as tx:
        tx.append_messages([Message("user", "c", source_key="k3")])
    with svc.store.locked(key) as tx:
        assert tx.stored_source_keys(["k1"]) == {"k1"}
        assert tx.stored_source_keys(["k3"]) == set()  # another thread's
        assert tx.stored_source_keys(["k9"]) == set()
        assert tx.stored_source_keys(["k1", "k1"]) == {"k1"}
        assert tx.stored_source_keys(["k1", "k2", "k3", "k9"]) == {"k1", "k2"}
    with svc.store.locked(svc.store.thread(key).id) as tx:  # the door by conversation id takes the same lock
        assert tx.stored_source_keys(["k2"]) == {"k2"}


def test_append_listeners_see_committed_appends_only_and_never_fail_the_writer(svc: Service, new_key: Any) -> None:
    key = new_thread(svc, new_key("listeners"))
    seen: list[tuple[str, list[int]]] = []

    def broken(thread: str, rows: Any) -> None:
        raise RuntimeError("listener bug")

    svc.store.on_appended(broken)
    svc.store.on_appended(lambda thread, rows: seen.append((thread, [i for i, _ in rows])))
    with svc.store.locked(key) as tx:
        ids = tx.append_messages([user("hello"), assistant("hi")])
    with pytest.raises(RuntimeError, match="abandon"), svc.store.locked(key) as tx:
        tx.append_messages([user("rolled back")])
        raise RuntimeError("abandon the transaction")
    with svc.store.locked(key) as tx:
        tx.record_model_request(provider="openai", model="gpt-4o", step=1)  # no append: no call
    assert seen == [(key, ids)]
    assert conversation_counters(svc.store.engine, key)[0] == 2
