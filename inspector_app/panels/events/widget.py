"""The Events tab (issue 24: moved out of the window's layout): every prune, summary and recovery
step recorded for the open thread, oldest first, with an empty-state note. The panel only shows;
:mod:`.controller` fills it and follows a click into the timeline."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QLabel, QSizePolicy, QTreeView, QVBoxLayout, QWidget

from .model import COL_KIND, COL_TIME, EventsModel


class EventsPanel(QWidget):
    """The hint, the empty-state note (:attr:`empty`) and the list (:attr:`view` over :attr:`model`)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = EventsModel(self)
        self.view = QTreeView()
        self.view.setObjectName("eventsView")
        self.view.setModel(self.model)
        self.view.setRootIsDecorated(False)
        self.view.setAllColumnsShowFocus(True)
        self.view.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.view.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)  # rows are 1-3 lines
        eh = self.view.header()
        eh.setStretchLastSection(True)
        eh.resizeSection(COL_TIME, 76)
        eh.resizeSection(COL_KIND, 112)
        self.empty = QLabel("No compaction events recorded for this thread.")
        self.empty.setObjectName("muted")
        el = QVBoxLayout(self)
        el.setContentsMargins(8, 8, 8, 8)
        hint = QLabel("Every prune, summary and recovery step recorded, oldest first (an imported session starts with its source's own compactions). Click one to show it in the timeline.")
        hint.setObjectName("muted")
        hint.setWordWrap(True)
        hint.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        el.addWidget(hint)
        el.addWidget(self.empty)
        el.addWidget(self.view, 1)
