"""GUI fixtures: a per-test qasync loop on pytest-qt's QApplication, a leak check, the fake service
and a ready main window.

qasync and pytest-qt share one QApplication: tests are synchronous and wait with
``qtbot.waitUntil`` (which processes Qt events, and so runs the loop); never ``qtbot.waitSignal``
inside a coroutine (it nests an event loop inside the running one). The loop is torn down without
``loop.stop()``, which would set Qt's quit flag and make every later wait return at once."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from pathlib import Path
from typing import Any, Iterator

os.environ.setdefault("QT_API", "pyside6")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import qasync
from PySide6.QtCore import QCoreApplication, QEvent, QSettings
from PySide6.QtWidgets import QApplication

from inspector_app.main_window import MainWindow
from inspector_app.service_client import ServiceClient
from tests.gui.fake_service import FakeService, install_demo

pytestmark = pytest.mark.gui


def _drain(app: QApplication, tasks: list[asyncio.Task[Any]], timeout: float = 5.0) -> None:
    """Process Qt events (which run the qasync loop) until ``tasks`` are done."""
    deadline = time.monotonic() + timeout
    while any(not t.done() for t in tasks) and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.001)


@pytest.fixture
def qloop(qapp: QApplication) -> Iterator[qasync.QEventLoop]:
    """A qasync loop for this test only, already running inside Qt's event processing."""
    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in pending:
        t.cancel()
    _drain(qapp, pending)
    # never loop.stop(): it sets Qt's quit flag and every later qtbot.waitSignal returns at once
    loop._QEventLoop__is_running = False  # type: ignore[attr-defined]
    asyncio.events._set_running_loop(None)
    try:
        qapp.aboutToQuit.disconnect(loop._after_run_forever)
    except (RuntimeError, TypeError):
        pass
    loop.close()
    asyncio.set_event_loop(None)
    gc.collect()


@pytest.fixture
def no_leaks(qapp: QApplication) -> Iterator[None]:
    """Fail the test if it leaves top-level widgets behind."""
    before = set(map(id, QApplication.topLevelWidgets()))
    yield
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    qapp.processEvents()
    leaked = [w for w in QApplication.topLevelWidgets() if id(w) not in before and not w.objectName().startswith("qt_")]
    assert not leaked, f"leaked top-level widgets: {[type(w).__name__ + ':' + w.objectName() for w in leaked]}"


@pytest.fixture
def fake(tmp_path: Path) -> FakeService:
    service = FakeService(tmp_path / "workdir")
    install_demo(service)
    return service


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "inspector.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def window_factory(qapp: QApplication, no_leaks: None, qloop: qasync.QEventLoop, settings: QSettings) -> Iterator[Any]:
    """``window_factory(opener, page_size=..., settings=..., theme_manager=..., show=...)`` → a
    MainWindow (shown unless ``show=False``) whose client opens services with ``opener(url)``, on
    this test's QSettings unless others are given; every window is closed (its session saved, as a
    user's close does), its tasks drained and its client closed after the test."""
    made: list[tuple[MainWindow, ServiceClient]] = []
    default_settings = settings

    def make(opener: Any, *, page_size: int = 500, settings: QSettings | None = None, theme_manager: Any = None, show: bool = True) -> MainWindow:
        client = ServiceClient()
        window = MainWindow(client, opener=opener, settings=settings if settings is not None else default_settings,
                            theme_manager=theme_manager, poll_ms=3_600_000, page_size=page_size)
        if show:
            window.show()
        made.append((window, client))
        return window

    yield make
    for window, client in made:
        window.poll.stop()
        _drain(qapp, window.cancel_tasks())
        client.close()
        window.close()
        window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture
def make_window(window_factory: Any, fake: FakeService) -> Any:
    """``make_window(page_size=...)`` → a shown MainWindow on a client over the fake service."""

    def make(*, page_size: int = 500, opener: Any = None) -> MainWindow:
        return window_factory(opener or (lambda _url: fake), page_size=page_size)

    return make


def run(qtbot: Any, window: MainWindow, coro: Any, timeout: int = 5000) -> Any:
    """Run ``coro`` as a window task from a sync test and return its result (errors re-raised)."""
    task = window.spawn(coro, "test")
    qtbot.waitUntil(task.done, timeout=timeout)
    return task.result()


@pytest.fixture
def window(qtbot: Any, make_window: Any) -> MainWindow:
    """A window with the fake database open and the first thread (acme-vat) loaded."""
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    return w
