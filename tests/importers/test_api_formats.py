"""openai-chat, openai-responses and anthropic request / response bodies."""

from __future__ import annotations

import json

from engine.importers import MISSING_RESULT_TEXT, DocumentPart, ImagePart, ReasoningPart, UsageRecord, parse

from .helpers import FIXTURES, rows


# -- openai-chat ---------------------------------------------------------------------------------
def test_openai_chat_request_exactly():
    path = FIXTURES / "openai-chat" / "request.json"
    (s,) = parse(path)
    assert rows(s) == [
        ("system", "m0", "You are a travel assistant.", (), None, None, False, None, None),
        ("developer", "m1", "Answer in one sentence.", (), None, None, False, None, None),
        ("user", "m2", "What's the weather and time where this photo was taken?", (), None, None, False, None, None),
        ("assistant", "m3", "", (("call_W1", "get_weather"), ("call_T1", "get_time")), None, None, False, None, None),
        ("tool", "m4", "18°C, clear", (), "call_W1", "get_weather", False, None, None),
        ("tool", "m5", "result for a call that is not in this log", (), "call_X9", None, False, None, "orphan"),
        ("tool", "m3#missing:call_T1", MISSING_RESULT_TEXT, (), "call_T1", "get_time", False, None, "missing_result"),
        ("assistant", "m6", "It is 18°C and clear in Lisbon.", (), None, None, False, None, None),
        ("user", "m7", "Thanks!", (), None, None, False, None, None),
    ]
    m = s.messages
    assert m[2].attachments == (ImagePart("image/png", 33, "base64", width=32, height=16),
                                ImagePart("image/jpeg", None, "url", url="https://img.example.com/lisbon.jpg"))
    assert m[3].parts == (ReasoningPart("The photo shows Lisbon; ask both tools at once."),)
    assert m[8].name == "ana" and m[3].model == "gpt-4.1-mini"
    assert [t["function"]["name"] for t in s.tools] == ["get_weather", "get_time"]
    assert s.usage == (UsageRecord(position=7, prompt_tokens=1240, completion_tokens=19, cache_read_tokens=1024,
                                   reasoning_tokens=0, model="gpt-4.1-mini"),)
    assert dict(s.skipped) == {"role:narrator": 1}
    assert [str(w) for w in s.warnings] == [f"{path}: m8: unknown role 'narrator'; skipped"]


def test_openai_chat_bare_array_and_text_input():
    (s,) = parse(FIXTURES / "openai-chat" / "messages.json")
    assert [(m.role, m.text) for m in s.messages] == [("user", "ping"), ("assistant", "pong")]
    (t,) = parse(json.dumps([{"role": "user", "content": "hi"}, {"role": "function", "name": "f", "content": "x"}]))
    assert t.source_file == "<text>"
    assert [(m.role, m.tool_call_id, m.repair) for m in t.messages] == [("user", None, None), ("tool", "f", "orphan")]


# -- openai-responses ----------------------------------------------------------------------------
def test_openai_responses_exactly():
    (s,) = parse(FIXTURES / "openai-responses" / "response.json")
    assert rows(s) == [
        ("developer", "input.0", "Keep answers short.", (), None, None, False, None, None),
        ("user", "input.1", "Draft release notes from the changelog and this PDF.", (), None, None, False, None, None),
        ("assistant", "input.2", "", (("call_C1", "read_changelog"), ("call_C2", "read_changelog")), None, None, False,
         None, None),
        ("tool", "input.5", "## 1.4.0\n- JSON output\n", (), "call_C1", "read_changelog", False, None, None),
        ("tool", "input.2#missing:call_C2", MISSING_RESULT_TEXT, (), "call_C2", "read_changelog", False, None,
         "missing_result"),
        ("assistant", "output.0", "Release 1.4.0 adds JSON output.", (), None, None, False, None, None),
    ]
    m = s.messages
    assert m[1].attachments == (DocumentPart("application/pdf", 9, "base64", title="roadmap.pdf"),
                                ImagePart(None, None, "file", url="file-img123"))
    assert m[2].parts == (ReasoningPart("Need the changelog first.", summary=True, encrypted=True, blob="gAAAAABenc"),)
    assert m[2].source_ids == ("rs_01",) and m[2].tool_calls[0].source_id == "fc_01"
    assert m[5].parts[0] == ReasoningPart("Write two bullets.")
    assert (m[5].response_id, m[5].source_ids) == ("resp_0a1b2c3d", ("rs_02", "msg_02"))
    assert (s.source_session_id, s.model, s.system_prompt) == ("resp_0a1b2c3d", "gpt-5-mini", "You are a release assistant.")
    (c,) = s.compactions
    assert (c.position, c.summary, c.source_id, c.details["encrypted"]) == (5, None, "cmp_01", True)
    assert s.usage == (UsageRecord(position=5, prompt_tokens=2048, completion_tokens=64, cache_read_tokens=1536,
                                   reasoning_tokens=32, model="gpt-5-mini", response_id="resp_0a1b2c3d"),)
    assert dict(s.unknown) == {"item:file_search_call": 1}


# -- anthropic -----------------------------------------------------------------------------------
def test_anthropic_request_exactly():
    (s,) = parse(FIXTURES / "anthropic" / "request.json")
    assert rows(s) == [
        ("user", "m0", "Review this diff; the design is in the PDF and the screenshot.", (), None, None, False, None,
         None),
        ("assistant", "m1", "Reading the two files.", (("toolu_R1", "read_file"), ("toolu_R2", "read_file")), None,
         None, False, None, None),
        ("tool", "m2.0", "print('a')", (), "toolu_R1", "read_file", False, None, None),
        ("tool", "m2.1", "b.py: no such file", (), "toolu_R2", "read_file", True, None, None),
        ("user", "m2.t3", "b.py was deleted in this PR.", (), None, None, False, None, None),
        ("assistant", "m3", "Looks good; a.py only prints.", (("toolu_R3", "read_file"),), None, None, False, None, None),
        ("tool", "m3#missing:toolu_R3", MISSING_RESULT_TEXT, (), "toolu_R3", "read_file", False, None, "missing_result"),
        ("user", "m4", "Approve it.", (), None, None, False, None, None),
    ]
    m = s.messages
    assert m[0].attachments == (DocumentPart("application/pdf", 18, "base64", title="design.pdf"),
                                ImagePart(None, None, "url", url="https://img.example.com/ui.png"))
    # the signature and the redacted block's opaque data are kept for lossless round trips
    assert m[1].reasoning == (ReasoningPart("Read both changed files.", signed=True, signature="ErUBCkYI"),
                              ReasoningPart("", redacted=True, encrypted=True, blob="EmwKAhgBEgy"))
    assert json.loads(m[1].tool_calls[1].arguments) == {"path": "b.py"}
    assert s.system_prompt == "You review pull requests.\n\nBe concise."
    assert s.model == "claude-sonnet-4-5-20250929" and s.tools[0]["name"] == "read_file"
    assert dict(s.unknown) == {"block:server_tool_use": 1}
