"""What the provider simulator sends and receives: scripted replies, provider error bodies,
completion bodies and SSE streams, and the records of what arrived. No sockets here; the server is
:mod:`engine.apps.harness.simulator`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from engine.core.messages import Envelope, InvalidMessage, Message, Surface, ToolCall

__all__ = [
    "OUTCOMES",
    "PATHS",
    "STYLES",
    "BadRequest",
    "RecordedRequest",
    "Reply",
    "ScriptItem",
    "SimRequest",
    "completion_body",
    "completion_stream",
    "encode",
    "inband_stream",
    "openai_error",
    "overflow_body",
    "request_envelope",
    "sse",
]

#: where chat completions are served: with and without the ``/v1`` prefix (clients configured with
#: a bare host post to ``/chat/completions``)
PATHS: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")

#: wordings of the "request too long" error the simulator can send
STYLES: tuple[str, ...] = ("openai", "deepseek", "vllm", "anthropic", "ollama", "413")

#: what happened to a recorded request
OUTCOMES: tuple[str, ...] = ("ok", "overflow", "scripted", "no_reply", "invalid")

_DEFAULT_COMPLETION_BUDGET = 4096  # DeepSeek's wording counts max_tokens; this is used when none is sent
_CREATED_BASE = 1_700_000_000  # deterministic "created" timestamps: base + request index


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer.

    A completion (``content`` and/or ``tool_calls`` as ``(name, arguments)`` pairs) unless ``body``
    is set, in which case ``body`` is sent verbatim with ``status`` (see :meth:`error`, :meth:`raw`).
    ``delay`` seconds pass before anything is sent.
    """

    content: str = ""
    tool_calls: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    status: int = 200
    body: bytes | str | Mapping[str, Any] | list | None = None
    content_type: str | None = None  # default: inferred from ``body``
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0

    def __post_init__(self) -> None:
        calls = tuple((str(name), dict(args)) for name, args in self.tool_calls)
        object.__setattr__(self, "tool_calls", calls)
        object.__setattr__(self, "headers", tuple(self.headers))
        if self.body is None and self.status != 200:
            raise ValueError("a reply with a non-200 status needs a body (use Reply.error)")
        if self.delay < 0:
            raise ValueError("delay must be >= 0")

    @classmethod
    def error(
        cls,
        status: int,
        body: bytes | str | Mapping[str, Any] | list,
        *,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> "Reply":
        """A scripted HTTP error (e.g. a 429 with ``Retry-After``, a 500)."""
        return cls(status=status, body=body, headers=tuple((headers or {}).items()), delay=delay)

    @classmethod
    def raw(
        cls,
        body: bytes | str | Mapping[str, Any] | list,
        *,
        status: int = 200,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> "Reply":
        """Send exactly ``body`` (a completion with chosen usage, malformed JSON, an in-band error,
        a hand-written SSE stream)."""
        return cls(status=status, body=body, content_type=content_type, headers=tuple((headers or {}).items()), delay=delay)

    @property
    def is_completion(self) -> bool:
        return self.body is None


@dataclass(frozen=True, slots=True)
class SimRequest:
    """An incoming request as a script callable sees it."""

    index: int
    body: Mapping[str, Any]
    envelope: Envelope
    prompt_tokens: int
    stream: bool


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What the simulator received and what it did about it (``outcome`` is one of :data:`OUTCOMES`)."""

    index: int
    model: str
    prompt_tokens: int | None  # None when the request could not be read
    stream: bool
    outcome: str
    status: int
    body: Mapping[str, Any] = field(repr=False)
    path: str = "/v1/chat/completions"
    #: request headers, names lower-cased (``authorization`` shows what credentials were sent)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


ScriptItem = Reply | Callable[[SimRequest], Reply]


class BadRequest(ValueError):
    """The request body is not a chat completion request."""


def request_envelope(body: Mapping[str, Any]) -> Envelope:
    """Rebuild the envelope the client sent: a leading system message is the system prompt."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'messages' must be a non-empty list")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRequest("'tools' must be a list of objects")
    try:
        messages = [Message.from_openai(m) for m in raw]
    except InvalidMessage as exc:
        raise BadRequest(str(exc)) from exc
    system_prompt = ""
    if messages[0].role == "system" and messages[0].content:
        system_prompt, messages = messages[0].content, messages[1:]
    return Envelope(system_prompt, Surface(tuple(messages)), tuple(tools))


def openai_error(message: str, type_: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    """An error body in OpenAI's shape."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


_HTML_413 = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)


def overflow_body(style: str, *, tokens: int, window: int, max_tokens: int | None) -> tuple[int, Any]:
    """(HTTP status, body) of the "request too long" error as the ``style`` provider sends it."""
    if style == "openai":
        return 400, {
            "error": {
                "message": f"This model's maximum context length is {window} tokens. However, your messages "
                f"resulted in {tokens} tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    if style == "deepseek":
        budget = max_tokens or _DEFAULT_COMPLETION_BUDGET
        return 400, {
            "error": {
                "message": f"This model's maximum context length is {window} tokens. However, you requested "
                f"{tokens + budget} tokens ({tokens} in the messages, {budget} in the completion). "
                "Please reduce the length of the messages or completion.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        }
    if style == "vllm":
        return 400, {
            "object": "error",
            "message": f"This model's maximum context length is {window} tokens. However, you requested "
            f"{tokens} tokens in the messages, Please reduce the length of the messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    if style == "anthropic":
        return 400, {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": f"prompt is too long: {tokens} tokens > {window} maximum"},
        }
    if style == "ollama":
        return 400, {"error": f"prompt too long; exceeded max context length by {tokens - window} tokens"}
    if style == "413":
        return 413, _HTML_413
    raise ValueError(f"unknown error style {style!r} (expected one of {', '.join(STYLES)})")


def encode(body: bytes | str | Mapping[str, Any] | list, content_type: str | None) -> tuple[bytes, str]:
    """(bytes, content type) for a body: JSON for objects and lists, else inferred from the text."""
    if isinstance(body, (Mapping, list)):
        return json.dumps(body, ensure_ascii=False).encode("utf-8"), content_type or "application/json"
    data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    if content_type is None:
        if data.lstrip().startswith(b"<"):
            content_type = "text/html; charset=utf-8"
        else:
            try:
                json.loads(data)
                content_type = "application/json"
            except ValueError:
                content_type = "text/plain; charset=utf-8"
    return data, content_type


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event carrying ``data`` (JSON unless it is already text)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return ((f"event: {event}\n" if event else "") + f"data: {text}\n\n").encode("utf-8")


# -- response bodies --------------------------------------------------------------------------------
#: counts the tokens of an envelope for a model (the simulator's meter)
Counter = Callable[[Envelope, str], int]


def _calls(request: SimRequest, reply: Reply) -> list[ToolCall]:
    return [
        ToolCall(id=f"call_{request.index:04d}_{i}", name=name, arguments=json.dumps(args, ensure_ascii=False))
        for i, (name, args) in enumerate(reply.tool_calls)
    ]


def _usage(request: SimRequest, model: str, message: Message, count: Counter) -> dict[str, int]:
    completion = count(Envelope("", Surface((message,))), model)
    return {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": request.prompt_tokens + completion,
    }


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def completion_body(request: SimRequest, model: str, reply: Reply, count: Counter) -> dict[str, Any]:
    """The ``chat.completion`` body for a scripted completion; ids and timestamps from the request index."""
    calls = _calls(request, reply)
    message = Message("assistant", reply.content, tool_calls=tuple(calls))
    out_message: dict[str, Any] = {"role": "assistant", "content": reply.content if (reply.content or not calls) else None}
    if calls:
        out_message["tool_calls"] = [c.to_openai() for c in calls]
    return {
        "id": f"chatcmpl-sim-{request.index}",
        "object": "chat.completion",
        "created": _CREATED_BASE + request.index,
        "model": model,
        "choices": [{"index": 0, "message": out_message, "logprobs": None, "finish_reason": _finish(reply)}],
        "usage": _usage(request, model, message, count),
    }


def _chunk(request: SimRequest, model: str, delta: Mapping[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-sim-{request.index}",
        "object": "chat.completion.chunk",
        "created": _CREATED_BASE + request.index,
        "model": model,
        "choices": [{"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish}],
    }


def completion_stream(request: SimRequest, model: str, reply: Reply, count: Counter) -> Iterable[bytes]:
    """The same completion as SSE events: content word by word, tool-call arguments in 8-character
    pieces, the finish reason, usage when ``stream_options.include_usage`` asked for it, ``[DONE]``."""
    yield sse(_chunk(request, model, {"role": "assistant", "content": ""}))
    for piece in re.findall(r"\S+\s*|\s+", reply.content):  # word by word; joined they are the content
        yield sse(_chunk(request, model, {"content": piece}))
    calls = _calls(request, reply)
    for i, call in enumerate(calls):
        head = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        yield sse(_chunk(request, model, {"tool_calls": [head]}))
        for start in range(0, len(call.arguments), 8):
            part = {"index": i, "function": {"arguments": call.arguments[start : start + 8]}}
            yield sse(_chunk(request, model, {"tool_calls": [part]}))
    yield sse(_chunk(request, model, {}, _finish(reply)))
    options = request.body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        usage = _usage(request, model, Message("assistant", reply.content, tool_calls=tuple(calls)), count)
        chunk = _chunk(request, model, {})
        chunk["choices"] = []
        chunk["usage"] = usage
        yield sse(chunk)
    yield sse("[DONE]")


def inband_stream(request: SimRequest, model: str, err: object, *, anthropic: bool) -> Iterable[bytes]:
    """The stream opens normally, then carries the provider's error event and ends."""
    yield sse(_chunk(request, model, {"role": "assistant", "content": ""}))
    yield sse(err, event="error" if anthropic else None)
