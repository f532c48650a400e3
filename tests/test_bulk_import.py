"""``compaction import DIR`` (issue 26): recursion over nested folders of mixed formats with files
that are not sessions and a bad one, the per-file JSON report, resuming after a partial run (by
pages, and after a real SIGINT), the progress line on a terminal and none on a pipe, and the
source files never written."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.apps.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "sessions"


def _tree(root: Path) -> Path:
    """A folder as people keep them: sessions of five formats at several depths (one kept as a
    folder, one with sub-agents), a note, a sidecar and a truncated SQLite session store."""
    shutil.copytree(FIXTURES / "claude-code" / "project", root / "work" / "claude" / "project")
    shutil.copytree(FIXTURES / "codex", root / "work" / "codex")
    (root / "runs" / "swe").mkdir(parents=True)
    shutil.copy(FIXTURES / "swe-agent" / "classic" / "calc__calc-1.traj", root / "runs" / "swe")
    shutil.copytree(FIXTURES / "cline" / "saoudrizwan.claude-dev" / "tasks" / "1764843000000", root / "cline" / "1764843000000")
    shutil.copy(FIXTURES / "openai-chat" / "request.json", root / "request.json")
    (root / "notes").mkdir()
    (root / "notes" / "README.txt").write_text("exported sessions\n")
    (root / "bad").mkdir()
    (root / "bad" / "agents.sqlite").write_bytes((FIXTURES / "agents-sdk" / "sessions.sqlite").read_bytes()[:4096])
    return root


SESSIONS = 6  # claude main (+ 2 sub-agents), 2 codex, swe-agent, cline folder, openai-chat


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def _run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["import", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_recursion_mixed_formats_bad_file_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path / "in")
    before = _snapshot(root)
    db = str(tmp_path / "s.db")
    code, out = _run_json(capsys, "--db", db, str(root))
    assert code == 1  # one file failed; the others imported
    by_path = {Path(f["path"]).relative_to(root).as_posix(): f for f in out["files"]}
    assert set(f["status"] for f in out["files"]) == {"ok", "skipped", "error"}
    ok = {k for k, f in by_path.items() if f["status"] == "ok"}
    assert ok == {
        "work/claude/project/7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl",
        "work/codex/2026/11/30/rollout-2026-11-30T10-00-00-019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d.jsonl",
        "work/codex/legacy/rollout-2025-08-20T09-00-00-6a1d2c3b-0e4f-4a5b-8c9d-0e1f2a3b4c5d.jsonl",
        "runs/swe/calc__calc-1.traj", "cline/1764843000000", "request.json",
    }
    bad = by_path["bad/agents.sqlite"]
    assert bad["status"] == "error" and bad["code"] and "not a readable agents-sdk database" in bad["reason"]
    assert out["errors"] == [{"file": bad["path"], "code": bad["code"], "message": bad["reason"]}]
    assert by_path["notes/README.txt"] == {**by_path["notes/README.txt"], "status": "skipped", "reason": "not a recognized session format"}
    assert by_path["work/claude/project/agent-9f8e7d6c.jsonl"]["reason"] == "read with its main session"
    assert not any(k.startswith("cline/1764843000000/") for k in by_path)  # a session folder is one entry
    claude = by_path["work/claude/project/7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"]
    assert claude["format"] == "claude-code" and len(claude["threads"]) == 3 and claude["messages"] > 0
    assert {r["thread"] for r in claude["reports"]} == set(claude["threads"])
    assert out["counts"] == {"ok": SESSIONS, "skipped": len(out["files"]) - SESSIONS - 1, "error": 1, "unchanged": 0,
                             "threads": len({t for f in out["files"] for t in f["threads"]})}
    assert [f["path"] for f in out["files"]] == sorted(f["path"] for f in out["files"]) and out["next_after"] is None
    assert _snapshot(root) == before  # the sources are only read
    # text output: a line per file and the total
    capsys.readouterr()
    assert main(["import", "--db", str(tmp_path / "t.db"), str(root)]) == 1
    text = capsys.readouterr().out.splitlines()
    assert any(line.startswith("error    ") and "agents.sqlite" in line for line in text)
    assert text[-1].startswith(f"{len(out['files'])} files: {SESSIONS} imported") and "1 error" in text[-1]


def test_resume_by_pages_skips_what_is_done(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path / "in")
    db = str(tmp_path / "s.db")
    code, full = _run_json(capsys, "--db", str(tmp_path / "ref.db"), str(root))
    entries = [f["path"] for f in full["files"]]
    code, first = _run_json(capsys, "--db", db, "--limit", "4", str(root))
    assert [f["path"] for f in first["files"]] == entries[:4] and first["next_after"] == entries[3]
    code, second = _run_json(capsys, "--db", db, "--after", first["next_after"], "--limit", "3", str(root))
    assert [f["path"] for f in second["files"]] == entries[4:7]
    # the whole folder again (an interrupted run re-run): what the pages did is skipped unchanged, the rest imported
    code, rest = _run_json(capsys, "--db", db, str(root))
    done = {f["path"] for f in first["files"] + second["files"] if f["status"] == "ok"}
    assert done and {f["path"] for f in rest["files"] if f["reason"] == "already imported, unchanged since"} == done
    assert {f["path"] for f in rest["files"] if f["status"] == "ok"} == {f["path"] for f in full["files"] if f["status"] == "ok"} - done
    assert rest["counts"]["unchanged"] == len(done)
    # the same threads with the same messages as one full run, none twice
    capsys.readouterr()
    got, ref = [], []
    for url, into in ((db, got), (str(tmp_path / "ref.db"), ref)):
        assert main(["threads", "--db", url, "--json"]) == 0
        into.extend((t["thread"], t["messages"]) for t in json.loads(capsys.readouterr().out)["threads"])
    assert got == ref and len({k for k, _ in got}) == len(got)
    # a file that grew since its import is imported again (only what is new)
    cc = root / "work" / "codex" / "legacy" / "rollout-2025-08-20T09-00-00-6a1d2c3b-0e4f-4a5b-8c9d-0e1f2a3b4c5d.jsonl"
    later = time.time() + 60
    os.utime(cc, (later, later))
    code, again = _run_json(capsys, "--db", db, str(root))
    assert [f["path"] for f in again["files"] if f["status"] == "ok"] == [str(cc)]
    assert again["files"][entries.index(str(cc))]["messages"] == 0


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _generated(root: Path, files: int) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bulk_import  # benchmarks/bulk_import.py: the real-shaped folder

        return bulk_import.generate_folder(root, files, seed=3)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_a_real_sigint_then_a_rerun_imports_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "in"
    made = _generated(root, 60)
    db = str(tmp_path / "s.db")
    cmd = [sys.executable, "-m", "engine.apps.cli", "import", "--db", db, str(root)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        seen += line.startswith("ok ")
        if seen == 8:
            proc.send_signal(signal.SIGINT)
            break
    rest_out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "Traceback" not in err
    again = subprocess.run([*cmd, "--json"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    report = json.loads(again.stdout)
    c = report["counts"]
    assert again.returncode == 1 and c["error"] == 1, again.stderr  # the generator's damaged SQLite store
    assert c["unchanged"] >= 8 and c["unchanged"] + c["ok"] == made["sessions"]
    ref = subprocess.run([sys.executable, "-m", "engine.apps.cli", "import", "--db", str(tmp_path / "ref.db"), "--json", str(root)],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    listing = []
    for url in (db, str(tmp_path / "ref.db")):
        out = subprocess.run([sys.executable, "-m", "engine.apps.cli", "threads", "--db", url, "--json", "--limit", "100000"],
                             cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
        listing.append([(t["thread"], t["messages"], t["kept_tokens"], t["threshold"]) for t in json.loads(out.stdout)["threads"]])
    assert ref.returncode == 1 and listing[0] == listing[1]  # the interrupted run's threads measured too (figures written as it stopped)
    assert all(kept is not None for _k, _n, kept, _t in listing[0])


def _read_all(fd: int, proc: subprocess.Popen, timeout: float = 120) -> bytes:
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks)


def test_progress_line_on_a_terminal_none_on_a_pipe(tmp_path: Path) -> None:
    root = tmp_path / "in"
    _generated(root, 30)
    cmd = [sys.executable, "-m", "engine.apps.cli", "import", "--db", str(tmp_path / "a.db"), str(root)]
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    shown = _read_all(master, proc).decode("utf-8", "replace")
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 1  # the damaged file
    assert "\r33/33 files · 30 threads · 1 error · 2 skipped\x1b[K" in shown  # 30 sessions, a README, a broken JSON, a damaged store
    piped = subprocess.run([*cmd[:5], str(tmp_path / "b.db"), str(root)], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert piped.returncode == 1 and piped.stderr == "" and "files ·" not in piped.stdout
    assert piped.stdout.splitlines()[-1].startswith("33 files: 30 imported") and piped.stdout.splitlines()[-1].endswith("1 error")


def test_a_closed_stdout_while_the_progress_line_shows(tmp_path: Path) -> None:
    """``compaction import DIR | head -1`` on a terminal: the progress line is drawn on stderr, the
    report's next line meets the closed pipe: the run stops quietly (141), the terminal shows no
    traceback and no "Broken pipe", and the line is taken away."""
    root = tmp_path / "in"
    _generated(root, 12)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "engine.apps.cli", "import", "--db", str(tmp_path / "a.db"), str(root)],
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader leaves after one line
    shown = _read_all(master, proc).decode("utf-8", "replace")
    proc.wait(timeout=60)
    os.close(master)
    assert first and proc.returncode == 141
    assert "files · " in shown  # the progress line was showing
    assert "Traceback" not in shown and "Broken pipe" not in shown and "error:" not in shown
    assert shown.endswith("\r\x1b[K")  # and was taken away


def test_every_imported_thread_is_measured_when_the_import_ends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The figures of a bulk import are written a batch at a time: once it ends, every thread it
    wrote lists the kept tokens, threshold and window a status measures."""
    from engine.core.views import ThreadQuery
    from engine.service import open_service

    root = _tree(tmp_path / "in")
    db = str(tmp_path / "s.db")
    code, out = _run_json(capsys, "--db", db, str(root))
    assert code == 1 and out["counts"]["ok"] == SESSIONS
    svc = open_service(db)
    try:
        listed = svc.threads.page(ThreadQuery(), limit=100).threads
        assert len(listed) == out["counts"]["threads"] >= SESSIONS
        for t in listed:
            st = svc.compaction.status(t.key, remember=False)
            assert (t.kept_tokens, t.threshold, t.window) == (st.tokens, st.threshold or None, st.context_window or None), t.key
    finally:
        svc.close()


