"""Import benchmark (issue 11): a generated ~2 MB Claude Code session imports in under 5 s, and its
timeline opens as fast as a harness-written thread of the same message count.

Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/import_session.py [--mb 2]
[--pg-url URL] [--backends sqlite,postgresql] [--no-gui]`` (``run_all.py`` can call :func:`rows`).
Prints one JSON line per backend (``{"bench": "import_session", "backend": ...}``; a backend that
cannot run prints ``{"bench": "import_session", "backend": ..., "skipped": reason}``).

- **The session** (:func:`generate`, seeded): the exact shape of a Claude Code session JSONL
  (``~/.claude/projects/<project>/<session>.jsonl``): ``file-history-snapshot`` entries; user
  prompts; meta user entries (``isMeta`` caveats, ``<command-name>`` / ``<local-command-stdout>``,
  system reminders); assistant responses written one entry per content block (``thinking`` with
  its signature, ``text``, parallel ``tool_use`` blocks sharing one ``message.id`` and
  ``requestId``), each carrying the response's ``usage``; tool results as user entries with
  ``toolUseResult`` (``Read`` with line-numbered file text, ``Grep``, ``Bash`` test logs, ``Edit``;
  some ``is_error``); one ``compact_boundary`` system entry followed by the ``isCompactSummary``
  summary two thirds in. Text comes from standard-library source and docstrings
  (``benchmarks/traces.py``), so it weighs what real code and prose weigh.
- **Import** (``Service.imports.import_file``): parse + one transaction into a new database (SQLite file, a
  fresh PostgreSQL database), the median of ``--repeats`` fresh databases; then a re-import of the
  same file (idempotent: nothing written).
- **The other thread**: ``AgentHarness`` against the loopback ``ProviderSimulator`` (scripted:
  two parallel tool calls, then an answer, per turn; tool outputs from the same text pools), in the
  same database, until it has the imported thread's message count (within 4). Its policy window is
  out of reach, so the engine compacts neither thread (compacted units open collapsed and paint
  less).
- **Timeline** (``benchmarks/gui_timeline.py``'s measurement, each thread in a fresh process,
  offscreen): first paint (the database opened before in the process, and cold) and the End key
  once the side panels are in, for both threads, alternating, the median of ``--gui-repeats``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

TAG = "import_session"
HARNESS_KEY = "harness-written"
TARGET_IMPORT_S = 5.0
SESSION = "3e9d2c41-7b6a-4f58-9c0d-1a2b3c4d5e6f"
MODEL = "claude-opus-4-5-20251101"
CWD = "/home/dev/shop"
_PACKAGES = ("billing", "orders", "auth", "search", "reports", "notify")


# -- the session ---------------------------------------------------------------------------------------


class _Writer:
    """Claude Code's entry envelope, one JSON line per entry, chained by ``parentUuid``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.size = 0
        self.parent: str | None = None
        self.clock = 0

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def stamp(self) -> str:
        self.clock += self.rng.randint(1, 20)
        s = self.clock
        return f"2026-11-30T{9 + s // 3600 % 12:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{self.rng.randrange(1000):03d}Z"

    def raw(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, ensure_ascii=False)
        self.lines.append(line)
        self.size += len(line.encode()) + 1

    def entry(self, kind: str, message: dict[str, Any] | None = None, **extra: Any) -> str:
        uid = self.uid()
        e: dict[str, Any] = {
            "parentUuid": self.parent, "isSidechain": False, "userType": "external", "cwd": CWD, "sessionId": SESSION,
            "version": "2.0.31", "gitBranch": "fix-retries", "type": kind, "uuid": uid, "timestamp": self.stamp(),
        }  # fmt: skip
        if message is not None:
            e["message"] = message
        e.update(extra)
        self.raw(e)
        self.parent = uid
        return uid


def _pools() -> tuple[tuple[str, ...], tuple[str, ...]]:
    import traces

    return traces._english(), traces._code()


