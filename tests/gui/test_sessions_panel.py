"""File → Sessions on this machine…: the real window, the real service on a real SQLite database,
and a fake home laid out as each tool lays it out ($HOME pointed at it). The list (tool, project,
size, last activity, imported?), importing the selection with its progress, Follow all picking up a
new session file, an added folder (remembered), and opening a session file (``compaction-inspector
SESSION_FILE``: into My sessions, its thread opened)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings

from engine.service import open_service
from inspector_app import preferences
from inspector_app.app import parse_args
from inspector_app.controllers.sessions import KEY_FOLDERS, remembered_folders
from inspector_app.main_window import MainWindow
from inspector_app.widgets.sessions import COL_TOOL, PathRole
from tests.fake_home import CLAUDE_ID, FIXTURES, make_fake_home
from tests.gui.conftest import run

pytestmark = pytest.mark.gui
KEY = f"claude-code:{CLAUDE_ID}"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("COMPACTION_DB", raising=False)
    return make_fake_home(h)


@pytest.fixture
def real(qtbot: Any, window_factory: Any, tmp_path: Path, home: dict[str, Path]) -> MainWindow:
    """The window on a real SQLite database that already holds the main Claude Code session."""
    db = tmp_path / "mine.db"
    svc = open_service(str(db), create=True, workdir=tmp_path / "workdir")
    try:
        svc.imports.import_file(home["claude"])
    finally:
        svc.close()
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    assert run(qtbot, w, w.open_database(str(db)))
    qtbot.waitUntil(lambda: w.idle, timeout=10_000)
    return w


def open_panel(qtbot: Any, w: MainWindow) -> Any:
    assert w.sessions.action in w.file_menu.actions()
    w.sessions.action.trigger()  # File → Sessions on this machine…
    dialog = w.sessions.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: w.idle and dialog.table.topLevelItemCount() > 0, timeout=10_000)
    return dialog


def row_of(dialog: Any, path: Path) -> list[str]:
    for i in range(dialog.table.topLevelItemCount()):
        item = dialog.table.topLevelItem(i)
        if item.data(COL_TOOL, PathRole) == str(path):
            return [item.text(c) for c in range(5)]
    raise AssertionError(f"{path} not listed")


def test_the_panel_lists_the_sessions_and_imports_the_selection_with_progress(qtbot: Any, real: MainWindow, home: dict[str, Path]) -> None:
    w = real
    dialog = open_panel(qtbot, w)
    rows = dialog.rows()
    assert [r[0] for r in rows] == ["Claude Code", "Claude Code", "Codex", "OpenHands", "SWE-agent"]  # newest first
    assert rows[0][1:3] == ["parser", "14.6 KB"] and rows[0][4] == "yes"  # already in this database
    assert rows[1][1] == "billing" and rows[2][4] == "no" and dialog.heading.text() == "5 sessions on this machine · 1 imported"
    assert not dialog.import_button.isEnabled()

    progress: list[tuple[int, int, str]] = []
    shown = dialog.set_progress
    dialog.set_progress = lambda d, t, n="": (progress.append((d, t, n)), shown(d, t, n))  # type: ignore[method-assign]
    dialog.select_paths([str(home["codex"]), str(home["openhands"])])
    assert dialog.import_button.isEnabled() and dialog.import_button.text() == "Import 2 selected"
    dialog.import_button.click()
    qtbot.waitUntil(lambda: w.idle and w.importer.dialog is not None and row_of(dialog, home["codex"])[4] == "yes", timeout=30_000)
    assert progress[0][:2] == (0, 2) and progress[1][:2] == (1, 2) and progress[-1] == (2, 2, "")
    assert not dialog.progress.isVisible()
    assert row_of(dialog, home["openhands"])[4] == "yes" and row_of(dialog, home["swe-agent"])[4] == "no"
    assert any(k.startswith("codex:") for k in w.thread_model.keys()) and any(k.startswith("openhands:") for k in w.thread_model.keys())
    assert "3 imported" in dialog.heading.text()
    w.importer.dialog.close()
    dialog.close()
    qtbot.waitUntil(lambda: w.sessions.dialog is None, timeout=5000)


def test_follow_all_imports_a_new_session_as_it_is_written(qtbot: Any, real: MainWindow, home: dict[str, Path]) -> None:
    w = real
    dialog = open_panel(qtbot, w)
    dialog.follow_button.click()  # Follow all
    qtbot.waitUntil(lambda: w.sessions.follower is not None and w.idle, timeout=10_000)
    assert w.sessions.follower.running and dialog.follow_button.isChecked() and dialog.follow_button.text() == "Following all"
    assert dialog.status.text().startswith("Following: ") and ".claude/projects" in dialog.status.text()

    sid = "0e0e0e0e-1111-4222-8333-444455556666"
    project = home["claude"].parents[1] / "-home-dev-live"
    project.mkdir()
    line = {"parentUuid": None, "isSidechain": False, "type": "user", "uuid": "u1", "sessionId": sid, "cwd": "/home/dev/live",
            "timestamp": "2026-12-01T10:00:00.000Z", "message": {"role": "user", "content": "A session started while following"}}
    (project / f"{sid}.jsonl").write_text(json.dumps(line) + "\n")
    qtbot.waitUntil(lambda: f"claude-code:{sid}" in w.thread_model.keys(), timeout=15_000)  # a bounded wait, not a latency bound
    qtbot.waitUntil(lambda: w.idle and dialog.table.topLevelItemCount() == 6, timeout=5000)
    assert row_of(dialog, project / f"{sid}.jsonl")[1:] [0] == "live" and row_of(dialog, project / f"{sid}.jsonl")[4] == "yes"
    assert w.sessions.followed == {f"claude-code:{sid}": 1} and "Follow all imported" in dialog.status.text()

    follower = w.sessions.follower
    dialog.follow_button.click()  # off
    qtbot.waitUntil(lambda: w.sessions.follower is None and w.idle, timeout=10_000)
    assert not follower.running and not dialog.follow_button.isChecked()
    dialog.close()


def test_follow_all_with_nothing_open_goes_to_my_sessions(qtbot: Any, window_factory: Any, tmp_path: Path, home: dict[str, Path]) -> None:
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    assert w.database is None
    dialog = open_panel(qtbot, w)  # listed from disk, nothing to compare with
    assert [r[4] for r in dialog.rows()] == ["no"] * 5
    dialog.follow_button.click()
    qtbot.waitUntil(lambda: w.sessions.follower is not None and w.idle, timeout=20_000)
    assert preferences.same_database(w.database, str(tmp_path / "data/compaction-inspector/sessions.db"))
    assert preferences.same_database(w.sessions.following_into, w.database)
    run(qtbot, w, w.sessions.set_following(False), timeout=10_000)
    dialog.close()


def test_an_added_folder_is_remembered_and_listed(qtbot: Any, real: MainWindow, settings: QSettings, tmp_path: Path) -> None:
    w = real
    folder = tmp_path / "exports"
    folder.mkdir()
    shutil.copy(FIXTURES / "openhands/v0/conversation.json", folder / "conversation.json")
    dialog = open_panel(qtbot, w)
    chooser = w.sessions.ask_folder()  # Add folder…
    assert chooser.isVisible()
    chooser.reject()
    found = run(qtbot, w, w.sessions.add_folder(str(folder)), timeout=10_000)
    assert str(folder / "conversation.json") in [s.path for s in found]
    assert settings.value(KEY_FOLDERS) == [str(folder)] or settings.value(KEY_FOLDERS) == str(folder)
    assert row_of(dialog, folder / "conversation.json")[0] == "OpenHands" and str(folder) in dialog.where.text()
    assert dialog.remove_button.isVisible() and [a.text() for a in dialog.remove_menu.actions()] == [str(folder)]
    dialog.remove_menu.actions()[0].trigger()  # Remove folder → that folder
    qtbot.waitUntil(lambda: w.idle and dialog.table.topLevelItemCount() == 5, timeout=10_000)
    assert remembered_folders(settings) == [] and not dialog.remove_button.isVisible() and str(folder) not in dialog.where.text()
    dialog.close()


def test_opening_a_session_file_imports_it_into_my_sessions_and_opens_its_thread(
        qtbot: Any, window_factory: Any, tmp_path: Path, home: dict[str, Path]) -> None:
    args = parse_args([str(home["claude"])])  # compaction-inspector SESSION_FILE
    assert args.session_file == home["claude"]
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    assert run(qtbot, w, w.sessions.open_file(str(args.session_file)), timeout=30_000)
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == KEY, timeout=20_000)
    sessions = tmp_path / "data/compaction-inspector/sessions.db"
    assert sessions.exists() and preferences.same_database(w.database, str(sessions))
    assert w.importer.dialog is None  # opened, not a result to read
    assert "Imported " in w.statusBar().currentMessage()


def test_follow_all_moves_with_the_open_database_and_stops_with_the_window(
        qtbot: Any, real: MainWindow, tmp_path: Path, home: dict[str, Path]) -> None:
    w = real
    assert run(qtbot, w, w.sessions.set_following(True), timeout=10_000)
    first = w.sessions.follower
    other = tmp_path / "other.db"
    open_service(str(other), create=True, workdir=tmp_path / "workdir").close()
    assert run(qtbot, w, w.open_database(str(other)), timeout=10_000)
    qtbot.waitUntil(lambda: w.idle, timeout=10_000)
    assert not first.running and w.sessions.follower is not None and w.sessions.follower.running
    assert preferences.same_database(w.sessions.following_into, str(other))  # new sessions go where the window looks
    second = w.sessions.follower
    w.close()
    assert not second.running and w.sessions.follower is None
