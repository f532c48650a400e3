"""Summarizers: the OpenAI-compatible one against the provider simulator (a real loopback server),
the extractive one offline, summary validation and configuration from the environment."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given, settings, strategies as st

from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.summarizers.extractive import HEADER, ExtractiveSummarizer, extract_identifiers
from engine.compaction.summarizers.factory import make_summarizer_from_env
from engine.compaction.summarizers.openai_compat import OpenAICompatSummarizer, render_prompt
from engine.compaction.summarizers.protocol import Summarizer, SummarizerError, SummaryRequest, SummaryResult, contains_verbatim, validate_summary
from engine.core.errors import CannotCompact
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.specifics import expand_grouped
from engine.llm.errors import CONTEXT_WINDOW_EXCEEDED, RATE_LIMITED, SERVER_ERROR

count = default_meter().count_text
SHA = "9f86d081884c7d659a2feaeb0f6d9e6e1a0c3b1f2f8e7c6d5b4a39281706f5e4"
CURRENT = "请把 doc-123 的退款政策整理成表格，并附上来源链接。\nKeep the table under 10 rows."


def conversation() -> tuple[Message, ...]:
    return (
        user("先帮我查一下发票规则 (invoice rules) for order-5521.", id=1),
        assistant("", ToolCall("call_1", "query_kb", '{"query": "发票规则", "kb_id": "kb-fin-01", "top_k": 5}'), id=2),
        tool_result(
            "call_1",
            '{"results": [{"doc_id": "doc-77", "chunk_id": "chunk-9", "url": "https://kb.example.com/doc-77", '
            '"content": "发票须在 30 天内开具。"}]}',
            name="query_kb",
            id=3,
        ),
        assistant("发票须在 30 天内开具 (doc-77)。", id=4),
        user(CURRENT, id=5),
        assistant("", ToolCall("call_2", "read_file", '{"path": "/srv/kb/policies/refund.md", "encoding": "utf-8"}'), id=6),
        tool_result("call_2", f"refund policy text ... sha256 {SHA} ... " + "条款。" * 200, name="read_file", id=7),
        assistant(
            "",
            ToolCall("call_3", "web_search", '{"q": "退款政策 2026", "site": "example.com"}'),
            ToolCall("call_4", "shell", '{"command": "grep -rn refund src/engine/policy.py"}'),
            id=8,
        ),
        tool_result("call_3", "see https://www.example.com/refund?lang=zh for details.", name="web_search", id=9),
        tool_result("call_4", "src/engine/policy.py:12: refund", name="shell", id=10),
        assistant("Found the refund policy: 14-day window, see /srv/kb/policies/refund.md.", id=11),
    )


def request(**kw: object) -> SummaryRequest:
    base: dict[str, object] = dict(
        messages=conversation(), previous_summary="Earlier the user set up billing for acct-42.", current_request=CURRENT, max_tokens=600
    )
    base.update(kw)
    return SummaryRequest(**base)  # type: ignore[arg-type]


# -- OpenAI-compatible summarizer -------------------------------------------------------------------
@pytest.fixture
def sim() -> Iterator[ProviderSimulator]:
    """The simulator with a window no summary prompt reaches: every request takes a scripted reply."""
    with ProviderSimulator(context_window=1_000_000) as sim:
        yield sim


def completion(
    content: Any, *, prompt_tokens: int | None = 120, completion_tokens: int | None = 30, model: str = "test-model", delay: float = 0.0
) -> Reply:
    """A successful chat completion whose message content is ``content`` (any JSON value), usage as given."""
    data: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    }
    if prompt_tokens is not None or completion_tokens is not None:
        data["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return Reply.raw(data, delay=delay)


def http_error(status: int, message: str = "scripted error", **kw: Any) -> Reply:
    return Reply.error(status, {"error": {"message": message, "type": "test_error", "code": status}}, **kw)


def summarizer(server: ProviderSimulator, **kw: object) -> OpenAICompatSummarizer:
    args: dict[str, object] = dict(api_key="sk-test-SECRET-123", timeout=5.0, retries=1, backoff=0.0)
    args.update(kw)
    return OpenAICompatSummarizer(server.base_url, "summ-model", **args)  # type: ignore[arg-type]


def test_success_records_usage_and_sends_the_rendered_prompt(sim: ProviderSimulator) -> None:
    sim.script([completion("  The summary.  ", prompt_tokens=321, completion_tokens=45, model="summ-model-0613")])
    with summarizer(sim) as s:
        result = s.summarize(request(running_turn=True, max_tokens=777))
    assert result == SummaryResult("The summary.", "summ-model-0613", 321, 45, calls=1, extractive=False)
    [sent] = sim.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test-SECRET-123"
    body = sent.body
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("summ-model", 777, 0)
    system, prompt = body["messages"]
    assert system["role"] == "system" and "Keep identifiers exactly as written" in system["content"]
    assert prompt["role"] == "user"
    text = prompt["content"]
    assert "Earlier the user set up billing for acct-42." in text  # rolling update of the previous summary
    assert "<current_request>\n" + CURRENT + "\n</current_request>" in text  # verbatim, with its newline
    assert "verbatim" in text
    for section in ("Task goal", "Actions done", "Key findings", "Current state", "Next step"):
        assert section in text
    assert '-> tool call call_1: query_kb {"query": "发票规则"' in text
    assert "[#3 tool result for call_1 (query_kb)]" in text


def test_finished_history_prompt_has_no_running_turn_or_rolling_parts() -> None:
    _, prompt = render_prompt(SummaryRequest(conversation(), max_tokens=500))
    assert "Task goal" not in prompt and "<previous_summary>" not in prompt and "<current_request>" not in prompt
    assert "Write a summary of at most about 500 tokens" in prompt
    assert "${" not in prompt  # every placeholder was filled


def test_missing_usage_is_recorded_as_unknown(sim: ProviderSimulator) -> None:
    sim.script([completion("ok", prompt_tokens=None, completion_tokens=None)])
    with summarizer(sim) as s:
        result = s.summarize(request())
    assert (result.prompt_tokens, result.completion_tokens) == (None, None)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_status_is_retried_once(sim: ProviderSimulator, status: int) -> None:
    sim.script([http_error(status), completion("second time lucky")])
    with summarizer(sim) as s:
        result = s.summarize(request())
    assert (result.text, result.calls) == ("second time lucky", 2)
    assert len(sim.requests) == 2


def test_retries_are_bounded(sim: ProviderSimulator) -> None:
    sim.script([http_error(500), http_error(502), completion("too late")])
    with summarizer(sim, retries=1) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert (info.value.code, info.value.status) == ("http_error", 502)
    assert "after 2 attempts" in info.value.message
    assert len(sim.requests) == 2


def test_client_error_is_not_retried(sim: ProviderSimulator) -> None:
    sim.script([http_error(400, "max_tokens is too large"), completion("never asked")])
    with summarizer(sim) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert (info.value.code, info.value.status) == ("http_error", 400)
    assert "HTTP 400" in info.value.message and "max_tokens is too large" in info.value.message
    assert len(sim.requests) == 1


def test_timeout_is_a_summarizer_error(sim: ProviderSimulator) -> None:
    sim.script([completion("slow", delay=3.0)])
    with summarizer(sim, timeout=0.3, retries=0) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert info.value.code == "timeout" and "timed out after 0.3s" in info.value.message


def test_timeout_then_success_is_retried(sim: ProviderSimulator) -> None:
    sim.script([completion("slow", delay=3.0), completion("fast")])
    with summarizer(sim, timeout=0.3, retries=1) as s:
        result = s.summarize(request())
    assert (result.text, result.calls) == ("fast", 2)


def test_unreachable_endpoint_is_a_connection_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with OpenAICompatSummarizer(f"http://127.0.0.1:{port}/v1", "m", retries=1, backoff=0.0) as s:
        with pytest.raises(SummarizerError) as info:
            s.summarize(request())
    assert info.value.code == "connection_error" and "after 2 attempts" in info.value.message


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply.raw('{"choices": [ this is not json', content_type="application/json"), "malformed_response"),
        (Reply.raw({"id": "chatcmpl-test", "object": "chat.completion", "model": "test-model", "choices": []}), "malformed_response"),
        (Reply.raw({"choices": [{"message": {"role": "assistant"}}]}), "malformed_response"),
        (completion(None), "malformed_response"),
        (completion(["not", "text"]), "malformed_response"),
        (Reply.raw(["not", "an", "object"]), "malformed_response"),
        (completion(""), "empty"),
        (completion("  \n "), "empty"),
    ],
)
def test_unusable_bodies_are_rejected(sim: ProviderSimulator, reply: Reply, code: str) -> None:
    sim.script([reply])
    with summarizer(sim) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert info.value.code == code
    assert len(sim.requests) == 1  # a bad body is final, not retried


def test_api_key_never_leaks(sim: ProviderSimulator) -> None:
    sim.script([http_error(401, "Incorrect API key provided: sk-test-SECRET-123")])
    s = summarizer(sim)
    assert "SECRET" not in repr(s) and "api_key=set" in repr(s)
    with s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert "SECRET" not in str(info.value) and "***" in str(info.value)


def test_base_url_without_v1_is_served_too(sim: ProviderSimulator) -> None:
    sim.script([completion("ok")])
    base = sim.base_url.removesuffix("/v1") + "/"
    with OpenAICompatSummarizer(base, "m", backoff=0.0) as s:
        assert s.summarize(request()).text == "ok"
    assert sim.requests[0].path == "/chat/completions"
    assert "authorization" not in sim.requests[0].headers  # no key, no header


# -- the summarizer retries as the shared classifier says ------------------------------------------
def test_retry_after_is_honoured(sim: ProviderSimulator) -> None:
    sim.script([http_error(429, "slow down", headers={"Retry-After": "0.4"}), completion("after the wait")])
    started = time.monotonic()
    with summarizer(sim) as s:  # backoff 0: any wait comes from the header
        result = s.summarize(request())
    assert (result.text, result.calls) == ("after the wait", 2)
    assert time.monotonic() - started >= 0.4


def test_a_retry_after_beyond_max_wait_ends_the_call_at_once(sim: ProviderSimulator) -> None:
    sim.script([http_error(429, "come back in two minutes", headers={"Retry-After": "120"}), completion("never asked")])
    started = time.monotonic()
    with summarizer(sim, retries=3, max_wait=5.0) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert time.monotonic() - started < 2.0 and len(sim.requests) == 1
    assert (info.value.code, info.value.status, info.value.provider_code) == ("http_error", 429, RATE_LIMITED)


def test_a_spent_quota_is_not_retried(sim: ProviderSimulator) -> None:
    quota = {"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "code": "insufficient_quota"}}
    sim.script([Reply.error(429, quota), completion("never asked")])
    with summarizer(sim, retries=3) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert info.value.provider_code == RATE_LIMITED and len(sim.requests) == 1


def test_an_overflow_of_the_summary_model_is_classified_and_not_retried() -> None:
    with ProviderSimulator(context_window=50) as small:  # the summary prompt itself is too long
        small.script([completion("never sent")])
        with summarizer(small, retries=3) as s, pytest.raises(SummarizerError) as info:
            s.summarize(request())
        assert small.pending == 1
    assert (info.value.code, info.value.status, info.value.provider_code) == ("http_error", 400, CONTEXT_WINDOW_EXCEEDED)
    assert "maximum context length is 50 tokens" in info.value.message
    assert [r.outcome for r in small.requests] == ["overflow"]


def test_a_5xx_that_says_overflow_is_not_retried(sim: ProviderSimulator) -> None:
    llamacpp = {"error": {"code": 500, "message": "the request exceeds the available context size", "type": "exceed_context_size_error"}}
    sim.script([Reply.error(500, llamacpp), completion("never asked")])
    with summarizer(sim, retries=3) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert (info.value.status, info.value.provider_code) == (500, CONTEXT_WINDOW_EXCEEDED) and len(sim.requests) == 1


def test_an_inband_error_is_a_provider_error_and_retried_when_transient(sim: ProviderSimulator) -> None:
    overloaded = {"error": {"message": "upstream overloaded", "type": "server_error", "code": 503}}
    sim.script([Reply.raw(overloaded), completion("recovered")])
    with summarizer(sim) as s:
        assert (s.summarize(request()).text, len(sim.requests)) == ("recovered", 2)
    sim.script([Reply.raw(overloaded), Reply.raw(overloaded)])
    with summarizer(sim) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert (info.value.code, info.value.provider_code) == ("provider_error", SERVER_ERROR)
    assert "upstream overloaded" in info.value.message and "after 2 attempts" in info.value.message


def test_the_deadline_bounds_the_whole_call(sim: ProviderSimulator) -> None:
    sim.script([completion("slow", delay=3.0), completion("never asked")])
    started = time.monotonic()
    with summarizer(sim, timeout=5.0, retries=3, deadline=0.5) as s, pytest.raises(SummarizerError) as info:
        s.summarize(request())
    assert 0.5 <= time.monotonic() - started < 2.0
    assert info.value.code == "timeout" and "deadline of 0.5s" in info.value.message
    assert sim.pending == 1  # one attempt took the slow reply; none was begun after the deadline


def test_summarize_works_from_a_thread_that_runs_an_event_loop(sim: ProviderSimulator) -> None:
    import asyncio

    sim.script([completion("from inside a loop")])

    async def main() -> str:
        with summarizer(sim) as s:
            return s.summarize(request()).text  # a blocking call, as a careless async caller would make it

    assert asyncio.run(main()) == "from inside a loop"


def test_bad_retry_settings_are_a_config_error() -> None:
    with pytest.raises(SummarizerError) as info:
        OpenAICompatSummarizer("http://127.0.0.1:9/v1", "m", retries=-1)
    assert info.value.code == "config"


# -- configuration from the environment ------------------------------------------------------------
def test_env_without_endpoint_gives_the_extractive_summarizer() -> None:
    s = make_summarizer_from_env({})
    assert isinstance(s, ExtractiveSummarizer) and isinstance(s, Summarizer) and s.name == "extractive"


def test_env_with_endpoint_gives_the_openai_summarizer() -> None:
    s = make_summarizer_from_env(
        {
            "COMPACTION_SUMMARY_BASE_URL": "http://127.0.0.1:9/v1",
            "COMPACTION_SUMMARY_MODEL": "qwen2.5:7b",
            "COMPACTION_SUMMARY_API_KEY": "sk-env",
            "COMPACTION_SUMMARY_TIMEOUT": "12.5",
        }
    )
    assert isinstance(s, OpenAICompatSummarizer)
    assert (s.url, s.model, s.timeout, s.name) == ("http://127.0.0.1:9/v1/chat/completions", "qwen2.5:7b", 12.5, "openai-compatible:qwen2.5:7b")
    s.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COMPACTION_SUMMARY_BASE_URL": "http://x/v1"}, "COMPACTION_SUMMARY_BASE_URL is set but COMPACTION_SUMMARY_MODEL is not"),
        ({"COMPACTION_SUMMARY_MODEL": "m"}, "COMPACTION_SUMMARY_MODEL is set but COMPACTION_SUMMARY_BASE_URL is not"),
        (
            {"COMPACTION_SUMMARY_BASE_URL": "http://x/v1", "COMPACTION_SUMMARY_MODEL": "m", "COMPACTION_SUMMARY_TIMEOUT": "soon"},
            "COMPACTION_SUMMARY_TIMEOUT must be a positive number of seconds, got 'soon'",
        ),
        (
            {"COMPACTION_SUMMARY_BASE_URL": "http://x/v1", "COMPACTION_SUMMARY_MODEL": "m", "COMPACTION_SUMMARY_TIMEOUT": "-1"},
            "COMPACTION_SUMMARY_TIMEOUT must be a positive number of seconds, got '-1'",
        ),
    ],
)
def test_env_misconfiguration_is_a_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(SummarizerError) as info:
        make_summarizer_from_env(env)
    assert info.value.code == "config" and str(info.value).startswith(message)


# -- extractive summarizer -------------------------------------------------------------------------
def test_extractive_says_what_it_is_and_keeps_the_essentials() -> None:
    result = ExtractiveSummarizer().summarize(request(max_tokens=2000))
    assert (result.extractive, result.calls, result.model) == (True, 0, "extractive")
    assert (result.prompt_tokens, result.completion_tokens) == (None, None)
    text = result.text
    assert text.startswith(HEADER) and "not written by a language model" in text.splitlines()[0]
    assert CURRENT in text  # the current request, verbatim with its newline
    assert "先帮我查一下发票规则 (invoice rules) for order-5521." in text  # earlier request verbatim
    assert "Earlier the user set up billing for acct-42." in text  # previous summary carried forward
    assert 'query_kb(query="发票规则", kb_id="kb-fin-01")' in text  # key arguments, top_k dropped
    assert 'read_file(path="/srv/kb/policies/refund.md")' in text
    assert 'web_search(q="退款政策 2026")' in text and 'shell(command="grep -rn refund src/engine/policy.py")' in text
    ids = text[text.index("## Identifiers, paths and URLs seen") :].split("\n\n")[0].splitlines()[1:]
    # one line per identifier or group sharing a head, in order of first appearance, each identifier
    # once; a JSON key whose value names itself is left out (doc_id=doc-77 is listed as doc-77)
    assert ids[1:4] == ["- doc-77", "- https://kb.example.com/doc-77", "- chunk-9"]  # the chunk id ranked after the ids
    assert "- " + SHA in ids and "- https://www.example.com/refund?lang=zh" in ids
    assert "- src/engine/policy.py" in ids  # from a call's arguments
    listed = _listed(text)
    assert len(listed) == len(set(listed))
    # shown verbatim by a kept request or the latest conclusion: not repeated
    assert "order-5521" not in listed and "/srv/kb/policies/refund.md" not in listed
    assert "Found the refund policy: 14-day window" in text  # latest conclusion
    assert "条款。条款。" not in text  # tool result bodies are not copied
    assert count(text) <= 2000


def test_extractive_is_deterministic() -> None:
    a = ExtractiveSummarizer().summarize(request(max_tokens=300)).text
    b = ExtractiveSummarizer().summarize(request(max_tokens=300)).text
    assert a == b


def test_extractive_running_turn_names_goal_actions_and_state() -> None:
    text = ExtractiveSummarizer().summarize(request(running_turn=True, max_tokens=2000)).text
    assert "## Task goal: current user request (verbatim)\n" + CURRENT in text
    assert "## Actions done (tool calls)" in text
    assert "## Current state\n- The task is still running. The last compacted step was the assistant message (#11)" in text
    tool_last = ExtractiveSummarizer().summarize(request(messages=conversation()[:-1], running_turn=True)).text
    assert "The last compacted step was the result of shell [call_4]" in tool_last


@settings(max_examples=40, deadline=None)
@given(budget=st.integers(min_value=90, max_value=1500))
def test_extractive_respects_any_budget_and_keeps_the_request(budget: int) -> None:
    result = ExtractiveSummarizer().summarize(request(max_tokens=budget))
    assert count(result.text) <= budget
    assert CURRENT in result.text and result.text.startswith(HEADER)


def test_extractive_trims_oldest_and_least_important_first() -> None:
    full = ExtractiveSummarizer().summarize(request(max_tokens=2000)).text
    small = ExtractiveSummarizer().summarize(request(max_tokens=160)).text
    assert count(small) <= 160 < count(full)
    assert "Found the refund policy" in small  # the newest conclusion survives
    assert "kb-fin-01" not in small  # the oldest tool call goes


def test_extractive_current_request_is_never_cut() -> None:
    long_request = "请逐条核对以下条款：" + "；".join(f"条款{i} 的适用范围" for i in range(200))
    with pytest.raises(SummarizerError) as info:
        ExtractiveSummarizer().summarize(request(current_request=long_request, max_tokens=200))
    assert info.value.code == "over_budget"
    text = ExtractiveSummarizer().summarize(request(current_request=long_request, max_tokens=4000)).text
    assert long_request in text


def test_extractive_long_older_request_is_marked_when_truncated() -> None:
    old = "Please review " + " ".join(f"item{i}" for i in range(3000))
    msgs = (user(old, id=1), assistant("ok", id=2), user("now summarize", id=3))
    text = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="now summarize", max_tokens=300)).text
    assert count(text) <= 300
    assert "more characters not kept]" in text and "(#1) Please review item0" in text


def test_extractive_rolling_summary_merges_instead_of_nesting() -> None:
    s = ExtractiveSummarizer()
    first = s.summarize(request(max_tokens=800)).text
    second = s.summarize(
        SummaryRequest((user("继续：再查 chunk-88", id=12),), previous_summary=first, current_request="继续：再查 chunk-88", max_tokens=800)
    ).text
    third = s.summarize(
        SummaryRequest((user("再总结一次", id=13),), previous_summary=second, current_request="最后的请求", max_tokens=800)
    ).text
    for text in (second, third):
        assert text.count(HEADER) == 1
        assert "###" not in text  # sections are merged, never nested one level down per roll
        assert text.count("## User requests (verbatim)") <= 1
    # the identifier stays visible: in the current request, then in the earlier request kept verbatim
    assert "chunk-88" in second and "继续：再查 chunk-88" in third
    assert "- doc-77\n- https://kb.example.com/doc-77\n- chunk-9" in third  # identifier lines carried forward
    assert "继续：再查 chunk-88" in third  # the earlier current request is kept as an earlier request
    assert contains_verbatim(third, CURRENT)  # requests from the first range survive two rolls


def test_identifier_extraction_handles_chinese_and_json() -> None:
    text = '见doc-123。路径 /srv/kb/a.md，网址 https://x.org/a_b(1) 和 {"doc_id": "doc-9", "chunk_id": 7} and/or A/B src/app/main.py'
    assert extract_identifiers(text) == ["doc-123", "/srv/kb/a.md", "https://x.org/a_b", "doc_id=doc-9", "chunk_id=7", "src/app/main.py"]


def test_extractive_summary_passes_validation() -> None:
    req = request(max_tokens=600)
    result = ExtractiveSummarizer().summarize(req)
    replaced = sum(default_meter().count_message(m) for m in req.messages) + count(req.previous_summary or "")
    assert validate_summary(result, replaced_tokens=replaced, count_tokens=count, current_request=CURRENT) is None


# -- validation ------------------------------------------------------------------------------------
def result_of(text: str) -> SummaryResult:
    return SummaryResult(text, "m", 1, 1, calls=1, extractive=False)


@pytest.mark.parametrize(
    ("text", "replaced", "reason"),
    [
        ("", 100, "empty"),
        ("   \n\t", 100, "empty"),
        ("a summary " * 30, 50, "not_smaller"),
        ("a summary", 2, "not_smaller"),  # equal size is not smaller
        ("a short summary without the request", 1000, "missing_request"),
        ("Current user request: 请把 doc-123 的退款政策整理成表格", 1000, "missing_request"),  # shortened
        ("Current user request:\n" + CURRENT, 1000, None),
        ("Current user request: " + CURRENT.replace("\n", "  "), 1000, None),  # whitespace may reflow
    ],
)
def test_validate_summary(text: str, replaced: int, reason: str | None) -> None:
    assert validate_summary(result_of(text), replaced_tokens=replaced, count_tokens=count, current_request=CURRENT) == reason


def test_validate_without_current_request_only_checks_size() -> None:
    assert validate_summary(result_of("short"), replaced_tokens=10, count_tokens=count) is None


def test_summary_request_rejects_a_nonsense_budget() -> None:
    with pytest.raises(ValueError, match="max_tokens must be a positive whole number"):
        SummaryRequest((), max_tokens=0)


def _id_heavy(n: int = 120) -> tuple[Message, ...]:
    msgs: list[Message] = [user("Collect the documents about refunds", id=1)]
    for i in range(n):
        call = ToolCall(f"c{i}", "query_kb", json.dumps({"query": f"refund rule {i}"}))
        msgs.append(assistant("", call, id=2 + 2 * i))
        msgs.append(tool_result(call.id, f"found doc-{i:06d} at https://kb.example.com/articles/{i:06d}.html", id=3 + 2 * i))
    return tuple(msgs)


def _listed(text: str) -> list[str]:
    """The identifiers of the summary's identifier lines, in order."""
    if "## Identifiers, paths and URLs seen" not in text:
        return []
    lines = text[text.index("## Identifiers, paths and URLs seen") :].split("\n\n")[0].splitlines()[1:]
    return [x for line in lines if line.startswith("- ") for x in expand_grouped(line[2:]).split()]


