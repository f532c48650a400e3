"""Custom-painted pressure widgets: the gauge (envelope vs threshold and window, the 85% hint line,
the breakdown by category) and the per-turn pressure chart with compaction markers."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QMouseEvent, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QVBoxLayout, QWidget

from engine.core import figures
from engine.core.views import PressurePoint, PressureStatus

from ... import theme
from ...logic.pressure_text import HINT_RATIO, HINT_TEXT, PressureView, numbers_text, pressure_view, source_tooltip, window_text, window_tooltip

__all__ = ["CATEGORIES", "HINT_RATIO", "HINT_TEXT", "PressureChart", "PressureGauge", "legend_layout", "measuring_text"]

CATEGORIES: tuple[str, ...] = ("system", "tools", "summary", "user", "assistant", "tool_results")
CATEGORY_LABELS = {"tool_results": "tool results"}
_MARK_LETTERS = {"prune": "P", "summary": "S", "manual": "M", "overflow": "O", "recorded": "R"}
LEGEND_ROW = 20.0
SWATCH = 16.0  # the colour square and its gap before the text


def legend_layout(texts: list[str], width: float, advance: Any) -> tuple[int, list[QRectF]]:
    """Columns (3, 2 or 1) and the text rectangle of each legend entry, so that every text fits
    its rectangle (``advance(text)`` is its width in pixels): six- and seven-digit counts are never
    cut. Rectangles are relative to the legend's top-left corner."""
    for cols in (3, 2, 1):
        col_w = width / cols
        if all(advance(t) <= col_w - SWATCH - 2 for t in texts) or cols == 1:
            rects = [QRectF((i % cols) * col_w + SWATCH, (i // cols) * LEGEND_ROW, col_w - SWATCH - 2, LEGEND_ROW - 2) for i in range(len(texts))]
            return cols, rects
    raise AssertionError("unreachable")


def measuring_text(counted: int, total: int | None) -> str:
    """The words of a cold measurement in progress: ``measuring pressure: 300 of 1,200 messages
    counted`` (``total`` unknown: the count alone)."""
    if total is None:
        return f"measuring pressure: {counted:,} messages counted"
    return f"measuring pressure: {counted:,} of {max(total, counted):,} messages counted"


def _category_color(category: str) -> QColor:
    return theme.color(f"cat_{category}") if hasattr(theme.current(), f"cat_{category}") else theme.color("text_muted")


#: the height of a row of the gauge's line labels, and how many rows the gauge has room for (a
#: second row is used when labels would overlap; :meth:`PressureGauge.sizeHint` counts them)
LABEL_ROW = 16
LABEL_ROWS = 2


def label_boxes(
    marks: Sequence[tuple[float, str, bool]], advance: Callable[[str], float], left: float, right: float, top: float
) -> list[tuple[float, float, float]]:
    """Where each line label goes, as (x, y, width): beside its line at x (right of it, or left
    when the mark asks), on the other side when the widget ends first, a row lower when it would
    cover a label placed before it (at most :data:`LABEL_ROWS` rows; the last row when none is
    clear). Qt-free, so testable without a view."""
    placed: list[tuple[float, float, float]] = []

    def clear(box: tuple[float, float, float]) -> bool:
        x, y, w = box
        return all(x + w <= ox or ox + ow <= x or y + LABEL_ROW <= oy or oy + LABEL_ROW <= y for ox, oy, ow in placed)

    for x, text, on_left in marks:
        width = advance(text)
        sides = [x - 3 - width, x + 3] if on_left else [x + 3, x - 3 - width]
        fits = [sx for sx in sides if left <= sx and sx + width <= right] or sides[:1]
        options = [(sx, top + row * LABEL_ROW, width) for row in range(LABEL_ROWS) for sx in fits]
        placed.append(next((box for box in options if clear(box)), options[-1]))
    return placed


class PressureGauge(QWidget):
    """Envelope tokens against the threshold and the context window, with the 85% hint line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pressureGauge")
        self._status: PressureStatus | None = None
        self._blocked: str | None = None
        self._progress: tuple[int, int | None] | None = None  # (counted, total) of a measurement under way
        self.setMinimumHeight(250)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(360, 234 + LABEL_ROWS * LABEL_ROW)  # one row of line labels, and room for a second (label_boxes)

    def set_status(self, status: PressureStatus | None, blocked: str | None = None) -> None:
        """``blocked``: why compaction cannot bring the thread down (the "cannot compact" state).
        Replaces a progress shown by :meth:`show_progress`."""
        self._status = status
        self._blocked = blocked
        self._progress = None
        self.setToolTip(self._tooltip())
        self.update()

    def show_progress(self, counted: int, total: int | None) -> None:
        """A cold measurement under way: ``counted`` of ``total`` messages (the thread's message
        count; None: unknown), drawn as a determinate bar with :func:`measuring_text` until
        :meth:`set_status` brings the result."""
        self._progress = (counted, total)
        self.setToolTip(measuring_text(counted, total))
        self.update()

    @property
    def progress(self) -> tuple[int, int | None] | None:
        """(counted, total) of the measurement shown under way, None when none is."""
        return self._progress

    @property
    def progress_text(self) -> str | None:
        return measuring_text(*self._progress) if self._progress is not None else None

    @property
    def view(self) -> PressureView | None:
        """The state shown and its words."""
        return pressure_view(self._status, self._blocked) if self._status is not None else None

    def legend_texts(self) -> list[str]:
        s = self._status
        return [f"{CATEGORY_LABELS.get(c, c)}  {figures.tokens(s.breakdown.get(c, 0) if s else 0)}" for c in CATEGORIES]

    def legend(self) -> tuple[int, list[QRectF]]:
        """The legend's columns and text rectangles at the current width (see :func:`legend_layout`)."""
        metrics = QFontMetrics(self.font())
        return legend_layout(self.legend_texts(), self.width() - 24, metrics.horizontalAdvance)

    @property
    def status(self) -> PressureStatus | None:
        return self._status

    @property
    def hint_active(self) -> bool:
        """Whether the 85% hint is shown: from 85.0% up to (not including) 100% of the threshold."""
        view = self.view
        return view is not None and view.state == "hint"

    def _tooltip(self) -> str:
        s = self._status
        if s is None:
            return ""
        lines = [f"{s.tokens:,} tokens in the envelope", f"threshold {s.threshold:,} · {window_text(s)}", f"hint line {int(s.threshold * HINT_RATIO):,} (display only)"]
        if s.anchored_tokens is not None:
            lines.append(f"anchored to provider usage: {s.anchored_tokens:,}")
        lines.append(window_tooltip(s))
        if s.basis == "source":  # an imported thread: how its source's figure was made, ours beside it
            lines.append(source_tooltip(s) or "")
        return "\n".join(lines)

    def paintEvent(self, _event: object) -> None:  # noqa: N802 (Qt name)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(12, 10, -12, -10)
        s = self._status
        base = QFont(self.font())
        if self._progress is not None:
            self._paint_progress(p, rect, base, *self._progress)
            return
        if s is None:
            p.setPen(theme.color("text_muted"))
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, "No thread selected")
            return
        # headline
        big = QFont(base)
        big.setPointSizeF(base.pointSizeF() * 1.5)
        big.setWeight(QFont.Weight.DemiBold)
        p.setFont(big)
        view = pressure_view(s, self._blocked)
        p.setPen(theme.color(view.tone))
        headline = view.headline
        while QFontMetrics(big).horizontalAdvance(headline) > rect.width() and big.pointSizeF() > base.pointSizeF():
            big.setPointSizeF(big.pointSizeF() - 0.5)  # a long state's headline shrinks rather than being cut
        p.setFont(big)
        p.drawText(QRectF(rect.left(), rect.top(), rect.width(), 26), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, headline)
        p.setFont(base)
        p.setPen(theme.color("text_muted"))
        numbers = numbers_text(s)
        # beside the headline when both fit, else on a line of their own
        fits = QFontMetrics(big).horizontalAdvance(headline) + QFontMetrics(base).horizontalAdvance(numbers) + 16 <= rect.width()
        dy = 0.0 if fits else 20.0
        numbers_row = QRectF(rect.left(), rect.top(), rect.width(), 26) if fits else QRectF(rect.left(), rect.top() + 24, rect.width(), 20)
        numbers = QFontMetrics(base).elidedText(numbers, Qt.TextElideMode.ElideRight, int(numbers_row.width()))  # all of it in the tooltip
        p.drawText(numbers_row, (Qt.AlignmentFlag.AlignRight if fits else Qt.AlignmentFlag.AlignLeft) | Qt.AlignmentFlag.AlignVCenter, numbers)

        # the bar: full width = the context window
        bar = QRectF(rect.left(), rect.top() + 36 + dy, rect.width(), 18)
        window = max(s.context_window, s.threshold, s.tokens, 1)
        scale = bar.width() / window
        clip = QPainterPath()
        clip.addRoundedRect(bar, 4, 4)
        p.fillPath(clip, theme.color("surface_alt"))
        p.save()
        p.setClipPath(clip)
        x = bar.left()
        total = sum(max(0, s.breakdown.get(c, 0)) for c in CATEGORIES)
        # categories fill the measured tokens proportionally (the meter's breakdown)
        for cat in CATEGORIES:
            share = max(0, s.breakdown.get(cat, 0))
            if not share or not total:
                continue
            w = s.tokens * scale * share / total
            p.fillRect(QRectF(x, bar.top(), w, bar.height()), _category_color(cat))
            x += w
        if not total:
            p.fillRect(QRectF(x, bar.top(), s.tokens * scale, bar.height()), theme.color("accent"))
        p.restore()
        p.setPen(QPen(theme.color("border"), 1))
        p.drawPath(clip)

        # threshold and hint lines
        tx = bar.left() + s.threshold * scale
        hx = bar.left() + s.threshold * HINT_RATIO * scale
        hot = view.state == "hint"
        if s.window_known:  # no window known (an imported session's): no threshold to draw
            p.setPen(QPen(theme.color("danger"), 2))
            p.drawLine(QPointF(tx, bar.top() - 5), QPointF(tx, bar.bottom() + 5))
            hint_pen = QPen(theme.color("warn"), 3 if hot else 1.5, Qt.PenStyle.SolidLine if hot else Qt.PenStyle.DashLine)
            p.setPen(hint_pen)
            p.drawLine(QPointF(hx, bar.top() - 5), QPointF(hx, bar.bottom() + 5))
        small = QFont(base)
        small.setPointSizeF(base.pointSizeF() * 0.85)
        p.setFont(small)
        label_y = bar.bottom() + 6
        marks = [(hx, "85% hint", True, theme.color("text_muted")), (tx, "threshold", False, theme.color("danger"))] if s.window_known else []
        if s.context_window and s.tokens > s.context_window:  # the bar is longer than the window: mark where it ends
            wx = bar.left() + s.context_window * scale
            p.setPen(QPen(theme.color("text"), 2, Qt.PenStyle.DotLine))
            p.drawLine(QPointF(wx, bar.top() - 5), QPointF(wx, bar.bottom() + 5))
            marks.append((wx, "window", False, theme.color("text")))
        metrics = QFontMetrics(small)
        boxes = label_boxes([(x, text, left) for x, text, left, _ in marks], lambda t: metrics.horizontalAdvance(t) + 2, rect.left(), rect.right(), label_y)
        for (_, text, _, color), (bx, by, bw) in zip(marks, boxes):
            p.setPen(color)
            p.drawText(QRectF(bx, by, bw, LABEL_ROW), Qt.AlignmentFlag.AlignLeft, text)
        label_y = max((by for _, by, _ in boxes), default=label_y)  # the lowest row of labels

        y = label_y + 22
        if view.shown:  # the state's words: the hint (85-100%), over the threshold / window, cannot compact
            p.setFont(base)
            flags = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap
            need = QFontMetrics(base).boundingRect(QRectF(0, 0, rect.width() - 16, 200).toRect(), int(flags), view.text).height()
            box = QRectF(rect.left(), y, rect.width(), max(22, need + 6))
            path = QPainterPath()
            path.addRoundedRect(box, 4, 4)
            fill = theme.color(view.tone)
            fill.setAlpha(40)
            p.fillPath(path, fill)
            p.setPen(theme.color(view.tone))
            p.drawText(box.adjusted(8, 0, -8, 0), flags, view.text)
            y += box.height() + 8

        # breakdown legend: three columns when the counts fit, else two or one
        p.setFont(base)
        _cols, rects = legend_layout(self.legend_texts(), rect.width(), QFontMetrics(base).horizontalAdvance)
        for cat, text, r in zip(CATEGORIES, self.legend_texts(), rects):
            cell = r.translated(rect.left(), y)
            p.fillRect(QRectF(cell.left() - SWATCH, cell.top() + 4, 10, 10), _category_color(cat))
            p.setPen(theme.color("text"))
            p.drawText(cell, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, text)


    def _paint_progress(self, p: QPainter, rect: QRectF, base: QFont, counted: int, total: int | None) -> None:
        """The measurement under way: a headline, a bar filled to ``counted / total``, the words."""
        big = QFont(base)
        big.setPointSizeF(base.pointSizeF() * 1.5)
        big.setWeight(QFont.Weight.DemiBold)
        p.setFont(big)
        p.setPen(theme.color("text"))
        p.drawText(QRectF(rect.left(), rect.top(), rect.width(), 26), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, "Measuring pressure…")
        bar = QRectF(rect.left(), rect.top() + 36, rect.width(), 18)
        clip = QPainterPath()
        clip.addRoundedRect(bar, 4, 4)
        p.fillPath(clip, theme.color("surface_alt"))
        if total:
            p.save()
            p.setClipPath(clip)
            p.fillRect(QRectF(bar.left(), bar.top(), bar.width() * min(1.0, counted / total), bar.height()), theme.color("accent"))
            p.restore()
        p.setPen(QPen(theme.color("border"), 1))
        p.drawPath(clip)
        p.setFont(base)
        p.setPen(theme.color("text_muted"))
        flags = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextWordWrap
        p.drawText(QRectF(rect.left(), bar.bottom() + 8, rect.width(), 40), flags, measuring_text(counted, total))


class PressureChart(QWidget):
    """Tokens per recorded model request, the next turn's envelope, the threshold, the hint line and
    compaction markers. Clicking a request's point emits :attr:`pointClicked` (the replay pane goes
    to that request); the chosen point is drawn ringed."""

    #: a request's point was clicked: (its 0-based position in :meth:`points`, the PressurePoint)
    pointClicked = Signal(int, object)
    #: :meth:`set_points` replaced the points
    pointsChanged = Signal()

    #: how far (pixels, along x) from a point a click still picks it
    HIT_RADIUS = 14.0

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pressureChart")
        self._points: list[PressurePoint] = []
        self._status: PressureStatus | None = None
        self._selected: int | None = None
        self.setMinimumHeight(170)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(360, 200)

    def set_points(self, points: Sequence[PressurePoint]) -> None:
        self._points = list(points)
        self._selected = None
        self.update()
        self.pointsChanged.emit()

    def selected(self) -> int | None:
        """The position of the ringed point (the request shown in the replay pane), if any."""
        return self._selected

    def set_selected(self, index: int | None) -> None:
        self._selected = index if index is not None and 0 <= index < len(self._points) else None
        self.update()

    def _geometry(self) -> tuple[QRectF, float, Callable[[int], float], Callable[[float], float]] | None:
        """The plot area, its top value and the x / y of a point (None: nothing to draw)."""
        outer = QRectF(self.rect()).adjusted(12, 8, -12, -8)
        nxt = self._status.tokens if self._status is not None else None
        values = [pt.tokens for pt in self._points] + ([nxt] if nxt is not None else [])
        if not values:
            return None
        area = QRectF(outer.left() + 44, outer.top() + 30, outer.width() - 50, outer.height() - 68)
        top = max(max(values), self.threshold()) * 1.1 or 1
        n = len(values)
        step = area.width() / max(n - 1, 1)

        def x_of(i: int) -> float:
            return area.left() + (i * step if n > 1 else area.width() / 2)

        def y_of(v: float) -> float:
            return area.bottom() - v / top * area.height()

        return area, top, x_of, y_of

    def point_at(self, pos: QPointF) -> int | None:
        """The request's point nearest to ``pos`` along x, within :attr:`HIT_RADIUS` (None: none)."""
        geometry = self._geometry()
        if geometry is None or not self._points:
            return None
        area, _top, x_of, _y = geometry
        if not (area.top() - 20 <= pos.y() <= area.bottom() + 20):
            return None
        best = min(range(len(self._points)), key=lambda i: abs(x_of(i) - pos.x()))
        return best if abs(x_of(best) - pos.x()) <= max(self.HIT_RADIUS, (x_of(1) - x_of(0)) / 2 if len(self._points) > 1 else 0) else None

    def point_position(self, index: int) -> QPointF:
        """Where point ``index`` is drawn (for tests and tooltips)."""
        geometry = self._geometry()
        assert geometry is not None
        _area, _top, x_of, y_of = geometry
        return QPointF(x_of(index), y_of(self._points[index].tokens))

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt name)
        if event.button() == Qt.MouseButton.LeftButton:
            index = self.point_at(event.position())
            if index is not None:
                self.set_selected(index)
                self.pointClicked.emit(index, self._points[index])
                event.accept()
                return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt name)
        index = self.point_at(event.position())
        if index is None:
            self.unsetCursor()
            self.setToolTip("")
        else:
            pt = self._points[index]
            self.setCursor(Qt.CursorShape.PointingHandCursor)
            mark = f" · after a {pt.compaction} compaction" if pt.compaction else ""
            self.setToolTip(f"Request {index + 1}: {pt.tokens:,} tokens{mark}\nClick to replay it")
        super().mouseMoveEvent(event)

    def set_status(self, status: PressureStatus | None) -> None:
        """The current status: its threshold (when requests did not record one) and the next turn."""
        self._status = status
        self.update()

    def points(self) -> list[PressurePoint]:
        return list(self._points)

    def threshold(self) -> int:
        """The threshold drawn: the highest one recorded with a request, else the current one."""
        recorded = max((pt.threshold or 0 for pt in self._points), default=0)
        return recorded or (self._status.threshold if self._status else 0)

    def paintEvent(self, _event: object) -> None:  # noqa: N802 (Qt name)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        outer = QRectF(self.rect()).adjusted(12, 8, -12, -8)
        p.setPen(theme.color("text_muted"))
        title = QRectF(outer.left(), outer.top(), outer.width(), 18)
        heading = "Recorded prompt per request, and the next turn" if self.imported() else "Envelope per model request, and the next turn"
        heading = QFontMetrics(self.font()).elidedText(heading, Qt.TextElideMode.ElideRight, int(title.width()))
        p.drawText(title, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, heading)
        nxt = self._status.tokens if self._status is not None else None
        geometry = self._geometry()
        if geometry is None:
            p.drawText(outer, Qt.AlignmentFlag.AlignCenter, "No model requests recorded")
            return
        area, top, x_of, y_of = geometry
        threshold = self.threshold()
        values = [pt.tokens for pt in self._points] + ([nxt] if nxt is not None else [])
        n = len(values)

        p.setPen(QPen(theme.color("border"), 1))
        p.drawLine(area.bottomLeft(), area.bottomRight())
        small = QFont(self.font())
        small.setPointSizeF(self.font().pointSizeF() * 0.85)
        p.setFont(small)
        p.setPen(theme.color("text_muted"))
        p.drawText(QRectF(outer.left(), area.top() - 8, 40, 16), Qt.AlignmentFlag.AlignRight, f"{top / 1000:.1f}k")
        p.drawText(QRectF(outer.left(), area.bottom() - 8, 40, 16), Qt.AlignmentFlag.AlignRight, "0")
        if threshold:
            for value, color, style, label in (
                (threshold, "danger", Qt.PenStyle.DashLine, f"threshold {threshold:,}"),
                (threshold * HINT_RATIO, "warn", Qt.PenStyle.DotLine, f"85% hint {int(threshold * HINT_RATIO):,}"),
            ):
                y = y_of(value)
                p.setPen(QPen(theme.color(color), 1.2, style))
                p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
                p.setPen(theme.color(color))
                p.drawText(QRectF(outer.left(), y - 8, 40, 16), Qt.AlignmentFlag.AlignRight, f"{value / 1000:.1f}k")
                p.drawText(QRectF(area.left() + 4, y - (17 if color == "danger" else -1), area.width() - 8, 16), Qt.AlignmentFlag.AlignLeft, label)

        for i, pt in enumerate(self._points):
            if pt.compaction:
                x = x_of(i)
                tone = "info" if pt.compaction == "recorded" else "cat_summary"  # the source's own vs ours
                p.setPen(QPen(theme.color(tone), 1.2, Qt.PenStyle.DotLine if pt.compaction == "recorded" else Qt.PenStyle.DashLine))
                p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()))
                p.setPen(theme.color(tone))
                p.drawText(QRectF(x - 8, area.top() - 18, 16, 16), Qt.AlignmentFlag.AlignCenter, _MARK_LETTERS.get(pt.compaction, "C"))

        path = QPainterPath()
        for i, v in enumerate(values):
            point = QPointF(x_of(i), y_of(v))
            path.moveTo(point) if i == 0 else path.lineTo(point)
        p.setPen(QPen(theme.color("accent"), 2))
        p.drawPath(path)
        p.setBrush(theme.color("accent"))
        for i, pt in enumerate(self._points):
            p.drawEllipse(QPointF(x_of(i), y_of(pt.tokens)), 2.5, 2.5)
        if self._selected is not None and self._selected < len(self._points):  # the request the replay pane shows
            at = QPointF(x_of(self._selected), y_of(self._points[self._selected].tokens))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(QPen(theme.color("text"), 1.5))
            p.drawEllipse(at, 6, 6)
            p.setBrush(theme.color("accent"))
        if nxt is not None:  # the next turn: hollow, in the hint colour when it is past the line
            hot = self._status is not None and self._status.hint  # at or past the hint line
            p.setBrush(theme.color("surface"))
            p.setPen(QPen(theme.color("warn" if hot else "accent"), 2))
            p.drawEllipse(QPointF(x_of(n - 1), y_of(nxt)), 4.5, 4.5)
            p.drawText(QRectF(x_of(n - 1) - 60, y_of(nxt) - 22, 56, 16), Qt.AlignmentFlag.AlignRight, "next turn")
        p.setPen(theme.color("text_muted"))
        p.drawText(QRectF(area.left() - 20, area.bottom() + 4, 40, 16), Qt.AlignmentFlag.AlignCenter, "1")
        if self._points:
            p.drawText(QRectF(x_of(len(self._points) - 1) - 20, area.bottom() + 4, 40, 16), Qt.AlignmentFlag.AlignCenter, str(len(self._points)))
        row = QRectF(outer.left(), area.bottom() + 20, outer.width(), 16)
        p.drawText(row, Qt.AlignmentFlag.AlignCenter, self.legend_text(QFontMetrics(small), row.width()))

    def legend_text(self, metrics: QFontMetrics, width: float) -> str:
        """The legend under the chart: the longest of its forms that fits ``width`` (the last elided)."""
        forms = (("request  ·  R the source's compaction  ·  P S M O ours", "R the source's  ·  P S M O ours", "R source · P S M O ours")
                 if self.imported() else ("request  ·  P prune  S summary  M manual  O overflow", "P prune  S summary  M manual  O overflow", "P S M O: prune summary manual overflow"))  # fmt: skip
        fitting = next((f for f in forms if metrics.horizontalAdvance(f) <= width), None)
        return fitting or metrics.elidedText(forms[-1], Qt.TextElideMode.ElideRight, int(width))

    def imported(self) -> bool:
        """The points are a source's recorded usage (an imported thread)."""
        return any(pt.origin == "imported" for pt in self._points)


class PressurePage(QWidget):
    """The Pressure tab's page: the gauge over the chart (issue 24: moved out of the window's layout)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.gauge = PressureGauge()
        self.chart = PressureChart()
        pl = QVBoxLayout(self)
        pl.setContentsMargins(4, 8, 4, 8)
        pl.addWidget(self.gauge)
        pl.addWidget(self.chart, 1)
        self.setObjectName("pressurePage")
