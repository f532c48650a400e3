"""The inspector (offscreen) shows a thread written by each framework's agent: listed, its timeline
loaded with the boundary row, the pressure gauge from the recorded requests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("PySide6", reason="PySide6 is not installed (the inspector's GUI)")

from engine.apps.harness.simulator import ProviderSimulator  # noqa: E402
from engine.compaction.summarizers.extractive import ExtractiveSummarizer  # noqa: E402
from engine.service import Service, open_service  # noqa: E402
from tests.gui.conftest import no_leaks, qloop, run, settings, window_factory  # noqa: E402,F401 - fixtures

from .conftest import LONG, MODEL, PROVIDER, ROUNDS  # noqa: E402

pytestmark = pytest.mark.gui
POLICIES = {"models": [{"provider": PROVIDER, "model": MODEL, **LONG}]}
WAIT_MS = 15_000


def _langchain(svc: Service, sim: ProviderSimulator, key: str) -> None:
    from langchain_core.messages import HumanMessage

    from engine.adapters.langchain import CompactionMiddleware

    from .test_langchain import agent_for, long_script

    sim.script(long_script())
    agent_for(sim, CompactionMiddleware(service=svc, thread=key)).invoke({"messages": [HumanMessage("Cover every topic.")]}, {"recursion_limit": 200})


def _openai_agents(svc: Service, sim: ProviderSimulator, key: str) -> None:
    from agents import Runner

    from engine.adapters.openai_agents import EngineSession

    from .test_openai_agents import long_script, make_agent, run as run_async

    sim.script(long_script())
    session = EngineSession(key, service=svc)
    run_async(Runner.run(make_agent(sim, session), "Cover every topic.", session=session, max_turns=50))


def _pydantic_ai(svc: Service, sim: ProviderSimulator, key: str) -> None:
    from engine.adapters.pydantic_ai import EngineCompaction

    from .test_pydantic_ai import long_script, make_agent, run as run_async

    sim.script(long_script())
    run_async(make_agent(sim, EngineCompaction(service=svc, thread=key)).run("Cover every topic."))


WRITERS: dict[str, tuple[str, Callable[[Service, ProviderSimulator, str], None]]] = {
    "langchain": ("langchain.agents", _langchain),
    "openai_agents": ("agents", _openai_agents),
    "pydantic_ai": ("pydantic_ai", _pydantic_ai),
}


@pytest.mark.parametrize("framework", sorted(WRITERS))
def test_the_inspector_shows_the_thread_a_framework_wrote(framework: str, qtbot: Any, window_factory: Any, tmp_path: Path) -> None:
    module, write = WRITERS[framework]
    pytest.importorskip(module, reason=f"{module} is not installed: pip install 'compaction-inspector[{framework.replace('_', '-')}]'")
    db, workdir, key = str(tmp_path / "agents.db"), tmp_path / "wd", f"{framework}-support"

    def agent_run() -> None:  # on a plain thread: the frameworks' event loops must not meet qasync's
        svc = open_service(db, workdir=workdir, summarizer=ExtractiveSummarizer(), policies=POLICIES, create=True)
        try:
            with ProviderSimulator(context_window=100_000, model=MODEL) as sim:
                write(svc, sim, key)
        finally:
            svc.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(agent_run).result(timeout=120)

    def opener(_url: str) -> Service:  # the inspector's own connection, with the agents' Workdir
        return open_service(db, workdir=workdir, summarizer=ExtractiveSummarizer(), policies=POLICIES)

    w = window_factory(opener)
    assert run(qtbot, w, w.open_database(db, select=key), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle and w.gauge.status is not None, timeout=WAIT_MS)
    assert not w.banner.isVisible(), w.banner.text()
    assert w.thread_model.row_of(key) is not None
    svc = opener(db)
    try:
        info, state, status = svc.reads.thread(key), svc.reads.compaction_state(key), svc.compaction.status(key)
        ids = [s.id for s in svc.reads.messages_page(key, limit=1000)]
        points = svc.compaction.pressure_history(key)
    finally:
        svc.close()
    assert info.agent == framework and info.message_count == len(ids) == 2 + 2 * ROUNDS
    assert w.timeline_model.key == key and w.timeline_model.message_ids() == ids
    boundary = w.timeline_model.boundary_index()
    assert state.boundary is not None and boundary.isValid() and w.timeline_model.boundary.boundary == state.boundary
    assert (w.gauge.status.tokens, w.gauge.status.threshold) == (status.tokens, status.threshold)
    assert len(w.chart.points()) == len(points) == ROUNDS + 1
    assert f"generation {status.generation}" in w.thread_meta.text()