def test_extractive_does_not_repeat_what_the_request_and_the_retained_tail_show() -> None:
    msgs = _id_heavy()
    retained = (assistant("Now comparing doc-000003 with doc-000007.", id=500),)
    req = SummaryRequest(msgs, current_request="Which of doc-000001 and doc-000002 is newer?", retained=retained, max_tokens=400)
    result = ExtractiveSummarizer().summarize(req)
    text = result.text
    assert count(text) <= 400
    listed = _listed(text)
    # visible anyway after the compaction (the request in the summary, the tail after it): not listed, not dropped
    for ident in ("doc-000001", "doc-000002", "doc-000003", "doc-000007"):
        assert ident not in listed and ident not in result.dropped_identifiers
    assert {f"doc-{119:06d}", f"https://kb.example.com/articles/{119:06d}.html"} <= set(listed)  # the newest stay
    assert "doc-000004" not in listed  # an old one nobody shows is the one to go
    assert len(listed) == len(set(listed))  # each identifier once
    # what was left out is recorded, exactly: every identifier of the range is listed, visible anyway, or dropped
    everything = {x for m in msgs for x in extract_identifiers(m.content + " " + " ".join(c.arguments for c in m.tool_calls))}
    visible = {"doc-000001", "doc-000002", "doc-000003", "doc-000007"}
    assert result.dropped_identifiers and "doc-000004" in result.dropped_identifiers
    assert set(result.dropped_identifiers) | set(listed) | visible == everything
    assert not set(result.dropped_identifiers) & set(listed)


