"""The Audit tab (issue 23): who compacted, reverted, pinned or changed what, when and why.

Filters by thread (the open one, or all), operator and action; rows oldest first, paged by id
(More loads the next page). The panel only shows; :class:`inspector_app.panels.audit.controller`
reads the rows through the service.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QHeaderView, QLabel, QPushButton, QTreeView, QVBoxLayout, QWidget

from .model import AuditModel, state_text

ACTIONS = ("compact", "revert", "redo", "pin", "unpin", "instructions", "policy")
ALL = "All"


class AuditPanel(QWidget):
    """Filters, the list and a More button."""

    #: the filters changed: read the list again
    filtersChanged = Signal()
    #: More: read the next page
    moreRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("auditPanel")
        self.this_thread = QCheckBox("This thread only")
        self.this_thread.setObjectName("auditThisThread")
        self.this_thread.setChecked(True)
        self.operator = QComboBox()
        self.operator.setObjectName("auditOperator")
        self.operator.addItem(ALL)
        self.action = QComboBox()
        self.action.setObjectName("auditAction")
        self.action.addItems([ALL, *ACTIONS])
        filters = QHBoxLayout()
        filters.addWidget(self.this_thread)
        filters.addWidget(QLabel("Operator"))
        filters.addWidget(self.operator, 1)
        filters.addWidget(QLabel("Action"))
        filters.addWidget(self.action, 1)
        self.model = AuditModel(self)
        self.view = QTreeView()
        self.view.setObjectName("auditList")
        self.view.setModel(self.model)
        self.view.setRootIsDecorated(False)
        self.view.setUniformRowHeights(True)
        self.view.setAllColumnsShowFocus(True)
        self.view.setAlternatingRowColors(True)
        head = self.view.header()
        head.setStretchLastSection(False)
        for col in range(4):
            head.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        head.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)  # the reason takes the room
        self.view.setColumnHidden(5, True)  # before → after: in full under the list, for the selected row
        #: the selected action in full (else the newest): who, when, why, the state before and after
        self.detail = QLabel("")
        self.detail.setObjectName("auditDetail")
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status = QLabel("")
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)
        self.more = QPushButton("More")
        self.more.setObjectName("auditMore")
        self.more.hide()
        bottom = QHBoxLayout()
        bottom.addWidget(self.status, 1)
        bottom.addWidget(self.more)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addLayout(filters)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.detail)
        layout.addLayout(bottom)
        self.this_thread.toggled.connect(lambda _on: self.filtersChanged.emit())
        self.operator.currentIndexChanged.connect(lambda _i: self.filtersChanged.emit())
        self.action.currentIndexChanged.connect(lambda _i: self.filtersChanged.emit())
        self.more.clicked.connect(self.moreRequested.emit)
        self.view.selectionModel().currentRowChanged.connect(lambda _cur, _prev: self.show_detail())
        self.model.modelReset.connect(self.show_detail)
        self.model.rowsInserted.connect(lambda *_a: self.show_detail())

    def show_detail(self) -> None:
        """The selected row in full (the newest when none is selected)."""
        rows = self.model.entries()
        index = self.view.currentIndex()
        entry = rows[index.row()] if index.isValid() and index.row() < len(rows) else (rows[-1] if rows else None)
        if entry is None:
            self.detail.setText("")
            return
        who = f"{entry.operator} ({entry.display_name})" if entry.display_name else entry.operator
        lines = [
            f"#{entry.id} {entry.action} of {entry.thread or '(deleted thread)'} by {who}, {entry.at.astimezone():%Y-%m-%d %H:%M:%S}",
            f"Reason: {entry.reason}" if entry.reason else "No reason given",
            f"Before: {state_text(entry.before) or '—'}",
            f"After: {state_text(entry.after) or '—'}",
        ]
        self.detail.setText("\n".join(lines))

    def set_operators(self, names: list[str]) -> None:
        """The operator filter's choices (the current one kept when it is still there)."""
        current = self.operator.currentText()
        self.operator.blockSignals(True)
        self.operator.clear()
        self.operator.addItems([ALL, *names])
        index = self.operator.findText(current)
        self.operator.setCurrentIndex(max(0, index))
        self.operator.blockSignals(False)

    def chosen_operator(self) -> str | None:
        text = self.operator.currentText()
        return None if text in ("", ALL) else text

    def chosen_actions(self) -> list[str] | None:
        text = self.action.currentText()
        return None if text in ("", ALL) else [text]
