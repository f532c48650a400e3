"""Issue 26 (user trial): giving the thread list the keyboard focus never opens a thread.

Qt makes the first row of a list that has no current row "current" when the list gets the focus
back (a menu closed, the window activated), without selecting it. The trial found Filters → Clear
filters opening the first row of the filtered list that way (the thread open was not in it): the
next Compact now would have acted on a thread nobody chose. A thread opens when its row is
selected (a click, the keyboard), never on a bare change of the current row.
"""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtGui import QFocusEvent

from inspector_app.main_window import MainWindow
from inspector_app.models.threads import KeyRole
from tests.gui.test_thread_list_paged import WAIT, db, fleet_db, opened, settle  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gui


def open_key(w: MainWindow) -> str | None:
    return w.state.thread.key if w.state.thread is not None else None


def focus_back(w: MainWindow) -> None:
    """The list gets the focus back as after a closed menu (not a mouse click)."""
    event = QFocusEvent(QFocusEvent.Type.FocusIn, Qt.FocusReason.PopupFocusReason)
    QCoreApplication.sendEvent(w.thread_list, event)


def test_clear_filters_with_the_focus_on_the_list_keeps_the_open_thread(qtbot: Any, opened: MainWindow) -> None:
    w = opened
    view = w.thread_list
    keys = [view.model().index(r, 0).data(KeyRole) for r in range(5)]
    view.setCurrentIndex(view.model().index(3, 0))  # the user clicks the 4th row: it opens
    qtbot.waitUntil(lambda: w.idle and open_key(w) == keys[3], timeout=WAIT)
    chosen = keys[3]
    w.thread_filters.set_filter("busy")  # a list the open thread is not in
    settle(qtbot, w)
    assert w.thread_pages.query.filters == frozenset({"busy"})
    first_busy = view.model().index(0, 0).data(KeyRole)
    assert first_busy is not None and first_busy != chosen and open_key(w) == chosen
    assert not view.selectionModel().selectedRows()
    focus_back(w)  # Qt makes the first busy row current (not selected)
    qtbot.wait(50)
    assert open_key(w) == chosen  # ... and that opens nothing
    w.thread_filters.clear()
    focus_back(w)
    settle(qtbot, w)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT)
    assert open_key(w) == chosen
    qtbot.waitUntil(lambda: [i.data(KeyRole) for i in view.selectionModel().selectedRows()] == [chosen], timeout=WAIT)
