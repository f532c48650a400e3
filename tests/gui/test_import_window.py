"""Importing transcripts in the window: File → Import… (the file dialog) and files dropped on the
window, off the GUI thread, ending in the result dialog; the imported thread in the list (its
source, its sub-agents under it) and in the timeline (the source's own compactions as rows and
cards of their own, thinking / image / error / meta / no-result markers), and its recorded usage in
the pressure chart. The real service on a temporary SQLite file, and the fake for the drop paths."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QFileDialog

from engine.service import open_service
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_SOURCE, COL_TITLE
from inspector_app.models.timeline import MarkersRole, NodeKindRole, SourceRole
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]
SESSION = ROOT / "tests/fixtures/sessions/claude-code/project/7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
KEY = "claude-code:7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"


@pytest.fixture
def real(qtbot: Any, window_factory: Any, tmp_path: Path) -> MainWindow:
    """A window on an empty SQLite database (the real service)."""
    db = tmp_path / "imported.db"
    from engine.apps.cli import main as cli

    assert cli(["migrate", "--db", str(db)]) == 0
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    assert run(qtbot, w, w.open_database(str(db)))
    qtbot.waitUntil(lambda: w.idle, timeout=10_000)
    return w


def select(qtbot: Any, w: MainWindow, message_id: int) -> None:
    w.timeline.setCurrentIndex(w.timeline_model.index_for_message(message_id))
    qtbot.waitUntil(lambda: w.idle and w.detail.header.text().split(" · ")[1:2] == [f"#{message_id}"], timeout=5000)


def drop(w: MainWindow, paths: list[Path]) -> tuple[bool, bool]:
    """Drag ``paths`` over the window and drop them, as a file manager does; (enter accepted, drop accepted)."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(w.rect().center(), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w, enter)
    event = QDropEvent(QPointF(w.rect().center()), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w, event)
    return enter.isAccepted(), event.isAccepted()


def test_import_through_the_file_dialog_shows_the_result_and_opens_the_thread(qtbot: Any, real: MainWindow) -> None:
    w = real
    w.import_action.trigger()  # File → Import…
    assert w.import_action in w.file_menu.actions()
    dialog = w.importer.file_dialog
    assert isinstance(dialog, QFileDialog) and dialog.isVisible()
    dialog.selectFile(str(SESSION))
    dialog.accept()
    qtbot.waitUntil(lambda: w.idle and w.importer.dialog is not None, timeout=20_000)
    result = w.importer.dialog
    assert result is not None and result.isVisible()
    rows = {r[0]: r for r in result.rows()}
    assert rows[KEY] == [KEY, "Claude Code", "18", "5", "2", "3"]  # thread, format, messages, tool calls, compactions, warnings
    assert rows["↳ …/a1b2c3d4"][1:5] == ["Claude Code", "4", "1", "0"]  # a sub-agent, as its own session
    assert result.heading.text().startswith("3 sessions imported · 23 new messages · 2 recorded compactions")
    notes = result.notes.toPlainText()
    assert f"  ⚠ {SESSION.name}:12: malformed JSON" in notes and "missing_result" in notes and "unknown:future-entry-kind × 1" in notes

    assert w.timeline_model.key == KEY  # nothing was open: the imported session opens behind the result

    # the list shows each thread's source, the sub-agents right under their parent
    model = w.thread_model
    assert [model.index(r, COL_TITLE).data() for r in range(model.rowCount())] == ["Fix the unclosed regex in parser.py", "↳ 9f8e7d6c", "↳ Find callers"]
    assert {model.index(r, COL_SOURCE).data() for r in range(model.rowCount())} == {"Claude"}
    assert not w.thread_list.isColumnHidden(COL_SOURCE)
    assert "imported from Claude Code" in model.index(0, COL_SOURCE).data(Qt.ItemDataRole.ToolTipRole)

    result.open_button.click()
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == KEY and w.importer.dialog is None, timeout=10_000)
    assert "imported from Claude Code" in w.thread_meta.text()

    # the source's own compactions: rows of their own, opening on the newest; its card says who recorded it
    tl = w.timeline_model
    sources = tl.source_indexes()
    assert [tl.data(i, SourceRole).kind for i in sources] == ["prune", "summary"]
    assert all(tl.data(i, NodeKindRole) == "source" for i in sources) and not tl.boundary_index().isValid()  # our own boundary untouched
    assert w.timeline.currentIndex() == sources[-1]
    assert tl.data(sources[-1], Qt.ItemDataRole.DisplayRole) == "Claude Code compacted here · 48,211 tokens before · trigger manual · recorded by the source"
    assert tl.data(sources[-1], Qt.ItemDataRole.BackgroundRole).color() != tl.data(sources[-1], Qt.ItemDataRole.ForegroundRole).color()
    detail = w.detail
    assert detail.header.text() == "Recorded by Claude Code" and detail.stack.currentWidget() is detail.card
    assert "tokens before 48,211 · trigger manual" in detail.card_title.text() and "replaced #1–#13" in detail.card_title.text()
    assert detail.card_text.toPlainText().startswith("This session is being continued from a previous conversation")
    assert "QFrame#summaryCard" in detail.card.styleSheet()  # the source's colours, not our card's

    # thinking, image, error, meta and no-result marks on their rows; the detail pane says what they are
    marks = {i: tuple(tl.data(tl.index_for_message(i), MarkersRole) or ()) for i in range(1, 19)}
    assert "meta" in marks[2] and "image" in marks[4] and "thinking" in marks[5] and "error" in marks[7] and "no result" in marks[12]
    select(qtbot, w, 5)
    assert "── thinking 1/1" in detail.body.toPlainText()
    select(qtbot, w, 4)
    assert "[image] image/png" in detail.body.toPlainText() and "the bytes are not stored" in detail.body.toPlainText()
    select(qtbot, w, 7)
    assert detail.body.toPlainText().startswith("[error] the tool reported a failure")
    select(qtbot, w, 2)
    assert detail.body.toPlainText().startswith("[meta: command]")

    # the chart uses the source's recorded usage, with its compactions marked
    points = w.chart.points()
    assert points and all(p.origin == "imported" for p in points) and "recorded" in {p.compaction for p in points}
    assert w.chart.imported()
    w.show_tab("pressure")
    w.chart.grab()


