"""The write door on the step path: the call ledger kept between transactions (``engine.store.door.LedgerCache``):
trusted only while the conversation row shows nothing was appended since, whoever appended."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import event

from engine.core.messages import InvalidMessage, Message, ToolCall
from engine.store import Store
from tests import door_ops


def _assistant(*ids: str) -> Message:
    return Message("assistant", "", tool_calls=tuple(ToolCall(i, "search", "{}") for i in ids))


def _statements(store: Store) -> list[str]:
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda conn, cur, st, *a: seen.append(st))
    return seen


def test_kept_ledger_skips_the_reads_and_still_guards(store: Store, conv: str) -> None:
    door_ops.append_messages(store, conv, [Message("user", "hi"), _assistant("a", "b")])
    seen = _statements(store)
    door_ops.append_message(store, conv, Message("tool", "A", tool_call_id="a"))
    assert not any("messages.role = " in s and s.lstrip().startswith("SELECT") for s in seen), "the ledger was read again"
    with pytest.raises(InvalidMessage, match="answered twice"):
        door_ops.append_message(store, conv, Message("tool", "A again", tool_call_id="a"))
    with pytest.raises(InvalidMessage, match="orphan"):
        door_ops.append_message(store, conv, Message("tool", "?", tool_call_id="zzz"))
    door_ops.append_message(store, conv, Message("tool", "B", tool_call_id="b"))
    assert [m.tool_call_id for m in store.messages_after(conv, None) if m.role == "tool"] == ["a", "b"]


def test_another_writer_invalidates_the_kept_ledger(store: Store, conv: str) -> None:
    door_ops.append_messages(store, conv, [Message("user", "hi"), _assistant("a")])
    other = Store.open(str(store.engine.url.render_as_string(hide_password=False)))  # another process's store
    try:
        door_ops.append_message(other, conv, Message("tool", "A", tool_call_id="a"))
        door_ops.append_message(other, conv, _assistant("c"))
    finally:
        other.close()
    with pytest.raises(InvalidMessage, match="orphan"):  # the kept ledger still had "a" pending
        door_ops.append_message(store, conv, Message("tool", "A twice", tool_call_id="a"))
    door_ops.append_message(store, conv, Message("tool", "C", tool_call_id="c"))


def test_a_rolled_back_transaction_keeps_nothing(store: Store, conv: str) -> None:
    door_ops.append_messages(store, conv, [Message("user", "hi"), _assistant("a")])
    with pytest.raises(RuntimeError), store.locked(conv) as tx:
        tx.append_message(Message("tool", "A", tool_call_id="a"))
        raise RuntimeError("abort")
    door_ops.append_message(store, conv, Message("tool", "A", tool_call_id="a"))  # still pending: the append was undone
    assert [m.role for m in store.messages_after(conv, None)] == ["user", "assistant", "tool"]


def test_a_request_of_another_thread_is_not_completed(store: Store, conv: str, new_key: Callable[[str], str]) -> None:
    from engine.core.errors import EngineError

    other = new_key("other")
    store.create_conversation(other)
    rid = door_ops.record_model_request(store, other, provider="p", model="m")
    with pytest.raises(EngineError) as err, store.locked(conv) as tx:  # the door of another thread
        tx.complete_model_request(rid, outcome="ok", reported_prompt_tokens=5)
    assert err.value.code == "not_found"
    (req,) = store.model_requests(other)
    assert (req.outcome, req.reported_prompt_tokens) == ("pending", None)


def test_a_request_recorded_and_completed_in_one_transaction(store: Store, conv: str) -> None:
    with store.locked(conv) as tx:
        rid = tx.record_model_request(provider="p", model="m", step=3, estimated_tokens=40)
        tx.complete_model_request(rid, outcome="error", error_code="X", error_message="bad")
    (req,) = store.model_requests(conv)
    assert (req.id, req.step, req.estimated_tokens, req.outcome, req.error_code, req.error_message) == (rid, 3, 40, "error", "X", "bad")
    assert (store.thread(conv).provider, store.thread(conv).model) == ("p", "m")
