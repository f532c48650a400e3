"""Database URLs without their secrets: what the window title, the recent connections and every
error or log line may show.

A URL is read with the parser that connects (``engine.service.normalize_url``, i.e. SQLAlchemy's
``make_url``, which ``Store.open`` uses), never with ``urllib``: ``urlsplit`` stops the host part at
a raw ``/``, ``#`` or ``?`` in a password that SQLAlchemy reads whole, and would keep the rest of
the password as the "host". Where even that parser would take part of a password for the host (a
URL with a password and more than one ``@``: a raw ``@`` in the password), the URL is read at its
last ``@`` (a database name or query value with a raw ``@`` in a URL with a password is then lost
from the saved form: safe, not convenient). A URL that cannot be parsed keeps nothing before its
last ``@``. Query parameters that carry a password (``password=``,
``sslpassword=``) are dropped too.

Plain Python (no Qt): the property tests in ``tests/test_urls.py`` run it on generated URLs.
"""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import parse_qsl, quote, unquote, urlencode

__all__ = ["SECRET_QUERY_KEYS", "redact", "secrets_of", "strip_password"]

#: query parameters the PostgreSQL driver reads a password from
SECRET_QUERY_KEYS = frozenset({"password", "passwd", "sslpassword"})
#: a secret shorter than this is not searched for in free text (it would mangle ordinary words)
MIN_SECRET = 3
MASK = "***"


def _parse(url: str) -> Any:
    """The URL as the store connects to it (a SQLAlchemy ``URL``; the inspector does not import
    SQLAlchemy itself, it uses what the engine's public surface returns)."""
    from engine.service import normalize_url  # lazy: engine.service is a heavy import

    return normalize_url(url)


def _after_last_at(text: str) -> str:
    return text.rsplit("@", 1)[1] if "@" in text else text


def strip_password(url: str) -> str:
    """``url`` without its password (``postgresql://u:secret@h/db`` → ``postgresql://u@h/db``).

    A plain file path, and a URL with no password in it, come back unchanged (character for
    character, so a recent connection reads as it was typed)."""
    raw = url.strip()
    if "://" not in raw:
        return url  # a SQLite file path: no credentials
    scheme, rest = raw.split("://", 1)
    try:
        parsed = _parse(raw)
    except Exception:  # noqa: BLE001 - not a URL the store accepts; keep nothing that may be userinfo
        return f"{scheme}://{_after_last_at(rest)}" if "@" in rest else url
    if parsed.password is not None:
        # the userinfo ends at the "@" the parser saw; with more than one "@" (a raw "@" in the
        # password: the parser would take the password's tail for the host, and could not
        # connect) at the last one. The rest of the URL is kept as typed.
        end = rest.rindex("@") if rest.count("@") > 1 else rest.index("@")
        user = rest[:end].split(":", 1)[0]
        tail = strip_password(f"{scheme}://{rest[end + 1:]}").split("://", 1)[1]  # no "@" left: no recursion
        return f"{scheme}://{user}@{tail}" if user and "@" not in user else f"{scheme}://{tail}"
    if not any(k.lower() in SECRET_QUERY_KEYS for k in parsed.query):
        return url
    base, _, query = raw.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k.lower() not in SECRET_QUERY_KEYS]
    return base + (f"?{urlencode(kept)}" if kept else "")


def secrets_of(url: str | None) -> tuple[str, ...]:
    """Every form in which ``url``'s password may appear in a message: as typed (everything between
    the user name and the last ``@``), as parsed, each also percent-encoded, decoded and as a Python
    string literal would show it; and the values of password query parameters."""
    if not url or "://" not in url:
        return ()
    values: set[str] = set()
    rest = url.strip().split("://", 1)[1]
    if "@" in rest:
        userinfo = rest.rsplit("@", 1)[0]
        if ":" in userinfo:
            values.add(userinfo.split(":", 1)[1])
    try:
        parsed = _parse(url)
    except Exception:  # noqa: BLE001 - the typed form above is all there is
        parsed = None
    if parsed is not None:
        values.add(parsed.password or "")
        for k, v in parsed.query.items():
            if k.lower() in SECRET_QUERY_KEYS:
                values.update(str(x) for x in (v if isinstance(v, (list, tuple)) else [v]))
    found = {form for v in values if v for form in (v, quote(v, safe=""), quote(v), unquote(v), repr(v)[1:-1])}
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET), key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret (longest first) replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SECRET:
            text = text.replace(secret, MASK)
    return text
