"""``compaction import``: the CLI contract (JSON shape, exit 0 / 1 / 2) and ``--follow`` on a file
that a background thread is appending to."""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import pytest

from engine.apps.cli import import_cmd
from engine.importers import parse
from engine.service import open_service

from .test_import import CC_KEY, CC_MAIN, CODEX, CODEX_KEY, FIXTURES

KEYS = {"thread", "source", "format", "messages", "tool_calls", "compactions", "skipped", "warnings"}


def cli(*argv: str) -> int:
    """Run ``compaction import …`` (through ``engine.apps.cli.main`` once it registers the command)."""
    from engine.apps import cli as package

    if "import" in package.build_parser()._subparsers._group_actions[0].choices:  # type: ignore[union-attr]
        return package.main(["import", *argv])
    p = argparse.ArgumentParser(prog="compaction")
    import_cmd.add_parser(p.add_subparsers())
    args = p.parse_args(["import", *argv])
    return args.run(args)


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_json_contract_and_idempotent_reimport(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "new.db"  # a missing SQLite file is created
    assert cli("--db", str(db), "--json", str(CC_MAIN), str(CODEX)) == 0
    out = _json(capsys)
    assert out["errors"] == [] and len(out["imported"]) == 4
    assert all(KEYS <= set(r) for r in out["imported"])
    main = next(r for r in out["imported"] if r["thread"] == CC_KEY)
    assert (main["format"], main["messages"], main["tool_calls"], main["compactions"]) == ("claude-code", 18, 5, 2)
    assert any(":12: malformed JSON" in w for w in main["warnings"])
    assert cli("--db", str(db), "--json", str(CC_MAIN), str(CODEX)) == 0
    again = _json(capsys)
    assert [(r["thread"], r["messages"], r["compactions"]) for r in again["imported"]] == [
        (r["thread"], 0, 0) for r in out["imported"]
    ]


def test_a_file_that_is_not_the_format_is_one_error_and_the_others_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("just some notes\nnot a transcript\n")
    db = str(tmp_path / "x.db")
    assert cli("--db", db, "--json", str(junk), str(CODEX)) == 1
    out = _json(capsys)
    assert [r["thread"] for r in out["imported"]] == [CODEX_KEY]
    (err,) = out["errors"]
    assert err["file"] == str(junk) and err["code"] == "import_format" and "\n" not in err["message"]
    # without --json: one line on stderr, the import line on stdout
    assert cli("--db", db, str(junk), str(CODEX)) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"error: {junk}: not a recognized session format")
    assert CODEX_KEY in captured.out and "0 messages" in captured.out
    # a named format the file is not
    assert cli("--db", db, "--format", "swe-agent", "--json", str(CODEX)) == 1
    assert _json(capsys)["errors"][0]["code"] == "import_format"


