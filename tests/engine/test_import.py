"""Importing transcripts end to end: every fixture format into SQLite and PostgreSQL through the
write door, what each thread holds afterwards, visible repairs, idempotent re-imports, appended
files, one transaction per session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import importing
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core.messages import Message
from engine.core.units import dangling_calls, is_closing_marker, is_request
from engine.importers import parse
from engine.service import Service, open_service

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sessions"
CC_DIR = FIXTURES / "claude-code" / "project"
CC_MAIN = CC_DIR / "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
CC_KEY = "claude-code:7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"
CODEX = next((FIXTURES / "codex" / "2026").rglob("*.jsonl"))
CODEX_KEY = "codex:019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d"

#: every fixture source: (path, format, number of sessions)
SOURCES = [
    (CC_MAIN, "claude-code", 3),
    (CC_DIR / "agent-0ther000.jsonl", "claude-code", 1),
    (CODEX, "codex", 1),
    (next((FIXTURES / "codex" / "legacy").glob("*.jsonl")), "codex", 1),
    (FIXTURES / "openai-chat" / "messages.json", "openai-chat", 1),
    (FIXTURES / "openai-chat" / "request.json", "openai-chat", 1),
    (FIXTURES / "openai-responses" / "response.json", "openai-responses", 1),
    (FIXTURES / "anthropic" / "request.json", "anthropic", 1),
    (FIXTURES / "openhands" / "v0" / "conversation.json", "openhands", 1),
    (FIXTURES / "openhands" / "v0" / "resolver-old.json", "openhands", 1),
    (next((FIXTURES / "openhands" / "v1").iterdir()), "openhands", 1),
    (FIXTURES / "swe-agent" / "classic" / "calc__calc-1.traj", "swe-agent", 1),
    (FIXTURES / "swe-agent" / "function-calling" / "calc__calc-2.traj", "swe-agent", 1),
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, migrated, empty database (imports derive thread keys from the files)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'import.db'}"
    return request.getfixturevalue("new_pg_database")()


@pytest.fixture
def svc(fresh_url: str, tmp_path: Path) -> Iterator[Service]:
    s = open_service(fresh_url, workdir=tmp_path / "wd", summarizer=ExtractiveSummarizer(), create=True)
    yield s
    s.close()


def _messages(svc: Service, key: str) -> list[Message]:
    return [s.message for s in svc.reads.messages_page(key, limit=10_000)]


@pytest.mark.parametrize("path,fmt,sessions", SOURCES, ids=[f"{p.parent.name}/{p.name}" for p, _, _ in SOURCES])
def test_every_fixture_imports_and_reimports_nothing(svc: Service, path: Path, fmt: str, sessions: int) -> None:
    reports = svc.imports.import_file(path)
    assert len(reports) == sessions and {r.format for r in reports} == {fmt}
    parsed = {importing.thread_key_for(s) for s in parse(path) if s.parent_session_id is None}
    assert parsed <= {r.thread for r in reports}
    for r in reports:
        info = svc.reads.thread(r.thread)
        assert info.source_format == fmt and info.imported
        assert info.message_count == r.messages > 0
        stored = _messages(svc, r.thread)
        assert len(stored) == r.messages and all(m.source_key for m in stored)
        assert sum(len(m.tool_calls) for m in stored) == r.tool_calls
        assert len(svc.reads.source_compactions(r.thread)) == r.compactions
        assert all(q.origin == "imported" for q in svc.store.model_requests(r.thread)) and len(svc.store.model_requests(r.thread)) == r.requests
        # every call has its result or a closing marker: nothing dangles after an import
        assert dangling_calls(stored) == []
        svc.compaction.status(r.thread)  # measurable
    again = svc.imports.import_file(path)
    assert [(r.thread, r.messages, r.requests, r.compactions, r.created) for r in again] == [
        (r.thread, 0, 0, 0, False) for r in reports
    ]
    assert all(a.already_stored == r.messages for a, r in zip(again, reports))
    assert [svc.reads.thread(r.thread).message_count for r in reports] == [r.messages for r in reports]


def test_claude_code_session_holds_what_the_transcript_carries(svc: Service) -> None:
    reports = {r.thread: r for r in svc.imports.import_file(CC_MAIN)}
    assert set(reports) == {CC_KEY, f"{CC_KEY}/a1b2c3d4", f"{CC_KEY}/9f8e7d6c"}
    main = reports[CC_KEY]
    assert main.warnings[0].endswith(".jsonl:12: malformed JSON: Unterminated string starting at (column 51)")
    assert main.repairs == {"orphan_result": 1, "missing_result": 1}
    assert any("orphan_result" in w for w in main.warnings)
    assert main.skipped["off_branch"] == 2 and main.skipped["unknown:future-entry-kind"] == 1

    info = svc.reads.thread(CC_KEY)
    assert (info.title, info.provider, info.model) == ("Fix the unclosed regex in parser.py", "anthropic", "claude-opus-4-5-20251101")
    assert info.source_file == str(CC_MAIN) and info.source_session_id == "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"
    sub = svc.reads.thread(f"{CC_KEY}/a1b2c3d4")
    assert sub.parent_thread == CC_KEY and sub.parent_source_session_id == info.source_session_id

    ms = _messages(svc, CC_KEY)
    by_key = {m.source_key: m for m in ms}
    assert [m.meta_kind for m in ms[:3]] == ["caveat", "command", "command_output"]
    assert not any(is_request(m) for m in ms[:3])
    question = by_key["u04"]
    assert question.meta_kind is None and question.attachments[0].kind == "image" and question.attachments[0].media_type
    first = by_key["u05"]
    assert first.reasoning and first.reasoning[0].text and [c.name for c in first.tool_calls] == ["Read", "Grep"]
    results = [m for m in ms if m.role == "tool"]
    assert all(r.name for r in results)  # the tool name on every result, from its call
    grep = next(r for r in results if r.tool_call_id == "toolu_02Grep")
    assert grep.is_error and grep.name == "Grep"
    marker = next(r for r in results if r.tool_call_id == "toolu_04Edit")
    assert is_closing_marker(marker) and marker.metadata["repair"] == "missing_result"
    orphan = by_key["u22:toolu_99Gone"]
    assert orphan.role == "user" and orphan.meta_kind == "orphan_result" and orphan.content == "stale output from a cancelled call"
    assert orphan.metadata["tool_call_id"] == "toolu_99Gone" and not is_request(orphan)
    # the store's current request follows the units rule: the last real request, not the orphan carrier
    snap = svc.store.snapshot(CC_KEY)
    assert snap.current_request is not None and snap.current_request.content == "Now run only the parser tests."

    comps = svc.reads.source_compactions(CC_KEY)
    assert [(c.kind, c.trigger, c.tokens_before) for c in comps] == [("prune", "auto", 30122), ("summary", "manual", 48211)]
    summary = comps[1]
    assert summary.summary and summary.summary.startswith("This session is being continued")
    assert summary.after_message_id == by_key["u16"].id and summary.replaced_first_id == ms[0].id
    assert comps[0].forgotten == ("toolu_01Read", "toolu_02Grep")

    reqs = svc.store.model_requests(CC_KEY)
    assert [r.reported_prompt_tokens for r in reqs] == [2312, 2616, 2734, 943, 977]
    assert reqs[1].reported_cache_read_tokens == 2300 and reqs[1].reported_cache_creation_tokens == 310
    assert reqs[0].message_id == first.id and reqs[0].response_id == "msg_01A" and reqs[0].provider == "anthropic"
    assert reqs[0].created_at.isoformat().startswith("2026-11-30T14:00:56")
    st = svc.compaction.status(CC_KEY)
    assert st.anchored_tokens is not None and st.anchored_tokens >= 977


def test_codex_window_is_the_threads_window(svc: Service) -> None:
    (r,) = svc.imports.import_file(CODEX)
    info = svc.reads.thread(CODEX_KEY)
    assert info.reported_context_window and info.provider == "openai"
    st = svc.compaction.status(CODEX_KEY)
    assert st.context_window == info.reported_context_window and st.window_source == "reported"
    assert "codex" in (st.window_detail or "")
    assert len(svc.reads.source_compactions(CODEX_KEY)) == r.compactions == 1
    ms = _messages(svc, CODEX_KEY)
    assert ms[0].role == "developer" and [m.meta_kind for m in ms[1:3]] == ["user_instructions", "environment_context"]
    assert ms[3].attachments and ms[4].reasoning and any(m.role == "tool" and m.is_error for m in ms)
    (comp,) = svc.reads.source_compactions(CODEX_KEY)
    assert [k["text"] for k in comp.kept] == ["Add a --json flag to the CLI, like in this mockup.", "Stop, don't run the tests. Just summarize."]
    assert svc.store.snapshot(CODEX_KEY).current_request.content == "Stop, don't run the tests. Just summarize."


def _cut_without_dangling(path: Path) -> int:
    """A line count after which the prefix ends with no call left open (a clean append point)."""
    lines = path.read_bytes().splitlines(keepends=True)
    for n in range(len(lines) - 2, 2, -1):
        s = parse("".join(x.decode() for x in lines[:n]), "codex")[0]
        if not s.repaired("missing_result") and len(s.messages) >= 4:
            return n
    raise AssertionError("no clean cut")


def test_an_appended_file_adds_only_what_is_new(svc: Service, tmp_path: Path) -> None:
    lines = CODEX.read_bytes().splitlines(keepends=True)
    cut = _cut_without_dangling(CODEX)
    target = tmp_path / CODEX.name
    target.write_bytes(b"".join(lines[:cut]))
    (first,) = svc.imports.import_file(target)
    target.write_bytes(b"".join(lines))
    (second,) = svc.imports.import_file(target)
    assert second.already_stored == first.messages and first.messages + second.messages == svc.reads.thread(CODEX_KEY).message_count
    grown = [(m.role, m.content, m.source_key) for m in _messages(svc, CODEX_KEY)]
    other = open_service(f"sqlite:///{tmp_path / 'oneshot.db'}", workdir=tmp_path / "wd2", create=True)
    try:
        other.imports.import_file(CODEX)
        assert [(m.role, m.content, m.source_key) for m in _messages(other, CODEX_KEY)] == grown
    finally:
        other.close()


def test_one_transaction_per_session(svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.store.sources import SourceWrites

    def broken(self, **_):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(SourceWrites, "record_source_compaction", broken)
    with pytest.raises(RuntimeError):
        svc.imports.import_file(CODEX)
    assert [t.key for t in svc.reads.list_threads()] == []  # not even an empty thread


def test_a_thread_key_and_a_live_thread_are_respected(svc: Service) -> None:
    svc.runs.create_thread("live")
    with pytest.raises(Exception) as err:
        svc.imports.import_file(CODEX, thread="live")
    assert getattr(err.value, "code", None) == "thread_not_imported"
    assert svc.reads.thread("live").message_count == 0
    reports = svc.imports.import_file(CC_MAIN, thread="mine")
    assert reports[0].thread == "mine" and {r.parent_thread for r in reports[1:]} == {"mine"}
    assert all(r.thread.startswith("mine/") for r in reports[1:])


def test_imported_thread_can_be_compacted_by_our_engine(svc: Service) -> None:
    svc.imports.import_file(CC_MAIN)
    before = svc.reads.thread(CC_KEY).message_count
    result = svc.compaction.compact(CC_KEY)
    assert result.status in ("compacted", "no_op")
    assert svc.reads.thread(CC_KEY).message_count == before  # compaction never edits history
    assert len(svc.reads.source_compactions(CC_KEY)) == 2  # the source's records stay apart from ours


def test_a_copied_fixture_tree_imports_its_subagents(svc: Service, tmp_path: Path) -> None:
    tree = tmp_path / "project"
    shutil.copytree(CC_DIR, tree)
    reports = svc.imports.import_file(tree / CC_MAIN.name)
    assert len(reports) == 3 and all(r.source.startswith(str(tree)) for r in reports)




def test_pressure_history_of_an_imported_thread_uses_the_recorded_usage(svc: Service) -> None:
    svc.imports.import_file(CC_MAIN)
    points = svc.compaction.pressure_history(CC_KEY)
    assert [p.tokens for p in points] == [2312, 2616, 2734, 943, 977]
    assert all(p.origin == "imported" and p.reported_tokens == p.tokens and p.threshold for p in points)
    # the microcompaction (after u13's boundary) and the summary come before the 3rd and 4th requests
    assert [p.compaction for p in points] == [None, None, "recorded", "recorded", None]


def test_reasoning_blobs_and_documents_survive_the_import(svc: Service) -> None:
    (r,) = svc.imports.import_file(FIXTURES / "anthropic" / "request.json")
    ms = _messages(svc, r.thread)
    doc = ms[0].attachments[0]
    assert (doc.kind, doc.media_type, doc.byte_size, doc.title) == ("document", "application/pdf", 18, "design.pdf")
    signed, redacted = ms[1].reasoning
    assert (signed.text, signed.signature) == ("Read both changed files.", "ErUBCkYI")
    assert (redacted.text, redacted.redacted, redacted.encrypted) == ("", True, "EmwKAhgBEgy")
    assert svc.store.conversation_config(r.thread)[0] == "You review pull requests.\n\nBe concise."
