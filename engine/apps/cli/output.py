"""What every ``compaction`` command shares: exit codes, the JSON writer, the service on ``--db``
(:func:`open_db`), whole-number arguments (:func:`whole_number`), and how a failure reads
(one line, in words, with any password of the database URL masked: :func:`describe_failure`, the
one copy in :mod:`engine.core.errors` the inspector shares), and the columns of a text table in terminal
cells (:func:`display_width`, :func:`cell`: a CJK character takes two). No command imports the
package that registers it, so there is no import cycle."""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Literal
from urllib.parse import quote

from ...core.errors import EngineError, describe_failure

__all__ = [
    "EXIT_BUSY", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "Listing", "Reported", "add_paging",
    "cell", "database_url", "display_width", "describe_failure", "emit_json", "error_json", "exit_code_for", "jsonable", "mask_secrets", "open_db", "quiet_pipe",
    "url_secrets", "whole_number",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 3
#: interrupted (Ctrl-C, or SIGTERM where a command treats it so)
EXIT_INTERRUPTED = 130
#: the reader of standard output left (``compaction threads | head -1``): 128 + SIGPIPE, what a
#: process the signal ends returns, so ``set -o pipefail`` sees it as every other tool's
EXIT_PIPE = 141


def whole_number(low: int, high: int | None = None, out_of_range: str | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` (up to ``high``); ``out_of_range`` is the
    message for one outside (default: "must be between LOW and HIGH")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(out_of_range or f"must be between {low:,} and {high:,}")
        return value

    return parse


def open_db(args: Any) -> Any:
    """The service on the command's ``--db`` (the caller closes it)."""
    from ...service import open_service

    return open_service(database_url(args.db))


def jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in asdict(value).items()}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): jsonable(v) for k, v in dict(value).items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def emit_json(data: Any) -> None:
    json.dump(jsonable(data), sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def url_secrets(url: str | None) -> list[str]:
    """The forms in which the password of database URL ``url`` may appear in a message (as typed,
    as parsed, percent-encoded): what :func:`mask_secrets` hides."""
    if not url or "://" not in url:
        return []
    found: set[str] = set()
    rest = url.split("://", 1)[1]
    if "@" in rest and ":" in rest.rsplit("@", 1)[0]:
        found.add(rest.rsplit("@", 1)[0].split(":", 1)[1])
    try:
        from ...store import normalize_url

        password = normalize_url(url).password
    except Exception:  # noqa: BLE001 - the typed form is all there is
        password = None
    if password:
        found.update({password, quote(password, safe=""), quote(password)})
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def database_url(arg: str | None) -> str:
    """The database a command works on: ``--db`` when given (a blank one is an error, never the
    demo database), else ``$COMPACTION_DB``, else the demo database. The URL is parsed here, so a
    malformed one (a port that is not a number, …) is a one-line ``invalid_db_url``."""
    from ...service import default_database_url
    from ...store import InvalidDatabaseURL, normalize_url

    if arg is not None and not arg.strip():
        raise InvalidDatabaseURL('empty database URL (--db ""): give a SQLite file or a database URL')
    url = arg if arg is not None else default_database_url()
    try:
        normalize_url(url)
    except EngineError:
        raise
    except Exception as exc:  # noqa: BLE001 - the parser's own ValueError (e.g. int("abc") for the port)
        why = "the port is not a number" if "int()" in str(exc) else "it cannot be parsed"
        shown = mask_secrets(url.split("@")[-1], url_secrets(url))
        raise InvalidDatabaseURL(f"not a database URL: {shown!r} ({why})") from None
    return url


# -- listings: streamed, paged (docs/cli.md, "Listings") -----------------------------------------


def add_paging(p: argparse.ArgumentParser, what: str, cursor: str, *, default: int | None = None, high: int = 1_000_000,
               after_type: Callable[[str], Any] = str) -> None:
    """``--limit N`` (``what`` per page, 1 to ``high``; ``default`` None: all) and ``--after CURSOR``
    (the ``next_after`` a previous page gave) on a listing command."""
    shown = f"default {default:,}" if default is not None else "default: all"
    p.add_argument("--limit", type=whole_number(1, high), default=default, metavar="N", help=f"at most N {what} (1 to {high:,}; {shown})")
    p.add_argument("--after", type=after_type, default=None, metavar=cursor, help="the page after this one: the next_after a previous page gave")


class Reported(Exception):
    """A failure already reported in the output (a streamed JSON document closed with its
    ``error``): :func:`engine.apps.cli.main` exits ``exit_code`` without printing it again."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


def exit_code_for(exc: BaseException) -> int:
    """The exit code of a failure (docs/cli.md, "Exit codes")."""
    from ...core.errors import ThreadBusy

    if isinstance(exc, ThreadBusy):
        return EXIT_BUSY
    if isinstance(exc, EngineError) and exc.code in ("summary_rejected", "cannot_compact"):
        return EXIT_FAILED
    return EXIT_USAGE


def error_json(exc: BaseException, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """``{"code", "message"[, "reason", "detail"]}`` of a failure, passwords masked."""
    code, message = describe_failure(exc)
    data: dict[str, Any] = {"code": code, "message": mask_secrets(message, secrets)}
    for key in ("reason", "detail"):
        value = getattr(exc, key, None)
        if value is not None:
            data[key] = mask_secrets(str(value), secrets)
    return data


def _dumps(value: Any, indent: str) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False, indent=2).replace("\n", "\n" + indent)


class Listing:
    """One listing written as it is read (every listing command; docs/cli.md, "Listings").

    With ``--json`` the output is ONE JSON object, written piece by piece: the ``head`` fields, then
    ``"<name>": [`` and each item as it comes (flushed), then the ``tail`` fields and ``"next_after"``,
    the cursor of the next page (null on the last). An exception inside the ``with`` closes the
    document with ``"error": {...}`` (the items written stay valid JSON) and becomes
    :class:`Reported` with its exit code. Without ``--json`` :meth:`item` does nothing: the command
    prints its own text rows (use :meth:`line`, which flushes)."""

    def __init__(self, name: str, *, json_mode: bool, head: dict[str, Any] | None = None, secrets: Iterable[str] = ()) -> None:
        self.name = name
        self.json = json_mode
        self.head = dict(head or {})
        self.secrets = list(secrets)
        self.count = 0
        self.next_after: Any = None
        self.tail: dict[str, Any] = {}
        self._open = False

    def __enter__(self) -> "Listing":
        return self

    def start(self) -> None:
        """Write the head (done by the first item if not called before)."""
        if self._open or not self.json:
            return
        self._open = True
        out = sys.stdout
        out.write("{\n")
        for k, v in self.head.items():
            out.write(f"  {json.dumps(k)}: {_dumps(v, '  ')},\n")
        out.write(f"  {json.dumps(self.name)}: [")
        out.flush()

    def item(self, value: Any) -> None:
        self.count += 1
        if not self.json:
            return
        self.start()
        sys.stdout.write(("," if self.count > 1 else "") + "\n    " + _dumps(value, "    "))
        sys.stdout.flush()

    @staticmethod
    def line(text: str) -> None:
        print(text, flush=True)

    def _close(self, error: dict[str, Any] | None) -> None:
        self.start()
        out = sys.stdout
        out.write("\n  ]" if self.count else "]")
        fields = {**self.tail, "next_after": self.next_after}
        if error is not None:
            fields["error"] = error
        for k, v in fields.items():
            out.write(f",\n  {json.dumps(k)}: {_dumps(v, '  ')}")
        out.write("\n}\n")
        out.flush()

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if not self.json:
            return False
        if exc is None:
            self._close(None)
            return False
        if isinstance(exc, BrokenPipeError) or not self._open:  # nothing written yet: main reports it as usual
            return False
        if isinstance(exc, KeyboardInterrupt):
            self.next_after = None
            self._close({"code": "interrupted", "message": "interrupted"})
            raise Reported(EXIT_INTERRUPTED) from exc
        if isinstance(exc, Exception):
            self.next_after = None
            self._close(error_json(exc, self.secrets))
            raise Reported(exit_code_for(exc)) from exc
        return False


def display_width(text: str) -> int:
    """The terminal cells ``text`` takes: two for an East Asian wide or fullwidth character (CJK,
    fullwidth punctuation), none for a combining mark or a format character (zero-width joiner …),
    one for any other (``unicodedata``; what ``wcwidth`` computes for these)."""
    n = 0
    for ch in text:
        if ch.isascii():
            n += 1
        elif unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        else:
            n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def cell(text: str, width: int, align: Literal["<", ">"] = "<") -> str:
    """``text`` padded with spaces to ``width`` terminal cells (:func:`display_width`), left- or
    right-aligned; a longer text is left whole."""
    pad = " " * max(0, width - display_width(text))
    return text + pad if align == "<" else pad + text


def quiet_pipe() -> None:
    """After a :class:`BrokenPipeError` on standard output: point it (and standard error when its
    reader left too) at the null device, so nothing more is written and the interpreter's flush at
    exit finds nothing to complain about."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
        try:
            sys.stderr.flush()
        except (BrokenPipeError, OSError, ValueError):
            os.dup2(devnull, sys.stderr.fileno())
    except (OSError, ValueError):  # a stream without a file descriptor (a test's capture)
        pass
    finally:
        os.close(devnull)
