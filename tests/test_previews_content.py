"""Previews chosen by the content of a tool result, whatever the tool is called (issue 25): records of
JSON (also in MCP content lists, Claude Code toolUseResult shapes, inside text), test logs, grep
listings, tables, file reads; compact record lines; prunes recording what their previews leave out."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from engine.compaction.pruning import Pruned, prune_dropped, prune_surface, prune_tool_result
from engine.core.events import DroppedEntry, PrunedResult, PruneEvent, parse_event
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.policy import CompactionPolicy
from engine.core.previews import (
    PreviewBudgetError,
    build_replacement,
    generic_preview,
    parse_records,
    render_preview,
    replacement_preview,
    shape_for_tool,
)
from engine.core.workdir import Workdir

count = default_meter().count_text
TOOLS = ("query_kb", "search_docs", "mcp__kb__search", "WebSearch", "my_tool")
SHA = "0123456789abcdef" * 4


def results(n: int, seed: int = 1, words: int = 300) -> list[dict[str, object]]:
    rng = random.Random(seed)
    vocab = "replica lag standby promote failover primary archive recovery checkpoint vacuum".split()
    out = []
    for i in range(n):
        doc = f"doc-{1000 + i}"
        out.append({
            "id": doc,
            "url": f"https://kb.example.com/pages/{rng.randint(10**5, 10**6)}/{doc}",
            "title": " ".join(rng.choice(vocab) for _ in range(4)).title(),
            "score": round(rng.uniform(0.3, 0.99), 3),
            "content": " ".join(rng.choice(vocab) for _ in range(words)),
        })
    return out


def shown(value: str, text: str) -> bool:
    return re.search(rf"(?<![\w/.-]){re.escape(value)}(?![\w/-])", text) is not None


def replacement(tool: str, content: str, budget: int) -> str:
    return build_replacement(tool, content, sha256=SHA, path=f"{tool}-{SHA}.txt", original_tokens=count(content),
                             budget_tokens=budget, count_tokens=count)


# -- the same preview whatever the tool's name ------------------------------------------------------


@pytest.mark.parametrize("budget", [60, 150, 400, 900])
def test_the_same_results_under_five_tool_names_give_the_same_preview(budget: int) -> None:
    content = json.dumps({"query": "fail over", "results": results(12)})
    previews = {tool: render_preview(tool, content, budget_tokens=budget, count_tokens=count) for tool in TOOLS}
    assert len(set(previews.values())) == 1, previews
    assert all(count(p) <= budget for p in previews.values())
    assert "12 results; fields: id" in previews["my_tool"] and "result_count" not in previews["my_tool"]


@pytest.mark.parametrize("tool", TOOLS)
def test_every_id_and_url_of_up_to_20_results_at_the_default_budget_for_any_tool(tool: str) -> None:
    budget = CompactionPolicy().preview_tokens
    for n in (1, 5, 10, 15, 20):
        rs = results(n, seed=n)
        out = replacement(tool, json.dumps({"query": "q", "results": rs}), budget)
        assert count(out) <= budget
        assert [r["id"] for r in rs if not shown(str(r["id"]), out)] == [], (tool, n)
        assert [r["url"] for r in rs if not shown(str(r["url"]), out)] == [], (tool, n)
    five = results(5, seed=5)
    out = replacement(tool, json.dumps({"results": five}), budget)
    assert all(str(r["title"]) in out for r in five)  # titles too where they fit


def test_record_lines_name_each_field_once_and_read_back() -> None:
    rs = results(3, words=5)
    preview = render_preview("my_tool", json.dumps({"results": rs}), budget_tokens=400, count_tokens=count)
    assert preview.count("fields: ") == 1 and '"id"' not in preview and '"url"' not in preview
    meta, rows = parse_records(preview)
    assert meta["result_count"] == 3
    assert [(r["id"], r["url"], r["title"], r["score"]) for r in rows] == [(r["id"], r["url"], r["title"], r["score"]) for r in rs]
    assert list(rows[0]) == ["id", "url", "title", "score", "content"]


def test_a_value_with_the_separator_or_quotes_reads_back_exactly() -> None:
    odd = [{"id": "a | b", "title": '"quoted" title', "url": "https://x.example/1"}, {"id": "-", "title": "42", "url": "https://x.example/2"}]
    meta, rows = parse_records(render_preview("t", json.dumps(odd), budget_tokens=300, count_tokens=count))
    assert [(r["id"], r["title"]) for r in rows] == [("a | b", '"quoted" title'), ("-", "42")]


def test_source_names_and_collection_ids_are_identifiers_kept_at_160_tokens() -> None:
    kb = {"results": [{
        "doc_id": "doc-7731", "chunk_id": "doc-7731#c12", "title": "Signing key rotation runbook",
        "url": "https://kb.example.com/security/doc-7731", "score": 0.91, "content": "rotate the key " * 200,
        "metadata": {"file_id": "file-5520", "kb_id": "kb-security", "source": "security-handbook.pdf"},
    }]}
    preview = render_preview("query_kb", json.dumps(kb), budget_tokens=160, count_tokens=count)
    assert count(preview) <= 160
    for value in ("doc-7731", "doc-7731#c12", "file-5520", "kb-security", "security-handbook.pdf"):
        assert value in preview


def test_the_frame_names_the_saved_file_once_and_the_preview_reads_back() -> None:
    content = json.dumps({"results": results(4)})
    out = replacement("my_tool", content, 600)
    assert out.count(SHA) == 1 and out.splitlines()[0].endswith(f"full text: my_tool-{SHA}.txt]")
    body = replacement_preview(out)
    assert body.startswith("4 results; fields: ") and "[end of preview" not in body and SHA not in body
    old = f"[tool result offloaded: x, ~9 tokens]\nsha256: {SHA}\nsaved: x-{SHA}.txt\npreview:\nbody\n[end of preview: ~1 tokens left out; the full result is in the saved file]"
    assert replacement_preview(old) == "body"  # replacements stored before keep reading back
    tricky = "first\npreview: not a frame line\nlast " + "word " * 2000
    out = replacement("shell", tricky, 600)
    assert replacement_preview(out).startswith("[head: chars 0-") and "preview: not a frame line" in replacement_preview(out)


# -- content shapes ----------------------------------------------------------------------------------


def test_mcp_content_lists_and_structured_content() -> None:
    rs = results(8, words=40)
    inner = json.dumps({"results": rs})
    for content in (
        json.dumps([{"type": "text", "text": inner}]),
        json.dumps({"content": [{"type": "text", "text": inner}], "isError": False}),
        json.dumps({"content": [{"type": "text", "text": "see structured"}], "structuredContent": {"results": rs}}),
    ):
        preview = render_preview("mcp__kb__search", content, budget_tokens=400, count_tokens=count)
        meta, rows = parse_records(preview)
        assert meta["result_count"] == 8 and [r["id"] for r in rows] == [r["id"] for r in rs]


def test_json_embedded_in_text_is_read_as_json() -> None:
    rs = results(10, words=60)
    content = "Found 10 documents for your query:\n" + json.dumps({"results": rs}, indent=2) + "\nDone."
    preview = render_preview("search_docs", content, budget_tokens=400, count_tokens=count)
    meta, rows = parse_records(preview)
    assert meta["result_count"] == 10 and [r["id"] for r in rows] == [r["id"] for r in rs]
    assert "Found 10 documents" in str(meta.get("text_before")) and meta.get("text_after") == "Done."


def _rg_log() -> tuple[str, dict[str, list[int]]]:
    files: dict[str, list[int]] = {}
    lines = []
    for f in range(15):
        path = f"src/service/module_{f:02d}/handlers.py"
        for k in range(4):
            n = 10 + f * 7 + k * 31
            files.setdefault(path, []).append(n)
            lines.append(f"{path}:{n}:    retry_limit = settings.get('retry_limit', {k})  # {'padding words ' * 6}")
    return "\n".join(lines), files


def test_a_grep_log_keeps_its_paths_and_line_numbers() -> None:
    log, files = _rg_log()
    assert count(log) > 1500
    for budget in (250, 400):
        preview = render_preview("Grep", log, budget_tokens=budget, count_tokens=count)
        assert count(preview) <= budget and preview.startswith("60 matches in 15 files")
        assert all(path in preview for path in files)
        first = next(iter(files))  # the budget left goes to the first files: their line numbers at least
        assert f"{first}: {', '.join(map(str, files[first]))}" in preview or all(f"  {n}: " in preview for n in files[first])
    preview = render_preview("Grep", log, budget_tokens=500, count_tokens=count)
    assert all(f"{path}: {', '.join(map(str, numbers))}" in preview or f"  {numbers[-1]}: " in preview for path, numbers in files.items())


def test_an_ls_or_glob_listing_keeps_its_paths() -> None:
    paths = [f"/home/dev/src/app/components/widget_{i:03d}/index.tsx" for i in range(40)]
    for content in ("\n".join(paths), json.dumps({"filenames": paths, "numFiles": 40, "durationMs": 12})):
        preview = render_preview("Glob", content, budget_tokens=600, count_tokens=count)
        assert all(p in preview for p in paths), preview[:200]


def _pytest_log() -> str:
    lines = ["============================= test session starts ==============================", "collected 240 items", ""]
    lines += [f"tests/unit/test_mod_{i:03d}.py::test_case PASSED [{i * 100 // 240:3d}%]" for i in range(236)]
    lines += [
        "=================================== FAILURES ===================================",
        "___________________________ test_refund_rounding ____________________________",
        "    def test_refund_rounding():",
        ">       assert refund(Decimal('3.333')) == Decimal('3.33')",
        "E       AssertionError: assert Decimal('3.34') == Decimal('3.33')",
        "tests/integration/test_refunds.py:88: AssertionError",
        "___________________________ test_ledger_balance _____________________________",
        "E       KeyError: 'acct-0042'",
        "tests/integration/test_ledger.py:41: KeyError",
        "=========================== short test summary info ============================",
        "FAILED tests/integration/test_refunds.py::test_refund_rounding - AssertionError: assert Decimal('3.34') == Decimal('3.33')",
        "FAILED tests/integration/test_ledger.py::test_ledger_balance - KeyError: 'acct-0042'",
        "================= 2 failed, 238 passed in 48.12s =================",
    ]
    return "\n".join(lines)


def _go_log() -> str:
    lines = [f"=== RUN   TestHandler{i}\n--- PASS: TestHandler{i} (0.00s)" for i in range(120)]
    lines += ["=== RUN   TestRetryBudget", "    retry_test.go:57: expected 3 retries, got 5", "--- FAIL: TestRetryBudget (0.01s)",
              "FAIL", "FAIL\tgithub.com/acme/gateway/retry\t0.412s"]
    return "\n".join(lines)


def _jest_log() -> str:
    lines = [f"PASS src/components/widget{i}.test.tsx" for i in range(150)]
    lines += ["FAIL src/api/client.test.ts", "  ● api client › retries on 503",
              "    expect(received).toBe(expected) // Object.is equality", "    Expected: 3", "    Received: 1",
              "      at Object.<anonymous> (src/api/client.test.ts:42:23)",
              "Tests:       1 failed, 612 passed, 613 total", "Test Suites: 1 failed, 150 passed, 151 total"]
    return "\n".join(lines)


@pytest.mark.parametrize(("make", "names", "needles"), [
    (_pytest_log, ["tests/integration/test_refunds.py::test_refund_rounding", "tests/integration/test_ledger.py::test_ledger_balance"],
     ["2 failed, 238 passed in 48.12s", "AssertionError: assert Decimal('3.34') == Decimal('3.33')", "KeyError: 'acct-0042'"]),
    (_go_log, ["TestRetryBudget"], ["retry_test.go:57: expected 3 retries, got 5", "FAIL\tgithub.com/acme/gateway/retry\t0.412s"]),
    (_jest_log, ["api client › retries on 503"], ["Tests:       1 failed, 612 passed, 613 total", "Expected: 3"]),
], ids=["pytest", "go", "jest"])
@pytest.mark.parametrize("budget", [200, 600])
def test_a_test_log_keeps_its_failing_tests_errors_and_summary(make, names: list[str], needles: list[str], budget: int) -> None:
    log = make()
    assert count(log) > 2 * budget
    preview = render_preview("Bash", log, budget_tokens=budget, count_tokens=count)
    assert count(preview) <= budget and preview.startswith("test run: ")
    for name in names:
        assert f"FAILED {name}" in preview
    for needle in needles:
        assert needle in preview, needle
    assert "PASSED" not in preview.split("\n[head: ")[0] and "--- PASS" not in preview.split("\n[head: ")[0]


def test_a_bash_tool_use_result_is_read_as_its_output() -> None:
    content = json.dumps({"stdout": _pytest_log(), "stderr": "", "interrupted": False, "isImage": False})
    preview = render_preview("Bash", content, budget_tokens=300, count_tokens=count)
    assert preview.startswith("test run: 2 failing tests") and "test_ledger_balance" in preview


def _load_test_log(figure: str) -> str:
    checks = [f"  check case {i}: {'lorem ipsum dolor sit amet ' * 3}... ok" for i in range(60)]
    stages = [f"  stage {i}: ramping to {i * 70 + 100} virtual users" for i in range(8)]
    return "\n".join(["running scenario loadtest/checkout.js for 300 s", *stages, f"summary: {figure}", *checks])


@pytest.mark.parametrize("wrap", ["codex", "mcp", "stdout"])
def test_a_log_inside_a_json_wrapper_keeps_its_figure_line(wrap: str) -> None:
    """Codex's ``{"output": …, "metadata": …}``, an MCP text block, Bash's stdout: a log of no
    shape is previewed as the text it wraps (real lines), so its figure line stays, as it does for
    the bare log; the wrapper's one JSON line kept none of it."""
    log = _load_test_log("p95 latency 715 ms at 1,852 rps")
    content = json.dumps({
        "codex": {"output": log, "metadata": {"exit_code": 0, "duration_seconds": 0.6}},
        "mcp": {"content": [{"type": "text", "text": log}], "isError": False},
        "stdout": {"stdout": log, "stderr": "", "interrupted": False},
    }[wrap])
    for body in (render_preview("shell", content, budget_tokens=300, count_tokens=count),
                 render_preview("shell", log, budget_tokens=300, count_tokens=count)):
        assert count(body) <= 300
        assert "summary: p95 latency 715 ms at 1,852 rps" in body


