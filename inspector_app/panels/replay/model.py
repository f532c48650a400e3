"""Replay: every recorded request of a thread (the envelope the model received at each, with the
steps of its overflow recoveries in place), the steps of one recovery episode, and a surface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QBrush

from engine.core.messages import META_PRUNED, Message, summary_message
from engine.core.views import Episode, PressurePoint, ReplayStep, RequestEnvelope

from ... import theme
from ...models.timeline import message_preview

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


def surface_tag(m: Message) -> str:
    """What a surface line is besides a stored message: a preview of a pruned result, the summary,
    the synthetic user message after a summary, an ephemeral note of a running request."""
    if m.metadata.get(META_PRUNED):
        return "[preview] "
    if m.metadata.get("summary"):
        return "[summary] "
    if m.is_synthetic:
        return "[synthetic] "
    if m.is_ephemeral:
        return "[ephemeral note] "
    return ""


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
            return surface_tag(m) + message_preview(m)
        if role == MessageRole:
            return m
        if role == Qt.ItemDataRole.DecorationRole:
            return theme.icon("summary" if m.metadata.get("summary") else m.role)
        if role == Qt.ItemDataRole.ToolTipRole:
            return m.content[:2000]
        return None


# -- every request (issue #14) -------------------------------------------------------------------

EnvelopeRole = Qt.ItemDataRole.UserRole + 3
RowKindRole = Qt.ItemDataRole.UserRole + 4

#: categories of ``RequestEnvelope.breakdown`` in the order they are listed (``engine.core.meter.CATEGORIES``)
BREAKDOWN_ORDER: tuple[str, ...] = ("system", "tools", "summary", "user", "assistant", "tool_results")


def breakdown_text(breakdown: Mapping[str, int]) -> str:
    """``system 1,200 · tools 800 · …`` (the meter's categories first, then any other, zeros left out)."""
    names = [c for c in BREAKDOWN_ORDER if c in breakdown] + sorted(c for c in breakdown if c not in BREAKDOWN_ORDER)
    return " · ".join(f"{c.replace('_', ' ')} {breakdown[c]:,}" for c in names if breakdown[c])


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One row of the requests list: request ``index`` (``replay_step`` None), or one step of the
    overflow recovery that happened at that request (``episode``/``step``/``replay_step`` set).
    ``point`` is the request's pressure point (its recorded size and the compaction before it):
    what the row says until its envelope is built."""

    index: int | None
    point: PressurePoint | None = None
    episode: int | None = None
    step: int | None = None
    replay_step: ReplayStep | None = None

    @property
    def compaction(self) -> str | None:
        """The compaction that happened right before this request (prune / summary / overflow …)."""
        return self.point.compaction if self.point is not None else None


def request_label(row: RequestRow, total: int, envelope: RequestEnvelope | None = None) -> str:
    """One line per request: number, size, the compaction before it, and what went wrong, if
    anything. The size is the recorded one (the pressure point's, as the chart draws it), else the
    rebuilt envelope's; the rest of the envelope is in the facts of the current request."""
    if row.replay_step is not None:
        s = row.replay_step
        tokens = _tokens(s.tokens_before, s.tokens_after)
        parts = [f"    ↳ recovery {(row.step or 0) + 1}: {s.kind}", *([tokens] if tokens else []), *(["no progress"] if s.no_progress else [])]
        return " · ".join(parts)
    parts = [f"Request {(row.index or 0) + 1:,} of {total:,}"]
    sent = row.point.tokens if row.point is not None else envelope.tokens if envelope is not None else None
    if sent is not None:
        parts.append(f"{sent:,} tok")
    if row.compaction:
        parts.append(f"after {row.compaction}")
    if envelope is not None and envelope.outcome and envelope.outcome not in ("completed", "ok"):
        parts.append(envelope.outcome)
    return " · ".join(parts)


def request_rows(count: int, points: Sequence[PressurePoint] = (), episodes: Sequence[Episode] = ()) -> list[RequestRow]:
    """``count`` requests in order (request i with the i-th pressure point when the chart has one
    per request), each overflow recovery's steps right before the request of its run that retried
    after it (marked ``overflow``), else after its run's last request; a recovery whose run has no
    recorded request goes last."""
    matched = list(points) if len(points) == count else []
    rows = [RequestRow(i, matched[i] if matched else None) for i in range(count)]
    by_run: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if row.point is not None and row.point.run_id is not None:
            by_run.setdefault(row.point.run_id, []).append(i)
    before: dict[int, list[RequestRow]] = {}
    after: dict[int, list[RequestRow]] = {}
    tail: list[RequestRow] = []
    used: set[int] = set()
    for n, episode in enumerate(episodes):
        steps = [RequestRow(None, None, n, i, s) for i, s in enumerate(episode.steps)]
        positions = by_run.get(episode.run_id, []) if episode.run_id is not None else []
        if not positions:
            tail += steps
            continue
        retried = next((p for p in positions if rows[p].compaction == "overflow" and p not in used), None)
        if retried is not None:
            used.add(retried)
            before.setdefault(retried, []).extend(steps)
        else:
            after.setdefault(positions[-1], []).extend(steps)
    out: list[RequestRow] = []
    for i, row in enumerate(rows):
        out.extend(before.get(i, ()))
        out.append(row)
        out.extend(after.get(i, ()))
    return out + tail


def envelope_surface(e: RequestEnvelope) -> tuple[Message, ...]:
    """What the model received, in order: the summary (as the message the model reads), the
    surface (previews, the synthetic user message) and the ephemeral notes last."""
    summary = (summary_message(e.summary),) if e.summary else ()
    notes = tuple(m for m in e.ephemeral if m not in e.messages)
    return summary + tuple(e.messages) + notes


class RequestsModel(QAbstractListModel):
    """Every recorded request of a thread (with the steps of its overflow recoveries), and a cursor.

    The envelopes are not all built: ``Service.reads.request_envelopes`` answers a lazy sequence whose
    items are rebuilt when indexed (the surface measured by the meter), so the owner builds the
    current row's on a worker and hands it over with :meth:`set_envelope`; until then a row shows
    its pressure point (recorded size, the compaction before it)."""

    #: the cursor moved: the new row (-1 when there is nothing to show)
    currentChanged = Signal(int)

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[RequestRow] = []
        self._row_of: dict[int, int] = {}  # request index -> row (a long thread's lookups stay O(1))
        self._row_of_id: dict[int, int] = {}  # recorded request id -> row
        self._requests = 0
        self._row = -1
        self._envelopes: dict[int, RequestEnvelope] = {}

    def set_requests(self, count: int, points: Sequence[PressurePoint] = (), episodes: Sequence[Episode] = (), *, select: int | None = None,
                     envelopes: Mapping[int, RequestEnvelope] | None = None, rows: Sequence[RequestRow] | None = None) -> None:  # fmt: skip
        """Replace the rows (``count`` requests; ``rows``: :func:`request_rows` of them, made on a
        worker for a long thread); the cursor goes to request ``select`` (default: the last)."""
        self.beginResetModel()
        self._rows = list(rows) if rows is not None else request_rows(count, points, episodes)
        self._row_of = {r.index: i for i, r in enumerate(self._rows) if r.replay_step is None and r.index is not None}
        self._row_of_id = {r.point.request_id: i for i, r in enumerate(self._rows) if r.replay_step is None and r.point is not None}
        self._requests = count
        self._envelopes = dict(envelopes or {})
        self._row = -1
        self.endResetModel()
        if self._rows:
            row = self.row_of_request(select) if select is not None else -1
            if row < 0:
                row = max((i for i, r in enumerate(self._rows) if r.replay_step is None), default=0)
            self._row = row
        self.currentChanged.emit(self._row)

    def clear(self) -> None:
        self.set_requests(0)

    def rows(self) -> list[RequestRow]:
        return list(self._rows)

    def envelopes(self) -> dict[int, RequestEnvelope]:
        """The envelopes built so far, by request index."""
        return dict(self._envelopes)

    def envelope(self, index: int | None) -> RequestEnvelope | None:
        return self._envelopes.get(index) if index is not None else None

    def set_envelope(self, envelope: RequestEnvelope) -> None:
        """Request ``envelope.index``'s envelope was built: its row says more; if it is the
        current row, :attr:`currentChanged` is emitted again (to show it)."""
        self._envelopes[envelope.index] = envelope
        row = self.row_of_request(envelope.index)
        if row >= 0:
            self.dataChanged.emit(self.index(row), self.index(row))
            if row == self._row:
                self.currentChanged.emit(row)

    @property
    def request_count(self) -> int:
        return self._requests

    @property
    def row_index(self) -> int:
        return self._row

    def current(self) -> RequestRow | None:
        return self._rows[self._row] if 0 <= self._row < len(self._rows) else None

    def current_envelope(self) -> RequestEnvelope | None:
        row = self.current()
        return self.envelope(row.index) if row is not None and row.replay_step is None else None

    def row_of_request(self, index: int) -> int:
        """The row of request ``index`` (0-based), -1: none."""
        return self._row_of.get(index, -1)

    def row_of_request_id(self, request_id: int) -> int:
        """The row of the request recorded as ``request_id`` (a pressure point's, or a built
        envelope's when the rows have no points), -1: none."""
        row = self._row_of_id.get(request_id)
        if row is not None:
            return row
        built = next((e.index for e in self._envelopes.values() if e.request_id == request_id), None)
        return self._row_of.get(built, -1) if built is not None else -1

    def can_back(self) -> bool:
        return self._row > 0

    def can_forward(self) -> bool:
        return 0 <= self._row < len(self._rows) - 1

    def go(self, row: int) -> None:
        """Move the cursor to ``row`` (clamped)."""
        if not self._rows:
            return
        row = max(0, min(row, len(self._rows) - 1))
        if row != self._row:
            old, self._row = self._row, row
            for r in (old, row):
                if r >= 0:
                    self.dataChanged.emit(self.index(r), self.index(r))
            self.currentChanged.emit(row)

    def forward(self) -> None:
        self.go(self._row + 1)

    def back(self) -> None:
        self.go(self._row - 1)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        row = self._rows[index.row()]
        envelope = self.envelope(row.index) if row.replay_step is None else None
        if role == Qt.ItemDataRole.DisplayRole:
            return request_label(row, self._requests, envelope)
        if role == EnvelopeRole:
            return envelope
        if role == StepRole:
            return row.replay_step
        if role == RowKindRole:
            return "step" if row.replay_step is not None else "request"
        if role == Qt.ItemDataRole.DecorationRole:  # every row has one: the texts line up
            if row.replay_step is not None:
                return theme.icon("warning" if row.replay_step.kind in ("provider_error", "gave_up") else "forward", "danger" if row.replay_step.kind == "provider_error" else "text_muted")
            if row.compaction:
                return theme.icon("boundary", "info" if row.compaction == "recorded" else "cat_summary")
            return theme.icon("assistant")
        if role == Qt.ItemDataRole.ForegroundRole:
            if row.replay_step is not None:
                return QBrush(theme.color("danger" if row.replay_step.no_progress or row.replay_step.kind == "gave_up" else "text_muted"))
            tokens, threshold = (envelope.tokens, envelope.threshold) if envelope is not None else (row.point.tokens, row.point.threshold) if row.point is not None else (0, None)
            if threshold and tokens > threshold:
                return QBrush(theme.color("danger"))
        if role == Qt.ItemDataRole.ToolTipRole:
            if row.replay_step is not None:
                s = row.replay_step
                return f"{s.error_code or 'error'}: {s.error_message}" if s.error_message else s.kind
            return envelope.note if envelope is not None and envelope.note else None
        return None
