"""A provider simulator: a real OpenAI-compatible HTTP server on loopback, for tests and the demo.

It listens on ``127.0.0.1`` (an ephemeral port by default) in a background thread and answers
``POST /v1/chat/completions``. Each request's envelope is rebuilt from its JSON and measured with the
engine's own token meter. A request with more prompt tokens than :attr:`ProviderSimulator.context_window`
(``max_tokens`` is not reserved) gets the error body a real provider sends (see :data:`STYLES`),
thrown as an HTTP error or, with ``inband=True``, inside a 200 body or the SSE stream, and it does
not consume a scripted reply. Other requests take the next
scripted :class:`Reply` (text, tool calls, or a scripted error such as a 429). Usage reports the
simulator's own count as ``prompt_tokens``. Every request is recorded. Ids come from a counter, so
two runs of the same script produce the same bytes.

Manual use: ``python -m engine.harness.simulator --port 8765 --window 4096 --style vllm``.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Mapping, Union

from engine.messages import Envelope, InvalidMessage, Message, Surface, ToolCall
from engine.meter import TokenMeter, default_meter

__all__ = [
    "OUTCOMES",
    "STYLES",
    "ProviderSimulator",
    "RecordedRequest",
    "Reply",
    "SimRequest",
    "main",
    "overflow_body",
]

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
        cls, status: int, body: bytes | str | Mapping[str, Any] | list, *, headers: Mapping[str, str] | None = None
    ) -> "Reply":
        """A scripted HTTP error (e.g. a 429 with ``Retry-After``, a 500)."""
        return cls(status=status, body=body, headers=tuple((headers or {}).items()))

    @classmethod
    def raw(cls, body: bytes | str | Mapping[str, Any] | list, *, status: int = 200, content_type: str | None = None) -> "Reply":
        """Send exactly ``body`` (malformed JSON, an in-band error, a hand-written SSE stream)."""
        return cls(status=status, body=body, content_type=content_type)

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


ScriptItem = Union[Reply, Callable[[SimRequest], Reply]]


class _BadRequest(ValueError):
    """The request body is not a chat completion request."""


def _envelope(body: Mapping[str, Any]) -> Envelope:
    """Rebuild the envelope the client sent: a leading system message is the system prompt."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _BadRequest("'messages' must be a non-empty list")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _BadRequest("'tools' must be a list of objects")
    try:
        messages = [Message.from_openai(m) for m in raw]
    except InvalidMessage as exc:
        raise _BadRequest(str(exc)) from exc
    system_prompt = ""
    if messages[0].role == "system" and messages[0].content:
        system_prompt, messages = messages[0].content, messages[1:]
    return Envelope(system_prompt, Surface(tuple(messages)), tuple(tools))


def _openai_error(message: str, type_: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
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


def _encode(body: bytes | str | Mapping[str, Any] | list, content_type: str | None) -> tuple[bytes, str]:
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


def _sse(data: Any, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return ((f"event: {event}\n" if event else "") + f"data: {text}\n\n").encode("utf-8")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], sim: "ProviderSimulator") -> None:
        self.sim = sim
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up (timeout, cancellation, pool closed) is normal; anything else is reported."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def drop_connections(self) -> None:
        """End kept-alive connections too, so a closed simulator answers nobody."""
        with self._open_lock:
            open_sockets, self._open = list(self._open), set()
        for sock in open_sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the simulator records requests instead of logging them."""

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            self.server.sim._serve(self, self.path, raw)
        except ConnectionError:
            self.close_connection = True  # the client gave up (timeout, cancellation)

    def send_body(self, status: int, data: bytes, content_type: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_stream(self, events: Iterable[bytes]) -> None:
        """A 200 ``text/event-stream`` response, one HTTP chunk per event."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


