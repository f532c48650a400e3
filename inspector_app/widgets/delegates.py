"""Painted pills for badges (token counts, markers, thread states): cheap, one line, no rich text."""

from __future__ import annotations

from typing import Callable, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPainterPath
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem, QWidget

from .. import theme

#: (text, colour token) pairs for one cell
Pills = Sequence[tuple[str, str]]
_Index = QModelIndex | QPersistentModelIndex


class PillDelegate(QStyledItemDelegate):
    """Paints each (text, token) of ``pills_of(index)`` as a small rounded badge."""

    def __init__(self, pills_of: Callable[[_Index], Pills], parent: QWidget | None = None, *, align_right: bool = False) -> None:
        super().__init__(parent)
        self._pills_of = pills_of
        self._align_right = align_right

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: _Index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        style = opt.widget.style() if opt.widget else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        pills = self._pills_of(index)
        if not pills:
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = QFontMetrics(opt.font)
        rect = QRectF(opt.rect).adjusted(4, 3, -4, -3)
        widths = [font.horizontalAdvance(text) + 12 for text, _ in pills]
        total = sum(widths) + 4 * (len(widths) - 1)
        x = rect.right() - total if self._align_right else rect.left()
        for (text, token), w in zip(pills, widths):
            if x + w > rect.right() + 1:
                break
            pill = QRectF(x, rect.top(), w, rect.height())
            color = QColor(getattr(theme.current(), token))
            fill = QColor(color)
            fill.setAlpha(40)
            path = QPainterPath()
            path.addRoundedRect(pill, pill.height() / 2, pill.height() / 2)
            painter.fillPath(path, fill if token != "badge_bg" else color)
            painter.setPen(color if token != "badge_bg" else theme.color("text_muted"))
            painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, text)
            x += w + 4
        painter.restore()
