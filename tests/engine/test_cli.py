"""The ``compaction`` command line contract (docs/cli.md): JSON shapes, exit codes, one-line errors.

Most cases call :func:`engine.apps.cli.main` in-process; the error cases run ``python -m engine.apps.cli`` in
a subprocess so "no traceback, one line on stderr" is checked on the real process.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engine.apps.cli import EXIT_BUSY, EXIT_OK, main
from engine.store.db import code_head
from tests.store.support import fingerprint

from .conftest import POLICY, Counting, finished_turns, new_thread, route, running_turn
from .test_manual import make_busy

STATUS_KEYS = {"thread", "tokens", "threshold", "context_window", "pressure_ratio", "hint", "breakdown", "boundary", "generation", "compact_count", "busy", "busy_reason"}
COMPACT_KEYS = {"status", "reason", "before_tokens", "after_tokens", "compacted_messages", "boundary", "generation", "summarizer_calls"}
THREAD_KEYS = {"thread", "title", "messages", "generation", "busy", "busy_reason"}
COMMAND = [sys.executable, "-m", "engine.apps.cli"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CLI's summarizer and defaults come from the environment: make it the extractive one."""
    for name in list(os.environ):
        if name.startswith("COMPACTION_SUMMARY_") or name in ("COMPACTION_DB", "COMPACTION_WORKDIR"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def cli(*args: str, db: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [*COMMAND, *args] + (["--db", str(db)] if db is not None else [])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ))


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path, make_db) -> Path:
    return make_db(tmp_path / "cli.db")


@pytest.fixture
def make_db(tmp_path: Path):
    """A SQLite file with the small policy stored and one long idle thread ``long`` (service closed)."""
    from engine.service import open_service

    def make(path: Path, *, busy: str | None = None) -> Path:
        svc = open_service(f"sqlite:///{path}", workdir=tmp_path / "wd", summarizer=Counting(), create=True)
        try:
            svc.steering.set_policy(POLICY)
            new_thread(svc, "long")
            finished_turns(svc, "long", 20)
            running_turn(svc, "long")
            route(svc, "long")
            new_thread(svc, "short")
            finished_turns(svc, "short", 1)
            if busy:
                make_busy(svc, "long", busy)
        finally:
            svc.close()
        return path

    return make


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode not in (0, None)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


# -- status / compact / threads / migrate -------------------------------------------------------


def test_status_json(capsys, db):
    code, out, _ = run_main(capsys, "status", "--db", str(db), "--thread", "long", "--json")
    data = json.loads(out)
    assert code == EXIT_OK and STATUS_KEYS <= set(data)
    assert data["thread"] == "long" and data["context_window"] == 8000 and data["threshold"] == 6400
    assert data["tokens"] == sum(data["breakdown"].values()) > 0
    assert data["pressure_ratio"] == round(data["tokens"] / 6400, 4)
    assert data["hint"] is (data["tokens"] * 1000 >= 6400 * 850)
    assert (data["boundary"], data["generation"], data["compact_count"], data["busy"], data["busy_reason"]) == (None, 0, 0, False, None)


def test_status_text(capsys, db):
    code, out, err = run_main(capsys, "status", "--db", str(db), "--thread", "long")
    assert code == EXIT_OK and err == ""
    assert "threshold 6400" in out and "idle" in out


def test_compact_json_then_no_op(capsys, db):
    code, out, _ = run_main(capsys, "compact", "--db", str(db), "--thread", "long", "--json")
    data = json.loads(out)
    assert code == EXIT_OK and COMPACT_KEYS <= set(data)
    assert data["status"] == "completed" and data["reason"] is None
    assert data["after_tokens"] < data["before_tokens"] and data["compacted_messages"] > 0
    assert data["summarizer_calls"] >= 1 and data["generation"] >= 1

    _, out, _ = run_main(capsys, "status", "--db", str(db), "--thread", "long", "--json")
    status = json.loads(out)
    assert (status["boundary"], status["generation"], status["tokens"]) == (data["boundary"], data["generation"], data["after_tokens"])
    assert status["compact_count"] == data["summarizer_calls"]

    code, out, _ = run_main(capsys, "compact", "--db", str(db), "--thread", "short", "--json")
    noop = json.loads(out)
    assert code == EXIT_OK and (noop["status"], noop["reason"], noop["summarizer_calls"]) == ("no_op", "insufficient_history", 0)


@pytest.mark.parametrize("reason", ["running", "waiting_for_user", "queued"])
def test_compact_busy_thread_exit_3_and_nothing_written(capsys, tmp_path, make_db, reason):
    db = make_db(tmp_path / f"busy-{reason}.db", busy=reason)
    before = fingerprint(f"sqlite:///{db}")
    code, out, err = run_main(capsys, "compact", "--db", str(db), "--thread", "long", "--json")
    assert code == EXIT_BUSY == 3
    error = json.loads(out)["error"]
    assert error["code"] == "thread_busy" and error["reason"] == reason and reason in error["message"]
    assert fingerprint(f"sqlite:///{db}") == before


def test_compact_busy_thread_in_a_real_process(tmp_path, make_db):
    db = make_db(tmp_path / "busy.db", busy="running")
    before = fingerprint(f"sqlite:///{db}")
    proc = cli("compact", "--thread", "long", db=db)
    assert proc.returncode == EXIT_BUSY and proc.stdout == ""
    assert_one_line_error(proc)
    assert "busy (running)" in proc.stderr
    assert fingerprint(f"sqlite:///{db}") == before


