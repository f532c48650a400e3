"""The write door's call ledger kept between transactions (``engine.store.door.LedgerCache``):
trusted only while the conversation row shows nothing was appended since, whoever appended."""

from __future__ import annotations

import pytest
from sqlalchemy import event

from engine.messages import InvalidMessage, Message, ToolCall
from engine.store import Store


def _assistant(*ids: str) -> Message:
    return Message("assistant", "", tool_calls=tuple(ToolCall(i, "search", "{}") for i in ids))


def _statements(store: Store) -> list[str]:
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda conn, cur, st, *a: seen.append(st))
    return seen


def test_kept_ledger_skips_the_reads_and_still_guards(store: Store, conv: str) -> None:
    store.append_messages(conv, [Message("user", "hi"), _assistant("a", "b")])
    seen = _statements(store)
    store.append_message(conv, Message("tool", "A", tool_call_id="a"))
    assert not any("messages.role = " in s and s.lstrip().startswith("SELECT") for s in seen), "the ledger was read again"
    with pytest.raises(InvalidMessage, match="answered twice"):
        store.append_message(conv, Message("tool", "A again", tool_call_id="a"))
    with pytest.raises(InvalidMessage, match="orphan"):
        store.append_message(conv, Message("tool", "?", tool_call_id="zzz"))
    store.append_message(conv, Message("tool", "B", tool_call_id="b"))
    assert [m.tool_call_id for m in store.messages_after(conv, None) if m.role == "tool"] == ["a", "b"]


def test_another_writer_invalidates_the_kept_ledger(store: Store, conv: str) -> None:
    store.append_messages(conv, [Message("user", "hi"), _assistant("a")])
    other = Store.open(str(store.engine.url.render_as_string(hide_password=False)))  # another process's store
    try:
        other.append_message(conv, Message("tool", "A", tool_call_id="a"))
        other.append_message(conv, _assistant("c"))
    finally:
        other.close()
    with pytest.raises(InvalidMessage, match="orphan"):  # the kept ledger still had "a" pending
        store.append_message(conv, Message("tool", "A twice", tool_call_id="a"))
    store.append_message(conv, Message("tool", "C", tool_call_id="c"))


def test_a_rolled_back_transaction_keeps_nothing(store: Store, conv: str) -> None:
    store.append_messages(conv, [Message("user", "hi"), _assistant("a")])
    with pytest.raises(RuntimeError), store.locked(conv) as tx:
        tx.append_message(Message("tool", "A", tool_call_id="a"))
        raise RuntimeError("abort")
    store.append_message(conv, Message("tool", "A", tool_call_id="a"))  # still pending: the append was undone
    assert [m.role for m in store.messages_after(conv, None)] == ["user", "assistant", "tool"]
