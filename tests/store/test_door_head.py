"""The write door opened on the locked row's head columns (``engine.store.door.ConvHead``): the step's
hot path (intake, request record, completion) loads no ORM ``Conversation``; one is loaded only when
something asks for ``tx.conv``, and it then shows this transaction's own appends."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import event

from engine.core.errors import ThreadNotFound
from engine.core.messages import Message
from engine.store import Store
from tests import door_ops


def test_hot_path_loads_no_orm_row_and_conv_sees_the_appends(store: Store, conv: str) -> None:
    door_ops.append_messages(store, conv, [Message("user", "hi")])
    with store.locked(conv) as tx:  # a new route: written through the loaded row
        tx.record_model_request(provider="openai", model="m1", step=0)
        assert tx._conv is not None
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda c, cur, st, *a: seen.append(st))
    with store.locked(conv) as tx:
        assert (tx.conv_head.provider, tx.conv_head.model) == ("openai", "m1")
        ids = tx.append_messages([Message("assistant", "hello")])
        rid = tx.record_model_request(provider="openai", model="m1", step=1)
        tx.complete_model_request(rid, outcome="ok", reported_prompt_tokens=3, reported_completion_tokens=1)
        assert tx._conv is None  # the hot path loaded no ORM row
    assert not any("conversations.system_prompt" in s for s in seen)  # the door selected only its head columns
    with store.locked(conv) as tx:
        assert tx.conv_head.message_count == 2 and tx.conv_head.last_message_id == ids[0]
        tx.append_messages([Message("user", "again")])
        assert tx.conv.message_count == 3  # loaded after the append: the row as this transaction left it
        tx.append_messages([Message("assistant", "ok")])
        assert tx.conv.message_count == 4 and tx.conv_head is tx.conv
        last = tx.conv.last_message_id
    with store.locked(conv) as tx:
        assert (tx.conv_head.message_count, tx.conv_head.last_message_id) == (4, last)
        assert (tx.conv.provider, tx.conv.model) == ("openai", "m1")
    assert [m.content for m in store.messages_after(conv, None)] == ["hi", "hello", "again", "ok"]


def test_hot_path_makes_no_orm_session_and_orm_writes_commit_or_roll_back_with_it(store: Store, conv: str) -> None:
    with store.locked(conv) as tx:
        tx.append_messages([Message("user", "hi")])
        rid = tx.record_model_request(provider="p", model="m", step=0)  # a new route: the ORM row, a session
        assert tx._session is not None
    with store.locked(conv) as tx:
        tx.append_messages([Message("assistant", "a")])
        tx.complete_model_request(rid, outcome="ok")
        assert tx._session is None  # the steady step: Core statements on the door's connection only
    with store.locked(conv) as tx:  # ORM writes on a Core-opened door are flushed before the commit
        tx.configure(system_prompt="be brief")
        tx.append_messages([Message("user", "b")])  # after a pending change of the row
    with store.locked(conv) as tx:
        assert tx.conv.system_prompt == "be brief" and tx.conv.message_count == 3
    try:
        with store.locked(conv) as tx:  # a raising block undoes Core and ORM writes alike
            tx.configure(system_prompt="never")
            tx.append_messages([Message("assistant", "c")])
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    with store.locked(conv) as tx:
        assert tx.conv.system_prompt == "be brief" and tx.conv.message_count == 3
    assert [m.content for m in store.messages_after(conv, None)] == ["hi", "a", "b"]


def test_the_door_opens_on_the_head_read_on_the_drivers_cursor(store: Store, conv: str) -> None:
    """``Store.locked`` reads the locked row with ``door.lock_head`` (the driver's cursor, no Core
    execution; the cursor listeners still see it), by key and by id, with the values a Core read
    gives (a datetime ``created_at`` on both backends); an unknown thread is ``ThreadNotFound``."""
    door_ops.append_messages(store, conv, [Message("user", "hi")])
    with store.locked(conv) as tx:  # the thread's call ledger is now held: the next door reads nothing else
        cid, created = tx.conv_head.id, tx.conv.created_at
    core: list[Any] = []
    cursor: list[str] = []

    def on_core(*args: Any) -> None:
        core.append(args[1])

    def on_cursor(c: Any, cur: Any, statement: str, *args: Any) -> None:
        cursor.append(statement)

    event.listen(store.engine, "before_execute", on_core)
    event.listen(store.engine, "before_cursor_execute", on_cursor)
    try:
        with store.locked(conv) as by_key:
            head = by_key.conv_head
        with store.locked(cid) as by_id:
            assert by_id.conv_head.thread_key == conv
    finally:
        event.remove(store.engine, "before_execute", on_core)
        event.remove(store.engine, "before_cursor_execute", on_cursor)
    assert core == []  # no Core execution opened either door
    locks = [s for s in cursor if "FROM conversations" in s]
    assert len(locks) == 2 and all(("FOR UPDATE" in s) != store.is_sqlite for s in locks)
    assert (head.id, head.thread_key, head.message_count, head.model) == (cid, conv, 1, None)
    assert isinstance(head.created_at, datetime) and head.created_at == created
    for unknown in ("no-such-thread-" + conv, 10**12):
        with pytest.raises(ThreadNotFound), store.locked(unknown):
            pass
