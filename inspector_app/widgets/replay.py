"""The replay panel: pick a recovery episode and step through what the model saw at each step."""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QGridLayout, QHBoxLayout, QLabel, QListView, QPushButton, QSizePolicy, QSplitter, QVBoxLayout, QWidget

from engine.messages import summary_message
from engine.views import Episode, ReplayStep

from .. import theme
from ..models.replay import ReplayModel, SurfaceModel, episode_label


def _fmt(v: int | None) -> str:
    return "–" if v is None else f"{v:,}"


def _change(before: int | None, after: int | None) -> str:
    """``a → b`` for a step that records both values, else the one it records."""
    if before is not None and after is not None:
        return f"{before:,} → {after:,}"
    return _fmt(before if before is not None else after)


class ReplayPanel(QWidget):
    """Episode picker, step list, back/forward, the step's facts and its surface."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("replayPanel")
        self.model = ReplayModel(self)
        self.surface_model = SurfaceModel(self)

        self.episodes = QComboBox()
        self.episodes.setObjectName("replayEpisodes")
        self.back_button = QPushButton(theme.icon("back"), "Back")
        self.back_button.setObjectName("replayBack")
        self.forward_button = QPushButton(theme.icon("forward"), "Forward")
        self.forward_button.setObjectName("replayForward")
        self.forward_button.setLayoutDirection(Qt.LayoutDirection.RightToLeft)

        self.steps = QListView()
        self.steps.setObjectName("replaySteps")
        self.steps.setModel(self.model)
        self.steps.setUniformItemSizes(True)

        self.kind = QLabel()
        self.kind.setObjectName("sectionTitle")
        self.facts: dict[str, QLabel] = {}
        grid = QGridLayout()
        for row, (key, title) in enumerate((("tokens", "Tokens"), ("generation", "Generation"), ("attempt", "Attempt"), ("error", "Error"))):
            name = QLabel(title)
            name.setObjectName("muted")
            value = QLabel()
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            grid.addWidget(name, row, 0, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(value, row, 1)
            self.facts[key] = value
        grid.setColumnStretch(1, 1)
        self.no_progress = QLabel("No progress: the generation did not grow at this step")
        self.no_progress.setObjectName("noProgress")
        self.no_progress.hide()

        self.surface = QListView()
        self.surface.setObjectName("replaySurface")
        self.surface.setModel(self.surface_model)
        self.surface.setUniformItemSizes(True)
        for view in (self.steps, self.surface):  # long rows elide instead of scrolling sideways
            view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
            view.setTextElideMode(Qt.TextElideMode.ElideRight)
            view.setResizeMode(QListView.ResizeMode.Adjust)
        self.surface_title = QLabel("Surface the model would have seen")
        self.surface_title.setObjectName("sectionTitle")
        self.empty = QLabel("No overflow-recovery episodes recorded for this thread.")
        self.empty.setWordWrap(True)
        self.empty.setObjectName("muted")

        nav = QHBoxLayout()
        nav.addWidget(self.episodes, 1)
        nav.addWidget(self.back_button)
        nav.addWidget(self.forward_button)

        info = QWidget()
        il = QVBoxLayout(info)
        il.setContentsMargins(0, 0, 0, 0)
        il.addWidget(self.kind)
        il.addLayout(grid)
        il.addWidget(self.no_progress)
        il.addWidget(self.surface_title)
        il.addWidget(self.surface, 1)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.steps)
        split.addWidget(info)
        split.setStretchFactor(1, 3)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addLayout(nav)
        layout.addWidget(self.empty)
        layout.addWidget(split, 1)

        self.episodes.currentIndexChanged.connect(self.model.select_episode)
        self.back_button.clicked.connect(self.model.back)
        self.forward_button.clicked.connect(self.model.forward)
        self.steps.clicked.connect(lambda index: self.model.go(index.row()))
        self.model.currentChanged.connect(self._show_step)
        self._show_step(-1)

    EMPTY_TEXT = "No overflow-recovery episodes recorded for this thread."

    def set_episodes(self, episodes: Sequence[Episode]) -> None:
        self.episodes.blockSignals(True)
        self.episodes.clear()
        self.episodes.addItems([episode_label(e) for e in episodes])
        self.episodes.blockSignals(False)
        self.empty.setText(self.EMPTY_TEXT)
        self.empty.setObjectName("muted")
        self.empty.setVisible(not episodes)
        self.model.set_episodes(episodes)

    def show_error(self, reason: str) -> None:
        """The episodes could not be rebuilt: no episodes, and the reason in their place."""
        self.set_episodes([])
        self.empty.setObjectName("errorText")
        self.empty.setText(f"The replay cannot be rebuilt: {reason}")

    def _show_step(self, index: int) -> None:
        step: ReplayStep | None = self.model.current_step()
        self.back_button.setEnabled(self.model.can_back())
        self.forward_button.setEnabled(self.model.can_forward())
        if step is None:
            self.kind.setText("")
            for label in self.facts.values():
                label.setText("")
            self.no_progress.hide()
            self.surface_model.set_messages(())
            return
        self.steps.setCurrentIndex(self.model.index(index))
        total = self.model.rowCount()
        self.kind.setText(f"Step {index + 1} of {total}: {step.kind}")
        self.facts["tokens"].setText(_change(step.tokens_before, step.tokens_after))
        self.facts["generation"].setText(_change(step.generation_before, step.generation_after))
        self.facts["attempt"].setText(str(step.attempt))
        self.facts["error"].setText(f"{step.error_code}: {step.error_message}" if step.error_code else "–")
        self.no_progress.setVisible(step.no_progress)
        if step.surface is None:
            self.surface_title.setText("Surface the model would have seen: not recorded for this step")
            self.surface_model.set_messages(())
        else:
            surface = ((summary_message(step.summary),) if step.summary else ()) + tuple(step.surface)
            self.surface_title.setText(f"Surface the model would have seen ({len(surface)} message{'' if len(surface) == 1 else 's'})")
            self.surface_model.set_messages(surface)
