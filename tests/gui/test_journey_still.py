"""A view that holds still: a user's journey through the real window on a real demo database, with
the live refresh's poll timer running at its real interval (3 s).

On each thread the user steps the replay to its last step, selects a request, searches, selects a
row, collapses a turn and scrolls; three polls later nothing has moved and the view was not read
again. Then another program appends a message through its own connection: it appears, and
nothing else moved. Before the fix, every poll of a thread whose compactions were prunes only (a
generation and no boundary: coding, overflow-recovers, 中文会话) re-read the whole view: the step
went back to 1, the request to the last one, the turn opened again and the scroll jumped.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QSettings, Qt
from PySide6.QtWidgets import QApplication

from engine.core.messages import user
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import KeyRole
from inspector_app.service_client import ServiceClient
from tests.gui.conftest import _drain, run
from tests.gui.test_window_real import WAIT_MS, Demo, _open, demo, demo_copy, fresh  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gui

POLL_MS = 3000  # the window's own default: the test builds the window without changing it
#: the prune-only threads (a generation, no boundary) and one with a summary boundary
JOURNEY = ("overflow-recovers", "coding-lock-test-failure", "zh-检索延迟分析", "research-retrieval-latency")


@pytest.fixture
def live_window(qapp: QApplication, no_leaks: None, qloop: Any, settings: QSettings, demo_copy: Demo) -> Iterator[MainWindow]:
    """The real window on a copy of the demo, built as the app builds it (the default poll interval)."""
    client = ServiceClient()
    w = MainWindow(client, opener=lambda _url: _open(demo_copy), settings=settings)
    w.resize(1100, 700)
    w.show()
    try:
        yield w
    finally:
        w.poll.stop()
        _drain(qapp, w.cancel_tasks())
        client.close()
        w.close()
        w.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


class Counts:
    """Every re-read of a whole model the user would see: the timeline, the thread list, the
    replay's steps and requests, the events; and every poll of the timer."""

    def __init__(self, w: MainWindow) -> None:
        self.resets: dict[str, int] = {}
        self.polls = 0
        models = {"timeline": w.timeline_model, "threads": w.thread_model, "steps": w.replay.model, "requests": w.replay.requests_model, "events": w.events_model}
        for name, model in models.items():
            self.resets[name] = 0
            model.modelReset.connect(lambda name=name: self.resets.__setitem__(name, self.resets[name] + 1))
            model.rowsRemoved.connect(lambda *_a, name=name: self.resets.__setitem__(name, self.resets[name] + 1))
        w.poll.timeout.connect(self._poll)
        self.empty_shown = 0
        w.replay.model.modelReset.connect(lambda: self.__setattr__("empty_shown", self.empty_shown + (w.replay.model.rowCount() == 0)))

    def _poll(self) -> None:
        self.polls += 1

    def snapshot(self) -> dict[str, Any]:
        return {"resets": dict(self.resets), "empty": self.empty_shown}


def key_of(node: Any) -> tuple[str, int | None]:
    """A row by what it shows: its kind and its (first) message id."""
    return (node.kind, node.info.id if node.info is not None else node.first_id)


def groups(w: MainWindow) -> dict[tuple[str, int | None], bool]:
    """Every loaded group row of the timeline: open or closed."""
    model, view = w.timeline_model, w.timeline
    return {key_of(n): view.isExpanded(model.index_of(n)) for n in model.core.root.walk() if n.children}


def seen(w: MainWindow) -> dict[str, Any]:
    """What the user sees and chose."""
    panel = w.replay
    current = panel.requests_model.current()
    return {
        "thread": w.thread_list.currentIndex().data(KeyRole),
        "row": key_of(w.timeline_model.node(w.timeline.currentIndex())) if w.timeline.currentIndex().isValid() else None,
        "scroll": w.timeline.verticalScrollBar().value(),
        "groups": groups(w),
        "tab": w.tabs.currentIndex(),
        "page": panel.page(),
        "episode": panel.model.episode_index,
        "step": panel.model.step_index,
        "step_title": panel.kind.text(),
        "request": (current.index, current.episode, current.step) if current is not None else None,
        "request_title": panel.request_title.text(),
        "search": w.search.text(),
        "status": w.statusBar().currentMessage(),
    }


