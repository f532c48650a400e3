"""The inspector as a user meets it the first time and the next (issue 22, "small things users
expect"): the first-launch welcome; the last database, theme, geometry and splitter sizes restored on
restart; a busy thread's Compaction → Compact now… disabled with its reason; imports on the demo going
to My sessions by default (the choice remembered), and ``compaction import`` without ``--db`` too;
file dialogs in the last folder used or the home folder; Help → Keyboard shortcuts read from the
window's actions, and About with the package's version.

Real SQLite databases and the real service where a database is opened; the user's data directory
and home are temporary (``XDG_DATA_HOME``, ``HOME``), QSettings a temporary INI file."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QSettings
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QFileDialog, QLabel

from engine.core.messages import assistant, user
from engine.service import open_service
from inspector_app import preferences, theme
from inspector_app.app import initial_theme, parse_args
from inspector_app.main_window import MainWindow
from inspector_app.preferences import TARGET_HERE, TARGET_SESSIONS, start_directory
from inspector_app.service_client import ServiceClient
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]
SESSION = ROOT / "tests/fixtures/sessions/claude-code/project/7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
KEY = "claude-code:7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"
CODEX = next((ROOT / "tests/fixtures/sessions/codex/legacy").glob("*.jsonl"))


@pytest.fixture
def user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fresh home and data directory (where the demo and My sessions live)."""
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.delenv("COMPACTION_DB", raising=False)
    return home, data / "compaction-inspector"


def real_opener(tmp_path: Path) -> Any:
    return lambda url: open_service(url, workdir=tmp_path / "workdir")


def small_database(path: Path) -> str:
    """A real SQLite database with two short threads."""
    svc = open_service(str(path), create=True, workdir=path.parent / "workdir")
    try:
        for key, title in (("alpha", "Alpha: a refund"), ("beta", "Beta: a login issue")):
            svc.runs.create_thread(key, title=title)
            svc.runs.append_message(key, user(f"{title}: help please"))
            svc.runs.append_message(key, assistant("On it."))
    finally:
        svc.close()
    return str(path)


@pytest.fixture
def windows(window_factory: Any) -> Any:
    """``windows(opener, settings, theme_manager=None, show=True)`` → a MainWindow from the shared
    ``window_factory`` (tests/gui/conftest.py) on the QSettings given."""
    return lambda opener, settings, **kw: window_factory(opener, settings=settings, **kw)


