"""The thread list's view (issue 26): a table, not a tree. A QTreeView lays out every row of its
model on each reset, insert or column change (a call into the Python model per row: 270 ms for
100,000 threads); a table asks only for the rows it paints. :meth:`ThreadTable.header` is the
horizontal header, as a tree's, so the layout and the tests read both alike.

Its columns (:meth:`ThreadTable.fit_columns`) are sized from the font and the list's width only,
never from the rows it holds: they do not move when the sort, the search or a refresh brings
other rows (a 7-digit message count, a pressure of 1,234% or a long source name fit whichever
rows are on screen)."""

from __future__ import annotations

from typing import Iterable

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QProxyStyle, QStyle, QStyleOption, QTableView, QWidget

from ..models.threads import COL_GENERATION, COL_MESSAGES, COL_PRESSURE, COL_SOURCE, COL_STATE, COLUMNS, SHORT_COLUMNS, ThreadListModel

#: the widest text each figure column shows, written as the model writes it (thousands separators)
WIDEST_FIGURES: dict[int, tuple[str, ...]] = {
    COL_MESSAGES: ("9,999,999",),
    COL_PRESSURE: ("999.9%", "9,999%"),  # figures.percent: a tenth below 1000%, whole from there on
    COL_GENERATION: ("9,999",),
}
#: what a pill adds to its text: its padding and the cell's margins (``widgets.delegates``)
PILL_EXTRA = 20
#: a figure's cell margins
FIGURE_EXTRA = 10
#: the State column as a dot in its colour (a narrow list: the delegate draws it in 18 px and the cell margins)
DOT_WIDTH = 26


class HeadingStyle(QProxyStyle):
    """The list's headings with no resize grip: ``QHeaderView`` takes a press within
    ``PM_HeaderGripMargin`` (4 px) of a section's edge for its resize handle, and does not
    emit a click there even when neither section can be resized by hand. The list's columns are
    sized by :meth:`ThreadTable.fit_columns` only (stretch or fixed), so there is nothing to
    drag, and a narrow heading ("%", about 60 px with its text at its left edge) lost 7 px of its
    sign to its neighbour's edge: a click on it sorted nothing. With no grip every pixel of a
    heading is its own."""

    def pixelMetric(self, metric: QStyle.PixelMetric, option: QStyleOption | None = None, widget: QWidget | None = None) -> int:  # noqa: N802 (Qt name)
        if metric == QStyle.PixelMetric.PM_HeaderGripMargin:
            return 0
        return super().pixelMetric(metric, option, widget)


class ThreadTable(QTableView):
    """Rows of one line, selected whole, no grid, no row numbers."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.setCornerButtonEnabled(False)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerItem)
        rows = self.verticalHeader()
        rows.hide()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        head = self.horizontalHeader()
        head.setHighlightSections(False)
        self._heading_style = HeadingStyle()  # kept: a widget does not own its style
        self._heading_style.setParent(self)
        head.setStyle(self._heading_style)  # every pixel of a heading sorts (no resize grip at its edges)
        head.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self._fit_rows()

    def header(self) -> QHeaderView:
        """The column headings (what ``QTreeView.header`` is)."""
        return self.horizontalHeader()

    def thread_model(self) -> ThreadListModel | None:
        model = self.model()
        source = getattr(model, "sourceModel", lambda: model)()
        return source if isinstance(source, ThreadListModel) else None

    def room(self) -> int:
        """The width the columns share: the viewport's with a vertical scroll bar (whether one is
        shown or not: a search that leaves a few rows does not change the columns)."""
        bar = 0 if self.verticalScrollBar().isVisible() else self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        return self.viewport().width() - bar

    def heading_width(self, col: int, *, narrow: bool | None = None) -> int:
        """The width column ``col``'s heading needs whole (the style sheet draws headings
        semi-bold); ``narrow``: its short heading (None: the one shown)."""
        font = QFont(self.header().font())
        font.setWeight(QFont.Weight.DemiBold)
        if narrow is None:
            text = self.model().headerData(col, Qt.Orientation.Horizontal) if self.model() is not None else ""
        else:
            text = (SHORT_COLUMNS if narrow else COLUMNS)[col]
        return QFontMetrics(font).horizontalAdvance(str(text or "")) + 16

    def fit_columns(self, badges: Iterable[str], short_badges: Iterable[str]) -> None:
        """Every column but the title's sized from the font and the list's width (never from the
        rows held). ``badges``: every Source badge the list may show, ``short_badges`` their short
        forms. When the title would get less than about a third of the list (140 to 240 px), the
        list is narrow: short Source badges, the State as a dot, short headings ("Src", "%")
        whose tooltips say the rest; the title keeps the room and elides in the middle."""
        fm = QFontMetrics(self.font())
        room = self.room()
        badges, short_badges = list(badges) or ["OpenHands"], list(short_badges) or ["SWE"]
        widths = self._widths(fm, badges, short_badges, narrow=False)
        shown = sum(w for c, w in widths.items() if not self.isColumnHidden(c))
        narrow = room - shown < min(240, max(140, 0.36 * room))
        if narrow:
            widths = self._widths(fm, badges, short_badges, narrow=True)
        model = self.thread_model()
        if model is not None:
            model.set_narrow(narrow)
        header = self.header()
        for col, width in widths.items():
            if header.sectionSize(col) != width and not self.isColumnHidden(col):
                header.resizeSection(col, width)

    def width_for_title(self, chars: int, badges: Iterable[str], short_badges: Iterable[str]) -> int:
        """The view's width at which its title column shows about ``chars`` characters of the
        font beside the other columns at their narrowest (short badges, the State a dot) and a
        vertical scroll bar. Of Source and Gen the wider counts: the list shows one of them
        (Source when the store holds imported sessions), and which is not known before a database opens."""
        fm = QFontMetrics(self.font())
        badges, short_badges = list(badges) or ["OpenHands"], list(short_badges) or ["SWE"]
        widths = self._widths(fm, badges, short_badges, narrow=True)
        either = (COL_SOURCE, COL_GENERATION)
        others = sum(w for c, w in widths.items() if c not in either and not self.isColumnHidden(c)) + max(widths[c] for c in either)
        bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        return fm.averageCharWidth() * chars + FIGURE_EXTRA + others + bar + 2 * self.frameWidth()

    def _widths(self, fm: QFontMetrics, badges: list[str], short_badges: list[str], *, narrow: bool) -> dict[int, int]:
        widths = {col: max(fm.horizontalAdvance(t) for t in texts) + FIGURE_EXTRA for col, texts in WIDEST_FIGURES.items()}
        if narrow:
            widths[COL_SOURCE] = max(fm.horizontalAdvance(b) for b in short_badges) + PILL_EXTRA
            widths[COL_STATE] = DOT_WIDTH
        else:
            widths[COL_SOURCE] = max(fm.horizontalAdvance(b) for b in badges) + PILL_EXTRA
            widths[COL_STATE] = fm.horizontalAdvance("waiting") + PILL_EXTRA
        return {col: max(width, self.heading_width(col, narrow=narrow)) for col, width in widths.items()}  # the headings whole

    def _fit_rows(self) -> None:
        height = QFontMetrics(self.font()).height() + 5  # about a tree row: the text and the item padding
        if self.verticalHeader().defaultSectionSize() != height:
            self.verticalHeader().setMinimumSectionSize(height)
            self.verticalHeader().setDefaultSectionSize(height)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt name)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fit_rows()
