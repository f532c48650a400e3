"""File → Sessions on this machine…: the sessions each supported tool keeps in its default folders
(and in the folders the user added), one row each (tool, project, size, last activity, imported?),
with Import selected, Follow all, Add folder… and Refresh. The dialog only shows and asks; what it
does is :class:`inspector_app.controllers.sessions.SessionsController`'s."""

from __future__ import annotations

import functools
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.core.figures import byte_size

from ..logic.timeline.pages import source_name
from .trees import top_level_items

COLUMNS: tuple[str, ...] = ("Tool", "Project", "Size", "Last activity", "Imported")
COL_TOOL, COL_PROJECT, COL_SIZE, COL_WHEN, COL_IMPORTED = range(len(COLUMNS))
PathRole = Qt.ItemDataRole.UserRole
SortRole = Qt.ItemDataRole.UserRole + 1


def tool_name(fmt: str) -> str:
    """``claude-code`` → ``Claude Code`` (the names the thread list uses, without "the … log")."""
    name = source_name(fmt)
    return name[4:] if name.startswith("the ") else name


def imported_text(session: Any) -> str:
    if not session.imported:
        return "no"
    return "yes, changed since" if session.changed_since_import else "yes"


def when_text(moment: datetime, now: datetime | None = None) -> str:
    """Last activity in local time: ``today 14:05``, ``yesterday 09:12``, else ``2026-11-28 09:04``."""
    local = moment.astimezone()
    today = (now or datetime.now().astimezone()).date()
    days = (today - local.date()).days
    if days == 0:
        return f"today {local:%H:%M}"
    if days == 1:
        return f"yesterday {local:%H:%M}"
    return f"{local:%Y-%m-%d %H:%M}"


class _Row(QTreeWidgetItem):
    def __lt__(self, other: QTreeWidgetItem) -> bool:  # sort by the numbers, not the words
        col = self.treeWidget().sortColumn() if self.treeWidget() is not None else 0
        a, b = self.data(col, SortRole), other.data(col, SortRole)
        if a is not None and b is not None:
            return a < b
        return super().__lt__(other)


