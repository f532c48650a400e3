"""File → Import… and files dropped on the window: transcripts imported off the GUI thread (one
file after the other, the busy indicator and the file's name showing), then the thread list is read
again and the result dialog says what was written, with a button that opens the imported thread."""

from __future__ import annotations

from pathlib import Path
from typing import Awaitable, Callable, Sequence

from PySide6.QtCore import QUrl, Qt
from PySide6.QtWidgets import QFileDialog

from ..layout import InspectorLayout
from ..service_api import InspectorService
from ..service_client import ServiceClient
from ..widgets.import_result import ImportFailure, ImportOutcome, ImportResultDialog
from .base import error_code, error_text
from .tasks import TaskSet

FILE_FILTER = "Transcripts (*.jsonl *.json *.traj);;All files (*)"


def dropped_paths(urls: Sequence[QUrl]) -> list[str]:
    """The local files among dropped ``urls`` (anything else is ignored)."""
    return [u.toLocalFile() for u in urls if u.isLocalFile() and u.toLocalFile()]


class ImportController:
    """Runs imports as window-wide tasks; :attr:`dialog` is the last result dialog (None once closed)."""

    def __init__(
        self,
        ui: InspectorLayout,
        client: ServiceClient,
        tasks: TaskSet,
        *,
        reload_threads: Callable[[str | None], Awaitable[None]],
        current: Callable[[], str | None],
        open_thread: Callable[[str], Awaitable[None]],
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self._reload_threads = reload_threads
        self._current = current
        self._open_thread = open_thread
        self.importing = False
        self.file_dialog: QFileDialog | None = None
        self.dialog: ImportResultDialog | None = None
        ui.import_action.triggered.connect(self.ask)

    def ask(self) -> None:
        """The file dialog (non-blocking: the loop keeps running); the chosen files are imported."""
        dialog = QFileDialog(self.ui, "Import transcripts", "", FILE_FILTER)
        dialog.setObjectName("importFileDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.filesSelected.connect(lambda files: self.start(list(files)))
        dialog.finished.connect(lambda _r: setattr(self, "file_dialog", None))
        self.file_dialog = dialog
        dialog.open()

    def start(self, paths: Sequence[str]) -> None:
        if paths:
            self.tasks.spawn(self.import_paths(paths), "import")

    async def import_paths(self, paths: Sequence[str]) -> ImportOutcome:
        """Import ``paths`` one by one; a file that cannot be read as its format is listed as a
        failure (the others are still imported). Then the list is read again and the result shown."""
        ui, bar = self.ui, self.ui.statusBar()
        reports: list[object] = []
        failures: list[ImportFailure] = []
        self.importing = True
        ui.import_action.setEnabled(False)
        ui.busy.show()
        try:
            for i, path in enumerate(paths, 1):
                name = Path(path).name
                what = f"Importing {name}" + (f" ({i} of {len(paths)})" if len(paths) > 1 else "") + "…"
                bar.showMessage(what)
                ui.busy.setToolTip(what)
                try:
                    reports += await self.client.call(InspectorService.import_file, path)
                except Exception as exc:  # noqa: BLE001: listed in the result, the other files go on
                    failures.append(ImportFailure(path, error_code(exc), error_text(exc)))
        finally:
            self.importing = False
            ui.import_action.setEnabled(True)
            ui.busy.hide()
            ui.busy.setToolTip("")
        outcome = ImportOutcome(tuple(reports), tuple(failures))
        bar.showMessage(outcome.summary())
        if reports:  # the list again; the open thread stays open, else the first session imported opens
            await self._reload_threads(self._current() or reports[0].thread)  # type: ignore[attr-defined]
        self.show_result(outcome)
        return outcome

    def show_result(self, outcome: ImportOutcome) -> ImportResultDialog:
        if self.dialog is not None:
            self.dialog.close()
        dialog = ImportResultDialog(outcome, self.ui)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.openThread.connect(lambda key: self.tasks.spawn(self._open_thread(key), "open imported thread"))
        dialog.finished.connect(lambda _r: setattr(self, "dialog", None))
        self.dialog = dialog
        dialog.open()
        return dialog