def test_a_markdown_table_and_a_csv_keep_their_rows_ids() -> None:
    rows = [(f"TCK-{4000 + i}", "open" if i % 3 else "closed", f"https://tracker.example.com/TCK-{4000 + i}", f"Login fails for user {i} " * 3)
            for i in range(30)]
    md = "| ticket_id | status | url | summary |\n|---|---|---|---|\n" + "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)
    csv_text = "ticket_id,status,url,summary\n" + "\n".join(f"{a},{b},{c},{d}" for a, b, c, d in rows)
    for text in (md, csv_text):
        preview = render_preview("sql_query", text, budget_tokens=600, count_tokens=count)
        meta, got = parse_records(preview)
        assert meta["rows"] == 30 and [r["ticket_id"] for r in got] == [r[0] for r in rows]
        assert all(r[2] in preview for r in rows)


def test_a_file_read_keeps_its_path_outline_and_head() -> None:
    body = []
    for i in range(60):
        body += [f"class Handler{i}:", f"    def handle_{i}(self, request):", *(f"        step_{k} = compute({k})" for k in range(8)), ""]
    numbered = "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(body, 1))
    preview = render_preview("Read", numbered, budget_tokens=300, count_tokens=count)
    assert count(preview) <= 300 and preview.startswith("file read (lines 1-")
    assert "L1: class Handler0:" in preview and "L12: class Handler1:" in preview and "head:" in preview
    as_json = json.dumps({"type": "text", "file": {"filePath": "/repo/app/handlers.py", "content": "\n".join(body),
                                                   "numLines": len(body), "startLine": 1, "totalLines": len(body)}})
    preview = render_preview("Read", as_json, budget_tokens=300, count_tokens=count)
    assert preview.startswith(f"file: /repo/app/handlers.py (lines 1-{len(body)} of {len(body)})")


