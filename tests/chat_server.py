"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

It listens on an ephemeral port in a background thread and answers ``POST /v1/chat/completions``
(and ``/chat/completions``) from a script of :class:`Reply` objects, one per request, recording every
request it received. When the script runs out it answers ``default`` (HTTP 500 unless set).

    with ChatServer([Reply.http_error(500), Reply.completion("ok")]) as server:
        client_base_url = server.base_url          # http://127.0.0.1:<port>/v1
        ...
        assert len(server.requests) == 2

Use it as a context manager, or through the ``chat_server`` fixture (import it into the test module).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Iterator

import pytest

PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class Reply:
    """One scripted answer: status, raw body, optional delay before answering (for timeouts)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, data: Any, status: int = 200, delay: float = 0.0) -> "Reply":
        return cls(status=status, body=json.dumps(data, ensure_ascii=False).encode("utf-8"), delay=delay)

    @classmethod
    def completion(
        cls,
        content: Any,
        *,
        prompt_tokens: int | None = 120,
        completion_tokens: int | None = 30,
        model: str = "test-model",
        delay: float = 0.0,
    ) -> "Reply":
        """A successful chat completion whose message content is ``content`` (any JSON value)."""
        data: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
        if prompt_tokens is not None or completion_tokens is not None:
            data["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": (prompt_tokens or 0) + (completion_tokens or 0),
            }
        return cls.json(data, delay=delay)

    @classmethod
    def http_error(cls, status: int, message: str = "scripted error", *, delay: float = 0.0) -> "Reply":
        return cls.json({"error": {"message": message, "type": "test_error", "code": status}}, status=status, delay=delay)

    @classmethod
    def malformed(cls) -> "Reply":
        """A 200 whose body is not JSON."""
        return cls(body=b'{"choices": [ this is not json', content_type="application/json")

    @classmethod
    def no_choices(cls) -> "Reply":
        return cls.json({"id": "chatcmpl-test", "object": "chat.completion", "model": "test-model", "choices": []})


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ChatServer:
    """The server; ``script`` replies are used in order, then ``default``."""

    script: Iterable[Reply] = ()
    default: Reply = field(default_factory=lambda: Reply.http_error(500, "no scripted reply left"))

    def __post_init__(self) -> None:
        self._script: deque[Reply] = deque(self.script)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.requests: list[ReceivedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ---------------------------------------------------------------------------------
    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``); ``{base_url}/chat/completions`` is served."""
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ChatServer":
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="chat-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # wake any delayed reply
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- serving ---------------------------------------------------------------------------------
    def _next(self, request: ReceivedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            return self._script.popleft() if self._script else self.default


def _make_handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            received = ReceivedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if self.path not in PATHS:
                self._send(Reply.http_error(404, f"no route {self.path}"))
                return
            reply = server._next(received)
            if reply.delay and server._closing.wait(reply.delay):
                return  # server stopping: drop the connection
            self._send(reply)

        def _send(self, reply: Reply) -> None:
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
            pass

    return Handler


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A started :class:`ChatServer` with an empty script; ``push`` replies in the test."""
    with ChatServer() as server:
        yield server
