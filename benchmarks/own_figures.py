"""Our own figures for ``make bench`` (meter, store, manual compaction, pressure check, GUI
timeline) and the machine they ran on; each runs a benchmark script of its own and parses its output."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: the context window each trace size is replayed under (trace / window: ~1.2x, 3x, 7.6x)
WINDOWS = {10_000: 8_192, 100_000: 32_768, 1_000_000: 131_072}


def ms(x: float) -> str:
    return f"{x * 1e3:.3g} ms" if x * 1e3 < 1000 else f"{x:.2f} s"



def run_script(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return proc.returncode, proc.stdout + proc.stderr


def own_meter() -> list[list[str]]:
    rc, out = run_script(["benchmarks/meter.py"])
    size = re.search(r"envelope: ([\d,]+) tokens", out)
    cold = re.search(r"cold measure \(empty cache\)\s+([\d.]+) ms", out)
    warm = re.search(r"warm re-measure \(\+1 message\)\s+([\d.]+) ms", out)
    raw = re.search(r"raw tiktoken encode_ordinary \(loop\)\s+([\d.]+) ms", out)
    if not (size and cold and warm and raw):
        return [["Meter (benchmarks/meter.py)", f"not measured: {out.strip().splitlines()[-1] if out.strip() else 'no output'}", ""]]
    what = f"{size.group(1)}-token mixed envelope"
    status = "targets met" if rc == 0 else "a target FAILED (see benchmarks/meter.py)"
    return [
        [f"Meter, cold measure, {what}", f"{cold.group(1)} ms", f"raw tiktoken loop {raw.group(1)} ms; {status}"],
        [f"Meter, warm re-measure (+1 message), {what}", f"{warm.group(1)} ms", "target < 1 ms and ≥ 100× cheaper than cold"],
    ]


def own_store(rows: int, pg_url: str | None) -> list[list[str]]:
    args = ["benchmarks/store.py", "--rows", str(rows), "--repeats", "30"]
    if pg_url:
        args += ["--pg-url", pg_url]
    rc, out = run_script(args, timeout=600)
    result = []
    for backend in ("sqlite", "postgresql"):
        m = re.search(rf"^{backend}\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", out, re.M)
        if m is None:
            skipped = re.search(rf"^{backend}: (.*)$", out, re.M)
            reason = skipped.group(1) if skipped else (out.strip().splitlines() or ["no output"])[-1]
            result.append([f"Store page latency, {backend}", f"not measured: {reason}", ""])
            continue
        ins, rps, start, mid_after, mid_before, end = m.groups()
        result.append(
            [
                f"Store page latency, {backend} ({rows:,} messages, 100-row keyset pages, median)",
                f"start {start} ms · middle {mid_after} / {mid_before} ms · end {end} ms",
                f"bulk intake {ins} s ({int(rps):,} rows/s)",
            ]
        )
    return result


def own_manual_compaction() -> list[list[str]]:
    try:
        import compaction  # benchmarks/compaction.py

        with tempfile.TemporaryDirectory(prefix="bench-manual-") as tmp:
            a = compaction.bench_manual(Path(tmp))
    except Exception as exc:  # noqa: BLE001 - another engineer's script: report what failed, never a number
        return [["Manual compaction end to end (benchmarks/compaction.py)", f"not measured: {type(exc).__name__}: {exc}", ""]]
    return [
        [
            f"Manual compaction end to end, {a['messages']:,}-message idle thread (benchmarks/compaction.py)",
            ms(a["seconds"]),
            f"{a['tokens_before']:,} → {a['tokens_after']:,} tokens, {a['compacted']} messages compacted, {a['calls']} extractive calls",
        ]
    ]


def own_pressure(r: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in r["traces"]:
        if t.size != max(x.size for x in r["traces"]):
            continue
        tm = r["ours_timing"][t.name]
        rows.append(
            [
                f"Pressure check per step, {t.name} replay (window {WINDOWS[t.size]:,})",
                f"cold {ms(tm['pressure_cold_s'])} · warm {ms(tm['pressure_warm_s'])}",
                f"the step driver's prepare (intake, check, request record: one transaction), median over the replay's no-op steps {ms(tm['pressure_per_step_s'])}",
            ]
        )
    return rows


def own_gui(messages: int, pg_url: str | None) -> list[list[str]]:
    """benchmarks/gui_timeline.py: one JSON line per backend (SQLite, PostgreSQL)."""
    args = ["benchmarks/gui_timeline.py", "--messages", str(messages)] + (["--pg-url", pg_url] if pg_url else [])
    rc, out = run_script(args, env={"QT_QPA_PLATFORM": "offscreen", "QT_API": "pyside6"}, timeout=7200 if messages > 100_000 else 1200)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if rc != 0 or not lines:
        tail = " ".join(out.strip().splitlines()[-2:]) if out.strip() else f"exit {rc}"
        return [[f"Timeline, {messages:,} messages, offscreen", f"not measured: {tail}", ""]]
    rows = []
    for d in lines:
        backend = d["backend"]
        if "skipped" in d:
            rows.append([f"Timeline, {backend}", f"not measured: {d['skipped']}", ""])
            continue
        rows += [
            [f"Timeline first paint, {d['messages']:,}-message thread, {backend}, offscreen", ms(d["first_paint_s"]), d.get("first_paint_note", "")],
            [
                f"Timeline scroll to the end (End key), {d['messages']:,} messages, {backend}",
                ms(d["scroll_idle_s"]) if d["reached_end"] else f"{ms(d['scroll_idle_s'])} (did not reach the end)",
                d["scroll_note"],
            ],
        ]
    return rows


def measure_specifics(family: str = "research", size: int = 1_000_000, root: Path | None = None) -> dict[str, Any]:
    """The dropped-specifics comparison on the pressure path: ``family``-``size`` replayed through the
    service as benchmarks/ours.py does (pressure before every model step, extractive summarizer,
    window of :data:`WINDOWS`); per summary event, ``specifics_ms`` (recorded by the compactor) against
    the summarizer call, timed around it."""
    import time

    import engine.compaction.compactor as compactor
    import ours  # benchmarks/ours.py
    import traces  # benchmarks/traces.py (puts the repository on sys.path)
    from engine.core.events import SummaryEvent

    # CPU time of this thread besides the wall time: the machine may be shared, and both calls run
    # on the compactor's thread
    cpu: dict[str, list[float]] = {"summarizer": [], "specifics": []}

    class Timed(ours.CountingExtractive):
        def __init__(self) -> None:
            super().__init__()
            self.seconds: list[float] = []

        def summarize(self, request):  # type: ignore[no-untyped-def]
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return super().summarize(request)
            finally:
                self.seconds.append(time.perf_counter() - t0)
                cpu["summarizer"].append(time.thread_time() - c0)

    measured = compactor.dropped_at_compaction

    def timed_specifics(**kw):  # type: ignore[no-untyped-def]
        c0 = time.thread_time()
        try:
            return measured(**kw)
        finally:
            cpu["specifics"].append(time.thread_time() - c0)

    trace = traces.generate(family, size)
    window = WINDOWS[size]
    summarizer = Timed()
    compactor.dropped_at_compaction = timed_specifics  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-specifics-", dir=root) as tmp:
            events = _replay_for_specifics(trace, window, summarizer, Path(tmp))
    finally:
        compactor.dropped_at_compaction = measured  # type: ignore[assignment]
    summaries = [e for e in events if isinstance(e, SummaryEvent) and e.specifics_ms is not None]
    return {
        "trace": trace.name,
        "window": window,
        "summaries": len(summaries),
        "specifics_ms": [e.specifics_ms for e in summaries],
        "specifics_cpu_ms": [x * 1e3 for x in cpu["specifics"]],
        "summarizer_ms": [x * 1e3 for x in summarizer.seconds],
        "summarizer_cpu_ms": [x * 1e3 for x in cpu["summarizer"]],
        "duration_ms": [e.duration_ms for e in summaries],
        "seen": [e.specifics_seen for e in summaries],
        "dropped": [e.dropped_specifics for e in summaries],
        "referenced": [e.dropped_referenced for e in summaries],
        "selected_messages": [e.selected_messages for e in summaries],
    }


def _replay_for_specifics(trace: Any, window: int, summarizer: Any, tmp: Path) -> list[Any]:
    """benchmarks/ours.py's replay without the reference counts: the summary events it wrote."""
    import ours  # benchmarks/ours.py
    from engine.compaction.compactor import RunState
    from engine.core.events import EventKind, parse_event
    from engine.service import open_service
    from engine.step import StepDriver

    svc = open_service(f"sqlite:///{Path(tmp) / 'specifics.db'}", workdir=Path(tmp) / "wd", summarizer=summarizer, policies=ours.policy(window), create=True)
    key = "specifics"
    try:
        svc.runs.create_thread(key, title=trace.name, system_prompt=trace.system_prompt, tools=trace.tools)
        run: RunState | None = None
        drv = StepDriver(svc.steps, key, ours.PROVIDER, ours.MODEL)  # each model step on the one step driver
        steps = 0
        pending: list[Any] = []
        for m in trace.messages:
            if m.role == "user":
                for p in pending:
                    svc.runs.append_message(key, p, run_id=run.run_id if run else None)
                pending.clear()
                if run is not None:
                    svc.runs.finish_run(key, run.run_id)  # type: ignore[arg-type]
                svc.runs.append_message(key, m)
                run = RunState(run_id=svc.runs.start_run(key))
                continue
            if run is None:
                svc.runs.append_message(key, m)
            elif m.role == "assistant":
                steps += 1
                call = drv.prepare(run, steps, messages=pending)
                pending.clear()
                drv.succeeded(call, run, prompt_tokens=None, completion_tokens=100, messages=[m])
            else:
                pending.append(m)
        return [parse_event(e.kind, e.data) for e in svc.reads.events(key, limit=100_000) if e.kind == EventKind.SUMMARY]
    finally:
        svc.close()