class SessionsDialog(QDialog):
    """Non-modal. Emits :attr:`importRequested` (the chosen paths), :attr:`followToggled`,
    :attr:`addFolderRequested`, :attr:`removeFolderRequested` (the folder), :attr:`refreshRequested` and :attr:`openThread` (a double-click on
    an imported session)."""

    importRequested = Signal(list)
    followToggled = Signal(bool)
    addFolderRequested = Signal()
    removeFolderRequested = Signal(str)
    refreshRequested = Signal()
    openThread = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sessionsPanel")
        self.setWindowTitle("Sessions on this machine")
        self.sessions: list[Any] = []
        self.heading = QLabel("Looking for sessions…")
        self.heading.setObjectName("sectionTitle")
        self.where = QLabel()
        self.where.setObjectName("muted")
        self.where.setWordWrap(True)
        self.table = QTreeWidget()
        self.table.setObjectName("sessionsTable")
        self.table.setColumnCount(len(COLUMNS))
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.setRootIsDecorated(False)
        self.table.setAlternatingRowColors(True)
        self.table.setUniformRowHeights(True)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(COL_WHEN, Qt.SortOrder.DescendingOrder)
        header = self.table.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(COL_PROJECT, QHeaderView.ResizeMode.Stretch)
        for col in (COL_TOOL, COL_SIZE, COL_WHEN, COL_IMPORTED):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.itemDoubleClicked.connect(self._double_clicked)
        self.progress = QProgressBar()
        self.progress.setObjectName("sessionsProgress")
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.status = QLabel()
        self.status.setObjectName("sessionsStatus")
        self.status.setWordWrap(True)
        self.import_button = QPushButton("Import selected")
        self.import_button.setObjectName("importSelected")
        self.import_button.setEnabled(False)
        self.import_button.setToolTip("Select sessions in the list first")
        self.import_button.clicked.connect(lambda: self.importRequested.emit(self.selected_paths()))
        self.follow_button = QPushButton("Follow all")
        self.follow_button.setObjectName("followAll")
        self.follow_button.setCheckable(True)
        self.follow_button.setToolTip("Import new and growing sessions in these folders as they are written")
        self.follow_button.toggled.connect(self.followToggled.emit)
        self.add_button = QPushButton("Add folder…")
        self.add_button.setObjectName("addSessionsFolder")
        self.add_button.setToolTip("Also look in a folder of your own (searched by content, remembered)")
        self.add_button.clicked.connect(self.addFolderRequested.emit)
        self.remove_button = QPushButton("Remove folder")
        self.remove_button.setObjectName("removeSessionsFolder")
        self.remove_button.setToolTip("Stop looking in a folder you added")
        self.remove_menu = QMenu(self.remove_button)
        self.remove_menu.setObjectName("removeSessionsFolderMenu")
        self.remove_button.setMenu(self.remove_menu)
        self.remove_button.hide()  # until a folder was added
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setObjectName("refreshSessions")
        self.refresh_button.clicked.connect(self.refreshRequested.emit)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QHBoxLayout()
        for b in (self.import_button, self.follow_button, self.add_button, self.remove_button, self.refresh_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(self.where)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        self.resize(900, 480)

    # -- what the controller sets
    def set_sessions(self, sessions: Sequence[Any], *, database: str = "", folders: Sequence[str] = ()) -> None:
        """The list (keeps the selection by path)."""
        chosen = set(self.selected_paths())
        self.sessions = list(sessions)
        self.table.setSortingEnabled(False)
        self.table.clear()
        for s in self.sessions:
            project = Path(s.project).name if s.project else "—"
            row = _Row([tool_name(s.tool), project, byte_size(s.size), when_text(s.modified), imported_text(s)])
            row.setData(COL_TOOL, PathRole, s.path)
            row.setData(COL_SIZE, SortRole, s.size)
            row.setData(COL_WHEN, SortRole, s.modified.timestamp())
            row.setData(COL_IMPORTED, SortRole, (s.imported, s.changed_since_import))
            tip = f"{s.path}\nfound in {s.found_by}" + (f"\nproject {s.project}" if s.project else "")
            if s.threads:
                tip += "\nimported as " + ", ".join(s.threads)
            for col in range(len(COLUMNS)):
                row.setToolTip(col, tip)
            row.setTextAlignment(COL_SIZE, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.addTopLevelItem(row)
            if s.path in chosen:
                row.setSelected(True)
        self.table.setSortingEnabled(True)
        n, done = len(self.sessions), sum(1 for s in self.sessions if s.imported)
        self.heading.setText(f"{n} session{'s' if n != 1 else ''} on this machine · {done} imported" if n else "No sessions found")
        self.remove_menu.clear()
        for folder in folders:
            self.remove_menu.addAction(folder, functools.partial(self.removeFolderRequested.emit, folder))
        self.remove_button.setVisible(bool(folders))
        where = "Each tool's default folders" + (" and " + ", ".join(folders) if folders else "")
        self.where.setText(where + (f" · imports go to {database}" if database else ""))
        self._selection_changed()

    def set_progress(self, done: int, total: int, name: str = "") -> None:
        """``Importing name (done of total)…``; hidden again when done == total."""
        if total <= 0 or done >= total:
            self.progress.hide()
            return
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress.setFormat(f"Importing {name} ({done + 1} of {total})…" if name else f"{done} of {total}")
        self.progress.show()

    def set_following(self, on: bool, text: str = "") -> None:
        """The toggle's state (without emitting) and what it says."""
        self.follow_button.blockSignals(True)
        self.follow_button.setChecked(on)
        self.follow_button.blockSignals(False)
        self.follow_button.setText("Following all" if on else "Follow all")
        if text:
            self.status.setText(text)

    # -- reading it
    def selected_paths(self) -> list[str]:
        return [item.data(COL_TOOL, PathRole) for item in self.table.selectedItems()]

    def rows(self) -> list[list[str]]:
        """The cells, row by row in the order shown (tests, tools)."""
        return [[item.text(c) for c in range(len(COLUMNS))] for item in top_level_items(self.table)]

    def select_paths(self, paths: Sequence[str]) -> None:
        wanted = set(paths)
        self.table.clearSelection()
        for item in top_level_items(self.table):
            if item.data(COL_TOOL, PathRole) in wanted:
                item.setSelected(True)

    def _selection_changed(self) -> None:
        n = len(self.table.selectedItems())
        self.import_button.setEnabled(n > 0)
        self.import_button.setText(f"Import {n} selected" if n > 1 else "Import selected")
        self.import_button.setToolTip("Import the chosen sessions (again: what was added since)" if n else "Select sessions in the list first")

    def _double_clicked(self, item: QTreeWidgetItem, _col: int) -> None:
        path = item.data(COL_TOOL, PathRole)
        s = next((x for x in self.sessions if x.path == path), None)
        if s is not None and s.threads:
            self.openThread.emit(s.threads[0])
        elif s is not None:
            self.importRequested.emit([s.path])
