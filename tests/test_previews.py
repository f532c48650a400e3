"""Tool-result previews: generic slices, structured search/KB previews, the replacement text."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.meter import default_meter
from engine.previews import (
    PreviewBudgetError,
    build_replacement,
    generic_preview,
    is_structured_tool,
    render_preview,
    structured_preview,
)

count = default_meter().count_text
SHA = "0123456789abcdef" * 4
PATH = "/var/agent/workdir/query_kb-" + SHA + ".txt"
INTERNAL = "/srv/kb/host01/private/vol7/manual.pdf"


def parse_structured(text: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    """Split a structured preview into its ``key: value`` lines and its result objects."""
    meta: dict[str, object] = {}
    rows: list[dict[str, object]] = []
    for line in text.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
        else:
            key, _, value = line.partition(": ")
            meta[key] = json.loads(value)
    return meta, rows


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


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=0, max_size=3000), budget=st.integers(min_value=0, max_value=400),
       tool=st.sampled_from(["query_kb", "web_search", "shell"]))
def test_render_preview_is_never_longer_than_its_budget(text: str, budget: int, tool: str) -> None:
    assert count(render_preview(tool, text, budget_tokens=budget, count_tokens=count)) <= budget


# -- structured ---------------------------------------------------------------------------------------


def test_structured_kb_preview_keeps_fields_in_order_and_fits() -> None:
    payload = kb_payload(30)
    preview = render_preview("query_kb", json.dumps(payload), budget_tokens=600, count_tokens=count)
    assert count(preview) <= 600
    meta, rows = parse_structured(preview)
    assert meta["result_count"] == 30
    assert meta["query"] == payload["query"]
    assert 1 <= len(rows) < 30
    assert meta["omitted_results"] == 30 - len(rows)
    assert [r["doc_id"] for r in rows] == [f"doc-{i}" for i in range(len(rows))]  # original order, prefix
    first = rows[0]
    assert list(first) == ["doc_id", "chunk_id", "file_id", "kb_id", "source", "title", "url", "score", "content"]
    assert first["chunk_id"] == "doc-0#c0" and first["file_id"] == "file-0" and first["kb_id"] == "kb-security"
    assert first["url"] == "https://docs.example.com/keys/0" and first["score"] == 0.95
    assert str(first["content"]).startswith("word0 word1") and str(first["content"]).endswith("…")
    assert count(str(first["content"])) <= 160


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


def test_structured_preview_only_for_search_tools() -> None:
    text = json.dumps(kb_payload(30))
    assert render_preview("read_file", text, budget_tokens=300, count_tokens=count).startswith("[head: chars 0-")
    assert is_structured_tool("mcp__kb__query_kb") and is_structured_tool("tools.web_search")
    assert not is_structured_tool("query_kb_admin")


def test_tiny_budget_keeps_only_the_count() -> None:
    text = json.dumps(kb_payload(12))
    preview = structured_preview(text, budget_tokens=25, count_tokens=count)
    assert preview is not None and count(preview) <= 25
    meta, rows = parse_structured(preview)
    assert rows == [] and meta["omitted_results"] == 12 and meta["result_count"] == 12


def test_empty_result_list() -> None:
    assert structured_preview('{"results": []}', budget_tokens=50, count_tokens=count) == "result_count: 0"


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
    assert lines[0] == f"[tool result offloaded: query_kb, ~{original} tokens]"
    assert lines[1] == f"sha256: {SHA}" and lines[2] == f"saved: {PATH}" and lines[3] == "preview:"
    assert lines[4] == "result_count: 30"
    assert lines[-1].startswith("[end of preview: ~") and "tokens left out" in lines[-1]
    left_out = int(lines[-1].split("~")[1].split()[0])
    assert left_out == original - count("\n".join(lines[4:-1]))


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
