"""Bulk import benchmark (issue 26): ``compaction import DIR`` over a folder of 1,000 real-shaped
session files of mixed formats in under 60 s; a second run (resume) skips them all.

Run: ``.venv/bin/python benchmarks/bulk_import.py [--files 1000] [--backends sqlite,postgresql]
[--pg-url URL] [--keep DIR]``. Prints one JSON line per backend (``{"bench": "bulk_import", ...}``;
a backend that cannot run: ``{"bench": "bulk_import", "backend": ..., "skipped": reason}``).
:func:`rows` runs it in a fresh process and returns table rows (Figure, Value, Notes).

- **The folder** (:func:`generate_folder`, seeded): nested as the tools keep them
  (``claude/<project>/``, ``codex/YYYY/MM/DD/``, ``swe-agent/<run>/`` …). About 40 % are Claude Code
  sessions in the exact shape ``benchmarks/import_session.py`` writes (user prompts, meta entries,
  thinking / text / parallel ``tool_use`` blocks with usage, tool results, a recorded compaction),
  sized from 20 KB to 400 KB; the rest are copies of the importers' test fixtures
  (``tests/fixtures/sessions``: Codex rollouts, SWE-agent trajectories, OpenAI chat / Responses,
  Anthropic Messages, Gemini CLI, OpenHands, Aider, Cline task folders), each with its own session
  id, so every file is a thread of its own. Three more files: two that are not sessions (a README,
  a truncated JSON file) and a damaged one (a truncated Agents SDK SQLite store: an ``error`` entry).
- **The import**: the real command in a fresh process (``python -m engine.apps.cli import --db URL
  --json DIR``), wall clock from start to exit, into a new database; then the same command again
  (every file already imported and unchanged: skipped without being read); and, for comparison,
  what resuming would cost without that rule: every session file imported again in-process
  (``Service.imports.import_file``, idempotent: reads and parses each file, writes nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

TAG = "bulk_import"
TARGET_S = 60.0
FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
#: fixture sessions copied (path under tests/fixtures/sessions, where copies go, weight)
TEMPLATES = (
    ("codex/2026/11/30/rollout-2026-11-30T10-00-00-019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d.jsonl", "codex/2026/11/{day:02d}", 14),
    ("codex/legacy/rollout-2025-08-20T09-00-00-6a1d2c3b-0e4f-4a5b-8c9d-0e1f2a3b4c5d.jsonl", "codex/2025/08/{day:02d}", 4),
    ("swe-agent/classic/calc__calc-1.traj", "swe-agent/run-{run}", 6),
    ("swe-agent/function-calling/calc__calc-2.traj", "swe-agent/run-{run}", 6),
    ("openai-chat/request.json", "api-logs/openai/{day:02d}", 6),
    ("openai-responses/response.json", "api-logs/responses/{day:02d}", 4),
    ("anthropic/request.json", "api-logs/anthropic/{day:02d}", 5),
    ("gemini-cli/tmp/9b0e4f1c2d3a/chats/session-2026-11-30T10-02-8c1d2e3f.jsonl", "gemini/{project}/chats", 5),
    ("gemini-cli/tmp/9b0e4f1c2d3a/chats/session-2025-10-01T09-00-1a2b3c4d.json", "gemini/{project}/chats", 3),
    ("openhands/v0/conversation.json", "openhands/v0/{day:02d}", 3),
    ("aider/slugify/.aider.chat.history.md", "aider/{project}-{n}", 2),
    ("cline/saoudrizwan.claude-dev/tasks/1764843000000", "cline/tasks", 2),
)
CLAUDE_SHARE = 0.4
#: Claude Code session sizes (MB) and how often each occurs
CLAUDE_SIZES = ((0.02, 5), (0.05, 4), (0.1, 3), (0.2, 2), (0.4, 1))


def _session_id(path: Path) -> str | None:
    """The id the importer keys the fixture's thread by (replaced in each copy)."""
    from engine.importers import parse

    sessions = parse(path)
    return sessions[0].source_session_id if sessions else None


def _variant(ident: str, n: int) -> str:
    """``ident`` with its last characters replaced by ``n`` (same length and alphabet when hex)."""
    tail = f"{n:08x}" if all(c in "0123456789abcdef-" for c in ident[-8:].lower()) else f"{n:08d}"
    return ident[: max(0, len(ident) - 8)] + tail if len(ident) > 8 else f"{ident}-{n}"


