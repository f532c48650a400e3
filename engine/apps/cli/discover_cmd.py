"""``compaction discover``: the sessions on this machine (docs/import.md#discovery, docs/cli.md).

``compaction discover [--db URL] [--folder DIR]... [--import] [--follow] [--json]``

Lists the sessions each supported tool keeps in its documented default locations under the home
directory, and in each ``--folder`` (recognized by their content): tool, project, size, last
activity, and whether the database already holds them (``imported``, ``changed`` when the file
grew since). The database is ``--db``, else where ``compaction import`` writes (``$COMPACTION_DB``,
else ``sessions.db`` in the user's data directory); one that does not exist yet holds nothing, and
is created only by ``--import`` or ``--follow``. ``--import`` imports those not imported yet (and
those changed since); ``--follow`` then imports new and growing sessions as they change, until
SIGINT / SIGTERM. Exit 0; 1 when an ``--import`` failed for a file; 2 for a bad database.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from .output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Listing, add_paging, emit_json, url_secrets


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "discover",
        help="list the agent sessions on this machine (and import or follow them)",
        description="List the sessions each supported tool keeps in its default locations, and in --folder.",
    )
    p.add_argument("--db", help="the database they are compared with / imported into (default: $COMPACTION_DB, else "
                                "sessions.db in the user's data directory)")
    p.add_argument("--folder", action="append", default=[], metavar="DIR", help="also search this folder (repeatable)")
    p.add_argument("--home", default=None, help=argparse.SUPPRESS)  # tests: another home directory
    p.add_argument("--import", dest="do_import", action="store_true", help="import the sessions not imported yet (or changed since)")
    p.add_argument("--follow", action="store_true", help="import new and growing sessions as they change, until interrupted")
    p.add_argument("--follow-seconds", type=float, default=None, help=argparse.SUPPRESS)  # tests: stop after this long
    p.add_argument("--json", action="store_true")
    add_paging(p, "sessions (newest first; with --import, the sessions of this page)", "CURSOR")
    p.set_defaults(run=run)


def _when(s: Any) -> str:
    return s.modified.astimezone().strftime("%Y-%m-%d %H:%M")


def _state(s: Any) -> str:
    if not s.imported:
        return "no"
    return "changed" if s.changed_since_import else "yes"


def cursor(s: Any) -> str:
    """The ``next_after`` of a page ending with session ``s``: its last activity and path (the
    listing's order, newest first)."""
    return f"{s.modified.isoformat()} {s.path}"


def _page(found: list[Any], args: argparse.Namespace) -> tuple[list[Any], str | None]:
    """The sessions after ``--after`` (in the listing's order), at most ``--limit``; the next cursor."""
    if args.after is not None:
        from datetime import datetime

        when, _, path = args.after.partition(" ")
        try:
            key = (datetime.fromisoformat(when), path)
        except ValueError:
            from ...core.errors import EngineError

            raise EngineError(f"--after takes the next_after of a previous page (a time and a path), not {args.after!r}",
                              code="invalid_argument") from None
        found = [s for s in found if (s.modified, s.path) < key]
    if args.limit is not None and len(found) > args.limit:
        found = found[: args.limit]
        return found, cursor(found[-1])
    return found, None


def _print(found: list[Any], out: Any) -> None:
    from ...core.figures import byte_size
    from ...core.views import source_format_name

    if not found:
        out.line("no sessions found")
        return
    rows = [(source_format_name(s.tool), Path(s.project).name if s.project else "-",
             byte_size(s.size), _when(s), _state(s), s.path) for s in found]
    heads = ("TOOL", "PROJECT", "SIZE", "LAST ACTIVITY", "IMPORTED", "PATH")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads[:-1])]
    out.line("  ".join(h.ljust(w) for h, w in zip(heads, widths)) + "  PATH")
    for r in rows:
        out.line("  ".join(v.ljust(w) if i != 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) + "  " + r[-1])
    done = sum(1 for s in found if s.imported)
    more = f"; more sessions: --after '{out.next_after}'" if out.next_after else ""
    out.line(f"{len(found)} session{'s' if len(found) != 1 else ''}, {done} imported{more}")


