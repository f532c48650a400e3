"""The Checks tab (issue 24: moved out of the window's layout): the invariants of docs/schema.md for
the open thread, what is wrong listed, a note and Run checks. The panel only shows;
:mod:`.controller` runs the checks on a worker."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QTreeView, QVBoxLayout, QWidget

from .model import FindingsModel


class ChecksPanel(QWidget):
    """What the checks are, :attr:`note` beside :attr:`button` (Run checks), and the findings
    (:attr:`view` over :attr:`model`)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = FindingsModel(self)
        self.view = QTreeView()
        self.view.setObjectName("findingsView")
        self.view.setModel(self.model)
        self.view.setRootIsDecorated(False)
        self.view.setAllColumnsShowFocus(True)
        self.view.setWordWrap(True)
        self.view.header().setStretchLastSection(True)
        self.view.header().resizeSection(0, 150)
        self.note = QLabel("Checks run when a thread opens.")
        self.note.setObjectName("muted")
        self.note.setWordWrap(True)
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        kl = QVBoxLayout(self)
        kl.setContentsMargins(8, 8, 8, 8)
        about = QLabel("The invariants of docs/schema.md for this thread, as compaction check verifies them: counts, the boundary on a unit end, generation vs history, orphans, offload files.")
        about.setObjectName("muted")
        about.setWordWrap(True)
        about.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        kl.addWidget(about)
        row = QHBoxLayout()
        row.addWidget(self.note, 1)
        self.button = QPushButton("Run checks")
        self.button.setObjectName("runChecks")
        row.addWidget(self.button)
        kl.addLayout(row)
        kl.addWidget(self.view, 1)
