"""Specifics (engine/core/specifics.py): what each kind extracts, what ordinary prose does not give, and
which specifics a compaction dropped, on constructed cases."""

from __future__ import annotations

import json

import pytest

from engine.core.events import DroppedEntry, SummaryEvent, parse_event
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.specifics import (
    MAX_DROPPED,
    MAX_VALUE_CHARS,
    DroppedSpecific,
    DroppedSpecifics,
    Specific,
    dropped_at_compaction,
    dropped_specifics,
    extract_identifiers,
    extract_specifics,
    message_texts,
)


def kinds(text: str, kind: str) -> list[str]:
    return [s.value for s in extract_specifics(text) if s.kind == kind]


# -- each kind -------------------------------------------------------------------------------------


def test_identifiers_include_the_summarizers_and_more() -> None:
    sha = "9f" * 32
    text = (
        f'see doc-123 and ticket_42, {{"doc_id": "doc-9", "chunk_id": 7}}, file {sha}, run '
        "123e4567-e89b-12d3-a456-426614174000, commit 3f2a9c1, db at 10.0.0.12:5432, kept doc_id=doc-10."
    )
    assert kinds(text, "identifier") == [
        "doc-123", "ticket_42", "doc_id=doc-9", "chunk_id=7", sha, "123e4567-e89b-12d3-a456-426614174000", "3f2a9c1", "10.0.0.12:5432", "doc_id=doc-10",
    ]  # fmt: skip
    # every identifier the summarizer's extractor finds is a specific of the same value (a plain
    # doc_id=doc-10 pair, which it reads as doc-10, aside)
    plain = text.replace(" kept doc_id=doc-10.", "")
    assert set(extract_identifiers(plain)) <= {s.value for s in extract_specifics(plain)}


def test_paths_and_urls() -> None:
    text = "Edit src/app/main.py and /etc/nginx/nginx.conf, then ./scripts/run.sh; docs at https://x.org/a_b(1) and http://h:8080/p?q=1."
    assert kinds(text, "path") == ["src/app/main.py", "/etc/nginx/nginx.conf", "./scripts/run.sh"]
    assert kinds(text, "url") == ["https://x.org/a_b", "http://h:8080/p?q=1"]


def test_commands_from_shell_lines_and_tool_call_arguments() -> None:
    text = "I ran:\n$ pytest -x tests/test_a.py -q\n  $   make   build\nprice is $5 and $ not a prompt mid-line"
    assert kinds(text, "command") == ["pytest -x tests/test_a.py -q", "make build"]
    call = assistant("", ToolCall("c1", "run_shell", json.dumps({"command": 'grep -n "retry" src/a.py', "timeout": 30})), ToolCall("c2", "exec", json.dumps({"cmd": ["bash", "-lc", "ls -la"]})))
    found = [v for t in message_texts([call]) for v in kinds(t, "command")]
    assert found == ['grep -n "retry" src/a.py', "bash -lc ls -la"]
    long = "$ " + "x" * 1000
    assert kinds(long, "command") == ["x" * MAX_VALUE_CHARS]


def test_numbers_with_units() -> None:
    text = "It took 3.2s (was 45 ms), used 512 MB of 2GiB, 45% CPU, 3x faster, 128k tokens, v1.2.3 and httpx==0.27.0 at 2.4 GHz."
    assert kinds(text, "quantity") == ["3.2s", "45 ms", "512 MB", "2GiB", "45%", "3x", "128k tokens", "v1.2.3", "0.27.0", "2.4 GHz"]


def test_error_messages() -> None:
    text = "\n".join(
        [
            "FAILED tests/test_a.py::test_b - AssertionError",
            "Traceback (most recent call last):",
            '  File "/srv/app/x.py", line 3, in f',
            "    raise ValueError('bad')",
            "ValueError: bad value 12",
            "Traceback (most recent call last):",
            '  File "/srv/app/y.py", line 9, in g',
            "KeyboardInterrupt",
            "E   requests.exceptions.ConnectionError: connection refused",
            "main.c:3:5: error: expected ';' before '}' token",
            "Error: ENOENT: no such file",
            "panic: runtime error: index out of range",
        ]
    )
    assert kinds(text, "error") == [
        "FAILED tests/test_a.py::test_b - AssertionError",
        "ValueError: bad value 12",
        "KeyboardInterrupt",
        "requests.exceptions.ConnectionError: connection refused",
        "error: expected ';' before '}' token",
        "Error: ENOENT: no such file",
        "panic: runtime error: index out of range",
    ]


