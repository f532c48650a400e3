"""aider: a chat history with two sessions; prompts, slash commands, replies, console facts (model,
rounded token counts, applied edits, commits), the verbose summarization record; idempotent
re-import (SQLite and PostgreSQL); follow of the growing history file."""

from __future__ import annotations

from pathlib import Path

from engine.importers import detect_format, parse

from .helpers import FIXTURES
from .service_helpers import follow_while_growing, service, stored

HIST = FIXTURES / "aider" / "slugify" / ".aider.chat.history.md"
KEYS = ["aider:slugify@2026-11-30T14:02:11", "aider:slugify@2026-11-30T16:40:03"]


def test_detected_from_content_and_every_session_is_a_thread():
    assert detect_format(HIST) == "aider"
    sessions = parse(HIST)
    assert [f"aider:{s.source_session_id}" for s in sessions] == KEYS
    assert [(len(s.messages), s.tool_call_count, len(s.compactions), len(s.usage)) for s in sessions] == [
        (5, 0, 0, 2), (4, 0, 1, 2)]
    assert {s.model for s in sessions} == {"anthropic/claude-sonnet-4-5-20250929"}


def test_prompts_commands_replies_and_console_facts():
    (s, _) = parse(HIST)
    assert [(m.role, m.source_key, m.meta_kind) for m in s.messages] == [
        ("user", "L11", "command"), ("user", "L14", None), ("assistant", "L17", None),
        ("user", "L34", None), ("assistant", "L36", None)]
    assert s.messages[1].text == "make slugify() collapse repeated dashes\nand strip them from both ends"
    assert "<<<<<<< SEARCH" in s.messages[2].text and s.messages[3].text.startswith("/ask ")  # /ask is a request
    assert s.messages[2].details["applied_edits"] == ("slug.py",)
    assert s.messages[2].details["commits"] == ("1a2b3c4 fix: collapse repeated dashes in slugify",)
    assert [(u.position, u.prompt_tokens, u.completion_tokens, u.cache_creation_tokens, u.cache_read_tokens) for u in s.usage] == [
        (2, 4200, 312, 2000, 1100), (4, 4900, 58, None, None)]
    assert dict(s.skipped) == {"blank_input": 1, "console": 12}


def test_verbose_summarization_is_a_recorded_compaction():
    (_, s) = parse(HIST)
    (c,) = s.compactions
    assert (c.source, c.trigger, c.position, c.replaced_start, c.replaced_end, c.summary, c.source_id) == (
        "aider", "auto", 2, 2, 2, None, "L66")


def test_text_before_the_first_header_is_not_aider():
    assert detect_format("#### hello\n\nworld\n") is None


def test_import_and_reimport(url: str, tmp_path: Path):
    with service(url, tmp_path) as svc:
        first = svc.imports.import_file(HIST)
        assert [(r.thread, r.messages, r.compactions, r.requests) for r in first] == [(KEYS[0], 5, 0, 2), (KEYS[1], 4, 1, 2)]
        again = svc.imports.import_file(HIST)
        assert [(r.messages, r.compactions, r.requests, r.already_stored) for r in again] == [(0, 0, 0, 5), (0, 0, 0, 4)]
        msgs = stored(svc, KEYS[0])
        assert [m.role for m in msgs] == ["user", "user", "assistant", "user", "assistant"]
        (c,) = svc.reads.source_compactions(KEYS[1])
        assert (c.source, c.trigger, c.summary) == ("aider", "auto", None)


def test_follow_the_history_as_aider_appends(tmp_path: Path):
    text = HIST.read_bytes()
    cut = text.index(b"# aider chat started at 2026-11-30 16:40:03")
    proj = tmp_path / "slugify"
    proj.mkdir()
    target = proj / ".aider.chat.history.md"
    target.write_bytes(text[:cut])
    second = text[cut:]
    half = second.index(b"#### run them")
    with service(f"sqlite:///{tmp_path / 'f.db'}", tmp_path) as svc:
        follow_while_growing(svc, target, [second[:half], second[half:half + 5], second[half + 5:]])
        assert len(stored(svc, KEYS[0])) == 5
        assert [m.content for m in stored(svc, KEYS[1])][:3] == [
            "add tests for slugify", stored(svc, KEYS[1])[1].content, "run them"]
        assert len(svc.reads.source_compactions(KEYS[1])) == 1
