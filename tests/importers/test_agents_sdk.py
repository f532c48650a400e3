"""agents-sdk: OpenAI Agents SDK ``SQLiteSession`` databases. The committed fixture (built by the SDK's
own class, ``agents-sdk/make_fixture.py``) read exactly; databases the SDK writes in the test (two
sessions, a session still open with its ``-wal``), imported through the real service into SQLite and
PostgreSQL, re-imported idempotently, grown by the SDK and imported again; the foreign database is
never written (same bytes, no ``-wal`` / ``-shm`` left beside it)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from engine.importers import DATABASE_FORMATS, MISSING_RESULT_TEXT, ImportFormatError, ReasoningPart, detect_format, parse
from engine.store.foreign import ForeignDatabaseError, read_tables

from .helpers import FIXTURES, rows
from .service_helpers import service, stored

DB = FIXTURES / "agents-sdk" / "sessions.sqlite"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))


def _parsed(path: Path):
    return parse(path, "agents-sdk", tables=read_tables(path, DATABASE_FORMATS["agents-sdk"].pick))


def test_fixture_exactly():
    before = _digest(DB)
    trip, support = _parsed(DB)
    assert (trip.source_session_id, support.source_session_id) == ("trip-7f3a", "support-0c9e")
    assert rows(trip) == [
        ("user", "r1", "Find me a train from Lisbon to Porto tomorrow morning.", (), None, None, False, None, None),
        ("assistant", "r2", "", (("call_T1", "search_trains"), ("call_W1", "get_weather")), None, None, False, None, None),
        ("tool", "r5", "07:09 AP 121 (2h49m); 08:39 IC 521 (3h15m)", (), "call_T1", "search_trains", False, None, None),
        ("tool", "r6", "Porto tomorrow: 16C, light rain", (), "call_W1", "get_weather", False, None, None),
        ("assistant", "r7", "Take the 07:09 Alfa Pendular (2h49m); bring an umbrella.", (), None, None, False, None, None),
        ("user", "r8", "Book the 07:09.", (), None, None, False, None, None),
        ("assistant", "r9", "", (("call_B1", "book_ticket"),), None, None, False, None, None),
        ("tool", "r9#missing:call_B1", MISSING_RESULT_TEXT, (), "call_B1", "book_ticket", False, None, "missing_result"),
    ]
    assert trip.messages[1].parts == (ReasoningPart("Search trains, then check the weather.", summary=True),)
    assert trip.messages[1].source_ids == ("rs_01",) and trip.messages[1].tool_calls[0].source_id == "fc_01"
    assert trip.messages[0].timestamp == "2026-03-02T09:00:01Z"
    assert trip.extra["started"] == "2026-03-02T09:00:00Z" and trip.compactions == ()
    # empty call ids paired by order; the placeholder item ids dropped; the compaction item recorded
    assert rows(support) == [
        ("user", "r10", "My invoice is wrong.", (), None, None, False, None, None),
        ("user", "r12", "Can you resend it?", (), None, None, False, None, None),
        ("assistant", "r13", "", (("r13:call", "resend_invoice"),), None, None, False, None, None),
        ("tool", "r14", "sent to ana@example.com", (), "r13:call", "resend_invoice", False, None, None),
        ("assistant", "r15", "Done: resent to ana@example.com.", (), None, None, False, None, None),
    ]
    assert all("__fake_id__" not in m.source_ids for m in support.messages)
    (c,) = support.compactions
    assert (c.position, c.replaced_start, c.replaced_end, c.summary, c.source_id, dict(c.details)) == (
        1, 0, 1, None, "cmp_01", {"encrypted": True})
    assert dict(support.skipped) == {"malformed_row": 1}
    assert [str(w) for w in support.warnings] == [
        f"{DB}: session 'support-0c9e', row 16: message_data is not JSON (Unterminated string starting at); skipped"]
    assert _digest(DB) == before


def test_detected_from_the_schema_not_any_sqlite_file(tmp_path: Path):
    assert detect_format(DB) == "agents-sdk"
    other = tmp_path / "other.db"
    from engine.store import migrate  # our own store: SQLite, but no message_data table

    migrate(f"sqlite:///{other}")
    assert detect_format(other) is None
    with pytest.raises(ImportFormatError) as err:
        parse(DB)  # a database is read by engine.importing, which may open it
    assert err.value.code == "import_database"
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    with pytest.raises(ForeignDatabaseError):
        read_tables(junk, DATABASE_FORMATS["agents-sdk"].pick)


agents = pytest.importorskip("agents", reason="the openai-agents test extra writes the databases")


async def _write(path: Path, sid: str, batches: list[list[dict]], *, close: bool = True):
    from agents.memory import SQLiteSession

    s = SQLiteSession(sid, path)
    for items in batches:
        await s.add_items(items)
    if close:
        s.close()
    return s


QUESTION = [{"role": "user", "content": "What's 2+2? Use the calculator."}]
ANSWER = [
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "calc", "arguments": "{\"expr\": \"2+2\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "4"},
    {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "4.", "annotations": []}]},
]


def test_sdk_database_import_reimport_and_growth(url: str, tmp_path: Path):
    db = tmp_path / "agent" / "conversations.db"
    db.parent.mkdir()
    asyncio.run(_write(db, "alice", [QUESTION, ANSWER]))
    asyncio.run(_write(db, "bob", [[{"role": "user", "content": "hello"}]]))
    assert _siblings(db) == ["conversations.db"]
    before = _digest(db)
    with service(url, tmp_path) as svc:
        first = svc.imports.import_file(db)
        assert [(r.thread, r.format, r.messages, r.tool_calls, r.compactions) for r in first] == [
            ("agents-sdk:alice", "agents-sdk", 4, 1, 0), ("agents-sdk:bob", "agents-sdk", 1, 0, 0)]
        msgs = stored(svc, "agents-sdk:alice")
        assert [(m.role, m.content) for m in msgs] == [("user", "What's 2+2? Use the calculator."), ("assistant", ""),
                                                      ("tool", "4"), ("assistant", "4.")]
        assert msgs[1].tool_calls[0].name == "calc" and msgs[2].tool_call_id == "call_1"
        info = svc.reads.thread("agents-sdk:alice")
        assert (info.source_format, info.source_session_id) == ("agents-sdk", "alice")
        again = svc.imports.import_file(db)
        assert [(r.messages, r.already_stored) for r in again] == [(0, 4), (0, 1)]
        # the program goes on: the SDK appends, a re-import adds only the new rows
        asyncio.run(_write(db, "alice", [[{"role": "user", "content": "And 3+3?"}]]))
        grown = svc.imports.import_file(db)
        assert [(r.thread, r.messages) for r in grown] == [("agents-sdk:alice", 1), ("agents-sdk:bob", 0)]
        assert stored(svc, "agents-sdk:alice")[-1].content == "And 3+3?"
    assert _siblings(db) == ["conversations.db"]
    assert _digest(db) != before  # the SDK wrote; we did not:
    after_sdk = _digest(db)
    with service(url, tmp_path) as svc:
        svc.imports.import_file(db)
    assert _digest(db) == after_sdk and _siblings(db) == ["conversations.db"]


def test_a_session_still_open_is_read_with_its_wal_and_left_untouched(tmp_path: Path):
    db = tmp_path / "live.db"
    session = asyncio.run(_write(db, "live", [QUESTION, ANSWER], close=False))
    try:
        assert (tmp_path / "live.db-wal").exists()  # the items are still in the write-ahead log
        files = {p.name: _digest(p) for p in tmp_path.iterdir() if p.name.startswith("live.db") and not p.name.endswith("-shm")}
        with service(f"sqlite:///{tmp_path / 'store.db'}", tmp_path) as svc:
            (r,) = svc.imports.import_file(db)
            assert (r.thread, r.messages, r.tool_calls) == ("agents-sdk:live", 4, 1)
        assert {p.name: _digest(p) for p in tmp_path.iterdir() if p.name in files} == files
    finally:
        session.close()


def test_discovered_in_an_added_folder_and_followed_while_the_program_writes(tmp_path: Path):
    """Follow all over an added folder: a database the SDK creates is imported, and so are the items it
    appends while its session stays open (they go to the ``-wal`` file, the database file itself does
    not change until a checkpoint)."""
    import time

    from engine.discovery import discover

    home, folder = tmp_path / "home", tmp_path / "agent-data"
    home.mkdir()
    folder.mkdir()
    with service(f"sqlite:///{tmp_path / 'store.db'}", tmp_path) as svc:
        follower = svc.imports.follow_sessions([str(folder)], home=str(home), debounce_ms=200)
        session = None
        try:
            def wait_for(n: int) -> float:
                start = time.monotonic()
                while time.monotonic() - start < 15.0:  # a generous bounded wait (the 2 s target is not a unit-test bound)
                    try:
                        if len(stored(svc, "agents-sdk:live")) >= n:
                            return time.monotonic() - start
                    except Exception:  # noqa: BLE001 - the thread does not exist yet (polled until the deadline)
                        pass
                    time.sleep(0.05)
                raise AssertionError(f"not {n} messages within 15 s: {follower.errors}")

            session = asyncio.run(_write(folder / "app.db", "live", [QUESTION], close=False))
            wait_for(1)
            asyncio.run(session.add_items(ANSWER + [{"role": "user", "content": "Thanks!"}]))
            assert (folder / "app.db-wal").exists()
            wait_for(5)  # (read as a file still being written: a trailing assistant message waits for what follows it)
            assert [m.role for m in stored(svc, "agents-sdk:live")] == ["user", "assistant", "tool", "assistant", "user"]
        finally:
            follower.stop()
            if session is not None:
                session.close()
    listed = discover([folder], home=home)
    assert [(d.tool, Path(d.path).name) for d in listed] == [("agents-sdk", "app.db")]


def test_a_change_of_the_wal_file_is_a_change_of_its_database(tmp_path: Path):
    """A program holding its connection open writes only the ``-wal`` file: follow all maps it to the
    database (a closed connection's writes show on the database file itself)."""
    from engine.discovery import folder_locations, session_for

    db = tmp_path / "app.db"
    session = asyncio.run(_write(db, "s", [QUESTION], close=False))
    try:
        wal = tmp_path / "app.db-wal"
        assert wal.exists()
        assert session_for(wal, folder_locations([tmp_path])) == (db, "agents-sdk")
    finally:
        session.close()
