"""Our LangChain ``CompactionMiddleware`` against LangChain's own ``SummarizationMiddleware``, both in
a real ``create_agent`` loop on the benchmark traces (issue 15).

Run: ``.venv/bin/python benchmarks/adapters_langchain.py [--sizes 10000,100000] [--families ...]``
(``run_all.py`` can run it as a subprocess: :func:`section`). Prints one JSON line per run
(``{"bench": "adapters_langchain", ...}``) and a last ``{"bench": "adapters_langchain", "summary": ...}``.

How a trace is driven: a ``ChatOpenAI`` model talks over a socket to the loopback
``ProviderSimulator``, scripted with the trace's assistant messages (text and tool calls), so the
agent replays the trace's rounds; the trace's tools are LangChain tools that return the trace's
tool outputs for the call's arguments; each user turn is one ``agent.invoke`` on one LangGraph
thread (``InMemorySaver``), so the state carries over as in a real multi-turn agent. The running
last turn ends with one more scripted answer. The simulator accepts any size (its window is huge):
steps "over the window" are counted, not refused, so both strategies replay the same rounds.

- **ours**: ``CompactionMiddleware(service=...)`` on a temp SQLite file, the policy of
  ``benchmarks/ours.py`` (window per trace size, threshold 0.8, summary budget min(8192, window/8)),
  the offline ``ExtractiveSummarizer`` (counted).
- **langchain**: ``SummarizationMiddleware(model, trigger=("tokens", 0.8 × window),
  keep=("tokens", 0.16 × window))`` with its default counter and ``trim_tokens_to_summarize``, as in
  ``benchmarks/peers.py``. Its summary model is the deterministic in-process chat model of
  ``peers.py`` (it answers the summary prompt with our extractive summary under the same budget):
  ours summarizes in process too, so neither side pays a network round trip for a summary and
  summary quality is equal.
- **failure variant**: the summarizer fails on every call (ours: ``SummarizerError``; LangChain's:
  the summary chat model raises, and the middleware's own ``with_retry`` tries 3 times).

Measured per run: the middleware's overhead per model call (ours: ``wrap_model_call`` minus the
model call it wraps; LangChain's: its ``before_model`` hook, summary calls included on both sides;
ours also the median number of SQL statements it ran per call, ``statements_median``),
summarizer calls, model requests the simulator measured (our meter on the wire request, system
prompt and tool schemas included) above the window, the traces' identifiers seen so far that are
visible in the request right after each compaction, and messages that were once in the agent's
state but are gone from its final state with no summary of them (``lost``), plus whether the
agent's runs all completed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import traces  # noqa: E402
from engine.core.specifics import expand_grouped  # noqa: E402
from traces import IDENTIFIER, Trace  # noqa: E402

MODEL = "sim-model"
WINDOWS = {10_000: 8_192, 100_000: 32_768, 1_000_000: 131_072}
SIZES = (10_000, 100_000)
TAG = "adapters_langchain"


def available() -> str | None:
    """``None`` when LangChain (agents, OpenAI integration, LangGraph) is installed, else why not."""
    try:
        import langchain.agents  # noqa: F401
        import langchain_openai  # noqa: F401
        import langgraph.checkpoint.memory  # noqa: F401
    except ImportError as exc:
        return f"{exc.name or exc} is not installed: .venv/bin/pip install -e '.[langchain,bench-peers]'"
    return None


# -- the trace as an agent ---------------------------------------------------------------------------


def _canon(args: Any) -> str:
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


class TraceTools:
    """The trace's tools as LangChain tools: each returns the trace's output for its call's
    arguments (in order when the same call repeats) and records the identifiers it showed."""

    def __init__(self, trace: Trace) -> None:
        self.outputs: dict[tuple[str, str], deque[str]] = defaultdict(deque)
        calls = {c.id: c for m in trace.messages for c in m.tool_calls}
        for m in trace.messages:
            if m.role == "tool":
                c = calls[m.tool_call_id or ""]
                self.outputs[(c.name, _canon(c.parsed_arguments() or {}))].append(m.content)
        self.seen: set[str] = set()
        self.tools = [self._tool(dict(t)["function"]) for t in trace.tools]

    def _tool(self, fn: dict[str, Any]) -> Any:
        from langchain_core.tools import StructuredTool

        name = fn["name"]

        def run(**kwargs: Any) -> str:
            queue = self.outputs.get((name, _canon(kwargs)))
            if not queue:
                raise RuntimeError(f"the trace has no output for {name}({kwargs})")
            out = queue.popleft()
            self.seen.update(IDENTIFIER.findall(out))
            return out

        return StructuredTool.from_function(run, name=name, description=fn["description"], args_schema=fn["parameters"])


def script(trace: Trace) -> list[Any]:
    """The simulator's replies: every assistant message of the trace, then the end of the running turn."""
    from engine.apps.harness.simulator import Reply

    replies = [Reply(content=m.content, tool_calls=tuple((c.name, c.parsed_arguments() or {}) for c in m.tool_calls)) for m in trace.messages if m.role == "assistant"]
    return replies + [Reply(content="(the benchmark trace ends here)")]


