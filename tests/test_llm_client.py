"""engine.llm.ChatClient, the one model client, against the provider simulator over a real loopback
socket: retries as the classifier decides, Retry-After, bounded attempts, the deadline, parsing."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Awaitable, Callable

import grimp
import pytest

from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.core.messages import Envelope, Surface, user
from engine.llm import (
    AUTH_FAILED,
    BAD_REQUEST,
    CONNECTION_ERROR,
    CONTEXT_WINDOW_EXCEEDED,
    MALFORMED_RESPONSE,
    RATE_LIMITED,
    SERVER_ERROR,
    TIMEOUT,
    ChatClient,
    Completion,
    ProviderError,
    RetryPolicy,
    int_or_none,
)

RETRY = RetryPolicy(retries=2, backoff=0.0)


def body(text: str = "what changed?") -> dict[str, Any]:
    return Envelope("You are a careful agent.", Surface((user(text),)), ()).to_openai()


def server_error(message: str = "upstream failed", status: int = 503, **kw: Any) -> Reply:
    return Reply.error(status, {"error": {"message": message, "type": "server_error"}}, **kw)


def run(sim: ProviderSimulator, use: Callable[[ChatClient], Awaitable[Any]], **kw: Any) -> Any:
    async def main() -> Any:
        async with ChatClient(sim.base_url, **kw) as client:
            return await use(client)

    return asyncio.run(main())


def failure(sim: ProviderSimulator, *, stream: bool = False, text: str = "what changed?", **kw: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        run(sim, lambda c: c.complete(body(text), model="m", stream=stream), **kw)
    return info.value


# -- success and parsing ------------------------------------------------------------------------------
def test_success_is_one_attempt() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply("fine")])
        done: Completion = run(sim, lambda c: c.complete(body(), model="m"), retry=RETRY)
    assert (done.message.content, done.finish_reason, done.attempts) == ("fine", "stop", 1)
    assert done.prompt_tokens == sim.requests[0].prompt_tokens and len(sim.requests) == 1


def test_a_stream_is_parsed_after_a_retried_server_error() -> None:
    with ProviderSimulator() as sim:
        sim.script([server_error(), Reply("Reading both.", (("read", {"path": "/a"}), ("read", {"path": "/b"})))])
        done = run(sim, lambda c: c.complete(body(), model="m", stream=True), retry=RETRY)
    assert [r.stream for r in sim.requests] == [True, True] and done.attempts == 2
    assert done.raw["stream_chunks"] > 4 and done.message.content == "Reading both."
    assert [c.parsed_arguments() for c in done.message.tool_calls] == [{"path": "/a"}, {"path": "/b"}]
    assert done.finish_reason == "tool_calls" and done.prompt_tokens == sim.requests[1].prompt_tokens


def test_malformed_json_is_final() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply.raw("{not json", content_type="application/json"), Reply("never asked")])
        err = failure(sim, retry=RETRY)
    assert (err.code, err.attempts, sim.pending) == (MALFORMED_RESPONSE, 1, 1)


# -- what is retried -----------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retried(status: int) -> None:
    with ProviderSimulator() as sim:
        sim.script([server_error(status=status), Reply("second time")])
        done = run(sim, lambda c: c.complete(body(), model="m"), retry=RETRY)
    assert (done.message.content, done.attempts, len(sim.requests)) == ("second time", 2, 2)


def test_attempts_are_bounded() -> None:
    with ProviderSimulator() as sim:
        sim.script([server_error("one"), server_error("two"), server_error("three"), Reply("too late")])
        err = failure(sim, retry=RETRY)
    assert (err.code, err.message, err.attempts, sim.pending) == (SERVER_ERROR, "three", 3, 1)


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        (400, {"message": "max_tokens is too large: 100000", "type": "invalid_request_error"}, BAD_REQUEST),
        (401, {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}, AUTH_FAILED),
        (429, {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}, RATE_LIMITED),
    ],
    ids=["400", "401", "429-quota"],
)
def test_final_client_errors_are_not_retried(status: int, error: dict, code: str) -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply.error(status, {"error": error}), Reply("never asked")])
        err = failure(sim, retry=RETRY)
    assert (err.code, err.status, err.retryable, err.attempts, sim.pending) == (code, status, False, 1, 1)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("inband", [False, True], ids=["thrown", "inband"])
def test_context_overflow_is_classified_and_not_retried(stream: bool, inband: bool) -> None:
    with ProviderSimulator(context_window=20, inband=inband) as sim:
        sim.script([Reply("never sent")])
        err = failure(sim, stream=stream, text="word " * 100, retry=RetryPolicy(retries=5, backoff=0.0))
    assert (err.code, err.inband, err.attempts) == (CONTEXT_WINDOW_EXCEEDED, inband, 1)
    assert [r.outcome for r in sim.requests] == ["overflow"]


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as s:  # a port with no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> None:
        async with ChatClient(f"http://127.0.0.1:{port}/v1", retry=RETRY) as client:
            await client.complete(body(), model="m")

    with pytest.raises(ProviderError) as info:
        asyncio.run(main())
    assert (info.value.code, info.value.attempts) == (CONNECTION_ERROR, 3)


# -- waits: Retry-After, backoff, deadline -------------------------------------------------------------
@pytest.mark.parametrize("header", [("Retry-After", "0.4"), ("retry-after-ms", "400")], ids=["seconds", "ms"])
def test_retry_after_is_honoured(header: tuple[str, str]) -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply.error(429, {"error": {"message": "Rate limit reached", "type": "requests"}}, headers=dict([header])), Reply("ok")])
        started = time.monotonic()
        done = run(sim, lambda c: c.complete(body(), model="m"), retry=RETRY)
        elapsed = time.monotonic() - started
    assert done.attempts == 2 and 0.4 <= elapsed < 2.0


def test_a_retry_after_beyond_max_wait_ends_the_call() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply.error(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "90"}), Reply("never asked")])
        started = time.monotonic()
        err = failure(sim, retry=RetryPolicy(retries=3, backoff=0.0, max_wait=10.0))
    assert time.monotonic() - started < 2.0
    assert (err.code, err.retry_after, err.attempts, sim.pending) == (RATE_LIMITED, 90.0, 1, 1)


def test_backoff_grows_with_the_attempt() -> None:
    with ProviderSimulator() as sim:
        sim.script([server_error(), server_error(), Reply("third")])
        started = time.monotonic()
        done = run(sim, lambda c: c.complete(body(), model="m"), retry=RetryPolicy(retries=2, backoff=0.15))
    assert done.attempts == 3 and time.monotonic() - started >= 0.15 + 0.30


def test_a_per_operation_timeout_is_retried() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply("late", delay=3.0), Reply("on time")])
        done = run(sim, lambda c: c.complete(body(), model="m"), retry=RETRY, timeout=0.3)
    assert (done.message.content, done.attempts) == ("on time", 2)


def test_the_deadline_abandons_the_attempt_in_flight() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply("late", delay=3.0), Reply("never asked")])
        started = time.monotonic()
        err = failure(sim, retry=RetryPolicy(retries=5, backoff=0.0, deadline=0.5), timeout=10.0)
    assert 0.5 <= time.monotonic() - started < 2.0
    assert (err.code, err.rule, err.attempts, sim.pending) == (TIMEOUT, "transport:deadline", 1, 1)


def test_no_wait_is_begun_that_would_end_after_the_deadline() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply.error(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "3"}), Reply("never asked")])
        started = time.monotonic()
        err = failure(sim, retry=RetryPolicy(retries=3, backoff=0.0, max_wait=10.0, deadline=1.0))
    assert time.monotonic() - started < 0.9 and (err.code, err.attempts) == (RATE_LIMITED, 1)


def test_cancellation_during_a_retry_wait_propagates() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply.error(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "5"})])

        async def main() -> None:
            async with ChatClient(sim.base_url, retry=RetryPolicy(retries=1, max_wait=10.0)) as client:
                task = asyncio.create_task(client.complete(body(), model="m"))
                while not sim.requests:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)  # now waiting for the retry
                task.cancel()
                await task

        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(main())
    assert time.monotonic() - started < 3.0 and len(sim.requests) == 1


def test_a_call_may_override_the_clients_policy() -> None:
    with ProviderSimulator() as sim:
        sim.script([server_error(), Reply("retried")])
        done = run(sim, lambda c: c.complete(body(), model="m", retry=RETRY))  # the client's default: no retry
        sim.script([server_error(), Reply("unused")])
        err = failure(sim)
    assert done.attempts == 2 and err.attempts == 1


# -- the blocking entry point --------------------------------------------------------------------------
def test_complete_blocking_retries_like_complete() -> None:
    with ProviderSimulator() as sim:
        sim.script([server_error(), Reply("blocking")])
        done = ChatClient(sim.base_url, retry=RETRY).complete_blocking(body(), model="m")
    assert (done.message.content, done.attempts) == ("blocking", 2)


def test_complete_blocking_inside_a_running_loop_uses_a_helper_thread() -> None:
    with ProviderSimulator(fallback=Reply("from a loop")) as sim:

        async def main() -> str:
            return ChatClient(sim.base_url).complete_blocking(body(), model="m").message.content

        assert asyncio.run(main()) == "from a loop"


def test_complete_blocking_raises_the_classified_error() -> None:
    with ProviderSimulator(context_window=20) as sim:
        with pytest.raises(ProviderError) as info:
            ChatClient(sim.base_url, retry=RETRY).complete_blocking(body("word " * 100), model="m")
    assert (info.value.code, info.value.attempts) == (CONTEXT_WINDOW_EXCEEDED, 1)


# -- the rules the client is built from ------------------------------------------------------------------
def _err(code: str, retry_after: float | None = None, retryable: bool | None = None) -> ProviderError:
    return ProviderError(code, "x", provider="p", retry_after=retry_after, retryable=retryable)


@pytest.mark.parametrize(
    ("policy", "error", "attempt", "elapsed", "wait"),
    [
        (RetryPolicy(retries=2, backoff=0.5), _err(SERVER_ERROR), 1, 0.0, 0.5),
        (RetryPolicy(retries=2, backoff=0.5), _err(SERVER_ERROR), 2, 0.0, 1.0),
        (RetryPolicy(retries=2, backoff=0.5), _err(SERVER_ERROR), 3, 0.0, None),  # attempts spent
        (RetryPolicy(retries=2, backoff=0.5), _err(TIMEOUT), 1, 0.0, 0.5),
        (RetryPolicy(retries=2, backoff=0.5), _err(CONNECTION_ERROR), 1, 0.0, 0.5),
        (RetryPolicy(retries=2, backoff=0.5), _err(RATE_LIMITED, retry_after=2.0), 1, 0.0, 2.0),
        (RetryPolicy(retries=2, backoff=0.5), _err(RATE_LIMITED, retry_after=0.0), 1, 0.0, 0.0),
        (RetryPolicy(retries=2, max_wait=1.0), _err(RATE_LIMITED, retry_after=2.0), 1, 0.0, None),
        (RetryPolicy(retries=2), _err(RATE_LIMITED, retryable=False), 1, 0.0, None),  # a spent quota
        (RetryPolicy(retries=2), _err(CONTEXT_WINDOW_EXCEEDED), 1, 0.0, None),
        (RetryPolicy(retries=2), _err(BAD_REQUEST), 1, 0.0, None),
        (RetryPolicy(retries=2), _err(AUTH_FAILED), 1, 0.0, None),
        (RetryPolicy(retries=2), _err(MALFORMED_RESPONSE), 1, 0.0, None),
        (RetryPolicy(retries=2, backoff=0.5, deadline=10.0), _err(SERVER_ERROR), 1, 9.0, 0.5),
        (RetryPolicy(retries=2, backoff=0.5, deadline=10.0), _err(SERVER_ERROR), 1, 9.6, None),
        (RetryPolicy(), _err(SERVER_ERROR), 1, 0.0, None),  # the default is one attempt
    ],
)
def test_wait_before_retry(policy: RetryPolicy, error: ProviderError, attempt: int, elapsed: float, wait: float | None) -> None:
    assert policy.wait_before_retry(error, attempt, elapsed) == wait


@pytest.mark.parametrize(
    "kw", [{"retries": -1}, {"retries": True}, {"retries": 1.5}, {"backoff": -1}, {"max_wait": float("inf")}, {"deadline": 0}, {"deadline": float("nan")}]
)
def test_retry_policy_rejects_nonsense(kw: dict) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kw)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (17, 17), (-3, None), (True, None), (2.0, None), ("12", None), (None, None)])
def test_one_rule_for_reported_token_counts(value: Any, expected: int | None) -> None:
    assert int_or_none(value) == expected


def test_there_is_one_model_client() -> None:
    """httpx is imported by engine.llm.client alone; the harness and the summarizer both use it; the
    llm package sits on the pure core only."""
    graph = grimp.build_graph("engine", include_external_packages=True)
    assert graph.find_modules_that_directly_import("httpx") == {"engine.llm.client"}
    for user_module in ("engine.apps.harness.loop", "engine.compaction.summarizers.openai_compat"):
        assert "engine.llm.client" in graph.find_modules_directly_imported_by(user_module)
    llm = {m for m in graph.modules if m == "engine.llm" or m.startswith("engine.llm.")}
    imported = set().union(*(graph.find_modules_directly_imported_by(m) for m in llm)) - llm
    assert {m for m in imported if m.startswith("engine")} <= {"engine.core.errors", "engine.core.messages", "engine.core.meter"}
    assert not graph.find_shortest_chains(importer="engine.compaction.summarizers.protocol", imported="engine.compaction.summarizers.openai_compat")
    assert not graph.find_shortest_chains(importer="engine.compaction.summarizers.openai_compat", imported="engine.compaction.summarizers.factory")
