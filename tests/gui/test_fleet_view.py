"""Issue 26: the fleet view on a real store of 1,500 threads shows the figures ``svc.threads.stats``
returns, says it is computing while the database works, and clicks through: a pressure band to the
thread list filtered to it, a worst thread to that thread opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from engine.core import figures
from engine.core.views import ThreadQuery
from engine.service import open_service
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import KeyRole
from inspector_app.widgets.fleet import series_name
from tests.gui.conftest import run
from tests.gui.test_thread_list_paged import WAIT, db, fleet_db, opened, settle  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gui


def stats_of(url: str, query: ThreadQuery | None = None) -> Any:
    svc = open_service(url)
    try:
        return svc.threads.stats(query)
    finally:
        svc.close()


def open_fleet(qtbot: Any, w: MainWindow) -> Any:
    assert w.fleet.action.isEnabled()
    w.fleet.action.trigger()
    window = w.fleet.window
    assert window is not None and window.isVisible()
    assert window.progress.text().startswith("Computing the fleet's figures")  # before the worker answered
    qtbot.waitUntil(lambda: window.stats is not None and w.idle, timeout=WAIT)
    return window


def test_the_fleet_view_shows_the_numbers_stats_returns(qtbot: Any, opened: MainWindow, db: str) -> None:
    window = open_fleet(qtbot, opened)
    want = stats_of(db)
    got = window.stats
    assert (got.threads, got.busy, got.compactions, got.bands, got.dropped_buckets, got.worst_threads) == (
        want.threads, want.busy, want.compactions, want.bands, want.dropped_buckets, want.worst_threads)
    assert window.headline.text().startswith(f"{figures.plural(want.threads, 'thread')} · {figures.count(want.busy)} busy now")
    assert window.bands.items == [(b.band, b.label, b.threads, window.bands.items[i][3]) for i, b in enumerate(want.bands)]
    assert sum(b.threads for b in want.bands) == want.threads == 1_500
    assert [b[2] for b in window.dropped.items] == [b.compactions for b in want.dropped_buckets]
    rows = [window.worst.topLevelItem(i) for i in range(window.worst.topLevelItemCount())]
    assert [r.data(0, Qt.ItemDataRole.UserRole) for r in rows] == [t.key for t in want.worst_threads] and rows
    assert [r.text(1) for r in rows] == [figures.count(t.dropped) for t in want.worst_threads]
    money = window.money.text()
    assert f"Tokens saved by our compactions: {figures.tokens(want.tokens_saved)}" in money
    assert f"Summarizer calls: {figures.count(want.summarizer_calls)}" in money and figures.money(want.summarizer_cost, want.currency) in money
    per_day = {(d.day, series_name(d.kind, d.source)): 0 for d in want.per_day}
    for d in want.per_day:
        per_day[(d.day, series_name(d.kind, d.source))] += d.count
    assert window.daily.counts == per_day and window.daily.days == sorted({d.day for d in want.per_day})


def test_a_band_filters_the_list_and_a_worst_thread_opens(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    window = open_fleet(qtbot, w)
    bands = [b[0] for b in window.bands.items]
    row = bands.index("over_100")
    y = int(window.bands.bar_rect(row).center().y())
    QTest.mouseClick(window.bands, Qt.MouseButton.LeftButton, pos=QPoint(window.bands.width() // 2, y))
    settle(qtbot, w)
    assert w.thread_pages.query.filters == frozenset({"over_threshold"})
    assert w.thread_model.rowCount() == window.stats.bands[row].threads  # the band's count is the list's M
    message = w.statusBar().currentMessage()
    assert w.thread_filters.text() == "Filters (1)" and message.startswith("Threads at or over their threshold: ")
    assert message.endswith(f"{window.stats.bands[row].threads:,} of {window.stats.threads:,} threads")
    w.thread_filters.clear()
    settle(qtbot, w)
    worst = window.worst.topLevelItem(3)
    key = worst.data(0, Qt.ItemDataRole.UserRole)
    rect = window.worst.visualItemRect(worst)
    QTest.mouseClick(window.worst.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == key, timeout=WAIT)
    qtbot.waitUntil(lambda: w.thread_list.currentIndex().data(KeyRole) == key, timeout=WAIT)  # found in the list too
    assert w.state.thread is not None and w.state.thread.key == key


def test_only_the_threads_the_list_shows(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    w.thread_filter.setText("codex")
    settle(qtbot, w)
    window = open_fleet(qtbot, w)
    assert window.stats.threads == 1_500
    window.only_list.setChecked(True)  # over the list's search: computed again
    qtbot.waitUntil(lambda: w.idle and window.stats.threads != 1_500, timeout=WAIT)
    assert window.stats.threads == stats_of(db, w.thread_pages.query).threads == w.thread_model.rowCount()
    assert window.stats.worst_threads and all(t.key.startswith("codex") for t in window.stats.worst_threads)  # the list's threads only
    key = window.stats.worst_threads[0].key
    run(qtbot, w, w.fleet.open(key), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == key, timeout=WAIT)
