"""cline: Cline, Roo Code and Kilo Code task folders. A Cline task (classic XML tool tags and a native
tool_use, text results, a summarize_task auto-compact recorded as a deleted range, a task
resumption leaving a call unanswered, a cut api_req_started); a Roo task (tool_use / tool_result
blocks, a non-destructive condense with its condense_context record, an orphan result); Kilo by its
folder; Roo's v2 history with a sliding-window truncation marker; a Cline truncation without a
summary; idempotent re-import through the service (SQLite and PostgreSQL), re-import after the task
grew, the tool's files left untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from engine.importers import MISSING_RESULT, ORPHAN, detect_format, parse

from .helpers import FIXTURES
from .service_helpers import service, stored

CLINE = FIXTURES / "cline" / "saoudrizwan.claude-dev" / "tasks" / "1764843000000"
ROO = FIXTURES / "roo" / "rooveterinaryinc.roo-cline" / "tasks" / "0b6e2f58-7c1d-4a3e-9f80-5d2c4b1a9e67"
CONDENSE = "3f2a9c1e-5b7d-4e0a-9c6b-2d8e1f4a7b30"
KILO = FIXTURES / "kilo" / "kilocode.kilo-code" / "tasks" / "5d1a8e3c-2f47-4b90-8c6e-7a0b1d2e3f45"
KILO_CONDENSE = "9c4e7a21-3b5d-4f08-a6c2-1e7d9b0f3a54"


@pytest.mark.parametrize("path", [CLINE, CLINE / "api_conversation_history.json", CLINE / "ui_messages.json",
                                  CLINE / "task_metadata.json", ROO, ROO / "api_conversation_history.json"])
def test_detected_from_the_folder_or_any_of_its_files(path: Path):
    assert detect_format(path) == "cline"
    (s,) = parse(path)
    assert s.source_file == str(path if path.is_dir() else path.parent)  # the folder is the session


def test_an_api_history_handed_over_as_text_is_cline_not_anthropic():
    text = (CLINE / "api_conversation_history.json").read_text()
    assert detect_format(text) == "cline"
    (s,) = parse(text)
    assert len(s.messages) == 15 and not s.usage  # no ui messages: no usage


def test_cline_task_messages_calls_and_text_results():
    (s,) = parse(CLINE)
    assert [(m.role, len(m.tool_calls), m.tool_name, m.is_error, m.meta_kind, m.repair) for m in s.messages] == [
        ("user", 0, None, False, None, None),
        ("assistant", 1, None, False, None, None),  # <read_file> in the text
        ("tool", 0, "read_file", False, None, None),  # "[read_file for 'cli.py'] Result:" + the next block
        ("user", 0, None, False, "environment_details", None),
        ("assistant", 1, None, False, None, None),  # <replace_in_file>
        ("tool", 0, "replace_in_file", False, None, None),
        ("assistant", 1, None, False, None, None),  # a native tool_use block, answered by a text result
        ("tool", 0, "execute_command", False, None, None),
        ("assistant", 1, None, False, None, None),  # <summarize_task>
        ("tool", 0, "summarize_task", False, None, None),
        ("assistant", 1, None, False, None, None),  # <execute_command>, then the task was interrupted
        ("tool", 0, "execute_command", False, None, MISSING_RESULT),
        ("user", 0, None, False, "resumption", None),  # [TASK RESUMPTION] is not a request
        ("assistant", 1, None, False, None, None),
        ("tool", 0, "attempt_completion", False, None, None),
    ]
    assert s.tool_call_count == 6
    read = s.messages[1].tool_calls[0]
    assert (read.name, json.loads(read.arguments), read.synthetic_id) == ("read_file", {"path": "cli.py"}, True)
    assert s.messages[1].text == "<thinking>\nI need to see how cli.py parses its arguments.\n</thinking>"  # the tag left
    assert s.messages[6].tool_calls[0].id == "toolu_01VxQ7" and s.messages[7].tool_call_id == "toolu_01VxQ7"
    assert s.messages[2].text.startswith("import argparse") and s.messages[2].tool_call_id == s.messages[1].tool_calls[0].id
    assert (s.title, s.model, s.source_session_id, s.extra["tool"]) == (
        "Add a --verbose flag to cli.py that prints each step", "claude-sonnet-4-5-20250929", "1764843000000", "cline")


def test_cline_usage_from_api_req_started_and_the_cut_record_named():
    (s,) = parse(CLINE)
    # on the assistant message that answered each request (conversationHistoryIndex + 1); prompt = in + cache
    assert [(u.position, u.prompt_tokens, u.completion_tokens, u.cache_read_tokens, u.cache_creation_tokens) for u in s.usage] == [
        (1, 9812, 85, None, 9800), (4, 11004, 160, 9800, 1200), (6, 11303, 70, 11000, 300),
        (8, 11503, 420, 11300, 200), (10, 2400, 60, None, None), (13, 2500, 40, None, None)]
    assert [str(w) for w in s.warnings] == [
        f"{CLINE}: ui_messages.json: api_req_started at ts 1764843001350 holds no JSON; its usage is not read"]
    assert s.extra["cost"] == pytest.approx(0.0809)


def test_cline_summarize_task_is_a_recorded_compaction_of_the_deleted_range():
    (s,) = parse(CLINE)
    (c,) = s.compactions
    # conversationHistoryDeletedRange [1, 6]: api messages 1..6 (our messages 1..7) dropped, after the result
    assert (c.source, c.kind, c.trigger, c.position, c.replaced_start, c.replaced_end) == ("cline", "summary", "auto", 10, 1, 8)
    assert c.summary.startswith("1. Previous Conversation: the user asked for a --verbose flag")
    assert c.tokens_before == 3 + 420 + 200 + 11300  # the context of the last request before it
    assert c.forgotten_ids[0] == "1764843000200" and len(c.forgotten_ids) == 7
    assert dict(c.details) == {"strategy": "summarize_task", "deleted_range": [1, 6], "replaced_messages": 6}


def test_roo_task_native_blocks_condense_and_orphan():
    (s,) = parse(ROO)
    assert s.extra["tool"] == "roo" and s.title == "Fix the failing date parser test"
    assert [(m.role, m.tool_name, m.is_error, m.repair) for m in s.messages if m.role == "tool"] == [
        ("tool", "read_file", False, None), ("tool", "apply_diff", False, None), ("tool", "execute_command", True, None),
        ("tool", "apply_diff", False, None), ("tool", "attempt_completion", False, None), ("tool", None, False, ORPHAN)]
    assert s.tool_call_count == 5 and len(s.messages) == 14
    assert not any("Condensing conversation context" in m.text for m in s.messages)  # the summary is not a message
    (c,) = s.compactions
    assert (c.kind, c.trigger, c.position, c.replaced_start, c.replaced_end, c.source_id) == (
        "summary", None, 5, 1, 5, f"condense:{CONDENSE}")
    assert c.summary.startswith("1. Previous Conversation: the user asked to fix the failing date parser test.")
    assert c.tokens_before == 15480 and dict(c.details) == {"replaced_messages": 3, "newContextTokens": 3900, "cost": 0.0213}
    assert c.forgotten_ids == ("1764900000200", "1764900000300:toolu_r1", "1764900000300", "1764900000400")
    # usage matched by time (Roo's records carry no conversationHistoryIndex)
    assert [(u.position, u.prompt_tokens) for u in s.usage] == [(1, 14010), (4, 14906), (6, 15206), (8, 3900), (11, 4304)]


def test_kilo_is_named_by_its_extension_folder(tmp_path: Path):
    task = tmp_path / "kilocode.kilo-code" / "tasks" / "7f00c2d1-0000-4000-8000-000000000001"
    shutil.copytree(ROO, task)
    (s,) = parse(task)
    assert s.extra["tool"] == "kilo" and len(s.compactions) == 1


def test_kilo_fresh_start_condense_is_a_recorded_compaction():
    """Kilo's condense ("fresh start"): the summary is a *user* api message with ``isSummary`` appended
    after every message it replaced, all of them tagged ``condenseParent``; text blocks ``## Conversation
    Summary`` (+ the environment details for an automatic condense)."""
    assert detect_format(KILO) == "cline"
    (s,) = parse(KILO)
    assert (s.extra["tool"], s.title, s.source_session_id) == ("kilo", "Add a --verbose flag to cli.py", KILO.name)
    assert [(m.role, m.tool_name, m.meta_kind, m.repair) for m in s.messages] == [
        ("user", None, None, None), ("assistant", None, None, None), ("tool", "read_file", None, None),
        ("user", None, "environment_details", None), ("assistant", None, None, None), ("tool", "apply_diff", None, None),
        ("assistant", None, None, None), ("tool", "execute_command", None, None),
        ("assistant", None, None, None), ("tool", "attempt_completion", None, MISSING_RESULT)]  # the task ended asking
    assert s.tool_call_count == 4 and not any("Conversation Summary" in m.text for m in s.messages)
    (c,) = s.compactions
    assert (c.kind, c.trigger, c.position, c.replaced_start, c.replaced_end, c.source_id) == (
        "summary", None, 6, 0, 6, f"condense:{KILO_CONDENSE}")
    assert c.summary.startswith("## Conversation Summary\n1. Previous Conversation: the user asked for a --verbose flag")
    assert c.tokens_before == 12760 and dict(c.details) == {"replaced_messages": 5, "newContextTokens": 2950, "cost": 0.0172}
    assert c.forgotten_ids[0] == "1764950000000" and len(c.forgotten_ids) == 6  # the task itself was condensed too
    assert [(u.position, u.prompt_tokens) for u in s.usage] == [(1, 11812), (4, 12408), (6, 2950), (8, 3156)]


def test_kilo_import_is_idempotent_and_keeps_its_condense(tmp_path: Path):
    before = _digest(KILO)
    key = f"cline:{KILO.name}"
    with service(f"sqlite:///{tmp_path / 'k.db'}", tmp_path) as svc:
        (r,) = svc.imports.import_file(KILO)
        assert (r.thread, r.messages, r.tool_calls, r.compactions, r.requests) == (key, 10, 4, 1, 4)
        (again,) = svc.imports.import_file(KILO / "ui_messages.json")
        assert (again.messages, again.compactions, again.requests, again.already_stored) == (0, 0, 0, 10)
        (c,) = svc.reads.source_compactions(key)
        assert (c.source, c.tokens_before, c.summary[:22]) == ("cline", 12760, "## Conversation Summar")
        assert len(stored(svc, key)) == 10
    assert _digest(KILO) == before


def _write(folder: Path, api, ui=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "api_conversation_history.json").write_text(json.dumps(api))
    if ui is not None:
        (folder / "ui_messages.json").write_text(json.dumps(ui))
    return folder


def test_roo_v2_history_and_a_sliding_window_truncation(tmp_path: Path):
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "<task>\nlist the repo\n</task>"}], "ts": 10},
        {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1", "toolName": "list_files", "input": {"path": "."}}],
         "ts": 20, "truncationParent": "t1"},
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "list_files",
                                      "output": {"type": "text", "value": "a.py\nb.py"}}], "ts": 30, "truncationParent": "t1"},
        {"role": "user", "content": "[Sliding window truncation: 2 messages hidden to reduce context]", "ts": 35,
         "isTruncationMarker": True, "truncationId": "t1"},
        {"type": "reasoning", "encrypted_content": "gAAAA…", "id": "rs_1"},
        {"role": "assistant", "content": [{"type": "reasoning", "text": "two files"},
                                          {"type": "tool-call", "toolCallId": "c2", "toolName": "read_file", "input": {"path": "a.py"}}], "ts": 40},
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c2", "toolName": "read_file",
                                      "output": {"type": "error-text", "value": "ENOENT"}}], "ts": 50},
    ]
    ui = [{"ts": 34, "type": "say", "say": "sliding_window_truncation",
           "contextTruncation": {"truncationId": "t1", "messagesRemoved": 2, "prevContextTokens": 9000, "newContextTokens": 5000}}]
    task = _write(tmp_path / "rooveterinaryinc.roo-cline" / "tasks" / "v2", {"version": 2, "messages": msgs}, ui)
    assert detect_format(task) == "cline"
    (s,) = parse(task)
    assert [(m.role, m.tool_name, m.is_error) for m in s.messages] == [
        ("user", None, False), ("assistant", None, False), ("tool", "list_files", False),
        ("assistant", None, False), ("tool", "read_file", True)]
    assert s.messages[2].text == "a.py\nb.py" and s.messages[3].reasoning[0].text == "two files"
    assert dict(s.skipped) == {"reasoning_item": 1}
    (c,) = s.compactions
    assert (c.trigger, c.position, c.replaced_start, c.replaced_end, c.tokens_before) == ("auto", 3, 1, 3, 9000)
    assert c.summary.startswith("[Sliding window truncation") and c.details["newContextTokens"] == 5000


def test_cline_truncation_without_a_summary_and_a_damaged_ui_file(tmp_path: Path):
    api = json.loads((CLINE / "api_conversation_history.json").read_text())[:7]  # no summarize_task
    ui = [{"ts": 1764843000950, "type": "say", "say": "api_req_started", "conversationHistoryIndex": 6,
           "conversationHistoryDeletedRange": [1, 2], "text": json.dumps({"tokensIn": 5, "tokensOut": 9})}]
    task = _write(tmp_path / "tasks" / "1", api, ui)
    (s,) = parse(task)
    (c,) = s.compactions
    assert (c.trigger, c.replaced_start, c.replaced_end, c.details["strategy"]) == ("auto", 1, 4, "truncation")
    assert "keeps no summary" in c.summary
    (task / "ui_messages.json").write_text('[{"ts": 1, "type": "say"')  # cut while being written
    (s,) = parse(task)
    assert len(s.messages) == 8 and not s.compactions and "ui_messages.json: not JSON" in str(s.warnings[0])


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() + str(p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_import_and_reimport_leave_the_task_folder_untouched(url: str, tmp_path: Path):
    before = _digest(CLINE)
    with service(url, tmp_path) as svc:
        (first,) = svc.imports.import_file(CLINE)
        assert (first.thread, first.messages, first.tool_calls, first.compactions, first.requests) == (
            "cline:1764843000000", 15, 6, 1, 6)
        (again,) = svc.imports.import_file(CLINE / "api_conversation_history.json")  # any file of the folder: the same thread
        assert (again.messages, again.compactions, again.requests, again.already_stored) == (0, 0, 0, 15)
        (c,) = svc.reads.source_compactions("cline:1764843000000")
        assert (c.source, c.trigger, c.tokens_before, c.summary[:24]) == ("cline", "auto", 11923, "1. Previous Conversation")
        assert [m.role for m in stored(svc, "cline:1764843000000")][:3] == ["user", "assistant", "tool"]
        (roo,) = svc.imports.import_file(ROO)
        assert (roo.thread, roo.messages, roo.compactions, roo.requests) == (f"cline:{ROO.name}", 14, 1, 5)
    assert _digest(CLINE) == before


def test_reimport_after_the_task_grew(tmp_path: Path):
    """The equivalent of --follow for a task folder (rewritten whole as the task goes on): the
    re-import adds the new messages, requests and the compaction, nothing twice."""
    api = json.loads((CLINE / "api_conversation_history.json").read_text())
    ui = json.loads((CLINE / "ui_messages.json").read_text())
    task = tmp_path / "saoudrizwan.claude-dev" / "tasks" / "1764843000000"
    shutil.copytree(CLINE, task)
    _write(task, api[:7], [r for r in ui if r["ts"] < 1764843000700])
    with service(f"sqlite:///{tmp_path / 'g.db'}", tmp_path) as svc:
        (r1,) = svc.imports.import_file(task)
        assert (r1.messages, r1.compactions, r1.requests) == (8, 0, 3)
        _write(task, api, ui)
        (r2,) = svc.imports.import_file(task)
        assert (r2.messages, r2.compactions, r2.requests, r2.already_stored) == (7, 1, 3, 8)
        assert len(stored(svc, "cline:1764843000000")) == 15 and len(svc.reads.source_compactions("cline:1764843000000")) == 1


def test_default_locations_find_task_folders_on_a_fake_home(tmp_path: Path):
    from engine import discovery

    shutil.copytree(CLINE, tmp_path / ".config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks" / CLINE.name)
    shutil.copytree(ROO, tmp_path / "Library/Application Support/Cursor/User/globalStorage/rooveterinaryinc.roo-cline/tasks" / ROO.name)
    shutil.copytree(ROO, tmp_path / "AppData/Roaming/Code/User/globalStorage/kilocode.kilo-code/tasks/k1")
    found = sorted((d.tool, Path(d.path).name) for d in discovery.discover(home=tmp_path))
    assert found == [("cline", ROO.name), ("cline", "1764843000000"), ("cline", "k1")]
    changed = tmp_path / ".config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks" / CLINE.name / "ui_messages.json"
    assert discovery.session_for(changed, discovery.default_locations(tmp_path)) == (changed.parent, "cline")
    assert parse(changed.parent)[0].cwd == "/home/dev/tool"


def test_compaction_import_takes_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from engine.apps import cli

    assert cli.main(["import", "--db", str(tmp_path / "c.db"), "--json", str(CLINE), str(ROO / "ui_messages.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["thread"], r["format"], r["source"], r["compactions"]) for r in out["imported"]] == [
        ("cline:1764843000000", "cline", str(CLINE), 1), (f"cline:{ROO.name}", "cline", str(ROO), 1)]


def test_a_placeholder_tool_use_id_is_paired_by_order(tmp_path: Path):
    """Cline writes tool_result blocks with the id ``cline`` when it lost the provider's id."""
    api = [
        {"role": "user", "content": [{"type": "text", "text": "<task>\nls\n</task>"}], "ts": 1},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_A", "name": "list_files", "input": {"path": "."}},
                                          {"type": "tool_use", "id": "toolu_B", "name": "read_file", "input": {"path": "a"}}], "ts": 2},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "cline", "content": "a\nb"},
                                     {"type": "tool_result", "tool_use_id": "cline", "content": "x = 1"}], "ts": 3},
    ]
    (s,) = parse(_write(tmp_path / "tasks" / "9", api))
    assert [(m.tool_call_id, m.tool_name, m.repair, m.details.get("source_tool_use_id")) for m in s.messages[2:]] == [
        ("toolu_A", "list_files", None, "cline"), ("toolu_B", "read_file", None, "cline")]


def test_roo_history_item_gives_workspace_and_a_subtask_its_parent(tmp_path: Path):
    (s,) = parse(ROO / "history_item.json")
    assert (s.cwd, s.extra["mode"], s.extra["totalCost"], s.parent_session_id) == ("/home/dev/dates", "code", 0.11, None)
    child = tmp_path / "rooveterinaryinc.roo-cline" / "tasks" / "c0ffee00-0000-4000-8000-000000000002"
    shutil.copytree(ROO, child)
    item = json.loads((child / "history_item.json").read_text())
    (child / "history_item.json").write_text(json.dumps({**item, "id": child.name, "parentTaskId": ROO.name}))
    with service(f"sqlite:///{tmp_path / 'sub.db'}", tmp_path) as svc:
        (r,) = svc.imports.import_file(child)
        assert (r.thread, r.parent_thread) == (f"cline:{ROO.name}/{child.name}", f"cline:{ROO.name}")
