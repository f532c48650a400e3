"""A home directory laid out as each supported tool lays it out, from the repository's fixtures
(engine.discovery's tests, the sessions panel's test and its screenshot)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests/fixtures/sessions"
CLAUDE_ID = "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"
CLAUDE_AUTO_ID = "4d8e2b61-9c3a-4f70-8e15-2a6c9b0d7e34"
CODEX_FILE = "rollout-2026-11-30T10-00-00-019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d.jsonl"


def make_fake_home(home: Path) -> dict[str, Path]:
    """Lay the sessions out under ``home`` as Claude Code, Codex, the OpenHands CLI and SWE-agent
    do, plus files that are not sessions; returns the session paths by name. Modification times
    are spread (oldest first: swe-agent, openhands, codex, claude-auto, claude) so the order is known."""
    projects = home / ".claude/projects"
    acme = projects / "-home-me-acme"
    acme.mkdir(parents=True)
    src = FIXTURES / "claude-code/project"
    shutil.copy(src / f"{CLAUDE_ID}.jsonl", acme)
    shutil.copytree(src / CLAUDE_ID, acme / CLAUDE_ID)  # <session>/subagents/agent-*.jsonl: read with it
    for f in src.glob("agent-*.jsonl"):  # older Claude Code: sub-agents beside the session
        shutil.copy(f, acme)
    notes = projects / "-home-me-notes"
    notes.mkdir()
    shutil.copy(FIXTURES / f"claude-code/auto-compactions/{CLAUDE_AUTO_ID}.jsonl", notes)
    (home / ".claude/settings.json").write_text('{"theme": "dark"}\n')  # not a session
    day = home / ".codex/sessions/2026/11/30"
    day.mkdir(parents=True)
    shutil.copy(FIXTURES / f"codex/2026/11/30/{CODEX_FILE}", day)
    (home / ".codex/config.toml").write_text('model = "gpt-5"\n')  # not a session
    conv = home / ".openhands/conversations/5e2f9a0c4b7d"
    shutil.copytree(FIXTURES / "openhands/v1/5e2f9a0c4b7d", conv)
    traj = home / "trajectories/me/default__run/calc__calc-1"
    traj.mkdir(parents=True)
    shutil.copy(FIXTURES / "swe-agent/classic/calc__calc-1.traj", traj)
    paths = {
        "claude": acme / f"{CLAUDE_ID}.jsonl",
        "claude-auto": notes / f"{CLAUDE_AUTO_ID}.jsonl",
        "codex": day / CODEX_FILE,
        "openhands": conv,
        "swe-agent": traj / "calc__calc-1.traj",
    }
    base = 1_780_000_000  # 2026-05-28
    for i, name in enumerate(["swe-agent", "openhands", "codex", "claude-auto", "claude"]):
        p = paths[name]
        for f in [p, *p.rglob("*")] if p.is_dir() else [p]:
            os.utime(f, (base + i * 3600, base + i * 3600))
    return paths
