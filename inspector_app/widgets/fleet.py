"""The fleet view (issue 26): where compaction hurts across every thread of the store.

A window of its own (Compaction → Fleet overview…, Ctrl+Shift+F): the threads by pressure band,
compactions per day by kind and source, the specifics summaries dropped (how many per summary,
and the threads that lost the most), the summarizer's calls and cost, and the tokens compaction
saved. Every figure is one of ``FleetStats`` (computed by the database, off the GUI thread); the
charts are plain QPainter widgets. A click on a band filters the thread list to it; a click on a
worst thread opens it.
"""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QMouseEvent, QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.core import figures
from engine.core.views import FleetStats

from .. import theme
from ..logic.timeline.pages import source_name as format_name

#: the colour token of each pressure band
BAND_TOKENS = {"unknown": "text_muted", "below_50": "ok", "50_85": "info", "85_100": "warn", "over_100": "danger"}
#: the colours of the compactions-per-day series, in turn (distinct on light and dark)
#: the least height of the compactions-per-day bars (the chart grows for its legend's rows)
PLOT_MIN = 90
SERIES_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")


class BarChart(QWidget):
    """Horizontal bars, one per item (key, label, value, colour token); a click on a bar emits
    :attr:`clicked` with its key (when the chart is clickable)."""

    clicked = Signal(str)

    def __init__(self, name: str, *, clickable: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.items: list[tuple[str, str, int, str]] = []
        self.clickable = clickable
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        if clickable:
            self.setCursor(Qt.CursorShape.PointingHandCursor)

    def set_items(self, items: Sequence[tuple[str, str, int, str]]) -> None:
        self.items = list(items)
        self.updateGeometry()
        self.update()

    def row_height(self) -> int:
        return QFontMetrics(self.font()).height() + 8

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(320, max(1, len(self.items)) * self.row_height() + 4)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(200, self.sizeHint().height())

    def bar_rect(self, i: int) -> QRectF:
        fm = QFontMetrics(self.font())
        label_w = max((fm.horizontalAdvance(label) for _k, label, _v, _t in self.items), default=0) + 10
        value_w = max((fm.horizontalAdvance(figures.count(v)) for _k, _l, v, _t in self.items), default=0) + 10
        top = 2 + i * self.row_height()
        room = max(1.0, self.width() - label_w - value_w - 4)
        peak = max((v for _k, _l, v, _t in self.items), default=0) or 1
        return QRectF(label_w, top + 3, room * self.items[i][2] / peak, self.row_height() - 6)

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 (Qt name)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = QFontMetrics(self.font())
        text = theme.color("text")
        for i, (_key, label, value, token) in enumerate(self.items):
            bar = self.bar_rect(i)
            row = QRectF(0, bar.top() - 3, self.width(), self.row_height())
            p.setPen(text)
            p.drawText(QRectF(0, row.top(), bar.left() - 8, row.height()), int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), label)
            color = theme.color(token)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(color)
            p.drawRoundedRect(bar.adjusted(0, 0, 0, 0) if bar.width() >= 2 else QRectF(bar.left(), bar.top(), 2, bar.height()), 3, 3)
            p.setPen(text)
            p.drawText(QRectF(bar.right() + 6, row.top(), fm.horizontalAdvance(figures.count(value)) + 8, row.height()),
                       int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), figures.count(value))  # fmt: skip
        p.end()

    def key_at(self, y: float) -> str | None:
        i = int((y - 2) // self.row_height())
        return self.items[i][0] if 0 <= i < len(self.items) else None

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt name)
        key = self.key_at(event.position().y()) if self.clickable else None
        if key is not None:
            self.clicked.emit(key)
        super().mousePressEvent(event)


