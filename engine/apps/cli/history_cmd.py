"""``compaction diff`` and ``compaction export``: what a compaction kept and dropped, and a thread's
compaction history as Markdown or JSON (docs/cli.md).

``compaction diff [--db URL] --thread KEY [--compaction N] [--json]`` — one compaction (1-based, in
the order ``export`` lists them; default the latest) before and after: tokens by category, what went
into the summary, the summary, what stayed, what was pruned to a preview (or cleared by the source),
the dropped specifics and the cost.

``compaction export [--db URL] --thread KEY --format md|json [--output FILE]`` — every compaction
of the thread (ours and the source's recorded ones) with trigger, tokens before / after, summary,
dropped specifics and cost; to stdout, or to FILE.

``compaction events [--db URL] --thread KEY [--kind K]... [--limit N] [--after ID] [--json]`` — the
thread's recorded events (docs/events.md) oldest first, streamed a page at a time.

Exit 0 on success, 2 for an unknown thread, a compaction number out of range, an unwritable FILE
or an unusable database (one line on stderr, or ``{"error": {...}}`` with ``diff --json``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .output import EXIT_OK, EXIT_USAGE, Listing, add_paging, describe_failure, emit_json, mask_secrets, open_db, url_secrets, whole_number

#: characters of a message shown per line in the text output of ``diff``
_LINE = 100


_positive = whole_number(1, out_of_range="compactions are numbered from 1")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    d = subparsers.add_parser(
        "diff",
        help="one compaction before and after: summarized, kept, pruned, dropped specifics, tokens, cost",
        description="Show what one compaction of a thread summarized, kept, pruned and dropped (default: the latest).",
    )
    d.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    d.add_argument("--thread", required=True)
    d.add_argument("--compaction", type=_positive, metavar="N", help="the compaction's number (1 = the oldest; default: the latest)")
    d.add_argument("--json", action="store_true")
    d.set_defaults(run=run_diff)

    e = subparsers.add_parser(
        "export",
        help="a thread's compaction history as Markdown or JSON",
        description="Export every compaction of a thread (trigger, tokens, summary, dropped specifics, cost).",
    )
    e.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    e.add_argument("--thread", required=True)
    e.add_argument("--format", required=True, choices=["md", "json"])
    e.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")
    e.set_defaults(run=run_export)

    v = subparsers.add_parser("events", help="a thread's recorded events (compactions, prunes, rejections, overflow steps …), oldest first")
    v.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")
    v.add_argument("--thread", required=True)
    v.add_argument("--kind", action="append", metavar="KIND", help="only events of this kind (repeatable; docs/events.md)")
    add_paging(v, "events", "ID", after_type=whole_number(0, out_of_range="event ids are not negative"))
    v.add_argument("--json", action="store_true")
    v.set_defaults(run=run_events)


#: events read per query while the listing streams
EVENT_BATCH = 1000


def run_events(args: argparse.Namespace) -> int:
    """The thread's events oldest first, a batch at a time (keyset on the event id)."""
    import json

    svc = open_db(args)
    try:
        svc.reads.thread(args.thread)  # thread_not_found before anything is printed
        with Listing("events", json_mode=args.json, head={"thread": args.thread}, secrets=url_secrets(args.db)) as out:
            after, last = args.after, None
            while args.limit is None or out.count < args.limit:
                want = EVENT_BATCH if args.limit is None else min(EVENT_BATCH, args.limit - out.count)
                page = svc.reads.events(args.thread, after_id=after, limit=want, kinds=args.kind)
                for e in page:
                    out.item({"id": e.id, "kind": e.kind, "trigger": e.trigger, "run": e.run_id, "created_at": e.created_at, "data": dict(e.data)})
                    if not out.json:
                        data = json.dumps(dict(e.data), ensure_ascii=False, default=str)
                        out.line(f"#{e.id} {e.created_at:%Y-%m-%d %H:%M:%S} {e.kind:<20} {e.trigger or '-':<10} {_short(data)}")
                if len(page) < want:
                    break
                after = last = page[-1].id
            if last is not None and args.limit is not None and out.count >= args.limit \
                    and svc.reads.events(args.thread, after_id=last, limit=1, kinds=args.kind):
                out.next_after = last
            if not out.json and not out.count:
                out.line("no events")
            elif not out.json and out.next_after is not None:
                out.line(f"more events: --after {out.next_after}")
    finally:
        svc.close()
    return EXIT_OK


def _fail(exc: BaseException, want_json: bool, secrets: list[str]) -> int:
    code, message = describe_failure(exc)
    message = mask_secrets(message, secrets)
    if want_json:
        emit_json({"error": {"code": code, "message": message}})
    else:
        print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def message_json(m: Any) -> dict[str, Any]:
    from ...core.messages import META_PRUNED

    return {
        "id": m.id,
        "role": m.role,
        "content": m.content,
        "tool_call_id": m.tool_call_id,
        "name": m.name,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls],
        "pruned": bool(m.metadata.get(META_PRUNED)),
    }


def offload_json(o: Any) -> dict[str, Any]:
    return {"message_id": o.message_id, "tool": o.tool_name, "sha256": o.sha256, "path": o.path,
            "original_tokens": o.original_tokens, "preview_tokens": o.preview_tokens, "preview": o.preview}


