"""``compaction check``: verify the invariants of docs/schema.md on a database and report each
violation (documented in docs/cli.md). The checks themselves are :mod:`engine.checks` (the
inspector shows the same findings for the open thread)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from ..checks import PAGE, Finding, ServiceReader, ThreadReader, check_thread
from .output import EXIT_FAILED, EXIT_OK, database_url, emit_json

__all__ = ["PAGE", "Finding", "ServiceReader", "ThreadReader", "add_parser", "check_thread", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check", help="verify the invariants of docs/schema.md and report each violation")
    p.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    p.add_argument("--thread", help="check only this thread")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..service import open_service

    svc = open_service(database_url(args.db))
    try:
        reader = ServiceReader(svc)
        keys = [args.thread] if args.thread else list(reader.thread_keys())
        if args.thread:
            svc.thread(args.thread)  # an unknown thread is thread_not_found (exit 2), not a finding
        findings = [f for key in keys for f in check_thread(reader, key)]
        shown = svc.url
    finally:
        svc.close()
    if args.json:
        emit_json({"db": shown, "threads": len(keys), "violations": [asdict(f) for f in findings]})
    else:
        for f in findings:
            print(f"{f.thread}  {f.check}  {f.message}")
        print(f"{len(keys)} thread(s) checked: " + (f"{len(findings)} violation(s)" if findings else "no violations"))
    return EXIT_FAILED if findings else EXIT_OK
