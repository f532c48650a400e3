"""``compaction demo``: build the demo database by running scripted sessions through the harness."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="build the demo database (runs scripted sessions against the provider simulator)")
    p.add_argument("--db", help="database URL or SQLite file (default: the inspector's demo database)")
    p.add_argument("--force", action="store_true", help="rebuild a SQLite demo database that already exists")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..demo import build_demo
    from .output import database_url, emit_json

    report = build_demo(database_url(args.db), seed=args.seed, force=args.force)
    if args.json:
        emit_json({"db": report.url, "threads": report.threads, "seconds": round(report.seconds, 2)})
    else:
        print(f"built {len(report.threads)} threads in {report.seconds:.1f}s: {report.url}")
        for t in report.threads:
            print(f"  {t}")
    return 0
