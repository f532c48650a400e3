"""File → Export compaction history…: the save dialog (Markdown or JSON), the history read and the
file written off the GUI thread, and a clear error when the file cannot be written (nothing
half-written, an older file kept)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QFileDialog

from engine.core.errors import EngineError
from inspector_app.controllers.compaction import EXPORT_FILTERS, default_export_name, export_target, write_export
from inspector_app.main_window import MainWindow
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService
from tests.gui.shoot_issue14 import INCIDENT, Incident, incident  # noqa: F401 (incident: the fixture)

pytestmark = pytest.mark.gui


# -- Qt-free --------------------------------------------------------------------------------------


def test_the_format_comes_from_the_extension_else_from_the_filter(tmp_path: Path) -> None:
    assert export_target(str(tmp_path / "h.json")) == (tmp_path / "h.json", "json")
    assert export_target(str(tmp_path / "h.MD"), "JSON (*.json)") == (tmp_path / "h.MD", "md")
    assert export_target(str(tmp_path / "h.markdown")) == (tmp_path / "h.markdown", "md")
    assert export_target(str(tmp_path / "history"), "JSON (*.json)") == (tmp_path / "history.json", "json")
    assert export_target(str(tmp_path / "history"), "Markdown (*.md)") == (tmp_path / "history.md", "md")
    assert export_target(str(tmp_path / "v1.2"), None) == (tmp_path / "v1.2.md", "md")
    assert list(EXPORT_FILTERS.values()) == ["md", "json"]
    assert default_export_name("claude-code:7c1f/0e52 x") == "claude-code_7c1f_0e52_x-compactions.md"
    assert default_export_name("acme-vat", "json") == "acme-vat-compactions.json"


def test_write_export_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.md"
    target.write_text("older export", encoding="utf-8")
    assert write_export(target, "# Compaction history · ü\n") == len("# Compaction history · ü\n".encode())
    assert target.read_text(encoding="utf-8") == "# Compaction history · ü\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"]  # no temporary file left
    with pytest.raises(IsADirectoryError):
        write_export(tmp_path, "x")
    with pytest.raises(FileNotFoundError):
        write_export(tmp_path / "missing" / "out.md", "x")


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root writes into read-only directories")
def test_write_export_into_a_read_only_directory_keeps_the_older_file(tmp_path: Path) -> None:
    target = tmp_path / "ro" / "out.md"
    target.parent.mkdir()
    target.write_text("older", encoding="utf-8")
    target.parent.chmod(0o500)
    try:
        with pytest.raises(PermissionError):
            write_export(target, "newer")
        assert target.read_text(encoding="utf-8") == "older"
    finally:
        target.parent.chmod(0o700)


# -- in the window --------------------------------------------------------------------------------


def test_the_file_menu_dialog_writes_markdown(qtbot: Any, window: MainWindow, fake: FakeService, tmp_path: Path) -> None:
    w = window
    assert w.export_action in w.file_menu.actions() and w.export_action.isEnabled()
    w.export_action.trigger()  # File → Export compaction history…
    dialog = w.compaction.export_dialog
    assert isinstance(dialog, QFileDialog) and dialog.isVisible()
    assert dialog.acceptMode() == QFileDialog.AcceptMode.AcceptSave and dialog.nameFilters() == list(EXPORT_FILTERS)
    target = tmp_path / "acme-history"
    dialog.selectFile(str(target))
    dialog.accept()
    qtbot.waitUntil(lambda: w.idle and w.compaction.exported is not None, timeout=5000)
    written = tmp_path / "acme-history.md"  # the filter's extension added
    assert w.compaction.exported == (written, "md")
    assert written.read_text(encoding="utf-8") == fake.export_history("acme-vat", "md")
    assert written.read_text(encoding="utf-8").startswith("# Compaction history of acme-vat")
    assert ("export_history", ("acme-vat", "md")) in fake.calls
    assert w.statusBar().currentMessage().startswith("Exported the compaction history of acme-vat (Markdown, ")
    assert not w.banner.isVisible()


def test_the_json_filter_writes_json(qtbot: Any, window: MainWindow, fake: FakeService, tmp_path: Path) -> None:
    w = window
    w.export_action.trigger()
    dialog = w.compaction.export_dialog
    assert dialog is not None
    dialog.selectNameFilter("JSON (*.json)")
    dialog.filterSelected.emit("JSON (*.json)")  # as a click on the filter does
    dialog.selectFile(str(tmp_path / "acme"))
    dialog.accept()
    qtbot.waitUntil(lambda: w.idle and w.compaction.exported is not None, timeout=5000)
    data = json.loads((tmp_path / "acme.json").read_text(encoding="utf-8"))
    assert data["thread"] == "acme-vat" and data["compactions"][0]["summary"].startswith("User reported invoice #4411")


def test_an_unwritable_path_is_reported_and_nothing_is_written(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    w = window
    target = tmp_path / "no-such-dir" / "out.md"
    assert run(qtbot, w, w.export_history(str(target))) is False
    assert not target.exists() and not target.parent.exists()
    assert w.banner.isVisible()
    assert w.banner.text() == f"io_error: export to {target}: No such file or directory: {target}"
    assert w.statusBar().currentMessage().startswith("Export failed: No such file or directory")
    assert w.compaction.exported is None

    w.banner.clear()
    assert run(qtbot, w, w.export_history(str(tmp_path))) is False  # a directory
    assert w.banner.text() == f"io_error: export to {tmp_path}: Is a directory: {tmp_path}"

    w.banner.clear()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    assert run(qtbot, w, w.export_history(str(blocker / "out.json"), "json")) is False  # its "directory" is a file
    assert w.banner.text() == f"io_error: export to {blocker / 'out.json'}: Not a directory: {blocker / 'out.json'}"
    assert blocker.read_text(encoding="utf-8") == "not a directory"


def test_a_history_that_cannot_be_read_is_reported(qtbot: Any, window: MainWindow, fake: FakeService, tmp_path: Path) -> None:
    w = window

    def broken(key: str, format: str = "md") -> str:
        raise EngineError(f"thread {key!r} has a compaction row that cannot be read", code="corrupt_row")

    fake.export_history = broken  # type: ignore[method-assign]
    target = tmp_path / "h.md"
    assert run(qtbot, w, w.export_history(str(target), "md")) is False
    assert not target.exists()
    assert w.banner.text() == f"corrupt_row: export to {target}: thread 'acme-vat' has a compaction row that cannot be read"


def test_export_and_what_if_need_an_open_thread(qtbot: Any, make_window: Any) -> None:
    w = make_window()
    assert not w.export_action.isEnabled() and not w.whatif_action.isEnabled() and not w.whatif_button.isEnabled()
    assert w.compaction.ask_export() is None and w.open_whatif() is None
    assert run(qtbot, w, w.export_history("/tmp/never.md")) is False


# -- the real service ----------------------------------------------------------------------------


def test_a_real_export_round_trips_to_json_and_names_the_dropped_error(qtbot: Any, window_factory: Any, incident: Incident, tmp_path: Path) -> None:
    from engine.history import load_export

    w = window_factory(lambda _url: incident.open())
    assert run(qtbot, w, w.open_database(incident.url, select=INCIDENT), timeout=20_000)
    qtbot.waitUntil(lambda: w.idle, timeout=20_000)
    assert run(qtbot, w, w.export_history(str(tmp_path / "incident.json"), "json"), timeout=20_000)
    assert run(qtbot, w, w.export_history(str(tmp_path / "incident.md"), "md"), timeout=20_000)
    svc = incident.open()
    try:
        entries = svc.reads.compaction_history(INCIDENT)
    finally:
        svc.close()
    assert load_export((tmp_path / "incident.json").read_text(encoding="utf-8")) == entries
    markdown = (tmp_path / "incident.md").read_text(encoding="utf-8")
    assert "AssertionError: 16 workers need 768 MiB" in markdown
    assert not w.banner.isVisible()
