"""Malformed rows written straight into the database (what another platform's SQL can leave), run
through every ``compaction`` command on SQLite and PostgreSQL: no traceback, one line in words
(no Python type names), exit 2 for an unusable row (1 for a rejected compaction), the other
threads still usable, and the read-only commands write nothing.

The planting helpers (:data:`PLANTS`, :func:`planted`) are shared with the inspector's offscreen
tests (``tests/gui/test_robust_window.py``). A plant that the backend refuses to store (invalid
UTF-8, an unparsable timestamp, non-JSON text in a JSON column: PostgreSQL checks types) runs on
SQLite only.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engine.apps.cli import main
from engine.apps.demo import build_demo
from engine.store import normalize_url
from tests.store.support import fingerprint as pg_fingerprint

#: the demo thread with the most compactions (the inspector opens it by default): the victim
VICTIM = "research-retrieval-latency"
#: another thread: it must stay usable whatever the victim holds
OTHER = "coding-lock-test-failure"
#: a raw Python exception or type name in a message (``ValueError: …``, ``RecursionError``)
PYTHON_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback")
DEEP = 100_000  # nesting of the deep-metadata plant (PostgreSQL's own parser stops near 10k: 5,000 there)


@dataclass(frozen=True)
class Plant:
    """One malformed row: ``sql`` (``{json}`` becomes the JSON cast of the backend) with ``value``."""

    name: str
    sql: str
    value: Any = None
    sqlite_only: bool = False
    #: for a sqlite_only plant: the same malformation as PostgreSQL would have to take it (it refuses)
    pg_sql: str | None = None
    #: the plant breaks every command (a store-wide setting), not only the victim's
    global_: bool = False
    #: words the victim's status must name when it fails
    words: str | None = None


_LAST = "(SELECT MAX(id) FROM messages WHERE conversation_id = :cid)"
_LAST_TOOL = "(SELECT MAX(id) FROM messages WHERE conversation_id = :cid AND role = 'tool')"

PLANTS: dict[str, Plant] = {
    p.name: p
    for p in [
        Plant("metadata_array", f"UPDATE messages SET metadata = {{json}} WHERE id = {_LAST}", "[1, 2]"),
        Plant("metadata_deep", f"UPDATE messages SET metadata = {{json}} WHERE id = {_LAST}", "deep", words="nested too deeply"),
        Plant("created_at_garbage", f"UPDATE messages SET created_at = 'not a date' WHERE id = {_LAST}", sqlite_only=True, words="timestamp"),
        Plant("thread_updated_at_garbage", "UPDATE conversations SET updated_at = 'garbage' WHERE id = :cid", sqlite_only=True, words="timestamp"),
        Plant(
            "invalid_utf8",
            f"UPDATE messages SET content = CAST(x'41fffe42' AS TEXT) WHERE id = {_LAST}",
            sqlite_only=True,
            words="UTF-8",
            pg_sql=f"UPDATE messages SET content = convert_from(decode('41fffe42', 'hex'), 'UTF8') WHERE id = {_LAST}",
        ),
        Plant("event_data_mistyped", "UPDATE compaction_events SET data = {json} WHERE conversation_id = :cid",
              '{"tokens_before": "abc", "generation_before": [1], "attempt": "x", "reason": 5, "pruned": {"a": 1}}'),
        Plant("event_data_array", "UPDATE compaction_events SET data = {json} WHERE conversation_id = :cid", "[1]"),
        Plant("tool_without_call_id", f"UPDATE messages SET tool_call_id = NULL WHERE id = {_LAST_TOOL}"),
        Plant("boundary_missing", "UPDATE compaction_state SET boundary_message_id = 999999999 WHERE conversation_id = :cid"),
        Plant("tools_object", "UPDATE conversations SET tools = {json} WHERE id = :cid", '{"a": 1}'),
        Plant("message_count_text", "UPDATE conversations SET message_count = 'abc' WHERE id = :cid", sqlite_only=True),
        Plant("generation_text", "UPDATE compaction_state SET generation = 'x' WHERE conversation_id = :cid", sqlite_only=True),
        Plant("policy_not_json", "UPDATE settings SET value = 'not json' WHERE key = 'policy'", sqlite_only=True, global_=True),
        Plant("policy_wrong_type", "UPDATE settings SET value = {json} WHERE key = 'policy'", "[1, 2]", global_=True),
    ]
}


def plant(url: str, p: Plant, thread: str = VICTIM) -> None:
    """Write ``p`` into the database at ``url`` with plain SQL (no engine code)."""
    u = normalize_url(url)
    pg = u.get_backend_name() == "postgresql"
    value = p.value
    if value == "deep":
        depth = 5_000 if pg else DEEP
        value = '{"a":' * depth + "1" + "}" * depth
    sql = p.sql.replace("{json}", "CAST(:v AS JSON)" if pg else ":v")
    engine = sa.create_engine(u)
    try:
        with engine.begin() as conn:
            if "settings" in sql and conn.execute(sa.text("SELECT COUNT(*) FROM settings WHERE key = 'policy'")).scalar() == 0:
                conn.execute(sa.text("INSERT INTO settings (key, value, updated_at) VALUES ('policy', '{}', CURRENT_TIMESTAMP)"))
            cid = conn.execute(sa.text("SELECT id FROM conversations WHERE thread_key = :k"), {"k": thread}).scalar_one()
            conn.execute(sa.text(sql), {"cid": cid, "v": value})
    finally:
        engine.dispose()


def content_fingerprint(url: str) -> Any:
    """Every row of every table (read through the WAL on SQLite, as bytes: the rows may be invalid UTF-8)."""
    u = normalize_url(url)
    if u.get_backend_name() != "sqlite":
        return pg_fingerprint(url)
    conn = sqlite3.connect(f"file:{u.database}?mode=ro", uri=True)
    conn.text_factory = bytes
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        h = hashlib.sha256()
        for t in tables:
            for row in conn.execute(f'SELECT * FROM "{t.decode() if isinstance(t, bytes) else t}" ORDER BY 1'):
                h.update(repr(row).encode())
        return h.hexdigest()
    finally:
        conn.close()


# -- the demo database, built once per session, copied per test ---------------------------------


@pytest.fixture(scope="session")
def demo_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("robust-demo") / "demo.db"
    _build_off_loop(str(db), db.with_name(db.name + ".workdir"))
    return db


def _build_off_loop(url: str, workdir: Path) -> None:
    """``build_demo`` on a plain thread: its ``asyncio.run`` must not meet a GUI test's running loop."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pool.submit(build_demo, url, workdir=workdir).result(timeout=300)


