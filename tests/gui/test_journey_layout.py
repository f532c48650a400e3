"""Layouts that fit: the real window on a real database rendered at 1024×640, 1440×900 and
2560×1440 (and at Qt scale factor 2, in a child process). At each size the thread header, its
buttons (Compact now), the timeline, the side panel's tabs and the Theme button are on screen,
inside the window, and their words fit their widgets (font metrics against widths): nothing is
cut at the right edge, the header never blanks, the timeline shows more than a couple of rows and
its Message column keeps a real share of the width.

The thread list's title column shows about 20 characters of a title from about 1140 px wide, 16-17
at 1100 (measured with a scroll bar beside the rows; the side panel keeps room for the counts of
its Events and Checks tabs, so opening another thread never moves the list); the default split follows the window's width (a window shown
at one size and resized to another gets the same split as one shown at it) until the user drags a
handle; after that a resize keeps the thread list's width, and only a split the user set is
remembered.

(At 1100×700 the header once went empty — its labels wrapped to one character per line beside the
buttons — two timeline rows showed, and the Theme button and the summary card were cut off. Later
the thread list was 245 px there and its title column 73-82 px: ten characters.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractButton, QApplication, QLabel, QMenu, QTabWidget, QWidget

from engine.apps.demo import build_demo
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.service import open_service
from inspector_app import preferences, theme
from inspector_app.layout import TITLE_CHARS
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_TITLE, KeyRole
from tests.gui.conftest import run

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]
SIZES = [(1024, 640), (1100, 700), (1440, 900), (2560, 1440)]
RESEARCH = "research-retrieval-latency"  # the fullest header: hint line, Summary card, What if…, Compact now
CODEX = ROOT / "tests/fixtures/sessions/codex/2026/11/30/rollout-2026-11-30T10-00-00-019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d.jsonl"
CODEX_KEY = "codex:019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d"


@pytest.fixture(autouse=True)
def themed(qapp: QApplication) -> Any:
    """The app's real look (the style sheet's paddings and fonts decide what fits); reset after."""
    manager = theme.ThemeManager(qapp, "light")
    manager.apply()
    yield manager
    qapp.setStyleSheet("")


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo database with an imported Codex rollout beside its threads."""
    db = tmp_path_factory.mktemp("layout") / "demo.db"
    workdir = db.with_name("demo.db.workdir")
    with ThreadPoolExecutor(1) as pool:  # asyncio.run inside must not meet a test's qasync loop
        pool.submit(build_demo, str(db), workdir=workdir).result(timeout=120)
    svc = open_service(str(db), workdir=workdir)
    try:
        svc.imports.import_file(CODEX)
    finally:
        svc.close()
    return db, workdir


def inside(w: QWidget, window: QWidget) -> QRect:
    """``w``'s rectangle in window coordinates; asserts it is shown and lies inside the window."""
    assert w.isVisible(), w.objectName()
    rect = QRect(w.mapTo(window, w.rect().topLeft()), w.size())
    assert window.rect().contains(rect), (w.objectName(), rect, window.rect())
    return rect


def visible_inside(w: QWidget, window: QWidget) -> QRect:
    """Like :func:`inside`, and not hidden under an ancestor's edge (each ancestor contains it)."""
    rect = inside(w, window)
    parent = w.parentWidget()
    while parent is not None and parent is not window:
        prect = QRect(parent.mapTo(window, parent.rect().topLeft()), parent.size())
        assert prect.contains(rect), (w.objectName(), parent.objectName(), rect, prect)
        parent = parent.parentWidget()
    return rect


def words_fit(label: QLabel) -> None:
    """A wrapping label: every word fits its width and every line fits its height."""
    fm = QFontMetrics(label.font())
    width = label.contentsRect().width()
    longest = max((fm.horizontalAdvance(word) for word in label.text().split()), default=0)
    assert longest <= width, (label.objectName(), label.text(), longest, width)
    needed = label.heightForWidth(label.width())
    assert needed <= label.height() + 1, (label.objectName(), label.text(), needed, label.height())


def button_fits(button: QAbstractButton, window: QWidget) -> QRect:
    rect = visible_inside(button, window)
    text = button.text()
    assert QFontMetrics(button.font()).horizontalAdvance(text) + 12 <= button.width(), (text, button.width())
    return rect


