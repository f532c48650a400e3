"""Pydantic AI's ``EngineCompaction`` does per call only the work of what is new (issue 24): a run
hands the whole history to every request, and the capability serializes only the messages it has
not taken in, and rebuilds only the surface messages it has not built (the rest are the same
stored messages, built once). What the model is sent and what is stored are unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

from .conftest import MODEL, PROSE, SYSTEM, bulk, skip_without, stored_roles

skip_without("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

import engine.adapters.pydantic_ai as pai  # noqa: E402
from engine.adapters.core import surface_items  # noqa: E402
from engine.apps.harness.simulator import ProviderSimulator, Reply  # noqa: E402

ROUNDS = 16


def agent_for(sim: ProviderSimulator, compaction: pai.EngineCompaction) -> Agent:
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=sim.base_url, api_key="sim-key"))
    agent = Agent(model, instructions=SYSTEM, capabilities=[compaction], retries=0)

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up in the knowledge base."""
        return f"{q}: " + bulk(60)

    return agent


def test_each_call_serializes_only_new_messages_and_builds_only_new_surface_messages(make_service, sim, key, monkeypatch: Any) -> None:
    svc = make_service(context_window=200_000)  # nothing compacts: every call is the steady step
    sim.script([Reply(content=f"Step {i}. " + PROSE, tool_calls=(("lookup", {"q": f"topic {i}"}),)) for i in range(ROUNDS)] + [Reply("done")])
    dumped: list[int] = []
    loaded: list[int] = []
    real_dump, real_load = pai._dump, pai._load
    monkeypatch.setattr(pai, "_dump", lambda m: dumped.append(1) or real_dump(m))
    monkeypatch.setattr(pai, "_load", lambda d: loaded.append(1) or real_load(d))
    compaction = pai.EngineCompaction(service=svc, thread=key)
    sent: list[list[Any]] = []
    surface_of = compaction._surface

    def recording(call: Any, messages: list[Any]) -> Any:  # every call's surface, written behind or not
        surface = surface_of(call, messages)
        fresh = pai.from_engine([(i.message, i.pruned) for i in surface_items(call)])  # no cache: built anew
        assert [pai._dump(m) | {"metadata": None} for m in surface[-len(fresh):]] == [pai._dump(m) | {"metadata": None} for m in fresh]
        sent.append(surface)
        return surface

    compaction._surface = recording  # type: ignore[method-assign]
    result = asyncio.run(agent_for(sim, compaction).run("Cover every topic."))
    assert result.output == "done" and len(sim.requests) == ROUNDS + 1 == len(sent)
    history = result.all_messages()
    assert stored_roles(svc, key) == [m.role for m in pai.to_engine(history)]  # everything stored, once
    # the history's messages are serialized about once each (the check above serializes the
    # surface twice per call), not once per call they appear in (~ROUNDS² / 2 = 128 + ...)
    checks = 2 * sum(len(s) for s in sent)
    assert len(dumped) - checks <= 3 * len(history), (len(dumped), checks, len(history))
    # surface messages built: about one per stored message, plus the check's own builds
    fresh_builds = sum(len(s) for s in sent)
    assert len(loaded) - fresh_builds <= 2 * len(history), (len(loaded), fresh_builds, len(history))
