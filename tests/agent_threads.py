"""Threads written by an agent process whose policy the reading process does not have (a user
trial: adapters given ``policies=`` with a 16,000-token window, read by an inspector that assumes
its configured 128,000 for the unknown model ``sim-model``)."""

from __future__ import annotations

from pathlib import Path

from engine.adapters.core import EngineThread
from engine.core.messages import assistant, user
from engine.service import open_service
from tests.engine.conftest import filler

PROVIDER, MODEL = "openai", "sim-model"
#: the agent's policy: a window no catalogue gives ``sim-model``; its threshold is 12,800
AGENT_WINDOW = 16_000
AGENT_THRESHOLD = 12_800
AGENT_POLICY = {"models": [{"provider": PROVIDER, "model": MODEL, "context_window": AGENT_WINDOW}]}


def write_agent_threads(url: str, workdir: Path, rounds: dict[str, int]) -> None:
    """One thread per key of ``rounds``, written as an adapter does (a model step per round, each
    request recording the agent's threshold), then measured by the agent's process (its status: the
    figures the thread list shows, as after the compaction or step of a real agent's process).
    About 950 tokens a round: 12 rounds end at ~89 % of the agent's threshold, below it."""
    svc = open_service(url, workdir=workdir, create=True, policies=AGENT_POLICY)
    try:
        for key, n in rounds.items():
            t = EngineThread(svc, key, "agent", provider=PROVIDER, model=MODEL)
            t.configure("You are a careful support agent.", [])
            t.ensure_run()
            for i in range(n):
                t.stage([user(f"Question {i}: what does section {i} say?")])
                call = t.begin_call()
                t.succeeded(call, prompt_tokens=call.tokens, completion_tokens=5, messages=[assistant(filler(1_000, f"Answer {i}."))])
            t.end_run()
            status = svc.compaction.status(key)
            assert status.window_source == "override" and status.threshold == AGENT_THRESHOLD and status.tokens < AGENT_THRESHOLD
    finally:
        svc.close()
