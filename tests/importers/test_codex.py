"""codex: a rollout with developer and injected-context messages, an image, reasoning, parallel
function calls, an exit-code error, a custom tool, a local shell call with no output, token counts
(repeats dropped), the context window, a compaction with replacement history, an orphan output, a
malformed line and unknown line / item types."""

from __future__ import annotations

import json

import pytest

from engine.importers import MISSING_RESULT_TEXT, ImagePart, ReasoningPart, parse

from .helpers import FIXTURES, rows

SID = "019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d"
ROLLOUT = FIXTURES / "codex" / "2026" / "11" / "30" / f"rollout-2026-11-30T10-00-00-{SID}.jsonl"


@pytest.fixture(scope="module")
def session():
    (s,) = parse(ROLLOUT)
    return s


def test_messages_exactly(session):
    out_a1 = json.dumps({"output": "cli.py:3:import argparse\n", "metadata": {"exit_code": 0, "duration_seconds": 0.1}})
    out_a2 = json.dumps({"output": "ls: cannot access 'tests': No such file or directory\n",
                         "metadata": {"exit_code": 2, "duration_seconds": 0.0}})
    assert rows(session) == [
        ("developer", "L2", "<permissions instructions>\nFilesystem sandboxing: workspace-write.\n</permissions instructions>",
         (), None, None, False, None, None),
        ("user", "L3", "# AGENTS.md instructions for /home/dev/app\n\n<INSTRUCTIONS>\nRun pytest before committing.\n"
         "</INSTRUCTIONS>", (), None, None, False, "user_instructions", None),
        ("user", "L4", "<environment_context>\n  <cwd>/home/dev/app</cwd>\n  <shell>bash</shell>\n</environment_context>",
         (), None, None, False, "environment_context", None),
        ("user", "L6", "Add a --json flag to the CLI, like in this mockup.", (), None, None, False, None, None),
        ("assistant", "L8", "", (("call_A1", "shell"), ("call_A2", "shell")), None, None, False, None, None),
        ("tool", "L13", out_a1, (), "call_A1", "shell", False, None, None),
        ("tool", "L14", out_a2, (), "call_A2", "shell", True, None, None),  # exit code 2
        ("assistant", "L17", "", (("call_P1", "apply_patch"),), None, None, False, None, None),
        ("tool", "L19", "Success. Updated the following files:\nM cli.py\n", (), "call_P1", "apply_patch", False, None,
         None),
        ("assistant", "L21", "", (("call_L1", "local_shell"),), None, None, False, None, None),
        ("tool", "L21#missing:call_L1", MISSING_RESULT_TEXT, (), "call_L1", "local_shell", False, None, "missing_result"),
        ("user", "L23", "Stop, don't run the tests. Just summarize.", (), None, None, False, None, None),
        ("tool", "L27", "output of a call made before the compaction", (), "call_ZZ9", None, False, None, "orphan"),
        ("assistant", "L28", "Done: `--json` prints the result as JSON. Tests were not run.", (), None, None, False,
         None, None),
    ]


def test_parts_calls_and_models(session):
    m = session.messages
    assert m[3].parts[1] == ImagePart(media_type="image/jpeg", byte_size=41, source="base64", width=1024, height=768)
    assert m[4].parts == (ReasoningPart("**Inspecting the CLI**\n\nLooking for the argument parser first.", summary=True,
                                        encrypted=True, blob="gAAAAABpQ2x5ZW5jcnlwdGVk"),)
    assert json.loads(m[4].tool_calls[0].arguments) == {"command": ["bash", "-lc", "rg -n argparse"],
                                                        "workdir": "/home/dev/app"}
    patch = m[7].tool_calls[0]
    assert patch.kind == "custom" and patch.arguments.startswith("*** Begin Patch\n*** Update File: cli.py")
    shell = m[9].tool_calls[0]
    assert shell.kind == "local_shell" and json.loads(shell.arguments)["command"] == ["pytest", "-q"]
    assert [x.model for x in m if x.role == "assistant"] == ["gpt-5.1-codex"] * 3 + ["gpt-5.1-codex-max"]
    assert m[0].timestamp == "2026-11-30T10:00:06.250Z"
    assert (m[5].details, m[6].details, m[8].details) == ({"exit_code": 0}, {"exit_code": 2}, {})


