"""Session files in the exact shapes their tools write, made up here (never copied sessions).

- :func:`write_claude_code_session`: a Claude Code session JSONL with ``compactions`` automatic
  compactions (``system``/``compact_boundary`` with ``compactMetadata {trigger: "auto", preTokens}``,
  then the ``isCompactSummary`` user entry), tool rounds with large results, and
  ``message.usage`` on every assistant entry (input + cache read + cache creation = the prompt the
  provider was sent: it restarts small after each compaction, as Claude Code's does);
- :func:`write_swe_agent_trajectory`: a classic SWE-agent ``.traj`` (``environment``,
  ``trajectory``, ``history``, ``info.model_stats``) that names no model (no ``replay_config``, as
  trajectories of SWE-agent 0.x have none).

Used by tests/engine/test_imported_view.py and tests/gui/test_journey_imported.py; run as a script
it rewrites the small committed fixtures under tests/fixtures/sessions/.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

CC_SESSION = "4d8e2b61-9c3a-4f70-8e15-2a6c9b0d7e34"
CC_MODEL = "claude-sonnet-4-5-20250929"
#: what Claude Code sends besides the transcript (its system prompt and tool schemas), in tokens
CC_OVERHEAD = 14_000
FIRST_REQUEST = "Port the billing exporter from the legacy XML format to the new CSV schema and keep the totals identical"


def _result_text(segment: int, round_: int, chars: int) -> str:
    lines = []
    n = 0
    while sum(len(x) + 1 for x in lines) < chars:
        lines.append(f"{n:5d}  invoice_{segment}_{round_}_{n} = ledger.row({n * 7 % 1000}, account='ACC-{(n * 31) % 9973:04d}', total={n * 13 % 10007}.{n % 100:02d})")
        n += 1
    return "\n".join(lines)


def write_claude_code_session(directory: Path, *, compactions: int = 4, rounds: int = 8, result_chars: int = 16_000,
                              tail_rounds: int = 2, after_last_request: bool = True, session: str = CC_SESSION) -> Path:
    """Write ``<directory>/<session>.jsonl``: ``compactions + 1`` segments of ``rounds`` tool rounds
    (the last one ``tail_rounds``), each tool result about ``result_chars`` characters, a compaction
    between segments. ``after_last_request=False`` ends the file with a compaction and a user
    message (the source compacted after its last recorded request)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{session}.jsonl"
    t0 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
    entries: list[dict[str, Any]] = []
    state = {"parent": None, "n": 0, "t": t0}

    def base(kind: str, uuid: str | None = None) -> dict[str, Any]:
        state["n"] += 1
        state["t"] += timedelta(seconds=7)
        uid = uuid or f"{state['n']:08x}-1111-4222-8333-{state['n']:012x}"
        entry = {"parentUuid": state["parent"], "isSidechain": False, "userType": "external", "cwd": "/home/dev/billing",
                 "sessionId": session, "version": "2.0.42", "gitBranch": "csv-export", "type": kind, "uuid": uid,
                 "timestamp": state["t"].strftime("%Y-%m-%dT%H:%M:%S.") + f"{state['n'] % 1000:03d}Z"}
        state["parent"] = uid
        return entry

    prompt = CC_OVERHEAD
    request = 0

    def assistant(content: list[dict[str, Any]], out: int) -> None:
        nonlocal request, prompt
        request += 1
        e = base("assistant")
        e["requestId"] = f"req_011C{request:06d}"
        read = max(0, prompt - 2000)
        e["message"] = {"id": f"msg_01{request:08d}", "type": "message", "role": "assistant", "model": CC_MODEL, "content": content,
                        "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn", "stop_sequence": None,
                        "usage": {"input_tokens": 4, "cache_creation_input_tokens": prompt - read - 4, "cache_read_input_tokens": read,
                                  "output_tokens": out, "service_tier": "standard"}}
        entries.append(e)
        prompt += out

    def user(content: Any, **extra: Any) -> None:
        nonlocal prompt
        e = base("user")
        e["message"] = {"role": "user", "content": content}
        e.update(extra)
        entries.append(e)
        size = len(content) if isinstance(content, str) else sum(len(str(b.get("content", b.get("text", "")))) for b in content)
        prompt += size // 4 + 8

    user(FIRST_REQUEST + " (see exporter/legacy_xml.py).")
    for segment in range(compactions + 1):
        last = segment == compactions
        for r in range(tail_rounds if last else rounds):
            call = f"toolu_01{segment:02d}{r:02d}Bash{segment * 100 + r:010d}"
            assistant([{"type": "text", "text": f"Checking batch {segment}.{r} of the ledger."},
                       {"type": "tool_use", "id": call, "name": "Bash",
                        "input": {"command": f"python -m exporter.dump --batch {segment}.{r}", "description": "Dump one batch"}}], 60)
            text = _result_text(segment, r, result_chars)
            user([{"tool_use_id": call, "type": "tool_result", "content": text, "is_error": False}],
                 toolUseResult={"stdout": text[:200], "stderr": "", "interrupted": False, "isImage": False})
        if last and after_last_request:
            assistant([{"type": "text", "text": "All batches match: the CSV totals equal the XML totals."}], 40)
            break
        # Claude Code compacts automatically: the boundary, then the summary as a user entry
        pre = prompt
        boundary = base("system")
        boundary.update({"parentUuid": None, "logicalParentUuid": entries[-1]["uuid"], "subtype": "compact_boundary",
                         "content": "Conversation compacted", "level": "info", "isMeta": False,
                         "compactMetadata": {"trigger": "auto", "preTokens": pre}})
        entries.append(boundary)
        prompt = CC_OVERHEAD
        user("This session is being continued from a previous conversation that ran out of context. The conversation is "
             f"summarized below:\nAnalysis: batches up to {segment}.{rounds - 1} were dumped and compared; the totals match so far. "
             "Next: continue with the following batches.", isCompactSummary=True, isVisibleInTranscriptOnly=True)
        if last:
            user("Also write the migration notes.")
            break
    with path.open("w", encoding="utf-8") as fh:
        for e in entries:
            fh.write(json.dumps(e) + "\n")
    return path