def settle(qtbot: Any, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: w.idle and not w.live.refreshing, timeout=WAIT_MS)


def open_thread(qtbot: Any, w: MainWindow, key: str) -> None:
    """Click the thread in the list (as a user does)."""
    row = w.thread_model.row_of(key)
    assert row is not None, key
    w.thread_list.setCurrentIndex(w.thread_proxy.mapFromSource(w.thread_model.index(row, 0)))
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == key and w.state.status is not None, timeout=WAIT_MS)


def make_choices(qtbot: Any, w: MainWindow, key: str) -> None:
    """Step the replay to its last step, select a request that is not the default one, search,
    select a row, collapse a turn, scroll."""
    panel = w.replay
    w.show_tab("replay")
    panel.show_page("requests")
    qtbot.waitUntil(lambda: panel.requests_state == "loaded" and w.idle, timeout=WAIT_MS)
    assert panel.requests_model.rowCount() > 1, key
    panel.requests_model.go(0)  # the first request (the default is the last)
    settle(qtbot, w)
    if panel.model.episodes():
        panel.show_page("recoveries")
        while panel.forward_button.isEnabled():
            qtbot.mouseClick(panel.forward_button, Qt.MouseButton.LeftButton)
        assert panel.model.step_index == panel.model.rowCount() - 1 > 0
    # a search (it selects its first match), a turn collapsed, then the user's own row
    w.search.setText("the")
    settle(qtbot, w)
    model, view = w.timeline_model, w.timeline
    turn = next(n for n in model.core.root.children if n.children and view.isExpanded(model.index_of(n)))
    view.collapse(model.index_of(turn))

    def shown(n: Any) -> bool:
        up = n.parent
        while up is not None and up is not model.core.root:
            if not view.isExpanded(model.index_of(up)):
                return False
            up = up.parent
        return True

    visible = [n for n in model.message_nodes() if shown(n)]
    view.setCurrentIndex(model.index_of(visible[len(visible) // 2] if visible else turn))
    settle(qtbot, w)
    bar = w.timeline.verticalScrollBar()
    if bar.maximum() > 0:
        bar.setValue(max(1, bar.maximum() // 2))
    settle(qtbot, w)


def wait_polls(qtbot: Any, w: MainWindow, counts: Counts, n: int) -> None:
    start = counts.polls
    qtbot.waitUntil(lambda: counts.polls >= start + n, timeout=n * POLL_MS + WAIT_MS)
    settle(qtbot, w)


def test_the_view_holds_still_through_polls_and_an_outside_append(qtbot: Any, live_window: MainWindow, demo_copy: Demo) -> None:
    w = live_window
    assert run(qtbot, w, w.open_database(demo_copy.url), timeout=WAIT_MS)
    assert w.poll.isActive() and w.poll.interval() == POLL_MS
    counts = Counts(w)
    for key in JOURNEY:
        open_thread(qtbot, w, key)
        make_choices(qtbot, w, key)
        before, moved = seen(w), counts.snapshot()
        reloads = getattr(w.live, "reloads", 0)
        wait_polls(qtbot, w, counts, 3)
        assert seen(w) == before, key
        assert counts.snapshot() == moved, key  # no model was reset, nothing flashed empty
        assert getattr(w.live, "reloads", 0) == reloads and not w.banner.isVisible(), key

    # another program appends a message to the open thread through its own connection
    key = JOURNEY[-1]
    before, moved = seen(w), counts.snapshot()
    with fresh(demo_copy) as other:
        new_id = other.runs.append_message(key, user("A question from another program: is p95 back under 200 ms?"))
    qtbot.waitUntil(lambda: w.timeline_model.contains(new_id), timeout=2 * POLL_MS + WAIT_MS)
    settle(qtbot, w)
    after = seen(w)
    grown = after.pop("groups")
    kept = before.pop("groups")
    assert {k: v for k, v in grown.items() if k in kept} == kept  # every turn as the user left it
    assert after == before
    assert counts.snapshot() == moved and not w.banner.isVisible()
    assert w.thread_model.thread_at(w.thread_model.row_of(key)).message_count == w.state.thread.message_count
