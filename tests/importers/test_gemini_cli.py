"""gemini-cli: a JSONL session (re-appended messages, a chat compression rebuilt by $set, a rewind, a
cut line), a legacy one-document session, a saved chat holding a state snapshot; idempotent
re-import through the service; follow of a growing session file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.importers import MISSING_RESULT, MISSING_RESULT_TEXT, ORPHAN, detect_format, parse

from .helpers import FIXTURES
from .service_helpers import follow_while_growing, service, stored

ROOT = FIXTURES / "gemini-cli" / "tmp" / "9b0e4f1c2d3a"
JSONL = ROOT / "chats" / "session-2026-11-30T10-02-8c1d2e3f.jsonl"
LEGACY = ROOT / "chats" / "session-2025-10-01T09-00-1a2b3c4d.json"
SAVED = ROOT / "checkpoint-refactor.json"
RESTORE = ROOT / "checkpoints" / "2026-11-30T10-03-05_412Z-util.py-replace.json"
KEY = "gemini-cli:8c1d2e3f-5a6b-4c7d-9e0f-1a2b3c4d5e6f"


@pytest.mark.parametrize("path", [JSONL, LEGACY, SAVED, RESTORE], ids=["jsonl", "legacy", "saved-chat", "restore"])
def test_detected_from_content(path):
    assert detect_format(path) == "gemini-cli"


def test_jsonl_session_messages_calls_and_results():
    (s,) = parse(JSONL)
    assert [(m.role, m.source_key[:4], len(m.tool_calls), m.tool_name, m.is_error, m.meta_kind) for m in s.messages] == [
        ("user", "e000", 0, None, False, "environment_context"),
        ("user", "a100", 0, None, False, None),
        ("assistant", "b100", 2, None, False, None),
        ("tool", "b100", 0, "read_file", False, None),
        ("tool", "b100", 0, "glob", False, None),
        ("assistant", "b200", 1, None, False, None),
        ("tool", "b200", 0, "run_shell_command", True, None),  # status error, response.error
        ("assistant", "b300", 1, None, False, None),
        ("tool", "c300", 0, "replace", False, None),  # answered by a functionResponse message, not twice
        ("assistant", "b400", 0, None, False, None),
        ("user", "a200", 0, None, False, None),
        ("assistant", "b500", 0, None, False, None),
    ]
    assert s.tool_call_count == 4 and not s.repaired("missing_result")
    assert s.messages[2].reasoning[0].text == "Planning the rename: Read util.py and find its importers first."
    # the re-appended b1 (now with tokens) replaced the first version; the rewound prompt is left out
    assert [(u.position, u.prompt_tokens, u.cache_read_tokens, u.reasoning_tokens) for u in s.usage] == [
        (2, 8120, 0, 210), (5, 9050, 6100, 0), (7, 9400, 8000, 0), (9, 9700, 8000, 0), (11, 2100, 0, 0)]
    assert dict(s.skipped) == {"info": 1, "rewound": 1}
    assert s.title == "Rename util.py to helpers.py" and s.model == "gemini-2.5-flash"
    assert [str(w) for w in s.warnings] == [f"{JSONL}:12: malformed JSON: Unterminated string starting at (column 36)"]


def test_chat_compression_is_a_recorded_compaction_not_messages():
    (s,) = parse(JSONL)
    (c,) = s.compactions
    assert (c.source, c.trigger, c.position, c.replaced_start, c.replaced_end) == ("gemini-cli", "auto", 11, 0, 10)
    assert c.summary.startswith("<state_snapshot>") and c.tokens_before == 9700  # the last prompt before it
    assert [m.text for m in c.kept] == ["Got it. Thanks for the additional context!"]
    assert len(c.forgotten_ids) == 7 and "a2000000-0000-4000-8000-000000000002" not in c.forgotten_ids  # kept
    assert all("<state_snapshot>" not in m.text for m in s.messages)


def test_legacy_document_with_a_cancelled_and_an_unanswered_call():
    (s,) = parse(LEGACY)
    assert [(m.role, m.source_key, m.is_error, m.repair) for m in s.messages] == [
        ("user", "L1", False, None), ("assistant", "L2", False, None),
        ("tool", "L2:read_file-1759309209000-1", True, None),
        ("tool", "L2#missing:list_directory-1759309209000-2", False, "missing_result"),
        ("user", "L4", False, None), ("assistant", "L5", False, None)]
    assert s.messages[3].text == MISSING_RESULT_TEXT and not s.compactions and dict(s.skipped) == {"error": 1}


def test_saved_chat_snapshot_is_a_compaction_and_calls_pair_by_name():
    (s,) = parse(SAVED)
    assert s.source_session_id == "checkpoint-refactor@9b0e4f1c2d3a"
    assert [(m.role, m.source_key, m.call_ids, m.tool_call_id, m.meta_kind) for m in s.messages] == [
        ("user", "C0", (), None, "environment_context"), ("assistant", "C1", (), None, None),
        ("user", "C4", (), None, None), ("assistant", "C5", ("gc-5-0",), None, None),
        ("tool", "C6:0", (), "gc-5-0", None), ("assistant", "C7", (), None, None)]
    (c,) = s.compactions
    assert (c.position, c.replaced_start, c.replaced_end, c.source_id) == (2, 2, 2, "C2")
    assert "Split app.py" in c.summary and [m.text for m in c.kept] == ["Got it. Thanks for the additional context!"]


def test_restore_checkpoint_pairs_the_clis_call_ids_and_repairs_the_pending_call():
    """A restore checkpoint is written when a file-editing tool waits for approval: its clientHistory
    ends with that call unanswered; the model's functionCall carries no id while the CLI's
    functionResponse carries its own ``<name>-<ms>-<hex>`` call id."""
    (s,) = parse(RESTORE)
    assert s.source_session_id == "2026-11-30T10-03-05_412Z-util.py-replace@9b0e4f1c2d3a"
    assert [(m.role, m.source_key, m.call_ids, m.tool_call_id, m.tool_name, m.meta_kind, m.repair) for m in s.messages] == [
        ("user", "C0", (), None, None, "environment_context", None),
        ("assistant", "C1", (), None, None, None, None),
        ("user", "C2", (), None, None, None, None),
        ("assistant", "C3", ("gc-3-0",), None, None, None, None),
        ("tool", "C4:0", (), "gc-3-0", "read_file", None, None),  # paired although the ids differ
        ("assistant", "C5", ("gc-5-0",), None, None, None, None),  # the call the checkpoint was taken for
        ("tool", "C5#missing:gc-5-0", (), "gc-5-0", "replace", None, MISSING_RESULT)]
    assert s.tool_call_count == 2 and s.repaired("missing_result") and not s.repaired(ORPHAN)
    assert s.messages[4].text.startswith("def slug(s):") and not s.compactions and not s.warnings
    assert (s.extra["checkpoint"], s.extra["pending_tool"], s.extra["commitHash"][:7]) == ("restore", "replace", "5e1f0c9")
    assert json.loads(s.messages[5].tool_calls[0].arguments)["file_path"] == "/home/dev/proj/util.py"


def test_a_manual_checkpoint_without_a_tool_call_is_read(tmp_path: Path):
    """``createManualCheckpoint`` writes ``{name, history, clientHistory, commitHash, messageId}`` (no toolCall)."""
    doc = json.loads(RESTORE.read_text())
    del doc["toolCall"]
    doc.update(name="before refactor", messageId="last_user_turn")
    p = tmp_path / "9b0e4f1c2d3a" / "checkpoints" / "2026-11-30T10-04-00_000Z-before_refactor.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(doc))
    assert detect_format(p) == "gemini-cli"
    (s,) = parse(p)
    assert len(s.messages) == 7 and s.extra["checkpoint_name"] == "before refactor" and "pending_tool" not in s.extra


def test_restore_checkpoint_reimport_is_idempotent(tmp_path: Path):
    key = "gemini-cli:2026-11-30T10-03-05_412Z-util.py-replace@9b0e4f1c2d3a"
    with service(f"sqlite:///{tmp_path / 'r.db'}", tmp_path) as svc:
        (r,) = svc.imports.import_file(RESTORE)
        assert (r.thread, r.messages, r.tool_calls, r.compactions) == (key, 7, 2, 0)
        (again,) = svc.imports.import_file(RESTORE)
        assert (again.messages, again.compactions, again.already_stored) == (0, 0, 7)
        msgs = stored(svc, key)
        assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "tool", "assistant", "tool"]


def test_import_is_idempotent_and_keeps_the_compaction(tmp_path: Path):
    with service(f"sqlite:///{tmp_path / 'g.db'}", tmp_path) as svc:
        (r,) = svc.imports.import_file(JSONL)
        assert (r.thread, r.messages, r.tool_calls, r.compactions, r.requests) == (KEY, 12, 4, 1, 5)
        (again,) = svc.imports.import_file(JSONL)
        assert (again.messages, again.compactions, again.requests, again.already_stored) == (0, 0, 0, 12)
        (c,) = svc.reads.source_compactions(KEY)
        assert (c.source, c.trigger, c.tokens_before) == ("gemini-cli", "auto", 9700)
        msgs = stored(svc, KEY)
        assert len(msgs) == 12 and msgs[-1].content == "Added the docstring."


def test_follow_a_growing_session_file(tmp_path: Path):
    lines = JSONL.read_bytes().splitlines(keepends=True)
    target = tmp_path / JSONL.name
    target.write_bytes(b"".join(lines[:4]))  # metadata, env context, $set, first prompt
    with service(f"sqlite:///{tmp_path / 'f.db'}", tmp_path) as svc:
        rest = lines[4:]
        follow_while_growing(svc, target, [b"".join(rest[:6]), rest[6][:20], rest[6][20:] + b"".join(rest[7:])])
        msgs = stored(svc, KEY)
        # all but the last reply (a reply may still gain calls or tokens while the file grows) and the compaction
        assert len(msgs) == 11 and msgs[-1].content == "Now add a docstring to slug()"
        assert len(svc.reads.source_compactions(KEY)) == 1
        (r,) = svc.imports.import_file(target)  # the finished file: only that reply is new
        assert (r.messages, r.already_stored) == (1, 11) and len(stored(svc, KEY)) == 12


def test_a_file_that_is_neither_is_refused(tmp_path: Path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert detect_format(p) != "gemini-cli"
