"""A provider simulator: a real OpenAI-compatible HTTP server on loopback, for tests and the demo.

It listens on ``127.0.0.1`` (an ephemeral port by default) in a background thread and answers
``POST /v1/chat/completions`` (and ``/chat/completions``, for clients given a bare host). It is the
one fake provider of the project: the agent harness, the summarizer and the model client are all
tested against it, and the demo database is built with it. Each request's envelope is rebuilt from its JSON and measured with the
engine's own token meter. A request with more prompt tokens than :attr:`ProviderSimulator.context_window`
(``max_tokens`` is not reserved) gets the error body a real provider sends (see :data:`STYLES`),
thrown as an HTTP error or, with ``inband=True``, inside a 200 body or the SSE stream, and it does
not consume a scripted reply. Other requests take the next
scripted :class:`Reply` (text, tool calls, a scripted error such as a 429 with ``Retry-After``, or
any raw body, optionally after a delay). Usage reports the simulator's own count as
``prompt_tokens``. Every request is recorded with its path and headers. Ids come from a counter, so
two runs of the same script produce the same bytes. Reply and body types: :mod:`.sim_protocol`.

Manual use: ``python -m engine.apps.harness.simulator --port 8765 --window 4096 --style vllm``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable

from engine.core.messages import Envelope
from engine.core.meter import TokenMeter, default_meter

from .sim_protocol import (
    OUTCOMES,
    PATHS,
    STYLES,
    BadRequest,
    RecordedRequest,
    Reply,
    ScriptItem,
    SimRequest,
    completion_body,
    completion_stream,
    encode,
    inband_stream,
    openai_error,
    overflow_body,
    request_envelope,
)

__all__ = [
    "OUTCOMES",
    "PATHS",
    "STYLES",
    "ProviderSimulator",
    "RecordedRequest",
    "Reply",
    "SimRequest",
    "main",
    "overflow_body",
]


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
            headers = {name.lower(): value for name, value in self.headers.items()}
            self.server.sim._serve(self, self.path, headers, raw)
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
    request reads them once. ``meter`` defaults to ``engine.core.meter.default_meter(<request model>)``.
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

    def __exit__(self, *exc: Any) -> None:
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

    def _serve(self, h: _Handler, path: str, headers: dict[str, str], raw: bytes) -> None:
        with self._lock:
            index = self._counter
            self._counter += 1
        if path.rstrip("/") not in PATHS:
            data, ctype = encode(openai_error(f"Invalid URL (POST {path})", code="unknown_url"), None)
            self._record(RecordedRequest(index, "", None, False, "invalid", 404, {}, path=path, headers=headers))
            h.send_body(404, data, ctype)
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            model = str(body.get("model") or self.model)
            envelope = request_envelope(body)
        except (ValueError, BadRequest) as exc:
            data, ctype = encode(openai_error(f"simulator: bad request: {exc}"), None)
            self._record(RecordedRequest(index, "", None, False, "invalid", 400, {}, path=path, headers=headers))
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
            self._record(RecordedRequest(index, model, tokens, stream, outcome, status, body, path=path, headers=headers))

        if over:
            status, err = overflow_body(style, tokens=tokens, window=window, max_tokens=body.get("max_tokens"))
            if inband:
                if style == "413":  # a gateway relaying the upstream status inside a JSON error
                    err = {"error": {"message": "Request Entity Too Large", "type": "request_too_large", "code": 413}}
                record("overflow", 200)
                if stream:
                    h.send_stream(inband_stream(request, model, err, anthropic=style == "anthropic"))
                else:
                    h.send_body(200, *encode(err, None))
            else:
                record("overflow", status)
                h.send_body(status, *encode(err, None))
            return
        if item is None:
            record("no_reply", 500)
            h.send_body(500, *encode(openai_error("simulator: no scripted reply left", "server_error"), None))
            return
        reply = item(request) if not isinstance(item, Reply) else item
        if not isinstance(reply, Reply):
            record("invalid", 500)
            message = f"simulator: script callable returned {type(reply).__name__}, not a Reply"
            h.send_body(500, *encode(openai_error(message, "server_error"), None))
            return
        if reply.delay and self._closing.wait(reply.delay):
            return  # shutting down
        if reply.body is not None:  # not a completion: the scripted body, verbatim
            record("scripted", reply.status)
            data, ctype = encode(reply.body, reply.content_type)
            h.send_body(reply.status, data, ctype, reply.headers)
            return
        record("ok", 200)
        if stream:
            h.send_stream(completion_stream(request, model, reply, self._count))
        else:
            h.send_body(200, *encode(completion_body(request, model, reply, self._count), None))


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until interrupted; every request gets a short text reply."""
    parser = argparse.ArgumentParser(prog="python -m engine.apps.harness.simulator", description=__doc__.split("\n")[0])
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
