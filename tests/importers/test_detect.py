"""Format detection from content, the registry, and one-line errors for inputs that are not the format."""

from __future__ import annotations

import json

import pytest

from engine.core.errors import EngineError
from engine.importers import FORMATS, ImportFormatError, detect_format, parse

from .helpers import FIXTURES

CC = FIXTURES / "claude-code" / "project" / "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
CASES = [
    (CC, "claude-code"),
    (CC.parent / "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10" / "subagents" / "agent-a1b2c3d4.jsonl", "claude-code"),
    (CC.parent / "agent-9f8e7d6c.jsonl", "claude-code"),
    (FIXTURES / "codex" / "2026" / "11" / "30" / "rollout-2026-11-30T10-00-00-019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d.jsonl",
     "codex"),
    (FIXTURES / "openai-chat" / "request.json", "openai-chat"),
    (FIXTURES / "openai-chat" / "messages.json", "openai-chat"),
    (FIXTURES / "openai-responses" / "response.json", "openai-responses"),
    (FIXTURES / "anthropic" / "request.json", "anthropic"),
    (FIXTURES / "openhands" / "v0" / "conversation.json", "openhands"),
    (FIXTURES / "openhands" / "v0" / "resolver-old.json", "openhands"),
    (FIXTURES / "openhands" / "v1" / "5e2f9a0c4b7d", "openhands"),
    (FIXTURES / "openhands" / "v1" / "5e2f9a0c4b7d" / "events", "openhands"),
    (FIXTURES / "openhands" / "v1" / "5e2f9a0c4b7d" / "base_state.json", "openhands"),
    (FIXTURES / "swe-agent" / "classic" / "calc__calc-1.traj", "swe-agent"),
    (FIXTURES / "swe-agent" / "function-calling" / "calc__calc-2.traj", "swe-agent"),
    (FIXTURES / "codex" / "legacy" / "rollout-2025-08-20T09-00-00-6a1d2c3b-0e4f-4a5b-8c9d-0e1f2a3b4c5d.jsonl", "codex"),
]


def test_registry_lists_every_format():
    assert list(FORMATS)[:7] == ["claude-code", "codex", "openai-chat", "openai-responses", "anthropic", "openhands",
                                 "swe-agent"]
    assert {"openhands-eval", "aider", "gemini-cli"} <= set(FORMATS)


@pytest.mark.parametrize(("path", "fmt"), CASES, ids=[f"{f}:{p.name}" for p, f in CASES])
def test_each_fixture_is_detected_as_its_format(path, fmt):
    assert detect_format(path) == fmt
    assert detect_format(str(path)) == fmt
    if path.is_file() and path.name != "base_state.json":
        assert detect_format(path.read_text()) == fmt  # literal text too
    assert all(s.format == fmt for s in parse(path))


@pytest.mark.parametrize("content", [
    json.dumps({"name": "package", "version": "1.0", "dependencies": {}}),
    json.dumps([1, 2, 3]),
    json.dumps({"messages": "not a list"}),
    "just some notes\nabout nothing in particular\n",
    '{"level": "info", "msg": "server started"}\n{"level": "warn", "msg": "slow"}\n',
    "",
])
def test_other_files_are_not_detected(tmp_path, content):
    path = tmp_path / "other.json"
    path.write_text(content)
    assert detect_format(path) is None
    with pytest.raises(ImportFormatError) as err:
        parse(path)
    assert err.value.code == "import_format" and "not a recognized session format" in err.value.message


def test_missing_paths_and_directories(tmp_path):
    assert detect_format(tmp_path / "nope.jsonl") is None
    assert detect_format(tmp_path) is None  # an empty directory
    with pytest.raises(ImportFormatError) as err:
        parse(tmp_path / "nope.jsonl")
    assert err.value.code == "import_not_found"


WRONG = [(path, other) for path, fmt in CASES[::2] for other in FORMATS if other != fmt]


@pytest.mark.parametrize(("path", "fmt"), WRONG, ids=[f"{p.name}-as-{f}" for p, f in WRONG])
def test_a_wrong_format_is_one_error_with_one_line(path, fmt):
    with pytest.raises(ImportFormatError) as err:
        parse(path, format=fmt)
    assert isinstance(err.value, EngineError) and err.value.code == "import_format"
    assert "\n" not in err.value.message and err.value.message.startswith(str(path))
    assert err.value.to_json() == {"error": {"code": "import_format", "message": err.value.message}}


def test_an_unknown_format_name():
    with pytest.raises(ImportFormatError) as err:
        parse(CC, format="gemini")
    assert err.value.code == "unknown_format" and "claude-code" in err.value.message


def test_a_session_whose_first_line_is_huge_is_still_detected(tmp_path):
    path = tmp_path / "big-first-line.jsonl"
    first = {"type": "user", "uuid": "a", "parentUuid": None, "sessionId": "s",
             "message": {"role": "user", "content": "x" * 600_000}}
    path.write_text(json.dumps(first) + "\n")
    assert detect_format(path) == "claude-code"
