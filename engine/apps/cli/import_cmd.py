"""``compaction import``: read other agents' transcripts into the database (docs/import.md).

``compaction import [--db URL] [--format F] [--thread KEY] [--follow] [--limit N] [--after PATH] [--json] FILE|DIR...``

Prints a line per file as it is done (``--json``: one streamed object ``{"files": [entry…],
"imported": [report…], "errors": [{"file", "code", "message"}…], "counts", "next_after"}``). A DIR
that is not itself a session is imported recursively, with progress, a line per file and resumably
(:mod:`engine.apps.cli.bulk_import`). Exit 0 when every file imported, 1 when any file could not be
read (the others are still imported), 2 for a bad database or bad arguments, 130 when interrupted
(Ctrl-C / SIGTERM: a re-run resumes). Without ``--db`` the sessions go to ``$COMPACTION_DB``, else
the sessions database in the user's data directory (``sessions.db``, created on first use; never
the demo database), named on stderr. ``--follow`` tails one growing Claude Code / Codex JSONL file
until SIGINT / SIGTERM (or ``--follow-seconds``), appending entries as they are written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_paging, emit_json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ...importers import FORMATS  # the parsers' table (standard library only: cheap to import)

    p = subparsers.add_parser(
        "import",
        help="import Claude Code, Codex, OpenAI, Anthropic, OpenHands or SWE-agent transcripts",
        description="Import transcripts (format detected from the content) into the database, idempotently.",
    )
    p.add_argument("--db", help="database URL or SQLite file (a missing SQLite file is created; default: $COMPACTION_DB, "
                                "else sessions.db in the user's data directory, never the demo database)")
    p.add_argument("--format", choices=list(FORMATS), metavar="F",
                   help=f"the files' format (default: detected from the content): {', '.join(FORMATS)}")
    p.add_argument("--thread", help="thread key for the (main) session (only with one FILE)")
    p.add_argument("--follow", action="store_true", help="tail one growing Claude Code / Codex JSONL file until interrupted")
    p.add_argument("--follow-seconds", type=float, default=None, help=argparse.SUPPRESS)  # tests: stop after this long
    p.add_argument("--poll", type=float, default=0.5, help="--follow: seconds between checks of the file (0.05 to 5)")
    p.add_argument("--json", action="store_true")
    add_paging(p, "files (of a folder, in path order)", "PATH")
    p.add_argument("files", nargs="+", metavar="FILE", help="session files or folders: a session kept as a folder (OpenHands V1; a Cline / Roo Code / Kilo Code task folder; "
                                                             "opencode's storage folder), or any folder, searched for sessions of every format (resumable)")
    p.set_defaults(run=run)


def _fail(message: str, code: str, want_json: bool, exit_code: int) -> int:
    if want_json:
        emit_json({"imported": [], "errors": [], "error": {"code": code, "message": message}})
    else:
        print(f"error: {message}", file=sys.stderr)
    return exit_code


def _open(url: str) -> Any:
    from ...service import open_service
    from ...store import normalize_url

    u = normalize_url(url)
    db = u.database if u.get_backend_name() == "sqlite" else None
    create = db is not None and db not in ("", ":memory:") and not Path(db).exists()  # a new SQLite file: create its schema
    return open_service(url, create=create)


def _print_reports(reports: list[Any]) -> None:
    from .bulk_import import report_line

    for r in reports:
        print(report_line(r), flush=True)
        for w in r.warnings:
            print(f"  warning: {w}", flush=True)


def _entries(svc: Any, args: argparse.Namespace) -> list[Any]:
    """What this run imports, in order: each FILE, each session under each non-session DIR (path
    order; see :mod:`engine.apps.cli.bulk_import`), then ``--format`` / ``--after`` / ``--limit``."""
    from .bulk_import import SKIPPED, Entry, bulk_entries, is_bulk_folder

    out: list[Any] = []
    imported = None
    for f in args.files:
        if is_bulk_folder(f):
            imported = svc.imports.imported_sources() if imported is None else imported
            found = bulk_entries(f, imported)
            if args.format:
                for e in found:
                    if e.status is None and e.format != args.format:
                        e.status, e.reason = SKIPPED, f"not {args.format} (--format)"
            out.extend(found)
        else:
            out.append(Entry(str(f), args.format, explicit=True))
    if args.after is not None:
        out = [e for e in out if e.path > args.after]
    return out


def _follow(svc: Any, args: argparse.Namespace, want_json: bool) -> int:
    from ...core.errors import EngineError
    from ...store import StoreError

    f = args.files[0]
    try:
        reports = svc.imports.follow_file(f, format=args.format, thread=args.thread, poll_seconds=args.poll, seconds=args.follow_seconds,
                                  on_reports=None if want_json else _print_reports)
    except StoreError:
        raise
    except EngineError as exc:
        message = exc.message if exc.message.startswith(str(f)) else f"{f}: {exc.message}"
        if want_json:
            emit_json({"imported": [], "errors": [{"file": str(f), "code": exc.code, "message": message}]})
        else:
            print(f"error: {message}", file=sys.stderr)
        return EXIT_FAILED
    if want_json:
        emit_json({"imported": [r.to_json() for r in reports], "errors": []})
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    from ...core.errors import EngineError
    from .bulk_import import import_entries, summary
    from .output import EXIT_INTERRUPTED, Listing, url_secrets
    from .whatif_cmd import _terminate_as_interrupt

    want_json = bool(args.json)
    if args.thread and len(args.files) > 1:
        return _fail("--thread names one thread: give one FILE", "usage", want_json, EXIT_USAGE)
    if args.follow and len(args.files) != 1:
        return _fail("--follow tails one file: give one FILE", "usage", want_json, EXIT_USAGE)
    if args.follow and (args.limit is not None or args.after is not None):
        return _fail("--follow tails one file: --limit / --after page through a folder", "usage", want_json, EXIT_USAGE)
    if args.db is not None and not args.db.strip():
        return _fail('empty database URL (--db ""): give a SQLite file or a database URL', "invalid_db_url", want_json, EXIT_USAGE)
    if args.db is None:
        from ...service import sessions_database_url

        args.db = sessions_database_url()
        print(f"importing into {args.db} (--db to choose another database)", file=sys.stderr)
    try:
        svc = _open(args.db)
    except EngineError as exc:
        return _fail(exc.message, exc.code, want_json, EXIT_USAGE)
    previous = _terminate_as_interrupt()  # SIGTERM ends the run like Ctrl-C: what is done stays, a re-run resumes
    try:
        if args.follow:
            return _follow(svc, args, want_json)
        if args.thread and any(not e.explicit for e in _entries(svc, args)):
            return _fail("--thread names one thread: give one FILE, not a folder", "usage", want_json, EXIT_USAGE)
        with Listing("files", json_mode=want_json, secrets=url_secrets(args.db)) as out:
            out.start()
            entries = _entries(svc, args)
            if args.limit is not None and len(entries) > args.limit:
                entries = entries[: args.limit]
                out.next_after = entries[-1].path
            bulk = any(not e.explicit for e in entries)
            try:
                code = import_entries(svc, entries, out, thread=args.thread, url=args.db)
            except KeyboardInterrupt:
                if not want_json:
                    done = sum(1 for e in entries if e.status)
                    print(f"interrupted after {done:,} of {len(entries):,} files: {summary(out.tail['counts'], done, None)}; "
                          "run the same command again to import the rest", file=sys.stderr)
                    return EXIT_INTERRUPTED
                raise
            if bulk and not want_json:
                out.line(summary(out.tail["counts"], len(entries), out.next_after))
            return code
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)
        svc.close()
