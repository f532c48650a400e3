"""The store's data rules (issue 13) on SQLite and PostgreSQL: malformed rows planted with plain SQL
read as a typed ``corrupt_row`` naming table, id and column; the write door escapes NUL and refuses
lone surrogates and too-long keys the same on both backends; ``""`` is not a database URL; a broken
``policy`` setting is ``invalid_setting``; a read-only SQLite file opens read-only and writes nothing.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine.core.errors import EngineError
from engine.core.messages import Message, ToolCall
from engine.service import load_policies, open_service
from engine.store import NUL_ESCAPE, CorruptRow, InvalidDatabaseURL, InvalidSetting, ReadOnlyDatabase, Store, migrate
from tests import door_ops

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A Store on a private database of each backend (plants must not leak into other tests)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'rules.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    migrate(url)
    s = Store.open(url)
    yield s
    s.close()


def _pg(store: Store) -> bool:
    return not store.is_sqlite


def _sql(store: Store, sql: str, **params) -> None:
    """Plant with plain SQL (``{json}`` is the backend's JSON cast of ``:v``)."""
    sql = sql.replace("{json}", "CAST(:v AS JSON)" if _pg(store) else ":v")
    with store.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def _refused_on_pg(store: Store, key: str, sql: str, **params) -> None:
    """On PostgreSQL the malformed row cannot exist: its types refuse the write. Check that they do,
    and that the thread reads as before (the test for SQLite, where the row can exist, follows)."""
    before = store.snapshot(key)
    with pytest.raises(sa.exc.DBAPIError):
        _sql(store, sql, **params)
    after = store.snapshot(key)
    assert (after.messages, after.state) == (before.messages, before.state)


def _thread(store: Store) -> tuple[str, int, int]:
    """A thread with a call, its tool result and an answer: (key, tool message id, last id)."""
    key = f"t-{uuid.uuid4().hex[:8]}"
    store.create_conversation(key)
    ids = door_ops.append_messages(store, key, [
        Message(role="user", content="hi"),
        Message(role="assistant", content="", tool_calls=(ToolCall(id="c1", name="ls", arguments="{}"),)),
        Message(role="tool", content="a b", tool_call_id="c1", name="ls"),
        Message(role="assistant", content="done"),
    ])
    return key, ids[2], ids[3]


def _corrupt(call: Callable[[], object]) -> CorruptRow:
    with pytest.raises(CorruptRow) as info:
        call()
    exc = info.value
    assert exc.code == "corrupt_row" and "\n" not in exc.message
    return exc


# -- 1. reads ------------------------------------------------------------------------------------
def test_tool_row_without_call_id_is_corrupt_row(store: Store) -> None:
    key, tool_id, _ = _thread(store)
    _sql(store, "UPDATE messages SET tool_call_id = NULL WHERE id = :i", i=tool_id)
    for read in (lambda: store.snapshot(key), lambda: store.messages_page(key)):
        exc = _corrupt(read)
        assert (exc.table, exc.id, exc.column) == ("messages", tool_id, "tool_call_id")
        assert f"messages (id {tool_id}), column tool_call_id" in exc.message


def test_deeply_nested_metadata_is_corrupt_row(store: Store) -> None:
    key, _, last = _thread(store)
    depth = 5_000 if _pg(store) else 100_000  # PostgreSQL's own parser stops near 10k
    _sql(store, "UPDATE messages SET metadata = {json} WHERE id = :i", v='{"a":' * depth + "1" + "}" * depth, i=last)
    for read in (lambda: store.snapshot(key), lambda: store.messages_page(key)):
        exc = _corrupt(read)
        assert (exc.table, exc.id, exc.column) == ("messages", last, "metadata") and "nested too deeply" in exc.message


def test_non_json_metadata_is_corrupt_row_on_sqlite(store: Store) -> None:
    key, _, last = _thread(store)
    if _pg(store):
        return _refused_on_pg(store, key, "UPDATE messages SET metadata = CAST(:v AS JSON) WHERE id = :i", v="not json{", i=last)
    _sql(store, "UPDATE messages SET metadata = 'not json{' WHERE id = :i", i=last)
    exc = _corrupt(lambda: store.snapshot(key))
    assert (exc.table, exc.id, exc.column) == ("messages", last, "metadata") and "not valid JSON" in exc.message


def test_event_data_array_reads_as_empty_object(store: Store) -> None:
    key, _, _ = _thread(store)
    door_ops.add_event(store, key, "summary_rejected", {"reason": "empty"})
    _sql(store, "UPDATE compaction_events SET data = {json}", v="[1, 2]")
    assert [e.data for e in store.events(key)] == [{}]


def test_tools_object_is_corrupt_for_the_snapshot(store: Store) -> None:
    key, _, _ = _thread(store)
    _sql(store, "UPDATE conversations SET tools = {json} WHERE thread_key = :k", v='{"a": 1}', k=key)
    exc = _corrupt(lambda: store.snapshot(key))
    assert (exc.table, exc.column) == ("conversations", "tools")
    assert store.conversation_config(key)[1] == {"a": 1}  # as stored: `compaction check` reports it


def test_list_threads_marks_a_broken_thread_and_lists_the_others(store: Store) -> None:
    good, _, _ = _thread(store)
    bad, _, _ = _thread(store)
    if _pg(store):  # PostgreSQL's types refuse a text count: a broken generation the same way is impossible too
        _sql(store, "UPDATE conversations SET tools = {json} WHERE thread_key = :k", v='{"a": 1}', k=bad)
        assert {t.key for t in store.list_threads() if t.error is None} == {good, bad}
        return
    _sql(store, "UPDATE conversations SET message_count = 'abc' WHERE thread_key = :k", k=bad)
    by_key = {t.key: t for t in store.list_threads()}
    assert by_key[good].error is None and by_key[good].message_count == 4
    assert "conversations" in by_key[bad].error and "message_count" in by_key[bad].error
    exc = _corrupt(lambda: store.thread(bad))
    assert exc.column == "message_count"


@pytest.mark.parametrize("plant,table", [
    ("UPDATE conversations SET updated_at = 'garbage' WHERE thread_key = :k", "conversations"),
    ("UPDATE compaction_state SET generation = 'x' WHERE conversation_id = (SELECT id FROM conversations WHERE thread_key = :k)", "compaction_state"),
])
def test_sqlite_only_plants_do_not_stop_the_thread_list(store: Store, plant: str, table: str) -> None:
    good, _, _ = _thread(store)
    bad, _, _ = _thread(store)
    if _pg(store):
        return _refused_on_pg(store, bad, plant, k=bad)
    _sql(store, plant, k=bad)
    by_key = {t.key: t for t in store.list_threads()}
    assert by_key[good].error is None
    assert by_key[bad].error and by_key[bad].error.startswith(f"corrupt row in {table}")
    _corrupt(lambda: store.thread(bad))


def test_invalid_utf8_is_corrupt_row_not_cannot_connect(store: Store) -> None:
    key, _, last = _thread(store)
    if _pg(store):
        return _refused_on_pg(store, key, "UPDATE messages SET content = convert_from(decode('41fffe42', 'hex'), 'UTF8') WHERE id = :i", i=last)
    _sql(store, "UPDATE messages SET content = CAST(x'41fffe42' AS TEXT) WHERE id = :i", i=last)
    exc = _corrupt(lambda: store.snapshot(key))
    assert exc.column == "content" and "UTF-8" in exc.message


# -- 2. writes: the same rules on both backends ----------------------------------------------------
def test_nul_is_stored_escaped_on_both_backends(store: Store) -> None:
    key = f"t-{uuid.uuid4().hex[:8]}"
    store.create_conversation(key)
    door_ops.append_messages(store, key, [
        Message(role="user", content="a\x00b"),
        Message(role="assistant", content="", tool_calls=(ToolCall(id="c1", name="cat", arguments='{"p": "x\\u0000"}'),)),
        Message(role="tool", content="out\x00put", tool_call_id="c1", name="cat", metadata={"k": "v\x00"}),
    ])
    got = store.snapshot(key).messages
    assert [m.content for m in got] == [f"a{NUL_ESCAPE}b", "", f"out{NUL_ESCAPE}put"]
    assert got[2].metadata == {"k": "v\x00"}  # JSON keeps NUL as its escape: lossless on both


@pytest.mark.parametrize("message", [
    Message(role="user", content="a\ud800b"),
    Message(role="user", content="ok", metadata={"deep": "x\udfff"}),
])
def test_lone_surrogates_are_refused_and_nothing_is_written(store: Store, message: Message) -> None:
    key = f"t-{uuid.uuid4().hex[:8]}"
    store.create_conversation(key)
    with pytest.raises(EngineError) as info:
        door_ops.append_messages(store, key, [Message(role="user", content="first"), message])
    assert info.value.code == "invalid_message" and "surrogate" in info.value.message
    assert store.message_count(key) == 0


def test_deep_metadata_is_refused_at_the_door(store: Store) -> None:
    key = f"t-{uuid.uuid4().hex[:8]}"
    store.create_conversation(key)
    deep: dict = {}
    for _ in range(100_000):
        deep = {"a": deep}
    with pytest.raises(EngineError) as info:
        door_ops.append_message(store, key, Message(role="user", content="x", metadata=deep))
    assert info.value.code == "invalid_message" and "nested deeper" in info.value.message


def test_long_keys_and_names_are_refused_before_the_database(store: Store) -> None:
    with pytest.raises(EngineError) as info:
        store.create_conversation("k" * 201)
    assert info.value.code == "invalid_thread_key" and "at most 200" in info.value.message
    key = f"t-{uuid.uuid4().hex[:8]}"
    store.create_conversation(key)
    door_ops.append_message(store, key, Message(role="assistant", content="", tool_calls=(ToolCall(id="c1", name="ls", arguments="{}"),)))
    with pytest.raises(EngineError) as info:
        door_ops.append_message(store, key, Message(role="tool", content="x", tool_call_id="c1", name="n" * 300))
    assert info.value.code == "invalid_message" and "message name" in info.value.message
    assert store.message_count(key) == 1


def test_event_data_with_surrogates_and_nul_is_recorded(store: Store) -> None:
    key = f"t-{uuid.uuid4().hex[:8]}"
    store.create_conversation(key)
    door_ops.add_event(store, key, "summary_rejected", {"error_message": "bad \ud800 reply\x00"})
    assert store.events(key)[0].data == {"error_message": f"bad \ufffd reply{NUL_ESCAPE}"}


# -- 3. URLs and settings ------------------------------------------------------------------------
def test_empty_url_is_an_error() -> None:
    for url in ("", "   "):
        with pytest.raises(InvalidDatabaseURL):
            Store.open(url)
        with pytest.raises(InvalidDatabaseURL):
            open_service(url)


@pytest.mark.parametrize("value", ["not json", "[1, 2]", '{"nonsense": 1}'])
def test_broken_policy_setting_is_invalid_setting(store: Store, value: str) -> None:
    store.put_setting("policy", {})
    if value == "not json" and _pg(store):
        with pytest.raises(sa.exc.DBAPIError):  # its json type refuses the text: the setting cannot break
            _sql(store, "UPDATE settings SET value = CAST(:v AS JSON) WHERE key = 'policy'", v=value)
        load_policies(store)
        return
    _sql(store, "UPDATE settings SET value = " + ("{json}" if value != "not json" else ":v") + " WHERE key = 'policy'", v=value)
    with pytest.raises(InvalidSetting) as info:
        load_policies(store)
    assert info.value.code == "invalid_setting" and "'policy'" in info.value.message and "\n" not in info.value.message


# -- 4. read-only SQLite -------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["file", "directory"])
def test_read_only_sqlite_opens_read_only_and_writes_nothing(tmp_path: Path, what: str) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    path = d / "ro.db"
    migrate(str(path))
    s = Store.open(str(path))
    key, _, _ = _thread(s)
    s.close()
    before = sorted(os.listdir(d)), path.read_bytes()
    target = path if what == "file" else d
    mode = target.stat().st_mode
    target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH | (stat.S_IXUSR if what == "directory" else 0))
    try:
        ro = Store.open(str(path))
        try:
            assert ro.read_only and not ro.writable
            assert [t.key for t in ro.list_threads()] == [key]
            assert len(ro.snapshot(key).messages) == 4
            with pytest.raises(ReadOnlyDatabase) as info:
                door_ops.append_message(ro, key, Message(role="user", content="more"))
            assert info.value.code == "read_only"
        finally:
            ro.close()
        assert (sorted(os.listdir(d)), path.read_bytes()) == before  # no -wal / -shm, nothing changed
    finally:
        target.chmod(mode)


