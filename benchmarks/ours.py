"""Our engine on the benchmark traces: the real service on a temp SQLite file, step by step.

Each trace is replayed as the harness runs it, on the one step driver (:class:`engine.step.StepDriver`
over ``svc.steps``): a user message starts a run; every assistant message is one model step:
:meth:`~engine.step.StepDriver.prepare` takes in the tool results since the last step, runs the
pressure check (and pressure compaction when it is due) and records the model request, then
:meth:`~engine.step.StepDriver.succeeded` completes it with the reference count as the provider's
usage and stores the assistant message. After the last message one more step gives the final
surface. The summarizer is the offline :class:`ExtractiveSummarizer`, counted.

Timings: ``pressure_per_step_s`` is the median of the driver's ``prepare`` on the steps that
compacted nothing (intake, pressure check and request record: one transaction);
``pressure_warm_s`` times ``Compactor.pressure`` alone on the final thread (nothing new: the held
snapshot's version check); ``pressure_cold_s`` the same after emptying the meter's cache (the held
snapshot keeps its counts, so nothing is encoded again); ``pressure_fresh_s`` a first check in a
fresh service on the same file (the thread read from the database, then counted).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from engine.compaction.compactor import Measured, RunState
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.protocol import SummaryRequest, SummaryResult
from engine.core.messages import Envelope, Message
from engine.core.meter import TokenMeter, default_meter
from engine.service import Service, open_service
from engine.step import StepDriver
from traces import Reference, Replay, Trace

PROVIDER, MODEL = "bench", "bench-model"  # not a known model: the window comes from the policy


def policy(window: int) -> dict[str, Any]:
    """The defaults of docs/contract.md §7 with the summary budget scaled to small windows."""
    return {"context_window": window, "default": {"summary_max_tokens": summary_budget(window)}}


def summary_budget(window: int) -> int:
    return min(8192, window // 8)


class CountingExtractive:
    """The offline extractive summarizer, counting its calls."""

    name = "extractive"

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        return self.inner.summarize(request)


def _open(root: Path, name: str, window: int, summarizer: CountingExtractive) -> Service:
    return open_service(f"sqlite:///{root / (name + '.db')}", workdir=root / f"wd-{name}", summarizer=summarizer, policies=policy(window), create=True)


def replay(trace: Trace, window: int, root: Path, ref: Reference) -> tuple[Replay, dict[str, float], Envelope]:
    """Replay ``trace`` through the engine; also time the pressure check cold and warm on the result.
    Returns the replay, the timings and the final envelope."""
    counter = CountingExtractive()
    svc = _open(root, trace.name, window, counter)
    out = Replay("ours", trace.name, window)
    key = "bench"
    pressure_times: list[float] = []
    try:
        svc.runs.create_thread(key, title=trace.name, system_prompt=trace.system_prompt, tools=trace.tools)
        run: RunState | None = None
        started = time.perf_counter()

        drv = StepDriver(svc.steps, key, PROVIDER, MODEL)
        steps = 0
        pending: list[Message] = []  # tool results since the last step: the next step's intake

        def step(reply: Message | None = None) -> Measured:
            nonlocal steps
            assert run is not None
            steps += 1
            t0 = time.perf_counter()
            call = drv.prepare(run, steps, messages=pending)
            if call.outcome is not None and call.outcome.action == "none":
                pressure_times.append(time.perf_counter() - t0)
            pending.clear()
            exact = ref.envelope(call.measured.envelope)
            drv.succeeded(call, run, prompt_tokens=exact, completion_tokens=100, messages=[reply] if reply is not None else [])
            out.observe(call.measured.envelope, ref, compacted=call.outcome is not None and call.outcome.progressed)
            return call.measured

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
            if m.role == "assistant":
                step(m)
            elif run is None:
                svc.runs.append_message(key, m)
            else:
                pending.append(m)
            out.saw(m)
        final = step()
        out.seconds = time.perf_counter() - started
        out.summarizer_calls = counter.calls
        out.finish(trace, final.envelope, ref)

        # the pressure check on the final thread: cold (empty meter cache) and warm
        assert run is not None
        colds = []  # after emptying the meter's cache (the held snapshot keeps its counts: the run_all row says so)
        for _ in range(3):
            default_meter(MODEL).clear_cache()
            t0 = time.perf_counter()
            svc.compactor.pressure(key, run)
            colds.append(time.perf_counter() - t0)
        fresh_times = []  # a first check in a fresh service on the same file: the thread read from the database and counted
        for _ in range(3):
            fresh = _open(root, trace.name, window, counter)
            try:
                default_meter(MODEL).clear_cache()
                t0 = time.perf_counter()
                fresh.compactor.pressure(key, run)
                fresh_times.append(time.perf_counter() - t0)
            finally:
                fresh.close()
        warm = []
        for _ in range(20):
            t0 = time.perf_counter()
            svc.compactor.pressure(key, run)
            warm.append(time.perf_counter() - t0)
        timings = {
            "pressure_cold_s": min(colds),
            "pressure_fresh_s": min(fresh_times),
            "pressure_warm_s": statistics.median(warm),
            "pressure_per_step_s": statistics.median(pressure_times) if pressure_times else float("nan"),
        }
        return out, timings, final.envelope
    finally:
        svc.close()


def manual(trace: Trace, window: int, root: Path, ref: Reference) -> dict[str, float]:
    """Manual compaction end to end of the whole (idle) trace: row lock, summarizer, commit."""
    counter = CountingExtractive()
    svc = _open(root, f"{trace.name}-manual-{window}", window, counter)
    key = "manual"
    try:
        svc.runs.create_thread(key, title=trace.name, system_prompt=trace.system_prompt, tools=trace.tools, provider=PROVIDER, model=MODEL)
        with svc.store.locked(key) as tx:
            tx.bulk_append(trace.messages)
        t0 = time.perf_counter()
        result = svc.compaction.compact(key)
        seconds = time.perf_counter() - t0
        env = svc.steps.measure(key).envelope
        return {"seconds": seconds, "calls": counter.calls, "tokens_after": ref.envelope(env), "request_present": trace.current_request in "\n".join(m.content for m in env.messages()), "status": result.status}
    finally:
        svc.close()


def meter_times(trace: Trace, repeats: int = 3) -> dict[str, float]:
    """Our meter on the raw trace envelope: the count, cold time (fresh cache) and warm re-measure."""
    env = trace.envelope()
    meter = TokenMeter("cl100k_base")
    colds = []
    total = 0
    for _ in range(repeats):
        meter.clear_cache()
        t0 = time.perf_counter()
        total = meter.measure(env).total
        colds.append(time.perf_counter() - t0)
    grown = [trace.envelope(trace.messages + (trace.messages[0].with_content(f"follow-up {i}: 还有超时吗？"),)) for i in range(repeats)]
    warms = []
    for g in grown:
        t0 = time.perf_counter()
        meter.measure(g)
        warms.append(time.perf_counter() - t0)
    return {"tokens": total, "cold_s": min(colds), "warm_s": min(warms)}