def own_specifics(family: str = "research", size: int = 1_000_000) -> list[list[str]]:
    """The dropped-specifics row: its cost against the summary call on the pressure path."""
    try:
        r = measure_specifics(family, size)
    except Exception as exc:  # noqa: BLE001 - the row says what failed, never a number
        return [[f"Dropped specifics on the pressure path, {family}-{size // 1000}k", f"not measured: {type(exc).__name__}: {exc}", ""]]
    if not r["summaries"]:
        return [[f"Dropped specifics on the pressure path, {r['trace']}", "not measured: no summary on the pressure path", ""]]
    n = r["summaries"]
    spec, summ, total = sum(r["specifics_ms"]), sum(r["summarizer_ms"]), sum(r["duration_ms"])
    spec_cpu, summ_cpu = sum(r["specifics_cpu_ms"]), sum(r["summarizer_cpu_ms"])
    per = " · ".join(f"{a:.0f} ms ({b:,} seen, {c:,} dropped, {d} referenced)" for a, b, c, d in zip(r["specifics_cpu_ms"], r["seen"], r["dropped"], r["referenced"]))
    return [
        [
            f"Dropped specifics per summary, {r['trace']} pressure-path replay (window {r['window']:,}, {n} summaries)",
            f"{spec_cpu / n:.0f} ms CPU mean ({spec / n:.0f} ms wall) · {100 * spec_cpu / summ_cpu:.0f} % of the offline extractive summary call ({summ_cpu / n:.0f} ms CPU, {summ / n:.0f} ms wall)",
            f"wall: {100 * spec / total:.0f} % of the whole summary attempt; CPU per summary: {per}",
        ]
    ]


# -- machine and document -----------------------------------------------------------------------


def machine() -> list[str]:
    cpu = "unknown"
    mem = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
        kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")))
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    pkgs = []
    for pkg in ("tiktoken", "SQLAlchemy", "psycopg", "PySide6-Essentials", "langchain", "langchain-core", "langgraph"):
        try:
            pkgs.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pkgs.append(f"{pkg} not installed")
    return [
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- CPU: {cpu}, {os.cpu_count()} logical cores (nproc), shared with other jobs; memory {mem}",
        f"- OS: {platform.platform()}; Python {platform.python_version()}",
        f"- Packages: {', '.join(pkgs)}",
    ]


if __name__ == "__main__":  # python benchmarks/own_figures.py [family] [size]: the dropped-specifics row alone
    _args = sys.argv[1:]
    for _row in own_specifics(_args[0] if _args else "research", int(_args[1]) if len(_args) > 1 else 1_000_000):
        print(" | ".join(_row))