def turns(trace: Trace) -> list[str]:
    return [m.content for m in trace.messages if m.role == "user"]


# -- the two middlewares, timed ---------------------------------------------------------------------


class Probe:
    """What one run saw at every model call: the middleware's own time, whether it had just
    compacted, the identifiers tools had shown so far, and every message id the state ever held."""

    def __init__(self, tools: TraceTools) -> None:
        self.tools = tools
        self.overhead: list[float] = []
        #: ours only: the middleware's CPU time per call (this thread's; a loaded machine inflates it less than wall time)
        self.cpu: list[float] = []
        self.compacted: list[bool] = []
        self.seen: list[frozenset[str]] = []
        self.ever: set[str] = set()
        #: LangChain only: ids it removed from the state that its summary call was not shown (all of
        #: them when it wrote the placeholder sentence without a call)
        self.unsummarized: set[str] = set()
        self.placeholders = 0
        #: ours only: SQL statements the middleware ran per model call (its compactions' included)
        self.statements: list[int] = []

    def call(self, overhead: float, compacted: bool) -> None:
        self.overhead.append(overhead)
        self.compacted.append(compacted)
        self.seen.append(frozenset(self.tools.seen))


def ours_middleware(svc: Any, key: str, probe: Probe) -> Any:
    from sqlalchemy import event

    from engine.adapters.langchain import CompactionMiddleware

    counting = [False]

    def count(*_: Any) -> None:
        if counting[0]:
            probe.statements[-1] += 1

    event.listen(svc.store.engine, "before_cursor_execute", count)  # SQL statements per model call (ours only)

    class TimedCompaction(CompactionMiddleware):
        generation = 0

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            outside = outside_cpu = 0.0
            compacted = False

            def timed(req: Any) -> Any:
                nonlocal outside, outside_cpu, compacted
                t, c = time.perf_counter(), time.thread_time()
                counting[0] = False  # the probe's own read below is not the middleware's
                probe.ever.update(m.id for m in request.messages)
                gen = svc.reads.compaction_state(key).generation
                compacted, self.generation = gen > self.generation, gen
                try:
                    return handler(req)
                finally:
                    outside += time.perf_counter() - t
                    outside_cpu += time.thread_time() - c
                    counting[0] = True

            probe.statements.append(0)
            counting[0] = True
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return super().wrap_model_call(request, timed)
            finally:
                probe.cpu.append(time.thread_time() - c0 - outside_cpu)
                probe.call(time.perf_counter() - t0 - outside, compacted)
                counting[0] = False

    return TimedCompaction(service=svc, thread=key, title="benchmark: LangChain agent on our engine")


