"""File → Import… and files dropped on the window: transcripts imported off the GUI thread (one
file after the other, the busy indicator and the file's name showing), then the thread list is read
again and the result dialog says what was written, with a button that opens the imported thread.

Where they go: into the open database, unless that is the demo; then "Import into: [My sessions ▾]"
asks (:class:`~inspector_app.widgets.import_target.ImportTargetDialog`, the last choice
preselected and remembered). With no database open (the first-launch welcome) they go to the
remembered target, by default My sessions (``sessions.db`` in the user's data directory, created on
first import). The window then shows the database they went into. The file dialog opens in the
folder of the last file chosen, else the home folder."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from PySide6.QtCore import QSettings, Qt, QUrl
from PySide6.QtWidgets import QFileDialog

from ..layout import InspectorLayout
from ..logic.state import error_code, error_text
from ..logic.tasks import TaskSet
from ..logic.window import Window
from ..preferences import (
    TARGET_OTHER,
    database_name,
    import_target,
    is_demo,
    remember_directory,
    remember_import_target,
    same_database,
    sessions_database,
    start_directory,
)
from ..service_api import ImportsAPI
from ..service_client import FacetClient
from ..widgets.import_result import ImportFailure, ImportOutcome, ImportResultDialog
from ..widgets.import_target import ImportTargetDialog

FILE_FILTER = "Transcripts (*.jsonl *.json *.traj);;All files (*)"
#: ``progress(done, total, name)`` of an import of several files
Progress = Callable[[int, int, str], None]


def dropped_paths(urls: Sequence[QUrl]) -> list[str]:
    """The local files among dropped ``urls`` (anything else is ignored)."""
    return [u.toLocalFile() for u in urls if u.isLocalFile() and u.toLocalFile()]


class ImportController:
    """Runs imports as window-wide tasks; :attr:`dialog` is the last result dialog (None once closed)."""

    def __init__(
        self,
        ui: InspectorLayout,
        client: FacetClient,
        tasks: TaskSet,
        *,
        window: Window,
        settings: QSettings,
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.window = window
        self._settings = settings
        self.importing = False
        self.file_dialog: QFileDialog | None = None
        self.target_dialog: ImportTargetDialog | None = None
        self.dialog: ImportResultDialog | None = None
        ui.import_action.triggered.connect(self.ask)

    def ask(self) -> QFileDialog:
        """The file dialog (non-blocking: the loop keeps running) in the last folder used, else the
        home folder; the chosen files are imported (:meth:`start`)."""
        dialog = QFileDialog(self.ui, "Import transcripts", start_directory(self._settings), FILE_FILTER)
        dialog.setObjectName("importFileDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.filesSelected.connect(self._chosen)
        dialog.finished.connect(lambda _r: setattr(self, "file_dialog", None))
        self.file_dialog = dialog
        dialog.open()
        return dialog

    def _chosen(self, files: Sequence[str]) -> None:
        if files:
            remember_directory(self._settings, files[0])
        self.start(list(files))

    def default_target(self) -> str:
        """Where imports go when nothing is open: the remembered other database, else My sessions."""
        kind, url = import_target(self._settings)
        return url if kind == TARGET_OTHER and url else sessions_database()

    def start(self, paths: Sequence[str], *, progress: Progress | None = None) -> None:
        """Import ``paths`` (chosen or dropped): into the open database; on the demo, once the
        user said where (:meth:`ask_target`); with nothing open, into :meth:`default_target`.
        ``progress(done, total, name)``: see :meth:`import_paths` (the sessions panel's bar)."""
        if not paths:
            return
        current = self.window.database
        if current is None:
            self.tasks.spawn(self.import_paths(paths, into=self.default_target(), progress=progress), "import")
        elif is_demo(current):
            self.ask_target(paths, progress=progress)
        else:
            self.tasks.spawn(self.import_paths(paths, progress=progress), "import")

    def ask_target(self, paths: Sequence[str], *, progress: Progress | None = None) -> ImportTargetDialog:
        """"Import into: [My sessions ▾ | this database | choose…]" (non-blocking); the choice is
        remembered, then the files are imported there."""
        if self.target_dialog is not None:
            self.target_dialog.close()
        dialog = ImportTargetDialog(len(paths), sessions_database(), remembered=import_target(self._settings),
                                    start_dir=start_directory(self._settings), parent=self.ui)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        files = list(paths)

        def accepted() -> None:
            kind, url = dialog.target()
            remember_import_target(self._settings, kind, url)
            if kind == TARGET_OTHER and url:
                remember_directory(self._settings, url)
            self.tasks.spawn(self.import_paths(files, into=url, progress=progress), "import")

        dialog.accepted.connect(accepted)
        dialog.finished.connect(lambda _r: setattr(self, "target_dialog", None))
        self.target_dialog = dialog
        dialog.open()
        return dialog

    async def import_paths(self, paths: Sequence[str], *, into: str | None = None, progress: Progress | None = None) -> ImportOutcome:
        """Import ``paths`` one by one; a file that cannot be read as its format is listed as a
        failure (the others are still imported). Then the list is read again and the result shown.

        ``into``: the database to import into (opened first, created when it is a new SQLite
        file, and then shown); None: the open one. ``progress(done, total, name)`` is called before
        each file and with ``done == total`` at the end."""
        ui, bar = self.ui, self.ui.statusBar()
        reports: list[object] = []
        failures: list[ImportFailure] = []
        switched = into is not None and not same_database(into, self.window.database)
        if switched:
            assert into is not None
            if not await self.window.open_database(into, create=True):
                outcome = ImportOutcome((), tuple(ImportFailure(p, "database_unavailable", f"not imported: {into} could not be opened (the banner says why)") for p in paths))
                self.show_result(outcome)
                return outcome
        self.importing = True
        tip = ui.import_action.toolTip()
        ui.import_action.setEnabled(False)
        ui.import_action.setToolTip("An import is running: wait for its result")
        ui.import_action.setStatusTip(ui.import_action.toolTip())
        ui.busy.show()
        try:
            for i, path in enumerate(paths, 1):
                name = Path(path).name
                what = f"Importing {name}" + (f" ({i} of {len(paths)})" if len(paths) > 1 else "") + "…"
                bar.showMessage(what)
                ui.busy.setToolTip(what)
                if progress is not None:
                    progress(i - 1, len(paths), name)
                try:
                    reports += await self.client.call(ImportsAPI.import_file, path)
                except Exception as exc:  # noqa: BLE001 - listed in the result, the other files go on
                    failures.append(ImportFailure(path, error_code(exc), error_text(exc)))
        finally:
            self.importing = False
            ui.import_action.setEnabled(True)
            ui.import_action.setToolTip(tip)
            ui.import_action.setStatusTip("")
            ui.busy.hide()
            ui.busy.setToolTip("")
            if progress is not None:
                progress(len(paths), len(paths), "")
        outcome = ImportOutcome(tuple(reports), tuple(failures), database_name(self.window.database))
        bar.showMessage(outcome.summary())
        if reports:  # the list again; the open thread stays open, else (or in the database just opened) the first session imported
            first = reports[0].thread  # type: ignore[attr-defined]
            await self.window.reload_threads(first if switched else (self.window.current_key() or first))
        self.show_result(outcome)
        return outcome

    def show_result(self, outcome: ImportOutcome) -> ImportResultDialog:
        if self.dialog is not None:
            self.dialog.close()
        dialog = ImportResultDialog(outcome, self.ui)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.openThread.connect(lambda key: self.tasks.spawn(self.window.select_thread(key), "open imported thread"))
        dialog.finished.connect(lambda _r: setattr(self, "dialog", None))
        self.dialog = dialog
        dialog.open()
        return dialog
