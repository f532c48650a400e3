"""The step's intake through the write door (``Locked.take_in``): the same outcome as asking the unique
source key first and appending the rest (``stored_source_keys`` + ``append_messages``, the former
intake), for new batches, batches repeating stored messages, and batches that break the invariants;
the steady step sends no key probe and one multi-row INSERT per batch (``TAKE_IN_ROWS`` rows each)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from sqlalchemy import event

from engine.core.messages import InvalidMessage, Message, ToolCall
from engine.store import Store
from engine.store.door import TAKE_IN_ROWS
from tests import door_ops


def _rounds(first: int, last: int) -> list[Message]:
    """Tool rounds ``first`` .. ``last - 1``: each an assistant call and its result (keyed)."""
    out: list[Message] = []
    for i in range(first, last):
        out += [_assistant(f"a{i}", f"c{i}"), _tool(f"t{i}", f"c{i}", f"result {i}")]
    return out


def _assistant(key: str, *ids: str) -> Message:
    return Message("assistant", "", tool_calls=tuple(ToolCall(i, "search", "{}") for i in ids), source_key=key)


def _tool(key: str, call: str, text: str = "r") -> Message:
    return Message("tool", text, tool_call_id=call, source_key=key)


def _old_intake(store: Store, thread: str, batch: Sequence[Message]) -> list[int]:
    with store.locked(thread) as tx:
        keys = [m.source_key for m in batch if m.source_key is not None]
        stored = tx.stored_source_keys(keys) if keys else set()
        new: list[Message] = []
        for m in batch:
            if m.source_key is not None:
                if m.source_key in stored:
                    continue
                stored.add(m.source_key)
            new.append(m)
        return tx.append_messages(new) if new else []


def _new_intake(store: Store, thread: str, batch: Sequence[Message]) -> list[int]:
    with store.locked(thread) as tx:
        return tx.take_in(batch)


def _outcome(store: Store, thread: str, steps: Sequence[Sequence[Message]], intake: Callable[..., list[int]]) -> list[object]:
    out: list[object] = []
    for batch in steps:
        try:
            out.append(len(intake(store, thread, batch)))
        except InvalidMessage as exc:
            out.append(("invalid", str(exc).replace(thread, "T")))
    stored = [(m.role, m.content, m.tool_call_id, m.source_key) for m in store.messages_after(thread, None)]
    with store.locked(thread) as tx:
        pending = [c.id for c in tx.unanswered_calls()]
    return [out, stored, pending]


SCENARIOS: dict[str, list[list[Message]]] = {
    "new each step": [[Message("user", "q", source_key="u1"), _assistant("a1", "x")], [_tool("t1", "x")], [_assistant("a2")]],
    "stored re-sent with new": [[Message("user", "q", source_key="u1"), _assistant("a1", "x", "y")],
                                [Message("user", "q", source_key="u1"), _assistant("a1", "x", "y"), _tool("t1", "x")],
                                [_assistant("a1", "x", "y"), _tool("t1", "x"), _tool("t2", "y")]],
    "stored result re-sent": [[_assistant("a1", "x")], [_tool("t1", "x")], [_tool("t1", "x"), _assistant("a2")]],
    "key twice in a batch": [[_assistant("a1", "x")], [_tool("t1", "x"), _tool("t1", "x", "other")]],
    "orphan result": [[_assistant("a1", "x")], [_tool("t1", "zzz")], [_tool("t2", "x")]],
    "answered twice": [[_assistant("a1", "x")], [_tool("t1", "x"), _tool("t2", "x")]],
    "stored call, answer twice": [[_assistant("a1", "x")], [_assistant("a1", "x"), _tool("t1", "x"), _tool("t2", "x")]],
    "no keys": [[Message("user", "q"), Message("assistant", "a")], [Message("user", "q")]],
    # more rows than one INSERT takes, stored ones and keyless ones among them
    "long batches": [[Message("user", "q", source_key="u1"), *_rounds(0, 40)],
                     [Message("user", "q", source_key="u1"), *_rounds(0, 40), Message("user", "note"), *_rounds(40, TAKE_IN_ROWS + 3)],
                     [*_rounds(30, TAKE_IN_ROWS + 3), Message("user", "again"), *_rounds(TAKE_IN_ROWS + 3, TAKE_IN_ROWS + 5)]],
    "keyless among stored": [[Message("user", "q", source_key="u1"), _assistant("a1", "x")],
                             [Message("user", "q", source_key="u1"), Message("assistant", "thinking"), _assistant("a1", "x"), _tool("t1", "x")]],
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_take_in_has_the_outcome_of_probe_then_append(store: Store, new_key: Callable[[str], str], name: str) -> None:
    old, new = new_key("old"), new_key("new")
    for k in (old, new):
        store.create_conversation(k, title=k)
    assert _outcome(store, new, SCENARIOS[name], _new_intake) == _outcome(store, old, SCENARIOS[name], _old_intake)


def test_steady_intake_sends_no_key_probe(store: Store, conv: str) -> None:
    door_ops.append_messages(store, conv, [_assistant("a1", "x")])
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda c, cur, st, *a: seen.append(st))
    with store.locked(conv) as tx:
        ids = tx.take_in([_tool("t1", "x"), _assistant("a2")])
    assert len(ids) == 2
    assert not any(s.lstrip().startswith("SELECT messages.source_key") for s in seen)
    assert sum("ON CONFLICT" in s for s in seen) == 1  # one multi-row INSERT for the batch


def test_take_in_returns_the_ids_of_what_it_wrote_in_batch_order(store: Store, conv: str) -> None:
    """Across INSERTs of ``TAKE_IN_ROWS`` rows with stored messages between the new ones: the ids
    returned are the new messages' stored ids, in the batch's order, which is the thread's order."""
    first = [Message("user", "q", source_key="u1"), *_rounds(0, 10)]
    with store.locked(conv) as tx:
        assert len(tx.take_in(first)) == len(first)
    batch = [Message("user", "q", source_key="u1"), *_rounds(0, 10), Message("user", "note"), *_rounds(10, 2 * TAKE_IN_ROWS)]
    with store.locked(conv) as tx:
        ids = tx.take_in(batch)
    stored = store.messages_after(conv, None)
    new = stored[len(first):]
    assert ids == [m.id for m in new] == sorted(ids)
    assert [(m.role, m.content, m.source_key) for m in new] == [(m.role, m.content, m.source_key) for m in batch[1 + 20:]]
