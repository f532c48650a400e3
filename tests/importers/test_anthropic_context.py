"""anthropic logs: logged Messages API exchanges with server-side context management. Compaction blocks
(a summary, encrypted only, failed: null content), applied context edits (cleared tool uses, cleared
thinking turns) as recorded source compactions with their triggers and token counts,
``usage.iterations`` split into the compaction step and the message; repaired records (a malformed
line, an error response, a call never answered); JSONL, JSON pairs, HTTP wrappers and streamed bodies;
idempotent re-import through the real service (SQLite and PostgreSQL) and a grown log."""

from __future__ import annotations

import json
from pathlib import Path

from engine.importers import MISSING_RESULT_TEXT, ReasoningPart, UsageRecord, detect_format, parse

from .helpers import FIXTURES, rows
from .service_helpers import service, stored

LOG = FIXTURES / "anthropic" / "compaction-log.jsonl"
STREAMED = FIXTURES / "anthropic" / "streamed-encrypted.json"
SUMMARY = ("<summary>Auditing pay/: config has TIMEOUT 30 and RETRIES 5; charge() in handlers.py has no idempotency key; "
           "refund() in refunds.py re-reads the charge. Next: check refund() for double refunds.</summary>")


def test_detected_from_content():
    assert detect_format(LOG) == "anthropic"
    assert detect_format(STREAMED) == "anthropic"
    assert detect_format(FIXTURES / "anthropic" / "request.json") == "anthropic"
    assert detect_format(FIXTURES / "openai-responses" / "response.json") == "openai-responses"


def test_log_with_cleared_tool_uses_a_compaction_and_a_failed_one():
    (s,) = parse(LOG)
    r = rows(s)
    assert [x[:2] for x in r] == [("user", "m0"), ("assistant", "m1"), ("tool", "m2.0"), ("assistant", "m3"), ("tool", "m4.0"),
                                  ("tool", "m4.1"), ("assistant", "m5"), ("tool", "m6.0"), ("assistant", "m7"), ("user", "m8"),
                                  ("assistant", "m9"), ("tool", "m9#missing:toolu_A5")]
    assert r[8][2] == "refund() never checks whether the charge was already refunded."  # the compaction block is not text
    assert r[-1] == ("tool", "m9#missing:toolu_A5", MISSING_RESULT_TEXT, (), "toolu_A5", "read_file", False, None, "missing_result")
    assert (s.model, s.system_prompt, [t["name"] for t in s.tools]) == (
        "claude-opus-4-6", "You are a careful repository auditor.", ["read_file", "memory"])
    assert s.messages[8].response_id == "msg_01Aud03" and s.messages[8].details["stop_reason"] == "end_turn"
    cleared, compacted, failed = s.compactions
    # the API says how many tool uses it cleared; the oldest not excluded (memory is) is inferred
    assert (cleared.kind, cleared.position, cleared.replaced_start, cleared.replaced_end, cleared.forgotten_ids) == (
        "prune", 6, 2, 3, ("toolu_A1",))
    assert (cleared.trigger, cleared.tokens_before, cleared.summary) == ("input_tokens ≥ 30,000", 22300 + 11800, None)
    assert cleared.details["edit"] == "clear_tool_uses_20250919"
    assert (cleared.details["cleared_tool_uses"], cleared.details["cleared_input_tokens"]) == (1, 11800)
    assert (compacted.kind, compacted.position, compacted.replaced_start, compacted.replaced_end) == ("summary", 8, 0, 8)
    assert (compacted.trigger, compacted.tokens_before, compacted.summary) == ("input_tokens ≥ 60,000", 64350, SUMMARY)
    assert compacted.source_id == "m7:compaction:0" and compacted.timestamp == "2026-03-02T10:02:10Z"
    assert {k: compacted.details[k] for k in ("summary_output_tokens", "tokens_after")} == {"summary_output_tokens": 410,
                                                                                          "tokens_after": 3000}
    assert "failed" not in compacted.details
    assert (failed.position, failed.replaced_start, failed.replaced_end, failed.summary, failed.details["failed"]) == (
        10, 10, 10, None, True)
    # usage: the compaction step is a request of its own, before the message's
    assert [(u.position, u.prompt_tokens, u.completion_tokens) for u in s.usage] == [
        (1, 2100, 40), (3, 15100, 60), (6, 22300, 55), (8, 64350, 410), (8, 3000, 80), (10, 3300, 0), (10, 3300, 120)]
    assert [str(w) for w in s.warnings] == [f"{LOG}:4: malformed JSON; skipped",
                                            f"{LOG}:6: the response is an error (529: Overloaded); its request is kept"]
    assert dict(s.skipped) == {"error_response": 1, "malformed_line": 1} and dict(s.unknown) == {}


