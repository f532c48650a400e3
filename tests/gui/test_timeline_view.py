"""The timeline view paints a freshly opened thread once: the first page (overflowing the viewport,
its units expanded as the paging controller expands them, a row deep in it made current as an
imported thread opens on its source's compaction) costs one viewport paint, and the columns keep
their widths (no scroll bar appearing, no column-resize repaint in a later event-loop turn)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timezone
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication

from engine.core.messages import Message, ToolCall
from engine.core.views import StoredMessage
from inspector_app.models.timeline import PageRequest, TimelineModel
from inspector_app.widgets.timeline_view import TimelineView

pytestmark = pytest.mark.gui
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class PaintCounter(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def stored(n: int) -> list[StoredMessage]:
    """``n`` messages: turns of a request, a tool call, its result and an answer."""
    out: list[Message] = []
    turn = 0
    while len(out) < n:
        out += [
            Message("user", f"question {turn}"),
            Message("assistant", "", tool_calls=(ToolCall(f"c{turn}", "lookup", "{}"),)),
            Message("tool", f"result {turn}", tool_call_id=f"c{turn}", name="lookup"),
            Message("assistant", f"answer {turn}"),
        ]
        turn += 1
    return [StoredMessage(replace(m, id=i + 1), 1, T0) for i, m in enumerate(out[:n])]


def settle(qtbot: Any, ms: int = 150) -> None:
    """Let every posted event and zero-timer of the view run (layout, column resize, update)."""
    qtbot.wait(ms)
    QApplication.processEvents()


@pytest.mark.parametrize("select_deep", [False, True], ids=["top", "selected-row"])
def test_first_page_is_painted_once(qtbot: Any, select_deep: bool) -> None:
    model = TimelineModel()
    view = TimelineView()
    view.setModel(model)
    view.header().setStretchLastSection(False)
    view.header().setSectionResizeMode(0, view.header().ResizeMode.Stretch)
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    qtbot.waitExposed(view)
    model.reset("t", total=300)
    settle(qtbot)
    width = view.columnWidth(0)
    counter = PaintCounter()
    view.viewport().installEventFilter(counter)

    messages = stored(300)
    model.insert_page(PageRequest(limit=300).page(messages))
    view.expandAll()  # new units open expanded (PagingController._on_rows_inserted)
    if select_deep:
        view.setCurrentIndex(model.index_for_message(250))  # scrolls there (autoScroll)
    settle(qtbot)

    assert model.loaded_count() == 300 and view.verticalScrollBar().maximum() > 0  # the page overflows
    assert counter.paints == 1, f"{counter.paints} viewport paints for one page"
    assert view.columnWidth(0) == width  # the Message column kept its width
    view.viewport().removeEventFilter(counter)
