"""Benchmark of the incremental snapshots (engine.snapshots, issue 16): pressure and status in
O(new messages), a huge thread measured in bounded memory.

Run: ``.venv/bin/python benchmarks/incremental.py [--sizes 100000 1000000] [--families research]
[--pg-url URL] [--load-seconds 8] [--skip-baseline-above N]``. Every measurement runs in a fresh
process (memory figures are that process's own) and prints one JSON line; the parent prints the
rows. "today" is the path before the cache, in the same run: ``Store.snapshot`` read whole and
measured whole (the compactor with ``snapshots=None``; for status the old miss path).

- **pressure**: at every trace size (``--pressure-sizes``, 10k 100k 1M), the trace replayed as
  the harness runs it (a run per user turn, every model step on the one step driver
  ``engine.step.StepDriver``: intake, the pressure path, the request recorded, then completed;
  offline extractive summarizer; ``per_step_replay_ms``: the driver's ``prepare`` on the steps that
  compacted nothing), then on the final thread (below its
  threshold) the check itself (``Compactor.pressure``: read, measure, decide): the median of 200
  checks with nothing new and of 50 checks each after one appended message (20 / 20 today), each
  last answer asserted equal to a cold measure; today vs incremental, and the peers' per-step
  check (chars/4, LangChain's ``before_model`` below its trigger) on the same final surface, timed
  twice: in a loop of checks, and right after one appended message as our "+1" figure is (the
  same append through the service, to a thread of its own: the machine's caches as ours meets
  them after an append). The row (:func:`pressure_row`) puts like beside like: ours after +1
  beside the peers after the same append, ours with nothing new beside the peers' loop, and ours
  after +1 beside the peers' loop as well (the comparison that favours them), each ratio with its
  win or loss.
- **status**: a SQLite thread of N messages (the realistic mix of benchmarks/store.py, bulk
  written, never compacted); in a fresh process, once the tokenizer, pools and imports are loaded
  (a status of a small thread), the first (cold) ``Service.compaction.status`` of the big one and its peak
  resident memory growth: the process's peak during that call above its resident size just
  before it (the kernel's high-water mark reset through ``/proc/self/clear_refs``, else a
  sampling thread) plus the peaks of the worker processes it starts (the stream worker that
  measures a cold thread of 50k messages or more, and its counting worker for rows without a kept
  count; each exits after); then status unchanged and after one new message. The thread is
  written through the door, which keeps each message's count (migration 0003); the same thread
  is then measured with those counts erased (``--mode uncounted``: a database from before 0003),
  where every row is read whole and encoded.
- **load**: a 20,000-message thread on a fresh PostgreSQL database, 20 writer threads (another
  process) appending to it as fast as the row lock lets them for ``--load-seconds``, while status
  is polled in a loop: p50 / p95 / max, today vs incremental, and against the issue's p95 (621 ms).
  Each load run is bounded: the writers stop after ``--load-seconds``, the run is killed after
  twice that plus two minutes.

``--parts`` runs only some of the three (``pressure status load``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

KEY = "incremental-bench"
WINDOW_1M = 131_072


# -- helpers ----------------------------------------------------------------------------------------


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _status_kb(field: str) -> float | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _children_peaks(pid: int, peaks: dict[int, float]) -> None:
    """Record the high-water mark (VmHWM, MB) of every live child process of ``pid``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != pid:
                continue
            for line in (stat.parent / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    child = int(stat.parent.name)
                    peaks[child] = max(peaks.get(child, 0.0), int(line.split()[1]) / 1024)
        except (OSError, ValueError, IndexError):
            continue


class PeakGrowth:
    """Peak resident memory growth of this process during a block, above its resident size at
    the start, and the largest peak of a child process started in the block (the counting
    worker). On Linux the kernel's high-water mark (VmHWM) is reset at the start
    (``/proc/self/clear_refs``), so an earlier peak (the tokenizer's load) is not counted; else
    the resident size is sampled every millisecond. A child's peak is its own VmHWM, sampled
    every 100 ms while it lives (``getrusage(RUSAGE_CHILDREN)`` would not do: a child spawned
    with vfork inherits its parent's size in ``ru_maxrss``)."""

    def __enter__(self) -> "PeakGrowth":
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.method = "VmHWM"
        except OSError:
            self.method = "sampled"
        self.base = rss_mb()
        self._peak = self.base
        self._children: dict[int, float] = {}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        # VmHWM needs no sampling of this process: then wake only to look at the children
        every, children_every = (0.001, 100) if self.method == "sampled" else (0.1, 1)
        tick = 0
        while not self._stop.wait(every):
            if self.method == "sampled":
                self._peak = max(self._peak, rss_mb())
            tick += 1
            if tick % children_every == 0:
                _children_peaks(os.getpid(), self._children)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._sampler.join()
        hwm = _status_kb("VmHWM") if self.method == "VmHWM" else None
        self.peak = max(self._peak, rss_mb(), hwm / 1024 if hwm is not None else 0.0)
        self.worker_mb = max(self._children.values(), default=0.0)

    @property
    def process_mb(self) -> float:
        return self.peak - self.base

    @property
    def total_mb(self) -> float:
        return self.process_mb + self.worker_mb


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def stream_messages(n: int, seed: int = 7) -> Iterator[Any]:
    """The mix of ``benchmarks/store.make_messages`` as a generator (a 1M build never holds them)."""
    from engine.core.messages import ToolCall, assistant, tool_result, user
    from store import WORDS

    rnd = random.Random(seed)

    def text(k: int) -> str:
        return " ".join(rnd.choice(WORDS) for _ in range(k))

    i = made = 0
    while made < n:
        call = ToolCall(id=f"call_{i}", name="query_kb", arguments=f'{{"q": "{text(4)}"}}')
        for m in (user(text(rnd.randint(5, 40))), assistant("", call), tool_result(call.id, text(rnd.choice((30, 60, 400))), name="query_kb", source="bench"), assistant(text(rnd.randint(10, 80)))):
            if made < n:
                yield m
                made += 1
        i += 1


def child(*args: str, timeout: float = 1800) -> dict[str, Any]:
    """Run this script's subcommand in a fresh process; its last stdout line is JSON."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _service(url: str, workdir: Path, **kw: Any) -> Any:
    from engine.compaction.summarizers.extractive import ExtractiveSummarizer
    from engine.service import open_service

    return open_service(url, workdir=workdir, summarizer=ExtractiveSummarizer(), create=True, **kw)


def old_status(svc: Any, key: str) -> int:
    """The status miss path before the cache: the thread row, the newest request, the snapshot read
    whole and measured whole (what ``Service.compaction.status`` did whenever its stamp changed)."""
    svc.store.thread(key)
    svc.store.last_completed_request(key)
    snap = svc.store.snapshot(key)
    from engine.core.meter import default_meter
    from engine.core.surface import build_surface, envelope_of

    return default_meter(snap.model).measure(envelope_of(snap, build_surface(snap))).total


# -- subcommands (each in a fresh process) -------------------------------------------------------------


def cmd_build(url: str, n: int, workdir: str) -> dict[str, Any]:
    svc = _service(url, Path(workdir), policies={"context_window": 128_000})
    try:
        t0 = time.perf_counter()
        svc.runs.create_thread(KEY, title=f"{n:,} messages", system_prompt="You are a support agent.")
        with svc.store.locked(KEY) as tx:
            tx.bulk_append(stream_messages(n))
        svc.runs.create_thread("warmup", system_prompt="You are a support agent.")
        with svc.store.locked("warmup") as tx:
            tx.bulk_append(stream_messages(40))
        return {"n": n, "build_s": round(time.perf_counter() - t0, 2)}
    finally:
        svc.close()


def cmd_status(url: str, workdir: str, mode: str) -> dict[str, Any]:
    from engine.core.messages import user

    svc = _service(url, Path(workdir), policies={"context_window": 128_000})
    try:
        if mode == "uncounted":  # a thread written before migration 0003: no kept counts, every row encoded
            from sqlalchemy import text

            with svc.store.engine.begin() as conn:
                conn.execute(text("UPDATE messages SET tokens = NULL, tokens_key = NULL"))
            mode = "new"
        svc.compaction.status("warmup")  # tokenizer, pools, imports: not part of the thread's cost
        old_status(svc, "warmup")
        with PeakGrowth() as mem:
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            tokens = svc.compaction.status(KEY).tokens if mode == "new" else old_status(svc, KEY)
            cold = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
        warm = []
        for _ in range(1 if mode == "old" else 20):  # today's path reads it all each time
            t0 = time.perf_counter()
            svc.compaction.status(KEY) if mode == "new" else old_status(svc, KEY)
            warm.append(time.perf_counter() - t0)
        after_one = []
        for i in range(1 if mode == "old" else 10):
            svc.runs.append_message(KEY, user(f"one more question {i}"))
            t0 = time.perf_counter()
            svc.compaction.status(KEY) if mode == "new" else old_status(svc, KEY)
            after_one.append(time.perf_counter() - t0)
        return {"mode": mode, "tokens": tokens, "cold_ms": ms(cold), "cold_cpu_s": round(cpu, 2), "peak_growth_mb": round(mem.total_mb, 1),
                "process_growth_mb": round(mem.process_mb, 1), "worker_peak_mb": round(mem.worker_mb, 1), "memory_method": mem.method,
                "warm_ms": ms(statistics.median(warm)), "after_one_ms": ms(statistics.median(after_one))}
    finally:
        svc.close()


def cmd_pressure(family: str, size: int, workdir: str) -> dict[str, Any]:
    from engine.compaction.compactor import RunState
    from engine.core.messages import assistant
    from engine.core.meter import default_meter
    from engine.core.surface import build_surface, envelope_of
    from engine.step import StepDriver
    from ours import MODEL, PROVIDER, policy, summary_budget
    from traces import generate

    trace = generate(family, size)
    window = WINDOW_1M if size >= 1_000_000 else 32_768 if size >= 100_000 else 8192
    root = Path(workdir)
    svc = _service(f"sqlite:///{root / 'pressure.db'}", root / "wd", policies=policy(window))
    key = "bench"
    try:
        svc.runs.create_thread(key, title=trace.name, system_prompt=trace.system_prompt, tools=trace.tools)
        run = None
        per_step: list[float] = []
        started = time.perf_counter()

        drv = StepDriver(svc.steps, key, PROVIDER, MODEL)  # each model step on the one step driver, as the harness runs it
        steps = 0
        pending: list[Any] = []  # tool results since the last step: the next step's intake

        def step(reply: Any = None) -> None:
            nonlocal steps
            steps += 1
            t0 = time.perf_counter()
            call = drv.prepare(run, steps, messages=pending)
            if call.outcome is not None and call.outcome.action == "none":
                per_step.append(time.perf_counter() - t0)
            pending.clear()
            drv.succeeded(call, run, prompt_tokens=call.measured.tokens, completion_tokens=100, messages=[reply] if reply is not None else [])

        for m in trace.messages:
            if m.role == "user":
                for p in pending:
                    svc.runs.append_message(key, p, run_id=run.run_id if run else None)
                pending.clear()
                if run is not None:
                    svc.runs.finish_run(key, run.run_id)
                svc.runs.append_message(key, m)
                run = RunState(run_id=svc.runs.start_run(key))
                continue
            if m.role == "assistant":
                step(m)
            elif run is None:
                svc.runs.append_message(key, m)
            else:
                pending.append(m)
        step()
        replay_s = time.perf_counter() - started
        assert run is not None
        snap = svc.store.snapshot(key)
        out: dict[str, Any] = {"trace": trace.name, "window": window, "replay_s": round(replay_s, 1), "messages_on_surface": len(snap.messages),
                               "incremental_wired": hasattr(svc.compactor, "_snapshot"), "per_step_replay_ms": ms(statistics.median(per_step)) if per_step else None}
        # the peers' check (the middleware's before_model below its trigger) on the same final surface
        surface = list(envelope_of(snap, build_surface(snap)).messages()[1:])  # the middleware's state holds no system prompt
        out["peers"] = _peer_checks(trace, window, surface, summary_budget(window))
        out["peers_after_append"] = _peer_checks_after_append(svc, window, surface, summary_budget(window))

        notes = run.ephemeral

        def cold() -> int:  # the same thread read and measured whole: what every check must give
            whole = svc.store.snapshot(key, with_busy=False)
            return default_meter(MODEL).measure(envelope_of(whole, build_surface(whole, ephemeral=notes))).total

        # the check itself (Compactor.pressure: read, measure, decide), as ours.py times it in the
        # head-to-head; "today" is the path before the cache (snapshots=None: read and measure whole)
        for label, cache, repeats in (("today", None, 20), ("incremental", svc.snapshots, 200)):
            svc.compactor.snapshots = cache
            svc.compactor.pressure(key, run)  # warm
            unchanged = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                o = svc.compactor.pressure(key, run)
                unchanged.append(time.perf_counter() - t0)
            assert o.reason == "below_threshold" and o.tokens_before == cold(), (o.reason, o.tokens_before)
            grown = []
            for i in range(min(repeats, 50)):
                svc.runs.append_message(key, assistant(f"{label} note {i}: still checking the results."), run_id=run.run_id)
                t0 = time.perf_counter()
                o = svc.compactor.pressure(key, run)
                grown.append(time.perf_counter() - t0)
            assert o.reason == "below_threshold" and o.tokens_before == cold(), (o.reason, o.tokens_before)
            out[label] = {"unchanged_ms": ms(statistics.median(unchanged)), "plus_one_ms": ms(statistics.median(grown)), "tokens": o.tokens_before,
                          "exact": True}
        return out
    finally:
        svc.close()


def _peer_checks(trace: Any, window: int, surface: list[Any], budget: int) -> dict[str, float | None]:
    """Median ms of each peer's per-step check on ``surface`` (None when the peers cannot run)."""
    import peers

    if peers.available() is not None:
        return {p: None for p in peers.STRATEGIES}
    return {p: ms(peers.pressure_check_times(trace, p, threshold=window * 4 // 5, keep=window * 16 // 100, summary_tokens=budget,
                                               messages=surface, repeats=50)) for p in peers.STRATEGIES}


def _peer_checks_after_append(svc: Any, window: int, surface: list[Any], budget: int, repeats: int = 50) -> dict[str, float | None]:
    """Median ms of each peer's per-step check timed as our "+1 message" figure is: right after one
    message was appended (to its state, and through ``svc`` the same message to a thread of its own,
    the append our figure follows), so both run on a machine whose caches the append just used. The
    figure beside ``_peer_checks``' (a loop of checks with nothing in between)."""
    import peers
    from engine.core.messages import assistant

    if peers.available() is not None:
        return {p: None for p in peers.STRATEGIES}
    scratch = "peer-appends"
    svc.runs.create_thread(scratch, title="the appends the peers' timing follows")
    out: dict[str, float | None] = {}
    for p in peers.STRATEGIES:
        mw, _ = peers.make_middleware(p, threshold=10**12, keep=window * 16 // 100, summary_tokens=budget)
        lc = [peers.to_lc(m, f"m{i}") for i, m in enumerate(surface)]
        times = []
        for i in range(repeats):
            m = assistant(f"{p} note {i}: still checking the results.")
            svc.runs.append_message(scratch, m)
            lc.append(peers.to_lc(m, f"n{i}"))
            t0 = time.perf_counter()
            assert mw.before_model({"messages": lc}, None) is None  # type: ignore[arg-type]
            times.append(time.perf_counter() - t0)
        out[p] = ms(statistics.median(times))
    return out


def cmd_writers(url: str, seconds: float, writers: int) -> dict[str, Any]:
    """``writers`` threads, each with its own store, appending to KEY until ``seconds`` pass."""
    from engine.core.messages import assistant, user
    from engine.store import Store

    stop = time.monotonic() + seconds
    counts = [0] * writers

    def write(i: int) -> None:
        store = Store.open(url)
        try:
            while time.monotonic() < stop:
                with store.locked(KEY) as tx:
                    tx.append_message((user if counts[i] % 2 == 0 else assistant)(f"writer {i} message {counts[i]}: order refund ticket"))
                counts[i] += 1
        finally:
            store.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"appended": sum(counts)}


def cmd_load(url: str, workdir: str, seconds: float, writers: int, mode: str) -> dict[str, Any]:
    svc = _service(url, Path(workdir), policies={"context_window": 128_000})
    try:
        svc.compaction.status("warmup")
        svc.compaction.status(KEY) if mode == "new" else old_status(svc, KEY)
        proc = subprocess.Popen([sys.executable, __file__, "writers", "--url", url, "--seconds", str(seconds), "--writers", str(writers)],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the writers are connected and appending
        samples = []
        end = time.monotonic() + seconds - 1.5
        while time.monotonic() < end:
            t0 = time.perf_counter()
            svc.compaction.status(KEY) if mode == "new" else old_status(svc, KEY)
            samples.append(time.perf_counter() - t0)
        out, _ = proc.communicate(timeout=seconds + 60)
        appended = json.loads(out.strip().splitlines()[-1])["appended"]
        samples.sort()
        return {"mode": mode, "samples": len(samples), "appended": appended, "p50_ms": ms(statistics.median(samples)),
                "p95_ms": ms(samples[int(len(samples) * 0.95) - 1]), "max_ms": ms(samples[-1])}
    finally:
        svc.close()


# -- the parent: every row in one run ------------------------------------------------------------------


#: the issue's figure for status under the 20-writer load (before the cache): p95 621 ms
ISSUE_LOAD_P95_MS = 621.0
PARTS = ("pressure", "status", "load")


#: the trace sizes the pressure check is measured at (every size the head-to-head runs)
PRESSURE_SIZES = (10_000, 100_000, 1_000_000)


def run(sizes: list[int], families: list[str], pg_url: str, load_seconds: float, baseline_max: int,
        parts: tuple[str, ...] | list[str] = PARTS, pressure_sizes: Sequence[int] = PRESSURE_SIZES) -> dict[str, Any]:
    results: dict[str, Any] = {"pressure": [], "status": [], "load": []}
    with tempfile.TemporaryDirectory(prefix="bench-incremental-") as tmp:
        for size in pressure_sizes if "pressure" in parts else ():
            for family in families:
                results["pressure"].append(child("pressure", "--family", family, "--size", str(size), "--workdir", str(Path(tmp) / f"p-{family}-{size}")))
                print(json.dumps(results["pressure"][-1]), file=sys.stderr)
        for n in sizes if "status" in parts else ():
            url = f"sqlite:///{Path(tmp) / f'status-{n}.db'}"
            built = child("build", "--url", url, "--n", str(n), "--workdir", str(Path(tmp) / "wd"))
            row = {"n": n, "build_s": built["build_s"], "new": child("status", "--url", url, "--workdir", str(Path(tmp) / "wd"), "--mode", "new")}
            row["uncounted"] = child("status", "--url", url, "--workdir", str(Path(tmp) / "wd"), "--mode", "uncounted")
            if n <= baseline_max:
                row["old"] = child("status", "--url", url, "--workdir", str(Path(tmp) / "wd"), "--mode", "old")
            results["status"].append(row)
            print(json.dumps(row), file=sys.stderr)
            Path(tmp, f"status-{n}.db").unlink(missing_ok=True)
        if "load" in parts:
            if not pg_url:
                results["load_skipped"] = "no PostgreSQL URL (--pg-url)"
                return results
            try:
                from store import temp_pg_database

                with temp_pg_database(pg_url) as url:
                    child("build", "--url", url, "--n", "20000", "--workdir", str(Path(tmp) / "wd"), timeout=600)
                    for mode in ("old", "new"):
                        results["load"].append(child("load", "--url", url, "--workdir", str(Path(tmp) / "wd"), "--seconds", str(load_seconds),
                                                     "--writers", "20", "--mode", mode, timeout=2 * load_seconds + 120))
                        print(json.dumps(results["load"][-1]), file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 - PostgreSQL unreachable (or a bounded run killed): reported in the row
                results["load_skipped"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    return results


def versus(ours: float, peer: float | None) -> str:
    """``ours ÷ peer`` as the head-to-head table words it: the ratio, then win / lose / tie (within 2 %)."""
    if peer is None or peer <= 0:
        return "n/a"
    ratio = ours / peer
    word = "tie" if abs(ratio - 1) <= 0.02 else "win" if ratio < 1 else "lose"
    return f"{ratio:.3g}× ({word})" if ratio < 100 else f"{ratio:,.0f}× ({word})"  # as the head-to-head table


def pressure_row(p: dict[str, Any]) -> list[str]:
    """The pressure check row of one trace: ours against the peers timed alike, after one appended
    message (each check right after the same append) and with nothing new (a loop of checks), and
    ours after +1 against the peers' loop too (the comparison that favours them), every ratio with
    its win or loss."""
    t, i = p["today"], p["incremental"]
    warm, after = p.get("peers") or {}, p.get("peers_after_append") or {}
    plus, unchanged = i["plus_one_ms"], i["unchanged_ms"]
    name = (f"Pressure check per step (Compactor.pressure), {p['trace']} final thread ({p['messages_on_surface']:,} messages on the surface, "
            f"window {p['window']:,})")
    tail = (f"both equal a cold measure ({i['tokens']:,} tokens); today {t['plus_one_ms']} / {t['unchanged_ms']} ms "
            f"({t['plus_one_ms'] / max(plus, 1e-9):.1f}× / {t['unchanged_ms'] / max(unchanged, 1e-9):.1f}×); replay {p['replay_s']} s"
            + ("" if p["incremental_wired"] else "; NOTE: the compactor does not read through the cache yet (both columns are today's path)"))
    if warm.get("chars/4") is None or after.get("chars/4") is None:
        return [name, f"after +1 message: ours {plus} ms · nothing new: ours {unchanged} ms", "peers not installed; " + tail]
    value = (f"after +1 message: ours {plus} · chars/4 {after['chars/4']} · LangChain {after['langchain']} ms; "
             f"nothing new: ours {unchanged} · chars/4 {warm['chars/4']} · LangChain {warm['langchain']} ms")
    notes = (f"timed alike: after +1, every check right after the same one-message append through the service (ours to this thread, "
             f"the peers' before_model to a thread of their own), ours ÷ chars/4 {versus(plus, after['chars/4'])}, "
             f"÷ LangChain {versus(plus, after['langchain'])}; nothing new, a loop of checks with nothing in between, "
             f"ours ÷ chars/4 {versus(unchanged, warm['chars/4'])}, ÷ LangChain {versus(unchanged, warm['langchain'])}; "
             f"ours after +1 against the peers' loop (no append before theirs): ÷ chars/4 {versus(plus, warm['chars/4'])}, "
             f"÷ LangChain {versus(plus, warm['langchain'])}; ")
    return [name, value, notes + tail]


def pressure_losses(r: dict[str, Any]) -> list[str]:
    """Bullets for the report's "Where we lose": every trace whose pressure check loses to a peer,
    timed alike (after +1, after the same append; nothing new, the peers' loop) and ours after +1
    against the peers' loop, with the structural reason once."""
    alike: list[str] = []
    loop: list[str] = []
    for p in r["pressure"]:
        i, warm, after = p["incremental"], p.get("peers") or {}, p.get("peers_after_append") or {}
        for peer, label in (("chars/4", "chars/4"), ("langchain", "LangChain")):
            if after.get(peer) is not None and versus(i["plus_one_ms"], after[peer]).endswith("(lose)"):
                alike.append(f"{p['trace']} after +1 to {label} ({versus(i['plus_one_ms'], after[peer]).removesuffix(' (lose)')})")
            if warm.get(peer) is not None and versus(i["unchanged_ms"], warm[peer]).endswith("(lose)"):
                alike.append(f"{p['trace']} with nothing new to {label} ({versus(i['unchanged_ms'], warm[peer]).removesuffix(' (lose)')})")
            if warm.get(peer) is not None and versus(i["plus_one_ms"], warm[peer]).endswith("(lose)"):
                loop.append(f"{p['trace']} to {label} ({versus(i['plus_one_ms'], warm[peer]).removesuffix(' (lose)')})")
    if not alike and not loop:
        return []
    said = []
    if alike:
        said.append("timed alike, we lose on " + ", ".join(alike) + ".")
    else:
        said.append("timed alike (after +1, each right after the same append; nothing new, a loop of checks) we lose nowhere.")
    if loop:
        said.append("Ours after +1 against the peers' loop of checks (no append before theirs) loses on " + ", ".join(loop) + ".")
    return ["- **Pressure check per step (Compactor.pressure, own figures)** — " + " ".join(said)
            + " Our check asks the database first (on SQLite its own connection's data_version, and the thread's version when "
            "another connection wrote) and measures the new message with the real tokenizer; the middleware counts the list it "
            "holds in memory, so on a short surface that count costs less than our read. The read is what lets another writer, "
            "a compaction by hand or the inspector change the thread between steps, and both answers equal a cold measure."]


def rows(r: dict[str, Any]) -> list[list[str]]:
    """Table rows (figure, value, notes) for docs/benchmarks.md."""
    out: list[list[str]] = []
    for p in r["pressure"]:
        out.append(pressure_row(p))
    for s in r["status"]:
        new, old = s["new"], s.get("old")
        vs = f"; today cold {old['cold_ms'] / 1000:.1f} s, +{old['peak_growth_mb']:.0f} MB, after one message {old['after_one_ms']:.0f} ms ({old['cold_ms'] / max(new['cold_ms'], 1e-9):.1f}× faster cold)" if old else ""
        mem = (f"this process +{new['process_growth_mb']:.0f} MB, worker processes {new['worker_peak_mb']:.0f} MB"
               if "process_growth_mb" in new else "")
        out.append([f"Status of a {s['n']:,}-message uncompacted thread (SQLite, fresh process)",
                     f"cold {new['cold_ms'] / 1000:.2f} s, peak +{new['peak_growth_mb']:.0f} MB · unchanged {new['warm_ms']} ms · after one new message {new['after_one_ms']} ms",
                     f"{new['tokens']:,} tokens; peak growth after the tokenizer's load: {mem} ({new.get('memory_method', '?')}); "
                     f"cold CPU {new.get('cold_cpu_s', '?')} s in this process; bulk build {s['build_s']} s (the door keeps each message's count){vs}"])
        if s.get("uncounted"):
            u = s["uncounted"]
            umem = f"this process +{u['process_growth_mb']:.0f} MB, worker processes {u['worker_peak_mb']:.0f} MB" if "process_growth_mb" in u else ""
            out.append([f"Status of the same {s['n']:,}-message thread without kept counts (a database from before migration 0003)",
                        f"cold {u['cold_ms'] / 1000:.2f} s, peak +{u['peak_growth_mb']:.0f} MB · after one new message {u['after_one_ms']} ms",
                        f"every row read whole and encoded (the stream worker reads and frames, its counting worker encodes); {umem}; cold CPU {u.get('cold_cpu_s', '?')} s in this process"])
    if len(r["status"]) > 1:
        by_n = sorted(r["status"], key=lambda x: x["n"])
        small, big = by_n[0], by_n[-1]
        out.append([f"Status peak memory growth, {small['n']:,} vs {big['n']:,} messages (one run)",
                    f"+{small['new']['peak_growth_mb']:.0f} MB vs +{big['new']['peak_growth_mb']:.0f} MB",
                    f"independent of length within {abs(big['new']['peak_growth_mb'] - small['new']['peak_growth_mb']):.0f} MB; "
                    f"cold {small['new']['cold_ms'] / 1000:.2f} s vs {big['new']['cold_ms'] / 1000:.2f} s (issue: 3.4 s / +164 MB vs 72 s / +1.47 GB)"])
    if r.get("load"):
        by = {x["mode"]: x for x in r["load"]}
        o, n = by.get("old"), by.get("new")
        if o and n:
            out.append(["Status under 20 writers, PostgreSQL (20,000-message thread growing)",
                        f"p50 {n['p50_ms']} · p95 {n['p95_ms']} · max {n['max_ms']} ms",
                        f"today p50 {o['p50_ms']} · p95 {o['p95_ms']} · max {o['max_ms']} ms (p95 {o['p95_ms'] / max(n['p95_ms'], 1e-9):.1f}× better); "
                        f"issue p95 {ISSUE_LOAD_P95_MS:.0f} ms ({ISSUE_LOAD_P95_MS / max(n['p95_ms'], 1e-9):.1f}× better); "
                        f"{n['samples']} / {o['samples']} polls, {n['appended']:,} / {o['appended']:,} messages appended"])
    elif r.get("load_skipped"):
        out.append(["Status under 20 writers, PostgreSQL", "skipped", r["load_skipped"]])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    b = sub.add_parser("build"); b.add_argument("--url"); b.add_argument("--n", type=int); b.add_argument("--workdir")
    s = sub.add_parser("status"); s.add_argument("--url"); s.add_argument("--workdir"); s.add_argument("--mode", choices=("old", "new", "uncounted"))
    p = sub.add_parser("pressure"); p.add_argument("--family"); p.add_argument("--size", type=int); p.add_argument("--workdir")
    w = sub.add_parser("writers"); w.add_argument("--url"); w.add_argument("--seconds", type=float); w.add_argument("--writers", type=int)
    lo = sub.add_parser("load"); lo.add_argument("--url"); lo.add_argument("--workdir"); lo.add_argument("--seconds", type=float); lo.add_argument("--writers", type=int); lo.add_argument("--mode")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--families", nargs="+", default=["research"])
    ap.add_argument("--pg-url", default=os.environ.get("COMPACTION_TEST_PG_URL") or "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--load-seconds", type=float, default=8.0)
    ap.add_argument("--skip-baseline-above", type=int, default=1_000_000, help="no 'today' status run for larger threads")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="which figures to measure")
    ap.add_argument("--pressure-sizes", type=int, nargs="+", default=list(PRESSURE_SIZES), help="trace sizes of the pressure check")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        print(json.dumps(cmd_build(args.url, args.n, args.workdir)))
    elif args.cmd == "status":
        print(json.dumps(cmd_status(args.url, args.workdir, args.mode)))
    elif args.cmd == "pressure":
        print(json.dumps(cmd_pressure(args.family, args.size, args.workdir)))
    elif args.cmd == "writers":
        print(json.dumps(cmd_writers(args.url, args.seconds, args.writers)))
    elif args.cmd == "load":
        print(json.dumps(cmd_load(args.url, args.workdir, args.seconds, args.writers, args.mode)))
    else:
        r = run(args.sizes, args.families, args.pg_url, args.load_seconds, args.skip_baseline_above, args.parts, args.pressure_sizes)
        print("| Figure | Value | Notes |\n|---|---|---|")
        for row in rows(r):
            print("| " + " | ".join(row) + " |")
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
