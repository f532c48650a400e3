"""End to end: an agent run against the simulator over a real loopback socket overflows, recovers by
pruning and summarizing, and finishes; the ``compaction replay`` command then shows the episode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.apps.cli import main as cli
from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.llm.errors import CONTEXT_WINDOW_EXCEEDED
from engine.service import open_service

from .conftest import MODEL, PROVIDER, SYSTEM, THREAD, WINDOW, SteeredSummarizer, bulk, harness, kb_tool, openai_overflow_text, run, seed_turns

ROOT = Path(__file__).resolve().parents[2]


def _replay_json(db: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert cli(["replay", "--db", str(db), "--thread", THREAD, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_overflowing_run_recovers_and_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "agent.db"
    policies = {"models": [{"provider": PROVIDER, "model": MODEL, "context_window": WINDOW}]}
    svc = open_service(str(db), workdir=tmp_path / "wd", create=True, summarizer=SteeredSummarizer(), policies=policies)
    try:
        svc.runs.create_thread(THREAD, provider=PROVIDER, model=MODEL, system_prompt=SYSTEM)
        seed_turns(svc, 8)  # earlier turns to summarize
        with ProviderSimulator(context_window=1800, model=MODEL) as sim:  # smaller than the engine believes
            sim.script([Reply(tool_calls=(("query_kb", {"query": "rollout status"}),)), Reply(content="The rollout is on track.")])

            async def scenario():
                async with harness(svc, sim, [kb_tool(bulk(400))], stream=True) as h:
                    return await h.run(THREAD, "Check the knowledge base for the rollout status.")

            result = run(scenario)
            requests = sim.requests
    finally:
        svc.close()

    assert (result.status, result.final.content, result.overflow_retries) == ("completed", "The rollout is on track.", 1)
    assert [(r.outcome, r.stream) for r in requests] == [("ok", True), ("overflow", True), ("ok", True)]
    refused = requests[1].prompt_tokens
    assert requests[2].prompt_tokens < 1800 < refused

    data = _replay_json(db, capsys)
    (episode,) = data["episodes"]
    assert (episode["run"], episode["outcome"]) == (result.run_id, "recovered")
    steps = episode["steps"]
    assert [s["kind"] for s in steps] == ["provider_error", "prune", "summary", "retry", "recovered"]
    assert {s["attempt"] for s in steps} == {1}
    err, prune, summary, retry, _ = steps
    assert (err["error_code"], err["error_message"]) == (CONTEXT_WINDOW_EXCEEDED, openai_overflow_text(refused, 1800))
    assert err["tokens_before"] == refused
    assert (prune["generation_before"], prune["generation_after"]) == (0, 1) and prune["tokens_after"] < prune["tokens_before"]
    assert (summary["generation_before"], summary["generation_after"]) == (1, 2) and summary["tokens_after"] < summary["tokens_before"]
    assert (retry["tokens_before"], retry["tokens_after"]) == (refused, requests[2].prompt_tokens)
    assert (retry["generation_before"], retry["generation_after"], retry["no_progress"]) == (0, 2, False)
    assert retry["surface_messages"] < err["surface_messages"]


def test_a_run_that_cannot_recover_replays_as_gave_up_with_the_original_error(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    svc = open_service(str(db), workdir=tmp_path / "wd", create=True, summarizer=SteeredSummarizer(), policies={"context_window": WINDOW})
    try:
        svc.runs.create_thread(THREAD, provider=PROVIDER, model=MODEL, system_prompt=SYSTEM)
        with ProviderSimulator(context_window=500, model=MODEL, error_style="vllm") as sim:

            async def scenario():
                async with harness(svc, sim) as h:
                    return await h.run(THREAD, "Summarize this document: " + bulk(150)), h.provider

            result, provider = run(scenario)
    finally:
        svc.close()
    assert result.status == "failed" and result.error is provider.errors[0]
    original = provider.errors[0].message
    assert original.startswith("This model's maximum context length is 500 tokens")

    # the installed command, in its own process, reading the same SQLite file
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("compaction")), "replay", "--db", str(db), "--thread", THREAD, "--json"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (episode,) = json.loads(proc.stdout)["episodes"]
    assert episode["outcome"] == "gave_up"
    assert [s["kind"] for s in episode["steps"]] == ["provider_error", "gave_up"]
    gave_up = episode["steps"][-1]
    assert (gave_up["error_code"], gave_up["error_message"], gave_up["no_progress"]) == (CONTEXT_WINDOW_EXCEEDED, original, True)
