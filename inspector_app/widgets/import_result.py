"""The result of an import: the database the sessions went into, one row per session written (thread, format, messages, tool calls,
compactions, warnings), the warnings and the files that could not be read, in words, and a button
that opens the imported thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..logic.timeline.pages import source_name
from .trees import top_level_items

COLUMNS: tuple[str, ...] = ("Thread", "Format", "Messages", "Tool calls", "Compactions", "Warnings")


@dataclass(frozen=True)
class ImportFailure:
    """A file that could not be imported: its path and why, in words."""

    path: str
    code: str
    message: str


@dataclass(frozen=True)
class ImportOutcome:
    """What one import of several files did: the reports of the sessions written
    (``engine.service.ImportReport``) and the files that failed."""

    reports: tuple[Any, ...] = ()
    failures: tuple[ImportFailure, ...] = field(default_factory=tuple)
    #: the database the sessions went into, in words ("My sessions (~/…/sessions.db)"); "" when not known
    database: str = ""

    def summary(self) -> str:
        """One line: how many sessions and messages, how many files failed."""
        sessions = len(self.reports)
        messages = sum(r.messages for r in self.reports)
        again = sum(r.already_stored for r in self.reports)
        parts = [f"{sessions} session{'s' if sessions != 1 else ''} imported", f"{messages:,} new message{'s' if messages != 1 else ''}"]
        if again:
            parts.append(f"{again:,} already stored")
        compactions = sum(r.compactions for r in self.reports)
        if compactions:
            parts.append(f"{compactions} recorded compaction{'s' if compactions != 1 else ''}")
        if self.failures:
            parts.append(f"{len(self.failures)} file{'s' if len(self.failures) != 1 else ''} could not be imported")
        return " · ".join(parts)

    def details(self) -> str:
        """The warnings of every session and the failures, one per line."""
        lines: list[str] = []
        for f in self.failures:
            lines.append(f"✗ {Path(f.path).name}: {f.code}: {f.message}")
        for r in self.reports:
            if r.warnings or r.repairs or r.skipped:
                lines.append(f"{r.thread}:")
            name = Path(r.source).name  # the warnings name the file: its name is enough here (the row's tooltip has the path)
            lines += [f"  ⚠ {w.replace(r.source, name) if r.source else w}" for w in r.warnings]
            if r.repairs:
                lines.append("  repaired: " + ", ".join(f"{k} × {v}" for k, v in sorted(r.repairs.items())))
            if r.skipped:
                lines.append("  skipped: " + ", ".join(f"{k} × {v}" for k, v in sorted(r.skipped.items())))
        return "\n".join(lines) or "No warnings."


def report_row(report: Any) -> list[str]:
    """The cells of one session's row."""
    thread = f"↳ …/{report.thread.rsplit('/', 1)[-1]}" if report.parent_thread else report.thread
    return [thread, source_name(report.format), f"{report.messages:,}", f"{report.tool_calls:,}", f"{report.compactions:,}", str(len(report.warnings))]


class ImportResultDialog(QDialog):
    """Non-modal: :attr:`openThread` is emitted with the key of the chosen session."""

    openThread = Signal(str)

    def __init__(self, outcome: ImportOutcome, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("importResult")
        self.setWindowTitle("Import result")
        self.outcome = outcome
        self.heading = QLabel(outcome.summary())
        self.heading.setObjectName("sectionTitle")
        self.heading.setWordWrap(True)
        self.database = QLabel(f"Into {outcome.database}" if outcome.database else "")
        self.database.setObjectName("importDatabase")
        self.database.setWordWrap(True)
        self.database.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.database.setVisible(bool(outcome.database))
        self.table = QTreeWidget()
        self.table.setObjectName("importSessions")
        self.table.setColumnCount(len(COLUMNS))
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.setRootIsDecorated(False)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # keys end in what tells them apart
        for report in outcome.reports:
            item = QTreeWidgetItem(report_row(report))
            item.setData(0, Qt.ItemDataRole.UserRole, report.thread)
            item.setToolTip(0, f"{report.thread}\nfrom {report.source}")
            for col in range(2, len(COLUMNS)):
                item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.addTopLevelItem(item)
        header = self.table.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        first = self.table.topLevelItem(0)
        if outcome.reports and first is not None:
            self.table.setCurrentItem(first)
        self.notes = QPlainTextEdit(outcome.details())
        self.notes.setObjectName("importNotes")
        self.notes.setReadOnly(True)
        self.notes.setMaximumHeight(170)
        buttons = QDialogButtonBox()
        self.open_button = QPushButton("Open thread")
        self.open_button.setObjectName("openImported")
        self.open_button.setEnabled(bool(outcome.reports))
        self.open_button.setDefault(True)
        buttons.addButton(self.open_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self.open_button.clicked.connect(self._open)
        self.table.itemDoubleClicked.connect(lambda _item, _col: self._open())
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(self.database)
        layout.addWidget(self.table, 1)
        notes_title = QLabel("Warnings and errors")
        notes_title.setObjectName("muted")
        layout.addWidget(notes_title)
        layout.addWidget(self.notes)
        layout.addWidget(buttons)
        self.resize(860, 440)

    def chosen(self) -> str | None:
        item = self.table.currentItem()
        return item.data(0, Qt.ItemDataRole.UserRole) if item is not None else None

    def rows(self) -> list[list[str]]:
        """The table's cells, row by row (tests, tools)."""
        return [[item.text(c) for c in range(len(COLUMNS))] for item in top_level_items(self.table)]

    def _open(self) -> None:
        key = self.chosen()
        if key:
            self.openThread.emit(key)
        self.accept()


def outcome_of(reports: Sequence[Any], failures: Sequence[ImportFailure]) -> ImportOutcome:
    return ImportOutcome(tuple(reports), tuple(failures))