def generate(path: Path, megabytes: float = 2.0, *, seed: int = 11) -> dict[str, int]:
    """Write the session to ``path`` (about ``megabytes`` MB); returns counts of what it holds."""
    rng = random.Random(seed)
    english, code = _pools()
    w = _Writer(rng)
    counts = {"entries": 0, "turns": 0, "tool_uses": 0, "compactions": 0}
    calls = 0
    compacted = False

    def prose(chars: int) -> str:
        text = rng.choice(english)
        start = rng.randrange(max(1, len(text) - chars))
        return " ".join(text[start : start + chars].split())

    def file_path() -> str:
        return f"{CWD}/src/{rng.choice(_PACKAGES)}/module_{rng.randrange(60):03d}.py"

    def usage(turn: int, out: int) -> dict[str, Any]:
        return {"input_tokens": rng.randint(3, 40), "cache_creation_input_tokens": rng.randint(100, 3000),
                "cache_read_input_tokens": 12_000 + 900 * turn, "output_tokens": out, "service_tier": "standard"}  # fmt: skip

    def tool(name: str) -> tuple[dict[str, Any], Any, dict[str, Any], bool]:
        """(input, result content, toolUseResult, is_error) of one call."""
        if name == "Read":
            p = file_path()
            lines = "".join(rng.choice(code) for _ in range(rng.randint(2, 8))).splitlines()
            text = "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(lines))
            return {"file_path": p}, text, {"type": "text", "file": {"filePath": p, "content": text[:200], "numLines": len(lines), "startLine": 1, "totalLines": len(lines)}}, False
        if name == "Grep":
            pattern = rng.choice(("retry_limit", "MAX_BATCH", "timeout_ms", "parse_header"))
            hits = sorted({file_path() for _ in range(rng.randint(2, 25))})
            text = f"Found {len(hits)} files\n" + "\n".join(hits)
            return {"pattern": pattern, "path": CWD, "output_mode": "files_with_matches"}, text, {"mode": "files_with_matches", "filenames": hits, "numFiles": len(hits)}, False
        if name == "Bash":
            test = f"tests/test_{rng.randrange(60):03d}.py"
            fail = rng.random() < 0.25
            body = [f"{test}::test_case_{i} PASSED [{i % 100:3d}%]" for i in range(rng.randint(20, 120))]
            if fail:
                body += ["=================================== FAILURES ===================================", f"    {rng.choice(code).splitlines()[0]}", "AssertionError: expected 3 retries, got 5"]
            text = "\n".join(body)
            return {"command": f"python -m pytest -q {test}", "description": "Run the tests"}, text, {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}, fail
        p = file_path()
        return {"file_path": p, "old_string": "retries = 5", "new_string": "retries = 3"}, f"The file {p} has been updated.", {"filePath": p, "oldString": "retries = 5", "newString": "retries = 3"}, False

    w.raw({"type": "file-history-snapshot", "messageId": w.uid(), "snapshot": {"messageId": w.uid(), "trackedFileBackups": {}, "timestamp": w.stamp()}, "isSnapshotUpdate": False})
    w.entry("user", {"role": "user", "content": "Caveat: The messages below were generated by the user while running local commands. DO NOT respond to these messages or otherwise consider them in your response unless the user explicitly asks you to."}, isMeta=True)
    w.entry("user", {"role": "user", "content": "<command-name>/model</command-name>\n            <command-message>model</command-message>\n            <command-args></command-args>"})
    w.entry("user", {"role": "user", "content": f"<local-command-stdout>Set model to opus ({MODEL})</local-command-stdout>"})
    goal = megabytes * 1_000_000
    turn = 0
    while w.size < goal:
        turn += 1
        if not compacted and w.size > goal * 2 / 3:  # the session's own compaction, as Claude Code records it
            last = w.parent
            w.entry("system", None, subtype="compact_boundary", content="Conversation compacted", level="info", isMeta=False,
                    logicalParentUuid=last, compactMetadata={"trigger": "auto", "preTokens": 155_000 + rng.randrange(9000)})
            w.entry("user", {"role": "user", "content": "This session is being continued from a previous conversation that ran out of context. "
                                                        "The conversation is summarized below:\n" + prose(1500)},
                    isCompactSummary=True, isVisibleInTranscriptOnly=True)
            compacted = True
            counts["compactions"] += 1
        w.raw({"type": "file-history-snapshot", "messageId": w.uid(), "snapshot": {"messageId": w.uid(), "trackedFileBackups": {}, "timestamp": w.stamp()}, "isSnapshotUpdate": False})
        w.entry("user", {"role": "user", "content": f"Step {turn}: {prose(rng.randint(80, 400))}"})
        if turn % 7 == 0:
            w.entry("user", {"role": "user", "content": "<system-reminder>The TodoWrite tool hasn't been used recently. Keep the todo list current.</system-reminder>"}, isMeta=True)
        for _ in range(rng.randint(1, 4)):  # tool rounds of this turn
            msg_id = f"msg_01{rng.getrandbits(64):016x}"
            request = f"req_011C{rng.getrandbits(64):016x}"
            names = [rng.choice(("Read", "Read", "Grep", "Bash", "Edit")) for _ in range(rng.choice((1, 1, 2, 3)))]
            ids = []
            u = usage(turn, rng.randint(50, 600))
            blocks: list[dict[str, Any]] = []
            if rng.random() < 0.6:
                blocks.append({"type": "thinking", "thinking": prose(rng.randint(100, 700)), "signature": "Eq" + f"{rng.getrandbits(120):x}"})
            blocks.append({"type": "text", "text": prose(rng.randint(40, 200))})
            results = []
            for name in names:
                calls += 1
                call_id = f"toolu_01{calls:06d}{rng.getrandbits(40):010x}"
                ids.append(call_id)
                args, content, detail, err = tool(name)
                blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
                results.append((call_id, content, detail, err))
            for i, block in enumerate(blocks):
                last = i == len(blocks) - 1
                w.entry("assistant", {"id": msg_id, "type": "message", "role": "assistant", "model": MODEL, "content": [block],
                                      "stop_reason": "tool_use" if last else None, "stop_sequence": None, "usage": u}, requestId=request)
            for call_id, content, detail, err in results:
                result: dict[str, Any] = {"tool_use_id": call_id, "type": "tool_result", "content": content}
                if err:
                    result["is_error"] = True
                w.entry("user", {"role": "user", "content": [result]}, toolUseResult=detail)
            counts["tool_uses"] += len(names)
        w.entry("assistant", {"id": f"msg_01{rng.getrandbits(64):016x}", "type": "message", "role": "assistant", "model": MODEL,
                              "content": [{"type": "text", "text": prose(rng.randint(200, 900))}], "stop_reason": "end_turn", "stop_sequence": None,
                              "usage": usage(turn, rng.randint(100, 900))}, requestId=f"req_011C{rng.getrandbits(64):016x}")
        counts["turns"] += 1
    path.write_text("\n".join(w.lines) + "\n")
    counts["entries"] = len(w.lines)
    counts["bytes"] = w.size
    return counts