def diff_json(key: str, count: int, d: Any, cost: Any) -> dict[str, Any]:
    from ...history import cost_to_json

    return {
        "thread": key,
        "compaction": d.index,
        "compactions": count,
        "kind": d.kind,
        "trigger": d.trigger,
        "origin": d.origin,
        "created_at": d.created_at.isoformat() if d.created_at is not None else None,
        "generation_before": d.generation_before,
        "generation_after": d.generation_after,
        "tokens": {"before": d.measured_before, "after": d.measured_after, "measured_by": d.measured_by},
        "tokens_before": dict(d.tokens_before),
        "tokens_after": dict(d.tokens_after),
        "previous_summary": d.previous_summary,
        "summary": d.summary,
        "summarized": [message_json(m) for m in d.summarized],
        "kept": [message_json(m) for m in d.kept],
        "pruned": [offload_json(o) for o in d.pruned],
        "cleared": [message_json(m) for m in d.cleared],
        "dropped": d.dropped.to_json() if d.dropped is not None else None,
        "cost": cost_to_json(cost),
        "note": d.note,
        "record_id": d.record_id,
        "written_by": d.written_by,
    }


def _short(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= _LINE else one[: _LINE - 1] + "…"


def _print_messages(title: str, messages: list[dict[str, Any]]) -> None:
    print(f"{title}: {len(messages)} message{'s' if len(messages) != 1 else ''}")
    for m in messages:
        calls = " ".join(f"[{c['name']}]" for c in m["tool_calls"])
        print(f"  #{m['id']} {m['role']}: {_short(m['content'] or calls)}")


def _print_diff(data: dict[str, Any]) -> None:
    from ...core import figures
    from ...core.views import DIFF_CATEGORIES

    gen = ""
    if data["generation_before"] is not None:
        gen = f", generation {data['generation_before']} -> {data['generation_after']}"
    print(f"compaction {data['compaction']} of {data['compactions']}: {data['kind']} "
          f"({data['trigger'] or 'no trigger'}, {data['origin']}) at {data['created_at'] or 'an unknown time'}{gen}")
    t = data["tokens"]
    by = {"compactor": "as the compactor measured it", "source": f"as {data['origin']} reported it", "rebuilt": "our count of the rebuilt surfaces"}
    print(f"tokens: {figures.tokens_change(t['before'], t['after'])} ({by.get(t['measured_by'], t['measured_by'])})")
    print(f"{'rebuilt':<10} {'before':>9} {'after':>9}")
    for k in DIFF_CATEGORIES:
        print(f"{k:<10} {figures.tokens(data['tokens_before'][k]):>9} {figures.tokens(data['tokens_after'][k]):>9}")
    _print_messages("summarized", data["summarized"])
    if data["summary"] and data["kind"] != "prune":
        print(f"summary: {_short(data['summary'])}")
        if data.get("written_by"):
            print(f"written by: {data['written_by']}")
    _print_messages("kept", data["kept"])
    if data["pruned"]:
        print(f"pruned to a preview: {len(data['pruned'])}")
        for o in data["pruned"]:
            print(f"  #{o['message_id']} {o['tool']}: {o['original_tokens']:,} -> {o['preview_tokens']:,} tokens (sha256 {o['sha256'][:12]}…)")
    if data["cleared"]:
        _print_messages("cleared by the source", data["cleared"])
    dropped = data["dropped"]
    if dropped is None:
        print("dropped specifics: " + ("none (a prune keeps identifiers in its previews)" if data["kind"] == "prune" and data["origin"] == "engine" else "not known"))
    else:
        ref = dropped["referenced_count"]
        listed = len(dropped["dropped"])
        print(f"dropped specifics: {figures.count(dropped['dropped_count'])} of {figures.count(dropped['seen'])} seen"
              + (f"; WARNING: {figures.count(ref)} referenced by the current request or the retained tail" if ref else "")
              + (f" ({figures.capped(listed, dropped['dropped_count'])} listed)" if listed < (dropped["dropped_count"] or 0) else ""))
        for x in dropped["dropped"]:
            print(f"  {x['kind']:<10} {_short(x['value'])}{'  [referenced]' if x['referenced'] else ''}")
    c = data["cost"]
    if c is not None:
        summ = ("unknown" if c["summarizer_prompt_tokens"] is None and c["summarizer_completion_tokens"] is None
                else f"{figures.tokens(c['summarizer_prompt_tokens'] or 0)} + {figures.tokens(c['summarizer_completion_tokens'] or 0)} tokens")
        money = f"; net {figures.money(c['money'], c['currency'])}" if c["money"] is not None else ""
        print(f"cost: summarizer {summ}; saved {figures.tokens(c['saved_prompt_tokens'])} prompt tokens over "
              f"{figures.plural(c['following_requests'], 'request')} ({c['source']}){money}")
        if c["price_note"]:
            print(f"  {c['price_note']}")
    if data["note"]:
        print(f"note: {data['note']}")


def run_diff(args: argparse.Namespace) -> int:
    want_json = bool(args.json)
    secrets = url_secrets(args.db)
    try:
        svc = open_db(args)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        return _fail(exc, want_json, secrets)
    try:
        th = svc.reads.thread_history(args.thread)
        d = th.diff(args.compaction)
        data = diff_json(args.thread, len(th.compactions), d, th.cost(d.index, diff=d))
    except Exception as exc:  # noqa: BLE001
        return _fail(exc, want_json, secrets)
    finally:
        svc.close()
    if want_json:
        emit_json(data)
    else:
        _print_diff(data)
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:

    secrets = url_secrets(args.db)
    try:
        svc = open_db(args)
    except Exception as exc:  # noqa: BLE001
        return _fail(exc, False, secrets)
    try:
        text = svc.reads.export_history(args.thread, args.format)
    except Exception as exc:  # noqa: BLE001
        return _fail(exc, False, secrets)
    finally:
        svc.close()
    if args.output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return EXIT_OK
    out = Path(args.output)
    tmp = out.with_name(out.name + ".part")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True) if tmp.parent.is_dir() else None
        print(f"error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote the compaction history of {args.thread} to {out} ({args.format})", file=sys.stderr)
    return EXIT_OK
