"""Before/after of one compaction (``Service.reads.compaction_diff``): the two surfaces as lines with what
happened to each message, and the tokens by category on both sides. Pure Qt item models, tested
without views."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from PySide6.QtCore import QAbstractListModel, QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush, QColor, QFont

from engine.core import figures
from engine.core.messages import META_PRUNED, Message, summary_message
from engine.core.views import DIFF_CATEGORIES, CompactionDiff, CompactionEntry

from .. import theme
from .timeline import message_preview

_Index = QModelIndex | QPersistentModelIndex

LineRole = Qt.ItemDataRole.UserRole + 1
StatusRole = Qt.ItemDataRole.UserRole + 2

#: what happened to a line, in words (the tag in front of it)
STATUS_TEXT: dict[str, str] = {
    "previous_summary": "previous summary → folded in",
    "summarized": "→ summary",
    "kept": "kept",
    "pruned": "pruned → preview",
    "preview": "preview",
    "summary": "new summary",
    "synthetic": "synthetic",
    "note": "ephemeral note",
}

#: the colour token of each status (text colour; the summary lines get a tint too)
STATUS_TONE: dict[str, str] = {
    "previous_summary": "cat_summary",
    "summarized": "cat_summary",
    "kept": "text",
    "pruned": "warn",
    "preview": "warn",
    "summary": "cat_summary",
    "synthetic": "text_muted",
    "note": "info",
}


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One message of a side, and what the compaction did to it (:data:`STATUS_TEXT`)."""

    message: Message
    status: str


def _status_of_after(m: Message, newly_pruned: set[int]) -> str:
    if m.metadata.get(META_PRUNED):
        return "pruned" if m.id in newly_pruned else "preview"
    if m.is_synthetic:
        return "synthetic"
    if m.is_ephemeral:
        return "note"
    return "kept"


def diff_lines(diff: CompactionDiff) -> tuple[list[DiffLine], list[DiffLine]]:
    """The before side (the previous summary, then the surface the model saw, each message marked
    as going into the summary, pruned to a preview, already a preview, or kept) and the after side
    (the new summary, then what the model sees now)."""
    summarized = {m.id for m in diff.summarized if m.id is not None}
    newly_pruned = {o.message_id for o in diff.pruned}
    before: list[DiffLine] = []
    if diff.previous_summary:
        before.append(DiffLine(summary_message(diff.previous_summary), "previous_summary"))
    for m in diff.before or (*diff.summarized, *diff.kept):
        if m.id is not None and m.id in summarized:
            status = "summarized"
        elif m.metadata.get(META_PRUNED):
            status = "preview"
        elif m.id is not None and m.id in newly_pruned:
            status = "pruned"
        elif m.is_synthetic:
            status = "synthetic"
        elif m.is_ephemeral:
            status = "note"
        else:
            status = "kept"
        before.append(DiffLine(m, status))
    after: list[DiffLine] = []
    if diff.summary:
        after.append(DiffLine(summary_message(diff.summary), "summary"))
    after += [DiffLine(m, _status_of_after(m, newly_pruned)) for m in (diff.after or diff.kept)]
    return before, after


