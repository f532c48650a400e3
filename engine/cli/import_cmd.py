"""``compaction import``: read other agents' transcripts into the database (docs/import.md).

``compaction import [--db URL] [--format F] [--thread KEY] [--follow] [--json] FILE...``

Prints one line per imported session (``--json``: ``{"imported": [report…], "errors": [{"file",
"code", "message"}…]}``). Exit 0 when every file imported, 1 when any file could not be read as
its format (the others are still imported), 2 for a bad database or bad arguments. Without
``--db`` the sessions go to ``$COMPACTION_DB``, else the sessions database in the user's data
directory (``sessions.db``, created on first use; never the demo database), named on stderr.
``--follow`` tails one growing Claude Code / Codex JSONL file until SIGINT / SIGTERM (or
``--follow-seconds``), appending entries as they are written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, emit_json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..importers import FORMATS  # the parsers' table (standard library only: cheap to import)

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
    p.add_argument("files", nargs="+", metavar="FILE", help="session files or directories (OpenHands V1; a Cline / Roo Code / Kilo Code task folder; opencode's storage folder or one of its session files)")
    p.set_defaults(run=run)


def _fail(message: str, code: str, want_json: bool, exit_code: int) -> int:
    if want_json:
        emit_json({"imported": [], "errors": [], "error": {"code": code, "message": message}})
    else:
        print(f"error: {message}", file=sys.stderr)
    return exit_code


def _open(url: str) -> Any:
    from ..service import open_service
    from ..store import normalize_url

    u = normalize_url(url)
    db = u.database if u.get_backend_name() == "sqlite" else None
    create = bool(db) and db != ":memory:" and not Path(db).exists()  # a new SQLite file: create its schema
    return open_service(url, create=create)


def _line(r: Any) -> str:
    parts = [f"{r.messages} messages ({r.tool_calls} tool calls)", f"{r.compactions} recorded compactions", f"{r.requests} requests"]
    if r.already_stored:
        parts.append(f"{r.already_stored} already stored")
    if r.skipped:
        parts.append("skipped " + ", ".join(f"{k} {v}" for k, v in r.skipped.items()))
    return f"{r.thread} <- {r.source} [{r.format}]: " + "; ".join(parts)


def _print_reports(reports: list[Any]) -> None:
    for r in reports:
        print(_line(r))
        for w in r.warnings:
            print(f"  warning: {w}")


def run(args: argparse.Namespace) -> int:
    from ..errors import EngineError
    from ..importers import ImportFormatError
    from ..store import StoreError

    want_json = bool(args.json)
    if args.thread and len(args.files) > 1:
        return _fail("--thread names one thread: give one FILE", "usage", want_json, EXIT_USAGE)
    if args.follow and len(args.files) != 1:
        return _fail("--follow tails one file: give one FILE", "usage", want_json, EXIT_USAGE)
    if args.db is not None and not args.db.strip():
        return _fail('empty database URL (--db ""): give a SQLite file or a database URL', "invalid_db_url", want_json, EXIT_USAGE)
    if args.db is None:
        from ..service import sessions_database_url

        args.db = sessions_database_url()
        print(f"importing into {args.db} (--db to choose another database)", file=sys.stderr)
    try:
        svc = _open(args.db)
    except EngineError as exc:
        return _fail(exc.message, exc.code, want_json, EXIT_USAGE)
    imported: list[Any] = []
    errors: list[dict[str, str]] = []
    try:
        for f in args.files:
            try:
                if args.follow:
                    reports = svc.follow_file(
                        f, format=args.format, thread=args.thread, poll_seconds=args.poll, seconds=args.follow_seconds,
                        on_reports=None if want_json else _print_reports,
                    )
                else:
                    reports = svc.import_file(f, format=args.format, thread=args.thread)
                    if not want_json:
                        _print_reports(reports)
                imported.extend(reports)
            except StoreError as exc:  # the database, not the file: stop here
                if want_json:
                    emit_json({"imported": [r.to_json() for r in imported], "errors": errors,
                               "error": {"code": exc.code, "message": exc.message}})
                else:
                    print(f"error: {exc.message}", file=sys.stderr)
                return EXIT_USAGE
            except (ImportFormatError, EngineError) as exc:
                message = exc.message if exc.message.startswith(str(f)) else f"{f}: {exc.message}"
                errors.append({"file": str(f), "code": exc.code, "message": message})
                if not want_json:
                    print(f"error: {message}", file=sys.stderr)
    finally:
        svc.close()
    if want_json:
        emit_json({"imported": [r.to_json() for r in imported], "errors": errors})
    return EXIT_FAILED if errors else EXIT_OK