def test_session_metadata(session):
    assert session.format == "codex" and session.source_session_id == SID
    assert session.cwd == "/home/dev/app" and session.model == "gpt-5.1-codex-max"
    assert session.context_window == 272000
    assert session.system_prompt == "You are a coding agent running in the Codex CLI."
    assert session.extra["cli_version"] == "0.63.0" and session.extra["git"]["branch"] == "main"
    assert dict(session.skipped) == {"event_msg:agent_reasoning": 1, "event_msg:context_compacted": 1,
                                     "event_msg:token_count": 1, "event_msg:user_message": 1}
    assert dict(session.unknown) == {"future_line_kind": 1, "item:web_search_call": 1}
    assert [str(w) for w in session.warnings] == [f"{ROLLOUT}:15: malformed JSON: Unterminated string starting at (column 82)"]


def test_usage_from_token_counts(session):
    assert [(u.position, u.prompt_tokens, u.cache_read_tokens, u.completion_tokens, u.reasoning_tokens, u.model,
             u.context_window) for u in session.usage] == [
        (4, 8120, 6016, 211, 128, "gpt-5.1-codex", 272000),  # the repeat on line 16 is dropped
        (7, 8802, 8064, 164, 64, "gpt-5.1-codex", 272000),
        (9, 9120, 8704, 30, 0, "gpt-5.1-codex", 272000),
        (13, 3050, 0, 40, 0, "gpt-5.1-codex-max", 272000),
    ]


def test_compaction_with_replacement_history(session):
    (c,) = session.compactions
    assert (c.source, c.position, c.replaced_start, c.replaced_end, c.source_id) == ("codex", 12, 0, 12, "L24")
    assert c.summary == ("The user asked for a --json flag; cli.py now accepts --json (apply_patch). "
                         "Tests were not run at the user's request.")
    assert [(k.role, k.text) for k in c.kept] == [("user", "Add a --json flag to the CLI, like in this mockup."),
                                                  ("user", "Stop, don't run the tests. Just summarize.")]
    assert c.details["encrypted"] is True and c.details["replacement_items"] == 3
    assert session.messages[c.position].source_key == "L27"


def test_encrypted_only_compaction_has_no_summary(tmp_path):
    lines = [{"timestamp": "t", "type": "session_meta", "payload": {"id": "s"}},
             {"timestamp": "t", "type": "response_item", "payload": {"type": "message", "role": "user",
                                                                     "content": [{"type": "input_text", "text": "hi"}]}},
             {"timestamp": "t", "type": "compacted", "payload": {"message": "", "replacement_history": [
                 {"type": "compaction", "encrypted_content": "opaque"}]}}]
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (s,) = parse(path)
    (c,) = s.compactions
    assert (c.summary, c.kept, c.position) == (None, (), 1)


LEGACY = FIXTURES / "codex" / "legacy" / "rollout-2025-08-20T09-00-00-6a1d2c3b-0e4f-4a5b-8c9d-0e1f2a3b4c5d.jsonl"


def test_bare_era_rollout():
    (s,) = parse(LEGACY)
    assert rows(s) == [
        ("user", "L3", "<environment_context>\n  <cwd>/home/dev/old</cwd>\n</environment_context>", (), None, None, False,
         "environment_context", None),
        ("user", "L4", "What does build.sh do?", (), None, None, False, None, None),
        ("assistant", "L6", "", (("call_L1", "shell"),), None, None, False, None, None),
        ("tool", "L8", '{"output":"make all\\n","metadata":{"exit_code":0}}', (), "call_L1", "shell", False, None, None),
        ("assistant", "L9", "It runs make all.", (), None, None, False, None, None),
    ]
    assert s.messages[2].source_ids == ("rs_l1",) and s.messages[2].tool_calls[0].source_id == "fc_l1"
    assert s.source_session_id == "6a1d2c3b-0e4f-4a5b-8c9d-0e1f2a3b4c5d" and s.extra["git"]["branch"] == "main"
    assert dict(s.skipped) == {"record_type:state": 2} and s.warnings == ()


def test_subagent_rollout_links_its_parent_and_skips_the_forked_meta(tmp_path):
    meta = {"id": "child-1", "cwd": "/w", "source": {"subagent": {"thread_spawn": {"parent_thread_id": "parent-0",
                                                                                    "depth": 1}}}}
    lines = [{"timestamp": "t", "type": "session_meta", "payload": meta},
             {"timestamp": "t", "type": "session_meta", "payload": {"id": "parent-0", "cwd": "/w"}},
             {"timestamp": "t", "type": "response_item",
              "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}}]
    path = tmp_path / "rollout-child.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (s,) = parse(path)
    assert (s.source_session_id, s.parent_session_id) == ("child-1", "parent-0")
    assert dict(s.skipped) == {"session_meta:repeated": 1} and [m.text for m in s.messages] == ["go"]
