"""Issue 26: the thread list pages, searches, sorts and filters in the database.

The real window on a real SQLite store of 1,500 threads (``engine.store.fleet_build``): thread
``support-01400`` is found and selected though it is beyond the first page; scrolling fetches
further pages and the model never holds more than about a thousand rows; the filter box searches
the database (debounced); each filter and each column heading changes the query the list shows;
the count reads "N of M"; a live refresh after another connection added threads keeps the
selection and the rows on screen.
"""

from __future__ import annotations

import shutil
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from engine.core.messages import user
from engine.core.views import THREAD_FILTERS, ThreadQuery
from engine.service import open_service
from engine.store.fleet_build import build_fleet_store
from inspector_app.controllers.thread_list import count_text
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import CACHE_ROWS, COL_PRESSURE, COL_TITLE, COLUMN_SORTS, LOADING, PAGE, KeyRole
from tests.gui.conftest import run

pytestmark = pytest.mark.gui

WAIT = 8_000
THREADS = 1_500
FAR = "support-01400"


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 threads built once (bulk SQL through the schema); each test gets its own copy."""
    db = tmp_path_factory.mktemp("fleet") / "fleet.db"
    build_fleet_store(str(db), threads=THREADS, messages=30_000)
    return db


@pytest.fixture
def db(fleet_db: Path, tmp_path: Path) -> str:
    copy = tmp_path / "fleet.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(str(fleet_db) + suffix).exists():
            shutil.copy2(str(fleet_db) + suffix, str(copy) + suffix)
    return str(copy)


@pytest.fixture
def opened(qtbot: Any, window_factory: Any, db: str, tmp_path: Path) -> MainWindow:
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    w.resize(1100, 700)
    assert run(qtbot, w, w.open_database(db), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT)
    return w


def reference(db: str, query: ThreadQuery) -> tuple[list[str], int]:
    """What the store says (a connection of its own): the first page's keys and the total."""
    svc = open_service(db)
    try:
        page = svc.threads.page(query, limit=PAGE)
        return [t.key for t in page.threads], page.total
    finally:
        svc.close()


def at(w: MainWindow, row: int) -> Any:
    """The list view's index of the model's ``row``."""
    return w.thread_proxy.mapFromSource(w.thread_model.index(row, 0))


def shown_keys(w: MainWindow, n: int) -> list[str]:
    return [w.thread_model.index(r, 0).data(KeyRole) for r in range(min(n, w.thread_model.rowCount()))]


def settle(qtbot: Any, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: w.idle and not w.thread_pages._search_timer.isActive(), timeout=WAIT)


def test_the_gui_finds_thread_1400_of_1500(qtbot: Any, window_factory: Any, db: str, tmp_path: Path) -> None:
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    w.resize(1100, 700)
    assert run(qtbot, w, w.open_database(db, select=FAR), timeout=WAIT)  # --thread support-01400
    qtbot.waitUntil(lambda: w.idle and w.thread_list.currentIndex().data(KeyRole) == FAR, timeout=WAIT)
    assert w.timeline_model.key == FAR and w.thread_title.text()
    assert w.thread_model.rowCount() == THREADS  # the whole store, not the first 500
    assert w.thread_model.held <= CACHE_ROWS + PAGE
    index = w.thread_list.currentIndex()
    assert w.thread_list.visualRect(index).intersects(w.thread_list.viewport().rect())  # scrolled to it
    assert not w.banner.isVisible()