def _summarize(store: Store, key: str, boundary: int, summary: str) -> None:
    with store.locked(key) as tx:
        msg = tx.message(boundary)
        assert msg is not None
        tx.persist_summary(expected_boundary=None, expected_boundary_hash=None, new_boundary=boundary,
                           new_boundary_hash=msg.content_hash(), summary=summary, summary_tokens=3, kind="summary",
                           trigger="manual")


def test_summary_with_nul_is_persisted_escaped_and_a_surrogate_is_refused(store: Store) -> None:
    key, tool_id, _ = _thread(store)
    with pytest.raises(EngineError) as info:
        _summarize(store, key, tool_id, "bad \udc00")
    assert info.value.code == "invalid_summary"
    assert store.compaction_state(key).generation == 0  # nothing was written
    _summarize(store, key, tool_id, "kept\x00this")
    state = store.compaction_state(key)
    assert (state.generation, state.summary) == (1, f"kept{NUL_ESCAPE}this")
    assert store.history(key)[0].summary == f"kept{NUL_ESCAPE}this"


def test_unparsable_message_timestamp_is_corrupt_row_on_sqlite(store: Store) -> None:
    key, _, last = _thread(store)
    if _pg(store):
        return _refused_on_pg(store, key, "UPDATE messages SET created_at = 'not a date' WHERE id = :i", i=last)
    _sql(store, "UPDATE messages SET created_at = 'not a date' WHERE id = :i", i=last)
    exc = _corrupt(lambda: store.messages_page(key))
    assert exc.message.startswith("corrupt row: a timestamp that cannot be read") and "not a date" in exc.message


