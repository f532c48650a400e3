"""``compaction``: the headless command line (documented in docs/cli.md).

Exit codes: 0 success · 1 the operation ran but failed (e.g. a summary was rejected) ·
2 bad input or an unusable database · 3 ``thread_busy``. Errors are one line on stderr
(``error: …``), or a JSON object ``{"error": {...}}`` on stdout with ``--json``; never a traceback:
a failure that is not one of the engine's typed errors (a row another program wrote that breaks
docs/schema.md, most often) is described in words by :func:`engine.core.errors.describe_failure` (the one copy the inspector shares) and exits 2.
The password of the ``--db`` URL is masked in every message.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from ...core import figures
from ...core.errors import CannotCompact, EngineError
from ...core.views import THREAD_SORTS
from . import (
    check,
    config_cmd,
    demo,
    discover_cmd,
    history_cmd,
    import_cmd,
    preview,
    revert_cmd,  # issue 23: revert, audit
    stats_cmd,  # issue 26: compaction stats
    steer_cmd,
    whatif_cmd,
)
from .output import (  # noqa: F401 (EXIT_BUSY and EXIT_USAGE are re-exported for callers and tests)
    EXIT_BUSY,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
    Listing,
    Reported,
    add_paging,
    cell,
    database_url,
    describe_failure,
    display_width,
    emit_json,
    error_json,
    exit_code_for,
    mask_secrets,
    quiet_pipe,
    url_secrets,
    whole_number,
)

#: the largest ``threads --limit`` (more than any store lists at once; SQL integers stay in range)
MAX_LIMIT = 1_000_000


def _db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="database URL or SQLite file path (default: the demo database)")


_limit = whole_number(1, MAX_LIMIT)


@contextmanager
def _service(args: argparse.Namespace) -> Iterator[Any]:
    """The service on ``--db`` for the length of one command."""
    from ...service import open_service

    svc = open_service(database_url(getattr(args, "db", None)))
    try:
        yield svc
    finally:
        svc.close()


# -- commands ---------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    from ...store import display_url, migrate, normalize_url

    url = database_url(args.db)
    before, after = migrate(url)
    shown = display_url(normalize_url(url))
    if args.json:
        emit_json({"db": shown, "from": before, "to": after})
    elif before == after:
        print(f"{shown}: schema already at {after}")
    else:
        print(f"{shown}: schema {before or 'empty'} -> {after}")
    return EXIT_OK


def thread_json(t: Any) -> dict[str, Any]:
    return {
        "thread": t.key,
        "title": t.title,
        "messages": t.message_count,
        "generation": t.generation,
        "compact_count": t.compact_count,
        "source_compactions": t.source_compact_count,
        "boundary": t.boundary,
        "busy": t.busy,
        "busy_reason": t.busy_reason,
        "model": t.model,
        "source_format": t.source_format,
        "error": t.error,
        "kept_tokens": t.kept_tokens,
        "threshold": t.threshold,
        "context_window": t.window,
        "pressure": t.pressure,
        "updated_at": t.updated_at,
    }


#: threads read per query while a listing streams
BATCH = 1000


def thread_query(args: argparse.Namespace) -> Any:
    """The :class:`engine.core.views.ThreadQuery` of ``threads``' options: key and title order ascending,
    the others largest first (``--reverse`` flips it)."""
    from dataclasses import replace

    descending = args.sort not in ("key", "title")
    return replace(stats_cmd.query_of(args), sort=args.sort, descending=descending != args.reverse)


def cmd_threads(args: argparse.Namespace) -> int:
    """The threads of ``--filter`` / ``--only`` / ``--source`` in ``--sort`` order, streamed a page
    at a time from the database (``svc.threads.page``: keyset, stable under concurrent inserts);
    ``next_after`` the opaque cursor of the next page, null on the last; ``total`` how many match."""
    query = thread_query(args)
    with _service(args) as svc, Listing("threads", json_mode=args.json, secrets=url_secrets(args.db)) as out:
        after, width = args.after, 0
        while out.count < args.limit:
            page = svc.threads.page(query, after=after, limit=min(BATCH, args.limit - out.count))
            out.tail["total"] = page.total
            for t in page.threads:
                row = thread_json(t)
                out.item(row)
                if not out.json:
                    if not width:
                        width = max(24, max(display_width(x.key) for x in page.threads))
                        out.line(f"{'THREAD':<{width}}  {'MSGS':>7}  {'GEN':>4}  {'PRESSURE':>8}  {'STATE':<16}  TITLE")
                    state = "unreadable" if row["error"] else (row["busy_reason"] or "idle")
                    title = f"(cannot be read: {row['error']})" if row["error"] else row["title"]
                    pressure = figures.percent(row["pressure"]) if row["pressure"] is not None else "-"
                    out.line(f"{cell(row['thread'], width)}  {row['messages']:>7}  {row['generation']:>4}  {pressure:>8}  {state:<16}  {title}")
            after = page.after
            if after is None or not page.threads:
                break
        out.next_after = after if out.count >= args.limit else None
        if not out.json:
            if not out.count:
                out.line("no threads")
            elif out.next_after:
                print(f"{out.count:,} of {out.tail.get('total', out.count):,} threads; more: --after {out.next_after}", file=sys.stderr)
    return EXIT_OK


#: what ``status`` says in each pressure state (``below``: nothing); the hint only up to the threshold
STATE_WORDS = {
    "hint": "85% of the threshold reached: consider `compaction compact`",
    "over_threshold": "over the threshold: the next model step compacts first (or `compaction compact` now)",
    "over_window": "over the context window: the provider refuses the next request as it stands; compact first",
    "window_unknown": "window unknown: the source names no model any catalogue knows and reported no window",
}


def status_json(st) -> dict[str, Any]:
    return {
        "thread": st.thread,
        "tokens": st.tokens,
        "anchored_tokens": st.anchored_tokens,
        "threshold": st.threshold,
        "context_window": st.context_window,
        "pressure_ratio": round(st.pressure_ratio, 4),
        "hint": st.hint,
        "state": st.state,
        "breakdown": dict(st.breakdown),
        "boundary": st.boundary,
        "generation": st.generation,
        "compact_count": st.compact_count,
        "source_compactions": st.source_compact_count,
        "busy": st.busy,
        "busy_reason": st.busy_reason,
        "window_source": st.window_source,
        "window_detail": st.window_detail,
        "basis": st.basis,
        "engine_tokens": st.engine_tokens,
        "source_detail": st.source_detail,
        "recorded_prompt_tokens": st.recorded_prompt_tokens,
        "recorded_usage": st.recorded_usage,
    }


def cmd_status(args: argparse.Namespace) -> int:
    with _service(args) as svc:
        data = status_json(svc.compaction.status(args.thread, remember=False))  # a read command writes nothing
    if args.json:
        emit_json(data)
        return EXIT_OK
    print(f"thread     {data['thread']}")
    if data["window_source"] == "unknown":
        print(f"tokens     {data['tokens']} (window unknown: no threshold)")
    else:
        print(f"tokens     {data['tokens']} / threshold {data['threshold']} ({figures.percent(data['tokens'] / data['threshold'] if data['threshold'] else 0.0)}), window {data['context_window'] or 'not recorded'}"
              + (" (threshold recorded by the thread's last model request)" if data["window_source"] == "recorded" else ""))
    if data["basis"] == "source":
        print(f"source     {data['source_detail']}")
        if data["recorded_usage"]:
            print(f"recorded   {data['recorded_usage']}")
        print(f"engine     our engine, whole history: {data['engine_tokens']}")
    state = STATE_WORDS.get(data["state"])
    if state:
        print(f"state      {state}")
    print("breakdown  " + ", ".join(f"{k} {v}" for k, v in data["breakdown"].items()))
    recorded = f" ({data['source_compactions']} recorded by the source)" if data["source_compactions"] else ""
    print(f"boundary   {data['boundary']}   generation {data['generation']}   compactions {data['compact_count']}{recorded}")
    print(f"busy       {data['busy_reason'] or 'idle'}")
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    if getattr(args, "plan", False):
        return _compact_plan(args)
    with _service(args) as svc:
        try:
            r = svc.compaction.compact(args.thread, instructions=getattr(args, "instructions", None), reason=getattr(args, "reason", None))
        except CannotCompact as exc:
            if exc.code == "summary_rejected":
                explain_rejection(svc, args.thread, exc)
            raise
    data = {
        "thread": args.thread,
        "status": r.status,
        "reason": r.reason,
        "before_tokens": r.before_tokens,
        "after_tokens": r.after_tokens,
        "compacted_messages": r.compacted_messages,
        "boundary": r.boundary,
        "generation": r.generation,
        "summarizer_calls": r.summarizer_calls,
        "still_over_threshold": getattr(r, "still_over_threshold", False),
        "note": getattr(r, "note", None),
        "instructions": getattr(args, "instructions", None),
    }
    if args.json:
        emit_json(data)
        return EXIT_OK
    if r.status == "no_op":
        print(f"nothing to compact ({r.reason}); nothing written")
    else:
        print(
            f"compacted {r.compacted_messages} messages: {r.before_tokens} -> {r.after_tokens} tokens, "
            f"boundary {r.boundary}, generation {r.generation}, {r.summarizer_calls} summarizer call(s)"
        )
    if data["still_over_threshold"]:
        print(f"still at or over the threshold: {data['note'] or 'the retained part alone reaches it'}")
    return EXIT_OK


def _compact_plan(args: argparse.Namespace) -> int:
    """``compact --plan [manual|pressure|overflow]``: what a compaction would do (:meth:`engine.service.compaction.CompactionFacet.plan`):
    Compact now (the default), the pressure path before the next model step, or overflow recovery; nothing written."""
    trigger = args.plan if isinstance(args.plan, str) else "manual"
    with _service(args) as svc:
        plan = svc.compaction.plan(args.thread, trigger=trigger)
    data = {"thread": args.thread, **plan.as_dict()}
    if args.json:
        emit_json(data)
        return EXIT_OK
    if not plan.possible:
        print(f"nothing to compact ({plan.reason}): {plan.tokens_before} tokens, threshold {plan.threshold}; nothing written")
        return EXIT_OK
    if plan.prune:
        stale = f"; {len(plan.prune_stale)} of them before the protected tail, at the smaller stale budget" if plan.prune_stale else ""
        ids = ", ".join(f"#{i}" for i in plan.prune[:12]) + (f" and {len(plan.prune) - 12} more" if len(plan.prune) > 12 else "")
        print(f"would prune {len(plan.prune)} tool result(s) ({ids}: {plan.prune_tokens} tokens now{stale})")
    if not plan.summarizes:
        print(f"no summary ({plan.reason}); tokens {plan.tokens_before}, threshold {plan.threshold}; nothing written")
        return EXIT_OK
    first = "in the first call"
    if plan.prune:
        first = ("then, if the prune leaves the thread at or over the threshold, the first call (planned on the thread as it is now)"
                 if plan.trigger == "pressure" else "then, in one call (planned on the thread as it is now)")
    print(f"would summarize {plan.selected_messages} messages (#{plan.first_selected}..#{plan.selected_boundary}, {plan.removed_tokens} tokens; "
          f"{plan.replaced_tokens} with the previous summary) {first}: summary budget {plan.max_tokens} + {plan.identifier_tokens} for identifiers")
    print(f"tokens {plan.tokens_before} -> about {plan.expected_after} (target {plan.target}, threshold {plan.threshold}); nothing written")
    return EXIT_OK


def explain_rejection(svc: Any, key: str, exc: CannotCompact) -> None:
    """Say why a summary was rejected: the cause the compactor recorded in the thread's newest
    ``summary_rejected`` event (e.g. ``summarizer_failed: HTTP 429 from … after 2 attempts``) goes
    into the message and into ``exc.detail``. Best effort: when it cannot be read the message stays."""
    from ...core.errors import rejection_detail
    from ...core.events import EventKind

    if exc.detail:  # already carried by the error
        return
    try:
        newest, after = None, None
        while True:
            page = svc.reads.events(key, after_id=after, limit=1000)
            newest = next((e for e in reversed(page) if e.kind == EventKind.SUMMARY_REJECTED), newest)
            if len(page) < 1000:
                break
            after = page[-1].id
    except Exception:  # noqa: BLE001 - the rejection itself is what must be reported
        return
    detail = rejection_detail(exc, dict(newest.data) if newest is not None else None)
    if detail:
        exc.explain(detail)


def cmd_recount(args: argparse.Namespace) -> int:
    """Keep token counts with the messages that have none (databases from before migration 0003).
    A thread that cannot be read (a corrupt row) is reported and the others still recounted:
    exit 1 then. A ``--thread`` that does not exist is a usage error (exit 2). Every thread in key
    order (``--limit`` / ``--after`` page through them), each line printed when its thread is done."""
    done: dict[str, int] = {}
    errors: dict[str, str] = {}
    next_after = None
    with _service(args) as svc:
        if args.thread:
            keys = list(args.thread)
            for key in keys:
                svc.reads.thread(key)  # ThreadNotFound before anything is written
        else:
            keys = [t.key for t in svc.reads.list_threads(after_key=args.after, limit=(args.limit or MAX_LIMIT) + 1)]
            if args.limit is not None and len(keys) > args.limit:
                keys = keys[: args.limit]
                next_after = keys[-1]
        for key in keys:
            try:
                done[key] = svc.compaction.recount(key)
                if not args.json:
                    print(f"{key}: {done[key]:,} message{'s' if done[key] != 1 else ''} recounted", flush=True)
            except EngineError as exc:  # the rows before it keep their counts (a batch commits)
                errors[key] = describe_failure(exc)[1]
                if not args.json:
                    print(f"{key}: not recounted: {errors[key]}", file=sys.stderr, flush=True)
    if args.json:
        emit_json({"recounted": done, "errors": errors, "total": sum(done.values()), "next_after": next_after})
        return EXIT_FAILED if errors else EXIT_OK
    more = f"; more threads: --after {next_after}" if next_after else ""
    print(f"total: {sum(done.values()):,} in {len(done):,} thread{'s' if len(done) != 1 else ''}{more}")
    return EXIT_FAILED if errors else EXIT_OK


def episode_json(ep: Any) -> dict[str, Any]:
    return {
        "run": ep.run_id,
        "outcome": ep.outcome,
        "steps": [
            {
                "kind": s.kind,
                "attempt": s.attempt,
                "error_code": s.error_code,
                "error_message": s.error_message,
                "tokens_before": s.tokens_before,
                "tokens_after": s.tokens_after,
                "generation_before": s.generation_before,
                "generation_after": s.generation_after,
                "no_progress": s.no_progress,
                "surface_messages": len(s.surface) if s.surface is not None else None,
            }
            for s in ep.steps
        ],
    }


def cmd_replay(args: argparse.Namespace) -> int:
    """The thread's episodes in run order, each printed as it is formatted; paged by run id."""
    with _service(args) as svc:
        every = svc.reads.replay(args.thread)
    episodes = [ep for ep in every if args.after is None or (ep.run_id or 0) > args.after]
    first = len(every) - len(episodes)  # episodes numbered across pages
    with Listing("episodes", json_mode=args.json, head={"thread": args.thread}, secrets=url_secrets(args.db)) as out:
        for i, ep in enumerate(episodes):
            if args.limit is not None and i >= args.limit:
                out.next_after = episodes[i - 1].run_id
                break
            data = episode_json(ep)
            out.item(data)
            if out.json:
                continue
            out.line(f"episode {first + i + 1} (run {data['run']}): {data['outcome']}")
            for s in data["steps"]:
                gen = f"gen {s['generation_before']}->{s['generation_after']}" if s["generation_before"] is not None else ""
                tok = f"tokens {s['tokens_before']}->{s['tokens_after']}" if s["tokens_before"] is not None else ""
                flag = "  [no progress]" if s["no_progress"] else ""
                err = f"  {s['error_code']}: {s['error_message']}" if s["error_code"] else ""
                out.line(f"  #{s['attempt']} {s['kind']:<17} {tok:<24} {gen}{flag}{err}")
        if not out.json and not out.count:
            out.line("no overflow-recovery episodes")
    return EXIT_OK