def test_a_configured_tool_name_forces_a_shape_and_bad_names_fail_loudly() -> None:
    content = json.dumps({"results": results(10)})
    forced = render_preview("my_tool", content, budget_tokens=200, count_tokens=count, shapes={"my_tool": "generic"})
    assert forced == generic_preview(content, budget_tokens=200, count_tokens=count)
    assert shape_for_tool("mcp__kb__query_kb") == "records" and shape_for_tool("Grep") is None
    assert shape_for_tool("mcp__ci__run", {"run": "test_log"}) == "test_log"
    with pytest.raises(ValueError, match="unknown preview shape"):
        render_preview("x", content, budget_tokens=200, count_tokens=count, shapes={"x": "tabular"})


# -- never raises, always within budget --------------------------------------------------------------


@pytest.mark.parametrize("content", [
    "[" * 50_000 + "]" * 50_000,
    '{"results": [' + ",".join(['{"id": 1e999999}'] * 20) + "]}",
    '{"results": [{"id": NaN, "url": Infinity}]}',
    bytes(range(256)).decode("latin-1") * 400,
    "\x00\x01\x02 binary \ufffd\ufffd" * 5000,
    "a:1:b\n" * 30_000,
    "| a |\n|---|\n" + "| x |\n" * 5000,
    json.dumps([{"type": "text", "text": "[" * 10_000}]),
    "\n{" * 20_000,
])
def test_malformed_huge_or_binary_results_never_raise(content: str) -> None:
    for budget in (0, 40, 300):
        preview = render_preview("my_tool", content, budget_tokens=budget, count_tokens=count)
        assert count(preview) <= budget


