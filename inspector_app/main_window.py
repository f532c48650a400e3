"""The main window: the layout of :mod:`inspector_app.layout` wired to the components of
:mod:`inspector_app.controllers` (threads, paging, search, selection, compaction, import, refresh,
theming). Transcript files dropped on the window are imported (:mod:`.controllers.importing`).

What the user set is remembered between launches (:mod:`inspector_app.preferences`): the last
database (:meth:`MainWindow.start` opens it again; with none, the first-launch welcome shows), the
theme, the window's geometry and splitter sizes, the last folder of a file dialog and where imports
go. The Help menu lists the keyboard shortcuts (read from the window's actions) and the version.

Every service call goes through :class:`~inspector_app.service_client.ServiceClient` from an
asyncio task. Window-wide work (opening a database, measuring the list's pressure, a manual
compaction, a test's coroutine started with :meth:`MainWindow.spawn`) runs in :attr:`tasks`;
everything that belongs to the open thread runs in :attr:`view`, which opening another thread (or a
fresh view of the same one) cancels. Failures land in the error banner and emit :attr:`failed`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence, QShowEvent

from . import preferences, theme
from .controllers.compaction import CompactionController
from .controllers.fleet import FleetController
from .controllers.importing import ImportController, dropped_paths
from .controllers.paging import PagingController
from .controllers.refresh import RefreshController
from .controllers.search import SearchController
from .controllers.sessions import SessionsController
from .controllers.steering import SteeringController
from .controllers.theming import ThemeController
from .controllers.thread_list import ThreadListController
from .controllers.threads import Opener, ThreadsController, default_database_url
from .layout import TABS, InspectorLayout
from .logic.state import ThreadState, error_code, error_text
from .logic.tasks import TaskSet, ThreadTasks, finished
from .logic.urls import redact
from .panels.audit.controller import RevertAuditController
from .panels.checks.controller import ChecksController
from .panels.detail.controller import SelectionController
from .panels.events.controller import EventsController
from .panels.registry import PanelDeps, build_controllers
from .panels.replay.controller import ReplayController
from .service_api import CompactionAPI, ImportsAPI, ReadsAPI, SteeringAPI, ThreadsFacet
from .service_client import ServiceClient
from .widgets.connect import ConnectDialog, RecentConnections
from .widgets.help import AboutDialog, ShortcutsDialog
from .widgets.preferences_dialog import PreferencesHook
from .widgets.welcome import WelcomePage

__all__ = ["TABS", "MainWindow"]

T = TypeVar("T")


class MainWindow(InspectorLayout):
    """Threads list, timeline, detail/pressure/replay/events tabs, error banner, compact button."""

    #: an async operation failed: (error code, message); the banner shows the same
    failed = Signal(str, str)
    #: a thread finished loading (key): timeline first page, status, chart and replay are in
    threadLoaded = Signal(str)

    def __init__(
        self,
        client: ServiceClient,
        *,
        opener: Opener | None = None,
        settings: QSettings | None = None,
        theme_manager: theme.ThemeManager | None = None,
        poll_ms: int = 3000,
        page_size: int = 500,
        remember: bool = True,
    ) -> None:
        super().__init__()
        self.client = client
        self._settings = settings or QSettings()
        #: save the session (database, theme, geometry, splitter) and restore geometry and splitter;
        #: off for ``--screenshot`` runs, whose pictures must not depend on (or change) the user's settings
        self.remember = remember
        #: the database open now (None before one opened; the URL as given, password included)
        self.database: str | None = None
        self.theme_manager = theme_manager
        self.page_size = page_size
        self._connect_dialog: ConnectDialog | None = None
        #: window-wide tasks (not bound to a thread)
        self.tasks = TaskSet(self.report)
        #: the open thread's tasks: cancelled when another view is opened
        self.view = ThreadTasks(self.report)
        self.state = ThreadState()
        # each controller is given the facets of the service it calls (client.facets) and the window's
        # interface (logic.window.Window: this window) in place of lambdas into the other controllers
        self.paging = PagingController(self, client.facets(ReadsAPI, CompactionAPI), self.view, self.state, page_size=page_size)
        self.search_control = SearchController(self, client.facets(ReadsAPI), self.view, self.state, self.paging)
        self.compaction = CompactionController(
            self, client.facets(CompactionAPI, ReadsAPI), self.tasks, self.view, self.state, self.report,
            window=self, selected=self.paging.selected_message_id, settings=self._settings,
        )  # fmt: skip
        self.thread_pages = ThreadListController(  # issue 26: paged, searched, sorted and filtered by the database
            self, client.facets(ThreadsFacet, ReadsAPI), self.tasks, self.report, window=self,
        )  # fmt: skip
        self.thread_pages.pending_changed = self.compaction.set_loading_selected  # Compact now waits for the thread selected
        self.fleet = FleetController(  # issue 26: Compaction → Fleet overview…
            self, client.facets(ThreadsFacet), self.tasks, self.report, thread_pages=self.thread_pages, window=self,
        )  # fmt: skip
        self.importer = ImportController(self, client.facets(ImportsAPI), self.tasks, window=self, settings=self._settings)
        self.sessions = SessionsController(
            self, client.facets(ImportsAPI), self.tasks, settings=self._settings, importer=self.importer, window=self, report=self.report,
        )  # fmt: skip
        self.steering = SteeringController(  # issue 23: pins (timeline menu) and the thread's own policy
            self, client.facets(SteeringAPI), self.tasks, self.view, self.report, window=self, compaction=self.compaction,
        )  # fmt: skip
        self.threadLoaded.connect(self.steering.thread_opened)
        self.file_menu.insertAction(self.export_action, self.sessions.action)  # File → Sessions on this machine…, after Import…
        #: the side panels' controllers, made from the one list (panels.registry.PANELS)
        self.panels = build_controllers(PanelDeps(self, client, self.tasks, self.view, self.state, self.report, self.paging, self.compaction, self))
        self.selection = self.panels.of("detail", SelectionController)
        self.replay_control = self.panels.of("replay", ReplayController)
        self.revert_audit = self.panels.of("audit", RevertAuditController)
        self.threads = ThreadsController(
            self, client.facets(ThreadsFacet, ReadsAPI, CompactionAPI), self.tasks, self.view, self.state, self.report,
            paging=self.paging, compaction=self.compaction, opener=opener, connect=client.open, settings=self._settings,
            loaded=self.threadLoaded.emit, thread_list=self.thread_pages,
            events=self.panels.of("events", EventsController), checks=self.panels.of("checks", ChecksController),
        )  # fmt: skip
        self.live = RefreshController(
            self, client.facets(ReadsAPI, CompactionAPI), self.tasks, self.view, self.state,
            threads=self.threads, paging=self.paging, window=self, poll_ms=poll_ms, parent=self,
        )  # fmt: skip
        self.poll = self.live.timer
        self.theming = ThemeController(self, theme_manager)
        self.connect_action.triggered.connect(self.show_connect_dialog)
        self._build_session_ui()
        self.prefs = PreferencesHook(self)  # Edit → Preferences… (issue #28)
        self.setAcceptDrops(True)

    def _build_session_ui(self) -> None:
        """The welcome page, File → Open the demo database, the Help menu, menu tooltips, and the
        geometry restored from the last session."""
        self.welcome = WelcomePage()
        self.welcome.hide()
        self.root_layout.addWidget(self.welcome, 1)
        self.welcome.openDatabase.connect(self.show_connect_dialog)
        self.welcome.importSession.connect(self.importer.ask)
        self.welcome.openDemo.connect(lambda: self.spawn(self.open_demo(), "open the demo database"))
        self.demo_action = QAction("Open the demo database", self)
        self.demo_action.setObjectName("openDemo")
        self.demo_action.setToolTip("Sample conversations with compactions, overflow recoveries and busy threads")
        self.demo_action.setStatusTip(self.demo_action.toolTip())
        self.demo_action.triggered.connect(lambda: self.spawn(self.open_demo(), "open the demo database"))
        self.file_menu.insertAction(self.import_action, self.demo_action)
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.setObjectName("helpMenu")
        self.shortcuts_action = QAction("Keyboard shortcuts", self)
        self.shortcuts_action.setObjectName("keyboardShortcuts")
        self.shortcuts_action.setShortcuts([QKeySequence("Ctrl+/"), QKeySequence(QKeySequence.StandardKey.HelpContents)])
        self.shortcuts_action.triggered.connect(self.show_shortcuts)
        self.about_action = QAction("About the Compaction Inspector", self)
        self.about_action.setObjectName("about")
        self.about_action.triggered.connect(self.show_about)
        help_menu.addAction(self.shortcuts_action)
        help_menu.addAction(self.about_action)
        self.help_menu = help_menu
        for menu in (self.file_menu, self.compaction_menu, help_menu):
            menu.setToolTipsVisible(True)  # a disabled action says why in its tooltip
        self.shortcuts_dialog: ShortcutsDialog | None = None
        self.about_dialog: AboutDialog | None = None
        if self.theme_manager is not None:
            self.theme_manager.changed.connect(self._theme_changed)
        if self.remember:
            geometry = preferences.remembered_bytes(self._settings, preferences.KEY_GEOMETRY)
            if geometry is not None:
                self.restoreGeometry(geometry)

    # == the session: welcome, restore, remember =================================================
    async def start(self, url: str | None = None, *, select: str | None = None) -> bool:
        """What ``compaction-inspector`` opens: ``url`` when given; else the database of the last
        session; else (a first launch) the welcome page, with nothing opened. The welcome also
        shows when the remembered database can no longer be opened (the banner says why)."""
        if url is None:
            url = preferences.last_database(self._settings)
            if url is None:
                self.show_welcome()
                return False
        opened = await self.open_database(url, select=select)
        if not opened and self.database is None:
            self.show_welcome()
        return opened

    def show_welcome(self) -> None:
        self.splitter.hide()
        self.welcome.show()
        self.statusBar().showMessage("Open a database, import a session or open the demo")

    def hide_welcome(self) -> None:
        self.welcome.hide()
        self.splitter.show()

    @property
    def welcome_shown(self) -> bool:
        return not self.welcome.isHidden()

    async def open_demo(self) -> bool:
        """File → Open the demo database (built on first use in the user's data directory)."""
        return await self.open_database(await self.client.run(build_demo_database))

    def show_shortcuts(self) -> ShortcutsDialog:
        """Help → Keyboard shortcuts: every key the window defines, read from its actions."""
        if self.shortcuts_dialog is not None:
            self.shortcuts_dialog.close()
        dialog = ShortcutsDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(lambda _r: setattr(self, "shortcuts_dialog", None))
        self.shortcuts_dialog = dialog
        dialog.open()
        return dialog

    def show_about(self) -> AboutDialog:
        if self.about_dialog is not None:
            self.about_dialog.close()
        dialog = AboutDialog(self, data_dir=str(preferences.data_directory()), settings=self._settings)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(lambda _r: setattr(self, "about_dialog", None))
        self.about_dialog = dialog
        dialog.open()
        return dialog

    def _theme_changed(self, _tokens: object) -> None:
        self.welcome.refresh_icons()
        if self.remember and self.theme_manager is not None:
            preferences.remember_theme(self._settings, self.theme_manager.mode)

    def save_session(self) -> None:
        """Remember the window's geometry and the splitter's sizes (on close)."""
        if not self.remember:
            return
        self._settings.setValue(preferences.KEY_GEOMETRY, self.saveGeometry())
        if self._sized and self.split_by_user:  # the default split is not remembered: it follows the window's width
            self._settings.setValue(preferences.KEY_SPLITTER, self.splitter.saveState())
        elif self._sized:
            self._settings.remove(preferences.KEY_SPLITTER)
        self._settings.sync()

    # == tasks ==================================================================================
    def spawn(self, coro: Coroutine[Any, Any, T], what: str) -> asyncio.Task[T]:
        """Run ``coro`` as a window-wide task; its failure goes to the banner (never to sys.excepthook)."""
        return self.tasks.spawn(coro, what)

    def report(self, exc: BaseException, what: str = "") -> None:
        """Show ``exc`` in the error banner (in words, the database password masked) and emit
        :attr:`failed`."""
        secrets = self.state.secrets
        code, text = error_code(exc), redact(error_text(exc), secrets)
        self.banner.show_error(code, redact(f"{what}: {text}", secrets) if what else text)
        self.failed.emit(code, text)

    @property
    def idle(self) -> bool:
        """No task is running (all loads have finished)."""
        return self.tasks.idle and self.view.idle

    async def settle(self) -> None:
        """Wait until every task (including ones they start) has finished."""
        while not self.idle:
            await asyncio.wait(self.tasks.tasks + self.view.tasks)

    def cancel_tasks(self) -> list[asyncio.Task[Any]]:
        """Cancel every task, window-wide and of the open thread; returns them."""
        return self.view.cancel() + self.tasks.cancel()

    async def _in_view(self, coro: Coroutine[Any, Any, T], what: str) -> T | None:
        """Run ``coro`` as a task of the open thread's view; its result, or None if it failed
        (reported) or the view was replaced meanwhile."""
        task = self.view.spawn(coro, what)
        return task.result() if await finished(task) else None

    # == what the app, the tests and the benchmarks drive ======================================
    def show_connect_dialog(self) -> None:
        dialog = ConnectDialog(RecentConnections(self._settings), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self.spawn(self.open_database(dialog.url()), "open database"))
        self._connect_dialog = dialog
        dialog.finished.connect(lambda _r: setattr(self, "_connect_dialog", None))
        dialog.open()

    async def open_database(self, url: str | None, *, select: str | None = None, create: bool = False) -> bool:
        """Open ``url`` (the embedded demo database when ``None``), list its threads, select one
        (``select``, else the one with the most compaction history) and start polling it; it is
        remembered as the database to open next time. ``create``: a SQLite file that does not
        exist yet is created (My sessions on the first import).

        Returns False (with the error in the banner) when it could not be opened."""
        if url is None:
            try:
                url = await self.client.run(default_database_url)
            except Exception as exc:  # noqa: BLE001 - shown, as any failure to open
                self.report(exc, "open database")
                return False
        if create and url.strip():
            try:
                await self.client.run(create_database, url)
            except Exception as exc:  # noqa: BLE001 - shown, as any failure to open
                self.report(exc, "create database")
                return False
        opened = await self.threads.open_database(url, select=select)
        if opened:
            self.database = url
            self.hide_welcome()
            if self.remember:
                preferences.remember_database(self._settings, url)
            self.poll.start()
            self.fleet.database_opened()
            await self.revert_audit.database_opened()  # read-only (a role that cannot write, --read-only): said and disabled
            await self.sessions.database_changed()  # Follow all writes into the database shown
        return opened

    # == what a controller may ask of the window (logic.window.Window) ==========================
    @property
    def compacting(self) -> bool:
        """A manual compaction is running."""
        return self.compaction.compacting

    def current_key(self) -> str | None:
        """The key of the thread the panels show (None: none)."""
        return self.state.thread.key if self.state.thread is not None else None

    def say(self, text: str) -> None:
        """A status-bar message about the database (:meth:`ThreadsController.say`)."""
        self.threads.say(text)

    async def reread_status(self, key: str) -> None:
        """Read the open thread's header and status again."""
        await self.threads.reread_status(key)

    async def reload_threads(self, select: str | None) -> None:
        """List the threads again and open ``select`` (else the open one, else the default)."""
        await self.threads.load_threads(select=select)

    async def select_thread(self, key: str) -> None:
        """Select ``key`` in the list (if it is not already) and load it."""
        await self.threads.select_thread(key)

    async def load_thread(self, key: str, *, keep: int | None = None, scroll: int | None = None) -> None:
        """(Re)read everything about ``key`` as a new view; ``keep`` re-selects a message id."""
        await self.threads.load_thread(key, keep=keep, scroll=scroll)

    async def refresh(self) -> None:
        """Re-read the open thread; keep selection and scroll position."""
        await self.live.refresh()

    async def compact(self, key: str) -> None:
        """Manual compaction of ``key`` off the GUI thread, then a fresh view of it."""
        await self.compaction.compact(key)

    async def select_message(self, message_id: int) -> bool:
        """Load the page around ``message_id`` if needed, select it and wait for its detail (False
        if it is not in the thread). Not for use inside a window task: it waits for all of them."""
        found = await self._in_view(self.paging.go_to(message_id), "select message")
        await self.settle()
        return bool(found)

    async def show_boundary(self) -> None:
        """Select the boundary row (loading the page around it if needed) and show the summary card."""
        await self._in_view(self.paging.show_boundary(), "show summary")

    def request_newest(self) -> None:
        """Jump to the newest messages (End, Ctrl+End, scrollToBottom, "Jump to newest")."""
        self.paging.request_newest()

    def request_oldest(self) -> None:
        """Jump to the first messages (Home, Ctrl+Home)."""
        self.paging.request_oldest()

    def find_next(self, *, from_start: bool = False) -> None:
        """Select the next message matching the search box (see :mod:`.controllers.search`)."""
        self.search_control.find_next(from_start=from_start)

    def open_whatif(self) -> Any:
        """Compaction → What if… for the open thread; returns the
        :class:`~inspector_app.widgets.whatif.WhatIfDialog` (None without a thread)."""
        return self.compaction.open_whatif()

    async def export_history(self, path: str, fmt: str = "md") -> bool:
        """File → Export compaction history… of the open thread to ``path`` (``md`` or ``json``)
        without the file dialog; False (the reason in the banner) when it could not be written."""
        if self.state.thread is None:
            return False
        return await self.compaction.export(self.state.thread.key, path, fmt)

    async def import_files(self, paths: list[str]) -> Any:
        """Import transcript files (as File → Import… and a drop do), then show the result dialog;
        returns the :class:`~inspector_app.widgets.import_result.ImportOutcome`."""
        return await self.importer.import_paths(paths)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt name)
        if dropped_paths(event.mimeData().urls()):  # with nothing open (the welcome), into My sessions
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt name)
        paths = dropped_paths(event.mimeData().urls())
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.importer.start(paths)

    def set_theme(self, mode: str) -> None:
        self.theming.set_theme(mode)

    # == lifecycle ==============================================================================
    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt name)
        first = not self._sized
        super().showEvent(event)
        self.size_splitter_once()
        if first and self.remember:  # the sizes of the last session over the default proportions
            state = preferences.remembered_bytes(self._settings, preferences.KEY_SPLITTER)
            if state is not None:
                self.restore_splitter(state)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt name)
        self.save_session()
        self.poll.stop()
        self.sessions.shutdown()
        self.fleet.close()
        self.cancel_tasks()
        super().closeEvent(event)


def build_demo_database() -> str:
    """The demo database's URL, built on first use (runs on a worker thread)."""
    from engine.apps.demo import ensure_demo

    url = preferences.demo_database()
    ensure_demo(url)
    return url


def create_database(url: str) -> None:
    """Create ``url``'s schema when it is a SQLite file that does not exist yet (runs on a worker)."""
    path = preferences.database_file(url)
    if path is None or path.exists():
        return
    from engine.service import open_service

    open_service(url, create=True).close()