def test_decisions() -> None:
    text = (
        "We decided to use PostgreSQL 16 for the store. Let's switch to uv; it is faster. "
        "We'll drop the legacy endpoint.\nDecision: keep the retry limit at 3\n我们决定使用 Redis 做缓存。"
    )
    assert kinds(text, "decision") == [
        "We decided to use PostgreSQL 16 for the store",
        "Let's switch to uv",
        "We'll drop the legacy endpoint",
        "Decision: keep the retry limit at 3",
        "我们决定使用 Redis 做缓存",
    ]


def test_specifics_are_found_inside_chinese_text_without_absorbing_it() -> None:
    text = "见doc-123。路径 /srv/kb/a.md，网址 https://x.org/a，内存 512MB 的限制，耗时3.2s，报错 Error: 连接被拒绝\n$ ls -la 目录"
    found = [(s.kind, s.value) for s in extract_specifics(text)]
    assert found == [
        ("identifier", "doc-123"), ("path", "/srv/kb/a.md"), ("url", "https://x.org/a"), ("quantity", "512MB"),
        ("quantity", "3.2s"), ("error", "Error: 连接被拒绝"), ("command", "ls -la 目录"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "prose",
    [
        "The quarterly report lists revenue by region, churn by cohort and a long appendix about methodology. "
        "In the 1990s the team had 3 people and 12 files; it uses UTF-8 and SHA-256. I will use the search tool next, "
        "and we will see. The error: nobody knew. Errors happen, and so do failures. Plan B costs $5.",
        "关于退款流程：客户需要在七天内提交申请，我们会尽快处理，请耐心等待。错误信息请截图发给我们。",
        "Searching: the standard library documents how to decode bytes and handle errors gracefully.",
    ],
)
def test_ordinary_prose_gives_nothing(prose: str) -> None:
    assert extract_specifics(prose) == []


def test_ordered_and_deduplicated() -> None:
    text = "doc-1 then /a/b.c then doc-1 again and /a/b.c"
    assert extract_specifics(text) == [Specific("identifier", "doc-1"), Specific("path", "/a/b.c")]


def test_message_texts_counts_content_and_tool_calls() -> None:
    msgs = [user("hi doc-1"), assistant("", ToolCall("c", "read_file", '{"path": "src/x.py"}')), tool_result("c", "body", name="read_file")]
    assert message_texts(msgs) == ["hi doc-1", 'read_file {"path": "src/x.py"}', "body"]


# -- dropped specifics -----------------------------------------------------------------------------


def test_an_id_kept_in_the_summary_is_not_dropped_and_a_path_only_in_the_range_is() -> None:
    before = ["Found doc-77 and the export at /srv/data/churn-2026.csv."]
    out = dropped_specifics(before=before, summary="Summary: doc-77 holds the owner.", after=["You are an agent."], referenced=[])
    assert out.seen == 2
    assert out.dropped == (DroppedSpecific("path", "/srv/data/churn-2026.csv", False),)
    assert (out.dropped_count, out.referenced_count, out.truncated) == (1, 0, False)


def test_an_id_only_in_a_pruned_preview_is_kept() -> None:
    before = ["The owner is in doc-88 (chunk_id=chunk-5)."]
    preview = '[query_kb result, ~2400 tokens, sha256 ab…]\n{"doc_id":"doc-88","chunk_id":"chunk-5","title":"Owners"}\n[… 40 more results not shown]'
    out = dropped_specifics(before=before, summary="Nothing specific.", after=[preview], referenced=[])
    assert out.seen == 2 and out.dropped == ()


def test_kept_means_shown_again_in_another_form() -> None:
    before = [
        '{"doc_id": "doc-9"} took 512 MB; see src/app/main.py and run\n$ grep -n "x y" a.txt\nValueError: bad input',
    ]
    after = [
        'Summary keeps doc-9, 512MB, the file /work/src/app/main.py:12, the call {"command": "grep -n \\"x y\\" a.txt"} and: ValueError: bad input (line 3).'
    ]
    out = dropped_specifics(before=before, summary=None, after=after, referenced=[])
    assert out.seen == 5 and out.dropped == ()  # doc_id=doc-9, 512 MB, the path, the command, the error
    # but a longer id is not the shorter one, and a number is not the same number with another unit
    out = dropped_specifics(before=["doc-12 took 5 ms"], summary="doc-123 took 5 s", after=[], referenced=[])
    assert [d.value for d in out.dropped] == ["doc-12", "5 ms"]


def test_a_summarys_grouped_identifiers_are_read_back_whole() -> None:
    # the extractive summary writes ids sharing a head grouped (a shell's brace expansion): they are kept
    before = ["Found /srv/app/main.py, /srv/app/util.py, /srv/app/cli.py, doc-123456 and doc-123457."]
    out = dropped_specifics(before=before, summary="- /srv/app/{main,util}.py\n- doc-{123456,123457}", after=[], referenced=[])
    assert [d.value for d in out.dropped] == ["/srv/app/cli.py"] and out.seen == 5
    # a previous summary's grouped form is what it showed, member by member, not "/srv/app/"
    out = dropped_at_compaction(summarized=[user("next", id=9)], previous_summary="- /srv/app/{main,util}.py", summary="- /srv/app/main.py", kept=[])
    assert [d.value for d in out.dropped] == ["/srv/app/util.py"] and out.seen == 2


def test_the_previous_summary_counts_as_before() -> None:
    out = dropped_specifics(before=["new range", "Previous summary: see https://x.org/report"], summary="a new summary", after=[])
    assert [(d.kind, d.value) for d in out.dropped] == [("url", "https://x.org/report")]


def test_referenced_when_the_request_or_the_retained_tail_names_a_dropped_specific() -> None:
    before = [
        "Exported /srv/data/churn-2026.csv; commit 3f2a9c17be; used 512 MB\nValueError: bad row 7 in doc-5\nFAILED tests/t.py::test_rows - boom",
    ]
    out = dropped_specifics(
        before=before,
        summary="short",
        after=["You are an agent."],
        referenced=["Please reopen churn-2026.csv, revert 3f2a9c1, fix the ValueError and rerun test_rows."],
    )
    flags = {d.value: d.referenced for d in out.dropped}
    assert flags == {
        "/srv/data/churn-2026.csv": True,  # its file name
        "3f2a9c17be": True,  # a 7-character prefix of the hash
        "512 MB": False,
        "ValueError: bad row 7 in doc-5": True,  # its exception name
        "doc-5": False,
        "FAILED tests/t.py::test_rows - boom": True,  # its test
        "tests/t.py": False,
    }
    assert out.referenced_count == 4 and len(out.referenced) == 4


def test_truncation_keeps_the_counts_and_the_referenced_ones_first() -> None:
    ids = [f"doc-{i}" for i in range(MAX_DROPPED + 100)]
    out = dropped_specifics(before=[" ".join(ids)], summary="none", after=[], referenced=[f"what about {ids[-1]}?"])
    assert out.seen == len(ids) == out.dropped_count
    assert len(out.dropped) == MAX_DROPPED and out.truncated
    assert out.referenced_count == 1 and out.dropped[-1] == DroppedSpecific("identifier", ids[-1], True)
    assert [d.value for d in out.dropped[:-1]] == ids[: MAX_DROPPED - 1]  # in order of appearance
    small = dropped_specifics(before=[" ".join(ids[:3])], summary=None, after=[], limit=2)
    assert len(small.dropped) == 2 and small.dropped_count == 3 and small.truncated


def test_nothing_seen_nothing_dropped() -> None:
    out = dropped_specifics(before=["just prose here"], summary=None, after=[], referenced=[])
    assert out == DroppedSpecifics(seen=0)
    assert (out.dropped_count, out.referenced_count, out.truncated) == (0, 0, False)


def test_dropped_at_compaction_counts_messages_as_the_model_saw_them() -> None:
    call = ToolCall("c1", "read_file", '{"path": "/srv/app/settings.py"}')
    summarized = [user("Find the owner of doc-1."), assistant("", call), tool_result("c1", "[preview] owner: doc-1; see /srv/app/owners.csv", name="read_file")]
    kept = [user("Current: close doc-1 and fix settings.py"), assistant("On it.")]
    out = dropped_at_compaction(summarized=summarized, previous_summary="Earlier: https://x.org/a", summary="doc-1 is owned by ops.", kept=kept, system_prompt="Cite /srv/app/owners.csv.")
    # the call's argument counts as seen; the system prompt still shows the CSV; the request names settings.py
    assert [(d.kind, d.value, d.referenced) for d in out.dropped] == [("path", "/srv/app/settings.py", True), ("url", "https://x.org/a", False)]
    assert out.seen == 4


# -- JSON and events -------------------------------------------------------------------------------


def test_json_round_trips_and_is_tolerant() -> None:
    out = dropped_specifics(before=["doc-1 /a/b.py https://x.org"], summary=None, after=[], referenced=["b.py"])
    data = json.loads(json.dumps(out.to_json()))
    assert DroppedSpecifics.from_json(data) == out
    assert DroppedSpecifics.from_json(json.loads(json.dumps(out.event_fields()))) == out
    assert DroppedSpecifics.from_json(None) is None and DroppedSpecifics.from_json("x") is None
    assert DroppedSpecifics.from_json({"dropped": []}) is None  # no count seen: not recorded
    junk = {"seen": 4, "dropped": [{"kind": "path", "value": "/a"}, {"kind": 3}, "x", None, {"value": "v"}], "dropped_count": "many", "truncated": "yes"}
    got = DroppedSpecifics.from_json(junk)
    assert got == DroppedSpecifics(seen=4, dropped=(DroppedSpecific("path", "/a"),))
    assert DroppedSpecific.from_json({"kind": "url", "value": "u", "referenced": 1}) == DroppedSpecific("url", "u", False)
    assert out.by_kind() == {"identifier": (out.dropped[0],), "path": (out.dropped[1],), "url": (out.dropped[2],)}


def test_summary_events_carry_the_fields_and_old_events_parse() -> None:
    found = dropped_specifics(before=["doc-1 and /srv/x.csv"], summary="doc-1", after=[], referenced=["x.csv"])
    fields = found.event_fields()
    fields["dropped"] = tuple(DroppedEntry(**d) for d in fields["dropped"])
    event = SummaryEvent(tokens_before=10, **fields, specifics_ms=0.5)
    data = json.loads(json.dumps(event.to_data()))
    assert data["dropped"] == [{"kind": "path", "value": "/srv/x.csv", "referenced": True}]
    parsed = parse_event("summary", data)
    assert isinstance(parsed, SummaryEvent) and parsed == event
    assert parsed.specifics() == found
    old = {"tokens_before": 10, "tokens_after": 5, "dropped_identifiers": 0, "duration_ms": 1.0}
    legacy = parse_event("summary", old)
    assert isinstance(legacy, SummaryEvent)
    assert (legacy.specifics_seen, legacy.dropped_specifics, legacy.dropped, legacy.dropped_truncated) == (None, None, None, None)
    assert legacy.specifics() is None
    broken = parse_event("summary", {**old, "specifics_seen": 2, "dropped": [{"kind": "url"}, 5], "dropped_specifics": "x"})
    assert broken.specifics() == DroppedSpecifics(seen=2)


@pytest.mark.parametrize(
    "text",
    ["." * 300_000, ",a" * 150_000, "/a" * 150_000, "a/" * 150_000, ("QUJD/ZGVm+" * 30_000), "1" * 300_000, "Error: " * 40_000, "我们决定使用" * 40_000, "Traceback (most recent call last):\n" * 10_000, "  Traceback (most recent call last):\n" * 10_000],
    ids=["dots", "commas", "abs-path", "slashes", "base64", "digits", "errors", "chinese", "tracebacks", "indented-tracebacks"],
)
def test_linear_on_pathological_text(text: str) -> None:
    """No pattern backtracks quadratically, and no long path is cut into every trailing part: a
    few hundred thousand characters of the worst shapes take well under a second (bound: 10 s on a
    loaded machine)."""
    import time

    started = time.process_time()
    dropped_specifics(before=[text], summary="s", after=[text[: len(text) // 2]], referenced=[text[-5000:]])
    assert time.process_time() - started < 10
