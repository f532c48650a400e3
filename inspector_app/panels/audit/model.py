"""The Audit list's rows (issue 23): one operator action per row, newest last."""

from __future__ import annotations

import json
from typing import Any, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt

from engine.core.views import AuditEntry

from ...models.table import RecordTableModel

_Index = QModelIndex | QPersistentModelIndex


def state_text(state: dict[str, Any] | None) -> str:
    """A before / after state on one line (``generation 5 · boundary #70 · 2,542 tokens``)."""
    if not state:
        return ""
    parts: list[str] = []
    for key, value in state.items():
        if value is None or value == [] or value == {}:
            continue
        if key == "boundary":
            parts.append(f"boundary #{value}")
        elif key == "tokens" and isinstance(value, int):
            parts.append(f"{value:,} tokens")
        elif isinstance(value, (dict, list)):
            parts.append(f"{key} {json.dumps(value, ensure_ascii=False)}")
        else:
            parts.append(f"{key} {value}")
    return " · ".join(parts)


class AuditModel(RecordTableModel[AuditEntry]):
    COLUMNS = ("When", "Action", "Thread", "Operator", "Reason", "Before → after")

    def set_entries(self, entries: Sequence[AuditEntry], *, append: bool = False) -> None:
        if append and entries:
            first = len(self._rows)
            self.beginInsertRows(QModelIndex(), first, first + len(entries) - 1)
            self._rows.extend(entries)
            self.endInsertRows()
            return
        if not append:
            self.beginResetModel()
            self._rows = list(entries)
            self.endResetModel()

    def entries(self) -> list[AuditEntry]:
        return list(self._rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        e = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return e.at.astimezone().strftime("%Y-%m-%d %H:%M:%S")
            if col == 1:
                return e.action
            if col == 2:
                return e.thread or "(deleted thread)"
            if col == 3:
                return f"{e.operator} ({e.display_name})" if e.display_name else e.operator
            if col == 4:
                return e.reason or ""
            if col == 5:
                before, after = state_text(e.before), state_text(e.after)
                return f"{before} → {after}" if before or after else ""
        if role == Qt.ItemDataRole.ToolTipRole and col in (4, 5):
            return (e.reason or "") if col == 4 else f"before: {state_text(e.before) or '—'}\nafter: {state_text(e.after) or '—'}"
        if role == Qt.ItemDataRole.UserRole:
            return e
        return None