def test_source_compaction_text_follows_the_rules(store: Store) -> None:
    key, _, _ = _thread(store)
    with store.locked(key) as tx:
        tx.record_source_compaction(source="codex", source_id="s1", summary="a\x00b")
    assert store.source_compactions(key)[0].summary == f"a{NUL_ESCAPE}b"
    with pytest.raises(EngineError) as info, store.locked(key) as tx:
        tx.record_source_compaction(source="codex", source_id="s" * 301, summary="x")
    assert info.value.code == "invalid_compaction" and "at most 300" in info.value.message
    assert len(store.source_compactions(key)) == 1


def test_threads_command_lists_a_broken_thread_as_unreadable_and_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from engine.apps.cli import main

    url = f"sqlite:///{tmp_path / 'broken.db'}"
    migrate(url)
    store = Store.open(url)
    try:
        good, _, _ = _thread(store)
        bad, _, _ = _thread(store)
        _sql(store, "UPDATE conversations SET message_count = 'abc' WHERE thread_key = :k", k=bad)
    finally:
        store.close()
    assert main(["threads", "--db", url, "--json"]) == 0
    rows = {r["thread"]: r for r in json.loads(capsys.readouterr().out)["threads"]}
    assert rows[good]["error"] is None and "corrupt row" in rows[bad]["error"]
    assert main(["threads", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "unreadable" in out and "cannot be read: corrupt row" in out and good in out