def test_streamed_encrypted_compaction_and_cleared_thinking():
    (s,) = parse(STREAMED)
    assert [(m.role, m.text) for m in s.messages] == [
        ("user", "Plan the migration."), ("assistant", "Step 1: dump."), ("user", "And step 2?"),
        ("assistant", "Step 2: load."), ("user", "Summarize where we are."), ("assistant", "")]
    assert s.messages[1].reasoning == (ReasoningPart("Old plan.", signed=True, signature="sig1"),)
    assert s.messages[5].details["stop_reason"] == "compaction"
    compacted, thinking = s.compactions
    assert (compacted.position, compacted.summary, compacted.tokens_before, compacted.trigger) == (
        5, None, 52000, "input_tokens ≥ 50,000")
    assert compacted.details["encrypted"] is True and "failed" not in compacted.details
    assert compacted.details["pause_after_compaction"] is True
    assert (thinking.kind, thinking.replaced_start, thinking.replaced_end, thinking.tokens_before) == ("prune", 1, 2, None)
    assert (thinking.details["edit"], thinking.details["cleared_thinking_turns"], thinking.details["cleared_input_tokens"]) == (
        "clear_thinking_20251015", 1, 640)
    # paused after compacting: only the compaction step ran, counted once
    assert s.usage == (UsageRecord(position=5, prompt_tokens=52000, completion_tokens=300, cache_read_tokens=0,
                                   cache_creation_tokens=0, model="claude-opus-4-6", response_id="msg_01Plan"),)


def test_a_compaction_block_replayed_in_a_request_body_is_recorded():
    body = {"model": "claude-opus-4-6", "max_tokens": 1024, "messages": [
        {"role": "user", "content": "Long task"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "Summary so far."}, {"type": "text", "text": "OK."}]},
        {"role": "user", "content": "Go on."}]}
    (s,) = parse(json.dumps(body), "anthropic")
    (c,) = s.compactions
    assert (c.position, c.replaced_end, c.summary, c.trigger) == (1, 1, "Summary so far.", "auto")
    assert [m.text for m in s.messages] == ["Long task", "OK.", "Go on."] and dict(s.unknown) == {}


def test_a_pair_as_one_json_object_with_a_client_that_keeps_the_whole_history():
    pair = {"request": {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]},
            "response": {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "hello"}],
                         "usage": {"input_tokens": 8, "output_tokens": 2}}}
    second = {"request": {"model": "claude-sonnet-4-5", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hello", "citations": None}]},
        {"role": "user", "content": "bye"}]}}
    assert detect_format(json.dumps(pair)) == "anthropic"
    (s,) = parse(json.dumps([pair, second]))
    # the resent history is recognized despite cache markers and null fields: nothing twice
    assert [(m.role, m.source_key, m.text) for m in s.messages] == [("user", "m0", "hi"), ("assistant", "m1", "hello"),
                                                                   ("user", "m2", "bye")]


