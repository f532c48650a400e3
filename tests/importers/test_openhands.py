"""openhands: V0 event lists (with and without tool_call_metadata) and a V1 event directory."""

from __future__ import annotations

import json

from engine.importers import MISSING_RESULT_TEXT, ImagePart, ReasoningPart, UsageRecord, parse

from .helpers import FIXTURES, rows

V0 = FIXTURES / "openhands" / "v0" / "conversation.json"
V1 = FIXTURES / "openhands" / "v1" / "5e2f9a0c4b7d"


def test_v0_parallel_calls_grouped_by_model_response():
    (s,) = parse(V0)
    assert rows(s) == [
        ("user", "1", "Fix the failing test in utils.py", (), None, None, False, None, None),
        ("assistant", "4", "Let me run the tests and look at the code.",
         (("toolu_A", "execute_bash"), ("toolu_B", "str_replace_editor")), None, None, False, None, None),
        ("tool", "6", "F\n1 failed in 0.03s", (), "toolu_A", "execute_bash", False, None, None),
        ("tool", "7", "def add(a, b):\n    return a - b\n", (), "toolu_B", "str_replace_editor", False, None, None),
        ("assistant", "9", "", (("toolu_C", "str_replace_editor"),), None, None, False, None, None),
        ("tool", "10", "ERROR:\nNo replacement was performed, old_str `a - b` did not appear verbatim.", (), "toolu_C",
         "str_replace_editor", True, None, None),
        ("assistant", "11", "I could not apply the edit.", (("toolu_D", "finish"),), None, None, False, None, None),
        ("tool", "12", "output of a call this log does not contain", (), "toolu_Z", "execute_bash", False, None, "orphan"),
        ("tool", "11#missing:toolu_D", MISSING_RESULT_TEXT, (), "toolu_D", "finish", False, None, "missing_result"),
    ]
    m = s.messages
    assert m[0].attachments == (ImagePart("image/png", 33, "base64", width=640, height=480),)
    assert (m[1].response_id, m[1].source_ids) == ("chatcmpl-01", ("4", "5"))
    assert (m[2].details, m[5].details) == ({"observation": "run", "exit_code": 1}, {"observation": "error"})
    assert json.loads(m[1].tool_calls[1].arguments) == {"command": "view", "path": "/workspace/utils.py"}
    assert s.system_prompt == "You are OpenHands agent, a helpful AI assistant."
    assert [t["function"]["name"] for t in s.tools] == ["execute_bash"]
    assert [(u.position, u.prompt_tokens, u.completion_tokens, u.cache_read_tokens, u.response_id) for u in s.usage] == [
        (1, 5120, 88, 4096, "chatcmpl-01"), (4, 3900, 61, None, "chatcmpl-02"), (6, 4010, 25, None, "chatcmpl-03")]
    assert dict(s.skipped) == {"action:system": 1, "observation:agent_state_changed": 2, "observation:recall": 1}
    assert dict(s.unknown) == {"event": 1}


def test_v0_condensation_is_a_recorded_compaction_over_the_forgotten_events():
    (s,) = parse(V0)
    (c,) = s.compactions
    assert (c.source, c.position, c.replaced_start, c.replaced_end) == ("openhands", 4, 1, 4)
    assert c.forgotten_ids == ("4", "5", "6", "7") and c.source_id == "8"
    assert c.summary == "Ran pytest (1 failure); utils.add subtracts instead of adding."
    assert c.details["summary_offset"] == 1 and c.details["forgotten_messages"] == 3


def test_v0_resolver_dump_without_metadata_gets_synthetic_call_ids():
    (s,) = parse(FIXTURES / "openhands" / "v0" / "resolver-old.json")
    assert rows(s) == [
        ("user", "0", "List the files", (), None, None, False, None, None),
        ("assistant", "1", "Listing the workspace.", (("oh-1", "run"),), None, None, False, None, None),
        ("tool", "2", "README.md\nsetup.py", (), "oh-1", "run", False, None, None),
        ("assistant", "3", "The workspace has two files.", (("oh-3", "finish"),), None, None, False, None, None),
        ("tool", "3#missing:oh-3", MISSING_RESULT_TEXT, (), "oh-3", "finish", False, None, "missing_result"),
    ]
    assert all(c.synthetic_id for m in s.messages for c in m.tool_calls)