def test_extractive_an_identifier_line_that_does_not_fit_keeps_its_first_identifiers() -> None:
    msgs = [user("Collect everything", id=1)]
    for i in range(6):
        call = ToolCall(f"c{i}", "query_kb", "{}")
        body = json.dumps({"results": [{"doc_id": f"doc-{i}{k:04d}", "url": f"https://kb.example.com/a/{i}{k:04d}.html"} for k in range(12)]})
        msgs += [assistant("", call, id=2 + 2 * i), tool_result(call.id, body, name="query_kb", id=3 + 2 * i)]
    result = ExtractiveSummarizer().summarize(SummaryRequest(tuple(msgs), current_request="go on", max_tokens=350))
    assert count(result.text) <= 350
    listed = _listed(result.text)
    kept = {i: [x for x in listed if x.startswith(f"doc-{i}") or x.startswith(f"https://kb.example.com/a/{i}")] for i in range(6)}
    assert all(len(kept[i]) == 24 for i in (3, 4, 5)) and not kept[0] and not kept[1]  # the newest whole
    partial = [x for x in (f"doc-2{k // 2:04d}" if k % 2 == 0 else f"https://kb.example.com/a/2{k // 2:04d}.html" for k in range(24)) if x in listed]
    assert 0 < len(partial) < 24 and partial == [f"doc-2{k // 2:04d}" if k % 2 == 0 else f"https://kb.example.com/a/2{k // 2:04d}.html" for k in range(len(partial))]  # its first ones
    assert set(result.dropped_identifiers).isdisjoint(_listed(result.text)) and len(result.dropped_identifiers) + len(_listed(result.text)) == 6 * 24


