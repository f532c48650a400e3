"""``compaction revert`` and ``compaction audit`` (issue 23; docs/cli.md).

``compaction revert [--db URL] --thread KEY [--reason R] [--json]`` — revert the thread's last
compaction of ours (its boundary, summary and prunes come back as a new generation), or redo it
when the last act on the thread was a revert. Exit 0 on success, 3 when the thread is busy, 2 when
there is nothing of ours to revert (``nothing_to_revert``, ``source_compaction``), an original is
missing (``original_missing``) or the database cannot be written (``read_only``).

``compaction audit [--db URL] [--thread K] [--operator O] [--action A] [--limit N] [--after ID]
[--json]`` — the audit log oldest first: who did what to which thread, when, why, before / after.
Page with ``--after`` the last id shown.
"""

from __future__ import annotations

import argparse

from .output import EXIT_OK, emit_json, open_db, whole_number

ACTIONS = ("compact", "revert", "redo", "pin", "unpin", "instructions", "policy")


_count = whole_number(1, 10_000)
_id = whole_number(0, out_of_range="ids are not negative")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    r = subparsers.add_parser(
        "revert",
        help="revert the last compaction of a thread (of a revert: redo it)",
        description="Revert the thread's last compaction of ours as a new generation; revert again to redo it.",
    )
    r.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    r.add_argument("--thread", required=True)
    r.add_argument("--reason", help="why (recorded in the audit log and the event)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(run=run_revert)

    a = subparsers.add_parser("audit", help="who compacted, reverted, pinned or changed what, when and why")
    a.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    a.add_argument("--thread", help="only this thread")
    a.add_argument("--operator", help="only this operator (database role / OS user, or display name)")
    a.add_argument("--action", action="append", choices=ACTIONS, help="only this action (repeatable)")
    a.add_argument("--limit", type=_count, default=200, help="at most this many rows (default 200)")
    a.add_argument("--after", type=_id, metavar="ID", help="rows after this audit id (paging)")
    a.add_argument("--json", action="store_true")
    a.set_defaults(run=run_audit)


def run_revert(args: argparse.Namespace) -> int:
    svc = open_db(args)
    try:
        svc.thread(args.thread)
        result = svc.revert(args.thread, reason=args.reason)
    finally:
        svc.close()
    if args.json:
        emit_json(result)
    else:
        what = "reverted the last compaction" if result.action == "revert" else "redid the reverted compaction"
        results = f"; {len(result.results)} tool result{'s' if len(result.results) != 1 else ''} {'verbatim again' if result.action == 'revert' else 'as previews again'}" if result.results else ""
        print(
            f"{args.thread}: {what} (history rows {', '.join(map(str, result.history_ids))}): boundary {result.boundary_before} -> {result.boundary_after}, "
            f"generation {result.generation_after}, {result.tokens_before:,} -> {result.tokens_after:,} tokens{results}; by {result.operator}"
        )
    return EXIT_OK


def run_audit(args: argparse.Namespace) -> int:
    svc = open_db(args)
    try:
        if args.thread:
            svc.thread(args.thread)
        rows = svc.audit(thread=args.thread, operator=args.operator, actions=args.action, after_id=args.after, limit=args.limit)
    finally:
        svc.close()
    if args.json:
        emit_json({"entries": rows, "next_after": rows[-1].id if len(rows) == args.limit else None})
        return EXIT_OK
    if not rows:
        print("no audit entries")
    for e in rows:
        who = f"{e.operator} ({e.display_name})" if e.display_name else e.operator
        why = f" — {e.reason}" if e.reason else ""
        print(f"#{e.id} {e.at:%Y-%m-%d %H:%M:%S} {e.action:<12} {e.thread or '(deleted thread)'} by {who}{why}")
    return EXIT_OK
