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

from .output import EXIT_OK, Listing, add_paging, emit_json, open_db, url_secrets, whole_number

ACTIONS = ("compact", "revert", "redo", "pin", "unpin", "instructions", "policy")


#: audit rows read per query while the listing streams
BATCH = 1000
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
    add_paging(a, "rows", "ID", default=200, after_type=_id)
    a.add_argument("--json", action="store_true")
    a.set_defaults(run=run_audit)


def run_revert(args: argparse.Namespace) -> int:
    svc = open_db(args)
    try:
        svc.reads.thread(args.thread)
        result = svc.compaction.revert(args.thread, reason=args.reason)
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
    """The audit log oldest first, streamed a batch at a time; ``next_after`` the last id when more remain."""
    svc = open_db(args)
    try:
        if args.thread:
            svc.reads.thread(args.thread)
        with Listing("entries", json_mode=args.json, secrets=url_secrets(args.db)) as out:
            after, last = args.after, None
            query = {"thread": args.thread, "operator": args.operator, "actions": args.action}
            while out.count < args.limit:
                rows = svc.steering.audit(**query, after_id=after, limit=min(BATCH, args.limit - out.count))
                for e in rows:
                    out.item(e)
                    if not out.json:
                        who = f"{e.operator} ({e.display_name})" if e.display_name else e.operator
                        why = f" — {e.reason}" if e.reason else ""
                        out.line(f"#{e.id} {e.at:%Y-%m-%d %H:%M:%S} {e.action:<12} {e.thread or '(deleted thread)'} by {who}{why}")
                if not rows:
                    break
                after = last = rows[-1].id
            if last is not None and out.count >= args.limit and svc.steering.audit(**query, after_id=last, limit=1):
                out.next_after = last
            if not out.json and not out.count:
                out.line("no audit entries")
    finally:
        svc.close()
    return EXIT_OK
