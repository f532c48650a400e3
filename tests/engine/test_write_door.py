"""The one write door: every message-writing path a platform can reach refuses a write that breaks a
conversation invariant, on SQLite and PostgreSQL, and leaves nothing of that write behind.

The paths: ``Service.runs.append_message`` / ``append_messages`` / ``start_run(message=…)``,
the door itself (``Store.locked(key)`` → ``append_message`` / ``append_messages`` /
``bulk_append``), in one transaction per call (``tests.door_ops``, what the Store's wrappers did
before issue 24 removed them) and in one transaction for all. Each
refusal is checked against the raw conversation row (``message_count``, ``last_message_id``) and
the rows of ``messages``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from engine.core.errors import EngineError
from engine.core.events import CancelledEvent, EventKind
from engine.core.messages import InvalidMessage, Message, ToolCall, assistant, tool_result, user
from engine.service import Service
from tests import door_ops
from tests.store.support import conversation_counters, insert_legacy_rows

from .conftest import ServiceFactory

Write = Callable[[Service, str, Sequence[Message]], Any]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def svc(request: pytest.FixtureRequest) -> Iterator[Service]:
    factory: ServiceFactory = request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")
    yield factory()


def _each(write_one: Callable[[Service, str, Message], Any]) -> Write:
    return lambda svc, key, ms: [write_one(svc, key, m) for m in ms]


def _in_door(method: str) -> Write:
    def write(svc: Service, key: str, ms: Sequence[Message]) -> None:
        with svc.store.locked(key) as tx:
            if method == "append_message":
                for m in ms:
                    tx.append_message(m)
            elif method == "bulk_append":
                tx.bulk_append(ms, batch=1)  # one batch per row: a refusal must undo the batches before it
            else:
                getattr(tx, method)(list(ms))

    return write


def _start_run(svc: Service, key: str, ms: Sequence[Message]) -> None:
    *before, last = ms
    if before:
        svc.runs.append_messages(key, before)
    svc.runs.start_run(key, message=last, tools=[{"type": "function", "function": {"name": "f"}}])


#: every entry point that writes messages; ``batch`` paths get a valid message before the bad one
#: in the same write (it must not be written either)
PATHS: dict[str, tuple[Write, bool]] = {
    "Service.runs.append_message": (_each(lambda svc, k, m: svc.runs.append_message(k, m)), False),
    "Service.runs.append_messages": (lambda svc, k, ms: svc.runs.append_messages(k, ms), True),
    "Service.runs.start_run(message=)": (_start_run, False),
    "door_ops.append_message": (_each(lambda svc, k, m: door_ops.append_message(svc.store, k, m)), False),
    "door_ops.append_messages": (lambda svc, k, ms: door_ops.append_messages(svc.store, k, ms), True),
    "door_ops.bulk_append": (lambda svc, k, ms: door_ops.bulk_append(svc.store, k, ms), True),
    "door.append_message": (_in_door("append_message"), True),
    "door.append_messages": (_in_door("append_messages"), True),
    "door.bulk_append": (_in_door("bulk_append"), True),
}


def _hacked(m: Message, **fields: Any) -> Message:
    """A message whose fields bypassed the constructor's checks (a duck-typed or patched object
    from a platform): the door must not trust that the constructor ran."""
    for name, value in fields.items():
        object.__setattr__(m, name, value)
    return m


def _call(i: str) -> ToolCall:
    return ToolCall(i, "query_kb", '{"q": "x"}')


#: name -> (messages written first through the service, the bad message, words the error names)
CASES: dict[str, tuple[Callable[[], list[Message]], Callable[[], Message], tuple[str, ...]]] = {
    "orphan, no assistant": (lambda: [user("hi")], lambda: tool_result("c-none", "late", name="query_kb"), ("orphan", "c-none")),
    "orphan, unknown call id": (
        lambda: [user("hi"), assistant("", _call("c1"))],
        lambda: tool_result("c-other", "?", name="query_kb"),
        ("orphan", "c-other"),
    ),
    "orphan, call of an older assistant message": (
        lambda: [user("hi"), assistant("", _call("c1")), tool_result("c1", "r"), assistant("done, next?", _call("c2")), tool_result("c2", "r2"), assistant("all done")],
        lambda: tool_result("c1", "again", name="query_kb"),
        ("orphan", "c1"),
    ),
    "answered twice": (
        lambda: [user("hi"), assistant("", _call("c1"), _call("c2")), tool_result("c1", "r1")],
        lambda: tool_result("c1", "r1 again", name="query_kb"),
        ("answered twice", "c1"),
    ),
    "duplicate call ids in one assistant message": (
        lambda: [user("hi")],
        lambda: assistant("", _call("dup"), _call("dup")),
        ("repeats", "dup"),
    ),
    "unknown role": (lambda: [user("hi")], lambda: _hacked(user("beep"), role="robot"), ("unknown role", "robot")),
    "tool message without tool_call_id": (
        lambda: [user("hi"), assistant("", _call("c1"))],
        lambda: _hacked(tool_result("c1", "r"), tool_call_id=None),
        ("without tool_call_id",),
    ),
    "tool calls on a user message": (
        lambda: [user("hi")],
        lambda: _hacked(user("me too"), tool_calls=(_call("u1"),)),
        ("carries tool calls",),
    ),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(CASES))
def test_every_write_path_refuses_a_broken_invariant_and_writes_nothing(svc: Service, new_key, path: str, case: str) -> None:
    write, batch = PATHS[path]
    setup, bad, words = CASES[case]
    key = new_key("door")
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, setup())
    before = conversation_counters(svc.store.engine, key)
    runs_before = svc.store.runs(key)
    messages = [user("a valid message in the same write"), bad()] if batch else [bad()]
    with pytest.raises(InvalidMessage) as err:
        write(svc, key, messages)
    assert err.value.code == "invalid_message"
    text = err.value.message
    assert "\n" not in text and repr(key) in text and all(w in text for w in words), text
    assert conversation_counters(svc.store.engine, key) == before
    assert svc.reads.message_count(key) == before[0]
    assert svc.store.runs(key) == runs_before  # start_run(message=…) started nothing


@pytest.mark.parametrize("method", ["append_messages", "bulk_append"])
def test_a_refusal_caught_inside_the_door_still_leaves_nothing_of_that_write(svc: Service, new_key, method: str) -> None:
    key = new_key("caught")
    svc.runs.create_thread(key)
    before = conversation_counters(svc.store.engine, key)
    good = [user("q"), assistant("", _call("a"), _call("b")), tool_result("a", "ra"), tool_result("b", "rb")] * 3
    with svc.store.locked(key) as tx:
        with pytest.raises(InvalidMessage, match="orphan"):
            if method == "bulk_append":
                tx.bulk_append([*good, tool_result("zz", "orphan")], batch=2)
            else:
                tx.append_messages([*good, tool_result("zz", "orphan")])
        # the transaction goes on: the door's ledger did not advance past the refused write
        assert tx.unanswered_calls() == []
        tx.append_message(user("after the refusal"))
    count, last, rows = conversation_counters(svc.store.engine, key)
    assert (count, rows) == (before[0] + 1, before[2] + 1)
    assert [m.message.content for m in svc.reads.messages_page(key)] == ["after the refusal"]
    assert last == svc.reads.messages_page(key)[-1].id


@pytest.mark.parametrize("path", [p for p, (_, batch) in PATHS.items() if batch])
def test_valid_rounds_pass_every_path_and_the_ledger_follows_the_write(svc: Service, new_key, path: str) -> None:
    """Parallel calls answered in any order, a user reply between a call and its result, a new
    assistant message replacing the pending set: all within one write."""
    write, _ = PATHS[path]
    key = new_key("valid")
    svc.runs.create_thread(key)
    messages = [
        user("q"),
        assistant("", _call("p1"), _call("p2")),
        tool_result("p2", "second first"),
        user("(the user answers a question the tool asked)"),
        tool_result("p1", "then the first"),
        assistant("one more", _call("p3")),
        tool_result("p3", "r3"),
        assistant("done"),
    ]
    write(svc, key, messages)
    stored = svc.reads.messages_page(key)
    assert [s.message.content for s in stored] == [m.content for m in messages]
    count, last, rows = conversation_counters(svc.store.engine, key)
    assert count == rows == len(messages) and last == stored[-1].id


def test_pending_calls_carry_across_writes_and_transactions(svc: Service, new_key) -> None:
    key = new_key("across")
    svc.runs.create_thread(key)
    svc.runs.append_message(key, user("q"))
    door_ops.append_message(svc.store, key, assistant("", _call("x1"), _call("x2")))
    with svc.store.locked(key) as tx:
        assert [c.id for c in tx.unanswered_calls()] == ["x1", "x2"]
        tx.append_message(tool_result("x1", "r1"))
        assert [c.id for c in tx.unanswered_calls()] == ["x2"]
        with pytest.raises(InvalidMessage, match="answered twice"):
            tx.append_message(tool_result("x1", "again"))
    door_ops.bulk_append(svc.store, key, [tool_result("x2", "r2")])
    with pytest.raises(InvalidMessage, match="answered twice"):
        svc.runs.append_message(key, tool_result("x2", "again"))
    assert svc.reads.message_count(key) == 4


def test_legacy_orphans_in_the_database_do_not_block_valid_writes(svc: Service, new_key) -> None:
    """Rows that arrived without the door (an old import) stay as they are; the door judges new
    writes against the newest assistant message only."""
    key = new_key("legacy")
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, [user("q"), assistant("", _call("l1"))])
    ids = insert_legacy_rows(
        svc.store.engine,
        key,
        [
            {"role": "tool", "content": "a result of a call nobody made", "tool_call_id": "ghost", "name": "mailer"},
            {"role": "tool", "content": "first answer", "tool_call_id": "l1", "name": "query_kb"},
            {"role": "tool", "content": "second answer", "tool_call_id": "l1", "name": "query_kb"},
        ],
    )
    assert svc.reads.message_count(key) == 5 and [s.id for s in svc.reads.messages_page(key)][-3:] == ids
    with pytest.raises(InvalidMessage, match="answered twice"):
        svc.runs.append_message(key, tool_result("l1", "a third"))
    svc.runs.append_messages(key, [user("next"), assistant("ok")])
    assert svc.reads.message_count(key) == 7


def test_settle_run_answers_only_what_is_pending(svc: Service, new_key) -> None:
    key = new_key("settle")
    svc.runs.create_thread(key)
    run = svc.runs.start_run(key, message=user("go"))
    svc.runs.append_messages(key, [assistant("", _call("s1"), _call("s2"), _call("s3")), tool_result("s2", "done")], run_id=run)
    assert svc.runs.settle_run(key, run, "cancelled", event=CancelledEvent(attempt=0)) == 2
    results = [s.message for s in svc.reads.messages_page(key) if s.message.role == "tool"]
    assert [(m.tool_call_id, bool(m.metadata.get("aborted"))) for m in results] == [("s2", False), ("s1", True), ("s3", True)]
    assert svc.runs.settle_run(key, run, "cancelled") is None  # already ended: nothing written
    assert [e.data for e in svc.reads.events(key)] == [{"aborted_calls": 2, "attempt": 0}]


def _event_in_door(svc: Service, key: str, kind: Any) -> int:
    with svc.store.locked(key) as tx:
        return tx.add_event(kind, {})


EVENT_PATHS: dict[str, Callable[[Service, str, Any], int]] = {
    "door_ops.add_event": lambda svc, key, kind: door_ops.add_event(svc.store, key, kind, {}),
    "door.add_event": _event_in_door,
}


@pytest.mark.parametrize("path", list(EVENT_PATHS))
def test_event_kinds_outside_the_enum_are_refused(svc: Service, new_key, path: str) -> None:
    key = new_key("events")
    svc.runs.create_thread(key)
    EVENT_PATHS[path](svc, key, EventKind.RETRY)
    EVENT_PATHS[path](svc, key, "recovered")  # a member's value is that member
    with pytest.raises(EngineError) as err:
        EVENT_PATHS[path](svc, key, "gave up")
    assert err.value.code == "invalid_event" and "'gave up'" in err.value.message and repr(key) in err.value.message
    assert [e.kind for e in svc.reads.events(key)] == ["retry", "recovered"]


def test_service_add_event_takes_only_a_typed_payload_with_a_trigger_of_its_kind(svc: Service, new_key) -> None:
    from engine.core.events import RecoveredEvent, RetryEvent

    key = new_key("typed-events")
    svc.runs.create_thread(key)
    svc.steps.add_event(key, RetryEvent(attempt=1, failed_step=2), trigger="overflow")
    with pytest.raises(ValueError):
        svc.steps.add_event(key, RecoveredEvent(attempt=1), trigger="manual")  # recovered is only ever an overflow event
    assert [(e.kind, e.trigger, e.data["attempt"]) for e in svc.reads.events(key)] == [("retry", "overflow", 1)]
