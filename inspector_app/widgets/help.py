"""Help → Keyboard shortcuts (read from the window's own actions and shortcuts, so the list cannot
go stale) and Help → About (the version from the installed package's metadata)."""

from __future__ import annotations

import platform
from importlib import metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import QObject, QSettings, Qt, qVersion
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QAbstractItemView, QDialog, QDialogButtonBox, QHeaderView, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from .trees import top_level_items

DISTRIBUTION = "compaction-inspector"


def version() -> str:
    """The installed package's version (its metadata), or a note that it is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (the package is not installed)"


def _label(text: str) -> str:
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").rstrip(".").strip()


def shortcuts(window: QObject) -> list[tuple[str, str]]:
    """``(what, keys)`` for every action and shortcut of ``window`` that has keys, in menu order
    where there is one: read from the objects themselves (their text, tooltip or what's-this)."""
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for obj in window.findChildren(QObject):
        if isinstance(obj, QAction):
            keys = obj.shortcuts()
            what = _label(obj.text()) or obj.toolTip()
        elif isinstance(obj, QShortcut):
            keys = obj.keys()
            what = obj.whatsThis() or obj.objectName()
        else:
            continue
        text = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in keys if not k.isEmpty())
        if not text or not what or (what, text) in seen:
            continue
        seen.add((what, text))
        out.append((what, text))
    return out


class ShortcutsDialog(QDialog):
    """Every key of the window; opened with ``open()``."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard shortcuts")
        self.table = QTreeWidget()
        self.table.setObjectName("shortcutsTable")
        self.table.setHeaderLabels(["Action", "Keys"])
        self.table.setRootIsDecorated(False)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        for what, keys in shortcuts(window):
            self.table.addTopLevelItem(QTreeWidgetItem([what, keys]))
        self.table.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.table.header().setStretchLastSection(False)
        note = QLabel("In the timeline: Home / End jump to the first / newest messages, Enter opens a row; "
                      "in the search box, Enter finds the next match and Shift+Enter the previous one.")
        note.setObjectName("muted")
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.resize(460, 420)

    def rows(self) -> list[tuple[str, str]]:
        return [(item.text(0), item.text(1)) for item in top_level_items(self.table)]


class AboutDialog(QDialog):
    """The version (package metadata), the Qt and Python versions, where data and settings live."""

    def __init__(self, window: QWidget, *, data_dir: str, settings: QSettings) -> None:
        super().__init__(window)
        self.setObjectName("aboutDialog")
        self.setWindowTitle("About the Compaction Inspector")
        self.version = version()
        text = QLabel(
            f"<h3>Compaction Inspector {self.version}</h3>"
            "<p>Shows how conversations with LLM agents were compacted: what was pruned, summarized, kept and "
            "dropped, and the pressure against the model's context window.</p>"
            f"<p>Qt {qVersion()} · PySide6 {pyside_version} · Python {platform.python_version()}</p>"
            f"<p>Data (the demo, My sessions): {data_dir}<br>Settings: {settings.fileName()}</p>"
        )
        text.setObjectName("aboutText")
        text.setWordWrap(True)
        text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(text)
        layout.addWidget(buttons)
        self.setMinimumWidth(440)
