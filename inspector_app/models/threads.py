"""The threads list: one row per conversation (a thin table model over ``ThreadInfo``).

An imported thread shows its source (``Claude Code``, ``Codex`` …) in the Source column; a
sub-agent's key is its parent's key + ``/<id>``, so the key order lists it right under its parent,
and its title is indented with ``↳``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from PySide6.QtCore import QAbstractTableModel, QIdentityProxyModel, QModelIndex, QPersistentModelIndex, Qt

from engine.core import figures
from engine.core.views import ThreadInfo

from ..logic.timeline.pages import source_badge, source_name

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
#: the headings of a narrow list (the State a dot); their tooltips say the whole name
SHORT_COLUMNS: tuple[str, ...] = ("Thread", "Src", "Msgs", "%", "Gen", "")
#: what each column holds, in its heading's tooltip
COLUMN_TIPS: tuple[str, ...] = (
    "The thread's title (its key when it has none); the full title and key in the row's tooltip",
    "The tool the thread was imported from", "Messages in the thread",
    "Pressure: the kept tokens of the thread's last measurement against its threshold", "The thread's compaction generation",
    "State: idle, running, waiting or queued",
)
COL_TITLE, COL_SOURCE, COL_MESSAGES, COL_PRESSURE, COL_GENERATION, COL_STATE = range(len(COLUMNS))
SUBAGENT_PREFIX = "↳ "
#: rows per page fetched, and about how many rows the model holds at most (issue 26)
PAGE = 200
CACHE_ROWS = 1_000
#: a row on screen whose page is on its way
LOADING = "Loading…"
#: the sorts a column heading maps to (``ThreadQuery.sort``); the others in the Filters menu
COLUMN_SORTS: dict[int, str] = {0: "title", 2: "messages", 3: "pressure", 5: "activity"}
SORT_LABELS: dict[str, str] = {
    "activity": "last activity", "pressure": "pressure", "compactions": "compactions", "messages": "messages", "title": "title", "key": "key",
}  # fmt: skip

_Index = QModelIndex | QPersistentModelIndex


def state_label(busy_reason: str | None) -> str:
    """The badge text for a thread state: idle / running / waiting / queued."""
    return STATE_LABELS.get(busy_reason, busy_reason or "idle")


class ThreadListModel(QAbstractTableModel):
    """The thread list as a window onto the store's (issue 26): :meth:`rowCount` is every thread
    the query matches (the M of "N of M"), and only the rows fetched are held (``_rows``, by row
    number): at most about :data:`CACHE_ROWS` around what is on screen, the rest dropped and
    fetched again when scrolled back to. A row not held yet reads as :data:`LOADING`.

    Where a page can be fetched from is kept as anchors: ``fwd[row]`` is the keyset cursor whose
    page starts at ``row`` (``fwd[0] = None``), ``bwd[row]`` the cursor of the reversed query whose
    page starts at ``row`` going up (``bwd[total - 1] = None``): the end of the list is one page
    away, like its start. The controller (:mod:`..controllers.thread_list`) fetches; the model
    only places what arrives. Pressures come with the rows (``ThreadInfo.kept_tokens /
    threshold``); a status measured for the open thread overrides its row's (:meth:`set_pressure`)."""

    COLUMNS = COLUMNS

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._total = 0
        self._rows: dict[int, ThreadInfo] = {}
        self._row_of: dict[str, int] = {}
        self.fwd: dict[int, str | None] = {0: None}
        self.bwd: dict[int, str | None] = {}
        self._pressure: dict[str, float | None] = {}
        #: the tokens and threshold behind ``_pressure`` (the pressure cell's tooltip)
        self._figures: dict[str, tuple[int | None, int | None]] = {}
        #: threads that could not be measured or read: why, in words (shown in the row)
        self._failed: dict[str, str] = {}
        #: a narrow list: the short headings (:data:`SHORT_COLUMNS`)
        self.narrow = False

    # -- data in -------------------------------------------------------------------------------
    def start(self, threads: Sequence[ThreadInfo], total: int, after: str | None) -> None:
        """A new list (another query or database): its first page and how many match."""
        self.beginResetModel()
        self._total = max(total, len(threads))
        self._rows, self._row_of = {}, {}
        self._pressure, self._figures, self._failed = {}, {}, {}
        self.fwd, self.bwd = {0: None}, ({self._total - 1: None} if self._total else {})
        self._put(0, list(threads), 1, after)
        self.endResetModel()

    def place(self, row: int, threads: Sequence[ThreadInfo], direction: int, after: str | None) -> None:
        """A page fetched from the anchor at ``row``: its threads at ``row, row + direction, …``;
        the cursor after it becomes the next anchor. Rows already held are replaced in place."""
        placed = self._put(row, list(threads), direction, after)
        if placed:
            self.dataChanged.emit(self.index(min(placed), 0), self.index(max(placed), len(COLUMNS) - 1))

    def _put(self, row: int, threads: list[ThreadInfo], direction: int, after: str | None) -> list[int]:
        placed = []
        for k, t in enumerate(threads):
            r = row + k * direction
            if not 0 <= r < self._total:
                break
            old = self._rows.get(r)
            if old is not None and self._row_of.get(old.key) == r:
                del self._row_of[old.key]
            stale = self._row_of.get(t.key)
            if stale is not None and stale != r:  # the list moved under us: the newest place wins
                self._rows.pop(stale, None)
            self._rows[r] = t
            self._row_of[t.key] = r
            placed.append(r)
        if after is not None and threads:
            nxt = row + len(threads) * direction
            (self.fwd if direction > 0 else self.bwd)[nxt] = after
        return placed

    def set_threads(self, threads: Sequence[ThreadInfo]) -> None:
        """The whole list as read (a list short enough to hold): rows updated, added or removed in
        place (see :meth:`replace_window`)."""
        threads = list(threads)
        if not self._rows:
            self.start(threads, len(threads), None)
            return
        self.replace_window(0, threads, len(threads), None)

    def replace_window(self, start: int, threads: Sequence[ThreadInfo], total: int, after: str | None) -> None:
        """The rows from ``start`` read again (the live refresh): threads gone are removed, new ones
        inserted where they belong, moved ones taken out and put back, changed rows told so, and
        the list grown or shrunk at its end to ``total``: the selection and the rows on screen stay
        where they are (nothing is reset). Rows held outside the window are dropped (they are
        fetched again when shown), and so are the anchors after it."""
        new = list(threads)
        end = start
        while end in self._rows:
            end += 1
        old = [self._rows[r].key for r in range(start, end)]
        for r in [r for r in self._rows if not start <= r < end]:
            self._drop(r)
        new_keys = {t.key for t in new}
        position = {t.key: i for i, t in enumerate(new)}
        stay = _stable([position[k] for k in old if k in new_keys])
        staying = {new[i].key for i in stay}
        row = end - 1
        while row >= start:  # gone or moved: contiguous runs, from the end
            if self._rows[row].key in staying:
                row -= 1
                continue
            last = row
            while row >= start and self._rows[row].key not in staying:
                row -= 1
            self._remove(row + 1, last)
        for i, t in enumerate(new):
            r = start + i
            held = self._rows.get(r)
            if held is not None and held.key == t.key:
                if held != t:
                    self._rows[r] = t
                    self.dataChanged.emit(self.index(r, 0), self.index(r, len(COLUMNS) - 1))
                continue
            self._insert(r, t)
        if total > self._total:
            self.beginInsertRows(QModelIndex(), self._total, total - 1)
            self._total = total
            self.endInsertRows()
        elif total < self._total and total >= start + len(new):
            self._remove(total, self._total - 1)
        self.fwd = {r: c for r, c in self.fwd.items() if r <= start}
        if after is not None:
            self.fwd[start + len(new)] = after
        self.bwd = {self._total - 1: None} if self._total else {}
        keys = set(self._row_of)
        self._pressure = {k: v for k, v in self._pressure.items() if k in keys}
        self._figures = {k: v for k, v in self._figures.items() if k in keys}
        self._failed = {k: v for k, v in self._failed.items() if k in keys}

    def _drop(self, row: int) -> None:
        t = self._rows.pop(row)
        if self._row_of.get(t.key) == row:
            del self._row_of[t.key]

    def _shift(self, at: int, by: int) -> None:
        """Held rows and anchors from ``at`` on move by ``by`` (rows inserted or removed)."""
        self._rows = {(r + by if r >= at else r): t for r, t in self._rows.items()}
        self._row_of = {t.key: r for r, t in self._rows.items()}
        self.fwd = {(r + by if r >= at else r): c for r, c in self.fwd.items()}
        self.bwd = {(r + by if r >= at else r): c for r, c in self.bwd.items()}

    def _remove(self, first: int, last: int) -> None:
        self.beginRemoveRows(QModelIndex(), first, last)
        for r in range(first, last + 1):
            if r in self._rows:
                self._drop(r)
        self._shift(last + 1, -(last - first + 1))
        self._total -= last - first + 1
        self.endRemoveRows()

    def _insert(self, row: int, t: ThreadInfo) -> None:
        self.beginInsertRows(QModelIndex(), row, row)
        self._shift(row, 1)
        self._total += 1
        self._rows[row] = t
        self._row_of[t.key] = row
        self.endInsertRows()

    def evict(self, first: int, last: int, keep: int = 0) -> int:
        """Drop held rows farthest from ``first..last`` (the rows on screen) until at most
        :data:`CACHE_ROWS` are held; ``keep``'s row (the selection) stays. Returns how many went."""
        over = len(self._rows) - CACHE_ROWS
        if over <= 0:
            return 0
        middle = (first + last) / 2
        far = sorted((r for r in self._rows if not (first - PAGE <= r <= last + PAGE) and r != keep), key=lambda r: -abs(r - middle))
        for r in far[:over]:
            self._drop(r)
        return min(over, len(far))

    def update_thread(self, info: ThreadInfo) -> None:
        """Refresh one row (after a live refresh or a compaction of that thread)."""
        row = self.row_of(info.key)
        if row is None:
            return
        held = self._rows[row]
        if held.kept_tokens is not None and info.kept_tokens is None:  # a header read keeps the list's figures
            info = replace(info, kept_tokens=held.kept_tokens, threshold=held.threshold, window=held.window)
        self._rows[row] = info
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    def set_pressure(self, key: str, ratio: float | None, tokens: int | None = None, threshold: int | None = None) -> None:
        """A thread's pressure as its status measured it (the open thread: the header's figure);
        ``tokens`` and ``threshold``: the figures behind it (the cell's tooltip)."""
        self._pressure[key] = ratio
        self._figures[key] = (tokens, threshold)
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

    def set_narrow(self, narrow: bool) -> None:
        """The short headings of a narrow list (the view decides: ``ThreadTable.fit_columns``)."""
        if narrow != self.narrow:
            self.narrow = narrow
            self.headerDataChanged.emit(Qt.Orientation.Horizontal, 0, len(COLUMNS) - 1)

    # -- queries -------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return self._total

    @property
    def held(self) -> int:
        """Rows held now (fetched and not dropped)."""
        return len(self._rows)

    def loaded(self, row: int) -> bool:
        return row in self._rows

    def missing(self, first: int, last: int) -> list[int]:
        return [r for r in range(max(0, first), min(last, self._total - 1) + 1) if r not in self._rows]

    def row_of(self, key: str) -> int | None:
        return self._row_of.get(key)

    def thread_at(self, row: int) -> ThreadInfo:
        return self._rows[row]

    def held_threads(self) -> list[ThreadInfo]:
        """The threads held, in row order."""
        return [self._rows[r] for r in sorted(self._rows)]

    def keys(self) -> list[str]:
        """The keys of the rows held, in row order."""
        return [self._rows[r].key for r in sorted(self._rows)]

    def pressure_of(self, t: ThreadInfo) -> float | None:
        if t.key in self._pressure:
            return self._pressure[t.key]
        return t.pressure if t.threshold else None  # no threshold known (no window): "–", as the header says

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802 (Qt name)
        return 0 if parent.isValid() else self._total

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802 (Qt name)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return (SHORT_COLUMNS if self.narrow else COLUMNS)[section]
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            sort = COLUMN_SORTS.get(section)
            tip = COLUMN_TIPS[section]
            return f"{tip}\nSort by {SORT_LABELS[sort]} (the database sorts; click again to reverse)" if sort else tip
        return None

    # -- Qt model ------------------------------------------------------------------------------
    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        t = self._rows.get(index.row())
        col = index.column()
        if t is None:
            return (LOADING if col == COL_TITLE else "") if role == Qt.ItemDataRole.DisplayRole else None
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(t, col)
        if role == ThreadRole:
            return t
        if role == KeyRole:
            return t.key
        if role == StateRole:
            return state_label(t.busy_reason)
        if role == PressureRole:
            return self.pressure_of(t)
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
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_PRESSURE:
            return self._pressure_tip(t)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_MESSAGES, COL_PRESSURE, COL_GENERATION):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _pressure_tip(self, t: ThreadInfo) -> str:
        """What the pressure cell's figure is measured against: the tokens and threshold behind it."""
        kept, threshold = self._figures.get(t.key, (t.kept_tokens, t.threshold))
        if kept is None or not threshold:
            return "Pressure unknown: the thread has no measurement with a threshold yet"
        return (f"{figures.percent(self.pressure_of(t))} of threshold: {kept:,} / {threshold:,} tokens"
                " (the thread's last measurement; the header says where its threshold came from)")

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
            return figures.percent(self.pressure_of(t))  # the header's and the gauge's figure (floored: 84.96% reads 84.9%)
        if col == COL_GENERATION:
            return str(t.generation)
        return state_label(t.busy_reason)


class ThreadListProxy(QIdentityProxyModel):
    """What the list view shows: the model as it is (the database filters and sorts)."""


def _stable(positions: list[int]) -> set[int]:
    """The longest increasing run of ``positions`` (new positions of the kept rows, in their old
    order): those rows stay put, the others are taken out and inserted again where they belong."""
    import bisect

    tails: list[int] = []
    tail_at: list[int] = []
    back: list[int] = [-1] * len(positions)
    for i, p in enumerate(positions):
        j = bisect.bisect_left(tails, p)
        if j == len(tails):
            tails.append(p)
            tail_at.append(i)
        else:
            tails[j] = p
            tail_at[j] = i
        back[i] = tail_at[j - 1] if j else -1
    out: set[int] = set()
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        out.add(positions[i])
        i = back[i]
    return out
