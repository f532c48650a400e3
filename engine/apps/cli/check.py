"""``compaction check``: verify the invariants of docs/schema.md on a database and report each
violation (documented in docs/cli.md). The checks themselves are :mod:`engine.core.checks` (the
inspector shows the same findings for the open thread)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Iterator

from ...core.checks import PAGE, Finding, ServiceReader, ThreadReader, check_thread
from .output import EXIT_FAILED, EXIT_OK, Listing, add_paging, database_url, url_secrets

__all__ = ["PAGE", "Finding", "ServiceReader", "ThreadReader", "add_parser", "check_thread", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check", help="verify the invariants of docs/schema.md and report each violation")
    p.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    p.add_argument("--thread", help="check only this thread")
    p.add_argument("--json", action="store_true")
    add_paging(p, "threads checked (in key order)", "KEY")
    p.set_defaults(run=run)


def _keys(reader: ServiceReader, svc: object, args: argparse.Namespace) -> Iterator[str]:
    """The threads to check, in key order, from ``--after``."""
    if args.thread:
        svc.reads.thread(args.thread)  # type: ignore[attr-defined]  # an unknown thread is thread_not_found (exit 2), not a finding
        return iter([args.thread])
    return reader.thread_keys(args.after)


def run(args: argparse.Namespace) -> int:
    """Each thread's findings as it is checked (streamed); ``--limit`` threads per page."""
    from ...service import open_service

    svc = open_service(database_url(args.db))
    try:
        reader = ServiceReader(svc)
        with Listing("violations", json_mode=args.json, head={"db": svc.url}, secrets=url_secrets(args.db)) as out:
            checked, last = 0, None
            for key in _keys(reader, svc, args):
                if args.limit is not None and checked >= args.limit:
                    out.next_after = last
                    break
                for f in check_thread(reader, key):
                    out.item(asdict(f))
                    if not out.json:
                        out.line(f"{f.thread}  {f.check}  {f.message}")
                checked, last = checked + 1, key
                out.tail["threads"] = checked
            out.tail["threads"] = checked
            if not out.json:
                more = f"; more threads: --after {out.next_after}" if out.next_after else ""
                out.line(f"{checked} thread(s) checked: " + (f"{out.count} violation(s)" if out.count else "no violations") + more)
    finally:
        svc.close()
    return EXIT_FAILED if out.count else EXIT_OK