def test_dropping_files_imports_them_and_a_bad_file_is_an_error_in_words(qtbot: Any, make_window: Any, fake: FakeService, tmp_path: Path) -> None:
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    good = tmp_path / "session-one.jsonl"
    good.write_text('{"type": "user"}\n', encoding="utf-8")
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n", encoding="utf-8")
    fake.import_gate = threading.Event()  # a slow import: its progress shows meanwhile
    assert drop(w, [good, bad]) == (True, True)
    qtbot.waitUntil(lambda: w.statusBar().currentMessage() == "Importing session-one.jsonl (1 of 2)…", timeout=5000)
    assert w.busy.isVisible() and not w.import_action.isEnabled() and w.timeline.isEnabled()  # the window stays usable
    fake.import_gate.set()
    qtbot.waitUntil(lambda: w.idle and w.importer.dialog is not None, timeout=5000)
    assert not w.busy.isVisible() and w.import_action.isEnabled()
    assert [args for name, args in fake.calls if name == "import_file"] == [(str(good),), (str(bad),)]
    result = w.importer.dialog
    assert result.rows() == [["claude-code:session-one", "Claude Code", "4", "1", "1", "1"]]
    assert "✗ notes.txt: import_format: " in result.notes.toPlainText() and "not a claude-code session" in result.notes.toPlainText()
    assert "1 file could not be imported" in result.heading.text()
    assert "claude-code:session-one" in w.thread_model.keys()  # the list was read again
    result.open_button.click()
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == "claude-code:session-one", timeout=5000)
    assert [w.timeline_model.data(i, SourceRole).trigger for i in w.timeline_model.source_indexes()] == ["auto"]


def test_a_drop_of_something_that_is_no_file_is_refused(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    mime = QMimeData()
    mime.setText("not a file")
    enter = QDragEnterEvent(window.rect().center(), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    assert not enter.isAccepted() and not fake.called("import_file")


def test_the_result_of_a_re_import_says_nothing_new(qtbot: Any, real: MainWindow) -> None:
    w = real
    run(qtbot, w, w.import_files([str(SESSION)]), timeout=20_000)
    w.importer.dialog.close()
    outcome = run(qtbot, w, w.import_files([str(SESSION)]), timeout=20_000)
    assert sum(r.messages for r in outcome.reports) == 0 and sum(r.already_stored for r in outcome.reports) == 23
    assert "0 new messages · 23 already stored" in w.importer.dialog.heading.text()
    w.importer.dialog.close()
