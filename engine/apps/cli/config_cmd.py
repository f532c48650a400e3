"""``compaction config get|set|unset|list|test``: the user's settings, the same the inspector's
Preferences edit (:mod:`engine.core.config`; documented in docs/cli.md).

The API key is never taken from the command line (shell history, the process list): ``config set
summarizer.api_key`` reads it from standard input (a hidden prompt on a terminal) and puts it in
the OS keyring; without a keyring backend it says so, writes nothing and exits 1 (a key kept for
this one command's session would be gone when it ends)."""

from __future__ import annotations

import argparse
import getpass
import sys

from ...core.config import API_KEY, KEYS, Settings, keyring_status
from .output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, emit_json

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("config", help="the settings shared with the inspector's Preferences (summarizer, default policy, …)")
    sub = p.add_subparsers(dest="config_command", required=True)
    ls = sub.add_parser("list", help="every setting, its value and where it comes from (default, settings file, environment, keyring)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(run=run_list)
    g = sub.add_parser("get", help="one setting's value and where it comes from")
    g.add_argument("name", choices=list(KEYS), metavar="NAME")
    g.add_argument("--json", action="store_true")
    g.set_defaults(run=run_get)
    s = sub.add_parser("set", help="set a setting (summarizer.api_key: read from standard input, kept in the OS keyring)")
    s.add_argument("name", choices=list(KEYS), metavar="NAME")
    s.add_argument("value", nargs="?", help="the value (an empty string clears an optional one); not for the API key")
    s.add_argument("--json", action="store_true")
    s.set_defaults(run=run_set)
    u = sub.add_parser("unset", help="remove a setting from the file (the API key: from the keyring)")
    u.add_argument("name", choices=list(KEYS), metavar="NAME")
    u.add_argument("--json", action="store_true")
    u.set_defaults(run=run_unset)
    t = sub.add_parser("test", help="Test connection: one tiny request to the configured endpoint (model and latency, or the error in words)")
    t.add_argument("--json", action="store_true")
    t.set_defaults(run=run_test)


def _row(settings: Settings, name: str) -> dict[str, object]:
    r = settings.get(name)
    return r.as_json() | {"shown": r.shown(), "where": r.where()}


def run_list(args: argparse.Namespace) -> int:
    settings = Settings()
    rows = [r.as_json() | {"shown": r.shown(), "where": r.where()} for r in settings.list()]
    status = keyring_status()
    if args.json:
        emit_json({"file": str(settings.path), "keyring": {"available": status.available, "backend": status.backend}, "settings": rows})
        return EXIT_OK
    print(f"# {settings.path}")
    width = max(len(n) for n in KEYS)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['shown']:<28}  ({row['where']})")
    if not status.available:
        print(f"# {status.message}")
    return EXIT_OK


def run_get(args: argparse.Namespace) -> int:
    row = _row(Settings(), args.name)
    if args.json:
        emit_json(row)
    else:
        print(f"{row['shown']}  ({row['where']})")
    return EXIT_OK


def _read_key() -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass("API key (not shown): ")
    return (sys.stdin.readline() if sys.stdin is not None else "").strip()


def run_set(args: argparse.Namespace) -> int:
    settings = Settings()
    if args.name == API_KEY:
        if args.value is not None:
            print("error: give the API key on standard input (e.g. `compaction config set summarizer.api_key < keyfile`), "
                  "never on the command line, where shell history and the process list keep it", file=sys.stderr)
            return EXIT_USAGE
        status = keyring_status()
        if not status.available:
            if args.json:
                emit_json({"error": {"code": "no_keyring", "message": status.message}})
            else:
                print(f"error: {status.message} Nothing was stored.", file=sys.stderr)
            return EXIT_FAILED
        value = _read_key()
        if not value:
            print("error: no API key on standard input (use `compaction config unset summarizer.api_key` to remove it)", file=sys.stderr)
            return EXIT_USAGE
    else:
        if args.value is None:
            print(f"error: config set {args.name} needs a value", file=sys.stderr)
            return EXIT_USAGE
        value = args.value
    now, said = settings.set(args.name, value)
    if args.json:
        emit_json(now.as_json() | {"shown": now.shown(), "where": now.where(), "message": said})
    else:
        print(f"{args.name} = {now.shown()}  ({now.where()}). {said}".replace(". .", "."))
    return EXIT_OK


def run_unset(args: argparse.Namespace) -> int:
    now = Settings().unset(args.name)
    if args.json:
        emit_json(now.as_json() | {"shown": now.shown(), "where": now.where()})
    else:
        print(f"{args.name} = {now.shown() or '(not set)'}  ({now.where()})")
    return EXIT_OK


def run_test(args: argparse.Namespace) -> int:
    from ...compaction.summarizers.factory import check_connection

    s = Settings().summarizer()
    if s.kind != "openai":
        message = "The extractive summarizer is configured: it runs offline, there is nothing to connect to."
        if args.json:
            emit_json({"ok": True, "message": message, "model": None, "latency_ms": None, "error_code": None})
        else:
            print(message)
        return EXIT_OK
    report = check_connection(s.base_url, s.model, api_key=s.api_key, timeout=min(s.timeout, 30.0))
    if args.json:
        emit_json({"ok": report.ok, "message": report.message, "model": report.model, "latency_ms": report.latency_ms,
                   "error_code": report.error_code, "status": report.status, "host": report.host})
    else:
        print(report.message, file=sys.stdout if report.ok else sys.stderr)
    return EXIT_OK if report.ok else EXIT_FAILED