def open_at(qtbot: Any, window_factory: Any, database: tuple[Path, Path], key: str, size: tuple[int, int]) -> MainWindow:
    db, workdir = database
    w = window_factory(lambda url: open_service(url, workdir=workdir, summarizer=ExtractiveSummarizer(), policies=None))
    w.resize(*size)
    assert run(qtbot, w, w.open_database(str(db), select=key), timeout=15_000)
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == key, timeout=15_000)
    QApplication.processEvents()
    w.grab()  # laid out and painted at this size
    assert (w.width(), w.height()) == size
    return w


@pytest.mark.parametrize("size", SIZES, ids=[f"{a}x{b}" for a, b in SIZES])
@pytest.mark.parametrize("key", [RESEARCH, CODEX_KEY])
def test_the_window_fits(qtbot: Any, window_factory: Any, database: tuple[Path, Path], key: str, size: tuple[int, int]) -> None:
    w = open_at(qtbot, window_factory, database, key, size)
    # the header: texts with a real width, words fitting, the buttons on screen and not over the texts
    header = visible_inside(w.thread_title.parentWidget(), w)  # the header frame
    title = w.thread_title
    title_rect = visible_inside(title, w)
    fm = QFontMetrics(title.font())
    assert title.width() >= 250, title.width()
    if fm.horizontalAdvance(title.text()) > title.contentsRect().width():
        assert title.toolTip() == title.text()  # elided on screen: the whole title in the tooltip
    if size[0] >= 1440:
        assert fm.horizontalAdvance(title.text()) <= title.contentsRect().width(), (title.text(), title.width())
    for label in (w.thread_meta, w.hint_label):
        if not label.isHidden():
            visible_inside(label, w)
            words_fit(label)
    buttons = [b for b in (w.summary_button, w.whatif_button, w.compact_button) if not b.isHidden()]
    assert w.compact_button in buttons
    for b in buttons:
        rect = button_fits(b, w)
        assert header.contains(rect)
        for label in (title, w.thread_meta, w.hint_label):
            if not label.isHidden():
                assert not QRect(label.mapTo(w, label.rect().topLeft()), label.size()).intersects(rect), (b.text(), label.objectName())
    assert title_rect.height() >= fm.height()
    # the thread list's title column (a scroll bar counted): 20 characters from 1440 px, 16 at 1100
    # (the side panel keeps room for Events (99) and Checks (9)), the list's minimum at 1024
    chars = {1024: 8, 1100: 16}.get(size[0], TITLE_CHARS)
    title_room = title_column(w)
    assert title_room >= chars * QFontMetrics(w.thread_list.font()).averageCharWidth(), (title_room, w.splitter.sizes())
    # the timeline: many rows, the Message column keeps a real share
    timeline = visible_inside(w.timeline, w)
    rows = w.timeline.viewport().height() // max(1, w.timeline.sizeHintForRow(0))
    assert rows >= 10, (rows, timeline)
    assert w.timeline.header().sectionSize(0) >= 0.45 * w.timeline.viewport().width(), [w.timeline.header().sectionSize(i) for i in range(4)]
    # the side panel: every tab's title whole, none behind scroll arrows
    visible_inside(w.tabs, w)
    bar = w.tabs.tabBar()
    for i in range(bar.count()):
        tab = bar.tabRect(i)
        assert tab.right() <= bar.width() and tab.left() >= 0, (bar.tabText(i), tab, bar.width())
        assert QFontMetrics(bar.font()).horizontalAdvance(bar.tabText(i)) <= tab.width(), bar.tabText(i)
    visible_inside(w.detail, w)
    # every page of the side panel: its wrapped words whole (a short window scrolls the page instead)
    for i in range(w.tabs.count()):
        w.tabs.setCurrentIndex(i)
        qtbot.waitUntil(lambda: w.idle, timeout=15_000)  # what the tab loads when shown (the replay's requests)
        QApplication.processEvents()
        w.grab()
        page = QTabWidget.widget(w.tabs, i)  # the page as placed (maybe its scroll area)
        for label in page.findChildren(QLabel):
            if label.isVisible() and label.wordWrap() and label.text().strip():
                needed = label.heightForWidth(label.width())
                assert needed <= label.height() + 1, (bar.tabText(i), label.objectName(), label.text()[:60], needed, label.height())
    w.tabs.setCurrentIndex(0)
    # the three panes keep their minimums
    assert all(s >= m for s, m in zip(w.splitter.sizes(), (w.splitter.widget(i).minimumWidth() for i in range(3)))), w.splitter.sizes()
    # the toolbar's end: the Theme button, whole; View → Theme holds the same choices (reachable at any width)
    button_fits(w.theming.button, w)
    for action in w.toolbar.actions():  # every toolbar button on screen, none behind the overflow arrow
        button = w.toolbar.widgetForAction(action)
        if button is not None and action.isVisible() and action.text():
            visible_inside(button, w)
    extension = w.toolbar.findChild(QWidget, "qt_toolbar_ext_button")
    assert extension is None or not extension.isVisible()
    view = next((m for m in w.findChildren(QMenu) if m.title() == "&View"), None)
    assert view is not None and [a.text() for a in view.actions()[0].menu().actions()] == [a.text() for a in w.theming.actions.actions()]


