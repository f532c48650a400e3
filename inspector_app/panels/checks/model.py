"""The Checks tab: the violations of docs/schema.md found in the open thread (``engine.core.checks``)."""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt

from engine.core.checks import Finding

from ...models.table import RecordTableModel

_Index = QModelIndex | QPersistentModelIndex
COLUMNS: tuple[str, ...] = ("Check", "What is wrong")
FindingRole = Qt.ItemDataRole.UserRole + 1


class FindingsModel(RecordTableModel[Finding]):
    """One row per finding: the check's name and its message in words."""

    COLUMNS = COLUMNS

    def set_findings(self, findings: Sequence[Finding]) -> None:
        self.beginResetModel()
        self._rows = list(findings)
        self.endResetModel()

    def findings(self) -> list[Finding]:
        return list(self._rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        f = self._rows[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            return f.check if index.column() == 0 else f.message
        if role == FindingRole:
            return f
        return None