def copy_sqlite(demo: Path, target_dir: Path) -> str:
    """A private copy of the demo (database and Workdir); its URL."""
    db = target_dir / "demo.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(str(demo) + suffix).exists():
            shutil.copy(str(demo) + suffix, str(db) + suffix)
    shutil.copytree(demo.with_name(demo.name + ".workdir"), db.with_name(db.name + ".workdir"))
    return str(db)


@pytest.fixture(scope="session")
def demo_pg_template(pg_server: sa.Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL demo database used as a template (``CREATE DATABASE … TEMPLATE``)."""
    name = f"ci_demo_{uuid.uuid4().hex[:10]}"
    with pg_server.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = pg_server.url.set(database=name).render_as_string(hide_password=False)
    _build_off_loop(url, tmp_path_factory.mktemp("robust-pg-workdir"))
    yield name
    with pg_server.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def copy_pg(pg_server: sa.Engine, demo_pg_template: str) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        name = f"ci_{uuid.uuid4().hex[:12]}"
        with pg_server.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{demo_pg_template}"')
        made.append(name)
        return pg_server.url.set(database=name).render_as_string(hide_password=False)

    yield make
    with pg_server.connect() as conn:
        for name in made:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_demo(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(backend, URL) of a private copy of the demo database."""
    if request.param == "sqlite":
        return "sqlite", copy_sqlite(request.getfixturevalue("demo_sqlite"), tmp_path)
    return "postgresql", request.getfixturevalue("copy_pg")()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("COMPACTION_SUMMARY_") or name in ("COMPACTION_DB", "COMPACTION_WORKDIR"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COMPACTION_WORKDIR", str(tmp_path / "cli-workdir"))


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))  # an exception escaping here fails the test: that is the point
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_failure(code: int, err: str, *, allowed: tuple[int, ...] = (2,)) -> None:
    """A failure is one line ``error: …`` in words, with an allowed exit code."""
    assert code in allowed, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not PYTHON_NAME.search(err), err


READS = [("threads",), ("status", "--thread", VICTIM), ("replay", "--thread", VICTIM), ("check", "--thread", VICTIM), ("check",)]


