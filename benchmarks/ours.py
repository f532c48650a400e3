"""Our engine on the benchmark traces: the real service on a temp SQLite file, step by step.

Each trace is replayed as the harness runs it: a user message starts a run; before every model step
``Compactor.pressure`` runs (with the run's :class:`RunState`), the envelope is measured, and a
completed model request is recorded (so the thread is routed and eligible for pressure compaction);
then the assistant message and its tool results are appended through the store. After the last
message one more pre-step check gives the final surface. The summarizer is the offline
:class:`ExtractiveSummarizer`, counted.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from engine.compactor import RunState
from engine.messages import Envelope
from engine.meter import TokenMeter, default_meter
from engine.service import Service, open_service
from engine.summarizers.extractive import ExtractiveSummarizer
from engine.summarizers.protocol import SummaryRequest, SummaryResult
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

        def step() -> Any:
            assert run is not None
            t0 = time.perf_counter()
            outcome = svc.compactor.pressure(key, run)
            if outcome.action == "none":
                pressure_times.append(time.perf_counter() - t0)
            measured = svc.steps.measure(key, ephemeral=run.ephemeral)
            exact = ref.envelope(measured.envelope)
            rid = svc.store.record_model_request(key, provider=PROVIDER, model=MODEL, run_id=run.run_id, estimated_tokens=measured.tokens)
            svc.store.complete_model_request(rid, outcome="ok", reported_prompt_tokens=exact, reported_completion_tokens=100)
            out.observe(measured.envelope, ref, compacted=outcome.progressed)
            return measured

        for m in trace.messages:
            if m.role == "user":
                if run is not None:
                    svc.runs.finish_run(key, run.run_id)  # type: ignore[arg-type]
                svc.runs.append_message(key, m)
                run = RunState(run_id=svc.runs.start_run(key))
                continue
            if m.role == "assistant":
                step()
            svc.runs.append_message(key, m, run_id=run.run_id if run else None)
            out.saw(m)
        final = step()
        out.seconds = time.perf_counter() - started
        out.summarizer_calls = counter.calls
        out.finish(trace, final.envelope, ref)

        # the pressure check on the final thread: cold (empty meter cache) and warm
        assert run is not None
        colds = []
        for _ in range(3):
            default_meter(MODEL).clear_cache()
            t0 = time.perf_counter()
            svc.compactor.pressure(key, run)
            colds.append(time.perf_counter() - t0)
        warm = []
        for _ in range(20):
            t0 = time.perf_counter()
            svc.compactor.pressure(key, run)
            warm.append(time.perf_counter() - t0)
        timings = {
            "pressure_cold_s": min(colds),
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