def langchain_middleware(threshold: int, keep: int, summary_tokens: int, probe: Probe, *, fail: bool) -> tuple[Any, Any]:
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.messages import RemoveMessage

    import peers

    model = failing_chat_model() if fail else peers.make_chat_model(summary_tokens)

    class TimedSummarization(SummarizationMiddleware):
        excluded = 0.0
        shown: set[str] = set()

        def before_model(self, state: Any, runtime: Any) -> Any:
            self.excluded, self.shown = 0.0, set()
            t0 = time.perf_counter()
            try:
                update = super().before_model(state, runtime)
            except BaseException:
                probe.call(time.perf_counter() - t0 - self.excluded, False)
                raise
            probe.call(time.perf_counter() - t0 - self.excluded, update is not None)
            before = {m.id for m in state["messages"] if m.id and not is_summary(m)}  # ids set by the hook
            probe.ever |= before
            if update is not None:  # RemoveMessage(ALL), the summary, the kept tail
                new = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
                probe.unsummarized |= before - {m.id for m in new} - self.shown
                probe.placeholders += any(is_summary(m) and PLACEHOLDER in m.text for m in new)
            return update

        def _create_summary(self, messages_to_summarize: list[Any]) -> str:
            # instrumentation, not timed: which messages the summary call is shown (the middleware
            # trims them to its last ``trim_tokens_to_summarize`` tokens, starting on a human message)
            t = time.perf_counter()
            self.shown = {m.id for m in self._trim_messages_for_summary(messages_to_summarize) if m.id}
            self.excluded += time.perf_counter() - t
            return super()._create_summary(messages_to_summarize)

    mw = TimedSummarization(model, trigger=("tokens", threshold), keep=("tokens", keep))
    return mw, model


#: what SummarizationMiddleware writes when the last ``trim_tokens_to_summarize`` tokens hold no human message
PLACEHOLDER = "Previous conversation was too long to summarize."


def is_summary(m: Any) -> bool:
    return bool((getattr(m, "additional_kwargs", None) or {}).get("lc_source") == "summarization")


def failing_chat_model() -> Any:
    """A summary chat model whose every call fails, as a provider outage does."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatResult

    class FailingChatModel(BaseChatModel):
        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "failing-fake"

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            self.calls += 1
            raise RuntimeError("summary model unavailable (HTTP 503)")

    return FailingChatModel()


class FailingSummarizer:
    """Our summarizer protocol, failing every call (counted)."""

    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: Any) -> Any:
        from engine.compaction.summarizers.protocol import SummarizerError

        self.calls += 1
        raise SummarizerError("summary model unavailable", "http_error", status=503)


# -- one run -------------------------------------------------------------------------------------------


def run(trace: Trace, strategy: str, root: Path, *, fail: bool = False) -> dict[str, Any]:
    """Drive ``trace`` through a real ``create_agent`` loop with ``strategy``'s middleware."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    import ours
    from engine.apps.harness.simulator import ProviderSimulator
    from engine.service import open_service

    window = WINDOWS[trace.size]
    threshold, keep, budget = window * 4 // 5, window * 16 // 100, ours.summary_budget(window)
    tools = TraceTools(trace)
    probe = Probe(tools)
    key = f"{trace.name}-{strategy}{'-fail' if fail else ''}"
    svc = summarizer = None
    if strategy == "ours":
        summarizer = FailingSummarizer() if fail else ours.CountingExtractive()
        svc = open_service(f"sqlite:///{root / (key + '.db')}", workdir=root / f"wd-{key}", summarizer=summarizer, policies=ours.policy(window), create=True)
        mw: Any = ours_middleware(svc, key, probe)
    elif strategy == "langchain":
        mw, summarizer = langchain_middleware(threshold, keep, budget, probe, fail=fail)
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    config = {"configurable": {"thread_id": key}, "recursion_limit": 100_000}
    completed, error = 0, None
    started = time.perf_counter()
    try:
        with ProviderSimulator(context_window=10**9, model=MODEL) as sim:
            sim.script(script(trace))
            model = ChatOpenAI(model=MODEL, base_url=sim.base_url, api_key="sim-key", max_retries=0, timeout=120)
            agent = create_agent(model, tools.tools, system_prompt=trace.system_prompt, middleware=[mw], checkpointer=InMemorySaver())
            for text in turns(trace):
                try:
                    agent.invoke({"messages": [HumanMessage(text)]}, config)
                except Exception as exc:  # noqa: BLE001 - the agent cannot go on: the rest of the trace is not replayed
                    error = f"{type(exc).__name__}: {exc}"
                    break
                completed += 1
            seconds = time.perf_counter() - started
            final = agent.get_state(config).values.get("messages", [])
            requests = [r for r in sim.requests if r.outcome == "ok"]
        stored = svc.reads.message_count(key) if svc is not None else None
    finally:
        if svc is not None:
            svc.close()
    return score(trace, strategy, fail, probe, requests, final, summarizer, window, completed, error, seconds, stored)


