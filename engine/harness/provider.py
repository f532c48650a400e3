"""An async client for OpenAI-compatible chat completion endpoints (OpenAI, DeepSeek, vLLM, Ollama, ...).

Every failure leaves :meth:`ChatProvider.complete` as a :class:`~engine.harness.errors.ProviderError`
with a normalized code: HTTP errors, errors returned in-band (in a 200 body or inside the stream),
timeouts, connection failures and responses that cannot be parsed. Cancellation is the exception:
``asyncio.CancelledError`` passes through untouched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping

import httpx

from engine.harness.errors import (
    CONNECTION_ERROR,
    MALFORMED_RESPONSE,
    TIMEOUT,
    ProviderError,
    classify_http_error,
    classify_inband,
)
from engine.messages import InvalidMessage, Message, ToolCall

__all__ = ["ChatProvider", "Completion"]


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished model reply: the assistant message (tool calls parsed) and what the provider reported."""

    message: Message
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str
    raw: dict[str, Any]


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ChatProvider:
    """POSTs ``{base_url}/chat/completions`` with an envelope body and returns a :class:`Completion`.

    ``provider`` labels the errors (``"openai"``, ``"deepseek"``, ``"vllm"``, ``"ollama"`` ...); the
    classification itself understands every known wording whatever the label. A ``client`` passed in
    stays owned by the caller; otherwise the provider owns its client and :meth:`aclose` closes it.
    ``timeout`` bounds each network operation (connect, each read of the body or stream), not the
    whole call: a stream that keeps sending never times out.
    """

    def __init__(
        self,
        base_url: str,
        *,
        provider: str = "openai",
        api_key: str | None = None,
        timeout: float = 60.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.provider = provider
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout)
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=self._timeout)

    async def __aenter__(self) -> "ChatProvider":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this provider created it."""
        if self._owns_client:
            await self._client.aclose()

    # -- public --------------------------------------------------------------------------------
    async def complete(self, body: Mapping[str, Any], *, model: str, stream: bool = False) -> Completion:
        """Send ``body`` (``{"messages": [...], "tools": [...]}`` plus any extra request fields) to ``model``.

        Raises :class:`ProviderError`; never swallows ``asyncio.CancelledError``.
        """
        payload: dict[str, Any] = {**body, "model": model, "stream": stream}
        if stream:
            payload.setdefault("stream_options", {"include_usage": True})
        url = f"{self.base_url}/chat/completions"
        try:
            async with self._client.stream(
                "POST", url, json=payload, headers=self._headers, timeout=self._timeout
            ) as response:
                if response.status_code >= 400:
                    content = await response.aread()
                    raise classify_http_error(self.provider, response.status_code, content, response.headers)
                content_type = response.headers.get("content-type", "")
                if stream and "text/event-stream" in content_type:
                    return await self._read_stream(response, model)
                return self._parse_body(await response.aread(), model)
        except httpx.TimeoutException as exc:
            raise ProviderError(
                TIMEOUT, f"no answer within the timeout ({type(exc).__name__})", provider=self.provider, original=exc, rule="transport:timeout"
            ) from exc
        except httpx.DecodingError as exc:  # a body that cannot be decoded (bad gzip, bad charset)
            raise self._malformed(f"response body cannot be decoded: {exc}", exc) from exc
        except httpx.TransportError as exc:  # connect refused, reset, protocol errors, truncated bodies
            raise ProviderError(
                CONNECTION_ERROR, f"{type(exc).__name__}: {exc}", provider=self.provider, original=exc, rule="transport:connection"
            ) from exc

    # -- non-streaming ---------------------------------------------------------------------------
    def _malformed(self, why: str, original: Any) -> ProviderError:
        return ProviderError(MALFORMED_RESPONSE, why, provider=self.provider, original=original, rule="parse")

    def _parse_body(self, content: bytes, model: str) -> Completion:
        try:
            data = json.loads(content)
        except ValueError as exc:
            raise self._malformed(f"response is not JSON: {exc}", content.decode("utf-8", "replace")) from exc
        if not isinstance(data, dict):
            raise self._malformed("response is not a JSON object", data)
        inband = classify_inband(self.provider, data)
        if inband is not None:
            raise inband
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._malformed("response has no choices", data)
        choice = choices[0]
        raw_message = choice.get("message")
        if not isinstance(raw_message, dict):
            raise self._malformed("first choice has no message", data)
        try:
            message = Message.from_openai({**raw_message, "role": raw_message.get("role") or "assistant"})
        except InvalidMessage as exc:
            raise self._malformed(f"invalid assistant message: {exc}", data) from exc
        if message.role != "assistant":
            raise self._malformed(f"reply has role {message.role!r}, expected 'assistant'", data)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return Completion(
            message=message,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            model=str(data.get("model") or model),
            raw=data,
        )

    # -- streaming -------------------------------------------------------------------------------
    async def _events(self, response: httpx.Response) -> AsyncIterator[str]:
        """The ``data`` of each server-sent event (multi-line data joined by newlines)."""
        data: list[str] = []
        async for line in response.aiter_lines():
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            # "event:", "id:", "retry:" and ":" comments carry nothing we need: errors live in the data
        if data:
            yield "\n".join(data)

    async def _read_stream(self, response: httpx.Response, model: str) -> Completion:
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}  # index -> {"id", "name", "arguments": [...]}
        finish_reason: str | None = None
        usage: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        chunks = 0
        done = False
        async for data in self._events(response):
            if data.strip() == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                raise self._malformed(f"stream event is not JSON: {exc}", data) from exc
            if not isinstance(chunk, dict):
                raise self._malformed("stream event is not a JSON object", chunk)
            inband = classify_inband(self.provider, chunk)
            if inband is not None:
                raise inband
            chunks += 1
            for key in ("id", "model", "created", "system_fingerprint"):
                if chunk.get(key) is not None:
                    meta.setdefault(key, chunk[key])
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    content.append(delta["content"])
                for i, part in enumerate(delta.get("tool_calls") or ()):
                    self._merge_call(calls, part, fallback_index=i)
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
        if not done and finish_reason is None:
            raise self._malformed(f"stream ended after {chunks} chunks without a finish_reason or [DONE]", meta)
        try:
            tool_calls = tuple(
                ToolCall(id=c["id"], name=c["name"], arguments="".join(c["arguments"]) or "{}")
                for _, c in sorted(calls.items())
            )
            message = Message("assistant", "".join(content), tool_calls=tool_calls)
        except InvalidMessage as exc:
            raise self._malformed(f"invalid streamed tool call: {exc}", meta) from exc
        raw = {
            **meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message.to_openai(), "finish_reason": finish_reason}],
            "usage": usage or None,
            "stream_chunks": chunks,
        }
        return Completion(
            message=message,
            finish_reason=finish_reason,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            model=str(meta.get("model") or model),
            raw=raw,
        )

    @staticmethod
    def _merge_call(calls: dict[int, dict[str, Any]], part: Any, *, fallback_index: int) -> None:
        """Fold one tool-call delta into the call it continues (keyed by its ``index``)."""
        if not isinstance(part, dict):
            return
        index = part.get("index")
        index = index if isinstance(index, int) else fallback_index
        call = calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        if part.get("id") and not call["id"]:
            call["id"] = str(part["id"])
        fn = part.get("function") or {}
        if fn.get("name") and not call["name"]:  # some servers repeat the name on every delta
            call["name"] = str(fn["name"])
        args = fn.get("arguments")
        if isinstance(args, str):
            call["arguments"].append(args)
        elif args is not None:  # an object instead of JSON text
            call["arguments"].append(json.dumps(args, ensure_ascii=False))
