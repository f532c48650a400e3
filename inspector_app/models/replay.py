"""Replay of overflow-recovery episodes: the steps of one episode and the surface at a step."""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QBrush

from engine.messages import META_PRUNED, Message
from engine.views import Episode, ReplayStep

from .. import theme
from .timeline import message_preview

StepRole = Qt.ItemDataRole.UserRole + 1
MessageRole = Qt.ItemDataRole.UserRole + 2

_Index = QModelIndex | QPersistentModelIndex


def episode_label(episode: Episode) -> str:
    """The text of an episode in the picker."""
    run = f"run {episode.run_id}" if episode.run_id is not None else "run ?"
    n = len(episode.steps)
    return f"{run} · {episode.outcome} · {n} step{'s' if n != 1 else ''}"


def _tokens(before: int | None, after: int | None) -> str:
    """``a → b tok`` when a step changed the envelope, ``a tok`` when only one size is known."""
    if before is None and after is None:
        return ""
    if before is None or after is None:
        return f"{before if before is not None else after:,} tok"
    return f"{before:,} → {after:,} tok"


def step_label(index: int, step: ReplayStep) -> str:
    """One line per step: number, kind, attempt, tokens, and the no-progress flag."""
    parts = [f"{index + 1}. {step.kind}", f"attempt {step.attempt}"]
    tokens = _tokens(step.tokens_before, step.tokens_after)
    if tokens:
        parts.append(tokens)
    if step.no_progress:
        parts.append("no progress")
    return " · ".join(parts)


class ReplayModel(QAbstractListModel):
    """The steps of the chosen episode, with a cursor that steps forward and back."""

    #: the cursor moved: the new step index (-1 when there is nothing to show)
    currentChanged = Signal(int)

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._episodes: list[Episode] = []
        self._episode = -1
        self._step = -1

    # -- episodes ------------------------------------------------------------------------------
    def set_episodes(self, episodes: Sequence[Episode]) -> None:
        """Replace the episodes and show the first one (newest data, first step)."""
        self._episodes = list(episodes)
        self.select_episode(0 if self._episodes else -1)

    def episodes(self) -> list[Episode]:
        return list(self._episodes)

    @property
    def episode_index(self) -> int:
        return self._episode

    def current_episode(self) -> Episode | None:
        return self._episodes[self._episode] if 0 <= self._episode < len(self._episodes) else None

    def select_episode(self, index: int) -> None:
        self.beginResetModel()
        self._episode = index if 0 <= index < len(self._episodes) else -1
        episode = self.current_episode()
        self._step = 0 if episode and episode.steps else -1
        self.endResetModel()
        self.currentChanged.emit(self._step)

    # -- cursor --------------------------------------------------------------------------------
    @property
    def step_index(self) -> int:
        return self._step

    def current_step(self) -> ReplayStep | None:
        episode = self.current_episode()
        return episode.steps[self._step] if episode and 0 <= self._step < len(episode.steps) else None

    def can_back(self) -> bool:
        return self._step > 0

    def can_forward(self) -> bool:
        return 0 <= self._step < self.rowCount() - 1

    def go(self, index: int) -> None:
        """Move the cursor to step ``index`` (clamped)."""
        if self.rowCount() == 0:
            return
        index = max(0, min(index, self.rowCount() - 1))
        if index != self._step:
            old = self._step
            self._step = index
            for row in (old, index):
                if row >= 0:
                    self.dataChanged.emit(self.index(row), self.index(row))
            self.currentChanged.emit(index)

    def forward(self) -> None:
        self.go(self._step + 1)

    def back(self) -> None:
        self.go(self._step - 1)

    # -- Qt model ------------------------------------------------------------------------------
    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        episode = self.current_episode()
        return 0 if parent.isValid() or episode is None else len(episode.steps)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        episode = self.current_episode()
        if not index.isValid() or episode is None or index.row() >= len(episode.steps):
            return None
        step = episode.steps[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return step_label(index.row(), step)
        if role == StepRole:
            return step
        if role == Qt.ItemDataRole.ForegroundRole and step.no_progress:
            return QBrush(theme.color("danger"))
        if role == Qt.ItemDataRole.ToolTipRole and step.error_message:
            return f"{step.error_code or 'error'}: {step.error_message}"
        return None


class SurfaceModel(QAbstractListModel):
    """The messages the model would have seen at a replay step, one line each."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._messages: list[Message] = []

    def set_messages(self, messages: Sequence[Message]) -> None:
        self.beginResetModel()
        self._messages = list(messages)
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._messages)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._messages):
            return None
        m = self._messages[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return ("[preview] " if m.metadata.get(META_PRUNED) else "") + message_preview(m)
        if role == MessageRole:
            return m
        if role == Qt.ItemDataRole.DecorationRole:
            return theme.icon("summary" if m.metadata.get("summary") else m.role)
        if role == Qt.ItemDataRole.ToolTipRole:
            return m.content[:2000]
        return None