# -- import --------------------------------------------------------------------------------------------


def open_svc(url: str, workdir: Path, policies: Any = None) -> Any:
    from engine.compaction.summarizers.extractive import ExtractiveSummarizer
    from engine.service import open_service

    return open_service(url, workdir=workdir, summarizer=ExtractiveSummarizer(), policies=policies, create=True)


def time_import(url: str, workdir: Path, src: Path) -> dict[str, Any]:
    """Import ``src`` into the (new) database at ``url``: the import, then a re-import."""
    svc = open_svc(url, workdir)
    try:
        t0 = time.perf_counter()
        reports = svc.imports.import_file(src)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = svc.imports.import_file(src)
        second = time.perf_counter() - t0
        main = reports[0]
        return {"seconds": first, "reimport_s": second, "reimport_written": sum(r.messages for r in again), "thread": main.thread,
                "messages": svc.reads.message_count(main.thread), "tool_calls": main.tool_calls, "compactions": main.compactions,
                "requests": main.requests, "warnings": len(main.warnings), "repairs": dict(main.repairs)}  # fmt: skip
    finally:
        svc.close()


# -- the harness-written thread ---------------------------------------------------------------------------


def write_harness_thread(url: str, workdir: Path, messages: int, *, seed: int = 5) -> int:
    """A thread of about ``messages`` messages written by ``AgentHarness`` against the simulator
    (per turn: a user prompt, two parallel tool calls and their results, an answer). Returns the count."""
    from engine.apps.harness.loop import AgentHarness, Tool, ToolRegistry
    from engine.apps.harness.simulator import ProviderSimulator, Reply
    from engine.llm.client import ChatClient

    rng = random.Random(seed)
    english, code = _pools()

    def prose(chars: int) -> str:
        text = rng.choice(english)
        start = rng.randrange(max(1, len(text) - chars))
        return " ".join(text[start : start + chars].split())

    def read(args: dict[str, Any]) -> str:
        lines = "".join(rng.choice(code) for _ in range(rng.randint(2, 8))).splitlines()
        return "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(lines))

    tools = ToolRegistry([Tool("read_file", read, "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})])
    # a window no turn reaches: like the imported thread, the harness thread is not compacted by
    # the engine (compacted units open collapsed, which paints less and would flatter it)
    svc = open_svc(url, workdir, policies={"context_window": 100_000_000})
    try:
        svc.runs.create_thread(HARNESS_KEY, title="harness-written", system_prompt="You are a coding agent.", tools=tools.schemas())
        with ProviderSimulator(context_window=10**9, model="sim-model") as sim:
            client = ChatClient(sim.base_url, provider="openai", api_key="sim-key")
            harness = AgentHarness(svc, client, model="sim-model", tools=tools)

            async def drive() -> None:
                try:
                    while svc.reads.message_count(HARNESS_KEY) + 5 <= messages:
                        path = f"src/{rng.choice(_PACKAGES)}/module_{rng.randrange(60):03d}.py"
                        sim.script([Reply(content=prose(rng.randint(40, 200)), tool_calls=(("read_file", {"path": path}), ("read_file", {"path": path + "i"}))),
                                    Reply(content=prose(rng.randint(200, 900)))])
                        result = await harness.run(HARNESS_KEY, f"Step: {prose(rng.randint(80, 400))}")
                        if result.status != "completed":
                            raise RuntimeError(f"the harness run ended {result.status}: {result.error_code}")
                finally:
                    await client.aclose()

            asyncio.run(drive())
        return svc.reads.message_count(HARNESS_KEY)
    finally:
        svc.close()


# -- the timeline, in a fresh process -----------------------------------------------------------------------


def child(url: str, key: str, n: int) -> int:
    """gui_timeline.py's measurement of the thread ``key`` (its module-level key, set here)."""
    import gui_timeline

    gui_timeline.KEY = key
    return gui_timeline.child(url, n)


def run_child(url: str, key: str, n: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", url, "--key", key, "--messages", str(n)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_API": "pyside6"},
    )  # fmt: skip
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
    if proc.returncode != 0 or line is None:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise RuntimeError(f"timeline measurement of {key!r} failed (exit {proc.returncode}): {tail}")
    return json.loads(line)


# -- per backend ----------------------------------------------------------------------------------------------


def backend_run(backend: str, src: Path, tmp: Path, stack: ExitStack, pg_url: str, *, repeats: int, gui: bool, gui_repeats: int = 3) -> dict[str, Any]:
    from store import temp_pg_database  # benchmarks/store.py

    def new_url(name: str) -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp / f'{backend}-{name}.db'}"
        return stack.enter_context(temp_pg_database(pg_url))

    runs = [time_import(new_url(f"import{i}"), tmp / f"wd-{backend}-{i}", src) for i in range(repeats)]
    first = runs[-1]
    out: dict[str, Any] = {
        "bench": TAG, "backend": backend, "file_mb": src.stat().st_size / 1e6,
        "import_s": statistics.median(r["seconds"] for r in runs), "import_runs_s": [r["seconds"] for r in runs],
        **{k: first[k] for k in ("reimport_s", "reimport_written", "thread", "messages", "tool_calls", "compactions", "requests", "warnings", "repairs")},
    }  # fmt: skip
    out["import_target_met"] = out["import_s"] < TARGET_IMPORT_S
    if gui:
        url = new_url("timeline")  # the imported thread and the harness thread side by side
        time_import(url, tmp / f"wd-{backend}-timeline", src)
        t0 = time.perf_counter()
        out["harness_messages"] = write_harness_thread(url, tmp / f"wd-{backend}-harness", first["messages"])
        out["harness_write_s"] = time.perf_counter() - t0
        measured: dict[str, list[dict[str, Any]]] = {"imported": [], "harness": []}
        for _ in range(gui_repeats):  # alternating, so machine noise falls on both alike
            for label, key, n in (("imported", first["thread"], first["messages"]), ("harness", HARNESS_KEY, out["harness_messages"])):
                measured[label].append(run_child(url, key, n))
        for label, ds in measured.items():
            for field, name in (("first_paint_s", "first_paint_s"), ("first_paint_cold_s", "first_paint_cold_s"), ("scroll_idle_s", "end_s"), ("loaded_s", "panels_s")):
                out[f"{label}_{name}"] = statistics.median(d[field] for d in ds)
            out[f"{label}_reached_end"] = all(d["reached_end"] for d in ds)
        out["gui_repeats"] = gui_repeats
        out["first_paint_ratio"] = out["imported_first_paint_s"] / out["harness_first_paint_s"]
        out["end_ratio"] = out["imported_end_s"] / out["harness_end_s"]
    return out


def run(mb: float, backends: list[str], pg_url: str, *, repeats: int = 3, gui: bool = True, gui_repeats: int = 3, emit: Callable[[dict[str, Any]], None] = lambda d: None) -> list[dict[str, Any]]:
    import sqlalchemy as sa

    results = []
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp_name:
        tmp = Path(tmp_name)
        src = tmp / f"{SESSION}.jsonl"
        counts = generate(src, mb)
        for backend in backends:
            with ExitStack() as stack:
                try:
                    d = backend_run(backend, src, tmp, stack, pg_url, repeats=repeats, gui=gui, gui_repeats=gui_repeats)
                except sa.exc.OperationalError as exc:
                    d = {"bench": TAG, "backend": backend, "skipped": f"not reachable: {str(exc.orig).splitlines()[0]}"}
                else:
                    d["session"] = counts
            emit(d)
            results.append(d)
    return results


def _ms(x: float) -> str:
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.2f} s"


