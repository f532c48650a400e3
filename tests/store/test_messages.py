"""Messages: intake, round-trips, counters and keyset pages."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa

from engine.core.errors import EngineError
from engine.core.messages import Message, ToolCall, assistant, system, tool_result, user
from engine.store import Store
from tests import door_ops


def _last_message_id(store: Store, key: str) -> int | None:
    with store.locked(key) as tx:
        return tx.conv.last_message_id


def test_append_returns_monotonic_ids_and_maintains_counters(store: Store, conv: str) -> None:
    first = door_ops.append_message(store, conv, user("hello"))
    with store.locked(conv) as tx:
        more = tx.append_messages([assistant("hi"), user("and?"), assistant("done")])
        assert tx.append_messages([]) == []
    ids = [first, *more]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert store.thread(conv).message_count == 4 == store.message_count(conv) == store.count_messages(conv)
    assert _last_message_id(store, conv) == ids[-1]
    assert [m.content for m in store.messages_after(conv, None)] == ["hello", "hi", "and?", "done"]
    assert [m.id for m in store.messages_after(conv, None)] == ids


def test_ids_are_monotonic_across_interleaved_conversations(store: Store, new_key: Callable[[str], str]) -> None:
    a, b = new_key("a"), new_key("b")
    store.create_conversation(a)
    store.create_conversation(b)
    ids = [door_ops.append_message(store, k, user(f"{k}-{i}")) for i in range(3) for k in (a, b)]
    assert ids == sorted(ids)
    assert [m.content for m in store.messages_after(a, None)] == [f"{a}-0", f"{a}-1", f"{a}-2"]
    assert store.count_messages(a) == store.count_messages(b) == 3


def test_bulk_append_keeps_order_and_counters(store: Store, conv: str) -> None:
    door_ops.append_message(store, conv, user("before"))
    with store.locked(conv) as tx:
        n = tx.bulk_append((user(f"m{i}") for i in range(23)), run_id=None, batch=5)
        assert n == 23
        assert tx.bulk_append([]) == 0
    page = store.messages_page(conv, limit=100)
    assert [s.message.content for s in page] == ["before"] + [f"m{i}" for i in range(23)]
    ids = [s.id for s in page]
    assert ids == sorted(ids) and len(set(ids)) == 24
    assert store.thread(conv).message_count == 24
    assert _last_message_id(store, conv) == ids[-1]
    # the single-row path continues after the bulk rows
    assert door_ops.append_message(store, conv, user("after")) > ids[-1]


def test_every_field_round_trips(store: Store, conv: str) -> None:
    calls = (
        ToolCall(id="call_1", name="query_kb", arguments='{"q": "退款政策", "top_k": 3}'),
        ToolCall(id="call_2", name="web_search", arguments="{}"),
    )
    sent = [
        system("persisted note", source="platform"),
        user("Wie geht's? 你好 🙂", channel="web", nested={"a": [1, 2, {"b": None}]}),
        assistant("let me look", *calls),
        tool_result("call_1", '{"results": []}', name="query_kb"),
        tool_result("call_2", "x" * 20_000, name="web_search"),
        Message(role="assistant", content=""),
    ]
    with store.locked(conv) as tx:
        run_id = tx.start_run()
        ids = tx.append_messages(sent, run_id=run_id)
    got = store.messages_after(conv, None)
    assert [m.id for m in got] == ids
    for original, stored, new_id in zip(sent, got, ids):
        assert stored == Message(
            role=original.role, content=original.content, id=new_id, tool_calls=original.tool_calls,
            tool_call_id=original.tool_call_id, name=original.name, metadata=original.metadata,
        )
        assert stored.content_hash() == original.content_hash()
    assert got[1].metadata["nested"] == {"a": [1, 2, {"b": None}]}
    assert got[2].tool_calls[0].parsed_arguments() == {"q": "退款政策", "top_k": 3}
    with store.locked(conv) as tx:
        assert tx.message(ids[3]) == got[3]


def test_an_already_persisted_message_is_refused(store: Store, conv: str) -> None:
    with pytest.raises(EngineError) as err:
        door_ops.append_message(store, conv, user("again", id=7))
    assert err.value.code == "already_persisted"
    assert store.count_messages(conv) == 0 and store.thread(conv).message_count == 0


def test_an_error_inside_the_lock_rolls_everything_back(store: Store, conv: str) -> None:
    with pytest.raises(RuntimeError):
        with store.locked(conv) as tx:
            tx.append_message(user("lost"))
            tx.queue_request("lost too")
            raise RuntimeError("boom")
    assert store.count_messages(conv) == 0 and store.thread(conv).message_count == 0
    assert store.queued_requests(conv) == [] and store.busy_reason(conv) is None


def test_locked_message_ignores_other_conversations(store: Store, new_key: Callable[[str], str]) -> None:
    a, b = new_key("a"), new_key("b")
    store.create_conversation(a)
    store.create_conversation(b)
    foreign = door_ops.append_message(store, b, user("b's"))
    with store.locked(a) as tx:
        assert tx.message(foreign) is None
        assert tx.message(10**12) is None


@pytest.fixture
def hundred(store: Store, conv: str) -> tuple[str, list[int]]:
    """A conversation with 100 messages; returns its key and ids."""
    with store.locked(conv) as tx:
        tx.bulk_append(user(f"m{i}") for i in range(100))
    return conv, [s.id for s in store.messages_page(conv, limit=1000)]


def test_messages_page_first_middle_and_last_pages(store: Store, hundred: tuple[str, list[int]]) -> None:
    key, ids = hundred
    assert len(ids) == 100
    first = store.messages_page(key, limit=10)
    assert [s.id for s in first] == ids[:10]
    middle = store.messages_page(key, after_id=ids[44], limit=10)
    assert [s.id for s in middle] == ids[45:55]
    last = store.messages_page(key, before_id=ids[-1] + 1, limit=10)
    assert [s.id for s in last] == ids[90:]
    assert [s.message.content for s in last] == [f"m{i}" for i in range(90, 100)]
    before_middle = store.messages_page(key, before_id=ids[50], limit=10)
    assert [s.id for s in before_middle] == ids[40:50]  # ascending even when paging backwards
    assert all(s.conversation_id == store.thread(key).id and s.created_at.tzinfo for s in middle)


def test_messages_page_walks_forward_and_backward_without_gaps(store: Store, hundred: tuple[str, list[int]]) -> None:
    key, ids = hundred
    forward, after = [], None
    while page := store.messages_page(key, after_id=after, limit=30):
        forward += [s.id for s in page]
        after = page[-1].id
    backward, before = [], ids[-1] + 1
    while page := store.messages_page(key, before_id=before, limit=30):
        backward = [s.id for s in page] + backward
        before = page[0].id
    assert forward == ids == backward


def test_messages_page_edges(store: Store, hundred: tuple[str, list[int]], new_key: Callable[[str], str]) -> None:
    key, ids = hundred
    assert store.messages_page(key, after_id=ids[-1]) == []
    assert store.messages_page(key, before_id=ids[0]) == []
    assert store.messages_page(key, limit=0) == []
    partial = store.messages_page(key, after_id=ids[95], limit=10)
    assert [s.id for s in partial] == ids[96:]
    window = store.messages_page(key, after_id=ids[10], before_id=ids[20], limit=100)
    assert [s.id for s in window] == ids[11:20]
    empty = new_key("empty")
    store.create_conversation(empty)
    assert store.messages_page(empty) == [] and store.messages_page(empty, before_id=10**12) == []


def test_count_messages_after_a_boundary(store: Store, hundred: tuple[str, list[int]]) -> None:
    key, ids = hundred
    assert store.count_messages(key) == 100
    assert store.count_messages(key, after_id=ids[69]) == 30
    assert store.count_messages(key, after_id=ids[-1]) == 0
    assert [m.id for m in store.messages_after(key, ids[96])] == ids[97:]


def test_absent_tool_calls_and_metadata_are_sql_null(store: Store, conv: str) -> None:
    """Contract for platforms reading the table: 'absent' is SQL NULL, not the JSON text 'null'."""
    plain = door_ops.append_message(store, conv, user("no extras"))
    with store.locked(conv) as tx:
        tx.bulk_append([user("bulk, no extras")])
    rich = door_ops.append_message(store, conv, assistant("", ToolCall(id="c1", name="f", arguments="{}"), channel="web"))
    with store.engine.connect() as c:
        rows = c.execute(
            sa.text("SELECT id, tool_calls IS NULL, metadata IS NULL FROM messages WHERE conversation_id = :c ORDER BY id"),
            {"c": store.thread(conv).id},
        ).all()
    assert [(r[1], r[2]) for r in rows] == [(True, True), (True, True), (False, False)]
    assert (rows[0][0], rows[2][0]) == (plain, rich)
