"""Painted pills for badges (token counts, markers, thread states): cheap, one line, no rich text.

A pill that does not fit its cell is never cut: the delegate draws the pills' short forms, then their
icons (or a dot in their colour), then as many as fit and ``+N``; the cell's tooltip then lists them
in full."""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QHelpEvent, QPainter, QPainterPath
from PySide6.QtWidgets import QAbstractItemView, QStyle, QStyledItemDelegate, QStyleOptionViewItem, QToolTip, QWidget

from .. import theme


class Pill(NamedTuple):
    """One badge: its words, its colour token, a shorter form and an icon for narrow cells."""

    text: str
    token: str
    short: str = ""
    icon: str = ""


#: the pills of one cell (plain (text, token) pairs are accepted too)
Pills = Sequence[Pill | tuple[str, str]]
_Index = QModelIndex | QPersistentModelIndex
_GAP = 4
_PAD = 12
_ICON = 14


def _pill(p: Pill | tuple[str, str]) -> Pill:
    return p if isinstance(p, Pill) else Pill(*p)


class PillDelegate(QStyledItemDelegate):
    """Paints each pill of ``pills_of(index)`` as a small rounded badge."""

    def __init__(self, pills_of: Callable[[_Index], Pills], parent: QWidget | None = None, *, align_right: bool = False) -> None:
        super().__init__(parent)
        self._pills_of = pills_of
        self._align_right = align_right

    def layout(self, fm: QFontMetrics, pills: Sequence[Pill], width: float) -> tuple[str, list[tuple[Pill, str, float]]]:
        """How the pills are drawn in ``width``: (mode, [(pill, shown text, pill width)]); mode is
        ``full``, ``short``, ``icons`` or ``cut`` (as many as fit, then a ``+N`` pill)."""
        def sized(texts: list[str]) -> list[tuple[Pill, str, float]]:
            return [(p, t, float(fm.horizontalAdvance(t) + _PAD)) for p, t in zip(pills, texts)]

        def total(items: list[tuple[Pill, str, float]]) -> float:
            return sum(w for _, _, w in items) + _GAP * max(0, len(items) - 1)

        full = sized([p.text for p in pills])
        if total(full) <= width:
            return "full", full
        short = sized([p.short or p.text for p in pills])
        if any(p.short for p in pills) and total(short) <= width:
            return "short", short
        icons = [(p, "", float(_ICON + 4)) for p in pills]
        if total(icons) <= width:
            return "icons", icons
        kept: list[tuple[Pill, str, float]] = []
        for item in icons:
            more = f"+{len(pills) - len(kept)}"
            if total(kept + [item]) + _GAP + fm.horizontalAdvance(more) + _PAD > width:
                break
            kept.append(item)
        rest = len(pills) - len(kept)
        return "cut", kept + [(Pill(f"+{rest}", "text_muted"), f"+{rest}", float(fm.horizontalAdvance(f"+{rest}") + _PAD))]

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: _Index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        style = opt.widget.style() if opt.widget else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        pills = [_pill(p) for p in self._pills_of(index)]
        if not pills:
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = QFontMetrics(opt.font)
        rect = QRectF(opt.rect).adjusted(4, 3, -4, -3)
        mode, items = self.layout(fm, pills, rect.width())
        total = sum(w for _, _, w in items) + _GAP * max(0, len(items) - 1)
        x = rect.right() - total if self._align_right else rect.left()
        for pill, text, w in items:
            color = QColor(getattr(theme.current(), pill.token, theme.current().text_muted))
            box = QRectF(x, rect.top(), w, rect.height())
            if text:
                fill = QColor(color)
                fill.setAlpha(40)
                path = QPainterPath()
                path.addRoundedRect(box, box.height() / 2, box.height() / 2)
                painter.fillPath(path, fill if pill.token != "badge_bg" else color)
                painter.setPen(color if pill.token != "badge_bg" else theme.color("text_muted"))
                painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
            elif pill.icon:
                token = pill.token if hasattr(theme.current(), pill.token) else "text_muted"
                icon = theme.icon(pill.icon, token if pill.token != "badge_bg" else "text_muted", _ICON)
                icon.paint(painter, box.adjusted(2, 0, -2, 0).toRect(), Qt.AlignmentFlag.AlignCenter)
            else:  # a dot in the pill's colour
                d = min(8.0, box.height())
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(color)
                painter.drawEllipse(QRectF(box.center().x() - d / 2, box.center().y() - d / 2, d, d))
            x += w + _GAP
        painter.restore()

    def helpEvent(self, event: QHelpEvent, view: QAbstractItemView, option: QStyleOptionViewItem, index: _Index) -> bool:  # noqa: N802
        """The pills in full when the cell shows them shortened (else the model's own tooltip)."""
        if event.type() == QEvent.Type.ToolTip and index.isValid():
            pills = [_pill(p) for p in self._pills_of(index)]
            if pills:
                rect = QRectF(option.rect).adjusted(4, 3, -4, -3)
                mode, _ = self.layout(QFontMetrics(option.font), pills, rect.width())
                if mode != "full":
                    own = index.data(Qt.ItemDataRole.ToolTipRole)
                    words = " · ".join(p.text for p in pills)
                    QToolTip.showText(event.globalPos(), f"{words}\n{own}" if own else words, view, option.rect)
                    return True
        return super().helpEvent(event, view, option, index)

    def shown(self, index: _Index, width: float, font_metrics: QFontMetrics) -> tuple[str, list[str]]:
        """(mode, texts drawn) of ``index`` in a cell ``width`` wide: what a test reads."""
        pills = [_pill(p) for p in self._pills_of(index)]
        mode, items = self.layout(font_metrics, pills, width - 8)
        return mode, [t or (p.icon or "dot") for p, t, _ in items]
