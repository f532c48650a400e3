# Over 500 lines: realistic logs and search payloads are built inline, next to the rules they test.
"""Tool-result previews: generic slices, structured search/KB previews, the replacement text."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from engine.core.meter import default_meter
from engine.core.previews import (
    PreviewBudgetError,
    build_replacement,
    generic_preview,
    is_structured_tool,
    parse_records,
    render_preview,
    structured_preview,
)
from engine.core.specifics import extract_identifiers

count = default_meter().count_text
SHA = "0123456789abcdef" * 4
PATH = "/var/agent/workdir/query_kb-" + SHA + ".txt"
INTERNAL = "/srv/kb/host01/private/vol7/manual.pdf"


def parse_structured(text: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    """Split a records preview into its ``key: value`` lines and its records (one dict per line)."""
    return parse_records(text)


def kb_payload(n: int, content_words: int = 400) -> dict[str, object]:
    return {
        "query": "how do I rotate the signing key?",
        "results": [
            {
                "doc_id": f"doc-{i}",
                "chunk_id": f"doc-{i}#c{i * 3}",
                "title": f"Key rotation guide part {i}",
                "url": f"https://docs.example.com/keys/{i}",
                "score": round(0.95 - i / 100, 3),
                "content": " ".join(f"word{j}" for j in range(content_words)),
                "embedding": [0.125] * 64,
                "metadata": {
                    "file_id": f"file-{i}",
                    "kb_id": "kb-security",
                    "source": "security-handbook",
                    "_internal_path": f"{INTERNAL}#{i}",
                    "host": "kb-host01.internal",
                },
            }
            for i in range(n)
        ],
    }


LONG_TEXT = "\n".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7}" for i in range(20_000))


# -- generic ------------------------------------------------------------------------------------------


def test_generic_preview_returns_small_content_unchanged() -> None:
    assert generic_preview("short output", budget_tokens=50, count_tokens=count) == "short output"


@pytest.mark.parametrize("budget", [45, 80, 200, 600, 2000])
def test_generic_preview_has_labelled_head_and_tail_within_budget(budget: int) -> None:
    preview = generic_preview(LONG_TEXT, budget_tokens=budget, count_tokens=count)
    assert count(preview) <= budget
    assert preview.startswith("[head: chars 0-")
    tail_label, tail_body = preview.rsplit("\n[tail: chars ", 1)[1].split("\n", 1)
    assert tail_label.endswith(f"-{len(LONG_TEXT)}]") and tail_body and LONG_TEXT.endswith(tail_body)
    head_body = preview.split("\n", 1)[1].split("\n[", 1)[0]
    assert LONG_TEXT.startswith(head_body) and head_body
    assert "chars omitted" in preview


def test_generic_preview_middle_slice_comes_from_the_middle() -> None:
    preview = generic_preview(LONG_TEXT, budget_tokens=600, count_tokens=count)
    label = next(line for line in preview.splitlines() if line.startswith("[middle: chars "))
    start, end = (int(x) for x in label[len("[middle: chars ") : -1].split("-"))
    assert abs(start - len(LONG_TEXT) // 2) < len(LONG_TEXT) // 20
    body = preview.split(label + "\n", 1)[1].split("\n[", 1)[0]
    assert LONG_TEXT[start:end].strip("\n") == body


@pytest.mark.parametrize("budget", [0, 1, 5])
def test_generic_preview_is_empty_when_not_even_labels_fit(budget: int) -> None:
    assert generic_preview(LONG_TEXT, budget_tokens=budget, count_tokens=count) == ""


def test_generic_preview_of_chinese_text_within_budget() -> None:
    text = "".join(f"第{i}行：上下文压缩把大的工具结果写入工作目录，只保留预览。\n" for i in range(5000))
    preview = generic_preview(text, budget_tokens=300, count_tokens=count)
    assert count(preview) <= 300
    assert "第0行：上下文压缩" in preview and "第4999行" in preview


def _pytest_log() -> str:
    """A realistic `make test` log: install, 1,212 tests, one failure in the middle, captured logs."""
    passed = "tests/unit/test_ledger_{:02d}.py::test_case_{:04d} PASSED          [{:3d}%]"
    lines = [
        "$ make test",
        "Collecting httpx>=0.27",
        "  Downloading https://files.pythonhosted.org/packages/41/7b/httpx-0.28.1-py3-none-any.whl (73 kB)",
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0",
        "rootdir: /home/dev/src/payments-service",
        "collected 1212 items",
        "",
        *(passed.format(i // 40, i, i * 100 // 1212) for i in range(600)),
        "tests/integration/test_refunds.py::test_partial_refund_rounding FAILED    [ 50%]",
        *(passed.format(i // 40, i, i * 100 // 1212) for i in range(600, 1211)),
        "=================================== FAILURES ===================================",
        "    def test_partial_refund_rounding():",
        ">       assert refund(order, Decimal('3.333')).amount == Decimal('3.33')",
        "E       AssertionError: assert Decimal('3.34') == Decimal('3.33')",
        "",
        "tests/integration/test_refunds.py:88: AssertionError",
        "----------------------------- Captured log call ------------------------------",
        *(f"DEBUG    payments.ledger:ledger.py:{120 + i % 50} posting entry {i} amount=0.0{i % 10}" for i in range(400)),
        "WARNING  payments.gateway:gateway.py:77 retrying POST https://sandbox.pay.example.com/v2/refunds/rf_8Yq2 after 502",
        *(f"DEBUG    payments.ledger:ledger.py:{120 + i % 50} balance check {i} ok" for i in range(400)),
        "=========================== short test summary info ============================",
        "FAILED tests/integration/test_refunds.py::test_partial_refund_rounding - AssertionError",
        "================= 1 failed, 1211 passed in 48.12s =================",
        "make: *** [Makefile:12: test] Error 1",
    ]
    return "\n".join(lines)


def _build_log() -> str:
    """A C build log: thousands of compile lines, a linker error and a missing header in the middle."""
    lines = [f"[{i:4d}/4000] Building CXX object src/core/CMakeFiles/core.dir/module_{i}.cpp.o" for i in range(2000)]
    lines += [
        "/usr/bin/ld: cannot find -lssl: No such file or directory",
        "clang++: error: linker command failed with exit code 1 (use -v to see invocation)",
        "ninja: build stopped: subcommand failed.",
        "See https://cmake.org/cmake/help/latest/variable/OPENSSL_ROOT_DIR.html for hints",
    ]
    lines += [f"[{i:4d}/4000] Building CXX object src/net/CMakeFiles/net.dir/conn_{i}.cpp.o" for i in range(2000, 4000)]
    lines += ["-- Build files have been written to: /home/dev/src/proxy/build", "done"]
    return "\n".join(lines)


def _is_kept_form(line: str, text: str) -> bool:
    """``text`` is ``line`` itself, a cut of it marked with an ellipsis, or identifiers it names."""
    if text == line or text.strip("…") in line and text != text.strip("…"):
        return True
    return bool(text) and all(i in extract_identifiers(line) for i in text.split(" "))


def _kept_lines(preview: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in preview.splitlines():
        if line.startswith("L") and ": " in line and line[1 : line.index(": ")].isdigit():
            number, _, text = line.partition(": ")
            out[int(number[1:])] = text
    return out


@pytest.mark.parametrize(
    ("make_log", "needles"),
    [
        (
            _pytest_log,
            [
                "test_partial_refund_rounding FAILED",
                "E       AssertionError: assert Decimal('3.34') == Decimal('3.33')",
                "tests/integration/test_refunds.py:88: AssertionError",
                "https://sandbox.pay.example.com/v2/refunds/rf_8Yq2",
            ],
        ),
        (
            _build_log,
            [
                "/usr/bin/ld: cannot find -lssl: No such file or directory",
                "clang++: error: linker command failed with exit code 1",
                "https://cmake.org/cmake/help/latest/variable/OPENSSL_ROOT_DIR.html",
            ],
        ),
    ],
    ids=["pytest", "build"],
)
@pytest.mark.parametrize("budget", [420, 600])
def test_generic_preview_keeps_error_url_and_path_lines_from_the_middle(make_log, needles: list[str], budget: int) -> None:
    log = make_log()
    lines = log.splitlines()
    preview = generic_preview(log, budget_tokens=budget, count_tokens=count)
    assert count(preview) <= budget
    assert preview.startswith("[head: chars 0-") and "\n[tail: chars " in preview
    kept = _kept_lines(preview)
    # numbered as in the log: verbatim, a cut of the line marked with "…", or the identifiers it names
    assert kept and all(_is_kept_form(lines[n - 1], text) for n, text in kept.items())
    head_end = int(preview.split("\n", 1)[0].split("-")[1].split()[0])
    tail_start = int(preview.rsplit("\n[tail: chars ", 1)[1].split("-")[0])
    for needle in needles:
        assert needle in preview
        where = log.index(needle)
        assert head_end < where < tail_start  # it came from the part left out, not from head or tail
    replacement = build_replacement("shell", log, sha256=SHA, path=PATH, original_tokens=count(log),
                                    budget_tokens=budget, count_tokens=count)
    assert count(replacement) <= budget and all(needle in replacement for needle in needles[:2])


def test_kept_lines_are_errors_first_deduplicated_and_clipped() -> None:
    noise = [f"step {i}: copying build/artifacts/part_{i}.bin to the cache" for i in range(3000)]
    long_error = "x" * 4000 + " RuntimeError: the cache is full " + "y" * 4000
    lines = noise[:1000] + ["ValueError: bad checksum"] * 50 + noise[1000:2000] + [long_error] + noise[2000:]
    log = "\n".join(lines)
    preview = generic_preview(log, budget_tokens=300, count_tokens=count)
    assert count(preview) <= 300
    kept = _kept_lines(preview)
    texts = list(kept.values())
    assert texts.count("ValueError: bad checksum") == 1  # deduplicated
    clipped = next(t for t in texts if "RuntimeError: the cache is full" in t)
    assert len(clipped) <= 240 and clipped.startswith("…") and clipped.endswith("…")
    # errors first: with room for only a few lines, path lines never displace the two errors
    assert sum("Error" in t for t in texts) == 2 and len(texts) >= 2


def test_a_log_without_notable_lines_keeps_the_middle_slice() -> None:
    preview = generic_preview(LONG_TEXT, budget_tokens=600, count_tokens=count)
    assert "[middle: chars " in preview and not _kept_lines(preview)


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=0, max_size=3000), budget=st.integers(min_value=0, max_value=400),
       tool=st.sampled_from(["query_kb", "web_search", "shell"]))
def test_render_preview_is_never_longer_than_its_budget(text: str, budget: int, tool: str) -> None:
    assert count(render_preview(tool, text, budget_tokens=budget, count_tokens=count)) <= budget


# -- structured ---------------------------------------------------------------------------------------


def test_structured_kb_preview_keeps_fields_in_order_and_fits() -> None:
    payload = kb_payload(30)
    preview = render_preview("query_kb", json.dumps(payload), budget_tokens=3000, count_tokens=count)
    assert count(preview) <= 3000
    meta, rows = parse_structured(preview)
    assert meta["result_count"] == 30 and "omitted_results" not in meta and "shown" not in meta
    assert meta["query"] == payload["query"]
    assert [r["doc_id"] for r in rows] == [f"doc-{i}" for i in range(30)]  # original order
    first = rows[0]
    # fields in the order they are given up: ids (source names too), URLs, titles, scores, content
    assert list(first) == ["doc_id", "chunk_id", "file_id", "kb_id", "source", "url", "title", "score", "content"]
    assert first["chunk_id"] == "doc-0#c0" and first["file_id"] == "file-0" and first["kb_id"] == "kb-security"
    assert first["url"] == "https://docs.example.com/keys/0" and first["score"] == 0.95
    assert str(first["content"]).startswith("word0 word1") and str(first["content"]).endswith("…")
    assert count(str(first["content"])) <= 160


def test_a_tight_budget_drops_content_before_any_result() -> None:
    preview = render_preview("query_kb", json.dumps(kb_payload(30)), budget_tokens=600, count_tokens=count)
    assert count(preview) <= 600
    meta, rows = parse_structured(preview)
    assert meta["result_count"] == 30 and "omitted_results" not in meta
    assert [r["doc_id"] for r in rows] == [f"doc-{i}" for i in range(30)]  # every id, in order
    assert all("content" not in r for r in rows) and "shown" not in meta  # no line says the level: the cells do
    assert all(set(r) <= {"doc_id", "chunk_id", "file_id", "kb_id", "source"} for r in rows[5:])  # ids only, the first ones richer


def test_one_result_in_a_160_token_preview_keeps_its_ids() -> None:
    # the reported case: result_count 1, omitted_results 1 and no id at all
    preview = structured_preview(json.dumps(kb_payload(1)), budget_tokens=160, count_tokens=count)
    assert preview is not None and count(preview) <= 160
    meta, rows = parse_structured(preview)
    assert "omitted_results" not in meta and len(rows) == 1
    assert rows[0]["doc_id"] == "doc-0" and rows[0]["chunk_id"] == "doc-0#c0"


def _level(row: dict[str, object]) -> int:
    """How much of a kb_payload result a row shows: 5 content, 4 all fields, 3 ids+URLs+titles,
    2 ids+URLs, 1 ids, 0 one id (the ladder of engine.core.previews.records)."""
    if "content" in row:
        return 5
    if "score" in row:
        return 4
    if "title" in row:
        return 3
    if "url" in row:
        return 2
    return 1 if "chunk_id" in row else 0


def test_degradation_order_over_a_budget_sweep() -> None:
    text = json.dumps(kb_payload(12))
    one_id_each = sum(count(json.dumps({"doc_id": f"doc-{i}"}, separators=(",", ":"))) + 1 for i in range(12))
    previous: tuple[int, int] | None = None
    for budget in range(30, 2400, 37):
        preview = structured_preview(text, budget_tokens=budget, count_tokens=count)
        assert preview is not None and count(preview) <= budget
        meta, rows = parse_structured(preview)
        assert [r["doc_id"] for r in rows] == [f"doc-{i}" for i in range(len(rows))]  # a prefix, in order
        if "omitted_results" in meta:
            assert meta["omitted_results"] == 12 - len(rows)
            assert one_id_each > budget - count("12 results\nquery: " + json.dumps(kb_payload(0)["query"]))
            assert all(_level(r) == 0 for r in rows)
        levels = [_level(r) for r in rows]
        assert levels == sorted(levels, reverse=True)  # earlier results are never poorer
        assert max(levels, default=0) - min(levels, default=0) <= 1  # at most two adjacent levels
        shown = (len(rows), min(levels, default=0))
        if previous is not None:
            assert shown >= previous  # a larger budget never shows less
        previous = shown
    assert previous == (12, 5)  # every result with its content


def _realistic_kb(n: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    words = "replica lag alert standby promote pg_ctl fencing primary connection string service discovery writes".split()
    results = []
    for i in range(n):
        doc = f"KB-{rng.randint(1000, 9999)}-{rng.randint(0, 99999):05d}"
        results.append({
            "doc_id": doc,
            "chunk_id": f"{doc}::chunk-{rng.randint(0, 300):04d}",
            "title": f"Runbook: {rng.choice(['PostgreSQL failover', 'Rotate TLS certificates', 'Kafka consumer lag'])}",
            "url": f"https://wiki.internal.example.com/spaces/SRE/pages/{rng.randint(10**8, 10**9)}/runbook-{i}",
            "score": round(rng.uniform(0.4, 0.99), 4),
            "content": " ".join(rng.choice(words) for _ in range(rng.randint(300, 800))),
            "metadata": {"kb_id": "kb-sre-runbooks", "source": "confluence", "_path": "/srv/kb/x"},
        })
    return {"query": "how do I fail over the primary database when replication lag alerts fire", "results": results}


def _realistic_web(n: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    words = "postgres standby promote replication lag failover timeline wal archive recovery".split()
    sites = ["stackoverflow.com", "www.postgresql.org", "github.com", "docs.aws.amazon.com", "learn.microsoft.com"]
    results = []
    for _ in range(n):
        site, slug = rng.choice(sites), "-".join(rng.choice(words) for _ in range(rng.randint(4, 9)))
        results.append({
            "id": f"web-{rng.getrandbits(40):010x}",
            "title": f"{slug.replace('-', ' ').title()} - {site}",
            "url": f"https://{site}/questions/{rng.randint(10**6, 10**8)}/{slug}",
            "snippet": " ".join(rng.choice(words) for _ in range(rng.randint(40, 90))),
            "published_date": f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
            "score": round(rng.uniform(0.2, 0.9), 3),
        })
    return {"query": "postgres promote standby replication lag", "results": results}


@pytest.mark.parametrize(("tool", "make"), [("query_kb", _realistic_kb), ("web_search", _realistic_web)])
def test_every_id_of_up_to_20_results_is_visible_at_the_default_preview_budget(tool: str, make) -> None:
    from engine.core.policy import CompactionPolicy

    budget = CompactionPolicy().preview_tokens
    for n in range(1, 21):
        payload = make(n, seed=n)
        text = json.dumps(payload)
        path = f"/home/user/.local/share/compaction-inspector/workdir/{tool}-{SHA}.txt"
        out = build_replacement(tool, text, sha256=SHA, path=path, original_tokens=count(text),
                                budget_tokens=budget, count_tokens=count)
        assert count(out) <= budget
        key = "doc_id" if tool == "query_kb" else "id"
        missing = [r[key] for r in payload["results"] if f"\n{r[key]} | " not in out and f"\n{r[key]}\n" not in out]  # type: ignore[index]
        assert not missing, (n, missing)
        assert "omitted_results" not in out


def test_internal_metadata_never_reaches_the_preview() -> None:
    preview = render_preview("query_kb", json.dumps(kb_payload(3, 20)), budget_tokens=2000, count_tokens=count)
    _, rows = parse_structured(preview)
    assert len(rows) == 3  # everything fits, so nothing is hidden by truncation
    for needle in ("_internal_path", "/srv/kb", "host01", "embedding", "0.125", "kb-host01"):
        assert needle not in preview


def test_web_search_variants_and_nested_list_are_recognised() -> None:
    payload = {
        "data": {
            "items": [
                {
                    "id": "r1",
                    "link": "https://news.example.org/a",
                    "title": "发布会：新模型上线",
                    "siteName": "Example News",
                    "publishedDate": "2026-11-02T08:00:00Z",
                    "relevance_score": 0.91,
                    "rerankScore": 0.77,
                    "snippet": "新模型在长上下文任务上表现更好。" * 10,
                    "raw_html": "<html>secret</html>",
                },
                {"id": "r2", "url": "https://b.example.org", "site": "b.example.org", "publish_time": "2026-10-01"},
            ]
        }
    }
    preview = render_preview("web_search", json.dumps(payload, ensure_ascii=False), budget_tokens=400, count_tokens=count)
    meta, rows = parse_structured(preview)
    assert meta["result_count"] == 2 and "omitted_results" not in meta
    assert rows[0] == {
        "id": "r1",
        "title": "发布会：新模型上线",
        "link": "https://news.example.org/a",
        "siteName": "Example News",
        "publishedDate": "2026-11-02T08:00:00Z",
        "relevance_score": 0.91,
        "rerankScore": 0.77,
        "content": rows[0]["content"],
    }
    assert str(rows[0]["content"]).startswith("新模型在长上下文任务上表现更好。")
    assert "发布会" in preview  # Chinese stays readable, not \\u-escaped
    assert rows[1] == {"id": "r2", "url": "https://b.example.org", "site": "b.example.org", "publish_time": "2026-10-01"}
    assert "raw_html" not in preview


@pytest.mark.parametrize(
    "shape",
    [
        lambda rs: {"results": rs},
        lambda rs: {"documents": rs},
        lambda rs: {"items": rs},
        lambda rs: {"data": rs},
        lambda rs: {"chunks": rs},
        lambda rs: rs,
        lambda rs: {"hits": {"total": 2, "hits": rs}},
    ],
    ids=["results", "documents", "items", "data", "chunks", "top-level-list", "nested-hits"],
)
def test_result_list_keys(shape) -> None:
    results = [
        {"document_id": "A", "knowledge_base_id": "kb9", "rerank_score": 1.5, "text": "alpha"},
        {"document_id": "B", "knowledge_base_id": "kb9", "rerank_score": 0.5, "text": "beta"},
    ]
    preview = structured_preview(json.dumps(shape(results)), budget_tokens=200, count_tokens=count)
    assert preview is not None
    meta, rows = parse_structured(preview)
    assert meta["result_count"] == 2
    assert rows == [
        {"document_id": "A", "knowledge_base_id": "kb9", "rerank_score": 1.5, "content": "alpha"},
        {"document_id": "B", "knowledge_base_id": "kb9", "rerank_score": 0.5, "content": "beta"},
    ]


@pytest.mark.parametrize(
    "content",
    ['{"results": [{"doc_id": "a", "content": "trunc', "not json at all", '{"answer": "no list here"}', '["a", "b"]', "null"],
    ids=["truncated-json", "not-json", "no-result-list", "list-of-strings", "null"],
)
def test_bad_json_falls_back_to_generic(content: str) -> None:
    assert structured_preview(content, budget_tokens=200, count_tokens=count) is None
    big = content + " filler" * 3000
    preview = render_preview("query_kb", big, budget_tokens=200, count_tokens=count)
    assert preview.startswith("[head: chars 0-") and count(preview) <= 200
    assert preview == generic_preview(big, budget_tokens=200, count_tokens=count)


def test_records_are_detected_from_the_content_whatever_the_tool() -> None:
    # deliberately different since previews read the content: any tool's result list is records
    text = json.dumps(kb_payload(30))
    assert render_preview("read_file", text, budget_tokens=300, count_tokens=count) == render_preview(
        "query_kb", text, budget_tokens=300, count_tokens=count)
    assert is_structured_tool("mcp__kb__query_kb") and is_structured_tool("tools.web_search")
    assert not is_structured_tool("query_kb_admin")


def test_tiny_budget_keeps_only_the_count() -> None:
    text = json.dumps(kb_payload(12))
    preview = structured_preview(text, budget_tokens=25, count_tokens=count)
    assert preview is not None and count(preview) <= 25
    meta, rows = parse_structured(preview)
    assert rows == [] and meta["omitted_results"] == 12 and meta["result_count"] == 12


def test_empty_result_list() -> None:
    assert structured_preview('{"results": []}', budget_tokens=50, count_tokens=count) == "0 results"


def test_huge_outputs_stay_within_budget() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "上下文", "压缩", "{", "}", '"k":', "42"]
    huge = " ".join(rng.choice(words) for _ in range(1_200_000))
    assert len(huge.encode()) > 5_000_000
    preview = render_preview("shell", huge, budget_tokens=600, count_tokens=count)
    assert count(preview) <= 600 and "[tail: chars " in preview

    one_huge_result = json.dumps({"results": [{"doc_id": "x", "content": huge}]}, ensure_ascii=False)
    preview = render_preview("query_kb", one_huge_result, budget_tokens=600, count_tokens=count)
    meta, rows = parse_structured(preview)
    assert count(preview) <= 600 and rows[0]["doc_id"] == "x" and meta["result_count"] == 1

    many = json.dumps(kb_payload(20_000, content_words=30))
    assert len(many) > 5_000_000
    preview = render_preview("query_kb", many, budget_tokens=600, count_tokens=count)
    meta, rows = parse_structured(preview)
    assert count(preview) <= 600 and meta["omitted_results"] == 20_000 - len(rows) and rows


# -- replacement --------------------------------------------------------------------------------------


def test_replacement_names_tool_tokens_hash_and_path_within_budget() -> None:
    text = json.dumps(kb_payload(30))
    original = count(text)
    out = build_replacement("query_kb", text, sha256=SHA, path=PATH, original_tokens=original,
                            budget_tokens=600, count_tokens=count)
    assert count(out) <= 600
    lines = out.splitlines()
    # one header line: the saved file names the hash once (the older frame wrote it twice); the
    # frame's one figure is the tokens left out (the full size is the offload record's)
    assert lines[0] == f"[tool result offloaded: query_kb; full text: {PATH}]"
    assert out.count(SHA) == 1
    assert lines[1].startswith("30 results; fields: doc_id")  # the count once, on the fields line
    assert lines[-1].startswith("[end of preview: ~") and "tokens left out" in lines[-1]
    left_out = int(lines[-1].split("~")[1].split()[0])
    assert left_out == original - count("\n".join(lines[1:-1]))


@pytest.mark.parametrize("budget", [120, 200, 600, 3000])
def test_replacement_never_exceeds_budget(budget: int) -> None:
    out = build_replacement("shell", LONG_TEXT, sha256=SHA, path=PATH, original_tokens=count(LONG_TEXT),
                            budget_tokens=budget, count_tokens=count)
    assert count(out) <= budget and SHA in out


def test_replacement_budget_too_small_for_header_is_a_typed_error() -> None:
    with pytest.raises(PreviewBudgetError) as info:
        build_replacement("shell", LONG_TEXT, sha256=SHA, path=PATH, original_tokens=count(LONG_TEXT),
                          budget_tokens=30, count_tokens=count)
    assert info.value.needed_tokens > 30 and "30 tokens" in info.value.message


_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_:#/.", min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {"doc_id": _ids, "url": _ids.map(lambda s: "https://x.example/" + s)},
            optional={"title": st.text(max_size=80), "score": st.floats(0, 1), "content": st.text(max_size=2000)},
        ),
        max_size=40,
    ),
    budget=st.integers(min_value=0, max_value=900),
)
def test_structured_preview_properties(rows: list[dict[str, object]], budget: int) -> None:
    preview = structured_preview(json.dumps({"results": rows}), budget_tokens=budget, count_tokens=count)
    if preview is None:
        return  # not even the count fits: the generic fallback takes over
    assert count(preview) <= budget
    meta, shown = parse_structured(preview)
    assert meta["result_count"] == len(rows)
    assert [r.get("doc_id") for r in shown] == [r["doc_id"] for r in rows[: len(shown)]]  # every shown row keeps its id, in order
    omitted = meta.get("omitted_results", 0)
    assert omitted == len(rows) - len(shown)
    if omitted:  # results are dropped only at the poorest level: one id each
        assert all(list(r) == ["doc_id"] for r in shown)


def _test_run_log(failures: int = 4, passed: int = 300) -> str:
    lines = ["CI build https://ci.example.com/builds/000123/log", "============ test session starts ============"]
    every = passed // (failures + 1)
    for i in range(passed):
        lines.append(f"2026-11-30T10:00:{i % 60:02d}Z INFO worker-{i % 8} tests/test_{i % 40:03d}.py::test_case_{i} PASSED in {i * 7 % 900}ms")
        if i % every == every - 1 and i // every < failures:
            k = i // every
            lines += [
                f"FAILED tests/test_{k:03d}.py::test_case_{i} - AssertionError",
                "Traceback (most recent call last):",
                f'  File "src/pkg_{k}/module_{k:03d}.py", line {100 + k}, in handle',
                f"    result = self._process(batch_{i}, retries=3)",
                f"AssertionError: expected {k} rows, got {k + 1}",
            ]
    return "\n".join(lines)


@pytest.mark.parametrize(("budget", "failures"), [
    (200, 2),
    (300, 4),
    (600, 4),
])
def test_a_test_log_keeps_the_failing_tests_and_their_frames_before_passed_lines(budget: int, failures: int) -> None:
    log = _test_run_log()
    preview = generic_preview(log, budget_tokens=budget, count_tokens=count)
    assert count(preview) <= budget
    for k in range(failures):  # which test failed and where: the FAILED line and its traceback frame
        assert f'File "src/pkg_{k}/module_{k:03d}.py", line {100 + k}' in preview
        assert f"FAILED tests/test_{k:03d}.py::test_case_" in preview
    kept = _kept_lines(preview)
    assert not any("PASSED" in t for t in kept.values())  # a passed test's line is the last kind kept


def test_an_identifier_heavy_log_lists_the_identifiers_of_the_lines_it_cannot_number() -> None:
    lines = [f"src/pkg_{i % 7}/module_{i:03d}.py:{i * 13 % 900}: retry_limit = {'lorem ipsum dolor sit amet ' * 3}" for i in range(60)]
    log = "\n".join(lines)
    preview = generic_preview(log, budget_tokens=400, count_tokens=count)
    assert count(preview) <= 400
    listing = next(line for line in preview.splitlines() if line.startswith("identifiers in "))
    head, _, listed = listing.partition(": ")
    names = listed.split(" ")
    assert len(names) == len(set(names)) and all(f"{x}:" in log for x in names)  # each once, exact text from the log
    shown = {f"src/pkg_{i % 7}/module_{i:03d}.py" for i in range(60) if f"src/pkg_{i % 7}/module_{i:03d}.py" in preview}
    assert len(shown) >= 28  # numbered lines (about 20 tokens each) would show about a dozen
    assert "as the identifiers they name" in preview