def test_search_is_in_the_database_debounced_and_says_n_of_m(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    held = w.thread_model.held  # the first page, and the page of the thread opened by default
    assert PAGE <= held < THREADS and w.thread_count.text() == f"{THREADS:,} threads"
    pages = []
    w.thread_pages.load = _counting(w.thread_pages.load, pages)  # type: ignore[method-assign]
    qtbot.keyClicks(w.thread_filter, "01400")  # five keys: one search, after the last
    settle(qtbot, w)
    assert len(pages) == 1
    assert shown_keys(w, 5) == [FAR] and w.thread_model.rowCount() == 1
    assert w.thread_count.text() == f"1 of {THREADS:,} threads"
    w.thread_filter.setText("refund")  # a title word: every thread whose title has it, counted by the store
    settle(qtbot, w)
    keys, total = reference(db, ThreadQuery(text="refund", sort="key", descending=False))
    assert w.thread_model.rowCount() == total and shown_keys(w, len(keys)) == keys
    assert w.thread_count.text() == count_text(total, THREADS, True) and w.thread_model.held <= total
    w.thread_filter.clear()
    settle(qtbot, w)
    assert w.thread_model.rowCount() == THREADS


def _counting(load: Any, calls: list[int]) -> Any:
    async def counted() -> Any:
        calls.append(1)
        return await load()

    return counted


def test_scrolling_fetches_further_pages_and_holds_a_bounded_window(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    view, model = w.thread_list, w.thread_model
    assert model.held < THREADS
    view.scrollTo(at(w, PAGE + 50), view.ScrollHint.PositionAtTop)  # past the first page
    qtbot.waitUntil(lambda: model.loaded(PAGE + 50) and w.idle, timeout=WAIT)
    view.scrollToBottom()  # the end: one page of the reversed query, not seven walked
    qtbot.waitUntil(lambda: model.loaded(THREADS - 1) and w.idle, timeout=WAIT)
    svc = open_service(db)
    try:
        everything = []
        page = svc.threads.page(ThreadQuery(sort="key", descending=False), limit=THREADS)
        everything = [t.key for t in page.threads]
    finally:
        svc.close()
    assert [model.index(r, 0).data(KeyRole) for r in range(THREADS - 20, THREADS)] == everything[-20:]
    view.scrollTo(at(w, 750), view.ScrollHint.PositionAtTop)  # the middle: walked to from an anchor
    qtbot.waitUntil(lambda: model.loaded(760) and w.idle, timeout=WAIT)
    assert [model.index(r, 0).data(KeyRole) for r in range(750, 770)] == everything[750:770]
    assert model.held <= CACHE_ROWS + PAGE  # what was scrolled away from is dropped
    assert model.index(760, COL_TITLE).data() != LOADING


@pytest.mark.parametrize("name", THREAD_FILTERS)
def test_each_filter_control_changes_the_query(qtbot: Any, opened: MainWindow, db: str, name: str) -> None:
    w = opened
    w.thread_filters.set_filter(name)
    settle(qtbot, w)
    assert w.thread_pages.query.filters == frozenset({name}) and w.thread_filters.text() == "Filters (1)"
    keys, total = reference(db, ThreadQuery(sort="key", descending=False, filters=frozenset({name})))
    assert w.thread_model.rowCount() == total and shown_keys(w, len(keys)) == keys
    assert w.thread_count.text() == count_text(total, THREADS, True) and w.thread_model.held <= total


def test_imported_from_a_format_and_written_live(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    for source in ("codex", "live"):
        w.thread_filters.set_source(source)
        settle(qtbot, w)
        keys, total = reference(db, ThreadQuery(sort="key", descending=False, source_format=source))
        assert w.thread_pages.query.source_format == source
        assert 0 < total < THREADS and w.thread_model.rowCount() == total and shown_keys(w, len(keys)) == keys


def test_a_click_on_a_heading_sorts_in_the_database(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    header = w.thread_list.header()
    column = next(c for c, s in COLUMN_SORTS.items() if s == "pressure")
    QTest.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(header.sectionViewportPosition(column) + 5, header.height() // 2))
    settle(qtbot, w)
    assert (w.thread_pages.query.sort, w.thread_pages.query.descending) == ("pressure", True)
    assert header.isSortIndicatorShown() and header.sortIndicatorSection() == column
    keys, _ = reference(db, ThreadQuery(sort="pressure"))
    assert shown_keys(w, 50) == keys[:50]
    ratios = [w.thread_model.thread_at(r).pressure for r in range(50)]
    assert all(r is not None for r in ratios) and ratios == sorted(ratios, reverse=True)
    w.thread_pages._on_heading(column)  # again: reversed
    settle(qtbot, w)
    assert w.thread_pages.query.descending is False
    keys, _ = reference(db, ThreadQuery(sort="pressure", descending=False))
    assert shown_keys(w, 50) == keys[:50]


def test_the_pressure_column_is_the_headers_figure(qtbot: Any, opened: MainWindow) -> None:
    w = opened
    key = w.state.thread.key
    qtbot.waitUntil(lambda: w.state.status is not None, timeout=WAIT)
    row = w.thread_model.row_of(key)
    assert row is not None
    assert w.thread_model.index(row, COL_PRESSURE).data() in w.thread_meta.text()


def test_refresh_keeps_selection_and_scroll_when_another_connection_adds_threads(qtbot: Any, opened: MainWindow, db: str) -> None:
    w = opened
    view, model = w.thread_list, w.thread_model
    view.scrollTo(at(w, 120), view.ScrollHint.PositionAtTop)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT)
    chosen = model.thread_at(125).key
    view.setCurrentIndex(at(w, 125))
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == chosen, timeout=WAIT)
    top = view.indexAt(QPoint(2, 2)).data(KeyRole)
    resets: list[int] = []
    model.modelReset.connect(lambda: resets.append(1))
    svc = open_service(db)  # another program, its own connection: two threads before the ones on screen
    try:
        for key in ("aaa-new-1", "aaa-new-2"):
            svc.runs.create_thread(key)
            svc.runs.append_message(key, user("a new conversation"))
    finally:
        svc.close()
    run(qtbot, w, w.live.refresh(force=False), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT)
    assert model.rowCount() == THREADS + 2 and not resets
    assert view.currentIndex().data(KeyRole) == chosen and w.timeline_model.key == chosen
    assert view.indexAt(QPoint(2, 2)).data(KeyRole) == top  # the rows on screen did not move
    assert w.thread_count.text() == f"{THREADS + 2:,} threads"


def test_a_thread_far_down_the_list_is_selected_in_place(qtbot: Any, opened: MainWindow, db: str) -> None:
    """A thread asked for by key far beyond the rows held is found by its row (counted by the
    database) and selected where it is: the list is not narrowed, and it holds only the pages
    around it (no walk from the top)."""
    w = opened
    model = w.thread_model
    keys, _ = reference(db, ThreadQuery(sort="key", descending=False))  # the default order: by key
    assert FAR not in keys and model.row_of(FAR) is None
    run(qtbot, w, w.select_thread(FAR), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle and w.thread_list.currentIndex().data(KeyRole) == FAR, timeout=WAIT)
    assert w.thread_filter.text() == "" and w.thread_pages.query.text is None and model.rowCount() == THREADS
    row = model.row_of(FAR)
    svc = open_service(db)
    try:
        assert row == svc.threads.position(ThreadQuery(sort="key", descending=False), FAR) == w.thread_list.currentIndex().row()
    finally:
        svc.close()
    assert model.held <= CACHE_ROWS + PAGE
    assert w.timeline_model.key == FAR


def test_a_jump_to_the_middle_reads_one_page_not_the_rows_before(qtbot: Any, opened: MainWindow) -> None:
    """Dragging the scroll bar to the middle fetches the page there by an offset in the
    database: the rows on screen fill in, and the pages before them are not read."""
    w = opened
    model, view = w.thread_model, w.thread_list
    middle = THREADS * 2 // 3
    held_before = max(r for r in range(THREADS) if model.loaded(r))
    assert held_before < middle - 2 * PAGE
    view.scrollTo(w.thread_proxy.mapFromSource(model.index(middle, 0)), view.ScrollHint.PositionAtTop)
    qtbot.waitUntil(lambda: model.loaded(middle) and w.idle, timeout=WAIT)
    assert model.held <= CACHE_ROWS + PAGE
    gap = range(held_before + 1, middle - PAGE)
    assert not any(model.loaded(r) for r in gap)  # what lies between the rows held and the middle was not read


def test_the_model_applies_a_changed_window_as_moves_inserts_and_removals(qapp: Any) -> None:
    """The live refresh's diff (no reset): a persistent index follows its thread through a move."""
    from dataclasses import replace as copy
    from datetime import datetime, timezone

    from PySide6.QtCore import QPersistentModelIndex

    from engine.core.views import ThreadInfo
    from inspector_app.models.threads import ThreadListModel

    stamp = datetime(2026, 12, 1, tzinfo=UTC)

    def info(i: int, key: str) -> ThreadInfo:
        return ThreadInfo(i, key, key.upper(), None, None, None, i, 0, 0, None, None, stamp, stamp)

    threads = {k: info(i, k) for i, k in enumerate("abcdefgh", 1)}
    model = ThreadListModel()
    model.start([threads[k] for k in "abcdef"], 8, "cursor")
    resets: list[int] = []
    model.modelReset.connect(lambda: resets.append(1))
    held = QPersistentModelIndex(model.index(model.row_of("e"), 0))
    changed = copy(threads["c"], message_count=99)
    model.replace_window(0, [threads["a"], threads["e"], changed, info(9, "x"), threads["f"], threads["g"]], 8, None)
    assert not resets
    assert [model.thread_at(r).key for r in range(6)] == ["a", "e", "c", "x", "f", "g"]
    assert model.thread_at(2).message_count == 99 and model.rowCount() == 8
    assert held.isValid() and held.row() == 1  # "e" moved up: its index went with it
    assert model.row_of("b") is None and model.row_of("d") is None


def test_refresh_at_the_end_of_the_list_keeps_it_in_place(qtbot: Any, opened: MainWindow, db: str) -> None:
    """Rows read from the end (the reversed query) are read again from there: the selection and
    the rows on screen stay, nothing flashes back to "Loading…"."""
    w = opened
    view, model = w.thread_list, w.thread_model
    view.scrollToBottom()
    qtbot.waitUntil(lambda: model.loaded(THREADS - 1) and w.idle, timeout=WAIT)
    chosen = model.thread_at(THREADS - 5).key
    view.setCurrentIndex(at(w, THREADS - 5))
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == chosen, timeout=WAIT)
    top = view.indexAt(QPoint(2, 2)).data(KeyRole)
    removed: list[int] = []
    model.rowsRemoved.connect(lambda *_a: removed.append(1))
    svc = open_service(db)
    try:
        svc.runs.create_thread("zzz-last")  # after every other key: a row added at the very end
        svc.runs.append_message("zzz-last", user("the newest conversation"))
    finally:
        svc.close()
    run(qtbot, w, w.live.refresh(force=False), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT)
    assert model.rowCount() == THREADS + 1 and not removed
    assert view.currentIndex().data(KeyRole) == chosen and view.indexAt(QPoint(2, 2)).data(KeyRole) == top
    view.scrollToBottom()
    qtbot.waitUntil(lambda: model.loaded(THREADS) and w.idle, timeout=WAIT)
    assert model.thread_at(THREADS).key == "zzz-last"
