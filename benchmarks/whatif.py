"""Benchmark of what-if runs (engine/whatif/, issue 14): a benchmark trace at two thresholds, and
the cost of a what-if of a 100,000-message thread.

Run: ``.venv/bin/python benchmarks/whatif.py [--messages 100000] [--families research coding chinese]
[--thresholds 0.6 0.95]``. Prints markdown (what ``make bench`` writes into docs/benchmarks.md).

- **Two thresholds**: each 100k-token trace (``benchmarks/traces.py``, seed 7) is first recorded as
  the harness runs it, through ``engine.whatif.EngineReplay`` on a temp SQLite file under the
  benchmark policy (window 32,768, threshold 0.8, extractive summarizer, every request recorded);
  then ``run_sweep`` replays the recorded thread at each threshold in a scratch copy. The
  "recorded" row is what the source database holds (its requests, compactions and events).
- **A real-shaped session** (issue 24): a generated coding session of about 600 messages
  (``benchmarks/fact_sessions.py``, seed 7) written as a Claude Code session JSONL and imported
  through ``Service.imports.import_file`` (607 messages, 247 recorded responses), under a window at which
  its whole envelope is 1.6 times the window (the thread's own route, as ``benchmarks/real_corpus.py``);
  in a fresh process: the first what-if at the default policy (it also builds the scratch schema
  once), the median of ``--repeats`` more, and a sweep of ``threshold_ratio`` over 10 values
  (0.50 to 0.95), one run.
- **Cost**: in a fresh process (its own peak memory), a thread of N messages (the mix of
  ``benchmarks/store.py``: user turns, tool calls, results of 30 to 400 words, answers; written
  with one bulk append, no requests recorded) under a 131,072-token window, and one what-if at the
  default policy: wall time, time per model step, peak resident memory of the process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

FAMILIES = ("research", "coding", "chinese")
TRACE_SIZE = 100_000
TRACE_WINDOW = 32_768
COST_WINDOW = 131_072
THRESHOLDS = (0.6, 0.95)


def _service(root: Path, name: str, policies: dict[str, Any]) -> Any:
    from engine.compaction.summarizers.extractive import ExtractiveSummarizer
    from engine.service import open_service

    return open_service(f"sqlite:///{root / (name + '.db')}", workdir=root / f"wd-{name}", summarizer=ExtractiveSummarizer(),
                        policies=policies, create=True)


def record_trace(root: Path, family: str) -> tuple[Any, str, float]:
    """The trace written as the harness runs it (every request recorded): (service, key, seconds)."""
    from engine.whatif import EngineReplay
    from ours import MODEL, PROVIDER, policy
    from traces import generate

    trace = generate(family, TRACE_SIZE)
    svc = _service(root, trace.name, policy(TRACE_WINDOW))
    key = trace.name
    svc.runs.create_thread(key, title=trace.name, system_prompt=trace.system_prompt, tools=trace.tools, provider=PROVIDER, model=MODEL)
    t0 = time.perf_counter()
    replay = EngineReplay(svc.store, key, compactor=svc.compactor, snapshots=svc.snapshots, route=(PROVIDER, MODEL), record_requests=True)
    for m in trace.messages:
        if m.role == "assistant":
            replay.step()
        replay.add(m)
    replay.finish()
    return svc, key, time.perf_counter() - t0


def thresholds(families: Sequence[str], values: Sequence[float]) -> list[dict[str, Any]]:
    from engine.whatif import run_sweep

    out = []
    with tempfile.TemporaryDirectory(prefix="bench-whatif-") as tmp:
        for family in families:
            svc, key, seconds = record_trace(Path(tmp), family)
            try:
                sweep = run_sweep(svc.store, key, "threshold_ratio", list(values), policies=svc.policies)
            finally:
                svc.close()
            out.append({"trace": key, "record_s": round(seconds, 1), "sweep": sweep.to_json()})
    return out


def _fmt(v: Any, kind: str = "n") -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if kind == "%":
        return f"{v:.1%}"
    return f"{v:,}"


def threshold_table(results: list[dict[str, Any]]) -> str:
    head = ["Trace", "Run", "Threshold", "Compactions (prune + summary)", "Summarizer calls", "Peak pressure", "Mean pressure",
            "Prompt tokens sent", "Steps over window", "Specifics dropped", "Request kept", "Time"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        s = r["sweep"]
        for run in [s["recorded"], *s["runs"]]:
            k = run["by_kind"]
            parts = f"{run['compactions']} ({k.get('prune', 0)} + {k.get('summary', 0) + k.get('manual', 0)})"
            when = f"{run['duration_ms'] / 1000:.1f} s" if run["label"] != "recorded" else f"{r['record_s']} s to record"
            lines.append("| " + " | ".join([
                r["trace"], "recorded" if run["label"] == "recorded" else "what-if", f"{run['settings']['threshold_ratio']:.2f}", parts,
                _fmt(run["summarizer_calls"]), _fmt(run["peak_pressure"], "%"), _fmt(run["mean_pressure"], "%"), _fmt(run["prompt_tokens"]),
                _fmt(run["steps_over_window"]), _fmt(run["specifics_dropped"]), _fmt(run["request_kept"]), when,
            ]) + " |")
    return "\n".join(lines)


# -- a real-shaped session (fresh process) ----------------------------------------------------------

SESSION_MESSAGES = 600
SESSION_SWEEP = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
SESSION_TARGETS = (0.5, 3.0)  # seconds: one what-if, the 10-value sweep (issue 24)


def session_source(root: Path) -> tuple[Any, str, int]:
    """The ~600-message real-shaped session imported into a SQLite store: (service, key, window)."""
    import math

    import fact_sessions

    session = fact_sessions.generate(SESSION_MESSAGES)
    path = root / "projects" / "-home-dev-shop" / "5b7e0c4d-2a91-4f3e-8d6a-0c1b2a3d4e5f.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(fact_sessions.to_claude_code(session), encoding="utf-8")
    svc = _service(root, "session", {})
    key = svc.imports.import_file(path)[0].thread
    info = svc.reads.thread(key)
    window = max(1024, math.ceil(svc.compactor.measure(svc.store.snapshot(key)).tokens / 1.6))
    svc.steering.set_policy({"context_window": 128_000, "models": [{"provider": info.provider, "model": info.model, "context_window": window}]})
    return svc, key, window


def cmd_session(repeats: int) -> dict[str, Any]:
    from engine.whatif import run_sweep, run_whatif

    with tempfile.TemporaryDirectory(prefix="bench-whatif-session-") as tmp:
        svc, key, window = session_source(Path(tmp))
        messages = svc.reads.thread(key).message_count
        try:
            times, cpus = [], []
            for _ in range(1 + repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                c = run_whatif(svc.store, key, {}, policies=svc.policies)
                times.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            sweep = run_sweep(svc.store, key, "threshold_ratio", list(SESSION_SWEEP), policies=svc.policies)
            sweep_s, sweep_cpu = time.perf_counter() - t0, time.process_time() - c0
        finally:
            svc.close()
    cand = c.candidate
    return {
        "messages": messages, "window": window, "requests": cand.requests, "compactions": cand.compactions,
        "by_kind": dict(cand.by_kind), "first_s": round(times[0], 2), "single_s": round(statistics.median(times[1:] or times), 2),
        "single_cpu_s": round(statistics.median(cpus[1:] or cpus), 2), "repeats": repeats, "sweep_s": round(sweep_s, 2),
        "sweep_cpu_s": round(sweep_cpu, 2), "sweep_compactions": [r.compactions for r in sweep.runs],
        "cpus": os.cpu_count(), "load": round(os.getloadavg()[0], 1),
    }


def session(repeats: int = 3, timeout: float = 1800) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "session", "--repeats", str(repeats)], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"what-if session run failed: {(done.stderr.strip().splitlines() or [str(done.returncode)])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def session_table(r: dict[str, Any]) -> str:
    single, sweep = SESSION_TARGETS
    k = r["by_kind"]
    return "\n".join([
        "| Figure | Value | Target | Notes |",
        "|---|---|---|---|",
        f"| What-if of the {r['messages']}-message Claude Code session (window {r['window']:,}, default policy) | {r['single_s']:.2f} s "
        f"({r['single_cpu_s']:.2f} s of CPU) | < {single} s | median of {r['repeats']} runs after the first; the first run in the process "
        f"{r['first_s']:.2f} s (it also creates the scratch schema); {r['requests']} model requests, {r['compactions']} compactions "
        f"({k.get('prune', 0)} prunes, {k.get('summary', 0)} summaries) |",
        f"| Sweep of threshold_ratio over {len(SESSION_SWEEP)} values ({SESSION_SWEEP[0]:.2f} to {SESSION_SWEEP[-1]:.2f}) | {r['sweep_s']:.1f} s "
        f"({r['sweep_cpu_s']:.1f} s of CPU) | < {sweep:.0f} s | one run; compactions per value: {', '.join(map(str, r['sweep_compactions']))}; "
        f"load average {r['load']} on {r['cpus']} CPUs |",
    ])


# -- the cost of a big what-if (fresh process) -------------------------------------------------------


def cmd_cost(n: int) -> dict[str, Any]:
    from engine.whatif import run_whatif
    from incremental import stream_messages

    with tempfile.TemporaryDirectory(prefix="bench-whatif-cost-") as tmp:
        svc = _service(Path(tmp), "big", {"context_window": COST_WINDOW})
        key = "big"
        svc.runs.create_thread(key, title="big", system_prompt="You are a support agent with a knowledge base.", provider="bench", model="bench-model")
        t0 = time.perf_counter()
        with svc.store.locked(key) as tx:
            tx.bulk_append(stream_messages(n))
        build = time.perf_counter() - t0
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0, cpu0 = time.perf_counter(), time.process_time()
        c = run_whatif(svc.store, key, {}, policies=svc.policies)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        svc.close()
    cand = c.candidate
    return {
        "messages": n, "window": COST_WINDOW, "build_s": round(build, 1), "whatif_s": round(seconds, 1), "cpu_s": round(cpu, 1),
        "per_step_ms": round(seconds * 1000 / max(1, cand.requests), 2), "requests": cand.requests, "compactions": cand.compactions,
        "by_kind": dict(cand.by_kind), "summarizer_calls": cand.summarizer_calls, "prompt_tokens": cand.prompt_tokens,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "rss_before_mb": round(rss0),
        "specifics_dropped": cand.specifics_dropped, "cpus": os.cpu_count(), "load": round(os.getloadavg()[0], 1),
    }


def cost(n: int, timeout: float = 3600) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "cost", "--messages", str(n)], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"what-if cost run failed: {(done.stderr.strip().splitlines() or [str(done.returncode)])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cost_table(c: dict[str, Any]) -> str:
    k = c["by_kind"]
    return "\n".join([
        "| Figure | Value | Notes |",
        "|---|---|---|",
        f"| What-if of a {c['messages']:,}-message thread (SQLite source, window {c['window']:,}) | {c['whatif_s']:.0f} s "
        f"({c['whatif_s'] / 60:.1f} min), {c.get('cpu_s', float('nan')):.0f} s of CPU | {c['requests']:,} model requests replayed, {c['per_step_ms']} ms each; "
        f"{c['compactions']} compactions ({k.get('prune', 0)} prunes, {k.get('summary', 0)} summaries), {c['summarizer_calls']} extractive calls; "
        f"{c['prompt_tokens']:,} prompt tokens |",
        f"| Peak memory of that process | {c['peak_rss_mb']} MB | {c['rss_before_mb']} MB before the what-if (after building the source); "
        f"messages read in pages of 1,000, the scratch surface held once |",
        f"| Source build (one bulk append) | {c['build_s']} s | not part of the what-if; load average {c['load']} on {c['cpus']} CPUs during the run |",
    ])


def section(*, messages: int = 100_000, families: Sequence[str] = FAMILIES, values: Sequence[float] = THRESHOLDS) -> str:
    """The markdown of docs/benchmarks.md's what-if section."""
    results = thresholds(families, values)
    try:
        real = session_table(session())
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        real = f"The {SESSION_MESSAGES}-message session's what-if did not finish: {exc}"
    try:
        big = cost_table(cost(messages))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        big = f"The {messages:,}-message what-if did not finish: {exc}"
    return (
        f"Each {TRACE_SIZE // 1000}k-token trace recorded under the benchmark policy (window {TRACE_WINDOW:,}, threshold 0.8), then "
        f"replayed by `engine.whatif.run_sweep` at thresholds {', '.join(f'{v:.2f}' for v in values)} in a scratch copy "
        "(`compaction whatif --sweep threshold_ratio=…`); pressures are envelope tokens ÷ window.\n\n"
        + threshold_table(results) + "\n\n" + real + "\n\n" + big
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", nargs="?", choices=("cost", "session"), help=argparse.SUPPRESS)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3, help="what-if runs of the real-shaped session after the first (median)")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--thresholds", type=float, nargs="+", default=list(THRESHOLDS))
    args = ap.parse_args(argv)
    if args.cmd == "cost":
        print(json.dumps(cmd_cost(args.messages)))
        return 0
    if args.cmd == "session":
        print(json.dumps(cmd_session(args.repeats)))
        return 0
    print(section(messages=args.messages, families=args.families, values=args.thresholds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
