"""The compaction events of one thread (prune, summary, provider errors, recovery steps, …), newest
last: a thin table model over ``engine.core.views.CompactionEvent``. An imported thread's rows start
with the compactions its source recorded (``engine.core.views.SourceCompaction``: Claude Code's
``compact_boundary``, Codex ``compacted``, OpenHands ``Condensation`` …), named as the source's,
with their trigger and the tokens the source reported."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Mapping, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush

from engine.core.views import CompactionEvent, SourceCompaction

from ... import theme
from ...logic.timeline.pages import source_name as format_name
from ...models.table import RecordTableModel

EventRole = Qt.ItemDataRole.UserRole + 1
#: the timeline message an event is about (first pruned result, new boundary), or None
TargetRole = Qt.ItemDataRole.UserRole + 2
#: a row of the source's own compactions: its ``SourceCompaction`` (``EventRole`` is then None)
SourceRole = Qt.ItemDataRole.UserRole + 3

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


def source_name(c: SourceCompaction) -> str:
    return format_name(c.source)


def source_kind(c: SourceCompaction) -> str:
    """``Claude Code compaction`` / ``Claude Code prune``: the source's, never one of ours."""
    return f"{source_name(c)} {'prune' if c.kind == 'prune' else 'compaction'}"


def source_detail(c: SourceCompaction) -> str:
    """Tokens the source reported before it, what it replaced or cleared, its summary's size."""
    parts: list[str] = []
    if c.tokens_before is not None:
        parts.append(f"{_n(c.tokens_before)} tok before")  # as the source counted them (the tooltip says so)
    if c.kind == "prune":
        n = c.details.get("forgotten_messages") if isinstance(c.details, Mapping) else None
        saved = c.details.get("tokens_saved") if isinstance(c.details, Mapping) else None
        parts.append(f"cleared {_n(n) if isinstance(n, int) else len(c.forgotten)} tool result{'s' if (n if isinstance(n, int) else len(c.forgotten)) != 1 else ''}"
                     + (f", {_n(saved)} tok saved" if isinstance(saved, int) else ""))
    else:
        if c.replaced_first_id is not None and c.replaced_last_id is not None:
            parts.append(f"replaced #{c.replaced_first_id}–#{c.replaced_last_id}")
        parts.append(f"summary of {len(c.summary):,} characters" if c.summary else "summary kept encrypted by the source")
        if c.kept:
            parts.append(f"kept {len(c.kept)} item{'s' if len(c.kept) != 1 else ''}")
    return "\n".join(parts)


def _source_time(c: SourceCompaction) -> tuple[str, str]:
    """(HH:MM:SS, the whole timestamp) from the source's own timestamp, else the import's."""
    text = c.source_timestamp or ""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else c.created_at
    except ValueError:
        when = c.created_at
    if when is None:
        return "–", "unknown time"
    return when.strftime("%H:%M:%S"), f"{when:%Y-%m-%d %H:%M:%S}"


class EventsModel(RecordTableModel[Any]):
    """Time, kind (with the trigger) and a one-line description of every recorded event; an
    imported thread's rows start with its source's compactions (:func:`source_kind`)."""

    COLUMNS = COLUMNS

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)

    def set_events(self, events: Sequence[CompactionEvent], sources: Sequence[SourceCompaction] = ()) -> None:
        """Our events and, first (they happened in the source, before it was imported), the
        compactions the source recorded, in the source's order."""
        self.beginResetModel()
        ordered = sorted(sources, key=lambda c: ((c.after_message_id or 0), c.id))
        self._rows = [*ordered, *events]
        self.endResetModel()

    def events(self) -> list[CompactionEvent]:
        """Our engine's events only (the source's compactions are not events)."""
        return [e for e in self._rows if isinstance(e, CompactionEvent)]

    def sources(self) -> list[SourceCompaction]:
        return [e for e in self._rows if isinstance(e, SourceCompaction)]

    def row_of(self, event_id: int) -> int | None:
        """The row of our event ``event_id`` (None: not listed)."""
        return next((i for i, e in enumerate(self._rows) if isinstance(e, CompactionEvent) and e.id == event_id), None)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        e = self._rows[index.row()]
        col = index.column()
        if isinstance(e, SourceCompaction):
            return self._source_data(e, col, role)
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_TIME:
                return e.created_at.strftime("%H:%M:%S") if e.created_at is not None else "–"
            if col == COL_KIND:
                return f"{e.kind}\n{e.trigger}" if e.trigger else e.kind
            try:
                return event_detail(e)
            except Exception:  # noqa: BLE001 - a data shape nobody planned for is shown raw, not raised into Qt
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

    def _source_data(self, c: SourceCompaction, col: int, role: int) -> Any:
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_TIME:
                return _source_time(c)[0]
            if col == COL_KIND:
                kind = f"{source_name(c)}\n{'prune' if c.kind == 'prune' else 'compaction'}"  # two short lines: the column is narrow
                return f"{kind}\n{c.trigger}" if c.trigger else kind
            try:
                return source_detail(c)
            except Exception:  # noqa: BLE001 - a data shape nobody planned for is shown raw, not raised into Qt
                return f"recorded by {c.source}"
        if role == SourceRole:
            return c
        if role == TargetRole:
            return c.after_message_id
        if role == Qt.ItemDataRole.ForegroundRole and col == COL_KIND:
            return QBrush(theme.color(KIND_TOKENS["prune" if c.kind == "prune" else "summary"]))
        if role == Qt.ItemDataRole.ToolTipRole:
            head = f"{source_kind(c)} · {_source_time(c)[1]} · recorded by {source_name(c)} (not by our engine; tokens as it counted them)"
            summary = f"\n\n{c.summary[:3000]}" if c.summary else ""
            return f"{head}\n{source_detail(c)}{summary}"
        return None
