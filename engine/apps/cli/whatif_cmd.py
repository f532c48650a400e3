"""``compaction whatif``: replay a recorded thread under another policy and compare (docs/cli.md).

``compaction whatif [--db URL] --thread KEY [--set key=value ...] [--sweep key=a:b:step] [--points] [--json]``

Runs in a scratch copy (a temporary SQLite database and Workdir, removed afterwards): the database
named by ``--db`` is only read. Prints the recorded run and the candidate (or one row per swept
value) as a table; ``--json`` gives the :meth:`WhatIfComparison.to_json` / :meth:`WhatIfSweep.to_json`
object. Exit 0 when the run finished, 2 for a bad setting, an unknown thread or an unusable
database or a summarizer that fails (``whatif_summarizer_failed``), 130 when interrupted (Ctrl-C
or SIGTERM; the scratch copy is removed).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from ...core import figures
from .output import EXIT_OK, EXIT_USAGE, database_url, emit_json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "whatif",
        help="replay a thread under another compaction policy (scratch copy) and compare with what happened",
        description="Replay a recorded thread through the engine under other settings, in a scratch copy "
        "(the database is only read), and compare with what happened.",
    )
    p.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    p.add_argument("--thread", required=True)
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the candidate run (repeatable): threshold_ratio, retained_tail, tool_result_limit, "
                        "preview_budget, context_window, summarizer=extractive|openai:<base_url>#<model>, …")
    p.add_argument("--sweep", metavar="KEY=START:STOP:STEP",
                   help="one run per value of KEY (a range with the stop included, or a,b,c)")
    p.add_argument("--points", action="store_true", help="--json: add every request's figures to each run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def _fail(message: str, code: str, want_json: bool) -> int:
    if want_json:
        emit_json({"error": {"code": code, "message": message}})
    else:
        print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


COLUMNS = (
    ("requests", "REQS", "{:,}"),
    ("compactions", "COMPACT", "{:,}"),
    ("summarizer_calls", "CALLS", "{:,}"),
    ("peak_pressure", "PEAK", "percent"),
    ("mean_pressure", "MEAN", "percent"),
    ("prompt_tokens", "PROMPT TOKENS", "{:,}"),
    ("steps_over_window", "OVER", "{:,}"),
    ("specifics_dropped", "DROPPED", "{:,}"),
    ("request_kept", "REQ KEPT", "{}"),
)


def table(runs: list[Any]) -> str:
    """The runs as a fixed-width table (label first); unknown figures as ``-``."""
    def cell(run: Any, attr: str, fmt: str) -> str:
        value = getattr(run, attr)
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if fmt == "percent":  # the inspector's figure (engine.core.figures)
            return figures.percent(value)
        return fmt.format(value)

    rows = [[r.label] + [cell(r, a, f) for a, _, f in COLUMNS] for r in runs]
    header = ["RUN"] + [h for _, h, _ in COLUMNS]
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header))]
    for row in rows:
        lines.append("  ".join(v.ljust(widths[0]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(row)))
    return "\n".join(lines)


def _progress(enabled: bool) -> Any:
    if not enabled:
        return None
    state = {"shown": -1}

    def show(done: int, total: int) -> None:
        pct = done * 100 // max(1, total)
        if pct // 10 != state["shown"] // 10 or done == total:
            state["shown"] = pct
            print(f"\r{done:,} / {total:,} messages replayed ({pct}%)", end="" if done < total else "\n", file=sys.stderr, flush=True)

    return show


def _terminate_as_interrupt() -> Any:
    """SIGTERM ends the command like Ctrl-C (exit 130), so the scratch copy is removed on the way
    out; returns the previous handler (None when not on the main thread)."""
    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread
        return None


def run(args: argparse.Namespace) -> int:
    from ...core.errors import EngineError
    from ...service import open_service
    from ...whatif import parse_settings, parse_sweep

    want_json = bool(args.json)
    try:
        settings = parse_settings(args.settings)
        sweep = parse_sweep(args.sweep) if args.sweep else None
    except EngineError as exc:
        return _fail(exc.message, exc.code, want_json)
    svc = open_service(database_url(args.db))
    previous = _terminate_as_interrupt()
    try:
        progress = _progress(not want_json and sys.stderr.isatty())
        if sweep is not None:
            parameter, values = sweep
            result: Any = svc.compaction.whatif_sweep(args.thread, parameter, values, settings=settings, progress=progress)
            runs = [result.recorded, *result.runs]
        else:
            result = svc.compaction.whatif(args.thread, settings, progress=progress)
            runs = [result.recorded, result.candidate]
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        svc.close()
    if want_json:
        emit_json(result.to_json(points=args.points))
        return EXIT_OK
    print(f"thread {args.thread}: what-if in a scratch copy (the database was only read)")
    print(table(runs))
    for r in runs:
        if r.note:
            print(f"  {r.label}: {r.note}")
    return EXIT_OK
