"""Benchmark of the compaction engine, end to end through ``engine.service`` on SQLite files.

Run: ``.venv/bin/python benchmarks/compaction.py``.

(a) Manual compaction of a ~100k-token idle thread with the offline extractive summarizer: wall
    time, tokens before/after, messages compacted, summarizer calls.
(b) A seeded tool-heavy agent trace (query_kb / web_search JSON results and big logs, many steps
    over several user turns). Before each model step the pressure path runs, as the harness does.
    "prune first (engine)" is the engine as the harness runs it (one RunState per run, so the
    breaker can stop repeated attempts); "prune first, every step" gives each step a fresh RunState;
    the baseline is the same trace with the same threshold and no pruning (a tool-result limit
    nothing reaches) and a fresh RunState each step, i.e. summarize every time the threshold is
    reached. The summarizer call counts and the calls avoided are printed.
Deterministic: same seed, same trace, same numbers (only the times vary).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.compaction.compactor import RunState  # noqa: E402
from engine.compaction.summarizers.extractive import ExtractiveSummarizer  # noqa: E402
from engine.compaction.summarizers.protocol import Summarizer, SummaryRequest, SummaryResult  # noqa: E402
from engine.core.messages import Message, ToolCall, assistant, tool_result, user  # noqa: E402
from engine.core.meter import default_meter  # noqa: E402
from engine.service import Service, open_service  # noqa: E402

SEED = 20261130
WORDS = (
    "cluster replica latency budget quota ticket owner region invoice refund policy schema index "
    "migration rollback deploy canary alert threshold incident customer contract renewal audit "
    "report export archive retention backup restore shard partition cache eviction timeout retry"
).split()


class CountingSummarizer:
    """The extractive summarizer, counting calls."""

    name = "extractive"

    def __init__(self) -> None:
        self.inner: Summarizer = ExtractiveSummarizer()
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        return self.inner.summarize(request)


def prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def kb_result(rng: random.Random, n: int) -> str:
    return json.dumps(
        {
            "query": prose(rng, 5),
            "total": n,
            "results": [
                {
                    "doc_id": f"doc-{rng.randrange(10_000)}",
                    "chunk_id": f"chunk-{rng.randrange(100_000)}",
                    "kb_id": "kb-support",
                    "title": prose(rng, 6),
                    "score": round(rng.random(), 4),
                    "content": prose(rng, rng.randint(60, 140)),
                    "_internal": {"embedding_norm": rng.random(), "shard": rng.randrange(64)},
                }
                for _ in range(n)
            ],
        }
    )


def web_result(rng: random.Random, n: int) -> str:
    return json.dumps(
        {
            "results": [
                {
                    "url": f"https://example-{rng.randrange(500)}.com/{rng.choice(WORDS)}/{rng.randrange(10**6)}",
                    "title": prose(rng, 7),
                    "site": f"example-{rng.randrange(500)}.com",
                    "published": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    "score": round(rng.random(), 3),
                    "snippet": prose(rng, rng.randint(40, 90)),
                }
                for _ in range(n)
            ]
        }
    )


def log_result(rng: random.Random, lines: int) -> str:
    levels = ("INFO", "INFO", "INFO", "WARN", "ERROR")
    return "\n".join(
        f"2026-11-30T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z "
        f"{rng.choice(levels):5} worker-{rng.randrange(16)} {rng.choice(WORDS)} {rng.choice(WORDS)} id={rng.randrange(10**8)} "
        f"took {rng.randrange(2000)}ms"
        for _ in range(lines)
    )


# -- (a) manual compaction of a ~100k-token thread -------------------------------------------------


def long_thread_messages(rng: random.Random, target_tokens: int, meter_count) -> list[Message]:
    out: list[Message] = []
    total = 0
    i = 0
    while total < target_tokens:
        call = ToolCall(f"call-{i}", "query_kb", json.dumps({"query": prose(rng, 5)}))
        turn = [
            user(f"Request {i}: {prose(rng, 25)}"),
            assistant("Searching the knowledge base.", call),
            tool_result(call.id, kb_result(rng, 6), name="query_kb"),
            assistant(prose(rng, 180)),
        ]
        total += sum(meter_count(m) for m in turn)
        out += turn
        i += 1
    return out


def bench_manual(root: Path) -> dict[str, Any]:
    summarizer = CountingSummarizer()
    svc = open_service(f"sqlite:///{root / 'manual.db'}", workdir=root / "wd-manual", summarizer=summarizer, policies={"context_window": 128_000}, create=True)
    try:
        svc.runs.create_thread("long", title="a ~100k-token thread", system_prompt="You are a support agent.")
        meter = default_meter(None)
        msgs = long_thread_messages(random.Random(SEED), 100_000, meter.count_message)
        with svc.store.locked("long") as tx:
            tx.append_messages(msgs)
        before = svc.compaction.status("long").tokens
        started = time.perf_counter()
        r = svc.compaction.compact("long")
        elapsed = time.perf_counter() - started
        assert r.status == "completed" and svc.compaction.status("long").tokens == r.after_tokens
        return {
            "messages": len(msgs),
            "tokens_before": before,
            "tokens_after": r.after_tokens,
            "compacted": r.compacted_messages,
            "calls": r.summarizer_calls,
            "generation": r.generation,
            "seconds": elapsed,
        }
    finally:
        svc.close()


# -- (b) pressure path over a tool-heavy trace ------------------------------------------------------


@dataclass
class Step:
    calls: list[tuple[str, str, str]]  # (tool, arguments, result)
    note: str


@dataclass
class Turn:
    request: str
    steps: list[Step]
    answer: str


def build_trace(seed: int, turns: int) -> list[Turn]:
    rng = random.Random(seed)
    trace: list[Turn] = []
    for t in range(turns):
        steps: list[Step] = []
        for s in range(rng.randint(6, 12)):
            calls = []
            for _ in range(rng.choice((1, 1, 2))):
                kind = rng.choice(("query_kb", "query_kb", "web_search", "read_log"))
                if kind == "query_kb":
                    result = kb_result(rng, rng.randint(3, 22))
                elif kind == "web_search":
                    result = web_result(rng, rng.randint(4, 25))
                else:
                    result = log_result(rng, rng.randint(60, 420))
                calls.append((kind, json.dumps({"query": prose(rng, 4)}), result))
            steps.append(Step(calls, f"Step {s}: {prose(rng, 20)}"))
        trace.append(Turn(f"Task {t}: {prose(rng, 30)}", steps, prose(rng, 120)))
    return trace


@dataclass
class TraceStats:
    calls: int = 0
    prunes: int = 0
    summaries: int = 0
    pressure_events: int = 0
    over_threshold_after: int = 0
    steps: int = 0
    max_tokens: int = 0
    seconds: float = 0.0
    tokens: list[int] = field(default_factory=list)


def run_trace(root: Path, name: str, trace: list[Turn], policy: dict[str, Any], *, breaker_per_run: bool) -> TraceStats:
    """Replay ``trace``; the pressure path runs before every model step. ``breaker_per_run=False``
    gives every step a fresh RunState, so no breaker ever stops an attempt ("every time")."""
    summarizer = CountingSummarizer()
    # same-length names: the saved path appears in previews, so it must not change token counts
    svc: Service = open_service(f"sqlite:///{root / (name + '.db')}", workdir=root / f"wd-{name}", summarizer=summarizer, policies=policy, create=True)
    stats = TraceStats()
    key = "trace"
    try:
        svc.runs.create_thread(key, title="tool-heavy trace", system_prompt="You are a research agent.")
        started = time.perf_counter()
        n = 0

        def model_step(run: RunState) -> None:
            nonlocal n
            out = svc.steps.compact_for_pressure(key, run if breaker_per_run else RunState(run_id=run.run_id))
            stats.steps += 1
            if out.tokens_before >= out.threshold:
                stats.pressure_events += 1
            if out.tokens_after >= out.threshold:
                stats.over_threshold_after += 1
            stats.max_tokens = max(stats.max_tokens, out.tokens_before)
            rid = svc.steps.record_model_request(key, provider="sim", model="sim-1", run_id=run.run_id, step=n, estimated_tokens=out.tokens_after)
            svc.steps.complete_model_request(key, rid, outcome="ok", reported_prompt_tokens=out.tokens_after, reported_completion_tokens=50)
            n += 1

        for t, turn in enumerate(trace):
            svc.runs.append_message(key, user(turn.request))
            run_id = svc.runs.start_run(key)
            run = RunState(run_id=run_id)
            for s, step in enumerate(turn.steps):
                model_step(run)
                calls = [ToolCall(f"t{t}-s{s}-c{i}", tool, args) for i, (tool, args, _) in enumerate(step.calls)]
                svc.runs.append_message(key, assistant(step.note, *calls), run_id=run_id)
                for call, (_, _, result) in zip(calls, step.calls):
                    svc.runs.append_message(key, tool_result(call.id, result, name=call.name), run_id=run_id)
            model_step(run)
            svc.runs.append_message(key, assistant(turn.answer), run_id=run_id)
            svc.runs.finish_run(key, run_id)
        stats.seconds = time.perf_counter() - started
        stats.calls = summarizer.calls
        history = svc.reads.history(key)
        stats.prunes = sum(1 for h in history if h.kind == "prune")
        stats.summaries = sum(1 for h in history if h.kind == "summary")
        return stats
    finally:
        svc.close()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as tmp:
        root = Path(tmp)
        a = bench_manual(root)
        print("(a) manual compaction, ~100k-token thread, extractive summarizer, SQLite file")
        print(f"{'messages':>9} {'tokens before':>14} {'tokens after':>13} {'compacted':>10} {'calls':>6} {'generation':>11} {'time':>9}")
        print(
            f"{a['messages']:>9} {a['tokens_before']:>14,} {a['tokens_after']:>13,} {a['compacted']:>10} {a['calls']:>6} "
            f"{a['generation']:>11} {a['seconds'] * 1000:>7.0f} ms"
        )
        print()

        window = 32_000
        trace = build_trace(SEED, turns=14)
        n_steps = sum(len(t.steps) + 1 for t in trace)
        n_results = sum(len(s.calls) for t in trace for s in t.steps)
        engine_policy = {"context_window": window}
        baseline_policy = {"context_window": window, "default": {"tool_result_limit_tokens": 10**9}}
        rows = [
            ("prune first (engine)", run_trace(root, "trace-1", trace, engine_policy, breaker_per_run=True)),
            ("prune first, every step", run_trace(root, "trace-2", trace, engine_policy, breaker_per_run=False)),
            ("baseline: summarize only", run_trace(root, "trace-3", trace, baseline_policy, breaker_per_run=False)),
        ]
        print(f"(b) pressure path before each model step: {len(trace)} turns, {n_steps} model steps, {n_results} tool results, window {window:,}, threshold {window * 4 // 5:,}")
        print(f"{'policy':<26} {'summarizer calls':>17} {'prunes':>7} {'summaries':>10} {'steps >= threshold':>19} {'still >= after':>15} {'max before':>11} {'time':>8}")
        for label, st in rows:
            print(
                f"{label:<26} {st.calls:>17} {st.prunes:>7} {st.summaries:>10} {st.pressure_events:>19} {st.over_threshold_after:>15} "
                f"{st.max_tokens:>11,} {st.seconds:>6.1f} s"
            )
        base = rows[-1][1].calls
        for label, st in rows[:-1]:
            avoided = base - st.calls
            print(f"summarizer calls avoided vs the baseline, {label}: {avoided} of {base} ({avoided / base if base else 0:.0%})")
        print("(steps >= threshold: envelope at or above the threshold when the pressure path ran; still >= after: it could not bring it below; max before: the largest envelope it was handed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
