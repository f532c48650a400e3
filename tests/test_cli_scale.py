"""CLI at scale (issue 26): every listing command pages with ``--limit`` / ``--after`` (a walk by
``next_after`` equals the full listing, nothing twice), and a reader that leaves early (a closed
pipe) ends every command quietly: no traceback, no "Broken pipe", exit 141 — errors included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.apps.cli import EXIT_PIPE, main
from engine.apps.demo import build_demo
from engine.core.messages import Message

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
EXTRA = 37  # threads added to the demo's, so that pages of 5 do not divide them


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The demo database plus threads, pins (with their audit rows), and a folder of sessions."""
    tmp = tmp_path_factory.mktemp("scale")
    db = str(tmp / "demo.db")
    build_demo(db, workdir=tmp / "wd")
    from engine.service import open_service

    svc = open_service(db, workdir=tmp / "wd")
    try:
        for i in range(EXTRA):
            key = f"extra-{i:03d}"
            svc.runs.create_thread(key, title=f"extra thread {i}")
            svc.runs.append_message(key, Message(role="user", content=f"question {i}"))
        ids = svc.runs.append_messages("extra-000", [Message(role="assistant", content=f"answer {j}") for j in range(12)])
        for j, mid in enumerate(ids):
            svc.steering.pin("extra-000", mid, reason=f"keep {j}")
    finally:
        svc.close()
    folder = tmp / "sessions"
    shutil.copytree(FIXTURES / "codex", folder / "codex")
    shutil.copytree(FIXTURES / "swe-agent", folder / "swe-agent")
    shutil.copytree(FIXTURES / "openhands" / "v0", folder / "openhands")
    return {"db": db, "folder": str(folder), "home": str(tmp / "home")}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)


def _walk(capsys: pytest.CaptureFixture[str], argv: list[str], key: str, limit: int) -> tuple[list[Any], int]:
    """Every page by ``next_after``: the items in order, and how many pages."""
    items: list[Any] = []
    after: Any = None
    pages = 0
    while True:
        page = _json(capsys, [*argv, "--limit", str(limit)] + (["--after", str(after)] if after is not None else []))
        pages += 1
        items.extend(page[key])
        after = page["next_after"]
        if after is None:
            return items, pages
        assert len(page[key]) <= limit and pages < 1000


def _ident(item: Any) -> str:
    return json.dumps(item, sort_keys=True)


LISTINGS = [
    (["threads"], "threads", 5),
    (["threads", "--sort", "messages"], "threads", 4),
    (["threads", "--sort", "activity", "--reverse", "--filter", "EXTRA"], "threads", 6),
    (["threads", "--busy", "--sort", "pressure"], "threads", 2),
    (["audit"], "entries", 4),
    (["events", "--thread", "research-retrieval-latency"], "events", 7),
    (["events", "--thread", "research-retrieval-latency", "--kind", "summary", "--kind", "prune"], "events", 2),
    (["check"], "violations", 3),
    (["pin", "--thread", "extra-000", "--list"], "pins", 5),
    (["replay", "--thread", "overflow-recovers"], "episodes", 1),
    (["discover", "--folder", "{folder}", "--home", "{home}"], "sessions", 2),
]


