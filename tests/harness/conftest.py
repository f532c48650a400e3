"""Fixtures for the agent harness tests: a service on a fresh SQLite file, the provider simulator on a
real loopback socket, a summarizer the tests can steer, and a provider that remembers what it raised.

pytest-asyncio is not installed: every test drives its scenario with :func:`run` (``asyncio.run``
under a timeout), and the whole scenario (provider client included) lives inside that one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.apps.harness.loop import AgentHarness, Tool, ToolRegistry
from engine.apps.harness.simulator import ProviderSimulator, overflow_body
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.protocol import SummarizerError, SummaryRequest, SummaryResult
from engine.core.messages import Message, ToolCall
from engine.llm import ChatClient, Completion
from engine.llm.errors import ProviderError
from engine.service import Service, open_service

PROVIDER = "sim"
MODEL = "sim-8k"
WINDOW = 8000  # what the engine believes (policy); the simulator's own window is a separate knob
THREAD = "t"
SYSTEM = "You are a test agent. Use the tools when they help."


def bulk(rows: int, tag: str = "row") -> str:
    """Filler text of roughly 7 tokens per row."""
    return " ".join(f"{tag}{i} value{i * 7} lorem ipsum" for i in range(rows))


def openai_overflow_text(tokens: int, window: int) -> str:
    """The exact message the simulator sends (openai style) for a request of ``tokens`` over ``window``."""
    return overflow_body("openai", tokens=tokens, window=window, max_tokens=None)[1]["error"]["message"]


def run(factory: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 10.0) -> Any:
    """Run one async scenario to its end, bounded."""

    async def bounded() -> Any:
        return await asyncio.wait_for(factory(), timeout)

    return asyncio.run(bounded())


class SteeredSummarizer:
    """The extractive summarizer with test hooks: fail the first ``fail_first`` calls with a
    SummarizerError, ``crash`` with any exception, and call ``on_call`` (from the worker thread)."""

    name = "steered-extractive"

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.calls = 0
        self.fail_first = 0
        self.crash: BaseException | None = None
        self.on_call: Callable[[SummaryRequest], None] | None = None

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(request)
        if self.crash is not None:
            raise self.crash
        if self.calls <= self.fail_first:
            raise SummarizerError("scripted summarizer failure", "http_error", status=503)
        return self.inner.summarize(request)


class RecordingProvider(ChatClient):
    """A real ChatClient that keeps every error it raised (the very objects) and every completion."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.errors: list[ProviderError] = []
        self.completions: list[Completion] = []

    async def complete(self, body: Any, *, model: str, stream: bool = False) -> Completion:
        try:
            done = await super().complete(body, model=model, stream=stream)
        except ProviderError as err:
            self.errors.append(err)
            raise
        self.completions.append(done)
        return done


@pytest.fixture
def summarizer() -> SteeredSummarizer:
    return SteeredSummarizer()


@pytest.fixture
def make_service(tmp_path: Path, summarizer: SteeredSummarizer) -> Iterator[Callable[..., Service]]:
    """Factory: a service on a fresh SQLite file with thread ``t``; keyword args override the sim-8k policy."""
    opened: list[Service] = []

    def make(**policy: Any) -> Service:
        n = len(opened)
        svc = open_service(
            str(tmp_path / f"h{n}.db"),
            workdir=tmp_path / f"wd{n}",
            create=True,
            summarizer=summarizer,
            policies={"models": [{"provider": PROVIDER, "model": MODEL, "context_window": WINDOW, **policy}]},
        )
        opened.append(svc)
        svc.runs.create_thread(THREAD, provider=PROVIDER, model=MODEL, system_prompt=SYSTEM)
        return svc

    yield make
    for svc in opened:
        svc.close()


@pytest.fixture
def svc(make_service: Callable[..., Service]) -> Service:
    return make_service()


@pytest.fixture
def sim() -> Iterator[ProviderSimulator]:
    with ProviderSimulator(context_window=WINDOW, model=MODEL) as s:
        yield s


class ServiceOnly:
    """``svc`` as the harness may see it: every use case of :class:`Service`, but not its store or
    its compactor (reaching into them fails the test that did it)."""

    def __init__(self, svc: Service) -> None:
        self._svc = svc
        #: what was reached for (checked when the harness context ends: the harness's own error
        #: handling may swallow the AssertionError raised at the access)
        self.reached: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name in ("store", "compactor"):
            self.reached.append(name)
            raise AssertionError(f"the harness reached into Service.{name}; give Service a use case instead")
        return getattr(self._svc, name)


@contextlib.asynccontextmanager
async def harness(svc: Service, sim: ProviderSimulator, tools: list[Tool] | None = None, **kwargs: Any) -> AsyncIterator[AgentHarness]:
    """An AgentHarness on ``svc`` (seen through :class:`ServiceOnly`) talking to ``sim`` through a
    :class:`RecordingProvider` (``h.provider``)."""
    only = ServiceOnly(svc)
    async with RecordingProvider(sim.base_url, provider=PROVIDER, timeout=10) as provider:
        yield AgentHarness(only, provider, model=MODEL, provider_name=PROVIDER, tools=ToolRegistry(tools or []), **kwargs)  # type: ignore[arg-type]
    assert not only.reached, f"the harness reached into Service.{only.reached[0]}"


def kb_tool(text: str = "kb says 42") -> Tool:
    return Tool("query_kb", lambda args: text, description="search the knowledge base")


def stored(svc: Service) -> list[Message]:
    return svc.store.messages_after(THREAD, None)


def events(svc: Service, *kinds: str, run_id: int | None = None) -> list[Any]:
    return [e for e in svc.reads.events(THREAD) if (not kinds or e.kind in kinds) and (run_id is None or e.run_id == run_id)]


def run_info(svc: Service, run_id: int) -> Any:
    return next(r for r in svc.store.runs(THREAD) if r.id == run_id)


PROSE = "The team reviewed the quarterly figures and agreed that the rollout can continue as planned. "


def seed_turns(svc: Service, turns: int, *, answer_repeats: int = 10) -> None:
    """Finished history to summarize: ``turns`` questions answered in prose (the extractive summary
    keeps only the 3 latest answers, so 6 or more turns shrink)."""
    for i in range(turns):
        svc.runs.append_message(THREAD, Message("user", f"Question {i}: what do we know about the rollout?"))
        svc.runs.append_message(THREAD, Message("assistant", f"Answer {i}: " + PROSE * answer_repeats))


def seed_tool_round(svc: Service, text: str, *, call_id: str = "seed_call", question: str = "Look it up.") -> None:
    """A finished turn whose tool result is ``text``."""
    svc.runs.append_message(THREAD, Message("user", question))
    svc.runs.append_message(THREAD, Message("assistant", "", tool_calls=(ToolCall(call_id, "query_kb", '{"query": "seed"}'),)))
    svc.runs.append_message(THREAD, Message("tool", text, tool_call_id=call_id, name="query_kb"))
    svc.runs.append_message(THREAD, Message("assistant", "Found it."))


def results_per_call(messages: list[Message]) -> dict[str, int]:
    """How many tool results answer each call id of every assistant message."""
    counts = {c.id: 0 for m in messages if m.role == "assistant" for c in m.tool_calls}
    for m in messages:
        if m.role == "tool":
            counts[m.tool_call_id] = counts.get(m.tool_call_id, 0) + 1  # type: ignore[index]
    return counts