@pytest.mark.parametrize("bad", ["directory", "not-sqlite", "unreachable-pg"])
def test_a_bad_database_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    if bad == "directory":
        url = str(tmp_path)
    elif bad == "not-sqlite":
        (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
        url = str(tmp_path / "junk.db")
    else:
        url = "postgresql://nobody@127.0.0.1:1/none"
    assert cli("--db", url, str(CODEX)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert cli("--db", url, "--json", str(CODEX)) == 2
    assert _json(capsys)["error"]["code"]


def test_usage_errors_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "x.db")
    assert cli("--db", db, "--thread", "k", str(CODEX), str(CC_MAIN)) == 2
    assert cli("--db", db, "--follow", str(CODEX), str(CC_MAIN)) == 2
    assert "give one FILE" in capsys.readouterr().err


def _appender(source: Path, target: Path, delay: float, done: threading.Event) -> threading.Thread:
    """Write ``source`` into ``target`` a line at a time, each line in two halves (a reader must
    never take a half-written line)."""

    def run() -> None:
        with target.open("ab") as fh:
            for line in source.read_bytes().splitlines(keepends=True):
                half = len(line) // 2
                fh.write(line[:half])
                fh.flush()
                time.sleep(delay / 2)
                fh.write(line[half:])
                fh.flush()
                time.sleep(delay / 2)
        done.set()

    return threading.Thread(target=run, daemon=True)


@pytest.mark.parametrize("source,key", [(CODEX, CODEX_KEY), (CC_MAIN, CC_KEY)], ids=["codex", "claude-code"])
def test_follow_appends_entries_as_they_are_written(db_or_pg: str, tmp_path: Path, source: Path, key: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / source.name
    first = source.read_bytes().splitlines(keepends=True)[0]
    target.write_bytes(first)  # the format is known from the first line
    rest = tmp_path / "rest.jsonl"
    rest.write_bytes(b"".join(source.read_bytes().splitlines(keepends=True)[1:]))
    done = threading.Event()
    writer = _appender(rest, target, 0.03, done)
    writer.start()
    code = cli("--db", db_or_pg, "--follow", "--poll", "0.05", "--follow-seconds", "2.5", "--json", str(target))
    writer.join(timeout=10)
    assert done.is_set() and code == 0
    out = _json(capsys)
    assert out["errors"] == [] and key in {r["thread"] for r in out["imported"]}
    expected = parse(target, final=False)[0]
    svc = open_service(db_or_pg, workdir=tmp_path / "wd")
    try:
        stored = [s.message for s in svc.reads.messages_page(key, limit=10_000)]
        want = [m.source_key for m in expected.messages[: expected.stable_messages]]
        got = [m.source_key for m in stored]
        # append-only: a message that was stable on a branch the user later rewound (Claude Code's
        # edited prompt u19 → u19b) stays; everything else is the one-shot stable prefix, in order.
        # Whether a poll landed while u19 was the tip depends on the machine's load (a poll late by
        # more than the few lines between u19 and u19b never sees it): then it was never stored.
        extra = [k for k in got if k not in want]
        assert [k for k in got if k in want] == want
        assert extra == [] if key == CODEX_KEY else extra in ([], ["u19"])
        assert svc.store.follow_position(key)[0] == target.stat().st_size
        # a plain import afterwards finishes the file (the trailing calls get their markers)
        (final, *_) = svc.imports.import_file(target)
        assert final.already_stored == len(want) and final.messages == len(parse(target)[0].messages) - len(want)
    finally:
        svc.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_or_pg(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'follow.db'}"
    url = request.getfixturevalue("new_pg_database")()
    from engine.store import migrate

    migrate(url)
    return url


def test_follow_refuses_a_whole_document_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("--db", str(tmp_path / "x.db"), "--follow", "--follow-seconds", "0.1", str(FIXTURES / "anthropic" / "request.json")) == 1
    assert "--follow reads growing JSONL files" in capsys.readouterr().err


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_follow_stops_on_a_signal_with_its_report(tmp_path: Path, sig: str) -> None:
    import os
    import signal
    import subprocess
    import sys

    target = tmp_path / CODEX.name
    target.write_bytes(CODEX.read_bytes())
    db = tmp_path / "sig.db"
    script = (
        "import argparse, sys\n"
        "from engine.apps.cli import import_cmd\n"
        "p = argparse.ArgumentParser(); import_cmd.add_parser(p.add_subparsers())\n"
        "a = p.parse_args(['import', *sys.argv[1:]]); sys.exit(a.run(a))\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", script, "--db", str(db), "--follow", "--poll", "0.1", "--json", str(target)],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import sqlite3

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the first pass has written the file's stable part
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                if conn.execute("SELECT count(*) FROM messages").fetchone()[0]:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    data = json.loads(out)
    assert data["errors"] == [] and data["imported"][0]["thread"] == CODEX_KEY and data["imported"][0]["messages"] > 0
    assert os.path.getsize(target) == CODEX.stat().st_size


def test_an_unknown_format_name_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli("--db", str(tmp_path / "x.db"), "--format", "cursor", str(CODEX))
    assert exit_.value.code == 2 and "invalid choice: 'cursor'" in capsys.readouterr().err