@settings(max_examples=60, deadline=None)
@given(text=st.one_of(
    st.text(max_size=2000),
    st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=40) | st.integers(),
                 lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
                 max_leaves=40).map(json.dumps),
), budget=st.integers(min_value=0, max_value=500))
def test_any_content_gives_a_preview_within_its_budget(text: str, budget: int) -> None:
    assert count(render_preview("my_tool", text, budget_tokens=budget, count_tokens=count)) <= budget


# -- prunes record what they left out ----------------------------------------------------------------


def _grep_with_paths(n: int) -> str:
    return "\n".join(f"src/pkg_{i}/module_{i:03d}.py:{10 + i}: value = {'x ' * 40}" for i in range(n))


def test_a_pruned_result_lists_what_its_preview_leaves_out(tmp_path: Path) -> None:
    content = _grep_with_paths(80)
    msg = tool_result("c1", content, name="grep", id=5)
    out = prune_tool_result(msg, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=300, preview_tokens=150)
    assert isinstance(out, Pruned) and out.left_out is not None
    body = replacement_preview(out.preview)
    assert out.left_out.seen >= 80 and out.left_out.dropped_count and out.left_out.dropped_count > 0
    for d in out.left_out.dropped:
        assert d.value in content and d.value not in body
    assert all(f"src/pkg_{i}/module_{i:03d}.py" not in {d.value for d in out.left_out.dropped} for i in range(80)
               if f"src/pkg_{i}/module_{i:03d}.py" in body)