def test_extractive_reads_a_pruned_result_without_the_offload_frame() -> None:
    from engine.core.messages import META_PRUNED
    from engine.core.previews import build_replacement

    body = json.dumps({"results": [{"doc_id": f"doc-{k:06d}", "content": "x " * 400} for k in range(8)]})
    preview = build_replacement("query_kb", body, sha256=SHA, path=f"query_kb-{SHA}.txt", original_tokens=count(body), budget_tokens=300, count_tokens=count)
    pruned = tool_result("c1", preview, name="query_kb", id=3).with_content(preview, **{META_PRUNED: SHA})
    msgs = (user("look", id=1), assistant("", ToolCall("c1", "query_kb", "{}"), id=2), pruned)
    text = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=1000)).text
    assert _listed(text) == [f"doc-{k:06d}" for k in range(8)]  # the tool's ids, not the engine's hash or file name
    assert SHA not in text


def test_extractive_older_requests_keep_their_head_ahead_of_identifiers() -> None:
    old = "Please compare the refund rules " + " ".join(f"clause{i}" for i in range(300))
    msgs = (user(old, id=1),) + _id_heavy(60)[1:]
    small = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=500)).text
    assert "(#1) Please compare the refund rules clause0" in small and "more characters not kept]" in small
    assert len(_listed(small)) > 20  # the rest of the request gave way to identifiers
    roomy = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=6000)).text
    assert old in roomy and len(_listed(roomy)) == 120  # with room, the whole request comes back


