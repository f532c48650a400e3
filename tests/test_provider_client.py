"""ChatClient (the harness's ChatClient, the summarizer's transport) against the simulator over a real loopback socket."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any, Awaitable, Callable

import httpx
import pytest

from engine.apps.harness.simulator import STYLES, ProviderSimulator, Reply, SimRequest, overflow_body
from engine.core.messages import Envelope, Surface, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.llm import ChatClient, Completion
from engine.llm.errors import (
    CONNECTION_ERROR,
    CONTEXT_WINDOW_EXCEEDED,
    MALFORMED_RESPONSE,
    RATE_LIMITED,
    SERVER_ERROR,
    TIMEOUT,
    ProviderError,
    is_context_overflow,
)

TOOLS = (
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
)
TWO_CALLS = Reply("Checking both.", (("search", {"q": "compaction"}), ("read", {"path": "/srv/notes/compaction-model.md"})))


def _envelope(text: str = "what changed?") -> Envelope:
    call = ToolCall("call_a", "search", '{"q": "x"}')
    surface = Surface((user("find x"), assistant("", call), tool_result("call_a", "x is 42", name="search"), user(text)))
    return Envelope("You are a careful agent.", surface, TOOLS)


def run(sim: ProviderSimulator, use: Callable[[ChatClient], Awaitable[Any]], **kw: Any) -> Any:
    """Run ``use(provider)`` on a fresh event loop with a provider pointed at ``sim``."""

    async def main() -> Any:
        async with ChatClient(sim.base_url, **kw) as provider:
            return await use(provider)

    return asyncio.run(main())


def failure(sim: ProviderSimulator, body: dict, *, stream: bool = False, **kw: Any) -> ProviderError:
    async def use(p: ChatClient) -> None:
        await p.complete(body, model="gpt-4o", stream=stream)

    with pytest.raises(ProviderError) as info:
        run(sim, use, **kw)
    return info.value


def test_text_reply_with_usage() -> None:
    env = _envelope()
    with ProviderSimulator() as sim:
        sim.script([Reply("It moved the boundary.")])
        c: Completion = run(sim, lambda p: p.complete(env.to_openai(), model="gpt-4o"))
    assert c.message == assistant("It moved the boundary.")
    assert c.finish_reason == "stop" and c.model == "gpt-4o"
    assert c.prompt_tokens == sim.requests[0].prompt_tokens == default_meter("gpt-4o").measure(env).total
    assert c.completion_tokens and c.completion_tokens > 0
    assert c.raw["id"] == "chatcmpl-sim-0"


def test_parallel_tool_calls_are_parsed() -> None:
    with ProviderSimulator() as sim:
        sim.script([TWO_CALLS])
        c = run(sim, lambda p: p.complete(_envelope().to_openai(), model="gpt-4o"))
    assert c.finish_reason == "tool_calls" and c.message.content == "Checking both."
    assert [(t.id, t.name, t.parsed_arguments()) for t in c.message.tool_calls] == [
        ("call_0000_0", "search", {"q": "compaction"}),
        ("call_0000_1", "read", {"path": "/srv/notes/compaction-model.md"}),
    ]


def test_streaming_rebuilds_the_same_message_from_deltas() -> None:
    with ProviderSimulator() as sim:
        sim.script([TWO_CALLS, TWO_CALLS])

        async def both(p: ChatClient) -> tuple[Completion, Completion]:
            plain = await p.complete(_envelope().to_openai(), model="gpt-4o")
            streamed = await p.complete(_envelope().to_openai(), model="gpt-4o", stream=True)
            return plain, streamed

        plain, streamed = run(sim, both)
    assert sim.requests[1].stream and streamed.raw["stream_chunks"] > 6  # really assembled from pieces
    assert streamed.message.content == plain.message.content
    assert [(t.name, t.arguments) for t in streamed.message.tool_calls] == [(t.name, t.arguments) for t in plain.message.tool_calls]
    assert streamed.message.tool_calls[0].id == "call_0001_0"
    assert streamed.finish_reason == "tool_calls"
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (plain.prompt_tokens, plain.completion_tokens)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("style", STYLES)
def test_thrown_overflow_in_each_style(style: str, stream: bool) -> None:
    env = _envelope("word " * 400)
    with ProviderSimulator(context_window=300, error_style=style) as sim:
        sim.script([Reply("unused")])
        err = failure(sim, {**env.to_openai(), "max_tokens": 512}, stream=stream, provider=style)
        assert sim.pending == 1
    tokens = sim.requests[0].prompt_tokens
    status, body = overflow_body(style, tokens=tokens, window=300, max_tokens=512)
    assert err.code == CONTEXT_WINDOW_EXCEEDED and is_context_overflow(err)
    assert err.status == status and err.provider == style and not err.inband and not err.retryable
    if style == "413":
        assert err.original == body and "413 Request Entity Too Large" in err.message  # the HTML, kept
    else:
        assert err.original == body  # the provider's parsed body, unchanged
        inner = body.get("error", body)
        assert err.message == (inner if isinstance(inner, str) else inner["message"])


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("style", STYLES)
def test_inband_overflow_in_each_style(style: str, stream: bool) -> None:
    env = _envelope("word " * 400)
    with ProviderSimulator(context_window=300, error_style=style, inband=True) as sim:
        err = failure(sim, env.to_openai(), stream=stream, provider=style)
    assert err.code == CONTEXT_WINDOW_EXCEEDED and err.inband
    tokens = sim.requests[0].prompt_tokens
    if style != "413":
        _, body = overflow_body(style, tokens=tokens, window=300, max_tokens=None)
        assert err.original == body


def test_overflow_then_smaller_request_succeeds() -> None:
    """The shape recovery relies on: the overflow leaves the script alone, a smaller retry gets the reply."""
    with ProviderSimulator(context_window=300) as sim:
        sim.script([Reply("after compaction")])

        async def flow(p: ChatClient) -> tuple[ProviderError, Completion]:
            try:
                await p.complete(_envelope("word " * 400).to_openai(), model="gpt-4o")
            except ProviderError as exc:
                first = exc
            return first, await p.complete(_envelope("short").to_openai(), model="gpt-4o")

        first, second = run(sim, flow)
    assert is_context_overflow(first) and second.message.content == "after compaction"
    assert [r.outcome for r in sim.requests] == ["overflow", "ok"]


def test_stop_reason_naming_the_window_is_an_inband_overflow() -> None:
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "glm",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "model_context_window_exceeded"}],
    }
    with ProviderSimulator() as sim:
        sim.script([Reply.raw(body)])
        err = failure(sim, _envelope().to_openai(), provider="zai")
    assert err.code == CONTEXT_WINDOW_EXCEEDED and err.original == body


def test_finish_reason_length_is_a_normal_completion() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply("cut off mid", finish_reason="length")])
        c = run(sim, lambda p: p.complete(_envelope().to_openai(), model="gpt-4o"))
    assert c.finish_reason == "length" and c.message.content == "cut off mid"


def test_rate_limit_mentioning_tokens_is_never_an_overflow() -> None:
    body = {
        "error": {
            "message": "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, "
            "Requested 50000. The input or output tokens must be reduced in order to run successfully.",
            "type": "tokens",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    with ProviderSimulator() as sim:
        sim.script([Reply.error(429, body, headers={"Retry-After": "2"}), Reply.error(429, body)])
        err = failure(sim, _envelope().to_openai())
        streamed = failure(sim, _envelope().to_openai(), stream=True)
    for e in (err, streamed):
        assert e.code == RATE_LIMITED and not is_context_overflow(e) and e.retryable and e.status == 429
    assert err.retry_after == 2.0


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors(status: int) -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply.error(status, {"error": {"message": "upstream failed", "type": "server_error"}})])
        err = failure(sim, _envelope().to_openai())
    assert (err.code, err.status, err.retryable) == (SERVER_ERROR, status, True)


def test_timeout() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply("late", delay=3.0)])
        started = time.perf_counter()
        err = failure(sim, _envelope().to_openai(), timeout=0.3)
    assert err.code == TIMEOUT and err.retryable and isinstance(err.original, httpx.TimeoutException)
    assert time.perf_counter() - started < 2.5


def test_connection_refused() -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def use() -> None:
        async with ChatClient(f"http://127.0.0.1:{port}/v1", provider="vllm") as p:
            await p.complete(_envelope().to_openai(), model="m")

    with pytest.raises(ProviderError) as info:
        asyncio.run(use())
    err = info.value
    assert err.code == CONNECTION_ERROR and err.provider == "vllm" and err.status is None
    assert isinstance(err.original, httpx.ConnectError)


MALFORMED = [
    ("not-json", Reply.raw("{this is not json", content_type="application/json"), False),
    ("no-choices", Reply.raw({"id": "x", "object": "chat.completion"}), False),
    ("bad-tool-call", Reply.raw({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}}]}), False),
    ("bad-sse-json", Reply.raw("data: {oops\n\n", content_type="text/event-stream"), True),
    ("stream-cut-short", Reply.raw('data: {"choices":[{"index":0,"delta":{"content":"par"}}]}\n\n', content_type="text/event-stream"), True),
]


@pytest.mark.parametrize("case,reply,stream", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_responses(case: str, reply: Reply, stream: bool) -> None:
    with ProviderSimulator() as sim:
        sim.script([reply])
        err = failure(sim, _envelope().to_openai(), stream=stream)
    assert err.code == MALFORMED_RESPONSE and not err.retryable


def test_stream_requested_but_json_body_returned_is_parsed_as_a_body() -> None:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "plain"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 7, "completion_tokens": 1}}
    with ProviderSimulator() as sim:
        sim.script([Reply.raw(body)])
        c = run(sim, lambda p: p.complete(_envelope().to_openai(), model="gpt-4o", stream=True))
    assert c.message.content == "plain" and c.prompt_tokens == 7


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_cancellation_propagates_untouched(stream: bool) -> None:
    arrived = threading.Event()

    def slow(request: SimRequest) -> Reply:
        arrived.set()
        return Reply("too late", delay=5.0)

    async def main(sim: ProviderSimulator) -> None:
        async with ChatClient(sim.base_url) as p:
            task = asyncio.create_task(p.complete(_envelope().to_openai(), model="gpt-4o", stream=stream))
            while not arrived.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            await task

    with ProviderSimulator() as sim:
        sim.script([slow])
        started = time.perf_counter()
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(main(sim))
    assert time.perf_counter() - started < 3.0


def test_a_client_passed_in_stays_open_and_carries_the_api_key() -> None:
    seen: list[str] = []

    async def main(sim: ProviderSimulator) -> bool:
        async def hook(request: httpx.Request) -> None:
            seen.append(request.headers.get("authorization", ""))

        async with httpx.AsyncClient(event_hooks={"request": [hook]}) as client:
            provider = ChatClient(sim.base_url, api_key="sk-test", client=client)
            await provider.complete(_envelope().to_openai(), model="gpt-4o")
            await provider.aclose()
            return client.is_closed

    with ProviderSimulator() as sim:
        sim.script([Reply("ok")])
        assert asyncio.run(main(sim)) is False
    assert seen == ["Bearer sk-test"]