def rows_from(results: list[dict[str, Any]]) -> list[list[str]]:
    """Rows for the "Our own figures" table (Figure, Value, Notes)."""
    out = []
    for d in results:
        b = d["backend"]
        if "skipped" in d:
            out.append([f"Claude Code session import, {b}", f"not measured: {d['skipped']}", ""])
            continue
        s = d["session"]
        out.append([
            f"Claude Code session import, {d['file_mb']:.1f} MB ({s['entries']:,} entries → {d['messages']:,} messages), {b}",
            _ms(d["import_s"]),
            f"target < {TARGET_IMPORT_S:.0f} s {'met' if d['import_target_met'] else 'NOT met'}; parse + one transaction, median of {len(d['import_runs_s'])} fresh databases; "
            f"{d['tool_calls']:,} calls, {d['requests']:,} model requests, {d['compactions']} recorded compaction; re-import {_ms(d['reimport_s'])} ({d['reimport_written']} written)",
        ])  # fmt: skip
        if "imported_first_paint_s" in d:
            out.append([
                f"Timeline of the imported session vs a harness-written thread ({d['messages']:,} / {d['harness_messages']:,} messages), {b}, offscreen",
                f"first paint {_ms(d['imported_first_paint_s'])} vs {_ms(d['harness_first_paint_s'])} ({d['first_paint_ratio']:.2f}×) · "
                f"End {_ms(d['imported_end_s'])} vs {_ms(d['harness_end_s'])} ({d['end_ratio']:.2f}×)",
                f"median of {d['gui_repeats']} fresh processes per thread; cold first paint {_ms(d['imported_first_paint_cold_s'])} vs {_ms(d['harness_first_paint_cold_s'])}; "
                f"side panels in after {d['imported_panels_s']:.1f} s vs {d['harness_panels_s']:.1f} s; End reached: {d['imported_reached_end'] and d['harness_reached_end']}",
            ])  # fmt: skip
    return out


