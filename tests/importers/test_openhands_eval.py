"""openhands-eval: an evaluation output.jsonl, every instance a session (event-list and SDK-event
histories, an empty history), metrics as usage, condensations as recorded compactions, a cut line
named and skipped, idempotent re-import, follow of a run that appends instances."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.importers import MISSING_RESULT_TEXT, detect_format, parse

from .helpers import FIXTURES, rows
from .service_helpers import follow_while_growing, service, stored

OUT = FIXTURES / "openhands-eval" / "swe-bench-lite-run_1" / "output.jsonl"
KEYS = ["openhands-eval:calc__calc-7@51c2e7a8", "openhands-eval:dateparse__dateparse-31#2@a2cc27be",
        "openhands-eval:calc__calc-9@51c2e7a8"]


def test_detected_from_content_and_every_instance_is_a_session():
    assert detect_format(OUT) == "openhands-eval"
    sessions = parse(OUT)
    assert [f"{s.format}:{s.source_session_id}" for s in sessions] == KEYS
    assert [(len(s.messages), s.tool_call_count, len(s.compactions), len(s.usage)) for s in sessions] == [
        (8, 4, 1, 3), (6, 3, 1, 2), (1, 0, 0, 0)]
    assert [s.title for s in sessions] == ["calc__calc-7", "dateparse__dateparse-31", "calc__calc-9"]
    assert sessions[2].extra["error"] == "Agent reached maximum iteration in headless mode"
    assert sessions[1].extra["attempt"] == 2 and sessions[0].extra["agent_class"] == "CodeActAgent"


def test_event_list_history_with_parallel_calls_condensation_and_metric_usage():
    (s, _, _) = parse(OUT)
    assert [r[:6] for r in rows(s)] == [
        ("user", "1", s.messages[0].text, (), None, None),
        ("assistant", "3", "Let me look at the code and run the tests.",
         (("toolu_01", "execute_bash"), ("toolu_02", "str_replace_editor")), None, None),
        ("tool", "5", "F.\n1 failed, 1 passed in 0.02s", (), "toolu_01", "execute_bash"),
        ("tool", "6", "def add(a, b):\n    return a - b\n", (), "toolu_02", "str_replace_editor"),
        ("assistant", "8", "", (("toolu_03", "str_replace_editor"),), None, None),
        ("tool", "9", "The file /workspace/calc__calc-7/calc.py has been edited.", (), "toolu_03", "str_replace_editor"),
        ("assistant", "10", "Fixed: add() now adds.", (("toolu_04", "finish"),), None, None),
        ("tool", "10#missing:toolu_04", MISSING_RESULT_TEXT, (), "toolu_04", "finish"),
    ]
    assert s.messages[0].text.startswith("<uploaded_files>")  # the instruction is the history's first message
    (c,) = s.compactions
    assert (c.position, c.replaced_start, c.replaced_end) == (4, 1, 4)
    assert c.summary == "pytest: 1 failure in test_add; calc.add returns a - b." and c.forgotten_ids == ("3", "4", "5", "6")
    # chatcmpl-e1 carries its own usage; chatcmpl-e2 / -e3 come from metrics.token_usages
    assert [(u.position, u.prompt_tokens, u.cache_read_tokens, u.cache_creation_tokens, u.response_id) for u in s.usage] == [
        (1, 6200, 5100, None, "chatcmpl-e1"), (4, 4480, 4100, 300, "chatcmpl-e2"), (6, 5500, 4300, 0, "chatcmpl-e3")]
    assert s.model == "litellm_proxy/claude-sonnet-4-5-20250929" and s.system_prompt.startswith("You are OpenHands")


def test_sdk_event_history_gets_the_instruction_and_its_condensation():
    (_, s, _) = parse(OUT)
    assert [(m.role, m.source_key[:8], m.call_ids, m.tool_call_id, m.repair) for m in s.messages] == [
        ("user", "instruct", (), None, None),
        ("assistant", "7e1c0002", ("call_A1", "call_A2"), None, None),
        ("tool", "7e1c0004", (), "call_A1", None),
        ("tool", "7e1c0005", (), "call_A2", None),
        ("assistant", "7e1c0007", ("call_A3",), None, None),
        ("tool", "7e1c0007", (), "call_A3", "missing_result"),
    ]
    assert s.messages[0].source_key == "instruction" and "parse_date() ignores the timezone" in s.messages[0].text
    (c,) = s.compactions
    assert (c.position, c.replaced_start, c.replaced_end, len(c.forgotten_ids)) == (4, 1, 4, 4)
    assert "dropping the zone" in c.summary
    # resp_cond is the condenser's own call: no message, no record
    assert [(u.position, u.prompt_tokens, u.reasoning_tokens, u.context_window) for u in s.usage] == [
        (1, 5200, 192, 272000), (4, 3000, 64, 272000)]


def test_a_cut_line_is_named_and_the_other_instances_are_kept():
    sessions = parse(OUT)
    assert [str(w) for w in sessions[0].warnings] == [
        f"{OUT}:2: malformed JSON: Unterminated string starting at (column 139); this instance is skipped"]
    assert all(not s.warnings for s in sessions[1:])


def test_import_writes_every_instance_and_reimport_adds_nothing(url: str, tmp_path: Path):
    with service(url, tmp_path) as svc:
        first = svc.imports.import_file(OUT)
        assert [(r.thread, r.messages, r.tool_calls, r.compactions, r.requests) for r in first] == [
            (KEYS[0], 8, 4, 1, 3), (KEYS[1], 6, 3, 1, 2), (KEYS[2], 1, 0, 0, 0)]
        again = svc.imports.import_file(OUT)
        assert [(r.messages, r.compactions, r.requests, r.already_stored) for r in again] == [
            (0, 0, 0, 8), (0, 0, 0, 6), (0, 0, 0, 1)]
        assert [len(stored(svc, k)) for k in KEYS] == [8, 6, 1]
        (c,) = svc.reads.source_compactions(KEYS[0])
        assert c.source == "openhands-eval" and c.summary.startswith("pytest: 1 failure")
        assert svc.reads.thread(KEYS[1]).source_format == "openhands-eval"


def test_follow_picks_up_instances_as_the_run_appends_them(tmp_path: Path):
    lines = OUT.read_bytes().splitlines(keepends=True)
    target = tmp_path / "output.jsonl"
    target.write_bytes(lines[0])
    last = lines[3]
    with service(f"sqlite:///{tmp_path / 'f.db'}", tmp_path) as svc:
        reports = follow_while_growing(svc, target, [lines[2], last[:100], last[100:]])
        assert sorted(r.thread for r in reports) == sorted(KEYS)
        assert [len(stored(svc, k)) for k in KEYS] == [8, 6, 1]


def test_a_single_instance_document_is_read_too(tmp_path: Path):
    import json
    obj = json.loads(OUT.read_bytes().splitlines()[3])
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(obj, indent=2))
    assert detect_format(path) == "openhands-eval"
    (s,) = parse(path)
    assert s.source_session_id == "calc__calc-9@51c2e7a8" and len(s.messages) == 1
    shutil.rmtree(tmp_path / "wd", ignore_errors=True)
