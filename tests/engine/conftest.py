"""Fixtures for the compaction engine tests: a real service on a real database, controllable
summarizers, thread builders and a before/after fingerprint of everything a thread owns.

Sizes are chosen for the small policy below (window 8000 → threshold 6400, hint line 5440,
target 5439, retained tail 1280, tool results over 2000 tokens are pruned to a 600-token preview).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.protocol import Summarizer, SummarizerError, SummaryRequest, SummaryResult
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.surface import build_surface, history_part
from engine.core.units import is_balanced
from engine.service import Service, open_service

WINDOW = 8000
#: the small policy most tests use; summaries are kept small so one summary can be enough
POLICY: dict[str, Any] = {"context_window": WINDOW, "default": {"summary_max_tokens": 400}}
PROVIDER, MODEL = "sim", "m"
CURRENT_REQUEST = "Current request: find doc-42 in the knowledge base and report its owner."

_FILLER = (
    "The quarterly report lists revenue by region, churn by cohort, support load by product line, "
    "and a long appendix of footnotes about methodology, sampling and data quality. "
)


def filler(tokens: int, tag: str = "") -> str:
    """About ``tokens`` tokens of prose (the sentence above counts ~35), prefixed with ``tag``."""
    return (tag + " " if tag else "") + _FILLER * max(1, tokens // 35)


# -- summarizers ---------------------------------------------------------------------------------


@dataclass
class Counting:
    """Wraps a summarizer and records every request it was given."""

    inner: Summarizer = field(default_factory=ExtractiveSummarizer)
    requests: list[SummaryRequest] = field(default_factory=list)
    name: str = "counting"

    @property
    def calls(self) -> int:
        return len(self.requests)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return self.inner.summarize(request)


class Failing(Counting):
    """Every call raises :class:`SummarizerError` (like an endpoint that is down)."""

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        raise SummarizerError("endpoint returned 503", "http_error", status=503)


class Empty(Counting):
    """Returns an empty (whitespace) summary."""

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text="  \n", model="empty", prompt_tokens=1, completion_tokens=0, calls=1, extractive=False)


class Growing(Counting):
    """Returns more than it was given: every message twice, plus the current request."""

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        body = "\n".join(m.content for m in request.messages) * 2
        text = f"{request.current_request or ''}\n{request.previous_summary or ''}\n{body}"
        return SummaryResult(text=text, model="growing", prompt_tokens=1, completion_tokens=1, calls=1, extractive=False)


class Hooked(Counting):
    """Runs ``before(call_index)`` inside each call, then the inner summarizer."""

    def __init__(self, before: Callable[[int], None]) -> None:
        super().__init__()
        self.before = before

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.before(len(self.requests))
        return super().summarize(request)


class Blocking(Counting):
    """Signals ``entered`` and waits (bounded) for ``release`` before summarizing."""

    def __init__(self, timeout: float = 20.0) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.timeout = timeout

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.entered.set()
        if not self.release.wait(self.timeout):
            raise SummarizerError("test never released the blocking summarizer", "timeout")
        return super().summarize(request)


# -- services and threads ------------------------------------------------------------------------


@pytest.fixture
def new_key() -> Callable[[str], str]:
    """Thread keys unique to this test (session databases are shared)."""
    return lambda prefix="t": f"{prefix}-{uuid.uuid4().hex[:12]}"


ServiceFactory = Callable[..., Service]


def _factory(url: str, workdir: Path) -> Iterator[ServiceFactory]:
    opened: list[Service] = []

    def make(summarizer: Summarizer | None = None, policies: Mapping[str, Any] | None = None) -> Service:
        svc = open_service(url, workdir=workdir, summarizer=summarizer or Counting(), policies=dict(policies or POLICY), create=True)
        opened.append(svc)
        return svc

    yield make
    for svc in opened:
        svc.close()


@pytest.fixture
def make_service(sqlite_url: str, tmp_path: Path) -> Iterator[ServiceFactory]:
    """Factory: a service on the session SQLite file (a real file) with a per-test Workdir."""
    yield from _factory(sqlite_url, tmp_path / "workdir")


@pytest.fixture
def make_pg_service(pg_url: str, tmp_path: Path) -> Iterator[ServiceFactory]:
    """Factory: a service on the session PostgreSQL database (real server) with a per-test Workdir."""
    yield from _factory(pg_url, tmp_path / "workdir")


def route(svc: Service, key: str) -> int:
    """Record a completed, routed model request: the thread becomes eligible for pressure compaction."""
    rid = svc.steps.record_model_request(key, provider=PROVIDER, model=MODEL, estimated_tokens=1000)
    svc.steps.complete_model_request(key, rid, outcome="ok", reported_prompt_tokens=1000, reported_completion_tokens=10)
    return rid


def add(svc: Service, key: str, *messages: Message) -> list[int]:
    return [svc.runs.append_message(key, m) for m in messages]


def finished_turns(svc: Service, key: str, n: int, *, answer_tokens: int = 280) -> list[int]:
    """``n`` finished turns: a short question (~12 tokens) and a long answer each (~290 tokens a turn)."""
    ids: list[int] = []
    for i in range(n):
        ids += add(svc, key, user(f"Question {i}: what does section {i} say?"), assistant(filler(answer_tokens, f"Answer {i}.")))
    return ids


def running_turn(svc: Service, key: str, *, rounds: int = 1, result_tokens: int = 100, tool: str = "query_kb") -> list[int]:
    """The current request and ``rounds`` completed tool rounds after it."""
    ids = add(svc, key, user(CURRENT_REQUEST))
    for r in range(rounds):
        call = ToolCall(f"call-{r}", tool, '{"query": "doc-42 owner"}')
        ids += add(svc, key, assistant(f"Looking it up (step {r}).", call), tool_result(call.id, filler(result_tokens, f"result {r}"), name=tool))
    return ids


def new_thread(svc: Service, key: str, *, system_prompt: str = "You are a careful support agent.") -> str:
    svc.runs.create_thread(key, title=f"thread {key}", system_prompt=system_prompt)
    return key


def all_messages(svc: Service, key: str) -> list[Message]:
    return [s.message for s in svc.reads.messages_page(key, limit=100_000)]


def thread_state(svc: Service, key: str) -> dict[str, Any]:
    """Everything compaction or intake could change for a thread, read through the service."""
    return {
        "messages": [(m.id, m.role, m.content, m.tool_call_id, tuple(m.tool_calls)) for m in all_messages(svc, key)],
        "message_count": svc.reads.message_count(key),
        "state": svc.reads.compaction_state(key),
        "history": svc.reads.history(key),
        "events": svc.reads.events(key),
        "offloads": svc.reads.offloads(key),
        "runs": svc.store.runs(key),
        "queued": svc.store.queued_requests(key),
    }


def assert_surface_valid(svc: Service, key: str) -> None:
    """The surface still builds and every tool call on it has its result (and vice versa)."""
    surface = build_surface(svc.store.snapshot(key))
    assert is_balanced(history_part(surface)), "a tool call and its result were separated"
    assert surface.messages, "the surface is empty"


# -- shared by the step driver's tests ------------------------------------------------------------


def keyed(m: Message, key: str) -> Message:
    """``m`` with ``source_key`` ``key`` (as a framework's message is keyed)."""
    return Message(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name, source_key=key)


@contextlib.contextmanager
def counted(svc: Service, event: str, *, this_thread: bool = False) -> Iterator[list[int]]:
    """Counts the ``event`` callbacks (``"begin"``: transactions; ``"before_cursor_execute"``: SQL
    statements) on the store's engine inside the block (``[n]``), only this thread's if asked."""
    seen = [0]
    me = threading.get_ident()

    def hit(*_: Any) -> None:
        if not this_thread or threading.get_ident() == me:
            seen[0] += 1

    sa.event.listen(svc.store.engine, event, hit)
    try:
        yield seen
    finally:
        sa.event.remove(svc.store.engine, event, hit)