def rows(mb: float = 2.0, pg_url: str | None = None, *, timeout: float = 600) -> list[list[str]]:
    """For ``run_all.py`` / ``own_figures.py``: this script in a fresh process, its rows."""
    args = [sys.executable, str(Path(__file__).resolve()), "--mb", str(mb)] + (["--pg-url", pg_url] if pg_url else [])
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_API": "pyside6"})
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:]) or f"exit {proc.returncode}"
        return [["Claude Code session import (benchmarks/import_session.py)", f"not measured: {tail}", ""]]
    return rows_from(lines)


def main(argv: list[str] | None = None) -> int:
    from store import DEFAULT_PG_URL

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=2.0, help="session size in MB")
    ap.add_argument("--pg-url", default=os.environ.get("COMPACTION_TEST_PG_URL") or DEFAULT_PG_URL)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--repeats", type=int, default=3, help="fresh databases per backend for the import time")
    ap.add_argument("--no-gui", action="store_true", help="skip the timeline comparison")
    ap.add_argument("--gui-repeats", type=int, default=3, help="fresh-process timeline measurements per thread (median)")
    ap.add_argument("--generate", metavar="FILE", help="only write the session to FILE and print its counts")
    ap.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--messages", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.key, args.messages)
    if args.generate:
        print(json.dumps({"bench": TAG, "generated": str(args.generate), **generate(Path(args.generate), args.mb)}))
        return 0
    run(args.mb, args.backends.split(","), args.pg_url, repeats=args.repeats, gui=not args.no_gui, gui_repeats=args.gui_repeats, emit=lambda d: print(json.dumps(d), flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
