"""Thread-bound background tasks: switching threads (or closing the window) while a slow read of
the old thread is in flight applies nothing of it and logs nothing; the task groups themselves."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from inspector_app.logic.tasks import TaskSet, ThreadTasks, finished
from inspector_app.main_window import MainWindow
from inspector_app.panels.detail.widget import message_body
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService, install_demo

pytestmark = pytest.mark.gui
OLD, NEW = "omega-long", "beta-running"


class GatedService(FakeService):
    """The fake, but a call of ``(method, key)`` listed in :attr:`gates` blocks its worker until
    the gate opens; :attr:`entered` / :attr:`left` are set when such a call starts / returns."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.gates: dict[tuple[str, str], threading.Event] = {}
        self.entered = threading.Event()
        self.left = threading.Event()

    def _record(self, name: str, *args: Any) -> Any:
        gate = self.gates.get((name, args[0])) if args and isinstance(args[0], str) else None
        if gate is not None:
            self.entered.set()
            gate.wait(10)
        try:
            return super()._record(name, *args)
        finally:
            if gate is not None:
                self.left.set()

    def gate(self, method: str, key: str) -> threading.Event:
        event = self.gates[(method, key)] = threading.Event()
        return event


@pytest.fixture
def gated(tmp_path: Path) -> GatedService:
    service = GatedService(tmp_path / "workdir")
    install_demo(service)
    return service


@pytest.fixture
def trouble(qloop: Any, caplog: pytest.LogCaptureFixture) -> Iterator[list[Any]]:
    """Everything that went wrong out of sight: loop exception-handler calls and WARNING+ log records."""
    seen: list[Any] = []
    qloop.set_exception_handler(lambda _loop, context: seen.append(context))
    with caplog.at_level(logging.WARNING):
        yield seen
        seen.extend(r for r in caplog.records if r.levelno >= logging.WARNING)


def opened(qtbot: Any, window_factory: Any, service: FakeService) -> tuple[MainWindow, list[tuple[str, str]]]:
    w = window_factory(lambda _url: service)
    failures: list[tuple[str, str]] = []
    w.failed.connect(lambda code, msg: failures.append((code, msg)))
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    return w, failures


def click_thread(w: MainWindow, key: str) -> None:
    """Select ``key`` in the thread list as a click does."""
    row = w.thread_proxy.mapFromSource(w.thread_model.index(w.thread_model.row_of(key), 0))
    w.thread_list.setCurrentIndex(row)


def calls_for(service: FakeService, key: str, since: int) -> list[str]:
    return [name for name, args in service.calls[since:] if args and args[0] == key]


def test_switching_threads_during_a_slow_status_applies_nothing_of_the_old_thread(qtbot: Any, window_factory: Any, gated: GatedService, trouble: list[Any]) -> None:
    w, failures = opened(qtbot, window_factory, gated)
    gate = gated.gate("status", OLD)
    click_thread(w, OLD)
    qtbot.waitUntil(gated.entered.is_set, timeout=5000)  # the old thread's first page is shown; its status is being measured
    assert w.timeline_model.key == OLD
    mark = len(gated.calls)
    click_thread(w, NEW)
    qtbot.waitUntil(lambda: w.state.status is not None and w.state.status.thread == NEW and w.idle, timeout=5000)
    gate.set()
    qtbot.waitUntil(gated.left.is_set, timeout=5000)
    qtbot.wait(50)  # the old answer reaches the loop (and must be dropped)
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert w.state.status.thread == NEW and w.gauge.status.thread == NEW and w.thread_title.text() == "Beta refund (running)"
    assert w.timeline_model.key == NEW and not w.compact_button.isEnabled()  # beta is running
    # (the gated one) the old view's task stopped: no pressure history, replay, events of it (its
    # first page's token badges, asked for once that page was painted, may land either side of the mark)
    assert [c for c in calls_for(gated, OLD, mark) if c != "visible_tokens"] == ["status"]
    assert not failures and not w.banner.isVisible() and not trouble


def test_switching_threads_during_a_slow_page_never_splices_the_old_page(qtbot: Any, window_factory: Any, gated: GatedService, trouble: list[Any]) -> None:
    w, failures = opened(qtbot, window_factory, gated)
    gate = gated.gate("messages_page", OLD)
    click_thread(w, OLD)
    qtbot.waitUntil(gated.entered.is_set, timeout=5000)  # the old thread's first page is being read
    click_thread(w, NEW)
    qtbot.wait(20)
    gate.set()  # the old page comes back while the new thread's reads wait behind it on the interactive lane
    qtbot.waitUntil(lambda: gated.left.is_set() and w.idle and w.state.status is not None and w.state.status.thread == NEW, timeout=5000)
    new_ids = [m.id for m in gated.threads[NEW].messages]
    old_ids = {m.id for m in gated.threads[OLD].messages}
    assert w.timeline_model.key == NEW and w.timeline_model.message_ids() == new_ids
    assert not old_ids & set(w.timeline_model.message_ids())
    assert not [args for name, args in gated.calls if name == "visible_tokens" and args[0] == OLD]  # never counted: never shown
    assert w.counts_label.text() == f"{len(new_ids)} of {len(new_ids)} messages loaded"
    assert not failures and not w.banner.isVisible() and not trouble


