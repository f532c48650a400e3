"""The door's ``close_dangling_calls`` and the store's current-request rule, on SQLite and PostgreSQL.

``close_dangling_calls`` gives every call after the boundary that has no result a closing marker
(``missing_result``), on an idle thread only; the current request (``Snapshot.current_request``,
``last_user_message``) is the newest user message that the units rule accepts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.core.errors import ThreadBusy
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.units import META_MISSING_RESULT, build_units, dangling_calls, is_closing_marker
from engine.service import Service

from .conftest import ServiceFactory


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def svc(request: pytest.FixtureRequest) -> Iterator[Service]:
    factory: ServiceFactory = request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")
    yield factory()


def _all(svc: Service, key: str) -> list[Message]:
    return [s.message for s in svc.reads.messages_page(key, limit=10_000)]


def test_closes_old_and_newest_dangling_calls_once(svc: Service, new_key) -> None:
    key = new_key("dangle")
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, [
        user("look up two things"),
        assistant("", ToolCall("a1", "search"), ToolCall("a2", "fetch")),
        tool_result("a1", "found a", name="search"),
        user("never mind, do this instead"),  # a2 never got its result
        assistant("", ToolCall("b1", "search")),  # b1 neither
    ])
    assert svc.runs.close_dangling_calls(key, "the source stopped here") == 2
    ms = _all(svc, key)
    markers = ms[-2:]
    assert [m.tool_call_id for m in markers] == ["a2", "b1"] and [m.name for m in markers] == ["fetch", "search"]
    assert all(is_closing_marker(m) and m.metadata[META_MISSING_RESULT] is True for m in markers)
    assert "no result was recorded" in markers[0].content and "the source stopped here" in markers[0].content
    assert dangling_calls(ms) == []
    assert not any(u.open for u in build_units(ms, running_turn=False))  # nothing keeps a unit open now
    assert svc.runs.close_dangling_calls(key) == 0  # idempotent
    assert svc.reads.thread(key).message_count == len(ms)
    # the thread keeps working: the newest call is answered, so a new turn may follow
    svc.runs.append_message(key, user("thanks"))


def test_refused_while_busy_and_nothing_written(svc: Service, new_key) -> None:
    key = new_key("busy")
    svc.runs.create_thread(key)
    run = svc.runs.start_run(key, message=user("go"))
    svc.runs.append_message(key, assistant("", ToolCall("c1", "slow")), run_id=run)
    with pytest.raises(ThreadBusy):
        svc.runs.close_dangling_calls(key)
    assert [m.role for m in _all(svc, key)] == ["user", "assistant"]
    svc.runs.finish_run(key, run)
    assert svc.runs.close_dangling_calls(key) == 1


def test_calls_behind_the_boundary_are_left_alone(svc: Service, new_key) -> None:
    key = new_key("behind")
    svc.runs.create_thread(key)
    ids = svc.runs.append_messages(key, [user("q"), assistant("", ToolCall("old", "f")), user("next"), assistant("ok")])
    boundary = ids[2]
    with svc.store.locked(key) as tx:
        msg = tx.message(boundary)
        tx.persist_summary(expected_boundary=None, expected_boundary_hash=None, new_boundary=boundary,
                           new_boundary_hash=msg.content_hash(), summary="s", summary_tokens=1, kind="manual", trigger="manual")
    assert svc.runs.close_dangling_calls(key) == 0


def test_current_request_skips_meta_synthetic_and_carriers(svc: Service, new_key) -> None:
    key = new_key("req")
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, [
        user("the real request: fix the parser"),
        Message("user", "<command-name>/model</command-name>", meta_kind="command"),
        Message("user", "stale output", meta_kind="orphan_result", metadata={"tool_call_id": "x"}),
        user("<system-reminder>todo list is empty</system-reminder>"),
        Message("user", "an injected skill text that reads like a request", meta_kind="skill"),
        user("[Request interrupted by user]"),
        user("summary goes here", **{"synthetic": True}),
    ])
    assert svc.store.snapshot(key).current_request.content == "the real request: fix the parser"
    with svc.store.locked(key) as tx:
        assert tx.last_user_message(batch=2).content == "the real request: fix the parser"  # across pages
    svc.runs.append_message(key, user("a newer request"))
    assert svc.store.snapshot(key).current_request.content == "a newer request"


def test_no_request_at_all(svc: Service, new_key) -> None:
    key = new_key("none")
    svc.runs.create_thread(key)
    svc.runs.append_messages(key, [Message("developer", "rules"), Message("user", "ctx", meta_kind="environment_context")])
    assert svc.store.snapshot(key).current_request is None