def request_text(value: Any) -> str:
    """Every string of a wire request's ``messages`` (contents, text parts, tool-call arguments), one
    per line, so a summary's grouped identifier lines (``dir/{a,b}.py``) read as their members through
    :func:`engine.core.specifics.expand_grouped` (the rule the engine writes them by), as the other
    benchmarks' checks read them."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(request_text(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return "\n".join(request_text(v) for v in value)
    return "" if value is None else str(value)


def score(trace: Trace, strategy: str, fail: bool, probe: Probe, requests: Sequence[Any], final: Sequence[Any], summarizer: Any, window: int, completed: int, error: str | None, seconds: float, stored: int | None) -> dict[str, Any]:
    allowed = {len(probe.overhead), len(probe.overhead) - 1} if error else {len(probe.overhead)}  # a raising hook sent nothing
    if len(requests) not in allowed:
        raise RuntimeError(f"{trace.name}/{strategy}: {len(requests)} model requests for {len(probe.overhead)} middleware calls ({error})")
    kept: list[float] = []
    for i, r in enumerate(requests):
        if probe.compacted[i] and probe.seen[i]:
            visible = probe.seen[i].intersection(IDENTIFIER.findall(expand_grouped(request_text(r.body.get("messages")))))
            kept.append(len(visible) / len(probe.seen[i]))
    summary_ids = {m.id for m in final if is_summary(m)}
    final_ids = {m.id for m in final} - summary_ids
    removed = probe.ever - final_ids
    compactions = sum(probe.compacted)
    # ours never removes anything from the state; LangChain removes what it summarized, what it
    # trimmed away before the summary call and, with the placeholder sentence, all it cut (lost)
    lost = len(removed) if strategy == "ours" else len(probe.unsummarized)
    return {
        "bench": TAG,
        "trace": trace.name,
        "strategy": strategy,
        "variant": "summarizer fails" if fail else "normal",
        "window": window,
        "turns": len(turns(trace)),
        "turns_completed": completed,
        "error": error,
        "model_calls": len(requests),
        "overhead_median_ms": statistics.median(probe.overhead) * 1e3 if probe.overhead else None,
        "overhead_mean_ms": statistics.mean(probe.overhead) * 1e3 if probe.overhead else None,
        "overhead_max_ms": max(probe.overhead) * 1e3 if probe.overhead else None,
        "statements_median": statistics.median(probe.statements) if probe.statements else None,
        "cpu_median_ms": statistics.median(probe.cpu) * 1e3 if probe.cpu else None,
        "summarizer_calls": summarizer.calls,
        "compactions": compactions,
        "steps_over_window": sum(1 for r in requests if r.prompt_tokens is not None and r.prompt_tokens > window),
        "peak_prompt_tokens": max((r.prompt_tokens or 0 for r in requests), default=0),
        "identifiers_kept_after_compaction": statistics.mean(kept) if kept else None,
        "compactions_scored": len(kept),
        "state_messages_ever": len(probe.ever),
        "state_messages_final": len(final_ids),
        "removed_from_state": len(removed),
        "lost": lost,
        "placeholder_replacements": probe.placeholders,
        "stored_messages": stored,
        "seconds": seconds,
    }


def lost_messages(r: dict[str, Any]) -> int:
    """Messages gone from the agent's state with no summary of them (see :func:`score`)."""
    return int(r["lost"])