def side_counts(lines: Sequence[DiffLine]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in lines:
        out[line.status] = out.get(line.status, 0) + 1
    return out


#: what a compaction's before / after figures are, by ``CompactionDiff.measured_by``
MEASURED_BY: dict[str, str] = {
    "compactor": "the envelope the compactor measured when it ran",
    "source": "the figures the source reported",
    "rebuilt": "our count of the rebuilt surfaces (nothing was recorded)",
}


def diff_tokens(diff: CompactionDiff) -> tuple[int | None, int | None]:
    """THE tokens before / after of a compaction (what the picker, the title and the table's total
    show): what was measured when it ran (``measured_*``), else the rebuilt totals."""
    if diff.measured_by is not None:
        return diff.measured_before, diff.measured_after
    return diff.tokens_before.get("total"), diff.tokens_after.get("total")


def dropped_total(dropped: object) -> int | None:
    """How many specifics were dropped in all (listed or not: the list is capped), or None."""
    if dropped is None:
        return None
    n = getattr(dropped, "dropped_count", None)
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    return len(getattr(dropped, "dropped", ()) or ())


def compaction_label(entry: CompactionEntry, total: int) -> str:
    """The picker's text of one compaction: ordinal, kind, trigger, tokens, where it comes from,
    how many specifics it dropped (all of them, not the capped list's length)."""
    parts = [f"#{entry.index} of {total}", entry.kind + (f" ({entry.trigger})" if entry.trigger else "")]
    if entry.tokens_before is not None and entry.tokens_after is not None:
        parts.append(f"{figures.tokens_change(entry.tokens_before, entry.tokens_after)} tok")
    if entry.origin != "engine":
        parts.append(f"recorded by {entry.origin}")
    if getattr(entry, "written_by", None):
        parts.append(str(entry.written_by))  # issue #28: who wrote the summary
    n = dropped_total(entry.dropped)
    if n:
        parts.append(f"{figures.count(n)} dropped")
    return " · ".join(parts)


class DiffSideModel(QAbstractListModel):
    """One side of the before/after view, one line per message, tagged with its status."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._lines: list[DiffLine] = []

    def set_lines(self, lines: Sequence[DiffLine]) -> None:
        self.beginResetModel()
        self._lines = list(lines)
        self.endResetModel()

    def lines(self) -> list[DiffLine]:
        return list(self._lines)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._lines)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._lines):
            return None
        line = self._lines[index.row()]
        m = line.message
        if role == Qt.ItemDataRole.DisplayRole:
            text = message_preview(m)
            ident = f"#{m.id} " if m.id is not None else ""
            return f"[{STATUS_TEXT.get(line.status, line.status)}] {ident}{text}"
        if role == LineRole:
            return line
        if role == StatusRole:
            return line.status
        if role == Qt.ItemDataRole.DecorationRole:
            return theme.icon("summary" if line.status in ("summary", "previous_summary") else ("system" if m.role == "system" else m.role), STATUS_TONE.get(line.status, "text_muted"))
        if role == Qt.ItemDataRole.ForegroundRole:
            return QBrush(theme.color(STATUS_TONE.get(line.status, "text")))
        if role == Qt.ItemDataRole.BackgroundRole and line.status in ("summary", "summarized", "previous_summary", "pruned"):
            tint = QColor(theme.color("cat_summary" if line.status != "pruned" else "warn"))
            tint.setAlpha(26 if line.status != "summary" else 48)
            return QBrush(tint)
        if role == Qt.ItemDataRole.FontRole and line.status == "summary":
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{STATUS_TEXT.get(line.status, line.status)}\n\n{m.content[:2000]}"
        return None


class DiffTokensModel(QAbstractTableModel):
    """Tokens by category (:data:`engine.core.views.DIFF_CATEGORIES`) before and after, and the change."""

    COLUMNS = ("Category", "Before", "After", "Change")

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[tuple[str, int | None, int | None]] = []
        self._measured_by: str | None = None

    #: the row of the rebuilt count, when it differs from the measured total
    REBUILT = "rebuilt (sum of the above)"

    def set_diff(self, diff: CompactionDiff | None) -> None:
        """The categories as rebuilt now; the ``total`` row is THE figure of the compaction
        (:func:`diff_tokens`), with the rebuilt sum above it when the two differ."""
        self.beginResetModel()
        self._measured_by = None
        if diff is None:
            self._rows = []
        else:
            names = [c for c in DIFF_CATEGORIES if (c in diff.tokens_before or c in diff.tokens_after) and c != "total"]
            names += sorted((set(diff.tokens_before) | set(diff.tokens_after)) - set(names) - {"total"})
            self._rows = [(c, diff.tokens_before.get(c), diff.tokens_after.get(c)) for c in names]
            rebuilt = (diff.tokens_before.get("total"), diff.tokens_after.get("total"))
            total = diff_tokens(diff)
            if total != rebuilt and rebuilt != (None, None):
                self._rows.append((self.REBUILT, *rebuilt))
            self._rows.append(("total", *total))
            self._measured_by = diff.measured_by
        self.endResetModel()

    def values(self) -> list[tuple[str, int | None, int | None]]:
        return list(self._rows)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole and 0 <= section < len(self.COLUMNS):
            return self.COLUMNS[section]
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        name, before, after = self._rows[index.row()]
        col = index.column()
        change = after - before if before is not None and after is not None else None
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return name
            value = (before, after, change)[col - 1]
            if value is None:
                return "–"
            return figures.signed(value) if col == 3 else figures.tokens(value)
        if role == Qt.ItemDataRole.ToolTipRole and name in ("total", self.REBUILT):
            if name == self.REBUILT:
                return "The categories above, counted now on the rebuilt surfaces (the source's own system prompt and tools, or the run's ephemeral notes, are not in them)"
            return "Tokens before / after: " + MEASURED_BY.get(self._measured_by or "rebuilt", MEASURED_BY["rebuilt"])
        if role == Qt.ItemDataRole.ForegroundRole and col > 0 and name == self.REBUILT:
            return QBrush(theme.color("text_muted"))
        if role == Qt.ItemDataRole.TextAlignmentRole and col > 0:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole and name == "total":
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ForegroundRole and col == 3 and change:
            return QBrush(theme.color("ok" if change < 0 else "warn"))
        return None