class ProviderSimulator:
    """An OpenAI-compatible chat completion server on 127.0.0.1, in a background thread.

    Settings (``context_window``, ``error_style``, ``inband``) may change while it runs; each
    request reads them once. ``meter`` defaults to ``engine.meter.default_meter(<request model>)``.
    ``fallback`` answers when the script is empty; without it such a request gets a 500 (outcome
    ``no_reply``) so a test that under-scripts fails loudly.
    """

    def __init__(
        self,
        *,
        context_window: int = 8192,
        error_style: str = "openai",
        inband: bool = False,
        model: str = "sim-model",
        meter: TokenMeter | None = None,
        fallback: ScriptItem | None = None,
        port: int = 0,
    ) -> None:
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._script: deque[ScriptItem] = deque()
        self._records: list[RecordedRequest] = []
        self._counter = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._port = port
        self.model = model
        self._meter = meter
        self.fallback = fallback
        self.context_window = context_window
        self.error_style = error_style
        self.inband = inband

    # -- settings ---------------------------------------------------------------------------------
    @property
    def context_window(self) -> int:
        return self._context_window

    @context_window.setter
    def context_window(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"context_window must be a positive int, got {value!r}")
        self._context_window = value

    @property
    def error_style(self) -> str:
        return self._error_style

    @error_style.setter
    def error_style(self, value: str) -> None:
        if value not in STYLES:
            raise ValueError(f"unknown error style {value!r} (expected one of {', '.join(STYLES)})")
        self._error_style = value

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "ProviderSimulator":
        """Bind the socket and serve in a daemon thread (idempotent; a closed simulator stays closed)."""
        if self._closing.is_set():
            raise RuntimeError("a closed simulator cannot be restarted; create a new one")
        if self._server is None:
            self._server = _Server(("127.0.0.1", self._port), self)
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="provider-simulator", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port (idempotent); pending delays end at once."""
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.drop_connections()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> "ProviderSimulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not running (use start() or a with block)")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``"""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script and records -----------------------------------------------------------------------
    def script(self, replies: Iterable[ScriptItem]) -> None:
        """Queue replies (or callables ``SimRequest -> Reply``), consumed one per in-window request."""
        items = list(replies)
        for item in items:
            if not isinstance(item, Reply) and not callable(item):
                raise TypeError(f"a script item must be a Reply or a callable, got {type(item).__name__}")
        with self._lock:
            self._script.extend(items)

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> tuple[RecordedRequest, ...]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return tuple(sorted(self._records, key=lambda r: r.index))

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)

    # -- serving (handler threads) -------------------------------------------------------------------
    def _count(self, envelope: Envelope, model: str) -> int:
        meter = self._meter if self._meter is not None else default_meter(model)
        return meter.measure(envelope).total

    def _serve(self, h: _Handler, path: str, raw: bytes) -> None:
        with self._lock:
            index = self._counter
            self._counter += 1
        if path.rstrip("/") != "/v1/chat/completions":
            data, ctype = _encode(_openai_error(f"Invalid URL (POST {path})", code="unknown_url"), None)
            self._record(RecordedRequest(index, "", None, False, "invalid", 404, {}))
            h.send_body(404, data, ctype)
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise _BadRequest("the request body must be a JSON object")
            model = str(body.get("model") or self.model)
            envelope = _envelope(body)
        except (ValueError, _BadRequest) as exc:
            data, ctype = _encode(_openai_error(f"simulator: bad request: {exc}"), None)
            self._record(RecordedRequest(index, "", None, False, "invalid", 400, {}))
            h.send_body(400, data, ctype)
            return
        tokens = self._count(envelope, model)
        stream = bool(body.get("stream"))
        with self._lock:
            window, style, inband = self._context_window, self._error_style, self.inband
            over = tokens > window
            item = None if over else (self._script.popleft() if self._script else self.fallback)
        request = SimRequest(index=index, body=body, envelope=envelope, prompt_tokens=tokens, stream=stream)

        def record(outcome: str, status: int) -> None:
            self._record(RecordedRequest(index, model, tokens, stream, outcome, status, body))

        if over:
            status, err = overflow_body(style, tokens=tokens, window=window, max_tokens=body.get("max_tokens"))
            if inband:
                if style == "413":  # a gateway relaying the upstream status inside a JSON error
                    err = {"error": {"message": "Request Entity Too Large", "type": "request_too_large", "code": 413}}
                record("overflow", 200)
                if stream:
                    h.send_stream(self._inband_stream(request, model, err, anthropic=style == "anthropic"))
                else:
                    h.send_body(200, *_encode(err, None))
            else:
                record("overflow", status)
                h.send_body(status, *_encode(err, None))
            return
        if item is None:
            record("no_reply", 500)
            h.send_body(500, *_encode(_openai_error("simulator: no scripted reply left", "server_error"), None))
            return
        reply = item(request) if not isinstance(item, Reply) else item
        if not isinstance(reply, Reply):
            record("invalid", 500)
            message = f"simulator: script callable returned {type(reply).__name__}, not a Reply"
            h.send_body(500, *_encode(_openai_error(message, "server_error"), None))
            return
        if reply.delay and self._closing.wait(reply.delay):
            return  # shutting down
        if not reply.is_completion:
            record("scripted", reply.status)
            data, ctype = _encode(reply.body, reply.content_type)  # type: ignore[arg-type]
            h.send_body(reply.status, data, ctype, reply.headers)
            return
        record("ok", 200)
        if stream:
            h.send_stream(self._completion_stream(request, model, reply))
        else:
            h.send_body(200, *_encode(self._completion(request, model, reply), None))

    # -- response bodies ---------------------------------------------------------------------------
    @staticmethod
    def _calls(request: SimRequest, reply: Reply) -> list[ToolCall]:
        return [
            ToolCall(id=f"call_{request.index:04d}_{i}", name=name, arguments=json.dumps(args, ensure_ascii=False))
            for i, (name, args) in enumerate(reply.tool_calls)
        ]

    def _usage(self, request: SimRequest, model: str, message: Message) -> dict[str, int]:
        completion = self._count(Envelope("", Surface((message,))), model)
        return {
            "prompt_tokens": request.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": request.prompt_tokens + completion,
        }

    @staticmethod
    def _finish(reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _completion(self, request: SimRequest, model: str, reply: Reply) -> dict[str, Any]:
        calls = self._calls(request, reply)
        message = Message("assistant", reply.content, tool_calls=tuple(calls))
        out_message: dict[str, Any] = {"role": "assistant", "content": reply.content if (reply.content or not calls) else None}
        if calls:
            out_message["tool_calls"] = [c.to_openai() for c in calls]
        return {
            "id": f"chatcmpl-sim-{request.index}",
            "object": "chat.completion",
            "created": _CREATED_BASE + request.index,
            "model": model,
            "choices": [{"index": 0, "message": out_message, "logprobs": None, "finish_reason": self._finish(reply)}],
            "usage": self._usage(request, model, message),
        }

    @staticmethod
    def _chunk(request: SimRequest, model: str, delta: Mapping[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-sim-{request.index}",
            "object": "chat.completion.chunk",
            "created": _CREATED_BASE + request.index,
            "model": model,
            "choices": [{"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish}],
        }

    def _completion_stream(self, request: SimRequest, model: str, reply: Reply) -> Iterable[bytes]:
        yield _sse(self._chunk(request, model, {"role": "assistant", "content": ""}))
        for piece in re.findall(r"\S+\s*|\s+", reply.content):  # word by word; joined they are the content
            yield _sse(self._chunk(request, model, {"content": piece}))
        calls = self._calls(request, reply)
        for i, call in enumerate(calls):
            head = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            yield _sse(self._chunk(request, model, {"tool_calls": [head]}))
            for start in range(0, len(call.arguments), 8):
                part = {"index": i, "function": {"arguments": call.arguments[start : start + 8]}}
                yield _sse(self._chunk(request, model, {"tool_calls": [part]}))
        yield _sse(self._chunk(request, model, {}, self._finish(reply)))
        options = request.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            usage = self._usage(request, model, Message("assistant", reply.content, tool_calls=tuple(calls)))
            chunk = self._chunk(request, model, {})
            chunk["choices"] = []
            chunk["usage"] = usage
            yield _sse(chunk)
        yield _sse("[DONE]")

    def _inband_stream(self, request: SimRequest, model: str, err: Any, *, anthropic: bool) -> Iterable[bytes]:
        """The stream opens normally, then carries the provider's error event and ends."""
        yield _sse(self._chunk(request, model, {"role": "assistant", "content": ""}))
        yield _sse(err, event="error" if anthropic else None)


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until interrupted; every request gets a short text reply."""
    parser = argparse.ArgumentParser(prog="python -m engine.harness.simulator", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--window", type=int, default=8192, help="context window in tokens")
    parser.add_argument("--style", choices=STYLES, default="openai", help="wording of the too-long error")
    parser.add_argument("--inband", action="store_true", help="send the too-long error inside a 200 body or the stream")
    parser.add_argument("--model", default="sim-model", help="model name reported in responses")
    args = parser.parse_args(argv)

    def echo(request: SimRequest) -> Reply:
        return Reply(f"Simulated reply #{request.index} ({request.prompt_tokens} prompt tokens).")

    sim = ProviderSimulator(
        context_window=args.window, error_style=args.style, inband=args.inband, model=args.model, fallback=echo, port=args.port
    )
    try:
        sim.start()
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}")
        return 2
    print(f"provider simulator listening on {sim.base_url} (window {args.window}, style {args.style})", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sim.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
