"""Issue 26 (user trial): the thread list's columns at 1100×700 and the figure columns.

On the real window over a real 1,500-thread store: every heading shown whole (short headings when
the list is narrow), the title 16-17 characters wide, the widths the same whatever the sort, the search, a refresh or the rows on
screen, the title the widest column and elided in the middle with the full title and key in its
tooltip; a 7-digit message count (the Msgs column) and a 7-digit message id (the timeline's #)
fit their columns as the tables write them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtTest import QTest

from engine.core.messages import user
from engine.service import open_service
from inspector_app.layout import TITLE_CHARS, heading_width
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_MESSAGES, COL_PRESSURE, COL_TITLE, COLUMN_SORTS, COLUMNS
from inspector_app.models.timeline import COL_ID
from tests.gui.conftest import run
from tests.gui.test_journey_layout import themed  # noqa: F401 (autouse: the app's style sheet decides the widths)
from tests.gui.test_thread_list_paged import THREADS, WAIT, db, fleet_db, opened, settle  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gui


def widths(w: MainWindow) -> dict[str, int]:
    header = w.thread_list.header()
    return {COLUMNS[c]: header.sectionSize(c) for c in range(len(COLUMNS)) if not w.thread_list.isColumnHidden(c)}


def headings_whole(w: MainWindow) -> None:
    view = w.thread_list
    for c in range(len(COLUMNS)):
        if not view.isColumnHidden(c):
            assert heading_width(view, c) <= view.header().sectionSize(c), (COLUMNS[c], view.model().headerData(c, Qt.Orientation.Horizontal))


def test_the_columns_stay_put_and_the_title_is_readable_at_1100x700(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    view, model = w.thread_list, w.thread_model
    qtbot.wait(50)
    before = widths(w)
    headings_whole(w)
    assert max(before, key=before.__getitem__) == "Thread"  # the title has the room the others leave
    fm = QFontMetrics(view.font())
    others = sum(v for k, v in before.items() if k != "Thread")
    assert model.narrow and before["Thread"] == view.viewport().width() - others  # the badge columns at their narrowest
    # 16-17 characters at 1100 px (was ten: "refu…19951"; 20 from about 1140 px)
    assert before["Thread"] >= (TITLE_CHARS - 4) * fm.averageCharWidth(), (before, fm.averageCharWidth(), w.splitter.sizes())
    assert view.textElideMode() == Qt.TextElideMode.ElideMiddle
    tip = model.index(0, COL_TITLE).data(Qt.ItemDataRole.ToolTipRole)
    first = model.thread_at(0)
    assert first.key in tip and (first.title or first.key) in tip
    header = view.header()
    for column in COLUMN_SORTS:  # each heading that sorts, both ways
        for _ in range(2):
            if view.isColumnHidden(column):
                w.thread_pages._on_heading(column)
            else:
                QTest.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(header.sectionViewportPosition(column) + 5, header.height() // 2))
            settle(qtbot, w)
            qtbot.wait(20)
            assert widths(w) == before, (COLUMN_SORTS[column], w.thread_pages.query.descending)
    w.thread_filter.setText("01400")  # a search of one row: no scroll bar
    settle(qtbot, w)
    qtbot.wait(20)
    assert model.rowCount() == 1 and {k: v for k, v in widths(w).items() if k != "Thread"} == {k: v for k, v in before.items() if k != "Thread"}
    w.thread_filter.clear()
    settle(qtbot, w)
    view.scrollToBottom()
    qtbot.waitUntil(lambda: model.loaded(THREADS - 1) and w.idle, timeout=WAIT)
    svc = open_service(db)
    try:
        svc.runs.create_thread("zzz-" + "x" * 60)  # a long key arrives with a refresh
        svc.runs.append_message("zzz-" + "x" * 60, user("hello"))
    finally:
        svc.close()
    run(qtbot, w, w.live.refresh(force=False), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT)
    qtbot.wait(20)
    assert widths(w) == before
    headings_whole(w)


def test_a_seven_digit_message_count_and_id_fit_their_columns(qtbot: Any, window_factory: Any, db: str, tmp_path: Path) -> None:
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    w.resize(1600, 1000)
    assert run(qtbot, w, w.open_database(db), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT)
    view, model = w.thread_list, w.thread_model
    view.setColumnHidden(COL_MESSAGES, False)  # the Msgs column, when shown
    row = model.row_of(w.state.thread.key)
    model.update_thread(replace(model.thread_at(row), message_count=1_234_567))
    qtbot.wait(20)
    shown = model.index(row, COL_MESSAGES).data()
    assert shown == "1,234,567"
    assert QFontMetrics(view.font()).horizontalAdvance(shown) + 8 <= view.header().sectionSize(COL_MESSAGES)
    headings_whole(w)
    timeline = w.timeline  # the timeline's # column: a message id of 7 digits
    assert not timeline.isColumnHidden(COL_ID)
    assert QFontMetrics(timeline.font()).horizontalAdvance("1234567") + 8 <= timeline.header().sectionSize(COL_ID)


def test_a_click_anywhere_on_a_heading_sorts_by_it_at_1100x700(qtbot: Any, opened: MainWindow) -> None:
    """The user trial: a click on the "%" sign itself (the heading's left edge, at 1100x700) sorted
    nothing, a few px right of it did. QHeaderView kept 4 px either side of each edge for a resize
    grip, though no column of the list can be resized by hand. Now every pixel of every heading on
    screen is a click on it, and a click on "%" sorts by pressure."""
    w = opened
    header = w.thread_list.header()
    assert w.thread_model.narrow and w.thread_model.headerData(COL_PRESSURE, Qt.Orientation.Horizontal) == "%"
    clicked: list[int] = []
    header.sectionClicked.connect(clicked.append)
    y = header.height() // 2
    missed: dict[int, list[int]] = {}
    for col in range(header.count()):
        if header.isSectionHidden(col):
            continue
        start = header.sectionViewportPosition(col)
        for x in range(max(0, start), min(header.viewport().width(), start + header.sectionSize(col))):
            clicked.clear()
            QTest.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, y))
            if clicked != [col]:
                missed.setdefault(col, []).append(x)
        w.thread_pages._search_timer.stop()
    assert missed == {}, missed  # was {0: [115, 116, 117], 1: [118, 119, 120, 121, 164, 165, 166], 3: [167, 168, 169, 170, ...], ...}
    settle(qtbot, w)
    start = header.sectionViewportPosition(COL_PRESSURE)
    QTest.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(start + 3, y))  # on the "%" sign
    settle(qtbot, w)
    assert w.thread_pages.query.sort == "pressure" and header.sortIndicatorSection() == COL_PRESSURE
