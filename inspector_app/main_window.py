"""The main window: threads | timeline | detail · pressure · replay, driven by async service calls.

Every service call goes through :class:`~inspector_app.service_client.ServiceClient` from a task
started with :meth:`MainWindow.spawn`; failures land in the error banner and emit :attr:`failed`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine

from PySide6.QtCore import QModelIndex, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QToolBar,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from engine.errors import EngineError, ThreadBusy
from engine.views import PressureStatus, ThreadInfo

from . import theme
from .models.events import COL_KIND, COL_TIME, EventRole, EventsModel, event_target
from .models.threads import COL_GENERATION, COL_MESSAGES, COL_PRESSURE, COL_STATE, COL_TITLE, KeyRole, StateRole, ThreadFilterModel, ThreadListModel
from .models.timeline import (
    COL_MARKERS,
    COL_TOKENS,
    MARKER_CONTINUES,
    MARKER_OPEN,
    MARKER_ORPHAN,
    MARKER_PRUNED,
    UNKNOWN,
    BoundaryInfo,
    MarkersRole,
    Node,
    PageRequest,
    TimelineModel,
    TimelinePage,
    message_matches,
)
from .service_client import ServiceClient
from .widgets.bars import ConfirmBar, ErrorBanner
from .widgets.connect import ConnectDialog, RecentConnections, strip_password
from .widgets.delegates import PillDelegate
from .widgets.detail import DetailPane
from .widgets.pressure import PressureChart, PressureGauge
from .widgets.replay import ReplayPanel
from .widgets.timeline_view import TimelineView

Opener = Callable[[str], Any]

BUSY_TEXT = {"running": "running", "waiting_for_user": "waiting for the user", "queued": "queued"}
BUSY_NOTE = {
    "running": "A run is in progress: compact by hand once it has finished.",
    "waiting_for_user": "The agent is waiting for the user's answer: compact by hand once the turn is over.",
    "queued": "A request is queued for this thread: compact by hand once it has run.",
}
STATE_TOKENS = {"idle": "ok", "running": "info", "waiting": "warn", "queued": "text_muted"}
MARKER_TOKENS = {MARKER_PRUNED: "cat_tool_results", MARKER_ORPHAN: "danger", MARKER_OPEN: "warn", MARKER_CONTINUES: "text_muted"}
TABS: tuple[str, ...] = ("detail", "pressure", "replay", "events")
PRESSURE_PREFETCH = 50  # threads whose pressure the list measures in the background
SEARCH_PAGE = 1000  # messages a search reads per worker trip
JUMP_PAGE = 200  # messages End reads (a few screens; the gap row above loads more as it shows)
TRIM_ROWS = 500  # top-level rows loaded beyond the screen on one side that trigger dropping them...
KEEP_ROWS = 250  # ...down to this many (the model and every relayout stay bounded on a long scroll)


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``1,200 messages``."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def error_code(exc: BaseException) -> str:
    return exc.code if isinstance(exc, EngineError) else type(exc).__name__


def error_text(exc: BaseException) -> str:
    return exc.message if isinstance(exc, EngineError) else (str(exc) or type(exc).__name__)


class MainWindow(QMainWindow):
    """Threads list, timeline, detail/pressure/replay tabs, error banner, compact button."""

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
    ) -> None:
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("Compaction Inspector")
        self.setWindowIcon(theme.icon("app", "accent", 32))
        self.client = client
        self._opener = opener
        self._settings = settings or QSettings()
        self._theme = theme_manager
        self.page_size = page_size
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread: ThreadInfo | None = None
        self._status: PressureStatus | None = None
        self._epoch = 0  # bumps on every thread switch / reload: late answers for older views are dropped
        self._compacting = False
        self._refreshing = False
        self._connect_dialog: ConnectDialog | None = None
        self._search_task: asyncio.Task[Any] | None = None
        self._jump_task: asyncio.Task[Any] | None = None
        self._gap_backward = False  # the current gap row was reached from below

        self._build_ui()
        self._build_toolbar()
        if theme_manager is not None:
            theme_manager.changed.connect(self._on_theme_changed)
        self.poll = QTimer(self)
        self.poll.setInterval(poll_ms)
        self.poll.timeout.connect(self._on_poll)
        self.resize(1440, 880)
        self._sized = False

    # == layout =================================================================================
    def _build_ui(self) -> None:
        self.banner = ErrorBanner()

        # threads
        self.thread_model = ThreadListModel(self)
        self.thread_proxy = ThreadFilterModel(self)
        self.thread_proxy.setSourceModel(self.thread_model)
        self.thread_filter = QLineEdit()
        self.thread_filter.setObjectName("threadFilter")
        self.thread_filter.setPlaceholderText("Filter threads")
        self.thread_filter.setClearButtonEnabled(True)
        self.thread_filter.textChanged.connect(self.thread_proxy.setFilterFixedString)
        self.thread_list = QTreeView()
        self.thread_list.setObjectName("threadList")
        self.thread_list.setModel(self.thread_proxy)
        self.thread_list.setRootIsDecorated(False)
        self.thread_list.setUniformRowHeights(True)
        self.thread_list.setAlternatingRowColors(False)
        self.thread_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.thread_list.setAllColumnsShowFocus(True)
        header = self.thread_list.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(COL_TITLE, QHeaderView.ResizeMode.Stretch)
        for col, width in ((COL_PRESSURE, 78), (COL_GENERATION, 40), (COL_STATE, 78)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
            header.resizeSection(col, width)
        self.thread_list.setColumnHidden(COL_MESSAGES, True)  # in the thread header and the tooltip; the title needs the room
        self.thread_list.setItemDelegateForColumn(COL_STATE, PillDelegate(self._state_pills, self.thread_list))
        self.thread_list.selectionModel().currentRowChanged.connect(self._on_thread_current)

        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(8, 8, 4, 8)
        title = QLabel("Threads")
        title.setObjectName("sectionTitle")
        ll.addWidget(title)
        ll.addWidget(self.thread_filter)
        ll.addWidget(self.thread_list, 1)

        # thread header + compact controls
        self.thread_title = QLabel("No thread selected")
        self.thread_title.setObjectName("threadTitle")
        self.thread_meta = QLabel("")
        self.thread_meta.setObjectName("muted")
        self.hint_label = QLabel("85% of the threshold reached: consider compacting now")
        self.hint_label.setObjectName("hintLabel")
        self.hint_label.hide()
        self.busy_label = QLabel()
        self.busy_label.setObjectName("busyLabel")
        self.busy_label.hide()
        for label in (self.thread_title, self.thread_meta, self.hint_label, self.busy_label):
            label.setWordWrap(True)
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.summary_button = QToolButton()
        self.summary_button.setObjectName("summaryButton")
        self.summary_button.setText("Summary card")
        self.summary_button.setToolTip("Show the rolling summary and where compacted history ends")
        self.summary_button.clicked.connect(lambda: self.spawn(self.show_boundary(), "show summary"))
        self.summary_button.hide()
        self.compact_button = QPushButton("Compact now")
        self.compact_button.setObjectName("compactButton")
        self.compact_button.setEnabled(False)
        self.compact_button.clicked.connect(self._ask_compact)
        self.busy = QProgressBar()
        self.busy.setObjectName("busyIndicator")
        self.busy.setRange(0, 0)
        self.busy.setFixedWidth(90)
        self.busy.setTextVisible(False)
        self.busy.hide()
        head = QFrame()
        head.setObjectName("threadHeader")
        hl = QHBoxLayout(head)
        hl.setContentsMargins(10, 8, 10, 8)
        texts = QVBoxLayout()
        texts.setSpacing(2)
        texts.addWidget(self.thread_title)
        texts.addWidget(self.thread_meta)
        texts.addWidget(self.hint_label)
        texts.addWidget(self.busy_label)
        hl.addLayout(texts, 1)
        hl.addWidget(self.busy)
        hl.addWidget(self.summary_button)
        hl.addWidget(self.compact_button)
        self.confirm = ConfirmBar()
        self.confirm.accepted.connect(self._confirmed_compact)

        self.search = QLineEdit()
        self.search.setObjectName("searchBox")
        self.search.setPlaceholderText("Search this thread (Enter: next match)")
        self.search.setClearButtonEnabled(True)
        self.search.addAction(theme.icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        self.search.textChanged.connect(lambda _text: self.find_next(from_start=True))
        self.search.returnPressed.connect(self.find_next)

        # timeline
        self.timeline_model = TimelineModel(self)
        self.timeline_model.rowsInserted.connect(self._on_rows_inserted)
        self.timeline = TimelineView()
        self.timeline.setObjectName("timelineView")
        self.timeline.setModel(self.timeline_model)
        self.timeline.jumpToEnd.connect(self.request_newest)
        self.timeline.jumpToStart.connect(self.request_oldest)
        self.timeline.gapVisible.connect(self._on_gap_visible)
        self.timeline.setAllColumnsShowFocus(True)
        self.timeline.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.timeline.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.timeline.setExpandsOnDoubleClick(True)
        th = self.timeline.header()
        th.setStretchLastSection(False)
        th.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col, width in ((1, 72), (2, 120), (3, 48)):
            th.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
            th.resizeSection(col, width)
        self.timeline.setItemDelegateForColumn(COL_TOKENS, PillDelegate(self._token_pills, self.timeline, align_right=True))
        self.timeline.setItemDelegateForColumn(COL_MARKERS, PillDelegate(self._marker_pills, self.timeline))
        self.timeline.selectionModel().currentChanged.connect(self._on_timeline_current)
        self.timeline.activated.connect(self._on_timeline_activated)

        center = QWidget()
        cl = QVBoxLayout(center)
        cl.setContentsMargins(4, 8, 4, 8)
        cl.addWidget(head)
        cl.addWidget(self.confirm)
        cl.addWidget(self.search)
        cl.addWidget(self.timeline, 1)

        # right tabs
        self.detail = DetailPane()
        self.gauge = PressureGauge()
        self.chart = PressureChart()
        pressure = QWidget()
        pl = QVBoxLayout(pressure)
        pl.setContentsMargins(4, 8, 4, 8)
        pl.addWidget(self.gauge)
        pl.addWidget(self.chart, 1)
        self.replay = ReplayPanel()
        self.events_model = EventsModel(self)
        self.events_view = QTreeView()
        self.events_view.setObjectName("eventsView")
        self.events_view.setModel(self.events_model)
        self.events_view.setRootIsDecorated(False)
        self.events_view.setAllColumnsShowFocus(True)
        self.events_view.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.events_view.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)  # rows are 1-3 lines
        eh = self.events_view.header()
        eh.setStretchLastSection(True)
        eh.resizeSection(COL_TIME, 76)
        eh.resizeSection(COL_KIND, 112)
        self.events_view.activated.connect(self._on_event_activated)
        self.events_view.clicked.connect(self._on_event_activated)
        self.events_empty = QLabel("No compaction events recorded for this thread.")
        self.events_empty.setObjectName("muted")
        events = QWidget()
        el = QVBoxLayout(events)
        el.setContentsMargins(8, 8, 8, 8)
        hint = QLabel("Every prune, summary and recovery step the engine recorded, oldest first. Click one to show it in the timeline.")
        hint.setObjectName("muted")
        hint.setWordWrap(True)
        hint.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        el.addWidget(hint)
        el.addWidget(self.events_empty)
        el.addWidget(self.events_view, 1)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("sideTabs")
        self.tabs.addTab(self.detail, "Detail")
        self.tabs.addTab(pressure, "Pressure")
        self.tabs.addTab(self.replay, "Replay")
        self.tabs.addTab(events, "Events")

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(center)
        self.splitter.addWidget(self.tabs)
        self.splitter.setChildrenCollapsible(False)
        left.setMinimumWidth(300)
        for i, stretch in enumerate((2, 3, 2)):
            self.splitter.setStretchFactor(i, stretch)

        root = QWidget()
        rl = QVBoxLayout(root)
        rl.setContentsMargins(6, 6, 6, 0)
        rl.addWidget(self.banner)
        rl.addWidget(self.splitter, 1)
        self.setCentralWidget(root)
        self.counts_label = QLabel("")
        self.counts_label.setObjectName("muted")
        self.statusBar().addPermanentWidget(self.counts_label)
        self.statusBar().showMessage("Not connected")

    def _build_toolbar(self) -> None:
        bar = QToolBar("Main")
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.connect_action = QAction(theme.icon("database"), "Open database…", self)
        self.connect_action.setShortcut(QKeySequence.StandardKey.Open)
        self.connect_action.triggered.connect(self.show_connect_dialog)
        self.refresh_action = QAction(theme.icon("refresh"), "Refresh", self)
        self.refresh_action.setShortcut(QKeySequence.StandardKey.Refresh)
        self.refresh_action.triggered.connect(lambda: self.spawn(self.refresh(), "refresh"))
        self.newest_action = QAction(theme.icon("forward"), "Jump to newest", self)
        self.newest_action.setToolTip("Load and show the newest messages of the thread (End in the timeline)")
        self.newest_action.triggered.connect(self.request_newest)
        bar.addAction(self.connect_action)
        bar.addAction(self.refresh_action)
        bar.addAction(self.newest_action)
        self.theme_actions = QActionGroup(self)
        menu = QMenu(self)
        for mode in theme.THEME_MODES:
            action = QAction(f"{mode.capitalize()} theme", self, checkable=True)
            action.setData(mode)
            action.setChecked((self._theme.mode if self._theme else "system") == mode)
            action.triggered.connect(lambda _checked=False, m=mode: self.set_theme(m))  # type: ignore[misc]
            self.theme_actions.addAction(action)
            menu.addAction(action)
        self.theme_button = QToolButton()
        self.theme_button.setObjectName("themeButton")
        self.theme_button.setText("Theme")
        self.theme_button.setMenu(menu)
        self.theme_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        bar.addWidget(spacer)
        bar.addWidget(self.theme_button)
        self.addToolBar(bar)
        self.find_action = QAction("Find", self)
        self.find_action.setShortcut(QKeySequence.StandardKey.Find)
        self.find_action.triggered.connect(lambda: (self.search.setFocus(), self.search.selectAll()))
        self.addAction(self.find_action)

    # == pills ==================================================================================
    def _state_pills(self, index: QModelIndex) -> list[tuple[str, str]]:
        state = index.data(StateRole)
        return [(state, STATE_TOKENS.get(state, "text_muted"))] if state else []

    def _token_pills(self, index: QModelIndex) -> list[tuple[str, str]]:
        text = index.data()
        return [(text, "badge_bg")] if text else []

    def _marker_pills(self, index: QModelIndex) -> list[tuple[str, str]]:
        return [(m, MARKER_TOKENS.get(m, "info")) for m in (index.data(MarkersRole) or ())]

    # == async plumbing =========================================================================
    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]:
        """Run ``coro`` on the loop; its failure goes to the banner (never to sys.excepthook)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._task_done(t, what))
        return task

    def _task_done(self, task: asyncio.Task[Any], what: str) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.report(exc, what)

    def report(self, exc: BaseException, what: str = "") -> None:
        """Show ``exc`` in the error banner and emit :attr:`failed`."""
        code, text = error_code(exc), error_text(exc)
        self.banner.show_error(code, f"{what}: {text}" if what else text)
        self.failed.emit(code, text)

    @property
    def idle(self) -> bool:
        """No task is running (all loads have finished)."""
        return not self._tasks

    async def settle(self) -> None:
        """Wait until every task (including ones they start) has finished."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel_tasks(self) -> list[asyncio.Task[Any]]:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        return tasks

    # == database ===============================================================================
    def show_connect_dialog(self) -> None:
        dialog = ConnectDialog(RecentConnections(self._settings), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self.spawn(self.open_database(dialog.url()), "open database"))
        self._connect_dialog = dialog
        dialog.finished.connect(lambda _r: setattr(self, "_connect_dialog", None))
        dialog.open()

    async def open_database(self, url: str | None, *, select: str | None = None) -> bool:
        """Open ``url`` (the embedded demo database when ``None``), list its threads, select one.

        Returns False (with the error in the banner) when it could not be opened."""
        self.statusBar().showMessage("Opening database…")
        try:
            if url is None:
                url = await self.client.run(_default_database_url)
            await self.client.open(self._opener or _open_engine_service, url)
        except Exception as exc:  # noqa: BLE001: any failure to open is shown, not raised
            self.report(exc, "open database")
            self.statusBar().showMessage("Not connected")
            return False
        RecentConnections(self._settings).add(url)
        self.banner.clear()
        self.setWindowTitle(f"Compaction Inspector · {strip_password(url)}")
        await self.load_threads(select=select)
        self.poll.start()
        return True

    async def load_threads(self, *, select: str | None = None) -> None:
        threads = await self.client.call("list_threads")
        current = select or (self._thread.key if self._thread else None)
        self.thread_model.set_threads(threads)
        self.statusBar().showMessage(f"{len(threads)} threads")
        if threads:
            # by default open the thread with the most compaction history: what the inspector is for
            key = current if current in self.thread_model.keys() else max(threads, key=_interest).key
            if select is not None and select not in self.thread_model.keys():
                self.banner.show_error("thread_not_found", f"no thread {select!r}; showing {key!r}")
            await self.select_thread(key)
        self.spawn(self._measure_pressures([t.key for t in threads[:PRESSURE_PREFETCH]]), "measure pressure")

    async def _measure_pressures(self, keys: list[str]) -> None:
        for key in keys:
            status = await self.client.call("status", key)
            self.thread_model.set_pressure(key, status.pressure_ratio)

    # == threads ================================================================================
    async def select_thread(self, key: str) -> None:
        """Select ``key`` in the list (if it is not already) and load it."""
        row = self.thread_model.row_of(key)
        if row is None:
            return
        proxy_index = self.thread_proxy.mapFromSource(self.thread_model.index(row, 0))
        if proxy_index.isValid() and self.thread_list.currentIndex().row() != proxy_index.row():
            self.thread_list.selectionModel().blockSignals(True)
            self.thread_list.setCurrentIndex(proxy_index)
            self.thread_list.selectionModel().blockSignals(False)
            self.thread_list.viewport().update()
        await self.load_thread(key)

    def _on_thread_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        key = current.data(KeyRole) if current.isValid() else None
        if key and (self._thread is None or key != self._thread.key):
            self.spawn(self.load_thread(key), "load thread")

    async def load_thread(self, key: str, *, keep: int | None = None, scroll: int | None = None) -> None:
        """(Re)read everything about ``key`` from the service; ``keep`` re-selects a message id.

        The first page is shown before the side panels (status, pressure history, replay, events)
        are read: those read the whole thread and must not hold up the timeline."""
        self._epoch += 1
        epoch = self._epoch
        self.confirm.hide()
        info = await self.client.call_interactive("thread", key)
        state = await self.client.call_interactive("compaction_state", key)
        history = await self.client.call_interactive("history", key)
        if epoch != self._epoch:
            return
        self._thread = info
        self.thread_model.update_thread(info)
        boundary = BoundaryInfo.from_state(state, history)
        self.timeline_model.reset(key, boundary=boundary, running_turn=info.busy_reason in ("running", "waiting_for_user"), total=info.message_count)
        self.summary_button.setVisible(boundary is not None)
        if keep is None:
            self.detail.clear()
        await self._load_gap(epoch, None, backward=False)
        if keep is not None:
            await self._ensure_loaded(epoch, keep)
        if epoch != self._epoch:
            return
        model = self.timeline_model
        index = model.index_for_message(keep) if keep is not None else model.boundary_index()
        if not index.isValid() and keep is None and model.exhausted:
            index = model.newest_message_index()  # nothing compacted: open on what happens now
        if index.isValid():  # a fresh thread opens on its summary card
            self.timeline.setCurrentIndex(index)
        elif keep is None and boundary is not None:
            self.detail.show_boundary(boundary)  # its row is in a part not loaded yet: the card still shows
        if scroll is not None:
            self.timeline.verticalScrollBar().setValue(scroll)
            if index.isValid():
                self.timeline.scrollTo(index)
        await self._load_side(key, epoch)
        if epoch == self._epoch:
            self.threadLoaded.emit(key)

    async def _load_side(self, key: str, epoch: int) -> None:
        status = await self.client.call("status", key)
        points = await self.client.call("pressure_history", key)
        episodes = await self.client.call("replay", key)
        events = await self.client.call("events", key, limit=10_000)
        if epoch != self._epoch:
            return
        self._apply_status(status)
        self.chart.set_points(points)
        self.replay.set_episodes(episodes)
        self.events_model.set_events(events)
        self.events_empty.setVisible(not events)
        self.tabs.setTabText(TABS.index("events"), f"Events ({len(events)})" if events else "Events")

    def _apply_status(self, status: PressureStatus) -> None:
        self._status = status
        self.gauge.set_status(status)
        self.chart.set_status(status)
        self.hint_label.setVisible(status.hint)
        self.thread_model.set_pressure(status.thread, status.pressure_ratio)
        info = self._thread
        title = info.title if info else status.thread
        self.thread_title.setText(title)
        meta = [
            plural(info.message_count, "message") if info else "",
            f"generation {status.generation}",
            plural(status.compact_count, "summary", "summaries"),
            f"{status.pressure_ratio * 100:.1f}% of threshold",
        ]
        if info and info.model:
            meta.insert(1, info.model)
        self.thread_meta.setText(" · ".join(m for m in meta if m))
        self._update_compact_button()

    def _update_compact_button(self) -> None:
        button = self.compact_button
        if self._compacting:
            button.setEnabled(False)
            button.setText("Compacting…")
            button.setToolTip("A manual compaction is running")
            return
        status = self._status
        reason = status.busy_reason if status else None
        self.busy_label.setText(BUSY_NOTE.get(reason, reason) if reason else "")
        self.busy_label.setVisible(bool(reason))
        if status is None:
            button.setEnabled(False)
            button.setText("Compact now")
            button.setToolTip("Select a thread")
        elif reason:
            button.setEnabled(False)
            button.setText(f"Can't compact: {BUSY_TEXT.get(reason, reason)}")
            button.setToolTip(f"Manual compaction needs an idle thread; this one is {BUSY_TEXT.get(reason, reason)}.")
        else:
            button.setEnabled(True)
            button.setText("Compact now")
            button.setToolTip("Summarize all complete history before the retained tail")

    # == timeline ===============================================================================
    async def _read(self, key: str, request: PageRequest) -> TimelinePage:
        """One keyset read for the timeline, with its offloads, on the interactive lane (token
        counts follow once the rows are shown: :meth:`_count_tokens`)."""
        stored = await self.client.call_interactive("messages_page", key, **request.query())
        return await self._with_offloads(key, stored, request.page)

    async def _read_around(self, key: str, message_id: int) -> TimelinePage:
        """A page around ``message_id`` (a quarter before it, the rest from it on): jumping into a
        gap loads one page there instead of every page on the way."""
        context = max(1, self.page_size // 4)
        before = await self.client.call_interactive("messages_page", key, before_id=message_id + 1, limit=context)
        after = await self.client.call_interactive("messages_page", key, after_id=message_id, limit=self.page_size - context)
        follows = None if len(before) < context else UNKNOWN

        def page(rows: Any, tokens: Any, offloads: Any, original: Any) -> TimelinePage:
            return TimelinePage(tuple(rows), tokens, offloads, len(after) < self.page_size - context, original, follows=follows)

        return await self._with_offloads(key, before + after, page)

    async def _with_offloads(self, key: str, stored: list[Any], make: Callable[..., TimelinePage]) -> TimelinePage:
        pruned = [s.id for s in stored if s.offload_sha256]
        offloads = await self.client.call_interactive("offloads", key, pruned) if pruned else {}
        return make(stored, {}, offloads, {})

    async def _count_tokens(self, epoch: int, page: TimelinePage) -> None:
        """Token badges of a page that is already shown (tiktoken runs on a background worker)."""
        model_name = self._thread.model if self._thread else None
        seen, original = await self.client.run(_count_page_tokens, model_name, list(page.messages), dict(page.offloads))
        if epoch == self._epoch:
            self.timeline_model.set_tokens(seen, original)

    def _insert(self, page: TimelinePage, *, below: Node | None = None) -> None:
        """Splice ``page`` in (its token badges follow); filled from below ``below`` (a gap), the
        rows under it stay on screen."""
        if below is not None and below in self.timeline_model.gaps():
            with self.timeline.anchored(self.timeline.indexBelow(self.timeline_model.index_of(below))):
                self.timeline_model.insert_page(page)
        else:
            self.timeline_model.insert_page(page)
        self._trim()
        self._show_counts()
        if page.messages:
            self.spawn(self._count_tokens(self._epoch, page), "count tokens")

    async def _load_gap(self, epoch: int, gap: Node | None, *, backward: bool) -> None:
        """Fill ``gap`` by one page from its lower (``backward``) or upper side; ``None``: the first page."""
        model = self.timeline_model
        key = model.key
        if key is None or epoch != self._epoch:
            return
        request = PageRequest(limit=self.page_size) if gap is None else model.gap_request(gap, backward=backward, limit=self.page_size)
        if request is None:
            return
        try:
            page = await self._read(key, request)
        except Exception:
            if epoch == self._epoch and gap is not None:
                model.gap_failed(gap)
            raise
        if epoch != self._epoch:
            return
        move = gap is not None and self.timeline_model.node(self.timeline.currentIndex()) is gap
        self._insert(page, below=gap if backward else None)
        if move and page.messages:  # Enter on a gap row: go on with the rows it loaded
            landing = page.messages[-1 if backward else 0].id
            self.timeline.setCurrentIndex(model.index_for_message(landing))

    def _trim(self) -> None:
        """Drop what lies far above or below the screen (never the current row): a long scroll
        keeps a bounded model; what was dropped is a gap row again and reloads when shown."""
        model, view = self.timeline_model, self.timeline
        if model.rowCount() <= TRIM_ROWS:
            return
        view.executeDelayedItemsLayout()
        first = view.first_visible()
        top = view.top_level_row(first)
        bottom = view.top_level_row(view.indexAt(view.viewport().rect().bottomLeft()))
        bottom = model.rowCount() - 1 if bottom < 0 else bottom
        current = view.top_level_row(view.currentIndex())
        if top - TRIM_ROWS > 0 and (current < 0 or current >= top - KEEP_ROWS):
            with view.anchored(first):
                model.evict_before(top - KEEP_ROWS)
        if model.rowCount() - 1 - bottom > TRIM_ROWS and (current < 0 or current <= bottom + KEEP_ROWS):
            model.evict_after(bottom + KEEP_ROWS)

    def _on_gap_visible(self, gap: Node, backward: bool) -> None:
        self.spawn(self._load_gap(self._epoch, gap, backward=backward), "load messages")

    def request_oldest(self) -> None:
        """Jump to the first messages (Home, Ctrl+Home) when they are not loaded."""
        if self._jump_task is None or self._jump_task.done():
            self._jump_task = self.spawn(self.jump_to_oldest(), "load messages")

    async def jump_to_oldest(self) -> None:
        """Load the first page (one read) and show its first row."""
        model = self.timeline_model
        epoch, key = self._epoch, model.key
        if key is not None and not model.reaches_start:
            page = await self._read(key, PageRequest(limit=min(self.page_size, JUMP_PAGE)))
            if epoch != self._epoch:
                return
            self._insert(page)
        self.timeline.show_start()

    def request_newest(self) -> None:
        """Jump to the newest messages (End, Ctrl+End, scrollToBottom, "Jump to newest")."""
        if self._jump_task is None or self._jump_task.done():
            self._jump_task = self.spawn(self.jump_to_newest(), "load messages")

    async def jump_to_newest(self) -> None:
        """Load the newest page (one read, whatever the thread's length) and show its last row;
        what lies between stays one gap row."""
        model = self.timeline_model
        epoch, key = self._epoch, model.key
        request = model.end_request(min(self.page_size, JUMP_PAGE)) if key is not None else None
        if key is not None and request is not None:
            try:
                page = await self._read(key, request)
            except Exception:
                if epoch == self._epoch:
                    model.gap_failed()
                raise
            if epoch != self._epoch:
                return
            self._insert(page)
        self.timeline.show_end()

    async def _ensure_loaded(self, epoch: int, message_id: int) -> bool:
        """Load the page around ``message_id`` if it lies in a gap; False if it is not in the thread."""
        model = self.timeline_model
        if model.contains(message_id):
            return True
        key = model.key
        if key is None or model.gap_for(message_id) is None:
            return False
        page = await self._read_around(key, message_id)
        if epoch == self._epoch:
            self._insert(page)
        return model.contains(message_id)

    async def _append_newer(self, epoch: int) -> None:
        """Live refresh: the page after the newest loaded message."""
        model = self.timeline_model
        if model.key is None:
            return
        page = await self._read(model.key, PageRequest(after_id=model.last_id(), limit=self.page_size))
        if epoch == self._epoch:
            self._insert(page)

    def _show_counts(self) -> None:
        """The permanent status-bar label: how much of the thread the timeline holds."""
        total = self._thread.message_count if self._thread else self.timeline_model.loaded_count()
        loaded = self.timeline_model.loaded_count()
        self.counts_label.setText(f"{loaded:,} of {total:,} messages loaded")
        self.counts_label.setToolTip("" if self.timeline_model.exhausted else "Scroll to a gap row or press Enter on it to load more; End loads the newest")

    def _on_rows_inserted(self, parent: QModelIndex, first: int, last: int) -> None:
        """New units open expanded (not compacted ones); new rounds open inside an open unit."""
        model = self.timeline_model
        if parent.isValid() and not self.timeline.isExpanded(parent):
            return
        for row in range(first, last + 1):
            index = model.index(row, 0, parent)
            node = model.node(index)
            if node is not None and node.children and node.kind in ("unit", "round") and not node.compacted:
                self.timeline.expandRecursively(index)

    def _on_timeline_current(self, current: QModelIndex, previous: QModelIndex) -> None:
        node = self.timeline_model.node(current)
        if node is None:
            return
        if node.kind == "boundary" and self.timeline_model.boundary is not None:
            self.detail.show_boundary(self.timeline_model.boundary)
        elif node.kind == "message" and node.info is not None:
            self.spawn(self._show_body(self._epoch, node), "read message")
        elif node.kind == "gap":
            self._gap_backward = previous.isValid() and self.timeline.visualRect(previous).top() > self.timeline.visualRect(current).top()
            self.detail.show_text("Not loaded yet", f"{node.label}\nThese messages load when the row scrolls into view; Enter loads the next page.")
        else:
            ids = f"#{node.first_id}–#{node.last_id}" if node.first_id is not None else ""
            tokens = f"{node.tokens:,} tokens" if node.tokens is not None else ""
            lines = [node.label, " · ".join(filter(None, (f"{len(node.children)} rows", ids, tokens, *node.markers)))]
            if node.compacted:
                lines.append("Compacted: the model sees only the summary of this.")
            self.detail.show_text(node.kind.capitalize(), "\n".join(lines))

    async def _show_body(self, epoch: int, node: Node) -> None:
        """The selected message in full: its body is read now (the timeline keeps previews only)."""
        key, info = self.timeline_model.key, node.info
        if key is None or info is None:
            return
        (stored,) = await self.client.call_interactive("messages_page", key, after_id=info.id - 1, limit=1) or (None,)
        if epoch != self._epoch or stored is None or stored.id != info.id or self._selected_message_id() != info.id:
            return  # the selection moved on meanwhile
        offload = self.timeline_model.offload(info.id)
        self.detail.show_message(stored, offload, tokens=node.tokens, original_tokens=node.original_tokens)
        if offload is not None:
            await self._read_original(offload)

    async def _read_original(self, offload: Any) -> None:
        try:
            text = await self.client.call("read_original", offload)
        except Exception as exc:  # noqa: BLE001: integrity and missing-file errors are shown in place
            self.detail.show_original_error(offload, f"{error_code(exc)}: {error_text(exc)}")
            self.report(exc, "read original")
            return
        self.detail.show_original(offload, text)

    async def select_message(self, message_id: int) -> bool:
        """Load the page around ``message_id`` if needed, select it and wait for its detail (False
        if it is not in the thread). Not for use inside a window task: it waits for all of them."""
        found = await self._go_to(message_id)
        await self.settle()
        return found

    async def _go_to(self, message_id: int) -> bool:
        await self._ensure_loaded(self._epoch, message_id)
        index = self.timeline_model.index_for_message(message_id)
        if not index.isValid():
            self.statusBar().showMessage(f"No message #{message_id} in this thread")
            return False
        self._select(index)
        return True

    async def show_boundary(self) -> None:
        """Select the boundary row (loading the page around it if needed) and show the summary card."""
        boundary = self.timeline_model.boundary
        if boundary is None:
            return
        await self._ensure_loaded(self._epoch, boundary.boundary)
        index = self.timeline_model.boundary_index()
        if index.isValid():
            self._select(index)
        else:
            self.detail.show_boundary(boundary)
        self.show_tab("detail")

    def _select(self, index: QModelIndex) -> None:
        self.timeline.setCurrentIndex(index)
        self.timeline.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)

    def show_tab(self, name: str) -> None:
        """Show the side tab ``name`` (one of :data:`TABS`)."""
        self.tabs.setCurrentIndex(TABS.index(name))

    def _on_timeline_activated(self, index: QModelIndex) -> None:
        node = self.timeline_model.node(index)
        if node is not None and node.kind == "gap":
            self.timeline_model.gap_cancelled(node)  # Enter retries a failed gap
            self.spawn(self._load_gap(self._epoch, node, backward=self._gap_backward), "load messages")
            return
        self.tabs.setCurrentWidget(self.detail)
        self.detail.body.setFocus()

    def find_next(self, *, from_start: bool = False) -> None:
        """Select the next message whose full text matches the search box, after the current row
        (wrapping around). The thread is scanned off the GUI thread, page by page, without loading
        it into the timeline; only the page around the match is loaded."""
        text = self.search.text()
        if self._search_task is not None and not self._search_task.done():
            self._search_task.cancel()
        if not text.strip():
            return
        node = None if from_start else self.timeline_model.node(self.timeline.currentIndex())
        after: int | None = None
        if node is not None and node.info is not None:
            after = node.info.id
        elif node is not None and node.kind == "gap":
            after = node.first_id
        elif node is not None and node.first_id is not None:
            after = node.first_id - 1
        elif node is not None and node.kind == "boundary" and self.timeline_model.boundary is not None:
            after = self.timeline_model.boundary.boundary
        self._search_task = self.spawn(self._search(self._epoch, text, after), "search")

    async def _search(self, epoch: int, text: str, after: int | None) -> None:
        """Scan after ``after`` to the end, then from the start up to ``after`` (inclusive)."""
        key = self.timeline_model.key
        if key is None:
            return
        needle = text.casefold().strip()
        total = self._thread.message_count if self._thread else 0
        scanned = 0
        for cursor, until in [(after, None)] + ([(None, after)] if after is not None else []):
            done = False
            while not done:
                found, cursor, count, done = await self.client.apply(_scan_page, key, needle, cursor, SEARCH_PAGE, until)
                if epoch != self._epoch:
                    return
                if found is not None:
                    if await self._go_to(found):
                        self.statusBar().showMessage(f"Match: message #{found}")
                    return
                scanned += count
                self.statusBar().showMessage(f"Searching for {text!r}: {min(scanned, total):,} of {total:,} messages read…")
        self.statusBar().showMessage(f"No match for {text!r} in {total:,} messages")

    # == compaction =============================================================================
    def _ask_compact(self) -> None:
        if self._thread is None:
            return
        self.confirm.ask(f"Compact “{self._thread.title}” now? All complete history before the retained tail is summarized; the raw messages are kept.")

    def _confirmed_compact(self) -> None:
        if self._thread is not None:
            self.spawn(self.compact(self._thread.key), "compact")

    async def compact(self, key: str) -> None:
        """Manual compaction off the GUI thread; on success re-read everything from the service."""
        self._compacting = True
        self.busy.show()
        self._update_compact_button()
        self.statusBar().showMessage("Compacting…")
        try:
            result = await self.client.call("compact", key)
        except EngineError as exc:
            self.report(exc, "compact")
            self.statusBar().showMessage("Compaction refused: nothing changed")
            if isinstance(exc, ThreadBusy):  # the thread became busy since we looked: show it
                await self._reread_status(key)
            return
        finally:
            self._compacting = False
            self.busy.hide()
            self._update_compact_button()
        if self._thread is not None and self._thread.key == key:
            self.banner.clear()
            await self.load_thread(key, keep=self._selected_message_id())
        if result.status == "no_op":
            self.statusBar().showMessage(f"Nothing to compact ({result.reason})")
        else:
            self.statusBar().showMessage(
                f"Compacted {result.compacted_messages} messages: {result.before_tokens:,} → {result.after_tokens:,} tokens, generation {result.generation}"
            )

    async def _reread_status(self, key: str) -> None:
        info = await self.client.call("thread", key)
        status = await self.client.call("status", key)
        if self._thread is not None and self._thread.key == key:
            self._thread = info
            self.thread_model.update_thread(info)
            self._apply_status(status)

    # == events =================================================================================
    def _on_event_activated(self, index: QModelIndex) -> None:
        """Show the event's subject in the timeline: the new boundary, or the first pruned result."""
        event = index.siblingAtColumn(0).data(EventRole)
        target = event_target(event) if event is not None else None
        if target is None:
            return
        boundary = self.timeline_model.boundary
        on_boundary = boundary is not None and event.data.get("boundary_after") == boundary.boundary
        found = self.timeline_model.boundary_index() if on_boundary else self.timeline_model.index_for_message(target)
        if found.isValid():
            self.timeline.setCurrentIndex(found)
            self.timeline.scrollTo(found)
        else:  # in a part not loaded yet: load the page around it
            self.spawn(self.show_boundary() if on_boundary else self._go_to(target), "show event")

    # == live refresh ===========================================================================
    def _on_poll(self) -> None:
        if not (self._refreshing or self._compacting or self._thread is None or not self.client.connected):
            self.spawn(self.refresh(), "refresh")

    async def refresh(self) -> None:
        """Re-read the open thread; keep selection and scroll position."""
        if self._thread is None or self._refreshing:
            return
        self._refreshing = True
        try:
            key, epoch = self._thread.key, self._epoch
            threads = await self.client.call("list_threads")
            info = await self.client.call("thread", key)
            state = await self.client.call("compaction_state", key)
            status = await self.client.call("status", key)
            if epoch != self._epoch:
                return
            self.thread_model.set_threads(threads)
            old = self._thread
            self._thread = info
            boundary = self.timeline_model.boundary
            moved = (boundary.boundary if boundary else None, boundary.generation if boundary else 0) != (state.boundary, state.generation)
            if moved or (old.busy_reason is None) != (info.busy_reason is None):
                await self.load_thread(key, keep=self._selected_message_id(), scroll=self.timeline.verticalScrollBar().value())
                return
            self._apply_status(status)
            self.timeline_model.set_total(info.message_count)
            if info.message_count > old.message_count and self.timeline_model.reaches_end:
                scroll = self.timeline.verticalScrollBar().value()
                await self._append_newer(epoch)  # rows are updated in place: the selection stays
                self.timeline.verticalScrollBar().setValue(scroll)
        finally:
            self._refreshing = False

    def _selected_message_id(self) -> int | None:
        node = self.timeline_model.node(self.timeline.currentIndex())
        return node.info.id if node is not None and node.info is not None else None

    # == theme / lifecycle ======================================================================
    def set_theme(self, mode: str) -> None:
        if self._theme is not None:
            self._theme.apply(mode)  # type: ignore[arg-type]

    def _on_theme_changed(self, _tokens: theme.Tokens) -> None:
        """Repaint what draws itself from the tokens (icons, painted widgets, item colours)."""
        self.banner.refresh_icons()
        self.connect_action.setIcon(theme.icon("database"))
        self.refresh_action.setIcon(theme.icon("refresh"))
        mode = self._theme.mode if self._theme else "system"
        for action in self.theme_actions.actions():
            action.setChecked(action.data() == mode)
        for widget in (self.timeline.viewport(), self.thread_list.viewport(), self.gauge, self.chart):
            widget.update()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        if not self._sized:  # splitter proportions once the window has its real width
            self._sized = True
            self.layout().activate()
            self.centralWidget().layout().activate()
            width = self.splitter.width()
            self.splitter.setSizes([int(width * 0.26), int(width * 0.43), int(width * 0.31)])

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt name)
        self.poll.stop()
        self.cancel_tasks()
        super().closeEvent(event)