def write_swe_agent_trajectory(path: Path, *, steps: int = 12, observation_chars: int = 2300) -> Path:
    """A classic SWE-agent trajectory that names no model (no ``replay_config``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    problem = "Parsing a quoted CSV header drops the last column"
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "SETTING: You are an autonomous programmer, and you're working directly in the command line with a special interface.", "agent": "primary"},
        {"role": "user", "content": f"We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\n{problem}\n\nINSTRUCTIONS:\nNow, you're going to solve this issue on your own.\n\n(Open file: n/a)\n(Current directory: /csvkit__csvkit)\nbash-$", "agent": "primary"},
    ]
    trajectory = []
    for i in range(steps):
        action = f"search_file \"header\" csvkit/reader_{i}.py"
        thought = f"Let me look at reader module {i} for the header handling."
        observation = "\n".join(f"Line {n}: header_{i}_{n} = row[{n}].strip('\"')  # column {n}" for n in range(observation_chars // 48))
        history.append({"role": "assistant", "content": f"{thought}\n```\n{action}\n```", "thought": thought, "action": action, "agent": "primary"})
        history.append({"role": "user", "content": f"{observation}\n(Open file: csvkit/reader_{i}.py)\n(Current directory: /csvkit__csvkit)\nbash-$", "agent": "primary"})
        trajectory.append({"action": action, "observation": observation, "response": f"{thought}\n```\n{action}\n```", "thought": thought,
                           "state": "{\"open_file\": \"n/a\", \"working_dir\": \"/csvkit__csvkit\"}"})
    data = {"environment": "swe_main", "trajectory": trajectory, "history": history,
            "info": {"exit_status": "submitted", "submission": "diff --git a/csvkit/reader.py b/csvkit/reader.py\n",
                     "model_stats": {"total_cost": 0.0, "instance_cost": 0.19, "tokens_sent": 61840, "tokens_received": 1320, "api_calls": steps}}}
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


if __name__ == "__main__":  # the small committed fixtures
    root = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"
    write_claude_code_session(root / "claude-code" / "auto-compactions", rounds=3, result_chars=1200, tail_rounds=1)
    write_swe_agent_trajectory(root / "swe-agent" / "no-model" / "csvkit__csvkit-7.traj", steps=3, observation_chars=600)
