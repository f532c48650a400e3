"""Passwords never survive :func:`inspector_app.logic.urls.strip_password` (what the title and the recent
connections show), whatever characters they hold, raw or percent-encoded; and what is left still
names the database the store would connect to (the same parser: ``engine.store.normalize_url``).

The generated passwords carry upper-case markers that no other part of the URL can contain, so any
fragment of a password that leaks (say the part after a raw ``@`` that a parser took for the host)
is caught."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from engine.store import normalize_url
from inspector_app.logic.urls import redact, secrets_of, strip_password

SPECIAL = " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
LOWER = "abcdefghijklmnop0123456789"
MARKERS = ("ZQ", "XW")

#: user names and database names: anything, percent-encoded (a raw "/", ":" or "@" cannot be typed there)
names = st.text(alphabet=LOWER + SPECIAL + "é", min_size=1, max_size=12)
hosts = st.sampled_from(["127.0.0.1", "db.example", "localhost", "h-1.internal", "[::1]"])
fragments = st.text(alphabet=SPECIAL + LOWER, max_size=6)


@st.composite
def passwords(draw: st.DrawFn) -> str:
    """Specials around two markers: ``<frag>ZQ<frag>XW<frag>``."""
    a, b, c = draw(fragments), draw(fragments), draw(fragments)
    return f"{a}{MARKERS[0]}{b}{MARKERS[1]}{c}"


@st.composite
def urls(draw: st.DrawFn) -> tuple[str, str, str, str, int | None, str]:
    scheme = draw(st.sampled_from(["postgresql", "postgresql+psycopg", "postgres"]))
    user, password, host, db = draw(names), draw(passwords()), draw(hosts), draw(names)
    port = draw(st.none() | st.integers(1, 65535))
    typed = password if draw(st.booleans()) else quote(password, safe="")
    netloc = f"{quote(user, safe='')}:{typed}@{host}" + (f":{port}" if port else "")
    return f"{scheme}://{netloc}/{quote(db, safe='')}", user, password, host, port, db


def leaked(text: str) -> bool:
    return any(m in text for m in MARKERS) or "%5A%51" in text or "%58%57" in text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(urls())
@example(("postgresql://u:pa/SECRETZQXWss@127.0.0.1/db", "u", "pa/SECRETZQXWss", "127.0.0.1", None, "db"))
@example(("postgresql://u:a#ZQ?XW@h/db", "u", "a#ZQ?XW", "h", None, "db"))
@example(("postgresql://u:a@ZQ/XW@host/db", "u", "a@ZQ/XW", "host", None, "db"))
@example(("postgresql://u:a@ZQ?XW@host/db", "u", "a@ZQ?XW", "host", None, "db"))
@example(("postgresql://u:a@ZQ:XW@host/db", "u", "a@ZQ:XW", "host", None, "db"))
def test_no_fragment_of_a_password_survives(case: tuple[str, str, str, str, int | None, str]) -> None:
    url, user, password, host, port, db = case
    safe = strip_password(url)
    assert not leaked(safe), (url, safe)
    assert password not in safe
    if "@" not in password:  # the parser that connects reads the URL as it was meant: keep what it names
        parsed, kept = normalize_url(url), normalize_url(safe)
        assert kept.password is None
        assert (kept.username, kept.host, kept.port, kept.database) == (parsed.username, parsed.host, parsed.port, parsed.database)
    # every message the window or the CLI shows is scrubbed of each form of the password
    message = f"cannot connect to {url}: password {password!r} rejected ({quote(password, safe='')})"
    assert not leaked(redact(message, secrets_of(url))), message


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pa/SECRETss@127.0.0.1/db", "postgresql://u@127.0.0.1/db"),  # urlsplit stopped at the "/"
        ("postgresql://u:a#b?c@h/db", "postgresql://u@h/db"),
        ("postgresql://:pw@h/db", "postgresql://h/db"),
        ("postgresql://u@h:5432/db?sslmode=require", "postgresql://u@h:5432/db?sslmode=require"),  # nothing to strip: as typed
        ("postgresql://h/db?sslmode=require&password=hunter22", "postgresql://h/db?sslmode=require"),
        ("postgresql://u:p@ss@host/db", "postgresql://u@host/db"),  # a raw "@" in the password
        ("sqlite:////tmp/a@b.db", "sqlite:////tmp/a@b.db"),
        ("/tmp/threads.db", "/tmp/threads.db"),
        ("postgresql://u:pw@h:abc/x", "postgresql://h:abc/x"),  # cannot be parsed: nothing before the last "@"
    ],
)
def test_strip_password_examples(url: str, expected: str) -> None:
    assert strip_password(url) == expected