def test_extractive_ranks_identifiers_above_older_tool_calls() -> None:
    result = ExtractiveSummarizer().summarize(SummaryRequest(_id_heavy(40), current_request="go on", max_tokens=1000))
    text = result.text
    assert count(text) <= 1000
    calls = [line for line in text.splitlines() if "query_kb(" in line]
    assert len(_listed(text)) == 80 and result.dropped_identifiers == ()  # every document id and URL stays
    assert 0 < len(calls) < 40  # tool-call lines make room, the newest kept


def test_extractive_dropped_identifiers_is_empty_when_everything_fits() -> None:
    result = ExtractiveSummarizer().summarize(request(max_tokens=4000))
    assert result.dropped_identifiers == ()


def test_a_reply_that_reads_as_a_refusal_or_an_error_is_rejected_like_an_empty_one() -> None:
    from engine.compaction.summarizers.protocol import REJECT_REFUSAL, SummaryResult, validate_summary

    def why(text: str) -> str | None:
        return validate_summary(SummaryResult(text=text, model="m", prompt_tokens=None, completion_tokens=None, calls=1, extractive=False), replaced_tokens=10_000, count_tokens=lambda t: len(t) // 4)

    for text in (
        "I'm sorry, but I can't help with that. Error code: 429. Summarize the conversation so far.",
        "Error: upstream timeout (code 504)",
        '{"error": {"message": "rate limited", "code": 429}}',
        "As an AI language model, I cannot summarize this.",
        "  Sorry, I am unable to process this request.",
    ):
        assert why(text) == REJECT_REFUSAL, text
    # a real summary that talks about errors is a summary
    assert why("## State\nThe build failed with Error: E0425 in parser.rs; the fix is in progress.") is None


def test_a_huge_reply_is_refused_without_being_tokenized() -> None:
    from engine.compaction.summarizers.protocol import REJECT_NOT_SMALLER, SummaryResult, validate_summary

    counted: list[int] = []

    def count(text: str) -> int:
        counted.append(len(text))
        return len(text)

    text = "x" * 10_000_000  # a 10 MB reply used to be counted for 15-17 s under the thread lock
    assert validate_summary(SummaryResult(text=text, model="m", prompt_tokens=None, completion_tokens=None, calls=1, extractive=False), replaced_tokens=50_000, count_tokens=count) == REJECT_NOT_SMALLER
    assert counted == []


def test_extractive_latest_conclusion_keeps_its_head_ahead_of_identifiers() -> None:
    answer = "The refund rules differ by region: " + " ".join(f"finding{i}" for i in range(400))
    msgs = _id_heavy(60) + (assistant(answer, id=999),)
    small = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=600)).text
    assert count(small) <= 600
    assert "(#999) The refund rules differ by region: finding0" in small and "more characters not kept]" in small
    assert len(_listed(small)) > 25  # the rest of the answer gave way to identifiers
    roomy = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=6000)).text
    assert answer in roomy and len(_listed(roomy)) == 120


