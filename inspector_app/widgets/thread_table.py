"""The thread list's view (issue 26): a table, not a tree. A QTreeView lays out every row of its
model on each reset, insert or column change (a call into the Python model per row: 270 ms for
100,000 threads); a table asks only for the rows it paints. :meth:`ThreadTable.header` is the
horizontal header, as a tree's, so the layout and the tests read both alike."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget


class ThreadTable(QTableView):
    """Rows of one line, selected whole, no grid, no row numbers."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.setCornerButtonEnabled(False)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerItem)
        rows = self.verticalHeader()
        rows.hide()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        head = self.horizontalHeader()
        head.setHighlightSections(False)
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self._fit_rows()

    def header(self) -> QHeaderView:
        """The column headings (what ``QTreeView.header`` is)."""
        return self.horizontalHeader()

    def _fit_rows(self) -> None:
        height = QFontMetrics(self.font()).height() + 5  # about a tree row: the text and the item padding
        if self.verticalHeader().defaultSectionSize() != height:
            self.verticalHeader().setMinimumSectionSize(height)
            self.verticalHeader().setDefaultSectionSize(height)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt name)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fit_rows()
