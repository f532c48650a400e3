"""The pressure check's quick path takes new user messages too (issue 24): the newest request among
them is the current request, a user message that is no request leaves the held one, and every
answer equals a cold measure (snapshot, current request, route). SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from engine.compaction.compactor import RunState
from engine.core.messages import Message, assistant, user
from tests import door_ops

from .conftest import finished_turns, new_thread, route
from .test_pressure_quick import POLICIES, assert_exact, full_reads


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def factory(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")


def test_new_user_messages_are_taken_by_the_quick_read(factory: Any, new_key: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = factory(policies=POLICIES), factory(policies=POLICIES)
    key = new_thread(a, new_key())
    route(a, key)
    finished_turns(a, key, 6)
    run = RunState(run_id=None)
    assert_exact(a, key, run)
    reads = full_reads(monkeypatch)
    old = a.snapshots.pressure_read(key)[0].current_request
    assert old is not None

    # a turn by a's own door (the rows it hands over) and one by b (read on the quick connection)
    for svc, text in ((a, "Now, who owns doc-7?"), (b, "And doc-8?")):
        door_ops.append_messages(svc.store, key, [user(text), assistant(f"Checking {text[-6:]}")])
        assert_exact(a, key, run)
        current = a.snapshots.pressure_read(key)[0].current_request
        assert current is not None and current.content == text
        assert current == a.store.snapshot(key, with_busy=False).current_request
    # a user message that is no request (meta): the current request stays
    door_ops.append_message(b.store, key, Message(role="user", content="<command-name>/clear</command-name>", meta_kind="command"))
    assert_exact(a, key, run)
    assert a.snapshots.pressure_read(key)[0].current_request == a.store.snapshot(key, with_busy=False).current_request
    assert a.snapshots.pressure_read(key)[0].current_request.content == "And doc-8?"  # type: ignore[union-attr]
    assert reads == []  # no whole read: only messages were appended
