"""The connect dialog with recent connections (stored in QSettings without passwords); its file
dialog opens in the last folder used, else the home folder."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ..logic.urls import strip_password
from ..preferences import remember_directory, start_directory

__all__ = ["ConnectDialog", "RecentConnections", "strip_password", "to_url"]

RECENT_KEY = "connections/recent"
MAX_RECENT = 10


def to_url(text: str) -> str:
    """What the user typed, as a database URL: a bare file path becomes a SQLite URL; nothing
    stays nothing (opening it is an error: "empty database URL")."""
    text = text.strip()
    return text if "://" in text or not text else f"sqlite:///{text}"


class RecentConnections:
    """Most recent first, passwords stripped before anything is written."""

    def __init__(self, settings: QSettings) -> None:
        self._settings = settings

    @property
    def settings(self) -> QSettings:
        return self._settings

    def urls(self) -> list[str]:
        """The saved URLs, most recent first. An entry an older version saved with a password in
        it (its ``urlsplit`` missed a raw ``/``, ``#`` or ``?`` in the password) is shown without
        it, and the file is rewritten without it at once."""
        value = self._settings.value(RECENT_KEY, [])
        if isinstance(value, str):
            value = [value]
        stored = [str(v) for v in value] if isinstance(value, list) else []
        out: list[str] = []
        for v in stored:
            safe = strip_password(v)
            if safe not in out:
                out.append(safe)
        if out != stored:
            self._settings.setValue(RECENT_KEY, out[:MAX_RECENT])
            self._settings.sync()
        return out

    def add(self, url: str) -> None:
        safe = strip_password(url)
        urls = [safe] + [u for u in self.urls() if u != safe]
        self._settings.setValue(RECENT_KEY, urls[:MAX_RECENT])
        self._settings.sync()


class ConnectDialog(QDialog):
    """Pick a SQLite file or type a PostgreSQL URL; opened with ``open()``, never ``exec()``."""

    def __init__(self, recent: RecentConnections, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = recent.settings
        self.file_dialog: QFileDialog | None = None
        self.setObjectName("connectDialog")
        self.setWindowTitle("Open database")
        self.combo = QComboBox()
        self.combo.setObjectName("connectUrl")
        self.combo.setEditable(True)
        self.combo.addItems(recent.urls())
        self.combo.setMinimumWidth(460)
        edit = self.combo.lineEdit()
        assert edit is not None  # an editable combo box has its line edit
        edit.setPlaceholderText("sqlite:///path/to/threads.db  or  postgresql+psycopg://user@host/db")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.combo, 1)
        row.addWidget(browse)
        note = QLabel("Passwords are used for this connection only; recent connections are saved without them.")
        note.setObjectName("muted")
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Database"))
        layout.addLayout(row)
        layout.addWidget(note)
        layout.addWidget(buttons)

    def url(self) -> str:
        return to_url(self.combo.currentText())

    def _browse(self) -> None:
        """The file dialog in the last folder used, else the home folder (never the working directory)."""
        dialog = QFileDialog(self, "SQLite database", start_directory(self._settings), "SQLite databases (*.db *.sqlite *.sqlite3);;All files (*)")
        dialog.setObjectName("openFileDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(self._chosen)
        dialog.finished.connect(lambda _r: setattr(self, "file_dialog", None))
        self.file_dialog = dialog
        dialog.open()

    def _chosen(self, path: str) -> None:
        remember_directory(self._settings, path)
        self.combo.setEditText(path)
