"""Fixtures for the framework adapters: a service per test on each backend, the provider simulator
on a real loopback socket, steerable summarizers and the scenario numbers every framework shares.

The frameworks drive real agents against the simulator through their own OpenAI-compatible model
classes; nothing of a framework is mocked. Each test module skips with a clear reason when its
framework is not installed (``pip install 'compaction-inspector[<extra>]'``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.protocol import SummarizerError, SummaryRequest, SummaryResult
from engine.core.events import EventKind
from engine.service import Service, open_service

PROVIDER = "openai"  # the route LangChain, the Agents SDK and Pydantic AI report for an OpenAI-compatible model
MODEL = "sim-model"
SYSTEM = "You are a support agent. Use the knowledge base when it helps."
PROSE = "The team reviewed the quarterly figures and agreed that the rollout can continue as planned. "

#: a long tool-using session: results above the prune limit, assistant prose that only a summary removes
LONG = {"context_window": 6000, "tool_result_limit_tokens": 250, "preview_tokens": 200}
ROUNDS = 12


def bulk(rows: int, tag: str = "row") -> str:
    """Filler text of roughly 7 tokens per row."""
    return " ".join(f"{tag}{i} value{i * 7} lorem ipsum" for i in range(rows))


def skip_without(module: str, extra: str) -> Any:
    """Import ``module`` or skip the test module, naming the extra that installs it."""
    return pytest.importorskip(module, reason=f"{module} is not installed: pip install 'compaction-inspector[{extra}]'")


class Summarizer:
    """The extractive summarizer, counting calls; ``fail`` makes every call a SummarizerError."""

    name = "test-extractive"

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.calls = 0
        self.fail = False

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        if self.fail:
            raise SummarizerError("scripted summarizer failure", "http_error", status=503)
        return self.inner.summarize(request)


@pytest.fixture
def summarizer() -> Summarizer:
    return Summarizer()


@pytest.fixture
def key() -> str:
    return f"adapter-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_service(db_url: str, tmp_path: Path, summarizer: Summarizer) -> Iterator[Callable[..., Service]]:
    """Factory: a service on the backend's shared database whose policy for (openai, sim-model) is
    ``policy`` (context window and limits)."""
    opened: list[Service] = []

    def make(**policy: Any) -> Service:
        svc = open_service(
            db_url,
            workdir=tmp_path / f"wd{len(opened)}",
            summarizer=summarizer,
            policies={"models": [{"provider": PROVIDER, "model": MODEL, **policy}]},
        )
        opened.append(svc)
        return svc

    yield make
    for svc in opened:
        svc.close()


@pytest.fixture
def sim() -> Iterator[ProviderSimulator]:
    with ProviderSimulator(context_window=100_000, model=MODEL) as s:
        yield s


def kinds(svc: Service, key: str) -> list[str]:
    return [str(e.kind) for e in svc.reads.events(key)]


def assert_pruned_and_summarized(svc: Service, key: str) -> None:
    """What the inspector shows of a long session: listed under its key, offloads with their
    originals readable, a boundary and a summary, prune and summary events, no busy run left."""
    listed = {t.key: t for t in svc.reads.list_threads()}
    assert key in listed
    info = svc.reads.thread(key)
    assert info.busy_reason is None, info.busy_reason
    state = svc.reads.compaction_state(key)
    assert state.boundary is not None and state.summary, state
    assert state.generation >= 2 and state.compact_count >= 1
    offloads = svc.reads.offloads(key)
    assert offloads, "no tool result was pruned"
    for message_id, off in offloads.items():
        original = next(s for s in svc.reads.messages_page(key) if s.id == message_id)
        assert svc.reads.read_original(off) == original.message.content  # the full text is in the Workdir
        assert len(off.preview) < len(original.message.content)
    got = kinds(svc, key)
    assert EventKind.PRUNE in got and EventKind.SUMMARY in got, got
    assert got.index(EventKind.PRUNE) < got.index(EventKind.SUMMARY)  # prune first
    status = svc.compaction.status(key)
    assert status.boundary == state.boundary and status.tokens < status.threshold


def measured_in_call(svc: Service, thread: Any, call: Any, behind: list[bool]) -> Any:
    """Inside a model call: this step's transaction written (when it was written behind), and the
    store's measurement of the thread then; the call's tokens and request are the store's. Whether
    the call went behind is appended to ``behind``."""
    thread.driver.settle()
    m = svc.steps.measure(thread.key, provider="openai", model=MODEL)
    assert call.tokens == m.tokens and call.request_id is not None
    behind.append(call.projected is not None)
    return m


def stored_roles(svc: Service, key: str) -> list[str]:
    return [s.message.role for s in svc.reads.messages_page(key, limit=10_000)]


def assert_calls_answered(svc: Service, key: str) -> None:
    """Every stored call has exactly one stored result (no orphan either way)."""
    counts: dict[str, int] = {}
    for s in svc.reads.messages_page(key, limit=10_000):
        for c in s.message.tool_calls:
            counts.setdefault(c.id, 0)
        if s.message.role == "tool":
            counts[s.message.tool_call_id] = counts.get(s.message.tool_call_id, 0) + 1  # type: ignore[index]
    assert counts and set(counts.values()) == {1}, counts


SUMMARY_MARK = "Summary of the earlier conversation"
SYNTHETIC_MARK = "(Earlier messages were compacted"


def summary_copies(sim: ProviderSimulator) -> list[int]:
    """How many copies of the summary each request the simulator received carried."""
    return [sum(1 for m in r.body["messages"] if SUMMARY_MARK in str(m.get("content") or "")) for r in sim.requests]


def assert_one_summary_per_request(sim: ProviderSimulator) -> None:
    """No request before the first summary carries one; every request from it on carries exactly one."""
    counts = summary_copies(sim)
    assert 1 in counts, counts
    first = counts.index(1)
    assert counts == [0] * first + [1] * (len(counts) - first), counts


def assert_nothing_synthetic_stored(svc: Service, key: str, system: str) -> None:
    """The store holds only the agent's own messages: no synthetic request, no summary text, and the
    thread's system prompt is the agent's, not the summary."""
    for s in svc.reads.messages_page(key, limit=10_000):
        assert SYNTHETIC_MARK not in s.message.content and SUMMARY_MARK not in s.message.content, s.message
    assert svc.steps.measure(key).envelope.system_prompt == system


# -- several runs, the returned history passed back in (as users do) ------------------------------
RUNS = 3
PER_RUN = 4


def part(r: int) -> str:
    """The user's request opening run ``r``."""
    return f"Part {r}: cover four topics."