def _copy(src: Path, dest_dir: Path, ident: str | None, n: int) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    new = _variant(ident, n) if ident else None
    name = src.name.replace(ident, new) if ident and new and ident in src.name else f"{src.stem}-{n}{src.suffix}" if src.is_file() else f"{src.name}{n}"
    dest = dest_dir / name
    if src.is_dir():
        shutil.copytree(src, dest)
        files = [p for p in dest.rglob("*") if p.is_file()]
    else:
        shutil.copyfile(src, dest)
        files = [dest]
    if ident and new:
        for f in files:
            text = f.read_text(encoding="utf-8")
            if ident in text:
                f.write_text(text.replace(ident, new), encoding="utf-8")
    return dest


def generate_folder(root: Path, files: int = 1000, *, seed: int = 26) -> dict[str, Any]:
    """Write ``files`` sessions (plus two files that are not sessions) under ``root``."""
    import import_session  # benchmarks/import_session.py: the Claude Code session's exact shape

    rng = random.Random(seed)
    bases: dict[float, str] = {}
    with tempfile.TemporaryDirectory(prefix="bulk-claude-") as tmp:
        for mb, _ in CLAUDE_SIZES:
            p = Path(tmp) / f"{mb}.jsonl"
            import_session.generate(p, mb, seed=int(mb * 1000))
            bases[mb] = p.read_text(encoding="utf-8")
    sizes = [mb for mb, w in CLAUDE_SIZES for _ in range(w)]
    ids = {t[0]: _session_id(FIXTURES / t[0]) for t in TEMPLATES}
    picks = [t for t in TEMPLATES for _ in range(t[2])]
    by_format: dict[str, int] = {}
    total_bytes = 0
    for n in range(files):
        if rng.random() < CLAUDE_SHARE:
            sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            d = root / "claude" / f"-home-dev-project{n % 23:02d}"
            d.mkdir(parents=True, exist_ok=True)
            dest = d / f"{sid}.jsonl"
            dest.write_text(bases[rng.choice(sizes)].replace(import_session.SESSION, sid), encoding="utf-8")
            by_format["claude-code"] = by_format.get("claude-code", 0) + 1
        else:
            rel, where, _ = rng.choice(picks)
            dest = _copy(FIXTURES / rel, root / where.format(day=1 + n % 28, run=n % 9, project=f"p{n % 17:02d}", n=n), ids[rel], n)
            kind = rel.split("/")[0]
            by_format[kind] = by_format.get(kind, 0) + 1
        total_bytes += sum(p.stat().st_size for p in ([dest] if dest.is_file() else dest.rglob("*")) if p.is_file())
    (root / "README.txt").write_text("sessions exported from the team's machines\n", encoding="utf-8")
    (root / "api-logs" / "broken.json").write_text('{"model": "gpt-4o", "messages": [{"role": "user", "content": "trunc', encoding="utf-8")
    (root / "agents").mkdir(exist_ok=True)
    (root / "agents" / "damaged.sqlite").write_bytes((FIXTURES / "agents-sdk" / "sessions.sqlite").read_bytes()[:4096])
    return {"sessions": files, "by_format": dict(sorted(by_format.items())), "bytes": total_bytes}