def test_threads_json(capsys, tmp_path, make_db):
    db = make_db(tmp_path / "threads.db", busy="waiting_for_user")
    code, out, _ = run_main(capsys, "threads", "--db", str(db), "--json")
    page = json.loads(out)  # one page: {"threads": [...], "next_after": null} (docs/cli.md, "Listings")
    rows = page["threads"]
    assert code == EXIT_OK and isinstance(rows, list) and page["next_after"] is None
    assert all(THREAD_KEYS <= set(r) for r in rows)
    by_key = {r["thread"]: r for r in rows}
    assert set(by_key) == {"long", "short"}
    assert (by_key["long"]["busy"], by_key["long"]["busy_reason"]) == (True, "waiting_for_user")
    assert (by_key["short"]["busy"], by_key["short"]["busy_reason"], by_key["short"]["messages"]) == (False, None, 2)
    assert by_key["long"]["title"] == "thread long" and by_key["long"]["generation"] == 0


def test_migrate_creates_then_reports_current(capsys, tmp_path):
    path = tmp_path / "new.db"
    code, out, _ = run_main(capsys, "migrate", "--db", str(path), "--json")
    assert code == EXIT_OK and json.loads(out)["from"] is None and json.loads(out)["to"] == code_head()
    code, out, _ = run_main(capsys, "migrate", "--db", str(path), "--json")
    assert code == EXIT_OK and json.loads(out)["from"] == json.loads(out)["to"] == code_head()
    code, out, _ = run_main(capsys, "threads", "--db", str(path), "--json")
    assert code == EXIT_OK and json.loads(out) == {"threads": [], "total": 0, "next_after": None}


# -- bad input: one line on stderr, non-zero, no traceback, nothing written -----------------------


def test_invalid_url(tmp_path):
    assert_one_line_error(cli("status", "--thread", "t", db="notascheme://nowhere/x"))


def test_unreachable_postgres():
    proc = cli("threads", db="postgresql+psycopg://nobody@127.0.0.1:1/nothing")
    assert_one_line_error(proc)
    assert "127.0.0.1" in proc.stderr


@pytest.mark.parametrize("command", [["threads"], ["status", "--thread", "t"], ["compact", "--thread", "t"], ["migrate"]])
def test_file_that_is_not_a_database(tmp_path, command):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 50)
    before, names = path.read_bytes(), sorted(p.name for p in tmp_path.iterdir())
    proc = cli(*command, db=path)
    assert_one_line_error(proc)
    assert "not a SQLite database" in proc.stderr
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == names


def test_missing_file_is_not_created(tmp_path):
    proc = cli("status", "--thread", "t", db=tmp_path / "nope.db")
    assert_one_line_error(proc)
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("command", ["status", "compact"])
def test_unknown_thread(db, command):
    before = fingerprint(f"sqlite:///{db}")
    proc = cli(command, "--thread", "no-such-thread", db=db)
    assert_one_line_error(proc)
    assert "no-such-thread" in proc.stderr
    assert fingerprint(f"sqlite:///{db}") == before


def test_newer_schema_is_refused_without_writing(db):
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    conn.close()
    before = fingerprint(f"sqlite:///{db}")
    for command in (["compact", "--thread", "long"], ["migrate"]):
        proc = cli(*command, db=db)
        assert_one_line_error(proc)
        assert "newer than this program knows" in proc.stderr
    assert fingerprint(f"sqlite:///{db}") == before


def test_python_dash_m_engine_cli_runs():
    proc = subprocess.run([sys.executable, "-m", "engine.apps.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "compaction" in proc.stdout


def test_rejected_summary_exit_1_and_state_unchanged(db, monkeypatch):
    """The configured endpoint refuses connections (a real closed port): the summary is rejected,
    the command fails with exit 1 and one line, and only the rejection event is recorded."""
    from engine.service import open_service

    monkeypatch.setenv("COMPACTION_SUMMARY_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("COMPACTION_SUMMARY_MODEL", "gpt-4o-mini")
    svc = open_service(str(db), summarizer=Counting())
    before = svc.reads.compaction_state("long"), svc.reads.history("long")
    svc.close()

    proc = cli("compact", "--thread", "long", db=db)

    assert proc.returncode == 1
    assert_one_line_error(proc)
    assert "summarizer_failed" in proc.stderr
    svc = open_service(str(db), summarizer=Counting())
    try:
        assert (svc.reads.compaction_state("long"), svc.reads.history("long")) == before
        assert [e.data["reason"] for e in svc.reads.events("long") if e.kind == "summary_rejected"] == ["summarizer_failed"]
    finally:
        svc.close()


def test_half_configured_summarizer_is_a_one_line_error(db, monkeypatch):
    monkeypatch.setenv("COMPACTION_SUMMARY_BASE_URL", "http://127.0.0.1:1/v1")
    before = fingerprint(f"sqlite:///{db}")
    proc = cli("compact", "--thread", "long", db=db)
    assert_one_line_error(proc)
    assert "COMPACTION_SUMMARY_MODEL" in proc.stderr
    assert fingerprint(f"sqlite:///{db}") == before


def test_status_words_follow_the_pressure_state() -> None:
    """The hint only between 85% and 100% of the threshold; over the threshold and over the window
    have their own words (one rule, PressureStatus.state, shared with the gauge)."""
    from engine.apps.cli import STATE_WORDS
    from engine.core.views import PressureStatus

    def state(tokens: int) -> str:
        return PressureStatus("t", tokens, 1000, 1200, {}, None, 0, 0, None).state

    assert [state(t) for t in (849, 850, 999, 1000, 1200, 1201)] == ["below", "hint", "hint", "over_threshold", "over_threshold", "over_window"]
    assert "85%" in STATE_WORDS["hint"] and "85%" not in STATE_WORDS["over_threshold"] + STATE_WORDS["over_window"]
    assert "context window" in STATE_WORDS["over_window"]
