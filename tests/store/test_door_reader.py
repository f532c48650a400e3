"""The write door's snapshot reader (``Locked.thread_reader``): its key row equals the one a Core
read of ``THREAD_KEY`` gives in the same transaction, and the messages it hands over for the door's
own appends (not read back) equal a read of those rows, on both backends."""

from __future__ import annotations

from sqlalchemy import event

from engine.core.messages import Attachment, Message, Reasoning, ToolCall
from engine.store import Store
from engine.store.reads import THREAD_KEY, ThreadReader
from tests import door_ops

_MIX = [
    Message("user", "a question with a NUL \x00 and ünïcode", source_key="u1", metadata={"raw": {"k": [1, 2.5, None, "x"]}}),
    Message("assistant", "", tool_calls=(ToolCall("c1", "search", '{"q": "x"}'),), reasoning=(Reasoning(text="think", signature="s"),),
            source_key="a1"),
    Message("tool", "result", tool_call_id="c1", name="search", is_error=True, source_key="t1"),
    Message("user", "see", attachments=(Attachment("image", media_type="image/png", source="url", url="https://x/y.png"),)),
    Message("assistant", "done", meta_kind="demo"),
]


def test_the_door_reader_hands_over_what_a_read_gives(store: Store, conv: str) -> None:
    door_ops.append_messages(store, conv, [Message("user", "first", source_key="u0")])
    with store.locked(conv) as tx:
        before = tx.conv_head.last_message_id
        tx.take_in(_MIX[:3])
        tx.append_messages(_MIX[3:])
        seen: list[str] = []
        event.listen(store.engine, "before_cursor_execute", lambda c, cur, st, *a: seen.append(st))
        reader = tx.thread_reader()
        handed = reader.messages_after(before)
        assert not any("FROM messages" in s for s in seen)  # handed over, not read back
        conn = tx.connection()
        core = ThreadReader(conn, conn.execute(THREAD_KEY, {"key": conv}).first())
        assert reader.row == core.row and core.row == reader.row
        assert handed == core.messages_after(before) and len(handed) == 5
        assert reader.messages_after(handed[1].id, limit=2) == core.messages_after(handed[1].id, limit=2)
        assert reader.messages_after(None) == core.messages_after(None)  # before the lock: read
        assert reader.state() == core.state() and reader.last_message_id() == handed[-1].id


def test_a_bulk_append_is_read_back(store: Store, conv: str) -> None:
    door_ops.append_messages(store, conv, [Message("user", "first")])
    with store.locked(conv) as tx:
        before = tx.conv_head.last_message_id
        tx.bulk_append([Message("assistant", "bulk")])
        tx.take_in([Message("user", "more")])
        assert [m.content for m in tx.thread_reader().messages_after(before)] == ["bulk", "more"]


def test_the_rows_of_the_last_transactions_are_handed_over_while_nothing_else_appended(store: Store, conv: str) -> None:
    """A step's intake transaction after the previous step's completion: the messages appended by
    both are handed over (this store's ledger cache kept the last ones); once another writer (here
    a second store on the same database) appended, they are read."""
    door_ops.append_messages(store, conv, [Message("user", "first", source_key="u0")])
    with store.locked(conv) as tx:
        before = tx.conv_head.last_message_id
        tx.take_in([_MIX[1]])
    with store.locked(conv) as tx:
        tx.take_in([_MIX[2]])
        seen: list[str] = []
        event.listen(store.engine, "before_cursor_execute", lambda c, cur, st, *a: seen.append(st))
        handed = tx.thread_reader().messages_after(before)
        assert not any("FROM messages" in s for s in seen)
        conn = tx.connection()
        assert handed == ThreadReader(conn, conn.execute(THREAD_KEY, {"key": conv}).first()).messages_after(before)
        assert [m.source_key for m in handed] == ["a1", "t1"]
    other = Store.open(store.url.render_as_string(hide_password=False))
    try:
        door_ops.append_messages(other, conv, [Message("user", "from elsewhere")])
    finally:
        other.close()
    with store.locked(conv) as tx:
        tx.take_in([Message("assistant", "mine")])
        assert [m.content for m in tx.thread_reader().messages_after(before)] == ["", "result", "from elsewhere", "mine"]


def test_metadata_a_read_gives_back_otherwise_is_handed_over_as_read(store: Store, conv: str) -> None:
    """Metadata whose JSON text reads back as other values (a tuple as a list, a number key as
    text) is handed over as the read gives it; plain values are copied without the text."""
    door_ops.append_messages(store, conv, [Message("user", "first")])
    odd = [Message("user", "odd", metadata={"t": (1, 2), "n": {3: "x"}, "f": [0.1, -0.0, 1e300]}),
           Message("user", "plain", metadata={"a": {"b": [1, True, None, "é"]}, "e": {}, "l": []})]
    with store.locked(conv) as tx:
        before = tx.conv_head.last_message_id
        tx.take_in(odd)
        handed = tx.thread_reader().messages_after(before)
        conn = tx.connection()
        read = ThreadReader(conn, conn.execute(THREAD_KEY, {"key": conv}).first())
        assert handed == ThreadReader.messages_after(read, before)
    assert dict(handed[0].metadata) == {"t": [1, 2], "n": {"3": "x"}, "f": [0.1, -0.0, 1e300]}
