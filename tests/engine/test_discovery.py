"""Discovery (docs/import.md#discovery): the sessions each tool keeps in its default locations, on a
home directory laid out as each tool lays it out (HOME pointed at a temporary folder), folders the
user adds, whether each is imported, ``compaction discover``; and follow all: a real watcher on real
files picks up a new session and an appended line (the 2 s target is printed, not asserted), and survives a rewrite."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from engine.apps.cli import main as cli
from engine.discovery import default_locations, discover, session_for
from engine.importers import openai_chat
from engine.service import Service, open_service
from tests.fake_home import CLAUDE_AUTO_ID, CLAUDE_ID, FIXTURES, make_fake_home

FOLLOW_TARGET_S = 2.0  # the target: a new file or an appended line is imported within two seconds (printed, not asserted)
WAIT_S = 15.0  # bounded waits: generous, a loaded 2-core machine must not fail them


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))  # Path.home(): the default locations are looked for here
    return h


@pytest.fixture
def svc(tmp_path: Path) -> Any:
    s = open_service(str(tmp_path / "sessions.db"), workdir=tmp_path / "workdir", create=True)
    yield s
    s.close()


def test_each_tools_default_location_is_listed_with_tool_project_size_and_last_activity(home: Path) -> None:
    paths = make_fake_home(home)
    found = discover()  # home from $HOME
    assert [(s.tool, Path(s.path)) for s in found] == [
        ("claude-code", paths["claude"]), ("claude-code", paths["claude-auto"]), ("codex", paths["codex"]),
        ("openhands", paths["openhands"]), ("swe-agent", paths["swe-agent"]),
    ]  # newest first; the sub-agent files (read with their session), settings.json and config.toml are not sessions
    by = {s.tool + ":" + Path(s.path).name: s for s in found}
    claude = by[f"claude-code:{CLAUDE_ID}.jsonl"]
    assert claude.project == "/home/dev/parser" and claude.size == paths["claude"].stat().st_size
    assert claude.modified.timestamp() == paths["claude"].stat().st_mtime and claude.found_by == "~/.claude/projects/*/*.jsonl"
    assert by[f"claude-code:{CLAUDE_AUTO_ID}.jsonl"].project == "/home/dev/billing"
    codex = next(s for s in found if s.tool == "codex")
    assert codex.project and codex.found_by == "~/.codex/sessions/**/rollout-*.jsonl"
    oh = next(s for s in found if s.tool == "openhands")
    assert oh.folder and oh.size == sum(f.stat().st_size for f in paths["openhands"].rglob("*") if f.is_file())
    assert not any(s.imported for s in found)


def test_an_empty_home_lists_nothing(home: Path) -> None:
    assert discover() == []


def test_a_format_module_that_names_default_locations_is_discovered_without_a_change_to_discovery(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The constants are collected with getattr from the importer modules: a format added later is found."""
    monkeypatch.setattr(openai_chat, "DEFAULT_LOCATIONS", (".chatlogs/*.json",), raising=False)
    (home / ".chatlogs").mkdir()
    shutil.copy(FIXTURES / "openai-chat/messages.json", home / ".chatlogs/one.json")
    assert ("openai-chat", ".chatlogs/*.json") in [(loc.tool, loc.pattern) for loc in default_locations()]
    assert [(s.tool, Path(s.path).name) for s in discover()] == [("openai-chat", "one.json")]