def run_import(url: str, folder: Path) -> dict[str, Any]:
    """``compaction import --db URL --json FOLDER`` in a fresh process: wall clock and its report."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "engine.apps.cli", "import", "--db", url, "--json", str(folder)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}") from None
    return {"seconds": seconds, "cpu_s": cpu, "load": os.getloadavg()[0], "exit": proc.returncode, "counts": data["counts"], "errors": data["errors"],
            "messages": sum(r["messages"] for r in data["imported"]), "ok": [f["path"] for f in data["files"] if f["status"] == "ok"]}


def time_reread(url: str, paths: list[str], workdir: Path) -> dict[str, Any]:
    """Every imported file imported again (idempotent): what a resume would cost without the skip rule."""
    from engine.service import open_service

    svc = open_service(url, workdir=workdir)
    try:
        t0 = time.perf_counter()
        written = sum(r.messages for p in paths for r in svc.imports.import_file(p))
        return {"seconds": time.perf_counter() - t0, "written": written}
    finally:
        svc.close()


def backend_run(backend: str, folder: Path, tmp: Path, stack: ExitStack, pg_url: str) -> dict[str, Any]:
    if backend == "sqlite":
        url = f"sqlite:///{tmp / 'bulk.db'}"
    else:
        from store import temp_pg_database  # benchmarks/store.py

        url = stack.enter_context(temp_pg_database(pg_url))
        from engine.store import migrate

        migrate(url)
    first = run_import(url, folder)
    again = run_import(url, folder)
    reread = time_reread(url, first.pop("ok"), tmp / f"wd-{backend}")
    again.pop("ok")
    return {"bench": TAG, "backend": backend, "import_s": first["seconds"], "target_met": first["seconds"] < TARGET_S,
            "first": first, "rerun_s": again["seconds"], "rerun": again, "reread_s": reread["seconds"], "reread_written": reread["written"]}


def run(files: int, backends: list[str], pg_url: str, *, keep: Path | None = None,
        emit: Callable[[dict[str, Any]], None] = lambda d: None) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-bulk-") as tmp_name:
        tmp = Path(tmp_name)
        folder = keep or tmp / "sessions"
        t0 = time.perf_counter()
        made = generate_folder(folder, files)
        made["generate_s"] = time.perf_counter() - t0
        for backend in backends:
            with ExitStack() as stack:
                try:
                    d = backend_run(backend, folder, tmp, stack, pg_url)
                except Exception as exc:  # noqa: BLE001 - a backend that cannot run is reported, the others still run
                    d = {"bench": TAG, "backend": backend, "skipped": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
                else:
                    d["folder"] = made
            emit(d)
            results.append(d)
    return results


def rows_from(results: list[dict[str, Any]]) -> list[list[str]]:
    """Rows for the "Our own figures" table (Figure, Value, Notes)."""
    out = []
    for d in results:
        if "skipped" in d:
            out.append([f"Bulk import of a folder, {d['backend']}", f"not measured: {d['skipped']}", ""])
            continue
        f, c = d["folder"], d["first"]["counts"]
        out.append([
            f"Bulk import: {f['sessions']:,} session files of {len(f['by_format'])} formats ({f['bytes'] / 1e6:.0f} MB) → {c['threads']:,} threads, {d['backend']}",
            f"{d['import_s']:.1f} s",  # wall clock; the command's own CPU time and the machine's load beside it
            f"target < {TARGET_S:.0f} s {'met' if d['target_met'] else 'NOT met'}; `compaction import DIR` in a fresh process "
            f"({d['first']['cpu_s']:.1f} s of its own CPU, load average {d['first']['load']:.1f}), "
            f"{d['first']['messages']:,} messages, {c['ok']:,} ok / {c['skipped']:,} skipped / {c['error']:,} errors; "
            f"run again (resume): {d['rerun_s']:.1f} s, {d['rerun']['counts']['unchanged']:,} skipped as unchanged "
            f"(re-reading them all instead, idempotently: {d['reread_s']:.1f} s, {d['reread_written']} written)",
        ])
    return out


def rows(files: int = 1000, pg_url: str | None = None, *, timeout: float = 1800) -> list[list[str]]:
    """This script in a fresh process, its rows."""
    args = [sys.executable, str(Path(__file__).resolve()), "--files", str(files)] + (["--pg-url", pg_url] if pg_url else [])
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:]) or f"exit {proc.returncode}"
        return [["Bulk import (benchmarks/bulk_import.py)", f"not measured: {tail}", ""]]
    return rows_from(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000, help="session files to generate")
    ap.add_argument("--pg-url", default=os.environ.get("COMPACTION_TEST_PG_URL") or "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--keep", type=Path, help="generate the folder here (kept) instead of a temporary one")
    ap.add_argument("--generate", type=Path, metavar="DIR", help="only generate the folder into DIR and print what it holds")
    args = ap.parse_args(argv)
    if args.generate:
        print(json.dumps({"bench": TAG, "generated": str(args.generate), **generate_folder(args.generate, args.files)}))
        return 0
    run(args.files, args.backends.split(","), args.pg_url, keep=args.keep, emit=lambda d: print(json.dumps(d), flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