def title_column(w: MainWindow) -> int:
    """The title column's width when the list has a vertical scroll bar (a store of many threads)."""
    view = w.thread_list
    others = sum(view.header().sectionSize(c) for c in range(view.model().columnCount()) if c != COL_TITLE and not view.isColumnHidden(c))
    return view.room() - others


def test_the_default_split_follows_the_window_until_the_user_drags_a_handle(qtbot: Any, window_factory: Any, database: tuple[Path, Path], settings: Any) -> None:
    w = open_at(qtbot, window_factory, database, RESEARCH, (1100, 700))  # shown at 1440×880, then resized
    assert w.auto_split
    splits: dict[tuple[int, int], list[list[int]]] = {}
    for size in ((1600, 1000), (1024, 640), (1100, 700), (1600, 1000), (1100, 700)):
        w.resize(*size)
        qtbot.waitUntil(lambda: w.width() == size[0])
        QApplication.processEvents()
        assert w.splitter.sizes() == w.default_split(), size
        splits.setdefault(size, []).append(w.splitter.sizes())
    assert all(len({tuple(v) for v in visits}) == 1 for visits in splits.values()), splits  # the same split whenever the window is back at a size
    at_1100 = splits[(1100, 700)][0]
    assert title_column(w) >= 16 * QFontMetrics(w.thread_list.font()).averageCharWidth()
    titles = set()
    for row in range(w.thread_proxy.rowCount()):  # every thread opened, as a click does: the list never moves
        w.thread_list.setCurrentIndex(w.thread_proxy.index(row, 0))
        qtbot.waitUntil(lambda: w.idle and w.state.thread is not None and w.timeline_model.key == w.thread_list.currentIndex().data(KeyRole), timeout=15_000)
        QApplication.processEvents()
        titles.add(tuple(w.tabs.tabText(i) for i in range(w.tabs.count())))
        assert w.splitter.sizes()[0] == at_1100[0], (row, titles, w.splitter.sizes())
    assert len(titles) > 1  # the tabs' counts changed (Events (9), Events, Checks …)
    w.save_session()
    assert settings.value(preferences.KEY_SPLITTER) is None, (w.splitter.sizes(), w.default_split(), w.tabs.minimumWidth(), w.side_room())  # the default split is not remembered
    # the user drags the handle between the list and the timeline 40 px to the left
    handle = w.splitter.handle(1)
    start = QPoint(handle.width() // 2, handle.height() // 2)
    QTest.mousePress(handle, Qt.MouseButton.LeftButton, pos=start)
    QTest.mouseMove(handle, start - QPoint(20, 0))
    QTest.mouseMove(handle, start - QPoint(40, 0))
    QTest.mouseRelease(handle, Qt.MouseButton.LeftButton, pos=start - QPoint(40, 0))
    dragged = w.splitter.sizes()
    assert not w.auto_split and dragged[0] <= at_1100[0] - 30, (at_1100, dragged)
    w.resize(1600, 1000)
    qtbot.waitUntil(lambda: w.width() == 1600)
    QApplication.processEvents()
    assert w.splitter.sizes()[0] == dragged[0]  # the list keeps the width the user gave it; the timeline and the side panel grow
    w.save_session()
    assert settings.value(preferences.KEY_SPLITTER) is not None  # the user's split is remembered


def test_a_narrow_pane_shows_short_badges_and_the_whole_name_in_a_tooltip(qtbot: Any, window_factory: Any, database: tuple[Path, Path]) -> None:
    w = open_at(qtbot, window_factory, database, CODEX_KEY, (1024, 640))
    from inspector_app.models.threads import COL_SOURCE, COL_STATE

    delegate = w.thread_list.itemDelegateForColumn(COL_SOURCE)
    row = w.thread_list.currentIndex().siblingAtColumn(COL_SOURCE)
    width = w.thread_list.header().sectionSize(COL_SOURCE)
    mode, texts = delegate.shown(row, width, QFontMetrics(w.thread_list.font()))
    fm = QFontMetrics(w.thread_list.font())
    assert all(fm.horizontalAdvance(t) + 12 <= width - 8 for t in texts), (mode, texts, width)
    state = w.thread_list.itemDelegateForColumn(COL_STATE)
    mode, texts = state.shown(row.siblingAtColumn(COL_STATE), w.thread_list.header().sectionSize(COL_STATE), fm)
    assert texts  # a badge or a dot, never nothing
    assert w.thread_list.textElideMode().name == "ElideMiddle"


def test_every_sources_badge_reads_as_text_in_a_narrow_list(qtbot: Any, window_factory: Any, database: tuple[Path, Path]) -> None:
    """The Source column is sized for every format an importer writes: none is drawn as a bare dot
    (Gemini CLI, Aider and OpenHands eval threads once were: their badges were not in the table the
    column was sized from), and the filter menu offers each of them by name."""
    from engine.core.views import SOURCE_FORMATS
    from inspector_app.layout import source_pills
    from inspector_app.models.threads import COL_SOURCE

    w = open_at(qtbot, window_factory, database, CODEX_KEY, (1024, 640))
    delegate = w.thread_list.itemDelegateForColumn(COL_SOURCE)
    width = w.thread_list.header().sectionSize(COL_SOURCE)
    fm = QFontMetrics(w.thread_list.font())

    class Cell:
        def __init__(self, text: str) -> None:
            self.text = text

        def data(self, role: Any = None) -> Any:
            return self.text

    for fmt, known in SOURCE_FORMATS.items():
        mode, items = delegate.layout(fm, source_pills(Cell(known.badge)), width - 8)  # type: ignore[arg-type]
        assert mode in ("full", "short") and all(t for _, t, _ in items), (fmt, mode, width)
    labels = {a.text() for a in w.thread_filters.source_actions.values()}
    assert {f.name[:1].upper() + f.name[1:] for f in SOURCE_FORMATS.values()} <= labels


@pytest.mark.skipif(os.environ.get("JOURNEY_LAYOUT_CHILD") == "1", reason="already the child at scale factor 2")
def test_the_window_fits_at_scale_factor_2() -> None:
    """The same checks with QT_SCALE_FACTOR=2 (a fresh process: the factor is read when Qt starts)."""
    env = dict(os.environ, QT_SCALE_FACTOR="2", JOURNEY_LAYOUT_CHILD="1", QT_QPA_PLATFORM="offscreen", QT_API="pyside6")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", str(Path(__file__)), "-k", "test_the_window_fits and not scale"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_a_screenshot_has_the_size_asked_for(database: tuple[Path, Path], tmp_path: Path) -> None:
    """``compaction-inspector --size 1100x700 --screenshot FILE``: the picture the README shows."""
    from PySide6.QtGui import QImage

    db, _workdir = database
    shot = tmp_path / "shot.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", QT_API="pyside6", HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"))
    cmd = [sys.executable, "-m", "inspector_app.app", "--db", str(db), "--thread", CODEX_KEY, "--size", "1100x700", "--theme", "light", "--screenshot", str(shot)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    image = QImage(str(shot))
    assert (image.width(), image.height()) == (1100, 700)
    bad = subprocess.run([sys.executable, "-m", "inspector_app.app", "--size", "1100by700", "--screenshot", str(shot)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "WIDTHxHEIGHT" in bad.stderr