def test_an_added_folder_is_searched_by_content(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    (folder / "old/.git").mkdir(parents=True)
    shutil.copy(FIXTURES / "openhands/v0/conversation.json", folder / "old/conversation.json")
    shutil.copy(FIXTURES / f"claude-code/project/{CLAUDE_ID}.jsonl", folder / "session.jsonl")
    shutil.copy(FIXTURES / f"claude-code/project/{CLAUDE_ID}.jsonl", folder / "old/.git/ignored.jsonl")
    shutil.copytree(FIXTURES / "openhands/v1/5e2f9a0c4b7d", folder / "conv")
    (folder / "README.txt").write_text("not a session\n")
    (folder / "data.json").write_text('{"rows": [1, 2]}\n')
    found = {Path(s.path).relative_to(folder).as_posix(): (s.tool, s.found_by) for s in discover([str(folder)])}
    assert found == {
        "session.jsonl": ("claude-code", str(folder)),
        "old/conversation.json": ("openhands", str(folder)),
        "conv": ("openhands", str(folder)),  # a session kept as a folder: listed once, its files not entered
    }


def test_imported_sessions_are_marked_and_a_session_grown_since_says_so(home: Path, svc: Service) -> None:
    paths = make_fake_home(home)
    svc.imports.import_file(paths["claude"])
    svc.imports.import_file(paths["openhands"])
    found = {Path(s.path): s for s in svc.imports.discover_sessions()}
    claude = found[paths["claude"]]
    assert claude.imported and claude.threads == (f"claude-code:{CLAUDE_ID}",) and not claude.changed_since_import
    assert found[paths["openhands"]].imported and found[paths["openhands"]].threads == ("openhands:5e2f9a0c-4b7d-4e2a-9c11-7d3b2a1f0e9d",)
    assert not found[paths["codex"]].imported and found[paths["codex"]].threads == ()
    later = time.time() + 60
    os.utime(paths["claude"], (later, later))  # written to after the import
    assert next(s for s in svc.imports.discover_sessions() if Path(s.path) == paths["claude"]).changed_since_import


def test_session_for_names_the_session_a_changed_file_belongs_to(home: Path) -> None:
    paths = make_fake_home(home)
    locs = default_locations()
    assert session_for(paths["claude"], locs) == (paths["claude"], "claude-code")
    event = next((paths["openhands"] / "events").iterdir())
    assert session_for(event, locs) == (paths["openhands"], "openhands")  # a file of a session folder: the folder
    # a sub-agent's file is read with its main session: that one is imported when it grows
    assert session_for(paths["claude"].parent / CLAUDE_ID / "subagents/agent-a1b2c3d4.jsonl", locs) == (paths["claude"], "claude-code")
    assert session_for(paths["claude"].parent / "agent-9f8e7d6c.jsonl", locs) == (paths["claude"], "claude-code")
    assert session_for(paths["claude"].parent / "agent-0ther000.jsonl", locs) is None  # its session is not here
    assert session_for(home / ".claude/settings.json", locs) is None


def test_cli_discover_lists_imports_and_reports_json(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_fake_home(home)
    db = tmp_path / "cli.db"
    assert cli(["discover", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "5 sessions, 0 imported" in out and "Claude Code" in out and "parser" in out and "SWE-agent" in out
    assert not db.exists()  # listing never creates the database
    assert cli(["discover", "--db", str(db), "--import"]) == 0
    assert "5 sessions, 5 imported" in capsys.readouterr().out
    assert cli(["discover", "--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["imported"] for s in data["sessions"]] == [True] * 5 and data["sessions"][0]["threads"] == [f"claude-code:{CLAUDE_ID}"]
    assert set(data["sessions"][0]) >= {"tool", "project", "size", "modified", "imported", "path"}


# -- follow all ------------------------------------------------------------------------------------


def _claude_line(session: str, uuid: str, parent: str | None, kind: str, text: str) -> str:
    entry: dict[str, Any] = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/dev/live",
                             "sessionId": session, "version": "2.0.42", "type": kind, "uuid": uuid,
                             "timestamp": "2026-12-01T10:00:00.000Z"}
    if kind == "user":
        entry["message"] = {"role": "user", "content": text}
    else:
        entry["message"] = {"id": f"msg_{uuid}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
    return json.dumps(entry) + "\n"


def _wait(what: Callable[[], bool], bound: float = WAIT_S) -> float:
    """Seconds until ``what()`` holds (fails past ``bound``)."""
    t0 = time.monotonic()
    while not what():
        assert time.monotonic() - t0 < bound, "not within the bound"
        time.sleep(0.02)
    return time.monotonic() - t0


def _texts(svc: Service, key: str) -> list[str]:
    if key not in {t.key for t in svc.reads.list_threads()}:
        return []  # not there yet
    return [m.message.content for m in svc.reads.messages_page(key, limit=1000)]


def test_follow_all_imports_a_new_session_and_an_appended_line(home: Path, svc: Service) -> None:
    make_fake_home(home)
    reported: list[str] = []
    follower = svc.imports.follow_sessions(on_reports=lambda rs: reported.extend(r.thread for r in rs), debounce_ms=300)
    try:
        assert follower.running and home / ".claude/projects" in follower.watched and home not in follower.watched
        # a new session in a new project folder (Claude Code creates both at once)
        sid = "0e0e0e0e-1111-4222-8333-444455556666"
        project = home / ".claude/projects/-home-dev-live"
        project.mkdir()
        path = project / f"{sid}.jsonl"
        t0 = time.monotonic()
        with path.open("w") as fh:
            fh.write(_claude_line(sid, "u1", None, "user", "Start the live session"))
            fh.write(_claude_line(sid, "a1", "u1", "assistant", "Started."))
        key = f"claude-code:{sid}"
        _wait(lambda: "Start the live session" in _texts(svc, key))
        new_file_s = time.monotonic() - t0
        # a line appended to it: the assistant entry before it is complete now, and the new request is in
        t0 = time.monotonic()
        with path.open("a") as fh:
            fh.write(_claude_line(sid, "u2", "a1", "user", "And now the second request"))
        _wait(lambda: _texts(svc, key)[-2:] == ["Started.", "And now the second request"])
        appended_s = time.monotonic() - t0
        assert key in reported
        print(f"follow all: new session {new_file_s:.2f} s, appended line {appended_s:.2f} s (target {FOLLOW_TARGET_S} s)")
        # a sub-agent of it writes its own file: the main session is read again, the sub-agent comes with it
        sub = project / sid / "subagents/agent-5ub0.jsonl"
        sub.parent.mkdir(parents=True)
        line = json.loads(_claude_line(sid, "s1", None, "user", "Sub-agent: find the callers"))
        sub.write_text(json.dumps({**line, "isSidechain": True, "agentId": "5ub0"}) + "\n")
        _wait(lambda: _texts(svc, f"{key}/5ub0") == ["Sub-agent: find the callers"], WAIT_S)

        # rewritten: truncated, then written again whole with one more line; the follower goes on
        body = path.read_text()
        path.write_text("")
        time.sleep(0.5)
        path.write_text(body + _claude_line(sid, "a2", "u2", "assistant", "Second answer.")
                        + _claude_line(sid, "u3", "a2", "user", "Third request after the rewrite"))
        _wait(lambda: _texts(svc, key)[-2:] == ["Second answer.", "Third request after the rewrite"], WAIT_S)
        texts = _texts(svc, key)
        assert len(texts) == len(set(texts)) == 5  # nothing twice
        assert follower.running
    finally:
        follower.stop()
    assert not follower.running


def test_follow_all_watches_a_tools_folder_that_appears_later_and_an_added_folder(home: Path, tmp_path: Path, svc: Service) -> None:
    """No ~/.codex yet: once Codex makes it, what it wrote there is imported; an added folder is followed by content."""
    folder = tmp_path / "exports"
    folder.mkdir()
    follower = svc.imports.follow_sessions([str(folder)], debounce_ms=200)
    try:
        assert follower.watched == (folder,)
        day = home / ".codex/sessions/2026/11/30"
        day.mkdir(parents=True)
        src = next((FIXTURES / "codex/2026/11/30").iterdir())
        shutil.copy(src, day)
        _wait(lambda: any(t.source_format == "codex" for t in svc.reads.list_threads()))
        shutil.copy(FIXTURES / "swe-agent/classic/calc__calc-1.traj", folder / "calc.traj")
        _wait(lambda: any(t.source_format == "swe-agent" for t in svc.reads.list_threads()), WAIT_S)
        (folder / "notes.txt").write_text("not a session")
        time.sleep(0.6)
        assert follower.running and not follower.errors
    finally:
        follower.stop()


def test_a_session_that_cannot_be_read_is_reported_and_the_follower_goes_on(home: Path, svc: Service) -> None:
    (home / "trajectories/me").mkdir(parents=True)
    errors: list[str] = []
    done = threading.Event()
    follower = svc.imports.follow_sessions(on_error=lambda path, exc: (errors.append(path), done.set()), debounce_ms=200)
    try:
        bad = home / "trajectories/me/half.traj"
        bad.write_text('{"trajectory": [')  # half-written JSON document
        assert done.wait(WAIT_S) and errors == [str(bad)]
        shutil.copy(FIXTURES / "swe-agent/classic/calc__calc-1.traj", bad)  # written whole: imported now
        _wait(lambda: any(t.source_format == "swe-agent" for t in svc.reads.list_threads()), WAIT_S)
        assert follower.running
    finally:
        follower.stop()