@pytest.mark.parametrize(("argv", "key", "limit"), LISTINGS, ids=[" ".join(a[:3]) for a, _, _ in LISTINGS])
def test_paging_walk_equals_the_full_listing(store: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str],
                                             key: str, limit: int) -> None:
    argv = [a.format(**store) for a in argv] + ["--db", store["db"]]
    whole = _json(capsys, [*argv, "--limit", "1000000"] if argv[0] != "check" else argv)
    assert whole["next_after"] is None
    walked, pages = _walk(capsys, argv, key, limit)
    assert [_ident(x) for x in walked] == [_ident(x) for x in whole[key]]
    assert len({_ident(x) for x in walked}) == len(walked)
    if key != "violations":  # the demo's threads have no violations: pages of threads, no items
        assert len(walked) > 0
    if key in ("entries", "pins", "events") or argv[:2] == ["threads", "--db"]:
        assert pages == -(-len(walked) // limit) and pages > 1


def test_check_pages_threads_and_threads_default_page(store: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    threads = _json(capsys, ["threads", "--db", store["db"], "--limit", "1000000"])["threads"]
    seen, after = 0, None
    while True:
        page = _json(capsys, ["check", "--db", store["db"], "--limit", "7"] + (["--after", after] if after else []))
        seen += page["threads"]
        after = page["next_after"]
        if after is None:
            break
    assert seen == len(threads) == 9 + EXTRA
    page = _json(capsys, ["threads", "--db", store["db"], "--limit", "10"])
    assert page["threads"] == threads[:10] and page["total"] == len(threads) and page["next_after"]
    rest = _json(capsys, ["threads", "--db", store["db"], "--after", page["next_after"]])
    assert page["threads"] + rest["threads"] == threads and rest["next_after"] is None


def test_threads_filters_and_sorts_in_the_database(store: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    busy = _json(capsys, ["threads", "--db", store["db"], "--busy"])
    assert {t["thread"] for t in busy["threads"]} == {"busy-queued", "busy-running", "busy-waiting-for-user"} == {
        t["thread"] for t in _json(capsys, ["threads", "--db", store["db"], "--limit", "1000"])["threads"] if t["busy"]}
    assert busy["total"] == 3
    by_messages = _json(capsys, ["threads", "--db", store["db"], "--sort", "messages"])["threads"]
    assert [t["messages"] for t in by_messages] == sorted((t["messages"] for t in by_messages), reverse=True)
    text = _json(capsys, ["threads", "--db", store["db"], "--filter", "检索"])["threads"]
    assert [t["thread"] for t in text] == ["zh-检索延迟分析"]


def test_recount_pages_threads(store: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    keys, after = [], None
    while True:
        page = _json(capsys, ["recount", "--db", store["db"], "--limit", "6"] + (["--after", after] if after else []))
        assert len(page["recounted"]) <= 6
        keys.extend(page["recounted"])
        after = page["next_after"]
        if after is None:
            break
    all_keys = [t["thread"] for t in _json(capsys, ["threads", "--db", store["db"], "--limit", "1000000"])["threads"]]
    assert keys == all_keys


# -- a reader that leaves ------------------------------------------------------------------------------


def _closed_pipe(argv: list[str], *, stdin: Any = None) -> subprocess.CompletedProcess:
    """Run ``compaction ARGV`` with standard output a pipe whose reader is gone before it writes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r, w = os.pipe()
    os.close(r)  # the reader left (`| head -0`): every write meets EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "engine.apps.cli", *argv], cwd=ROOT, env=env, stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(w)
    return proc


PIPED = [
    ["threads"], ["threads", "--json"], ["audit"], ["audit", "--json"], ["check"], ["check", "--json"],
    ["pin", "--thread", "extra-000", "--list"], ["replay", "--thread", "overflow-recovers", "--json"],
    ["recount"], ["discover", "--folder", "{folder}", "--home", "{home}"], ["discover", "--folder", "{folder}", "--home", "{home}", "--json"],
    ["events", "--thread", "research-retrieval-latency"], ["events", "--thread", "research-retrieval-latency", "--json"],
    ["status", "--thread", "extra-001", "--json"], ["export", "--thread", "overflow-recovers", "--format", "md"],
]


@pytest.mark.parametrize("argv", PIPED, ids=[" ".join(a) for a in PIPED])
def test_a_closed_pipe_is_silent(store: dict[str, str], argv: list[str]) -> None:
    proc = _closed_pipe([a.format(**store) for a in argv] + ["--db", store["db"]])
    assert proc.stderr == "" and proc.returncode == EXIT_PIPE


def test_a_closed_pipe_is_silent_on_an_error_path(store: dict[str, str]) -> None:
    unreachable = "postgresql+psycopg://nobody@127.0.0.1:1/nothing"
    proc = _closed_pipe(["threads", "--json", "--db", unreachable])  # the error's JSON meets the closed pipe
    assert proc.stderr == "" and proc.returncode == EXIT_PIPE
    proc = _closed_pipe(["status", "--thread", "no-such-thread", "--json", "--db", store["db"]])
    assert proc.stderr == "" and proc.returncode == EXIT_PIPE
    proc = _closed_pipe(["threads", "--db", unreachable])  # text: the error goes to stderr, which is open
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr


def test_a_closed_pipe_during_a_bulk_import(store: dict[str, str], tmp_path: Path) -> None:
    for extra in ([], ["--json"]):
        proc = _closed_pipe(["import", "--db", str(tmp_path / f"i{len(extra)}.db"), *extra, store["folder"]])
        assert proc.stderr == "" and proc.returncode == EXIT_PIPE


def test_head_one_of_a_long_listing(store: dict[str, str]) -> None:
    """The real thing: ``compaction threads --json | head -1`` in a shell."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for extra in ("", " --json"):
        proc = subprocess.run(f"set -o pipefail; {sys.executable} -m engine.apps.cli threads --db {store['db']}{extra} | head -1",
                              shell=True, executable="/bin/bash", cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert proc.stderr == "" and len(proc.stdout.splitlines()) == 1
        assert proc.returncode in (0, EXIT_PIPE)  # 141 when the reader left before the last write (pipefail)