def test_v1_event_directory():
    (s,) = parse(V1)
    e = lambda i: f"ev{i:02d}-4c1e-8a7b-{i:012d}"  # noqa: E731
    assert rows(s) == [
        ("user", e(1), "Rename foo to bar in app.py", (), None, None, False, None, None),
        ("user", f"{e(1)}:extended", "<EXTRA_INFO>\nThe git skill: commit with a clear message.\n</EXTRA_INFO>", (),
         None, None, False, "skill", None),
        ("assistant", e(2), "I'll grep and open the file.", (("toolu_V1a", "terminal"), ("toolu_V1b", "file_editor")),
         None, None, False, None, None),
        ("tool", e(4), "3:foo = 1", (), "toolu_V1a", "terminal", False, None, None),
        ("tool", e(5), "ERROR: /workspace/app.py does not exist", (), "toolu_V1b", "file_editor", True, None, None),
        ("assistant", e(8), "", (("toolu_V1c", "terminal"),), None, None, False, None, None),
        ("tool", e(9), "Use the editor instead of sed.", (), "toolu_V1c", "terminal", True, None, None),
        ("assistant", e(10), "Finishing.", (("toolu_V1d", "finish"),), None, None, False, None, None),
        ("tool", f"{e(10)}#missing:toolu_V1d", MISSING_RESULT_TEXT, (), "toolu_V1d", "finish", False, None,
         "missing_result"),
        ("assistant", e(13), "Done: foo is now bar.", (), None, None, False, None, None),
    ]
    m = s.messages
    assert m[0].attachments == (ImagePart("image/png", None, "url", url="https://img.example.com/app.png"),)
    assert m[2].reasoning == (ReasoningPart("Two independent reads: run them in parallel.", signed=True),)
    assert (m[2].response_id, m[2].source_ids) == ("resp-1", (e(2), e(3)))
    assert (m[3].details, m[4].details, m[6].details) == (
        {"observation": "TerminalObservation", "exit_code": 0}, {"observation": "FileEditorObservation"},
        {"observation": "UserRejectObservation"})
    assert s.source_session_id == "5e2f9a0c-4b7d-4e2a-9c11-7d3b2a1f0e9d"
    assert s.model == "litellm_proxy/claude-sonnet-4-5-20250929" and s.system_prompt == "You are OpenHands agent (V1)."
    (c,) = s.compactions
    assert (c.position, c.replaced_start, c.replaced_end, c.forgotten_ids) == (5, 2, 5, (e(2), e(3), e(4), e(5)))
    assert c.summary == "grep found foo on line 3 of app.py; the editor could not open it."
    assert s.usage == (
        UsageRecord(position=2, prompt_tokens=6100, completion_tokens=140, cache_read_tokens=5000,
                    cache_creation_tokens=900, reasoning_tokens=20, model="claude-sonnet-4-5-20250929",
                    response_id="resp-1", context_window=200000),
        UsageRecord(position=5, prompt_tokens=3300, completion_tokens=45, cache_read_tokens=2900,
                    cache_creation_tokens=400, reasoning_tokens=0, model="claude-sonnet-4-5-20250929",
                    response_id="resp-2", context_window=200000),
    )  # resp-c (the condenser's own call) has no message
    assert dict(s.skipped) == {"ConversationStateUpdateEvent": 1, "SystemPromptEvent": 1}
    assert dict(s.unknown) == {"FutureEvent": 1}
    broken = V1 / "events" / f"event-00011-{e(11)}.json"
    assert [str(w) for w in s.warnings] == [f"{broken}:1: malformed JSON: Unterminated string starting at (column 26)"]


def test_v1_reachable_from_events_dir_and_base_state():
    a = parse(V1 / "events")[0]
    b = parse(V1 / "base_state.json")[0]
    assert [m.source_key for m in a.messages] == [m.source_key for m in b.messages] and len(a.messages) == 10


def test_v1_events_are_read_in_index_order_past_99999(tmp_path):
    events = tmp_path / "conv" / "events"
    events.mkdir(parents=True)
    for idx, text in ((99999, "first"), (100000, "second")):
        (events / f"event-{idx}-e{idx}.json").write_text(json.dumps(
            {"id": f"e{idx}", "kind": "MessageEvent", "source": "user",
             "llm_message": {"role": "user", "content": [{"type": "text", "text": text}]}}))
    (s,) = parse(tmp_path / "conv")
    assert [m.text for m in s.messages] == ["first", "second"]
