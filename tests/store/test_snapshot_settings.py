"""Snapshots for compaction, thread configuration under the lock, store-wide settings."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.views import Offload
from engine.store import Store


def test_configure_under_the_lock(store: Store, conv: str) -> None:
    tools = [{"type": "function", "function": {"name": "web_search"}}]
    with store.locked(conv) as tx:
        tx.configure(system_prompt="Be brief.", tools=tools)
    assert store.conversation_config(conv)[:2] == ("Be brief.", tuple(tools))
    with store.locked(conv) as tx:
        tx.configure(system_prompt="Be kind.")  # tools left as they are
    assert store.conversation_config(conv)[:2] == ("Be kind.", tuple(tools))


def test_last_user_message_wherever_the_boundary_is(store: Store, conv: str) -> None:
    with store.locked(conv) as tx:
        assert tx.last_user_message() is None
        ids = tx.append_messages([user("first"), assistant("a"), user("current request"), assistant("b")])
        last = tx.last_user_message()
    assert last is not None and (last.id, last.content) == (ids[2], "current request")


def test_snapshot_reads_state_messages_offloads_and_request_together(store: Store, conv: str) -> None:
    with store.locked(conv) as tx:
        tx.configure(system_prompt="sys", tools=[{"name": "query_kb"}])
        ids = tx.append_messages([
            user("old question"), assistant("old answer"),
            user("new question"), assistant("", ToolCall(id="c1", name="query_kb", arguments="{}")),
            tool_result("c1", "big " * 500, name="query_kb"),
        ])
        boundary_hash = tx.message(ids[1]).content_hash()  # type: ignore[union-attr]
        tx.persist_summary(
            expected_boundary=None, expected_boundary_hash=None, new_boundary=ids[1], new_boundary_hash=boundary_hash,
            summary="the old turn", summary_tokens=5, kind="summary", trigger="pressure",
        )
        digest = hashlib.sha256(b"big").hexdigest()
        tx.record_prune([Offload(ids[4], "query_kb", f"/w/{digest}", digest, "preview", 900, 10)], trigger="pressure")
        run = tx.start_run()
        locked_snap = tx.snapshot()
    snap = store.snapshot(conv)
    assert snap == locked_snap
    assert (snap.thread, snap.conversation_id, snap.system_prompt, snap.tools) == (conv, store.thread(conv).id, "sys", ({"name": "query_kb"},))
    assert (snap.state.boundary, snap.state.summary, snap.state.generation) == (ids[1], "the old turn", 2)
    assert [m.id for m in snap.messages] == ids[2:]
    assert snap.messages[-1].content == "big " * 500  # original content; the offload says how to show it
    assert set(snap.offloads) == {ids[4]} and snap.offloads[ids[4]].sha256 == digest
    assert snap.current_request is not None and snap.current_request.id == ids[2]
    assert snap.busy_reason == "running" and store.runs(conv)[0].id == run


def test_settings_round_trip_and_overwrite(store: Store, new_key: Callable[[str], str]) -> None:
    key = new_key("policy")
    assert store.get_setting(key) is None
    store.put_setting(key, {"threshold_ratio": 0.8, "models": {"gpt-4o": {"window": 128000}}})
    assert store.get_setting(key) == {"threshold_ratio": 0.8, "models": {"gpt-4o": {"window": 128000}}}
    store.put_setting(key, {"threshold_ratio": 0.7})
    assert store.get_setting(key) == {"threshold_ratio": 0.7}


def test_put_setting_survives_a_racing_first_write(store, monkeypatch) -> None:
    """Another writer inserts the same key between our read and our insert: we retry as an update."""
    import uuid

    from engine.store import models

    key = f"race-{uuid.uuid4().hex[:8]}"
    real_get = __import__("sqlalchemy.orm", fromlist=["Session"]).Session.get
    raced = []

    def get(self, entity, ident, *a, **kw):
        row = real_get(self, entity, ident, *a, **kw)
        if entity is models.Setting and ident == key and not raced:
            raced.append(True)
            store2 = type(store).open(store.url.render_as_string(hide_password=False))
            try:
                with store2._session(write=True) as s2:  # the other writer commits first
                    s2.add(models.Setting(key=key, value={"who": "other"}))
            finally:
                store2.close()
        return row

    if store.is_sqlite:
        import pytest

        pytest.skip("SQLite serialises writers with BEGIN IMMEDIATE: the race cannot happen")
    monkeypatch.setattr("sqlalchemy.orm.Session.get", get)
    store.put_setting(key, {"who": "us"})
    monkeypatch.undo()
    assert store.get_setting(key) == {"who": "us"}
