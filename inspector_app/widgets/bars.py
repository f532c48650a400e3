"""Inline bars: the error banner (the one place errors land) and the non-blocking confirm bar."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QFormLayout, QFrame, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSizePolicy, QToolButton, QVBoxLayout, QWidget

from .. import theme


class ErrorBanner(QFrame):
    """A dismissible banner: ``code: message``. Hidden while there is no error."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("errorBanner")
        self.icon = QLabel()
        self.label = QLabel()
        self.label.setObjectName("errorBannerText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # long paths wrap or clip
        self.close_button = QToolButton()
        self.close_button.setObjectName("errorBannerClose")
        self.close_button.setAutoRaise(True)
        self.close_button.setToolTip("Dismiss")
        self.close_button.clicked.connect(self.clear)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self.icon)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.close_button)
        self.code: str | None = None
        self.refresh_icons()
        self.hide()

    def refresh_icons(self) -> None:
        self.icon.setPixmap(theme.icon("warning", "danger").pixmap(16, 16))
        self.close_button.setIcon(theme.icon("close", "banner_text"))

    def show_error(self, code: str, message: str) -> None:
        self.code = code
        self.label.setText(f"{code}: {message}")
        self.show()

    def text(self) -> str:
        return self.label.text() if self.isVisible() or self.code else ""

    def clear(self) -> None:
        self.code = None
        self.label.setText("")
        self.hide()


class ConfirmBar(QFrame):
    """An inline question with a confirm and a cancel button (never a modal ``exec()``)."""

    accepted = Signal()
    rejected = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("confirmBar")
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.confirm_button = QPushButton("Compact")
        self.confirm_button.setObjectName("confirmCompact")
        self.confirm_button.setProperty("primary", True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelCompact")
        # a manual compaction's instructions and reason (issue 23): shown by ask(..., fields=True)
        self.instructions = QLineEdit()
        self.instructions.setObjectName("compactInstructions")
        self.instructions.setPlaceholderText("what the summary must keep (paths, ids, tools…); empty: the thread's standing instructions")
        self.reason = QLineEdit()
        self.reason.setObjectName("compactReason")
        self.reason.setPlaceholderText("why (recorded in the audit log with your name)")
        self.fields = QWidget()
        fields = QFormLayout(self.fields)
        fields.setContentsMargins(0, 2, 0, 0)
        fields.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        fields.addRow("Instructions", self.instructions)
        fields.addRow("Reason", self.reason)
        top = QHBoxLayout()
        top.addWidget(self.label, 1)
        top.addWidget(self.cancel_button)
        top.addWidget(self.confirm_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.fields)
        self.fields.hide()
        self.instructions.returnPressed.connect(self._accept)
        self.reason.returnPressed.connect(self._accept)
        self.confirm_button.clicked.connect(self._accept)
        self.cancel_button.clicked.connect(self._reject)
        self.hide()

    def ask(self, question: str, *, fields: bool = False, instructions: str = "") -> None:
        """Show ``question``; ``fields``: with the instructions and reason fields (cleared, the
        instructions prefilled with ``instructions``)."""
        self.label.setText(question)
        self.fields.setVisible(fields)
        if fields:
            self.instructions.setText(instructions)
            self.instructions.setCursorPosition(0)
            self.reason.clear()
        self.show()
        self.confirm_button.setFocus()

    def values(self) -> tuple[str | None, str | None]:
        """(instructions, reason) typed, None where empty or the fields are hidden."""
        if self.fields.isHidden():
            return None, None
        return self.instructions.text().strip() or None, self.reason.text().strip() or None

    def _accept(self) -> None:
        self.hide()
        self.accepted.emit()

    def _reject(self) -> None:
        self.hide()
        self.rejected.emit()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt name)
        if event.key() == Qt.Key.Key_Escape:
            self._reject()
            return
        super().keyPressEvent(event)
