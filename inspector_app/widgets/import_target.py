"""Where imported sessions go while the demo database is open: "Import into: [My sessions ▾]".

The demo database is the app's sample; sessions imported into it would mix with the demo threads
(and with its toy context window). So File → Import… (and a drop) on the demo asks, the choice
preselected from the last time: My sessions (the default: ``sessions.db`` in the user's data
directory), this database (the demo), or another SQLite file chosen here.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QLabel, QVBoxLayout, QWidget

from ..preferences import TARGET_HERE, TARGET_OTHER, TARGET_SESSIONS

CHOOSE = "choose"


def _shown(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home):] if path.startswith(home + "/") else path


class ImportTargetDialog(QDialog):
    """Opened with ``open()``; :meth:`target` is ``(kind, url)`` once accepted."""

    def __init__(self, files: int, sessions_url: str, *, remembered: tuple[str, str | None], start_dir: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("importTargetDialog")
        self.setWindowTitle("Import into")
        self._sessions = sessions_url
        self._other: str | None = remembered[1] if remembered[0] == TARGET_OTHER else None
        self._start_dir = start_dir
        self.file_dialog: QFileDialog | None = None
        what = "this session" if files == 1 else f"these {files} files"
        intro = QLabel(f"The open database is the demo. Where should {what} go?")
        intro.setWordWrap(True)
        self.combo = QComboBox()
        self.combo.setObjectName("importTarget")
        self.combo.addItem(f"My sessions (default): {_shown(sessions_url)}", TARGET_SESSIONS)
        self.combo.addItem("This database (the demo)", TARGET_HERE)
        if self._other:
            self.combo.addItem(f"Another database: {_shown(self._other)}", TARGET_OTHER)
        self.combo.addItem("Choose a SQLite file…", CHOOSE)
        index = self.combo.findData(remembered[0])
        self.combo.setCurrentIndex(max(index, 0))
        self.combo.activated.connect(self._activated)
        note = QLabel("Your choice is remembered. The window then shows the database the sessions went into.")
        note.setObjectName("muted")
        note.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Import into:", self.combo)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Import")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(self.buttons)
        self.setMinimumWidth(520)

    def target(self) -> tuple[str, str | None]:
        """``(TARGET_*, url)``: the URL of My sessions or of the chosen file; None for the demo."""
        kind = self.combo.currentData()
        if kind == TARGET_SESSIONS:
            return TARGET_SESSIONS, self._sessions
        if kind == TARGET_OTHER and self._other:
            return TARGET_OTHER, self._other
        return TARGET_HERE, None

    def choose_file(self, path: str) -> None:
        """Use ``path`` (a SQLite file, created on import if missing) as the target."""
        self._other = path
        at = self.combo.findData(TARGET_OTHER)
        if at < 0:
            at = self.combo.count() - 1
            self.combo.insertItem(at, "", TARGET_OTHER)
        self.combo.setItemText(at, f"Another database: {_shown(path)}")
        self.combo.setCurrentIndex(at)

    def _activated(self, index: int) -> None:
        if self.combo.itemData(index) != CHOOSE:
            return
        self.combo.setCurrentIndex(0)  # until a file is chosen
        dialog = QFileDialog(self, "Import into a SQLite database", self._start_dir, "SQLite databases (*.db *.sqlite *.sqlite3);;All files (*)")
        dialog.setObjectName("importTargetFileDialog")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)  # a new file is fine: it is created
        dialog.setOption(QFileDialog.Option.DontConfirmOverwrite, True)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(self.choose_file)
        dialog.finished.connect(lambda _r: setattr(self, "file_dialog", None))
        self.file_dialog = dialog
        dialog.open()