# -- the whole benchmark -----------------------------------------------------------------------------


def bench(sizes: Sequence[int] = SIZES, families: Sequence[str] = traces.FAMILIES, *, emit: Callable[[dict[str, Any]], None] = lambda r: None) -> list[dict[str, Any]]:
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-lc-") as tmp:
        for size in sizes:
            for family in families:
                trace = traces.generate(family, size)
                for fail in (False, True):
                    for strategy in ("ours", "langchain"):
                        r = run(trace, strategy, Path(tmp), fail=fail)
                        emit(r)
                        out.append(r)
    return out


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The row values per strategy: normal runs for the first four, failure runs for the last two."""
    out: dict[str, Any] = {}
    for s in ("ours", "langchain"):
        normal = [r for r in results if r["strategy"] == s and r["variant"] == "normal"]
        failing = [r for r in results if r["strategy"] == s and r["variant"] != "normal"]
        overheads = [x for r in normal for x in [r["overhead_median_ms"]] if x is not None]
        cpus = [x for r in normal for x in [r.get("cpu_median_ms")] if x is not None]
        kept = [r["identifiers_kept_after_compaction"] for r in normal if r["identifiers_kept_after_compaction"] is not None]
        out[s] = {
            "traces": [r["trace"] for r in normal],
            "overhead_median_ms": statistics.median(overheads) if overheads else None,
            "cpu_median_ms": statistics.median(cpus) if cpus else None,
            "statements_median": statistics.median(x for r in normal for x in [r.get("statements_median")] if x is not None) if s == "ours" else None,
            "summarizer_calls": sum(r["summarizer_calls"] for r in normal),
            "steps_over_window": sum(r["steps_over_window"] for r in normal),
            "model_calls": sum(r["model_calls"] for r in normal),
            "identifiers_kept_pct": 100 * statistics.mean(kept) if kept else None,
            "steps_over_window_failing": sum(r["steps_over_window"] for r in failing),
            "model_calls_failing": sum(r["model_calls"] for r in failing),
            "lost_normal": sum(lost_messages(r) for r in normal),
            "lost_on_failure": sum(lost_messages(r) for r in failing),
            "failure_runs_completed": sum(r["error"] is None for r in failing),
            "failure_runs": len(failing),
            "failure_errors": sorted({r["error"].split(":")[0] for r in failing if r["error"]}),
        }
    return out


def rows(summary: dict[str, Any]) -> list[list[str]]:
    """Markdown rows: metric, better, ours, LangChain (same columns for every row)."""
    o, lc = summary["ours"], summary["langchain"]
    load = summary.get("load", "not recorded")
    n = len(o["traces"])

    def f(x: Any, fmt: str) -> str:
        return "–" if x is None else format(x, fmt)

    return [
        [f"Middleware overhead per model call, median of the per-trace medians ({n} traces, real `create_agent` loop; ours: its CPU time and SQL statements per call too; load {load})",
         "lower", f(o["overhead_median_ms"], ".3g") + " ms" + (f" (CPU {o['cpu_median_ms']:.3g} ms, {o['statements_median']:g} statements)" if o.get("cpu_median_ms") is not None else ""),
         f(lc["overhead_median_ms"], ".3g") + " ms"],
        [f"Summarizer calls, total over {n} sessions", "lower", str(o["summarizer_calls"]), str(lc["summarizer_calls"])],
        [f"Model requests over the window (our meter on the wire request; of {o['model_calls']})", "lower", str(o["steps_over_window"]), str(lc["steps_over_window"])],
        ["Identifiers seen so far visible in the request right after each compaction, mean", "higher", f(o["identifiers_kept_pct"], ".1f") + " %", f(lc["identifiers_kept_pct"], ".1f") + " %"],
        [f"History lost, working summarizer (messages removed from the agent's state that no summary call saw, {n} sessions)", "lower", str(o["lost_normal"]), str(lc["lost_normal"])],
        [f"History lost, failing summarizer (the same, {n} sessions)", "lower", str(o["lost_on_failure"]), str(lc["lost_on_failure"])],
        [f"Agent runs that finished the session with a failing summarizer (of {n})", "higher", str(o["failure_runs_completed"]), str(lc["failure_runs_completed"])],
        [
            "Model requests over the window with a failing summarizer (LangChain's only up to where its runs raised)",
            "lower",
            f"{o['steps_over_window_failing']} of {o['model_calls_failing']}",
            f"{lc['steps_over_window_failing']} of {lc['model_calls_failing']}",
        ],
    ]


def section(sizes: Sequence[int] = SIZES, *, timeout: float = 600) -> str:
    """For ``run_all.py``: run this script in a fresh process and return its markdown table (or
    one line saying why it did not run)."""
    args = [sys.executable, str(Path(__file__).resolve()), "--sizes", ",".join(map(str, sizes))]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    summary = next((x for x in lines if "summary" in x), None)
    if proc.returncode != 0 or summary is None:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:]) or f"exit {proc.returncode}"
        return f"Not measured: {tail}"
    if "skipped" in summary:
        return f"Not measured: {summary['skipped']}"
    return render(summary["summary"], [x for x in lines if "summary" not in x])


def render(summary: dict[str, Any], runs: Sequence[dict[str, Any]]) -> str:
    head = ["Metric", "Better", "Ours (CompactionMiddleware)", "LangChain (SummarizationMiddleware)"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows(summary)]
    out += ["", "| Trace | Variant | Turns done | Model calls | Overhead median ms (ours / LC) | Summarizer calls | Over window | Ids kept after compaction | Lost |", "|---|---|---|---|---|---|---|---|---|"]
    by = {(r["trace"], r["variant"], r["strategy"]): r for r in runs}
    for (name, variant, strategy), r in by.items():
        if strategy != "ours":
            continue
        lc = by.get((name, variant, "langchain"))
        if lc is None:
            continue

        def pair(k: str, fmt: Callable[[Any], str] = str) -> str:
            return " / ".join("–" if x[k] is None else fmt(x[k]) for x in (r, lc))

        out.append(
            f"| {name} | {variant} | {r['turns_completed']}/{r['turns']} / {lc['turns_completed']}/{lc['turns']} | {pair('model_calls')} | "
            f"{pair('overhead_median_ms', lambda v: f'{v:.3g}')} | {pair('summarizer_calls')} | {pair('steps_over_window')} | "
            f"{pair('identifiers_kept_after_compaction', lambda v: f'{100 * v:.0f} %')} | {lost_messages(r)} / {lost_messages(lc)} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="trace sizes, comma-separated (of 10000, 100000, 1000000)")
    ap.add_argument("--families", default=",".join(traces.FAMILIES))
    ap.add_argument("--markdown", action="store_true", help="also print the markdown tables")
    args = ap.parse_args(argv)
    missing = available()
    if missing:
        print(json.dumps({"bench": TAG, "summary": None, "skipped": missing}))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg()) + " 1/5/15-min, 2 cores"
    t0 = time.perf_counter()
    results = bench(sizes, args.families.split(","), emit=lambda r: print(json.dumps(r, ensure_ascii=False), flush=True))
    summary = summarize(results)
    summary["load"] = load
    print(json.dumps({"bench": TAG, "summary": summary, "seconds": time.perf_counter() - t0}, ensure_ascii=False))
    if args.markdown:
        print(render(summary, results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