def test_closing_the_window_during_a_slow_read_logs_nothing(qtbot: Any, window_factory: Any, gated: GatedService, trouble: list[Any]) -> None:
    w, failures = opened(qtbot, window_factory, gated)
    gate = gated.gate("status", OLD)
    click_thread(w, OLD)
    qtbot.waitUntil(gated.entered.is_set, timeout=5000)
    w.close()  # cancels every task: window-wide and the open thread's
    gate.set()
    qtbot.waitUntil(lambda: gated.left.is_set() and w.idle, timeout=5000)
    qtbot.wait(50)
    assert not failures and not trouble


def test_a_reload_of_the_same_thread_cancels_the_older_view(qtbot: Any, window_factory: Any, gated: GatedService, trouble: list[Any]) -> None:
    """A fresh view of the same thread (after a compaction or an outside change) is a new view too:
    the older view's side panels are not applied over it."""
    w, failures = opened(qtbot, window_factory, gated)
    thread, original = gated.threads["acme-vat"], gated.pressure_history
    stale, gate, answered = list(thread.pressure), threading.Event(), []

    def history(key: str) -> Any:  # the first view's read is slow and answers with the old eight points
        if not answered:
            answered.append(key)
            gated.entered.set()
            gate.wait(10)
            gated.left.set()
            return stale
        return original(key)

    gated.pressure_history = history  # type: ignore[method-assign]
    first = w.spawn(w.load_thread("acme-vat"), "test")
    qtbot.waitUntil(gated.entered.is_set, timeout=5000)
    thread.pressure = thread.pressure[:3]
    second = w.spawn(w.load_thread("acme-vat"), "test")
    qtbot.waitUntil(second.done, timeout=5000)
    assert len(w.chart.points()) == 3
    gate.set()
    qtbot.waitUntil(lambda: gated.left.is_set() and first.done() and w.idle, timeout=5000)
    qtbot.wait(50)
    assert len(w.chart.points()) == 3  # the newer view's history, not the older one's eight points
    assert not failures and not trouble


def test_moving_the_selection_during_a_slow_body_read_shows_only_the_new_row(qtbot: Any, window_factory: Any, gated: GatedService, trouble: list[Any]) -> None:
    w, failures = opened(qtbot, window_factory, gated)
    messages = {m.id: m for m in gated.threads["acme-vat"].messages}
    original, gate, slow = gated.messages_page, threading.Event(), []

    def page(key: str, **kw: Any) -> Any:  # the body read of message 7 (a pruned result) is slow
        if kw.get("limit") == 1 and kw.get("after_id") == 6 and not slow:
            slow.append(key)
            gated.entered.set()
            gate.wait(10)
            gated.left.set()
        return original(key, **kw)

    gated.messages_page = page  # type: ignore[method-assign]
    reads = gated.called("read_original")
    w.timeline.setCurrentIndex(w.timeline_model.index_for_message(7))
    qtbot.waitUntil(gated.entered.is_set, timeout=5000)
    w.timeline.setCurrentIndex(w.timeline_model.index_for_message(10))
    gate.set()
    qtbot.waitUntil(lambda: gated.left.is_set() and w.idle, timeout=5000)
    qtbot.wait(50)
    assert w.detail.body.toPlainText() == message_body(messages[10].message)
    assert not w.detail.showing_pruned and gated.called("read_original") == reads  # 7's original was never read
    assert not failures and not trouble


# -- the task groups, without Qt ------------------------------------------------------------------


def test_bind_cancels_the_old_views_tasks_and_a_cancelled_task_is_silent() -> None:
    reported: list[tuple[str, str]] = []

    async def go() -> tuple[list[str], bool, bool]:
        view = ThreadTasks(lambda exc, what: reported.append((what, str(exc))))
        applied: list[str] = []
        gate = asyncio.Event()

        async def load(key: str) -> str:
            await gate.wait()
            applied.append(key)
            return key

        view.bind("a")
        old = view.spawn(load("a"), "load a")
        await asyncio.sleep(0)
        view.bind("b")
        new = view.spawn(load("b"), "load b")
        gate.set()
        old_done, new_done = await finished(old), await finished(new)
        return applied, old_done, new_done and view.key == "b" and view.idle

    applied, old_done, new_done = asyncio.run(go())
    assert applied == ["b"] and not old_done and new_done and not reported


def test_a_failure_is_reported_once_and_finished_does_not_raise() -> None:
    reported: list[tuple[str, str]] = []

    async def go() -> bool:
        tasks = TaskSet(lambda exc, what: reported.append((what, str(exc))))

        async def boom() -> None:
            raise RuntimeError("disk full")

        return await finished(tasks.spawn(boom(), "save"))

    assert asyncio.run(go()) is False
    assert reported == [("save", "disk full")]


def test_cancelling_the_waiter_leaves_the_task_running() -> None:
    async def go() -> str:
        tasks = TaskSet(lambda exc, what: None)
        gate = asyncio.Event()

        async def work() -> str:
            await gate.wait()
            return "done"

        task = tasks.spawn(work(), "work")
        waiter = asyncio.ensure_future(finished(task))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        gate.set()
        return await task

    assert asyncio.run(go()) == "done"
