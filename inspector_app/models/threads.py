"""The threads list: one row per conversation (a thin table model over ``ThreadInfo``).

An imported thread shows its source (``Claude Code``, ``Codex`` …) in the Source column; a
sub-agent's key is its parent's key + ``/<id>``, so the key order lists it right under its parent,
and its title is indented with ``↳``."""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt

from engine import figures
from engine.views import ThreadInfo

from ..timeline.pages import source_badge, source_name
from .table import RecordTableModel

ThreadRole = Qt.ItemDataRole.UserRole + 1
KeyRole = Qt.ItemDataRole.UserRole + 2
StateRole = Qt.ItemDataRole.UserRole + 3
SearchTextRole = Qt.ItemDataRole.UserRole + 4
PressureRole = Qt.ItemDataRole.UserRole + 5

STATE_LABELS: dict[str | None, str] = {
    None: "idle",
    "running": "running",
    "waiting_for_user": "waiting",
    "queued": "queued",
}

COLUMNS: tuple[str, ...] = ("Thread", "Source", "Msgs", "Pressure", "Gen", "State")
COL_TITLE, COL_SOURCE, COL_MESSAGES, COL_PRESSURE, COL_GENERATION, COL_STATE = range(len(COLUMNS))
SUBAGENT_PREFIX = "↳ "

_Index = QModelIndex | QPersistentModelIndex


def state_label(busy_reason: str | None) -> str:
    """The badge text for a thread state: idle / running / waiting / queued."""
    return STATE_LABELS.get(busy_reason, busy_reason or "idle")


class ThreadListModel(RecordTableModel[ThreadInfo]):
    """Threads with their message count, pressure (filled in as it arrives), generation and state."""

    COLUMNS = COLUMNS

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._pressure: dict[str, float] = {}
        #: threads that could not be measured or read: why, in words (shown in the row)
        self._failed: dict[str, str] = {}

    # -- data in -------------------------------------------------------------------------------
    def set_threads(self, threads: Sequence[ThreadInfo]) -> None:
        """Replace the list in place: rows of threads gone are removed, new threads inserted where
        they belong, and only rows whose thread changed are told so (the selection, the sort of a
        proxy and the measured pressures survive; an unchanged list changes nothing). A list that
        shares no thread with the one shown (a first listing, another database), or whose common
        threads come in another order, is reset."""
        threads = list(threads)
        keys = {t.key for t in threads}
        self._pressure = {k: v for k, v in self._pressure.items() if k in keys}
        self._failed = {k: v for k, v in self._failed.items() if k in keys}
        old_keys = [t.key for t in self._rows]
        kept = [k for k in old_keys if k in keys]
        if not kept or kept != [t.key for t in threads if t.key in set(old_keys)]:  # nothing to keep (a first listing, another database)
            self.beginResetModel()
            self._rows = threads
            self.endResetModel()
            return
        row = len(self._rows) - 1
        while row >= 0:  # threads gone: contiguous runs, from the end
            if self._rows[row].key in keys:
                row -= 1
                continue
            last = row
            while row >= 0 and self._rows[row].key not in keys:
                row -= 1
            self.beginRemoveRows(QModelIndex(), row + 1, last)
            del self._rows[row + 1 : last + 1]
            self.endRemoveRows()
        for i, t in enumerate(threads):
            if i < len(self._rows) and self._rows[i].key == t.key:
                if self._rows[i] != t:
                    self._rows[i] = t
                    self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))
                continue
            self.beginInsertRows(QModelIndex(), i, i)
            self._rows.insert(i, t)
            self.endInsertRows()

    def update_thread(self, info: ThreadInfo) -> None:
        """Refresh one row (after a live refresh or a compaction of that thread)."""
        row = self.row_of(info.key)
        if row is None:
            return
        self._rows[row] = info
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    def set_pressure(self, key: str, ratio: float) -> None:
        """Record a thread's pressure (tokens / threshold) once it has been measured."""
        self._pressure[key] = ratio
        self._failed.pop(key, None)
        self._changed(key)

    def set_failed(self, key: str, reason: str) -> None:
        """A thread that could not be measured or read: its pressure cell says "error" and the
        row's tooltip says why; the other rows are untouched."""
        self._failed[key] = reason
        self._changed(key)

    def failure(self, key: str) -> str | None:
        """Why ``key`` could not be read, or None."""
        return self._failed.get(key)

    def _changed(self, key: str) -> None:
        row = self.row_of(key)
        if row is not None:
            self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    # -- queries -------------------------------------------------------------------------------
    def row_of(self, key: str) -> int | None:
        return next((i for i, t in enumerate(self._rows) if t.key == key), None)

    def thread_at(self, row: int) -> ThreadInfo:
        return self._rows[row]

    def keys(self) -> list[str]:
        return [t.key for t in self._rows]

    # -- Qt model ------------------------------------------------------------------------------
    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        t = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(t, col)
        if role == ThreadRole:
            return t
        if role == KeyRole:
            return t.key
        if role == StateRole:
            return state_label(t.busy_reason)
        if role == PressureRole:
            return self._pressure.get(t.key)
        if role == SearchTextRole:
            return " ".join(filter(None, (t.title, t.key, t.agent, t.model, t.provider, source_name(t.source_format))))
        if role == Qt.ItemDataRole.ToolTipRole and t.key in self._failed:
            return f"{t.title or t.key}\nCannot read this thread: {self._failed[t.key]}"
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_TITLE:
            details = [t.title or t.key, f"key: {t.key}"]  # the full title: the column elides it
            if t.agent:
                details.append(f"agent: {t.agent}")
            if t.provider or t.model:
                details.append(f"model: {t.provider or '?'} / {t.model or '?'}")
            details.append(f"compactions: {t.compact_count}")
            if t.source_format:
                details.append(f"imported from {source_name(t.source_format)}: {t.source_file or '?'}")
            if t.parent_thread:
                details.append(f"sub-agent of {t.parent_thread}")
            return "\n".join(details)
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_SOURCE and t.source_format:
            lines = [f"imported from {source_name(t.source_format)} ({t.source_format})", f"file: {t.source_file or '?'}"]
            if t.source_session_id:
                lines.append(f"session: {t.source_session_id}")
            if t.source_cwd:
                lines.append(f"cwd: {t.source_cwd}")
            if t.reported_context_window:
                lines.append(f"window reported by the source: {t.reported_context_window:,}")
            return "\n".join(lines)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_MESSAGES, COL_PRESSURE, COL_GENERATION):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _display(self, t: ThreadInfo, col: int) -> str:
        if col == COL_TITLE:
            if t.parent_thread:  # under its parent: its own id is enough when it has no title
                return SUBAGENT_PREFIX + (t.title or t.key.rsplit("/", 1)[-1])
            return t.title or t.key
        if col == COL_SOURCE:
            return source_badge(t.source_format)
        if col == COL_MESSAGES:
            return f"{t.message_count:,}" if isinstance(t.message_count, int) else str(t.message_count)
        if col == COL_PRESSURE:
            if t.key in self._failed:
                return "error"
            ratio = self._pressure.get(t.key)
            return figures.percent(ratio)  # the header's and the gauge's figure (floored: 84.96% reads 84.9%)
        if col == COL_GENERATION:
            return str(t.generation)
        return state_label(t.busy_reason)


class ThreadFilterModel(QSortFilterProxyModel):
    """Case-insensitive text filter over title, key, agent and model."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setFilterRole(SearchTextRole)
        self.setFilterKeyColumn(COL_TITLE)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