# -- wiring -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="compaction", description="Context compaction for LLM-agent conversations.")
    p.add_argument("--read-only", action="store_true", help="open the database read-only (SQLite mode=ro); every write is refused")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    m = sub.add_parser("migrate", help="create or upgrade the database schema")
    _db_arg(m)
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_migrate)

    t = sub.add_parser("threads", help="list threads")
    _db_arg(t)
    t.add_argument("--filter", metavar="TEXT", help="only threads whose key, title, source format or model contains TEXT (any case)")
    t.add_argument("--sort", choices=THREAD_SORTS, default="key", help="order (default key; activity, pressure, compactions, messages: largest first)")
    t.add_argument("--reverse", action="store_true", help="the other direction")
    t.add_argument("--source", metavar="FORMAT", help="only threads imported from FORMAT (claude-code, codex, …), or live: written live")
    for flag, name in stats_cmd.FILTER_FLAGS.items():  # the same filters as `compaction stats` (ANDed)
        t.add_argument(flag, dest=f"f_{name}", action="store_true", help=f"only threads: {name.replace('_', ' ')}")
    add_paging(t, "threads", "KEY", default=500, high=MAX_LIMIT)
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_threads)

    s = sub.add_parser("status", help="context pressure of a thread for its next turn")
    _db_arg(s)
    s.add_argument("--thread", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    c = sub.add_parser("compact", help="compact an idle thread now (manual compaction)")
    _db_arg(c)
    c.add_argument("--thread", required=True)
    c.add_argument("--instructions", help="what the summary must keep (paths, ids, tools…); default: the thread's standing instructions")
    c.add_argument("--reason", help="why (recorded in the audit log)")
    c.add_argument("--plan", nargs="?", const="manual", default=None, choices=("manual", "pressure", "overflow"), metavar="TRIGGER",
                   help="say what compacting now would do (the range, the budgets, the projected tokens); write nothing. "
                        "--plan pressure: what the pressure path would do before the next model step (prune first, then a summary); "
                        "--plan overflow: what overflow recovery would do")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_compact)

    r = sub.add_parser("replay", help="overflow-recovery episodes of a thread, step by step")
    _db_arg(r)
    r.add_argument("--thread", required=True)
    r.add_argument("--json", action="store_true")
    add_paging(r, "episodes", "RUN", after_type=whole_number(0, out_of_range="run ids are not negative"))
    r.set_defaults(func=cmd_replay)

    rc = sub.add_parser("recount", help="keep token counts with messages written before counts were kept (faster cold status)")
    _db_arg(rc)
    rc.add_argument("--thread", action="append", help="only this thread (repeatable; default: every thread)")
    rc.add_argument("--json", action="store_true")
    add_paging(rc, "threads (in key order; not with --thread)", "KEY", high=MAX_LIMIT)
    rc.set_defaults(func=cmd_recount)

    check.add_parser(sub)
    for register in _optional_commands():
        register(sub)
    return p