def _listed_figures_are_the_status(db: str) -> int:
    from engine.core.views import ThreadQuery
    from engine.service import open_service

    svc = open_service(db)
    try:
        listed = svc.threads.page(ThreadQuery(), limit=1000).threads
        for t in listed:
            st = svc.compaction.status(t.key, remember=False)
            assert (t.kept_tokens, t.threshold, t.window) == (st.tokens, st.threshold or None, st.context_window or None), t.key
        return len(listed)
    finally:
        svc.close()


def test_ctrl_c_while_a_thread_is_handed_to_the_measuring_stops_after_that_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C between a session's commit and its measuring (the race a loaded machine showed: a
    thread imported, never measured, and skipped unchanged by the re-run) waits for the file to
    finish: the run stops before the next file, exit 130, and every thread it wrote lists its
    figures; the re-run imports the rest."""
    from engine.fleet import ThreadsFacet

    root = _tree(tmp_path / "in")
    db = str(tmp_path / "s.db")
    calls: list[int] = []
    real = ThreadsFacet.remeasure

    def remeasure(self: ThreadsFacet, keys, status) -> None:  # type: ignore[no-untyped-def]
        calls.append(len(keys))
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # delivered here, before this thread is measured
            time.sleep(0.05)
        real(self, keys, status)

    monkeypatch.setattr(ThreadsFacet, "remeasure", remeasure)
    capsys.readouterr()
    code = main(["import", "--db", db, str(root)])
    err = capsys.readouterr().err
    assert code == 130 and "interrupted after" in err, err
    assert len(calls) == 2  # no file started after Ctrl-C
    assert _listed_figures_are_the_status(db) >= 2
    monkeypatch.setattr(ThreadsFacet, "remeasure", real)
    code, out = _run_json(capsys, "--db", db, str(root))
    assert out["counts"]["unchanged"] >= 2 and out["counts"]["ok"] + out["counts"]["unchanged"] == SESSIONS
    assert _listed_figures_are_the_status(db) > out["counts"]["threads"]  # this run's threads and the first run's


@pytest.mark.parametrize("measurer", ["process", "broken"])
def test_a_bulk_import_measures_in_a_process_of_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, measurer: str) -> None:
    """Many files: the threads are measured by the measuring process (``python -m
    engine.apps.cli.bulk_import``) while the import goes on; when that process cannot run, the import
    measures them itself. Either way every thread lists the figures a status measures."""
    from engine.apps.cli import bulk_import

    made = _generated(tmp_path / "in", bulk_import.MEASURER_MIN_FILES + 5)
    started: list[object] = []
    real = bulk_import.Measurer.__init__

    def spy(self: object, svc: object, url: str) -> None:
        if measurer == "broken":
            monkeypatch.setattr(sys, "executable", shutil.which("false") or "/bin/false")
        real(self, svc, url)  # type: ignore[arg-type]
        started.append(self)

    monkeypatch.setattr(bulk_import.Measurer, "__init__", spy)
    db = str(tmp_path / "s.db")
    code, out = _run_json(capsys, "--db", db, str(tmp_path / "in"))
    assert code == 1 and out["counts"]["ok"] == made["sessions"] and len(started) == 1
    assert _listed_figures_are_the_status(db) == out["counts"]["threads"]