def multi_run_script() -> list[Reply]:
    """``RUNS`` runs of ``PER_RUN`` tool rounds (long enough to be compacted) and a final answer each."""
    out: list[Reply] = []
    for r in range(RUNS):
        out += [Reply(content=f"Run {r} step {i}. " + PROSE * 15, tool_calls=(("lookup", {"q": f"topic {r}.{i}"}),)) for i in range(PER_RUN)]
        out.append(Reply(content=f"Run {r} is done."))
    return out


def assert_runs_stored_once(svc: Service, sim: ProviderSimulator, key: str, *, system_first: bool = True) -> None:
    """After the runs: each message stored once, in order, nothing synthetic, the summary sent once
    per request from the first summary on, the system prompt once (first, unless the framework puts
    it after the history's system parts), every run completed and every request ok."""
    assert stored_roles(svc, key) == (["user"] + ["assistant", "tool"] * PER_RUN + ["assistant"]) * RUNS
    assert [s.message.content for s in svc.reads.messages_page(key, limit=10_000) if s.message.role == "user"] == [part(r) for r in range(RUNS)]
    assert_nothing_synthetic_stored(svc, key, SYSTEM)
    assert_one_summary_per_request(sim)
    for r in sim.requests:
        sent = r.body["messages"]
        assert [m["content"] for m in sent].count(SYSTEM) == 1 and (not system_first or sent[0] == {"role": "system", "content": SYSTEM}), sent[:3]
    assert_calls_answered(svc, key)
    assert EventKind.SUMMARY in kinds(svc, key)
    assert [r.status for r in svc.store.runs(key)] == ["completed"] * RUNS
    assert [r.outcome for r in svc.store.model_requests(key)] == ["ok"] * len(sim.requests)