@pytest.mark.parametrize("name", list(PLANTS))
def test_every_command_survives_a_malformed_row(name: str, fresh_demo: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    backend, url = fresh_demo
    p = PLANTS[name]
    if p.sqlite_only and backend != "sqlite":
        # PostgreSQL's types refuse this row outright: on this backend the malformed state cannot
        # exist, so what we check is that the refusal happens and leaves the database as it was
        before = content_fingerprint(url)
        with pytest.raises(sa.exc.DBAPIError):
            plant(url, replace(p, sql=p.pg_sql) if p.pg_sql else p)
        assert content_fingerprint(url) == before
        code, _out, err = run_cli(capsys, "status", "--thread", VICTIM, "--db", url)
        assert code == 0, err
        return
    plant(url, p)
    before = content_fingerprint(url)
    outcomes: dict[str, int] = {}
    for args in READS:
        code, out, err = run_cli(capsys, *args, "--db", url)
        outcomes[" ".join(args)] = code
        if args[0] == "check" and code == 1:  # violations found: listed on stdout, one per line
            assert "violation" in out and not err and not PYTHON_NAME.search(out), out
        elif code != 0:  # the row cannot be read: one line, exit 2
            assert_clean_failure(code, err)
    assert content_fingerprint(url) == before, f"a read-only command wrote ({outcomes})"
    if p.words is not None and outcomes[f"status --thread {VICTIM}"] != 0:
        _code, _out, err = run_cli(capsys, "status", "--thread", VICTIM, "--db", url)
        assert p.words.lower() in err.lower(), err
    # the other threads are untouched by a row of the victim
    code, out, err = run_cli(capsys, "status", "--thread", OTHER, "--db", url)
    if p.global_:
        assert_clean_failure(code, err)
    else:
        assert code == 0 and OTHER in out, err
    code, _out, err = run_cli(capsys, "compact", "--thread", VICTIM, "--db", url)
    if code not in (0, 3):  # compacted, or busy: both are answers; anything else is one clean line
        assert_clean_failure(code, err, allowed=(1, 2))
    code, _out, err = run_cli(capsys, "migrate", "--db", url)
    assert code == 0, err  # the schema is fine: only rows are broken


def test_json_errors_name_the_code(fresh_demo: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    backend, url = fresh_demo
    plant(url, PLANTS["metadata_deep"])
    code, out, err = run_cli(capsys, "status", "--thread", VICTIM, "--json", "--db", url)
    if code == 0:
        pytest.skip("the store now reads deep metadata")
    assert code == 2 and not err
    import json

    error = json.loads(out)["error"]
    assert error["code"] in ("unreadable_data", "corrupt_row") and not PYTHON_NAME.search(error["message"])


# -- the real process: no traceback on bad URLs and options --------------------------------------

COMMAND = [sys.executable, "-m", "engine.apps.cli"]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=60, env=env or dict(os.environ))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("threads", "--db", "postgresql://h:abc/x"), "port is not a number"),
        (("status", "--thread", "x", "--db", "postgresql://u:pw@h:abc/x"), "port is not a number"),
        (("threads", "--db", ""), "empty database URL"),
        (("migrate", "--db", "   "), "empty database URL"),
        (("check", "--db", ""), "empty database URL"),
        (("threads", "--limit", "99999999999999999999", "--db", "x.db"), "--limit"),
        (("threads", "--limit", "0", "--db", "x.db"), "--limit"),
    ],
)
def test_bad_urls_and_options_are_one_line(args: tuple[str, ...], words: str, tmp_path: Path) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert words in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(("error: ", "compaction threads: error: ")), proc.stderr  # argparse: usage, then one line


def test_a_non_json_policy_breaks_no_command_with_a_traceback(demo_sqlite: Path, tmp_path: Path) -> None:
    url = copy_sqlite(demo_sqlite, tmp_path)
    plant(url, PLANTS["policy_not_json"])
    for args in (("threads",), ("status", "--thread", OTHER), ("compact", "--thread", OTHER), ("replay", "--thread", OTHER), ("check",)):
        proc = cli(*args, "--db", url)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("error: ") and "JSON" in proc.stderr and not PYTHON_NAME.search(proc.stderr), proc.stderr


def test_the_password_is_masked_in_every_message() -> None:
    secret = "pa/SECRETss#x"
    proc = cli("threads", "--db", f"postgresql://u:{secret}@127.0.0.1:1/db")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "SECRET" not in proc.stderr + proc.stdout, proc.stderr
    proc = cli("threads", "--json", "--db", f"postgresql://u:{secret}@127.0.0.1:abc/db")
    assert proc.returncode == 2 and "SECRET" not in proc.stderr + proc.stdout, proc.stdout


# -- a rejected summary says why ------------------------------------------------------------------


class _RateLimited:
    """A summarizer whose endpoint keeps answering 429 (what the OpenAI-compatible one raises)."""

    name = "rate-limited"

    def summarize(self, request: Any) -> Any:
        from engine.compaction.summarizers.protocol import SummarizerError

        raise SummarizerError("HTTP 429 from http://127.0.0.1:9/v1/chat/completions after 2 attempts", "http_error", status=429)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_rejected_summary_says_why(as_json: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import engine.service as service
    from tests.engine.conftest import POLICY, finished_turns, new_thread

    db = tmp_path / "rejected.db"
    svc = service.open_service(f"sqlite:///{db}", workdir=tmp_path / "wd", create=True)
    try:
        svc.steering.set_policy(POLICY)
        new_thread(svc, "t")
        finished_turns(svc, "t", 12)
    finally:
        svc.close()
    monkeypatch.setattr(service, "make_summarizer", lambda: _RateLimited())
    code, out, err = run_cli(capsys, "compact", "--thread", "t", "--db", str(db), *(["--json"] if as_json else []))
    assert code == 1
    why = "summarizer_failed: HTTP 429 from http://127.0.0.1:9/v1/chat/completions after 2 attempts"
    if as_json:
        error = json.loads(out)["error"]
        assert error["code"] == "summary_rejected" and error["reason"] == "summarizer_failed" and why in error["message"]
        assert error["detail"].startswith("HTTP 429")
    else:
        assert err.strip() == f"error: summary rejected ({why}); nothing was changed", err