class DailyChart(QWidget):
    """Compactions per UTC day, stacked by series (kind · source), with a legend under it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fleetDaily")
        self.days: list[str] = []
        self.series: list[str] = []
        self.counts: dict[tuple[str, str], int] = {}
        self.setMinimumHeight(PLOT_MIN + 60)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def set_stats(self, stats: FleetStats) -> None:
        self.days = sorted({d.day for d in stats.per_day})
        self.series = sorted({series_name(d.kind, d.source) for d in stats.per_day})
        self.counts = {}
        for d in stats.per_day:
            k = (d.day, series_name(d.kind, d.source))
            self.counts[k] = self.counts.get(k, 0) + d.count
        self._fit_height()
        self.update()

    def _fit_height(self) -> None:
        """At least :data:`PLOT_MIN` for the bars above the dates and the legend's rows (the
        legend takes as many rows as the width needs)."""
        fm = QFontMetrics(self.font())
        legend = self.legend_rects()
        rows = self.height() - min((r.top() for _s, r in legend), default=self.height())
        need = int(PLOT_MIN + fm.height() * 1.5 + 10 + rows)
        if self.minimumHeight() != need:
            self.setMinimumHeight(need)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self._fit_height()

    def total(self, day: str) -> int:
        return sum(self.counts.get((day, s), 0) for s in self.series)

    def peak(self) -> int:
        return max((self.total(d) for d in self.days), default=0)

    def legend_rects(self) -> list[tuple[str, QRectF]]:
        """Each series' legend entry (its swatch and name), flowed under the chart in as many
        rows as the width needs, from the bottom of the widget up."""
        fm = QFontMetrics(self.font())
        rows: list[list[tuple[str, float]]] = [[]]
        x = 0.0
        for s in self.series:
            w = fm.horizontalAdvance(s) + 26
            if rows[-1] and x + w > self.width() - 4:
                rows.append([])
                x = 0.0
            rows[-1].append((s, w))
            x += w
        out: list[tuple[str, QRectF]] = []
        line = fm.height() + 2
        top = self.height() - 2 - len(rows) * line
        for r, row in enumerate(rows):
            x = 4.0
            for s, wide in row:
                out.append((s, QRectF(x, top + r * line, min(wide, self.width() - 4 - x), fm.height())))
                x += wide
        return out

    def plot_rect(self) -> QRectF:
        """Where the bars go: left of them the y-axis labels (as wide as the peak's figure), above
        them half a line (the peak's label is centred on the top), under them the first and last
        days, then the legend."""
        fm = QFontMetrics(self.font())
        label = max(fm.horizontalAdvance(figures.count(self.peak())), fm.horizontalAdvance("0")) + 8
        legend = self.legend_rects()
        bottom = (min(r.top() for _s, r in legend) if legend else self.height()) - fm.height() - 6
        top = fm.height() / 2 + 2
        return QRectF(label, top, max(1.0, self.width() - label - 6), max(1.0, bottom - top))

    def y_labels(self) -> list[tuple[str, QRectF]]:
        """The peak's figure at the top of the bars and 0 at their foot, each in a box that fits it."""
        fm = QFontMetrics(self.font())
        chart = self.plot_rect()
        width = chart.left() - 4
        half = fm.height() / 2
        return [(figures.count(self.peak()), QRectF(0, chart.top() - half, width, fm.height())),
                ("0", QRectF(0, chart.bottom() - half, width, fm.height()))]  # fmt: skip

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 (Qt name)
        p = QPainter(self)
        fm = QFontMetrics(self.font())
        text, muted = theme.color("text"), theme.color("text_muted")
        if not self.days:
            p.setPen(muted)
            p.drawText(self.rect(), int(Qt.AlignmentFlag.AlignCenter), "No compactions in this period")
            p.end()
            return
        chart = self.plot_rect()
        peak = self.peak() or 1
        p.setPen(muted)
        for label, rect in self.y_labels():
            p.drawText(rect, int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), label)
        p.drawLine(int(chart.left()), int(chart.bottom()), int(chart.right()), int(chart.bottom()))
        step = chart.width() / len(self.days)
        for i, day in enumerate(self.days):
            y = chart.bottom()
            for j, s in enumerate(self.series):
                h = chart.height() * self.counts.get((day, s), 0) / peak
                if h <= 0:
                    continue
                p.fillRect(QRectF(chart.left() + i * step + 1, y - h, max(1.0, step - 2), h), QColor(SERIES_COLORS[j % len(SERIES_COLORS)]))
                y -= h
        p.setPen(muted)
        p.drawText(QRectF(chart.left(), chart.bottom() + 2, 120, fm.height()), int(Qt.AlignmentFlag.AlignLeft), self.days[0])
        p.drawText(QRectF(chart.right() - 120, chart.bottom() + 2, 120, fm.height()), int(Qt.AlignmentFlag.AlignRight), self.days[-1])
        colors = {s: QColor(SERIES_COLORS[j % len(SERIES_COLORS)]) for j, s in enumerate(self.series)}
        for s, rect in self.legend_rects():
            p.fillRect(QRectF(rect.left(), rect.top() + 3, 10, fm.height() - 6), colors[s])
            p.setPen(text)
            p.drawText(rect.adjusted(14, 0, 0, 0), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), s)
        p.end()


def series_name(kind: str, source: str) -> str:
    """``summary · ours`` / ``prune · Claude Code``: a series of the compactions-per-day chart."""
    return f"{kind} · {'ours' if source == 'engine' else format_name(source)}"


def card(title: str, body: QWidget | None = None) -> tuple[QFrame, QVBoxLayout]:
    frame = QFrame()
    frame.setObjectName("fleetCard")
    frame.setFrameShape(QFrame.Shape.StyledPanel)
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(10, 8, 10, 8)
    heading = QLabel(title)
    heading.setObjectName("sectionTitle")
    layout.addWidget(heading)
    if body is not None:
        layout.addWidget(body, 1)
    return frame, layout


