"""Issue 26 (user trial): the thread list's "N of M" (under the list and in the status bar) is the
threads the search and filters match, counted by the database, of every thread in the store
("M threads" unfiltered); never the rows the list happens to hold. On the real window over a real 1,500-thread store."""

from __future__ import annotations

from typing import Any

import pytest

from engine.core.messages import user
from engine.core.views import ThreadQuery
from engine.service import open_service
from inspector_app.controllers.thread_list import count_text
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import PAGE
from tests.gui.conftest import run
from tests.gui.test_thread_list_paged import THREADS, WAIT, db, fleet_db, opened, settle  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gui


def counted(url: str, query: ThreadQuery) -> int:
    svc = open_service(url)
    try:
        return svc.threads.count(query)
    finally:
        svc.close()


def said(w: MainWindow) -> tuple[str, str]:
    return w.thread_count.text(), w.statusBar().currentMessage()


def test_count_text() -> None:
    assert count_text(1_500, 1_500, False) == "1,500 threads" and count_text(1, 1, False) == "1 thread"
    assert count_text(12, 100_000, True) == "12 of 100,000 threads" and count_text(1_500, 1_500, True) == "1,500 of 1,500 threads"
    assert count_text(0, 3, True) == "0 of 3 threads" and count_text(0, 0, True) == count_text(0, 0, False) == "No threads"


def test_n_is_the_matching_threads_and_m_the_store(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    model, view = w.thread_model, w.thread_list
    assert model.held < THREADS  # a page or two held of 1,500
    assert said(w) == (f"{THREADS:,} threads",) * 2  # unfiltered: every thread, not the rows held
    view.scrollTo(w.thread_proxy.mapFromSource(model.index(PAGE + 50, 0)), view.ScrollHint.PositionAtTop)
    qtbot.waitUntil(lambda: model.loaded(PAGE + 50) and w.idle, timeout=WAIT)
    assert w.thread_count.text() == f"{THREADS:,} threads"  # more rows held: the same count
    w.thread_filter.setText("refund")
    settle(qtbot, w)
    matching = counted(db, ThreadQuery(text="refund"))
    assert 0 < matching < THREADS and model.held <= matching
    assert said(w) == (f"{matching:,} of {THREADS:,} threads",) * 2
    w.thread_filters.set_filter("over_threshold")
    settle(qtbot, w)
    both = counted(db, ThreadQuery(text="refund", filters=frozenset({"over_threshold"})))
    assert w.thread_count.text() == f"{both:,} of {THREADS:,} threads" and both < matching
    svc = open_service(db)  # another program adds a thread the search does not match: M grows, N stays
    try:
        svc.runs.create_thread("aaa-unrelated")
        svc.runs.append_message("aaa-unrelated", user("hello"))
    finally:
        svc.close()
    run(qtbot, w, w.live.refresh(force=False), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle and w.thread_count.text() == f"{both:,} of {THREADS + 1:,} threads", timeout=WAIT)
    w.thread_filters.clear()
    w.thread_filter.clear()
    settle(qtbot, w)
    assert w.thread_count.text() == f"{THREADS + 1:,} threads"
