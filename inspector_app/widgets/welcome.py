"""The first-launch welcome: what the inspector is, and the three ways in (open a database, import
a session, open the demo). Shown in place of the threads | timeline | tabs area while no database
is open and none is remembered (``compaction-inspector`` with no ``--db`` on a first launch)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from .. import theme

TITLE = "Welcome to the Compaction Inspector"
ABOUT = (
    "When a conversation with an LLM agent outgrows the model's context window, the engine compacts it: "
    "old tool results are pruned (kept on disk, a preview left in place) and older turns are summarized. "
    "The inspector shows what happened to each conversation: the timeline of what the model saw, the "
    "pressure against its window, every compaction with what it kept and dropped, and what other "
    "settings would have done."
)
#: (object name, button text, what it does)
CHOICES: tuple[tuple[str, str, str], ...] = (
    ("welcomeOpen", "Open a database…", "A SQLite file or a PostgreSQL URL your agents write to."),
    ("welcomeImport", "Import a session…",
     "Claude Code, Codex, OpenAI, Anthropic, OpenHands or SWE-agent transcripts; they go into My sessions in your data folder."),
    ("welcomeDemo", "Open the demo", "Sample conversations with compactions, overflow recoveries and busy threads."),
)


class WelcomePage(QWidget):
    """Three buttons; the window connects their signals."""

    openDatabase = Signal()
    importSession = Signal()
    openDemo = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcomePage")
        card = QFrame()
        card.setObjectName("welcomeCard")
        card.setMaximumWidth(720)
        card.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        title = QLabel(TITLE)
        title.setObjectName("welcomeTitle")
        title.setWordWrap(True)
        about = QLabel(ABOUT)
        about.setObjectName("welcomeAbout")
        about.setWordWrap(True)
        cl = QVBoxLayout(card)
        cl.setContentsMargins(28, 24, 28, 24)
        cl.setSpacing(12)
        cl.addWidget(title)
        cl.addWidget(about)
        self.buttons: dict[str, QPushButton] = {}
        signals = {"welcomeOpen": self.openDatabase, "welcomeImport": self.importSession, "welcomeDemo": self.openDemo}
        icons = {"welcomeOpen": "database", "welcomeImport": "tool", "welcomeDemo": "forward"}
        for name, text, what in CHOICES:
            button = QPushButton(theme.icon(icons[name]), text)
            button.setObjectName(name)
            button.setMinimumWidth(190)
            button.setToolTip(what)
            button.clicked.connect(signals[name].emit)
            note = QLabel(what)
            note.setObjectName("muted")
            note.setWordWrap(True)
            row = QHBoxLayout()
            row.setSpacing(14)
            row.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
            row.addWidget(note, 1)
            cl.addLayout(row)
            self.buttons[name] = button
        hint = QLabel("Help → Keyboard shortcuts lists every key. The last database you open is opened again next time.")
        hint.setObjectName("muted")
        hint.setWordWrap(True)
        cl.addWidget(hint)
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(card, 4)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)
        self.card = card
        self.refresh_icons()

    def refresh_icons(self) -> None:
        """The card and the buttons' icons again in the theme's colours."""
        for name, icon in (("welcomeOpen", "database"), ("welcomeImport", "tool"), ("welcomeDemo", "forward")):
            self.buttons[name].setIcon(theme.icon(icon))
        self.card.setStyleSheet(
            f"QFrame#welcomeCard {{ background: {theme.color('surface').name()}; border: 1px solid {theme.color('border').name()}; border-radius: 8px; }}"
            " QLabel#welcomeTitle { font-size: 17pt; font-weight: 600; }"
        )