def test_api_key_never_leaks_into_the_config_file_the_keyring_fallback_or_the_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets probe, extended (issue #28): a key given to the settings where no keyring backend
    exists is kept in memory (the fallback), never in the settings file; a model that echoes it in
    a 401 gets it masked in the rejection event; the events, the export and the database never hold it."""
    import re

    import keyring
    from keyring.backends import fail

    from engine.core import config
    from engine.service import open_service
    from tests.engine.conftest import POLICY, finished_turns, new_thread

    secret = "sk-test-SECRET-probe-7731"

    def model(req: Any) -> Reply:
        if req.index == 0:  # the first call: a 401 that echoes the key
            return http_error(401, f"Incorrect API key provided: {secret}")
        found = re.search(r"<current_request>\n(.*?)\n</current_request>", req.body["messages"][-1]["content"], re.S)
        return Reply(f"The agent answered the questions. {'Kept. ' * 4}\n\nCurrent user request:\n{found.group(1) if found else ''}")

    monkeypatch.setenv(config.ENV_CONFIG_DIR, str(tmp_path / "config"))
    monkeypatch.delenv(config.ENV_API_KEY, raising=False)
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        with ProviderSimulator(context_window=1_000_000, fallback=model) as sim:
            settings = config.Settings()
            settings.set_many({"summarizer.kind": "openai", "summarizer.base_url": sim.base_url, "summarizer.model": "m"})
            _, said = settings.set(config.API_KEY, secret)
            assert "this session only" in said and secret not in said
            assert settings.get(config.API_KEY).source == "session" and secret not in settings.get(config.API_KEY).shown()
            svc = open_service(f"sqlite:///{tmp_path / 'probe.db'}", workdir=tmp_path / "wd", create=True)
            try:
                svc.steering.set_policy(POLICY)
                key = new_thread(svc, "t")
                finished_turns(svc, key, 12)
                with pytest.raises(CannotCompact, match="summary rejected"):
                    svc.compaction.compact(key)  # the 401 echoing the key: rejected
                rejected = [e for e in svc.reads.events(key) if e.kind == "summary_rejected"][-1].data
                assert "***" in rejected["error_message"]
                assert svc.compaction.compact(key).status == "completed"
                assert all(r.headers.get("authorization") == f"Bearer {secret}" for r in sim.requests)  # the fallback's key was used
                exported = svc.reads.export_history(key, "md") + svc.reads.export_history(key, "json")
                events = json.dumps([e.data for e in svc.reads.events(key)])
            finally:
                svc.close()
        assert secret not in exported and secret not in events and secret not in repr(svc.summarizer)
    finally:
        keyring.set_keyring(before)
    on_disk = [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert on_disk == []  # settings file, database (and its WAL), Workdir: the fallback is memory only


_SPACES = st.sampled_from([" ", "  ", "\n", "\t", " \n ", "\u00a0", "\u2003"])


@given(words=st.lists(st.sampled_from(["fix", "the", "bug", "a", "b", "ab", "x.py", "é"]), min_size=1, max_size=6),
       gaps=st.lists(_SPACES, min_size=6, max_size=6), text=st.lists(st.one_of(st.sampled_from(["fix", "the", "bug", "a", "b", "ab", "x.py", "é"]), _SPACES), max_size=14))
@settings(max_examples=300, deadline=None)
def test_contains_verbatim_is_the_request_in_the_text_with_whitespace_collapsed(words: list[str], gaps: list[str], text: list[str]) -> None:
    """Whatever path answers it (the first word absent, the request as written, the text collapsed):
    the request with each run of whitespace as one space, in the text collapsed the same way."""
    import re

    request = "".join(w + g for w, g in zip(words, gaps))
    ws = re.compile(r"\s+")
    for body in ("".join(text), "".join(text) + " " + request, request.strip(), ws.sub(" ", request)):
        expected = ws.sub(" ", request).strip() in ws.sub(" ", body)
        assert contains_verbatim(body, request) == expected
