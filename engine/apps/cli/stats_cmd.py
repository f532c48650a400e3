"""``compaction stats`` (issue 26; docs/cli.md): where compaction happens and what it costs, across
every thread of a store or those a filter picks.

``compaction stats [--db URL] [--filter TEXT] [--source FORMAT|live] [--busy] [--over-threshold]
[--over-hint] [--rejected-summary] [--compacted-last-day] [--days N] [--worst N] [--json]`` —
threads by pressure band, busy now, compactions per day by kind and source (ours: ``engine``; an
imported tool's: its format), dropped specifics per summary (buckets and the worst threads),
summarizer calls, tokens and cost, tokens saved. Every figure is an aggregate of the database
(``svc.threads.stats``). ``--json`` prints :meth:`engine.core.views.FleetStats.to_json`.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from ...core import figures
from ...core.views import THREAD_FILTERS, FleetStats, ThreadQuery
from .output import EXIT_OK, cell, display_width, emit_json, open_db, whole_number

#: flag -> filter name (``ThreadQuery.filters``)
FILTER_FLAGS = {f"--{name.replace('_', '-')}": name for name in THREAD_FILTERS}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "stats",
        help="fleet statistics: pressure bands, compactions per day, dropped specifics, summarizer cost",
        description="Aggregates over every thread of the store, or those the filters pick (ANDed).",
    )
    p.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    p.add_argument("--filter", metavar="TEXT", help="threads whose key, title, source format or model contains TEXT")
    p.add_argument("--source", metavar="FORMAT", help="threads imported from FORMAT (claude-code, codex, …); 'live': not imported")
    for flag, name in FILTER_FLAGS.items():
        p.add_argument(flag, dest=f"f_{name}", action="store_true", help=f"only threads: {name.replace('_', ' ')}")
    p.add_argument("--days", type=whole_number(1, 3650), default=30, help="compactions per day over the last N UTC days (default 30)")
    p.add_argument("--worst", type=whole_number(0, 1000), default=10, help="threads listed as dropping the most specifics (default 10)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_stats)


def query_of(args: argparse.Namespace) -> ThreadQuery:
    filters = frozenset(name for name in THREAD_FILTERS if getattr(args, f"f_{name}", False))
    return ThreadQuery(text=args.filter or None, filters=filters, source_format=args.source or None)


def run_stats(args: argparse.Namespace) -> int:
    svc = open_db(args)
    try:
        stats = svc.threads.stats(query_of(args), days=args.days, worst=args.worst)
    finally:
        svc.close()
    if args.json:
        emit_json(stats.to_json())
    else:
        for line in report(stats):
            print(line)
    return EXIT_OK


def report(s: FleetStats) -> list[str]:
    """The human report, one line each."""
    out = [f"{figures.plural(s.threads, 'thread')}, {figures.count(s.busy)} busy now", "", "Pressure (kept tokens / threshold):"]
    width = max(display_width(b.label) for b in s.bands)
    for b in s.bands:
        share = figures.percent(b.threads / s.threads) if s.threads else "–"
        out.append(f"  {cell(b.label, width)}  {figures.count(b.threads):>9}  {share:>7}")
    out += ["", f"Compactions: {figures.count(s.compactions)} in all; per day, last {s.days} days to {s.until} (UTC):"]
    if not s.per_day:
        out.append("  none")
    days: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for d in s.per_day:
        days[d.day][f"{d.kind} ({'ours' if d.source == 'engine' else d.source})"] += d.count
    for day in sorted(days):
        parts = ", ".join(f"{n} {what}" for what, n in sorted(days[day].items()))
        out.append(f"  {day}  {sum(days[day].values()):>5}  {parts}")
    counted = sum(bucket.compactions for bucket in s.dropped_buckets)
    out += ["", f"Dropped specifics per summary ({figures.plural(counted, 'summary', 'summaries')} that recorded them):"]
    for bucket in s.dropped_buckets:
        out.append(f"  {bucket.label:>6}  {figures.count(bucket.compactions):>7}")
    if s.worst_threads:
        out += ["", "Threads whose summaries dropped the most:"]
        rows = [(t.key, figures.count(t.dropped), figures.count(t.compactions), figures.count(t.worst), t.title or "") for t in s.worst_threads]
        head = ("THREAD", "DROPPED", "SUMMARIES", "WORST", "TITLE")
        widths = [max(display_width(r[i]) for r in (head, *rows)) for i in range(4)]
        for r in (head, *rows):  # columns in terminal cells: a CJK key or title takes two per character
            out.append("  " + "  ".join(cell(v, w, "<" if i == 0 else ">") for i, (v, w) in enumerate(zip(r, widths))) + f"  {r[4]}".rstrip())
    cost = figures.money(s.summarizer_cost, s.currency) if s.summarizer_cost is not None else "unknown (no price for the summarizer model)"
    out += ["", f"Summarizer: {figures.plural(s.summarizer_calls, 'call')}, {figures.tokens(s.summarizer_prompt_tokens)} prompt + "
                f"{figures.tokens(s.summarizer_completion_tokens)} completion tokens, cost {cost}",
            f"Tokens saved by our compactions (before − after, summed): {figures.tokens(s.tokens_saved)}"]
    return out