class FleetWindow(QWidget):
    """The fleet view: :meth:`show_loading`, then :meth:`set_stats` (or :meth:`show_error`)."""

    bandClicked = Signal(str)
    threadClicked = Signal(str)
    refreshRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setObjectName("fleetWindow")
        self.setWindowTitle("Fleet · Compaction Inspector")
        self.stats: FleetStats | None = None
        outer = QVBoxLayout(self)
        outer.setContentsMargins(10, 10, 10, 10)
        top = QHBoxLayout()
        self.headline = QLabel("")
        self.headline.setObjectName("fleetHeadline")
        self.headline.setWordWrap(True)
        top.addWidget(self.headline, 1)
        self.only_list = QCheckBox("Only the threads the list shows")
        self.only_list.setObjectName("fleetOnlyList")
        self.only_list.setToolTip("The figures over the threads the list's search and filters match (else over every thread)")
        self.only_list.toggled.connect(lambda _on: self.refreshRequested.emit())
        top.addWidget(self.only_list)
        self.refresh_button = QPushButton("Recompute")
        self.refresh_button.setObjectName("fleetRecompute")
        self.refresh_button.clicked.connect(self.refreshRequested.emit)
        top.addWidget(self.refresh_button)
        outer.addLayout(top)
        self.progress = QLabel("")
        self.progress.setObjectName("fleetProgress")
        outer.addWidget(self.progress)
        grid = QGridLayout()
        grid.setSpacing(8)
        self.bands = BarChart("fleetBands", clickable=True)
        self.bands.setToolTip("Click a band to show its threads in the list")
        self.bands.clicked.connect(self.bandClicked.emit)
        frame, _ = card("Threads by pressure (kept tokens of the threshold)", self.bands)
        grid.addWidget(frame, 0, 0)
        self.daily = DailyChart()
        frame, _ = card("Compactions per day, by kind and source", self.daily)
        grid.addWidget(frame, 0, 1, 2, 1)
        self.dropped = BarChart("fleetDropped")
        frame, _ = card("Specifics dropped per summary", self.dropped)
        grid.addWidget(frame, 1, 0)
        self.worst = QTreeWidget()
        self.worst.setObjectName("fleetWorst")
        self.worst.setHeaderLabels(["Thread", "Dropped", "Summaries", "Worst"])
        self.worst.setRootIsDecorated(False)
        head = self.worst.header()
        head.setStretchLastSection(False)
        head.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):
            head.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.worst.setAllColumnsShowFocus(True)
        self.worst.setToolTip("Click a thread to open it")
        self.worst.itemActivated.connect(self._open_item)
        self.worst.itemClicked.connect(self._open_item)
        frame, _ = card("Threads whose summaries dropped the most", self.worst)
        grid.addWidget(frame, 2, 0)
        self.money = QLabel("")
        self.money.setObjectName("fleetMoney")
        self.money.setWordWrap(True)
        self.money.setTextFormat(Qt.TextFormat.PlainText)
        self.money.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        frame, _ = card("What compaction saved and cost", self.money)
        grid.addWidget(frame, 2, 1)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)
        grid.setRowStretch(2, 1)
        outer.addLayout(grid, 1)
        self.resize(1100, 700)

    def show_loading(self, text: str) -> None:
        self.progress.setText(text)
        self.progress.setStyleSheet("")
        self.progress.show()
        self.refresh_button.setEnabled(False)

    def show_error(self, text: str) -> None:
        self.progress.setText(f"The fleet's figures could not be computed: {text}")
        self.progress.setStyleSheet(f"color: {theme.color('danger').name()};")
        self.refresh_button.setEnabled(True)

    def set_stats(self, stats: FleetStats, *, seconds: float | None = None) -> None:
        self.stats = stats
        took = f" (computed by the database in {seconds:.1f} s)" if seconds is not None else ""
        self.progress.setText(f"Over the last {figures.plural(stats.days, 'day')} up to {stats.until}{took}")
        self.progress.setStyleSheet("")
        self.refresh_button.setEnabled(True)
        self.headline.setText(
            f"{figures.plural(stats.threads, 'thread')} · {figures.count(stats.busy)} busy now · "
            f"{figures.plural(stats.compactions, 'compaction')} in {figures.plural(stats.days, 'day')}"
        )
        self.bands.set_items([(b.band, b.label, b.threads, BAND_TOKENS.get(b.band, "info")) for b in stats.bands])
        self.daily.set_stats(stats)
        self.dropped.set_items([(b.label, b.label, b.compactions, "warn") for b in stats.dropped_buckets])
        self.worst.clear()
        for t in stats.worst_threads:
            item = QTreeWidgetItem([t.title or t.key, figures.count(t.dropped), figures.count(t.compactions), figures.count(t.worst)])
            item.setData(0, Qt.ItemDataRole.UserRole, t.key)
            item.setToolTip(0, f"{t.title}\nkey: {t.key}")
            for col in (1, 2, 3):
                item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.worst.addTopLevelItem(item)
        cost = figures.money(stats.summarizer_cost, stats.currency) if stats.summarizer_cost is not None else "unknown (no price for its model)"
        self.money.setText(
            f"Tokens saved by our compactions: {figures.tokens(stats.tokens_saved)}\n"
            f"Summarizer calls: {figures.count(stats.summarizer_calls)}\n"
            f"Summarizer tokens: {figures.tokens(stats.summarizer_prompt_tokens)} in, {figures.tokens(stats.summarizer_completion_tokens)} out\n"
            f"Summarizer cost: {cost}"
        )

    def _open_item(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        key = item.data(0, Qt.ItemDataRole.UserRole)
        if key:
            self.threadClicked.emit(key)
