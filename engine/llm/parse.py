"""Reading chat-completion responses (a JSON body, or a server-sent event stream) into a :class:`Completion`.

No I/O here: :func:`parse_body` takes the bytes of a body; :class:`StreamReader` is fed the stream's
lines one at a time and finishes into the same :class:`Completion` a body would give. An error the
provider sends in-band (in a 200 body or inside the stream) is raised as the classified
:class:`~engine.llm.errors.ProviderError`; a response that cannot be read is ``MALFORMED_RESPONSE``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.core.messages import InvalidMessage, Message, ToolCall

from .errors import MALFORMED_RESPONSE, ProviderError, classify_inband

__all__ = ["Completion", "StreamReader", "int_or_none", "malformed", "parse_body"]


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished model reply: the assistant message (tool calls parsed) and what the provider
    reported. ``raw`` is the response body (for a stream: the equivalent body, plus
    ``stream_chunks``); ``attempts`` is how many requests the call made, retries included."""

    message: Message
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str
    raw: dict[str, Any]
    attempts: int = 1


def int_or_none(value: object) -> int | None:
    """A reported token count: a whole number >= 0, else ``None`` (unreported). Booleans, floats,
    strings and negative numbers are not counts."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def malformed(provider: str, why: str, original: object) -> ProviderError:
    """The error for a response that cannot be read (never retried: the same request gets the same body)."""
    return ProviderError(MALFORMED_RESPONSE, why, provider=provider, original=original, rule="parse")


def _usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return int_or_none(usage.get("prompt_tokens")), int_or_none(usage.get("completion_tokens"))


def parse_body(provider: str, content: bytes, model: str) -> Completion:
    """The completion in a JSON response body; ``model`` is used when the body names none."""
    try:
        data = json.loads(content)
    except ValueError as exc:
        raise malformed(provider, f"response is not JSON: {exc}", content.decode("utf-8", "replace")) from exc
    if not isinstance(data, dict):
        raise malformed(provider, "response is not a JSON object", data)
    inband = classify_inband(provider, data)
    if inband is not None:
        raise inband
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise malformed(provider, "response has no choices", data)
    choice = choices[0]
    raw_message = choice.get("message")
    if not isinstance(raw_message, dict):
        raise malformed(provider, "first choice has no message", data)
    try:
        message = Message.from_openai({**raw_message, "role": raw_message.get("role") or "assistant"})
    except InvalidMessage as exc:
        raise malformed(provider, f"invalid assistant message: {exc}", data) from exc
    if message.role != "assistant":
        raise malformed(provider, f"reply has role {message.role!r}, expected 'assistant'", data)
    prompt, completion = _usage(data)
    return Completion(
        message=message,
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=prompt,
        completion_tokens=completion,
        model=str(data.get("model") or model),
        raw=data,
    )


class StreamReader:
    """Assembles an SSE chat-completion stream: :meth:`feed` every line as received, then :meth:`finish`.

    Each event's ``data`` (multi-line data joined by newlines) is one chunk; ``event:``, ``id:``,
    ``retry:`` and ``:`` comment lines carry nothing needed (errors live in the data). Text and
    tool-call deltas of choice 0 are joined; usage comes from the chunk that carries it.
    """

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.done = False  # "[DONE]" seen: later lines are ignored
        self._data: list[str] = []
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # index -> {"id", "name", "arguments": [...]}
        self._finish: str | None = None
        self._usage: dict[str, Any] = {}
        self._meta: dict[str, Any] = {}
        self._chunks = 0

    def feed(self, line: str) -> None:
        """One line of the stream (without its line ending)."""
        if self.done:
            return
        if not line:
            self._dispatch()
        elif line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))

    def finish(self) -> Completion:
        """The completion, once the stream has ended."""
        self._dispatch()
        if not self.done and self._finish is None:
            raise malformed(
                self.provider, f"stream ended after {self._chunks} chunks without a finish_reason or [DONE]", self._meta
            )
        try:
            tool_calls = tuple(
                ToolCall(id=c["id"], name=c["name"], arguments="".join(c["arguments"]) or "{}")
                for _, c in sorted(self._calls.items())
            )
            message = Message("assistant", "".join(self._content), tool_calls=tool_calls)
        except InvalidMessage as exc:
            raise malformed(self.provider, f"invalid streamed tool call: {exc}", self._meta) from exc
        raw = {
            **self._meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message.to_openai(), "finish_reason": self._finish}],
            "usage": self._usage or None,
            "stream_chunks": self._chunks,
        }
        prompt, completion = _usage(raw)
        return Completion(
            message=message,
            finish_reason=self._finish,
            prompt_tokens=prompt,
            completion_tokens=completion,
            model=str(self._meta.get("model") or self.model),
            raw=raw,
        )

    def _dispatch(self) -> None:
        if self.done or not self._data:
            return
        data, self._data = "\n".join(self._data), []
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise malformed(self.provider, f"stream event is not JSON: {exc}", data) from exc
        if not isinstance(chunk, dict):
            raise malformed(self.provider, "stream event is not a JSON object", chunk)
        inband = classify_inband(self.provider, chunk)
        if inband is not None:
            raise inband
        self._chunks += 1
        for key in ("id", "model", "created", "system_fingerprint"):
            if chunk.get(key) is not None:
                self._meta.setdefault(key, chunk[key])
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            for i, part in enumerate(delta.get("tool_calls") or ()):
                self._merge_call(part, fallback_index=i)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]

    def _merge_call(self, part: object, *, fallback_index: int) -> None:
        """Fold one tool-call delta into the call it continues (keyed by its ``index``)."""
        if not isinstance(part, dict):
            return
        index = part.get("index")
        index = index if isinstance(index, int) else fallback_index
        call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": []})
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
