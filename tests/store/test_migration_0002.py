"""Migration 0002 on a database made by the 0001 schema: every row survives the upgrade and reads
back through the store; the new columns are usable; the downgrade gives the 0001 schema back with
the rows (a developer message as a system message)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timezone

import sqlalchemy as sa

from engine.core.messages import Attachment, Message, Reasoning, ToolCall
from engine.store import Store, migrate, normalize_url
from engine.store.db import code_head, downgrade
from tests import door_ops


def _exec(url: str, sql: str, **params) -> list:
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.begin() as conn:
            res = conn.execute(sa.text(sql), params)
            return list(res) if res.returns_rows else []
    finally:
        engine.dispose()


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _fill_0001(url: str) -> None:
    """Rows in every 0001 table, written as a 0001 program would (plain SQL)."""
    _exec(
        url,
        "INSERT INTO conversations (thread_key, title, agent, provider, model, system_prompt, tools, message_count, "
        "last_message_id, created_at, updated_at) VALUES ('old', 'an old thread', 'a', 'openai', 'gpt-4o', 'be brief', "
        "'[]', 3, NULL, :now, :now)",
        now=NOW,
    )
    cid = _exec(url, "SELECT id FROM conversations WHERE thread_key = 'old'")[0][0]
    _exec(url, "INSERT INTO compaction_state (conversation_id, summary_tokens, generation, compact_count, updated_at) "
               "VALUES (:c, 0, 1, 0, :now)", c=cid, now=NOW)
    calls = json.dumps([{"id": "c1", "name": "search", "arguments": "{\"q\": 1}"}])
    for role, content, tc, tcid, name, meta in [
        ("user", "find it", None, None, None, None),
        ("assistant", "", calls, None, None, None),
        ("tool", "found: lots of text", None, "c1", "search", json.dumps({"aborted": False})),
    ]:
        _exec(url, "INSERT INTO messages (conversation_id, role, content, tool_calls, tool_call_id, name, metadata, run_id, created_at) "
                   "VALUES (:c, :r, :t, :tc, :tcid, :n, :m, NULL, :now)", c=cid, r=role, t=content, tc=tc, tcid=tcid, n=name, m=meta, now=NOW)
    ids = [r[0] for r in _exec(url, "SELECT id FROM messages WHERE conversation_id = :c ORDER BY id", c=cid)]
    _exec(url, "UPDATE conversations SET last_message_id = :m WHERE id = :c", m=ids[-1], c=cid)
    _exec(url, "INSERT INTO tool_offloads (conversation_id, message_id, tool_name, path, sha256, preview, original_tokens, "
               "preview_tokens, generation, created_at) VALUES (:c, :m, 'search', '/w/x', :sha, 'found…', 9, 3, 1, :now)",
          c=cid, m=ids[2], sha="a" * 64, now=NOW)
    _exec(url, "INSERT INTO compaction_history (conversation_id, kind, trigger, generation_before, generation_after, "
               "pruned_message_ids, created_at) VALUES (:c, 'prune', 'pressure', 0, 1, :p, :now)", c=cid, p=json.dumps([ids[2]]), now=NOW)
    _exec(url, "INSERT INTO compaction_events (conversation_id, kind, trigger, data, created_at) "
               "VALUES (:c, 'prune', 'pressure', '{}', :now)", c=cid, now=NOW)
    _exec(url, "INSERT INTO model_requests (conversation_id, step, provider, model, estimated_tokens, threshold, "
               "reported_prompt_tokens, reported_completion_tokens, outcome, created_at) "
               "VALUES (:c, 1, 'openai', 'gpt-4o', 100, 1000, 110, 5, 'ok', :now)", c=cid, now=NOW)
    _exec(url, "INSERT INTO runs (conversation_id, status, created_at) VALUES (:c, 'completed', :now)", c=cid, now=NOW)
    _exec(url, "INSERT INTO queued_requests (conversation_id, content, status, created_at) VALUES (:c, 'later', 'queued', :now)",
          c=cid, now=NOW)
    _exec(url, "INSERT INTO settings (key, value, updated_at) VALUES ('policy', '{\"context_window\": 9000}', :now)", now=NOW)


def _counts(url: str) -> dict[str, int]:
    tables = ["conversations", "messages", "tool_offloads", "compaction_history", "compaction_events", "model_requests",
              "runs", "queued_requests", "settings", "compaction_state"]
    return {t: _exec(url, f"SELECT count(*) FROM {t}")[0][0] for t in tables}


def test_upgrade_from_0001_keeps_every_row_and_reads_back(fresh_db: str) -> None:
    assert migrate(fresh_db, "0001") == (None, "0001")
    _fill_0001(fresh_db)
    before = _counts(fresh_db)
    assert migrate(fresh_db) == ("0001", code_head())
    assert _counts(fresh_db) == before
    store = Store.open(fresh_db)
    try:
        info = store.thread("old")
        assert (info.title, info.message_count, info.source_format, info.reported_context_window) == ("an old thread", 3, None, None)
        msgs = [s.message for s in store.messages_page("old")]
        assert [m.role for m in msgs] == ["user", "assistant", "tool"]
        assert msgs[1].tool_calls == (ToolCall("c1", "search", "{\"q\": 1}"),)
        assert msgs[2].name == "search" and msgs[2].is_error is False and msgs[2].reasoning == () and msgs[2].meta_kind is None
        assert set(store.offloads("old")) == {msgs[2].id}
        assert [h.kind for h in store.history("old")] == ["prune"]
        req = store.model_requests("old")[0]
        assert (req.reported_prompt_tokens, req.origin, req.reported_cache_read_tokens) == (110, "engine", None)
        assert store.get_setting("policy") == {"context_window": 9000}
        assert store.source_compactions("old") == []
        # the new columns work on the upgraded database
        store.create_conversation("new")
        door_ops.append_messages(store, "new", [
            Message("developer", "house rules"),
            Message("user", "<command-name>/clear</command-name>", meta_kind="command", source_key="u1"),
            Message("assistant", "ok", reasoning=(Reasoning("thinking", signature="sig"),),
                    attachments=(Attachment("image", media_type="image/png", byte_size=10, width=2, height=3),)),
        ])
        back = [s.message for s in store.messages_page("new")]
        assert back[0].role == "developer" and back[1].meta_kind == "command" and back[1].source_key == "u1"
        assert back[2].reasoning[0].signature == "sig" and back[2].attachments[0].width == 2
    finally:
        store.close()


def test_downgrade_to_0001_keeps_the_rows(fresh_db: str) -> None:
    migrate(fresh_db, "0001")
    _fill_0001(fresh_db)
    migrate(fresh_db)
    store = Store.open(fresh_db)
    try:
        door_ops.append_message(store, "old", Message("developer", "a developer note"))
    finally:
        store.close()
    before = _counts(fresh_db)
    assert downgrade(fresh_db, "0001") == (code_head(), "0001")
    assert _counts(fresh_db) == before  # the offload row too: no cascade from the rebuilt messages table
    roles = [r[0] for r in _exec(fresh_db, "SELECT role FROM messages ORDER BY id")]
    assert roles == ["user", "assistant", "tool", "system"]
    cols = {c["name"] for c in sa.inspect(sa.create_engine(normalize_url(fresh_db))).get_columns("messages")}
    assert "parts" not in cols and "source_key" not in cols
    assert migrate(fresh_db) == ("0001", code_head())  # and up again
    assert _counts(fresh_db) == before
