"""``compaction pin`` and ``compaction policy``: steer compaction of one thread (documented in
docs/cli.md). Pins keep a message (with its tool round) verbatim through compaction; a thread's
policy sets its threshold, window, retained tail and standing instructions for that thread only.
Each change writes one audit row naming the operator (the database role, or the OS user)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ...core.errors import EngineError
from .output import EXIT_OK, Listing, add_paging, emit_json, open_db, url_secrets, whole_number

__all__ = ["add_parser", "parse_assignment", "run_pin", "run_policy"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("pin", help="pin a message (and its tool round) so compaction keeps it verbatim; --unpin undoes it")
    p.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    p.add_argument("--thread", required=True)
    p.add_argument("--message", type=int, help="the message id (a tool call pins its results, a result its call)")
    p.add_argument("--unpin", action="store_true", help="remove the pin of the message's round")
    p.add_argument("--reason", help="why (recorded in the audit log)")
    p.add_argument("--list", action="store_true", help="list the thread's pinned messages")
    p.add_argument("--json", action="store_true")
    add_paging(p, "pins (--list, by message id)", "ID", after_type=whole_number(0, out_of_range="message ids are not negative"))
    p.set_defaults(run=run_pin)

    q = subparsers.add_parser("policy", help="a thread's own policy: show where each value comes from, or --set / --unset values")
    q.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    q.add_argument("--thread", required=True)
    q.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="set for this thread only (repeatable): threshold_ratio=0.7, context_window=200000, retained_tail_ratio=0.1, instructions='keep src/'")
    q.add_argument("--unset", action="append", default=[], metavar="KEY", help="remove a value set for this thread (repeatable)")
    q.add_argument("--reason", help="why (recorded in the audit log)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(run=run_policy)


def parse_assignment(text: str) -> tuple[str, Any]:
    """``key=value``: the value as JSON when it parses (numbers, true/false, null), else the text."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise EngineError(f"--set needs KEY=VALUE, got {text!r}", code="invalid_argument")
    if key == "instructions":
        return key, raw
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def run_pin(args: argparse.Namespace) -> int:
    svc = open_db(args)
    try:
        if args.list or args.message is None:
            if args.message is None and not args.list:
                raise EngineError("name the message to pin with --message ID (or --list the pins)", code="invalid_argument")
            pins = [p for p in sorted(svc.steering.pins(args.thread), key=lambda p: p.message_id) if args.after is None or p.message_id > args.after]
            with Listing("pins", json_mode=args.json, head={"thread": args.thread}, secrets=url_secrets(args.db)) as out:
                for i, p in enumerate(pins):
                    if args.limit is not None and i >= args.limit:
                        out.next_after = pins[i - 1].message_id
                        break
                    r = {"message_id": p.message_id, "pinned_by": p.pinned_by, "pinned_at": p.pinned_at.isoformat() if p.pinned_at else None,
                         "reason": p.reason}
                    out.item(r)
                    if not out.json:
                        out.line(f"#{r['message_id']}  {r['pinned_by']}  {r['pinned_at'] or ''}  {r['reason'] or ''}".rstrip())
                if not out.json:
                    more = f"; more: --after {out.next_after}" if out.next_after is not None else ""
                    out.line(f"{out.count} pinned message(s){more}")
            return EXIT_OK
        change = svc.steering.pin(args.thread, args.message, reason=args.reason, unpin=args.unpin)
        operator = svc.steering.operator()
    finally:
        svc.close()
    data = {"thread": change.thread, "message_id": change.message_id, "action": change.action, "covered": list(change.covered),
            "changed": list(change.changed), "pins_version": change.pins_version, "operator": operator, "audit_id": change.audit_id}
    if args.json:
        emit_json(data)
    elif not change.changed:
        print(f"message #{change.message_id} was already {'un' if args.unpin else ''}pinned; nothing changed")
    else:
        ids = ", ".join(f"#{i}" for i in change.changed)
        print(f"{'unpinned' if args.unpin else 'pinned'} {ids} (as {operator})")
    return EXIT_OK


def policy_json(view: Any) -> dict[str, Any]:
    return {
        "thread": view.thread, "provider": view.provider, "model": view.model,
        "context_window": view.context_window, "window_source": view.window_source,
        "threshold": view.threshold, "target_tokens": view.target_tokens, "retained_tail_tokens": view.retained_tail_tokens,
        "values": {k: {"value": v, "from": view.origins.get(k)} for k, v in view.values.items()},
        "thread_overrides": dict(view.overrides), "instructions": view.instructions,
    }


def run_policy(args: argparse.Namespace) -> int:
    svc = open_db(args)
    try:
        values = dict(parse_assignment(a) for a in args.set)
        if values or args.unset:
            view = svc.steering.set_thread_policy(args.thread, values, unset=args.unset, reason=args.reason)
        else:
            view = svc.steering.thread_policy(args.thread)
    finally:
        svc.close()
    data = policy_json(view)
    if args.json:
        emit_json(data)
        return EXIT_OK
    print(f"thread {view.thread}  route {view.provider or '-'}/{view.model or '-'}")
    if view.threshold is not None:
        print(f"window {view.context_window:,} ({view.window_source})   threshold {view.threshold:,}   target {view.target_tokens:,}   retained tail {view.retained_tail_tokens:,}")
    for k, v in data["values"].items():
        print(f"  {k:28} {str(v['value']):>12}   from {v['from']}")
    if view.instructions:
        print(f"standing instructions: {view.instructions}")
    return EXIT_OK