def run(args: argparse.Namespace) -> int:
    from ...core.errors import EngineError
    from ...discovery import discover
    from ...service import sessions_database_url
    from ...store import normalize_url
    from .import_cmd import _open

    want_json = bool(args.json)
    url = args.db if args.db is not None else sessions_database_url()
    if not url.strip():
        print('error: empty database URL (--db ""): give a SQLite file or a database URL', file=sys.stderr)
        return EXIT_USAGE
    u = normalize_url(url)
    missing = (u.get_backend_name() == "sqlite" and u.database is not None and u.database not in ("", ":memory:")
               and not Path(u.database).exists())
    writes = args.do_import or args.follow
    svc = None
    if not missing or writes:
        try:
            svc = _open(url)
        except EngineError as exc:
            if want_json:
                emit_json({"error": {"code": exc.code, "message": exc.message}})
            else:
                print(f"error: {exc.message}", file=sys.stderr)
            return EXIT_USAGE
    try:
        found = svc.imports.discover_sessions(args.folder, home=args.home) if svc is not None else discover(args.folder, home=args.home)
        found, next_after = _page(found, args)
        imported: list[Any] = []
        errors: list[dict[str, str]] = []
        if args.do_import and svc is not None:
            for s in found:
                if s.imported and not s.changed_since_import:
                    continue
                try:
                    imported.extend(svc.imports.import_file(s.path, format=s.tool))
                except EngineError as exc:
                    errors.append({"file": s.path, "code": exc.code, "message": exc.message})
                    if not want_json:
                        print(f"error: {s.path}: {exc.message}", file=sys.stderr)
            if imported:
                marked = {x.path: x for x in svc.imports.discover_sessions(args.folder, home=args.home)}
                found = [marked.get(s.path, s) for s in found]
        if not (want_json and args.follow):
            with Listing("sessions", json_mode=want_json, head={"db": url}, secrets=url_secrets(url)) as out:
                out.next_after = next_after
                if args.do_import:
                    out.tail.update(imported=[r.to_json() for r in imported], errors=errors)
                if want_json:
                    for s in found:
                        out.item(s.to_json())
                else:
                    _print(found, out)
                    if args.do_import:
                        out.line(f"imported {len(imported)} session{'s' if len(imported) != 1 else ''}"
                                 + (f", {len(errors)} failed" if errors else ""))
        if args.follow and svc is not None:
            _follow(svc, args, want_json)
        return EXIT_FAILED if errors else EXIT_OK
    finally:
        if svc is not None:
            svc.close()


def _follow(svc: Any, args: argparse.Namespace, want_json: bool) -> None:
    """Follow all until SIGINT / SIGTERM (or ``--follow-seconds``): one line per session written."""
    stop = threading.Event()

    def reports(rs: list[Any]) -> None:
        for r in rs:
            if want_json:
                emit_json({"followed": r.to_json()})
            else:
                print(f"{r.thread} <- {r.source}: +{r.messages} messages, +{r.compactions} compactions, +{r.requests} requests", flush=True)

    def error(path: str, exc: BaseException) -> None:
        print(f"warning: {path or 'follow all'}: {getattr(exc, 'message', None) or exc}", file=sys.stderr, flush=True)

    restore = [(sig, signal.signal(sig, lambda *_: stop.set())) for sig in (signal.SIGINT, signal.SIGTERM)]
    follower = svc.imports.follow_sessions(args.folder, home=args.home, on_reports=reports, on_error=error)
    if not want_json:
        watched = ", ".join(str(p) for p in follower.watched) or "nothing yet (no default location exists)"
        print(f"following {watched} (Ctrl+C to stop)", file=sys.stderr, flush=True)
    try:
        stop.wait(args.follow_seconds)
    finally:
        follower.stop()
        for sig, handler in restore:
            signal.signal(sig, handler)