def _interest(t: ThreadInfo) -> tuple[int, int, Any]:
    return (t.compact_count, t.generation, t.updated_at)


def _default_database_url() -> str:
    """The embedded demo database, built on first use (runs on a worker thread)."""
    from engine.demo import ensure_demo  # lazy: engine.service and the demo are heavy imports
    from engine.service import default_database_url

    url = default_database_url()
    ensure_demo(url)
    return url


def _open_engine_service(url: str) -> Any:
    from engine.service import open_service

    return open_service(url)


def _scan_page(service: Any, key: str, needle: str, after_id: int | None, limit: int, until: int | None) -> tuple[int | None, int | None, int, bool]:
    """On a worker: the first message after ``after_id`` (up to ``until``) matching ``needle``, read
    one page at a time. Returns (match, where to go on, messages read, the range is done)."""
    rows = service.messages_page(key, after_id=after_id, limit=limit)
    for n, stored in enumerate(rows):
        if until is not None and stored.id > until:
            return None, stored.id, n, True
        if message_matches(stored.message, needle):
            return stored.id, stored.id, n + 1, False
    return None, rows[-1].id if rows else after_id, len(rows), len(rows) < limit or (until is not None and bool(rows) and rows[-1].id >= until)


def _count_page_tokens(model: str | None, stored: list[Any], offloads: dict[int, Any]) -> tuple[dict[int, int], dict[int, int]]:
    """Tokens of each message as the model sees it (a pruned result counts as its preview, the
    way the compactor builds the surface), and the full count of each pruned one."""
    from engine.messages import META_PRUNED
    from engine.meter import default_meter

    meter = default_meter(model)
    seen_messages = [
        s.message.with_content(offloads[s.id].preview, **{META_PRUNED: offloads[s.id].sha256}) if s.id in offloads else s.message for s in stored
    ]
    seen = dict(zip((s.id for s in stored), meter.count_messages(seen_messages)))
    pruned = [s for s in stored if s.id in offloads]
    original = dict(zip((s.id for s in pruned), meter.count_messages([s.message for s in pruned]))) if pruned else {}
    return seen, original

