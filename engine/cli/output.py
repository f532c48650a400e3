"""What every ``compaction`` command shares: exit codes, the JSON writer, the service on ``--db``
(:func:`open_db`), whole-number arguments (:func:`whole_number`), and how a failure reads
(one line, in words, with any password of the database URL masked: :func:`describe_failure`, the
one copy in :mod:`engine.errors` the inspector shares). No command imports the package that
registers it, so there is no import cycle."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import Any, Callable, Iterable
from urllib.parse import quote

from ..errors import EngineError, describe_failure

__all__ = [
    "EXIT_BUSY", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "database_url", "describe_failure", "emit_json", "jsonable", "mask_secrets",
    "open_db", "url_secrets", "whole_number",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 3


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
    from ..service import open_service

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
        from ..store import normalize_url

        password = normalize_url(url).password
    except Exception:  # noqa: BLE001: the typed form is all there is
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
    from ..service import default_database_url
    from ..store import InvalidDatabaseURL, normalize_url

    if arg is not None and not arg.strip():
        raise InvalidDatabaseURL('empty database URL (--db ""): give a SQLite file or a database URL')
    url = arg if arg is not None else default_database_url()
    try:
        normalize_url(url)
    except EngineError:
        raise
    except Exception as exc:  # noqa: BLE001: the parser's own ValueError (e.g. int("abc") for the port)
        why = "the port is not a number" if "int()" in str(exc) else "it cannot be parsed"
        shown = mask_secrets(url.split("@")[-1], url_secrets(url))
        raise InvalidDatabaseURL(f"not a database URL: {shown!r} ({why})") from None
    return url