def test_import_reimport_and_a_grown_log(url: str, tmp_path: Path):
    lines = LOG.read_text(encoding="utf-8").splitlines(keepends=True)
    log = tmp_path / "audit.jsonl"
    log.write_text("".join(lines[:3]), encoding="utf-8")  # the first three exchanges
    key = "anthropic:audit"
    with service(url, tmp_path) as svc:
        (first,) = svc.imports.import_file(log)
        assert (first.thread, first.format, first.messages, first.tool_calls, first.compactions, first.requests) == (
            key, "anthropic", 8, 4, 1, 3)
        log.write_text("".join(lines), encoding="utf-8")  # the log grew
        (grown,) = svc.imports.import_file(log)
        # the first import closed the then unanswered call (a plain import is final); its result, logged
        # later, is kept as a duplicate result beside that marker
        assert (grown.messages, grown.compactions, grown.requests, grown.already_stored) == (5, 2, 4, 7)
        assert grown.repairs == {"duplicate_result": 1, "missing_result": 1}
        (again,) = svc.imports.import_file(log)
        assert (again.messages, again.compactions, again.requests, again.already_stored) == (0, 0, 0, 12)
        msgs = stored(svc, key)
        assert len(msgs) == 13 and msgs[9].content == "refund() never checks whether the charge was already refunded."
        cleared, compacted, failed = svc.reads.source_compactions(key)
        assert (cleared.kind, cleared.trigger, cleared.tokens_before, cleared.forgotten) == (
            "prune", "input_tokens ≥ 30,000", 34100, ("toolu_A1",))
        assert cleared.replaced_first_id == cleared.replaced_last_id == msgs[2].id
        assert (compacted.kind, compacted.tokens_before, compacted.summary) == ("summary", 64350, SUMMARY)
        assert (compacted.after_message_id, compacted.replaced_first_id, compacted.replaced_last_id) == (
            msgs[8].id, msgs[0].id, msgs[8].id)
        assert (failed.summary, failed.details["failed"], failed.replaced_first_id) == (None, True, None)
        st = svc.compaction.status(key)
        assert (st.basis, st.source_compact_count) == ("source", 3)
        # the failed compaction replaced nothing: the source's boundary is the one before it
        assert "(#1): its summary" in (st.source_detail or "")


def test_the_timeline_says_what_the_api_did(tmp_path: Path):
    from inspector_app.logic.timeline.pages import source_headline

    with service(f"sqlite:///{tmp_path / 'store.db'}", tmp_path) as svc:
        svc.imports.import_file(LOG)
        heads = [source_headline(sc) for sc in svc.reads.source_compactions("anthropic:compaction-log")]
    assert heads == [
        "Anthropic cleared 1 tool result(s) here · 34,100 tokens before · trigger input_tokens ≥ 30,000 · recorded by the source",
        "Anthropic compacted here · 64,350 tokens before · trigger input_tokens ≥ 60,000 · recorded by the source",
        "Anthropic tried to compact here: failed, no summary (ignored) · 3,300 tokens before · trigger input_tokens ≥ 60,000"
        " · recorded by the source",
    ]


def test_a_growing_log_is_followed(tmp_path: Path):
    """Follow all over the folder a program logs into: exchanges appended (one cut mid-line first) are
    imported while it is written; the half-written line waits for the rest of it."""
    import time

    lines = LOG.read_text(encoding="utf-8").splitlines(keepends=True)
    home, folder = tmp_path / "home", tmp_path / "logs"
    home.mkdir()
    folder.mkdir()
    log = folder / "audit.jsonl"
    with service(f"sqlite:///{tmp_path / 'store.db'}", tmp_path) as svc:
        follower = svc.imports.follow_sessions([str(folder)], home=str(home), debounce_ms=200)

        def wait_for(n: int) -> None:
            start = time.monotonic()
            while time.monotonic() - start < 15.0:  # a generous bounded wait (the 2 s target is not a unit-test bound)
                try:
                    if len(stored(svc, "anthropic:audit")) >= n:
                        return
                except Exception:  # noqa: BLE001 - not imported yet (polled until the deadline)
                    pass
                time.sleep(0.05)
            raise AssertionError(f"not {n} messages within 15 s: {follower.errors}")

        try:
            log.write_text(lines[0] + lines[1][:200], encoding="utf-8")
            wait_for(1)  # the first exchange (its response, the last message, may still change: it waits)
            with log.open("a", encoding="utf-8") as fh:
                fh.write(lines[1][200:] + lines[2])
            wait_for(6)
            with log.open("a", encoding="utf-8") as fh:
                fh.write("".join(lines[3:5]))
            wait_for(8)
            assert [c.kind for c in svc.reads.source_compactions("anthropic:audit")] == ["prune", "summary"]
            assert not follower.errors
        finally:
            follower.stop()