def _optional_commands() -> list[Callable[[Any], None]]:
    return [preview.add_parser, demo.add_parser, import_cmd.add_parser, discover_cmd.add_parser, history_cmd.add_parser, whatif_cmd.add_parser, config_cmd.add_parser, steer_cmd.add_parser, revert_cmd.add_parser, stats_cmd.add_parser]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. A reader of standard output that left (``| head``) ends the
    command quietly with :data:`EXIT_PIPE`, on every path, errors included."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # what is still buffered meets a closed pipe here, not at exit
        return code
    except BrokenPipeError:  # e.g. `compaction threads | head -1`: the reader left, not an error
        quiet_pipe()
        return EXIT_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "read_only", False):  # every command's store opens read-only (engine.service.open_service)
        import os

        os.environ["COMPACTION_READ_ONLY"] = "1"
    want_json = bool(getattr(args, "json", False))
    secrets = url_secrets(getattr(args, "db", None))
    try:
        run = getattr(args, "run", None) or args.func
        return int(run(args) or 0)
    except Reported as done:  # a streamed listing already wrote its error
        return done.exit_code
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - never a traceback (docs/cli.md); one line in words
        _report(exc, want_json, secrets)
        return exit_code_for(exc)


def _report(exc: BaseException, want_json: bool, secrets: Sequence[str] = ()) -> None:
    if want_json:
        emit_json({"error": error_json(exc, secrets)})
    else:
        print(f"error: {mask_secrets(describe_failure(exc)[1], secrets)}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
