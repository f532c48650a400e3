# Over 500 lines: one driver renders every table of docs/benchmarks.md from one run (the rows and their reasons live together).
"""All benchmarks in one run: our engine against its peers on the same seeded traces, and our own figures.

Run: ``make bench`` (= ``.venv/bin/python benchmarks/run_all.py``); ``--quick`` for a small run
(10k and 100k traces, 20k store rows, 20k-message timeline; does not rewrite the docs).
Prints the tables (markdown) and writes them, with the machine and the rerun command, to
``docs/benchmarks.md``. Peers need the optional group: ``.venv/bin/pip install -e '.[bench-peers]'``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import adapters_langchain  # noqa: E402
import import_session  # noqa: E402
import incremental  # noqa: E402
import ours  # noqa: E402
import peers  # noqa: E402
import real_corpus  # noqa: E402
import traces  # noqa: E402
import whatif as whatif_bench  # noqa: E402
from own_figures import WINDOWS, machine, ms, own_gui, own_manual_compaction, own_meter, own_pressure, own_specifics, own_store  # noqa: E402
from report_doc import document, splice  # noqa: E402
from store import DEFAULT_PG_URL  # noqa: E402

PEERS = peers.STRATEGIES  # ("langchain", "chars/4")
STRATEGIES = ("ours",) + PEERS
#: manual compaction compacts a whole idle session that fits its window (the default-size window)
MANUAL_WINDOW = 131_072
DOC = ROOT / "docs" / "benchmarks.md"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- rows ---------------------------------------------------------------------------------------


@dataclass
class Row:
    """One head-to-head row. ``better`` is "lower", "higher" or "closer to 0"."""

    metric: str
    better: str
    values: dict[str, float | None]  # strategy -> value; None: the strategy did not run; NaN: nothing to measure
    fmt: Callable[[float], str]
    why_lose: str

    def verdict(self, peer: str) -> str:
        a, b = self.values["ours"], self.values[peer]
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            return "n/a"
        if self.better == "closer to 0":
            a, b = abs(a), abs(b)
        if a == b or (max(abs(a), abs(b)) > 0 and abs(a - b) / max(abs(a), abs(b)) < 0.02):
            return "tie"
        lower_wins = self.better != "higher"
        return "win" if (a < b) == lower_wins else "lose"

    def ratio(self, peer: str) -> str:
        a, b = self.values["ours"], self.values[peer]
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            return "n/a"
        if self.better == "closer to 0":
            a, b = abs(a), abs(b)
        if a == 0 and b == 0:
            return "both 0"
        if b == 0:
            return "∞ (peer 0)"
        r = a / b
        return f"{r:.3g}×" if r < 100 else f"{r:,.0f}×"


def pct(x: float) -> str:
    return f"{x:+.1f} %"


def apct(x: float) -> str:
    return "never compacted" if math.isnan(x) else f"{x:.1f} %"


def count(x: float) -> str:
    return f"{x:,.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# -- head to head -------------------------------------------------------------------------------


def run_head_to_head(sizes: Sequence[int], work: Path, *, with_peers: bool) -> dict[str, Any]:
    """Every trace through ours (and the peers when they can run): counts, times, replays, manual."""
    active = PEERS if with_peers else ()
    ref = traces.Reference()
    out: dict[str, Any] = {"traces": [], "counts": {}, "meter": {}, "replays": {}, "ours_timing": {}, "final_env": {}}
    for size in sizes:
        window = WINDOWS[size]
        for family in traces.FAMILIES:
            t0 = time.perf_counter()
            trace = traces.generate(family, size)
            out["traces"].append(trace)
            log(f"{traces.describe(trace)} (generated in {time.perf_counter() - t0:.1f} s)")
            exact = ref.envelope(trace.envelope())
            mine = ours.meter_times(trace)
            theirs = peers.meter(trace) if with_peers else {}
            out["counts"][trace.name] = {"exact": exact, "ours": mine["tokens"], **{p: theirs[p]["tokens"] for p in active}}
            out["meter"][trace.name] = {"ours": mine, **theirs}
            threshold, keep, budget = window * 4 // 5, window * 16 // 100, ours.summary_budget(window)
            reps: dict[str, traces.Replay] = {}
            for p in active:
                reps[p] = peers.replay(trace, p, window=window, threshold=threshold, keep=keep, summary_tokens=budget, ref=ref)
            reps["ours"], timing, final = ours.replay(trace, window, work, ref)
            out["replays"][trace.name] = reps
            out["ours_timing"][trace.name] = timing
            out["final_env"][trace.name] = final
            log("  replayed: " + ", ".join(f"{k} {v.seconds:.1f} s" for k, v in reps.items()))

    # the per-step pressure check on the same surface, at every size (research family): ours on its
    # final surface with nothing new since the last step, the peers' before_model on the same messages
    big = max(out["traces"], key=lambda t: (t.size, t.family == "research"))
    out["pressure_trace"] = big.name
    out["pressure"] = {}
    for t in out["traces"]:
        if t.family != "research" and t is not big:
            continue
        window = WINDOWS[t.size]
        surface = [m for m in out["final_env"][t.name].messages()[1:]]  # the middleware's state holds no system prompt
        out["pressure"][t.name] = {
            "ours": (out["ours_timing"][t.name]["pressure_warm_s"], out["ours_timing"][t.name]["pressure_cold_s"]),
            **{p: (peers.pressure_check_times(t, p, threshold=window * 4 // 5, keep=window * 16 // 100, summary_tokens=ours.summary_budget(window), messages=surface),) * 2
               for p in active},
        }

    # manual compaction ("compact now") of the same idle history
    manual_trace = next(t for t in out["traces"] if t.family == "research" and t.size == 100_000)
    w = MANUAL_WINDOW
    log(f"manual compaction of {manual_trace.name}")
    out["manual_trace"] = manual_trace.name
    out["manual_window"] = w
    out["manual"] = {"ours": ours.manual(manual_trace, w, work, ref)}
    for p in active:
        out["manual"][p] = peers.manual(manual_trace, p, keep=w * 16 // 100, summary_tokens=ours.summary_budget(w), ref=ref)
    return out


def head_to_head_rows(r: dict[str, Any]) -> list[Row]:
    names = [t.name for t in r["traces"]]
    n = len(names)
    largest = max(t.size for t in r["traces"])
    big = [t.name for t in r["traces"] if t.size == largest]
    chinese = next(t.name for t in r["traces"] if t.size == largest and t.family == "chinese")

    def err(name: str, s: str) -> float:
        c = r["counts"][name]
        return 100.0 * (c[s] - c["exact"]) / c["exact"]

    reps = r["replays"]
    ran = [s for s in STRATEGIES if s in reps[names[0]]]

    def each(fn: Callable[[str], float | None]) -> dict[str, float | None]:
        """``fn`` for every strategy that ran, ``None`` (not measured) for the others."""
        return {s: fn(s) if s in ran else None for s in STRATEGIES}

    def total(attr: str) -> dict[str, float | None]:
        return each(lambda s: float(sum(getattr(reps[x][s], attr) for x in names)))

    def mean_after(s: str) -> float | None:
        values = [a / reps[x][s].window * 100 for x in names for a in reps[x][s].after_compaction]
        return statistics.mean(values) if values else math.nan

    label_big = traces.size_label(largest)
    rows = [
        Row(
            f"Metering error vs exact tiktoken, mean \\|%\\| over {n} traces",
            "lower",
            each(lambda s: statistics.mean(abs(err(x, s)) for x in names)),
            apct,
            "",
        ),
        Row(
            f"Metering error on Chinese chat ({chinese}), signed",
            "closer to 0",
            each(lambda s: err(chinese, s)),
            pct,
            "",
        ),
        Row(
            f"Metering time, cold, {label_big}-token envelope (mean of {len(big)} families)",
            "lower",
            each(lambda s: statistics.mean(r["meter"][x][s]["cold_s"] for x in big)),
            ms,
            "We run the real BPE tokenizer (tiktoken cl100k, two threads) over every character; the peers only "
            "count characters. That price buys the accuracy of the first two rows, and it is paid once per "
            "message: the cached re-measure (next row) is what runs at every step.",
        ),
        Row(
            f"Metering time, re-measure after +1 message, {label_big}-token envelope",
            "lower",
            each(lambda s: statistics.mean(r["meter"][x][s]["warm_s"] for x in big)),
            ms,
            "Our re-measure still looks every message up in the per-message cache (hashing its content key) "
            "and encodes the new one with the real tokenizer; summing string lengths is cheaper still. Both "
            "are far below a millisecond per step.",
        ),
        *(Row(
            f"Pressure check per step, below threshold, nothing new since the last step ({name} final surface, median)",
            "lower",
            each(lambda s, name=name: r["pressure"][name][s][0]),
            ms,
            "Our check reads the thread's version from the database (one statement: its key row and newest "
            "completed request) and, when it is the one the last check saw, answers with that check's "
            "measurement; the middleware counts its in-memory list again. The read is what lets the inspector "
            "and other agents (a compaction by hand, another writer) change the thread between steps. The check "
            "after one new message is in the own figures (benchmarks/incremental.py), with the peers on the same surface.",
        ) for name in r["pressure"]),
        Row(
            f"Pressure check after emptying the meter's cache ({r['pressure_trace']} final surface; the peers have no cache)",
            "lower",
            each(lambda s: r["pressure"][r["pressure_trace"]][s][1]),
            ms,
            "The snapshot cache keeps every message's count and the last measurement, so the check encodes "
            "nothing again (a restarted process reads and counts the thread once: the status figures); the "
            "peers count characters and never cache.",
        ),
        Row(
            f"Summarizer (model) calls, total over {n} sessions",
            "lower",
            total("summarizer_calls"),
            count,
            "Our summarization target is half the threshold (40 % of the window), and the newest history "
            "(the retained tail, whole units only) stays verbatim, so a summary frees less than the "
            "middleware's cut to `keep` (16 %). Pruning comes first and costs no call: results over the limit, "
            "and older results before the protected tail whose half-size preview is smaller (their ids stay). "
            "In long tool-heavy turns the middleware often makes no call at all: it replaces the history with "
            "a fixed sentence (next row).",
        ),
        Row(
            "History replacements that kept no summary of what they dropped",
            "lower",
            total("unsummarized"),
            count,
            "",
        ),
        Row(
            "Envelope right after a compaction, mean % of the window",
            "lower",
            each(mean_after),
            apct,
            "By design: we compact only down to the target (half the threshold), keeping as much recent "
            "history verbatim as fits, where the middleware keeps only `keep` tokens plus a summary of the last "
            "4000. The next requests cost more tokens; the identifiers and request rows show what it buys.",
        ),
        Row(
            "Model steps sent over the context window (exact tokens)",
            "lower",
            total("over_window_steps"),
            count,
            "",
        ),
        Row(
            "Orphan tool results on any surface (results whose call is gone)",
            "lower",
            each(lambda s: float(sum(len(reps[x][s].orphan_ids) for x in names))),
            count,
            "",
        ),
        Row(
            "Identifiers seen so far still visible right after each compaction, mean over compactions",
            "higher",
            each(lambda s: 100 * statistics.mean(v for x in names for v in reps[x][s].kept_after_compaction) if any(reps[x][s].kept_after_compaction for x in names) else math.nan),
            apct,
            "",
        ),
        Row(
            "Identifiers from tool outputs (doc ids, URLs, paths) visible on the final surface, mean",
            "higher",
            each(lambda s: 100 * statistics.mean(reps[x][s].identifiers_visible for x in names)),
            apct,
            "The final surface is wherever each strategy stands in its own compaction cycle. Where a peer wins, "
            "either it never compacted that session (it under-counted the envelope and sent requests over the "
            "context window instead: see that row; a provider would have rejected them), or its surface had "
            "grown back with raw tool results since its last compaction. Right after compaction (previous "
            "row), where the strategies are comparable, is the figure to read.",
        ),
        Row(
            f"Current user request verbatim on the final surface (sessions of {n})",
            "higher",
            each(lambda s: float(sum(reps[x][s].request_present for x in names))),
            count,
            "",
        ),
        Row(
            f"Manual compaction (\"compact now\") end to end, {r['manual_trace']}, window {MANUAL_WINDOW:,}",
            "lower",
            each(lambda s: r["manual"][s]["seconds"]),
            ms,
            "Ours takes the conversation row lock, checks the thread is idle, summarizes everything before the "
            "retained tail in batches that a same-size model can read (one extractive call per batch), "
            "persists with compare-and-swap, records events and commits; the middleware makes one call over the "
            "last 4000 tokens in memory and persists nothing.",
        ),
        Row(
            f"Manual compaction: envelope after, % of the window ({r['manual_trace']})",
            "lower",
            each(lambda s: 100 * r["manual"][s]["tokens_after"] / r["manual_window"]),
            apct,
            "Manual compaction keeps the retained tail verbatim (whole units: finished turns, and the rounds "
            "of the last turn, which is split like a running one) and adds a summary of up to its budget; "
            "the middleware keeps `keep` tokens and a summary of only the last 4000 tokens it drops.",
        ),
        Row(
            f"Manual compaction: current request verbatim afterwards ({r['manual_trace']}), 1 = yes",
            "higher",
            each(lambda s: float(r["manual"][s]["request_present"])),
            count,
            "",
        ),
    ]
    return rows


def render_head_to_head(rows: list[Row]) -> str:
    header = ["Metric", "Better", "Ours", "LangChain", "chars/4", "Ours / LangChain", "Ours / chars/4"]
    body = []
    for row in rows:
        vals = [row.fmt(v) if v is not None else "not run (peers missing)" for v in (row.values[s] for s in STRATEGIES)]
        ratios = [f"{row.ratio(p)} ({row.verdict(p)})" for p in PEERS]
        body.append([row.metric, row.better, *vals, *ratios])
    return table(header, body)


def render_details(r: dict[str, Any]) -> str:
    header = ["Trace", "Window", "Steps", "Summarizer calls", "No-summary replacements", "After compaction, % window", "Steps over window", "Peak, % window", "Identifiers visible", "Request kept", "Metering error"]
    body = []
    for t in r["traces"]:
        reps = r["replays"][t.name]
        c = r["counts"][t.name]

        def trio(fn: Callable[[traces.Replay], str]) -> str:
            return " / ".join(fn(reps[s]) if s in reps else "n/a" for s in STRATEGIES)

        def after(x: traces.Replay) -> str:
            return f"{x.mean_after / x.window * 100:.0f}" if x.mean_after is not None else "–"

        body.append(
            [
                f"{t.name} ({t.tokens:,} tok)",
                f"{WINDOWS[t.size]:,}",
                str(reps["ours"].steps),
                trio(lambda x: str(x.summarizer_calls)),
                trio(lambda x: str(x.unsummarized)),
                trio(after),
                trio(lambda x: str(x.over_window_steps)),
                trio(lambda x: f"{x.peak_tokens / x.window * 100:.0f}"),
                trio(lambda x: f"{x.identifiers_visible * 100:.0f} %"),
                trio(lambda x: "yes" if x.request_present else "no"),
                " / ".join(f"{100 * (c[s] - c['exact']) / c['exact']:+.1f} %" if s in c else "n/a" for s in STRATEGIES),
            ]
        )
    return table(header, body)


# -- our own figures ----------------------------------------------------------------------------


def losses(rows: list[Row]) -> list[str]:
    out = []
    for row in rows:
        lost = [p for p in PEERS if row.verdict(p) == "lose"]
        if lost:
            who = " and ".join(lost)
            reason = row.why_lose or "no structural reason recorded: investigate"
            out.append(f"- **{row.metric}** — we lose to {who} ({', '.join(row.ratio(p) for p in lost)}). {reason}")
    return out or ["- None in this run."]


# -- sections of their own ----------------------------------------------------------------------
# name -> (title, run(quick, pg_url) -> markdown). Each runs in the full run and alone with
# ``--only NAME[,NAME]``, which rewrites just that section of docs/benchmarks.md.
def _previews(quick: bool, pg_url: str) -> str:
    import previews
    return previews.section(quick)


def _fact_recall(quick: bool, pg_url: str) -> str:
    import fact_recall
    return fact_recall.section(quick, pg_url)


def _fleet(quick: bool, pg_url: str) -> str:
    import fleet
    return fleet.section(quick, pg_url)


def _fleet_gui(quick: bool, pg_url: str) -> str:
    """benchmarks/fleet_gui.py in a fresh process per backend (offscreen), on the stores
    benchmarks/fleet.py cached: the SQLite file and the PostgreSQL database."""
    import json
    import subprocess

    import fleet
    threads, messages = fleet.QUICK if quick else fleet.FULL
    stores = [("SQLite", fleet.sqlite_store(threads, messages))]
    pg = fleet.pg_store(pg_url, threads, messages)
    if pg is not None:
        stores.append(("PostgreSQL", pg))
    names = {"first_page": "First thread page shown after the database opens", "search_key": "Search by key (support-01400)",
             "search_title": "Search by title", "scroll_end": "Scroll to the end of the list", "scroll_middle": "Jump to the middle of the list",
             "find_1400": "Find thread support-01400 (--thread, fleet click)"}
    out: list[list[str]] = []
    for backend, url in stores:
        proc = subprocess.run([sys.executable, str(HERE / "fleet_gui.py"), "--db", url, "--repeats", "3" if quick else "5"], cwd=ROOT,
                              capture_output=True, text=True, timeout=3600, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            why = " ".join(ln for ln in (proc.stderr or proc.stdout).strip().splitlines()[-2:]) or f"exit {proc.returncode}"
            out.append([f"{backend}: not measured", "–", why])
            continue
        r = json.loads(lines[-1])
        for k, label in names.items():
            if k in r:
                samples = r.get(f"{k}_samples_ms")
                note = "target < 300 ms: " + ("met" if r[k] < 300 else "**not met**")
                if samples:
                    note += f" (samples {', '.join(f'{x:,.0f}' for x in samples)} ms)"
                out.append([f"{backend}: {label}", f"{r[k]:,.0f} ms", note])
        if "rss_before_mb" in r:
            out.append([f"{backend}: GUI process memory before / after scrolling every thread",
                        f"{r['rss_before_mb']:,.0f} / {r['rss_after_mb']:,.0f} MB",
                        f"flat: rows the model holds after: {r.get('held_after', '?'):,} of {r.get('threads', 0):,}"])
    return (f"The real window offscreen, each backend in a fresh process (`benchmarks/fleet_gui.py --db URL`), on the stores the "
            f"fleet section built ({threads:,} threads / {messages:,} messages); median of {'3' if quick else '5'} where repeated.\n\n"
            + table(["Figure", "Value", "Notes"], out))


def _bulk_import(quick: bool, pg_url: str) -> str:
    import bulk_import
    files = 200 if quick else 1000
    return (f"`compaction import DIR` over {files:,} real-shaped session files of mixed formats, in a fresh process "
            "(`benchmarks/bulk_import.py`).\n\n" + table(["Figure", "Value", "Notes"], bulk_import.rows(files, pg_url)))


def _whatif(quick: bool, pg_url: str) -> str:
    """benchmarks/whatif.py: each trace at two thresholds, the real-shaped session and the
    100,000-message what-if, each in a fresh process (issues 14, 24)."""
    return whatif_bench.section(messages=20_000 if quick else 100_000, families=("research",) if quick else whatif_bench.FAMILIES)


def _adapter_overhead(quick: bool, pg_url: str) -> str:
    """benchmarks/adapters_overhead.py in a fresh process: the engine's overhead per model call in
    each framework adapter (issue 24)."""
    import adapters_overhead
    return adapters_overhead.section(rounds=20 if quick else 40, repeats=2 if quick else 3)


EXTRA: dict[str, tuple[str, Callable[[bool, str], str]]] = {
    "whatif": ("What-if runs (issue 14)", _whatif),
    "previews": ("Previews by content (issue 25)", _previews),
    "fact_recall": ("Fact recall after compaction (issue 25)", _fact_recall),
    "fleet": ("A store of 100,000 threads: the thread list and stats (issue 26)", _fleet),
    "fleet_gui": ("The inspector's thread list on the 100,000-thread store (issue 26)", _fleet_gui),
    "bulk_import": ("Bulk import (issue 26)", _bulk_import),
    "adapter_overhead": ("Adapter overhead per model call: LangChain, OpenAI Agents SDK, Pydantic AI (issue 24)", _adapter_overhead),
}


def run_extra(names: Sequence[str], quick: bool, pg_url: str) -> list[tuple[str, str, str]]:
    out = []
    for name in names:
        title, run = EXTRA[name]
        log(f"{title} (benchmarks, section {name!r})")
        t0 = time.perf_counter()
        out.append((name, title, run(quick, pg_url)))
        log(f"  {name}: {time.perf_counter() - t0:.0f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k and 100k traces, small store and timeline runs; does not write the docs")
    ap.add_argument("--pg-url", default=os.environ.get("COMPACTION_TEST_PG_URL") or DEFAULT_PG_URL,
                    help="PostgreSQL server for the store, timeline, status-under-load and import rows")
    ap.add_argument("--no-gui", action="store_true", help="skip the timeline benchmark")
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md even with --quick")
    ap.add_argument("--only", help=f"run only these sections ({', '.join(EXTRA)}), comma-separated, and rewrite just them in docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in EXTRA]
        if unknown:
            ap.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(EXTRA)}")
        done = run_extra(names, args.quick, args.pg_url)
        doc = DOC.read_text(encoding="utf-8")
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        for name, title, text in done:
            # the document's header times the whole run; a section rerun alone says so itself
            text = f"{text.rstrip()}\n\n*Rerun alone (`run_all.py --only {name}`) at {head}, {when}; the rest of this document is from the whole run.*"
            print(f"\n## {title}\n\n{text}")
            doc = splice(doc, name, title, text)
        if not args.quick or args.write:
            DOC.write_text(doc, encoding="utf-8")
            log(f"rewrote {', '.join(names)} in {DOC.relative_to(ROOT)}")
        return 0
    args.sizes = (10_000, 100_000) if args.quick else traces.SIZES
    missing = peers.available()
    if missing:
        log(f"peers cannot run, their columns say so: {missing}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        r = run_head_to_head(args.sizes, Path(tmp), with_peers=missing is None)
    rows = head_to_head_rows(r)
    log("compact now: fixture sessions and traces (benchmarks/real_corpus.py)")
    corpus_found, corpus_rows = real_corpus.run(r["traces"], WINDOWS)
    corpus = real_corpus.table_text(corpus_found, corpus_rows)
    targets = real_corpus.targets_text(rows, r, corpus_found)
    log("own figures: meter")
    own = own_meter() + own_pressure(r)
    log("own figures: manual compaction (benchmarks/compaction.py)")
    own += own_manual_compaction()
    log("own figures: dropped specifics on the pressure path")
    own += own_specifics("research", 100_000 if args.quick else 1_000_000)
    log("own figures: store")
    own += own_store(20_000 if args.quick else 100_000, args.pg_url)
    if not args.no_gui:
        log("own figures: timeline (offscreen)")
        own += own_gui(20_000 if args.quick else 1_000_000, args.pg_url)  # a 1M run reports the 100k figures in its notes
    log("own figures: incremental pressure and status (benchmarks/incremental.py)")
    sizes = [20_000] if args.quick else [100_000, 1_000_000]
    inc = incremental.run(sizes, ["research", "coding", "chinese"], args.pg_url, 8.0, max(sizes), pressure_sizes=args.sizes)
    own += incremental.rows(inc)
    log("own figures: Claude Code session import (benchmarks/import_session.py)")
    own += import_session.rows(2.0, args.pg_url)
    log("LangChain agents: CompactionMiddleware vs SummarizationMiddleware (benchmarks/adapters_langchain.py)")
    agents = adapters_langchain.section((10_000,) if args.quick else (10_000, 100_000))
    extra = run_extra(list(EXTRA), args.quick, args.pg_url)
    seconds = time.perf_counter() - started

    head = render_head_to_head(rows)
    details = render_details(r)
    own_table = table(["Figure", "Value", "Notes"], own)
    lost = [x for x in losses(rows) if x != "- None in this run."] + incremental.pressure_losses(inc) or ["- None in this run."]
    print("## Head to head\n\n" + head + "\n\n### Where we lose\n\n" + "\n".join(lost) + "\n\n### Per trace (ours / LangChain / chars/4)\n\n" + details)
    print("\n## Targets\n\n" + targets + "\n\n## Compact now\n\n" + corpus)
    print("\n## LangChain agents\n\n" + agents)
    print("\n## Our own figures\n\n" + own_table)
    for _, title, text in extra:
        print(f"\n## {title}\n\n{text}")
    print(f"\n(total {seconds:.0f} s)")
    if not args.quick or args.write:
        DOC.write_text(document(head, details, own_table, lost, machine(), seconds, args, missing, corpus, targets, agents, extra))
        log(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
