"""The fleet view's behaviour (issue 26): Compaction → Fleet overview… (Ctrl+Shift+F) opens
:class:`~..widgets.fleet.FleetWindow` and computes ``FleetStats`` on a worker (the database
aggregates; the window says it is computing, with the seconds so far); a click on a pressure band
shows those threads in the list (a filter, or the pressure order), a click on a worst thread opens
it in the main window."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtGui import QAction, QKeySequence

from engine.core.views import FleetStats, ThreadQuery

from ..layout import InspectorLayout
from ..logic.state import error_text
from ..logic.tasks import Report, TaskSet
from ..logic.window import Window
from ..service_api import InspectorService
from ..service_client import FacetClient
from ..widgets.fleet import FleetWindow
from .thread_list import DEFAULT_QUERY, ThreadListController

#: what a click on a pressure band shows in the list: (filters, sort, descending) and in words
BAND_QUERIES: dict[str, tuple[frozenset[str], str, bool, str]] = {
    "over_100": (frozenset({"over_threshold"}), "pressure", True, "at or over their threshold"),
    "85_100": (frozenset({"over_hint"}), "pressure", False, "over the hint line (85%), lowest first: the 85–100% band, then those over the threshold"),
    "50_85": (frozenset(), "pressure", True, "by pressure, highest first"),
    "below_50": (frozenset(), "pressure", False, "by pressure, lowest first"),
    "unknown": (frozenset(), "pressure", False, "by pressure: those never measured are at the end"),
}


def read_stats(service: InspectorService, query: ThreadQuery | None) -> FleetStats:
    """The fleet's figures (on a worker): every aggregate computed by the database."""
    return service.threads.stats(query)


class FleetController:
    """Owns :attr:`window` (built on first use) and :attr:`action`."""

    def __init__(self, ui: InspectorLayout, client: FacetClient, tasks: TaskSet, report: Report, *,
                 thread_pages: ThreadListController, window: Window) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.report = report
        self.pages = thread_pages
        self.main = window
        self.window: FleetWindow | None = None
        self._task: asyncio.Task[Any] | None = None
        self._started = 0.0
        self._ticker = QTimer(ui)
        self._ticker.setInterval(250)
        self._ticker.timeout.connect(self._tick)
        self.action = QAction("Fleet overview…", ui)
        self.action.setObjectName("fleetOverview")
        self.action.setShortcut(QKeySequence("Ctrl+Shift+F"))
        self.action.setToolTip("Every thread of the database: pressure bands, compactions per day, dropped specifics, the summarizer's cost")
        self.action.setEnabled(False)
        self.action.triggered.connect(self.show)
        ui.compaction_menu.addSeparator()
        ui.compaction_menu.addAction(self.action)

    def database_opened(self) -> None:
        self.action.setEnabled(True)
        if self.window is not None and self.window.isVisible():
            self.compute()

    def show(self) -> FleetWindow:
        """Open (or raise) the fleet window and compute its figures."""
        if self.window is None:
            self.window = FleetWindow()
            self.window.resize(self.ui.size())
            self.window.bandClicked.connect(self.show_band)
            self.window.threadClicked.connect(lambda key: self.tasks.spawn(self.open(key), "open thread"))
            self.window.refreshRequested.connect(self.compute)
        self.window.show()
        self.window.raise_()
        self.compute()
        return self.window

    def close(self) -> None:
        self._ticker.stop()
        if self._task is not None:
            self._task.cancel()
        if self.window is not None:
            self.window.close()
            self.window.deleteLater()
            self.window = None

    def query(self) -> ThreadQuery | None:
        """None (every thread) unless the window asks for the list's own search and filters."""
        if self.window is not None and self.window.only_list.isChecked():
            return self.pages.query
        return None

    def compute(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.window is not None:  # said at once: the worker may take seconds on a large store
            self._started = time.monotonic()
            self.window.show_loading("Computing the fleet's figures in the database…")
            self._ticker.start()
        self._task = self.tasks.spawn(self._compute(self.query()), "compute the fleet's figures")

    async def _compute(self, query: ThreadQuery | None) -> FleetStats | None:
        window = self.window
        if window is None:
            return None
        try:
            stats = await self.client.apply(read_stats, query)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - said in the window (and the banner)
            window.show_error(error_text(exc))
            self.report(exc, "compute the fleet's figures")
            return None
        finally:
            self._ticker.stop()
        if self.window is window:
            window.set_stats(stats, seconds=time.monotonic() - self._started)
        return stats

    def _tick(self) -> None:
        if self.window is not None and self._task is not None and not self._task.done():
            self.window.show_loading(f"Computing the fleet's figures in the database… {time.monotonic() - self._started:.1f} s")

    def show_band(self, band: str) -> None:
        """A band clicked: the list shows its threads (a filter or the pressure order)."""
        filters, sort, descending, words = BAND_QUERIES.get(band, (frozenset(), "pressure", True, "by pressure"))
        base = self.pages.query if self.query() is not None else replace(DEFAULT_QUERY, text=None)
        self.ui.thread_filter.blockSignals(True)
        self.ui.thread_filter.setText(base.text or "")
        self.ui.thread_filter.blockSignals(False)
        task = self.pages.set_query(replace(base, filters=filters, sort=sort, descending=descending))
        if task is not None:
            def said(t: asyncio.Task[Any]) -> None:
                if not (t.cancelled() or t.exception() is not None):
                    self.main.say(f"Threads {words}: {self.pages.count_text()}")

            task.add_done_callback(said)
        else:
            self.main.say(f"Threads {words}: {self.pages.count_text()}")
        self.ui.raise_()
        self.ui.activateWindow()

    async def open(self, key: str) -> None:
        """A worst thread clicked: open it in the main window, the list's one selected row (paged
        to however far down). A thread the list's search or filters leave out is shown all the
        same: they are cleared (the sort stays) and the status bar says so."""
        self.ui.raise_()
        self.ui.activateWindow()
        pages = self.pages
        cleared = False
        if pages.model.row_of(key) is None and not await pages.reveal(key) and pages.filtered:
            self.ui.thread_filter.blockSignals(True)
            self.ui.thread_filter.clear()
            self.ui.thread_filter.blockSignals(False)
            task = pages.set_query(replace(pages.query, text=None, filters=frozenset(), source_format=None))
            if task is not None:
                await task
            cleared = await pages.reveal(key)
        await self.main.select_thread(key)
        if pages.model.row_of(key) is None:  # not in the list at all (gone since the figures were computed)
            pages.clear_selection()
        if cleared:
            self.main.say(f"{key}: not among the threads the search and filters matched; they were cleared ({pages.count_text()})")