def test_prune_events_list_what_the_previews_left_out_and_read_back(tmp_path: Path) -> None:
    history = [user("what changed in src/pkg_3/module_003.py?", id=1),
               assistant("", ToolCall("c1", "grep", "{}"), id=2),
               tool_result("c1", _grep_with_paths(200), name="grep", id=3)]
    report = prune_surface(history, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=300, preview_tokens=150)
    (p,) = report.pruned
    fields = prune_dropped(report, history, current_request=history[0].content)
    assert fields["specifics_seen"] >= 200 and fields["dropped_specifics"] > 0
    assert fields["dropped_specifics"] == p.left_out.dropped_count if p.left_out else False
    values = [d.value for d in fields["dropped"]]
    assert all(v not in replacement_preview(p.preview) for v in values)
    event = PruneEvent(pruned=(PrunedResult(message_id=3, tool="grep", specifics_seen=p.left_out.seen, left_out=p.left_out.dropped_count),),
                       **fields)
    data = json.loads(json.dumps(event.to_data()))
    back = parse_event("prune", data)
    assert isinstance(back, PruneEvent) and back.dropped_specifics == fields["dropped_specifics"]
    specifics = back.specifics()
    assert specifics is not None and [d.value for d in specifics.dropped] == values
    assert back.pruned and back.pruned[0].left_out == p.left_out.dropped_count
    assert all(isinstance(d, DroppedEntry) for d in back.dropped or ())
    old = parse_event("prune", {"tokens_before": 10, "pruned": [{"message_id": 3}]})  # written before: keys absent
    assert isinstance(old, PruneEvent) and old.specifics() is None and "dropped" not in PruneEvent(tokens_before=1).to_data()


def test_a_budget_too_small_for_the_frame_is_still_a_typed_error() -> None:
    with pytest.raises(PreviewBudgetError):
        replacement("my_tool", json.dumps({"results": results(3)}), 20)
