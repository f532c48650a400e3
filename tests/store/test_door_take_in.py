"""The step's intake through the write door (``Locked.take_in``): the same outcome as asking the unique
source key first and appending the rest (``stored_source_keys`` + ``append_messages``, the former
intake), for new batches, batches repeating stored messages, and batches that break the invariants;
the steady step sends no key probe."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from sqlalchemy import event

from engine.messages import InvalidMessage, Message, ToolCall
from engine.store import Store


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
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_take_in_has_the_outcome_of_probe_then_append(store: Store, new_key: Callable[[str], str], name: str) -> None:
    old, new = new_key("old"), new_key("new")
    for k in (old, new):
        store.create_conversation(k, title=k)
    assert _outcome(store, new, SCENARIOS[name], _new_intake) == _outcome(store, old, SCENARIOS[name], _old_intake)


def test_steady_intake_sends_no_key_probe(store: Store, conv: str) -> None:
    store.append_messages(conv, [_assistant("a1", "x")])
    seen: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda c, cur, st, *a: seen.append(st))
    with store.locked(conv) as tx:
        ids = tx.take_in([_tool("t1", "x"), _assistant("a2")])
    assert len(ids) == 2
    assert not any(s.lstrip().startswith("SELECT messages.source_key") for s in seen)
    assert sum("ON CONFLICT" in s for s in seen) == 2
