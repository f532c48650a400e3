"""The one client for OpenAI-compatible chat-completion endpoints (OpenAI, DeepSeek, vLLM, Ollama, ...).

Every request the engine sends to a model goes through :meth:`ChatClient.complete`: the agent
harness awaits it, the summarizer calls :meth:`ChatClient.complete_blocking`. One call is: send the
request, read the body or the SSE stream (:mod:`engine.llm.parse`), turn every failure into a
classified :class:`~engine.llm.errors.ProviderError` (HTTP errors, errors returned in-band,
timeouts, connection failures, bodies that cannot be read), and try again when the
:class:`~engine.llm.retry.RetryPolicy` says so. Cancellation is the exception:
``asyncio.CancelledError`` passes through untouched.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Any, Callable, Coroutine, Mapping, TypeVar

import httpx

from .errors import CONNECTION_ERROR, TIMEOUT, ProviderError, classify_http_error
from .parse import Completion, StreamReader, malformed, parse_body
from .retry import NO_RETRY, RetryPolicy

__all__ = ["ChatClient"]

T = TypeVar("T")


class ChatClient:
    """POSTs ``{base_url}/chat/completions`` with an envelope body and returns a :class:`Completion`.

    ``provider`` labels the errors (``"openai"``, ``"deepseek"``, ``"vllm"``, ``"ollama"`` ...); the
    classification itself understands every known wording whatever the label. ``timeout`` bounds
    each network operation (connect, each read of the body or stream), not the whole call: a stream
    that keeps sending never times out; ``retry.deadline`` bounds the whole call. ``retry`` is the
    default policy (one attempt); a call may pass its own. The API key goes only into the
    Authorization header.

    A ``client`` passed in stays owned by the caller; otherwise the client creates its own
    ``httpx.AsyncClient`` on first use and :meth:`aclose` closes it. :meth:`complete_blocking` runs
    on a private event loop with a short-lived client of its own (an ``httpx.AsyncClient`` belongs to
    the loop it first ran on), so it never touches the shared one.
    """

    def __init__(
        self,
        base_url: str,
        *,
        provider: str = "openai",
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy = NO_RETRY,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.provider = provider
        self.retry = retry
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout)
        self._owns_client = client is None
        self._client = client

    def __repr__(self) -> str:
        key = "set" if self._headers else "none"
        return f"{type(self).__name__}(url={self.url!r}, provider={self.provider!r}, api_key={key}, retry={self.retry!r})"

    async def __aenter__(self) -> "ChatClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    # -- public ----------------------------------------------------------------------------------
    async def complete(
        self, body: Mapping[str, Any], *, model: str, stream: bool = False, retry: RetryPolicy | None = None
    ) -> Completion:
        """Send ``body`` (``{"messages": [...], "tools": [...]}`` plus any extra request fields) to
        ``model``, retrying as ``retry`` (default: the client's policy) allows.

        Raises :class:`ProviderError` (its ``attempts`` set); never swallows ``asyncio.CancelledError``.
        """
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)
        return await self._with_retries(self._client, body, model, stream, retry or self.retry)

    def complete_blocking(self, body: Mapping[str, Any], *, model: str, retry: RetryPolicy | None = None) -> Completion:
        """:meth:`complete` (non-streaming) for synchronous callers: blocks this thread until done.

        Safe from any thread, also one that runs an event loop (the call then runs on a helper thread).
        """

        async def call() -> Completion:
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                return await self._with_retries(client, body, model, False, retry or self.retry)

        return _run_blocking(call)

    # -- one call: attempts and waits ---------------------------------------------------------------
    async def _with_retries(
        self, client: httpx.AsyncClient, body: Mapping[str, Any], model: str, stream: bool, policy: RetryPolicy
    ) -> Completion:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                if policy.deadline is None:
                    done = await self._attempt(client, body, model, stream)
                else:
                    remaining = policy.deadline - (time.monotonic() - started)
                    done = await self._attempt_until(client, body, model, stream, remaining, policy.deadline)
                return dataclasses.replace(done, attempts=attempt)
            except ProviderError as err:
                err.attempts = attempt
                wait = policy.wait_before_retry(err, attempt, time.monotonic() - started)
                if wait is None:
                    raise
            await asyncio.sleep(wait)

    async def _attempt_until(
        self, client: httpx.AsyncClient, body: Mapping[str, Any], model: str, stream: bool, remaining: float, deadline: float
    ) -> Completion:
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                return await self._attempt(client, body, model, stream)
        except TimeoutError as exc:  # only the deadline raises this here (httpx's timeouts are mapped inside)
            raise ProviderError(
                TIMEOUT,
                f"no answer within the call's deadline of {deadline:g}s",
                provider=self.provider,
                original=exc,
                rule="transport:deadline",
            ) from None

    async def _attempt(self, client: httpx.AsyncClient, body: Mapping[str, Any], model: str, stream: bool) -> Completion:
        payload: dict[str, Any] = {**body, "model": model, "stream": stream}
        if stream:
            payload.setdefault("stream_options", {"include_usage": True})
        try:
            async with client.stream("POST", self.url, json=payload, headers=self._headers, timeout=self._timeout) as response:
                if response.status_code >= 400:
                    content = await response.aread()
                    raise classify_http_error(self.provider, response.status_code, content, response.headers)
                if stream and "text/event-stream" in response.headers.get("content-type", ""):
                    reader = StreamReader(self.provider, model)
                    async for line in response.aiter_lines():
                        reader.feed(line)
                        if reader.done:
                            break
                    return reader.finish()
                return parse_body(self.provider, await response.aread(), model)
        except httpx.TimeoutException as exc:
            raise ProviderError(
                TIMEOUT, f"no answer within the timeout ({type(exc).__name__})", provider=self.provider, original=exc, rule="transport:timeout"
            ) from exc
        except httpx.DecodingError as exc:  # a body that cannot be decoded (bad gzip, bad charset)
            raise malformed(self.provider, f"response body cannot be decoded: {exc}", exc) from exc
        except httpx.TransportError as exc:  # connect refused, reset, protocol errors, truncated bodies
            raise ProviderError(
                CONNECTION_ERROR, f"{type(exc).__name__}: {exc}", provider=self.provider, original=exc, rule="transport:connection"
            ) from exc


def _run_blocking(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``factory()`` makes to its end on a fresh event loop and return its result;
    on a helper thread when this thread already runs a loop (``asyncio.run`` refuses to nest)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            box["error"] = exc

    helper = threading.Thread(target=target, name="llm-blocking-call", daemon=True)
    helper.start()
    helper.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