# == first launch ==============================================================================
def test_a_first_launch_shows_the_welcome_and_opens_nothing(qtbot: Any, windows: Any, settings: QSettings, user_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    opened: list[str] = []

    def opener(url: str) -> Any:
        opened.append(url)
        return open_service(url, workdir=tmp_path / "workdir")

    w = windows(opener, settings)
    assert run(qtbot, w, w.start(None)) is False  # compaction-inspector with no --db, nothing remembered
    assert w.welcome_shown and w.welcome.isVisible() and not w.splitter.isVisible()
    assert opened == [] and not w.client.connected and not w.banner.isVisible()
    assert not (user_dirs[1] / "demo.db").exists()  # the demo is not built behind the user's back
    texts = {b.text() for b in w.welcome.buttons.values()}
    assert texts == {"Open a database…", "Import a session…", "Open the demo"}
    assert "context window" in w.welcome.findChild(QLabel, "welcomeAbout").text()

    w.welcome.buttons["welcomeDemo"].click()  # one click away
    qtbot.waitUntil(lambda: w.idle and w.database is not None, timeout=60_000)
    assert preferences.same_database(w.database, str(user_dirs[1] / "demo.db"))
    assert not w.welcome_shown and w.splitter.isVisible() and w.thread_model.rowCount() > 0
    assert preferences.last_database(settings) == w.database  # and remembered for the next launch


def test_no_db_and_no_theme_on_the_command_line_mean_the_last_ones() -> None:
    args = parse_args([])
    assert args.db is None and args.theme is None


# == restart ===================================================================================
def test_a_restart_restores_the_database_theme_geometry_and_splitter(
    qtbot: Any, qapp: QApplication, windows: Any, settings: QSettings, tmp_path: Path, user_dirs: Any
) -> None:
    db = small_database(tmp_path / "threads.db")
    manager = theme.ThemeManager(qapp, "light")
    try:
        first = windows(real_opener(tmp_path), settings, theme_manager=manager)
        assert run(qtbot, first, first.start(db))
        qtbot.waitUntil(lambda: first.idle, timeout=10_000)
        first.set_theme("dark")  # the Theme menu
        first.resize(1100, 700)
        qtbot.waitUntil(lambda: first.width() == 1100)
        default = first.splitter.sizes()
        # a narrower thread list than the default (which at 1100 px leaves the timeline little over
        # MIN_CENTER), within the panes' minimums (the side panel keeps its tab titles whole)
        first.splitter.setSizes([default[0] - 35, default[1] + 35, default[2]])
        sizes = first.splitter.sizes()
        assert sizes[0] <= default[0] - 30, (default, sizes)
        first.close()  # the user quits: the session is saved

        assert initial_theme(parse_args([]), settings) == "dark"  # the next launch's theme
        assert initial_theme(parse_args(["--theme", "light"]), settings) == "light"  # the command line wins
        second = windows(real_opener(tmp_path), settings, show=False)
        # the height as left (not the default 880 × 1440); the width too, but within the screen (offscreen: 800 wide)
        assert second.height() == 700 and second.width() == min(1100, second.screen().availableGeometry().width() - 2)
        second.resize(1100, 700)  # as on a screen as wide as the last session's (the offscreen one is narrower)
        second.show()
        assert run(qtbot, second, second.start(None))  # no --db: the last database
        qtbot.waitUntil(lambda: second.idle, timeout=10_000)
        assert preferences.same_database(second.database, db) and not second.welcome_shown
        assert set(second.thread_model.keys()) == {"alpha", "beta"}
        restored = second.splitter.sizes()
        assert all(abs(a - b) <= 8 for a, b in zip(restored, sizes)), (restored, sizes)  # as left, to a few pixels of tab-bar fitting
    finally:
        manager.apply("light")


def test_a_remembered_database_that_is_gone_shows_why_and_the_welcome(qtbot: Any, windows: Any, settings: QSettings, tmp_path: Path, user_dirs: Any) -> None:
    preferences.remember_database(settings, str(tmp_path / "gone" / "threads.db"))
    w = windows(real_opener(tmp_path), settings)
    assert run(qtbot, w, w.start(None)) is False
    assert w.banner.isVisible() and w.welcome_shown


def test_a_screenshot_run_leaves_the_users_session_alone(qtbot: Any, windows: Any, settings: QSettings, tmp_path: Path, qloop: Any) -> None:
    db = small_database(tmp_path / "threads.db")
    client = ServiceClient()
    w = MainWindow(client, opener=real_opener(tmp_path), settings=settings, remember=False, poll_ms=3_600_000)
    try:
        w.show()
        assert run(qtbot, w, w.open_database(db))
        qtbot.waitUntil(lambda: w.idle, timeout=10_000)
        w.close()
        assert preferences.last_database(settings) is None and settings.value(preferences.KEY_GEOMETRY) is None
    finally:
        w.poll.stop()
        client.close()
        w.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


# == menu actions say why they are disabled =====================================================
def test_compact_now_in_the_menu_is_disabled_on_a_busy_thread_with_the_buttons_reason(qtbot: Any, make_window: Any, fake: FakeService) -> None:
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert w.compact_action.isEnabled()
    run(qtbot, w, w.select_thread("beta-running"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    reason = w.compact_button.toolTip()
    assert not w.compact_button.isEnabled() and "running" in reason
    assert not w.compact_action.isEnabled() and w.compact_action.text() == "Compact now… (can't: running)"
    assert w.compact_action.toolTip() == reason and w.compact_action.statusTip() == reason
    assert w.compaction_menu.toolTipsVisible()  # the tooltip shows on the greyed item
    run(qtbot, w, w.select_thread("acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert w.compact_action.isEnabled() and w.compact_action.text() == "Compact now…"


def test_what_if_and_export_say_they_need_a_thread(qtbot: Any, make_window: Any) -> None:
    w = make_window()
    w.compaction.update_button()  # nothing open yet
    for action in (w.whatif_action, w.export_action, w.compact_action):
        assert not action.isEnabled()
        assert action.toolTip().startswith("Open a thread first") and action.statusTip() == action.toolTip(), action.text()
    for menu in (w.file_menu, w.compaction_menu):
        assert menu.toolTipsVisible()


# == imports go to My sessions ==================================================================
def test_import_on_the_demo_asks_and_goes_to_my_sessions_by_default_and_remembers(
    qtbot: Any, windows: Any, settings: QSettings, tmp_path: Path, user_dirs: tuple[Path, Path]
) -> None:
    data = user_dirs[1]
    w = windows(real_opener(tmp_path), settings)
    assert run(qtbot, w, w.open_demo(), timeout=60_000)
    qtbot.waitUntil(lambda: w.idle, timeout=20_000)
    demo_threads = set(w.thread_model.keys())

    w.importer.start([str(SESSION)])  # as File → Import… or a drop does
    dialog = w.importer.target_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.combo.currentData() == TARGET_SESSIONS and "My sessions (default)" in dialog.combo.currentText()
    dialog.accept()
    qtbot.waitUntil(lambda: w.idle and w.importer.dialog is not None, timeout=30_000)
    sessions = data / "sessions.db"
    assert sessions.exists() and preferences.same_database(w.database, str(sessions))  # the window shows where they went
    assert KEY in w.thread_model.keys() and not demo_threads & set(w.thread_model.keys())
    assert w.timeline_model.key == KEY
    assert settings.value(preferences.KEY_IMPORT_TARGET) == TARGET_SESSIONS
    into = w.importer.dialog.database.text()  # the result says where they went
    assert into.startswith("Into My sessions (") and into.endswith("sessions.db)") and w.importer.dialog.database.isVisible()
    svc = open_service(str(data / "demo.db"), workdir=tmp_path / "w2")
    try:
        assert KEY not in {t.key for t in svc.reads.list_threads()}  # the demo was left alone
    finally:
        svc.close()
    w.importer.dialog.close()

    # the other choice is remembered too, and preselected next time
    assert run(qtbot, w, w.open_demo(), timeout=60_000)
    qtbot.waitUntil(lambda: w.idle, timeout=20_000)
    w.importer.start([str(CODEX)])
    dialog = w.importer.target_dialog
    assert dialog is not None
    dialog.combo.setCurrentIndex(dialog.combo.findData(TARGET_HERE))
    dialog.accept()
    qtbot.waitUntil(lambda: w.idle and w.importer.dialog is not None, timeout=30_000)
    assert preferences.is_demo(w.database) and any(k.startswith("codex:") for k in w.thread_model.keys())
    assert settings.value(preferences.KEY_IMPORT_TARGET) == TARGET_HERE
    assert w.importer.dialog.database.text().startswith("Into the demo database (")
    w.importer.dialog.close()
    w.importer.start([str(CODEX)])
    assert w.importer.target_dialog is not None and w.importer.target_dialog.combo.currentData() == TARGET_HERE
    w.importer.target_dialog.reject()

    # Choose a SQLite file…: a new file is created, the sessions go there, and it is offered next time
    other = tmp_path / "elsewhere" / "mine.db"
    other.parent.mkdir()
    w.importer.start([str(CODEX)])
    dialog = w.importer.target_dialog
    assert dialog is not None
    dialog.choose_file(str(other))
    dialog.accept()
    qtbot.waitUntil(lambda: w.idle and w.importer.dialog is not None, timeout=30_000)
    assert other.exists() and preferences.same_database(w.database, str(other))
    assert any(k.startswith("codex:") for k in w.thread_model.keys()) and KEY not in w.thread_model.keys()
    assert preferences.import_target(settings) == (preferences.TARGET_OTHER, str(other))
    w.importer.dialog.close()


def test_import_from_the_welcome_goes_to_my_sessions_without_asking(qtbot: Any, windows: Any, settings: QSettings, tmp_path: Path, user_dirs: tuple[Path, Path]) -> None:
    w = windows(real_opener(tmp_path), settings)
    assert run(qtbot, w, w.start(None)) is False and w.welcome_shown
    w.importer.start([str(SESSION)])  # a file dropped on the welcome
    assert w.importer.target_dialog is None
    qtbot.waitUntil(lambda: w.idle and w.importer.dialog is not None, timeout=30_000)
    assert preferences.same_database(w.database, str(user_dirs[1] / "sessions.db")) and not w.welcome_shown
    assert w.timeline_model.key == KEY
    assert preferences.same_database(preferences.last_database(settings), w.database)
    w.importer.dialog.close()


def test_compaction_import_without_db_goes_to_the_sessions_database(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "data")}
    env.pop("COMPACTION_DB", None)
    proc = subprocess.run([sys.executable, "-m", "engine.apps.cli", "import", str(CODEX)], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    sessions = tmp_path / "data" / "compaction-inspector" / "sessions.db"
    assert sessions.exists() and str(sessions) in proc.stderr
    assert not (tmp_path / "data" / "compaction-inspector" / "demo.db").exists()
    explicit = tmp_path / "chosen.db"  # --db still chooses
    proc = subprocess.run([sys.executable, "-m", "engine.apps.cli", "import", "--db", str(explicit), str(CODEX)], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0 and explicit.exists(), proc.stderr


# == file dialogs ===============================================================================
def test_the_start_directory_is_the_last_folder_used_or_home(settings: QSettings, tmp_path: Path) -> None:
    home, folder = tmp_path / "home", tmp_path / "transcripts"
    home.mkdir()
    folder.mkdir()
    assert start_directory(settings, home) == str(home)  # nothing chosen yet: home, never the working directory
    preferences.remember_directory(settings, folder / "a.jsonl")
    assert start_directory(settings, home) == str(folder.resolve())
    folder.rmdir()  # the folder is gone: home again
    assert start_directory(settings, home) == str(home)


def test_the_file_dialogs_open_in_home_then_in_the_last_folder(qtbot: Any, make_window: Any, settings: QSettings, tmp_path: Path, user_dirs: Any) -> None:
    home = user_dirs[0]
    w = make_window()
    dialog = w.importer.ask()  # File → Import…
    assert Path(dialog.directory().absolutePath()) == home and Path.cwd() != home
    dialog.reject()
    folder = tmp_path / "downloads"
    folder.mkdir()
    chosen = folder / SESSION.name
    chosen.write_bytes(SESSION.read_bytes())
    w.importer._chosen([str(chosen)])  # what the dialog's filesSelected does
    qtbot.waitUntil(lambda: w.idle, timeout=30_000)
    if w.importer.dialog is not None:
        w.importer.dialog.close()
    if w.importer.target_dialog is not None:
        w.importer.target_dialog.reject()
    dialog = w.importer.ask()
    assert Path(dialog.directory().absolutePath()) == folder.resolve()
    dialog.reject()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    export = w.compaction.ask_export()  # File → Export compaction history…
    assert export is not None and Path(export.directory().absolutePath()) == folder.resolve()
    export.reject()
    w.show_connect_dialog()  # File → Open database… → Browse…
    connect = w._connect_dialog
    connect._browse()
    assert Path(connect.file_dialog.directory().absolutePath()) == folder.resolve()
    connect.file_dialog.reject()
    connect.reject()


# == Help ======================================================================================
def test_keyboard_shortcuts_lists_every_shortcut_the_window_defines(qtbot: Any, make_window: Any) -> None:
    w = make_window()
    expected = {a.shortcut().toString(QKeySequence.SequenceFormat.NativeText) for a in w.findChildren(QAction) if not a.shortcut().isEmpty()}
    assert {"Ctrl+O", "Ctrl+I", "Ctrl+F"} <= expected
    dialog = w.show_shortcuts()
    assert dialog.isVisible()
    listed = {keys.split(", ")[0] for _what, keys in dialog.rows()}
    assert listed == expected
    assert ("Open database", "Ctrl+O") in dialog.rows()
    dialog.close()
    extra = QAction("Toggle something", w)  # a shortcut added later is listed: read, not copied
    extra.setShortcut(QKeySequence("Ctrl+Shift+Y"))
    w.addAction(extra)
    dialog = w.show_shortcuts()
    assert ("Toggle something", "Ctrl+Shift+Y") in dialog.rows()
    dialog.close()
    assert w.shortcuts_action in w.help_menu.actions() and w.about_action in w.help_menu.actions()


def test_about_shows_the_version_from_the_package_metadata(qtbot: Any, make_window: Any) -> None:
    w = make_window()
    dialog = w.show_about()
    assert dialog.version == metadata.version("compaction-inspector")
    assert f"Compaction Inspector {dialog.version}" in dialog.findChild(QLabel, "aboutText").text()
    dialog.close()
