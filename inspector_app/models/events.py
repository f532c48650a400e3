"""The compaction events of one thread (prune, summary, provider errors, recovery steps, …), newest
last: a thin table model over ``engine.views.CompactionEvent``."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush

from engine.views import CompactionEvent

from .. import theme
from .table import RecordTableModel

EventRole = Qt.ItemDataRole.UserRole + 1
#: the timeline message an event is about (first pruned result, new boundary), or None
TargetRole = Qt.ItemDataRole.UserRole + 2

COLUMNS: tuple[str, ...] = ("Time", "Event", "What happened")
COL_TIME, COL_KIND, COL_DETAIL = range(len(COLUMNS))
KIND_TOKENS = {
    "prune": "cat_tool_results",
    "summary": "cat_summary",
    "summary_rejected": "danger",
    "provider_error": "danger",
    "gave_up": "danger",
    "recovered": "ok",
    "retry": "info",
}

_Index = QModelIndex | QPersistentModelIndex


def _n(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


def event_detail(e: CompactionEvent) -> str:
    """A few short lines: tokens and generation; what was pruned or summarized; the error."""
    d: Mapping[str, Any] = e.data
    sizes: list[str] = []
    if d.get("tokens_before") is not None and d.get("tokens_after") is not None and d["tokens_before"] != d["tokens_after"]:
        sizes.append(f"{_n(d['tokens_before'])} → {_n(d['tokens_after'])} tok")
    elif d.get("tokens") is not None:
        sizes.append(f"{_n(d['tokens'])} tok")
    if d.get("generation_before") is not None and d.get("generation_after") is not None:
        sizes.append(f"gen {d['generation_before']} → {d['generation_after']}")
    parts = [" · ".join(sizes)] if sizes else []
    pruned = d.get("pruned")
    pruned = [p for p in pruned if isinstance(p, Mapping)] if isinstance(pruned, (list, tuple)) else []  # another platform's data may be anything
    if pruned:
        ids = ", ".join(f"#{p.get('message_id')}" for p in pruned[:4]) + (" …" if len(pruned) > 4 else "")
        parts.append(f"pruned {len(pruned)} result{'s' if len(pruned) != 1 else ''}: {ids}")
    boundary = d.get("boundary_after")
    if boundary is not None and boundary != d.get("boundary_before"):
        parts.append(f"boundary #{boundary}, summary {_n(d.get('summary_tokens', '?'))} tok")
    if d.get("question"):
        parts.append(f"asked: {d['question']}")
    if d.get("error_code"):
        parts.append(str(d["error_code"]))  # the message is in the tooltip
    if d.get("reason"):
        parts.append(f"reason: {d['reason']}")
    return "\n".join(parts) or (e.trigger or "")


def event_target(e: CompactionEvent) -> int | None:
    """The message to show in the timeline for ``e``: the first pruned result or the new boundary."""
    pruned = e.data.get("pruned") or ()
    if isinstance(pruned, (list, tuple)) and pruned and isinstance(pruned[0], Mapping) and isinstance(pruned[0].get("message_id"), int):
        return int(pruned[0]["message_id"])
    boundary = e.data.get("boundary_after")
    return boundary if isinstance(boundary, int) else None


class EventsModel(RecordTableModel[CompactionEvent]):
    """Time, kind (with the trigger) and a one-line description of every recorded event."""

    COLUMNS = COLUMNS

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)

    def set_events(self, events: Sequence[CompactionEvent]) -> None:
        self.beginResetModel()
        self._rows = list(events)
        self.endResetModel()

    def events(self) -> list[CompactionEvent]:
        return list(self._rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        e = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_TIME:
                return e.created_at.strftime("%H:%M:%S") if e.created_at is not None else "–"
            if col == COL_KIND:
                return f"{e.kind}\n{e.trigger}" if e.trigger else e.kind
            try:
                return event_detail(e)
            except Exception:  # noqa: BLE001: a data shape nobody planned for is shown raw, not raised into Qt
                return json.dumps(dict(e.data), ensure_ascii=False, default=str)[:200]
        if role == EventRole:
            return e
        if role == TargetRole:
            return event_target(e)
        if role == Qt.ItemDataRole.ForegroundRole and col == COL_KIND and e.kind in KIND_TOKENS:
            return QBrush(theme.color(KIND_TOKENS[e.kind]))
        if role == Qt.ItemDataRole.ToolTipRole:
            when = f"{e.created_at:%Y-%m-%d %H:%M:%S}" if e.created_at is not None else "unknown time"
            head = f"event {e.id} · {e.kind} · {when}" + (f" · run {e.run_id}" if e.run_id is not None else "")
            return head + "\n" + json.dumps(dict(e.data), indent=2, ensure_ascii=False, default=str)[:4000]
        return None
