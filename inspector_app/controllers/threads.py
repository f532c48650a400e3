"""The database and its threads: opening a database, the thread list (paged by
:mod:`.thread_list`; pressures come with its rows), opening a thread (first page before the side panels), and the thread header.

Opening a thread binds :class:`~.tasks.ThreadTasks` to it: whatever the previous view still had in
flight is cancelled, and the new view's reads run as its tasks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine

from PySide6.QtCore import QModelIndex, QSettings

from engine.core.errors import EngineError, ThreadNotFound
from engine.core.views import CompactionState, HistoryRecord, PressureStatus, SourceCompaction, ThreadInfo, ThreadQuery

from ..layout import InspectorLayout
from ..logic.pressure_text import compactions_text, list_ratio, of_threshold_text, pressure_view, window_text, window_tooltip
from ..logic.state import ThreadState, ViewState, count_of, error_code, error_text, plural
from ..logic.tasks import Report, TaskSet, ThreadTasks, finished
from ..logic.timeline.pages import source_name
from ..logic.urls import secrets_of
from ..models.threads import COL_GENERATION, COL_SOURCE, KeyRole
from ..models.timeline import BoundaryInfo, PageRequest, TimelinePage
from ..panels.checks.controller import ChecksController
from ..panels.events.controller import EventsController, selected_event
from ..panels.pressure.widget import measuring_text
from ..service_api import CompactionAPI, InspectorService, ReadsAPI
from ..service_client import FacetClient, invoke
from ..widgets.connect import RecentConnections, strip_password
from ..widgets.whatif import ProgressRelay
from .compaction import CompactionController
from .paging import PagingController, read_page
from .thread_list import ThreadListController

STATUS_PROGRESS_INTERVAL = 0.1  # seconds between two progress updates of a cold measurement (at most ~10/s)

Opener = Callable[[str], InspectorService]


class ThreadsController:
    """Opens databases and threads and keeps the thread list and header current."""

    def __init__(
        self,
        ui: InspectorLayout,
        client: FacetClient,
        tasks: TaskSet,
        view: ThreadTasks,
        state: ThreadState,
        report: Report,
        *,
        paging: PagingController,
        compaction: CompactionController,
        opener: Opener | None,
        connect: Callable[[Opener, str], Awaitable[None]],
        settings: QSettings,
        loaded: Callable[[str], None],
        thread_list: ThreadListController,
        events: EventsController,
        checks: ChecksController,
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.view = view
        self.state = state
        self.report = report
        self.paging = paging
        self.compaction = compaction
        self._opener = opener
        #: opens a service on the client (``ServiceClient.open``): the one thing here beyond the facets granted
        self._connect = connect
        self._settings = settings
        self._loaded = loaded
        self.list = thread_list
        self.events = events
        self.checks = checks
        thread_list.opening = lambda: self.view.key  # a thread loading is not the one the panels show yet
        #: the measurement whose progress the header and gauge may show: (thread key, load number)
        self._measurement: tuple[str, int] | None = None
        self._measurements = 0
        selection = ui.thread_list.selectionModel()
        selection.currentRowChanged.connect(self._on_thread_current)
        selection.selectionChanged.connect(lambda *_a: self._on_thread_current(ui.thread_list.currentIndex(), QModelIndex()))  # a click selects after it moves the current row
        #: the thread a row asked to open and its load (one load however many signals say so)
        self._asked: tuple[str, asyncio.Task[Any]] | None = None
        #: the thread the status bar's message is about (:data:`DATABASE`: the database; None: none)
        self._message_about: str | None = None
        ui.statusBar().messageChanged.connect(self._on_message)

    # == database ===============================================================================
    async def open_database(self, url: str | None, *, select: str | None = None) -> bool:
        """Open ``url`` (the embedded demo database when ``None``), list its threads, select one.

        Returns False (with the error in the banner) when it could not be opened or its threads
        could not be listed. A thread that cannot be read does not stop the opening: it shows
        its error in place, the others stay usable."""
        bar = self.ui.statusBar()
        self.say("Opening database…")
        self.state.secrets = secrets_of(url)  # masked in every message from now on (the banner, the log)
        try:
            if url is None:
                url = await self.client.run(default_database_url)
            elif not url.strip():  # never the demo database in disguise
                raise EngineError("empty database URL: give a SQLite file or a database URL", code="invalid_db_url")
            await self._connect(self._opener or open_engine_service, url)
        except Exception as exc:  # noqa: BLE001 - any failure to open is shown, not raised
            self.report(exc, "open database")
            bar.showMessage("Not connected")
            return False
        RecentConnections(self._settings).add(url)
        self.ui.banner.clear()
        self.ui.setWindowTitle(f"Compaction Inspector · {database_name(url)}")
        self.state.database = url
        self.state.listing = None
        try:
            await self.load_threads(select=select)
        except Exception as exc:  # noqa: BLE001 - the list itself cannot be read (a row every listing reads)
            self.report(exc, "list threads")
            bar.showMessage("Cannot list the threads of this database")
            return False
        return True

    async def load_threads(self, *, select: str | None = None) -> None:
        """List the threads (the first page of the list's query) and open one (``select``, the
        open one, else the one with the most compactions); a thread that fails to load shows its
        error in place. A thread beyond the first page is found and selected all the same."""
        page = await self.list.load()
        current = select or (self.state.thread.key if self.state.thread else None)
        self.state.listing = self.list.listing
        self.show_columns()
        self.say(self.list.count_text())
        if not page.total:
            return
        key = current  # one asked for (--thread, an import) is found however far down the list
        found = key is not None and (self.ui.thread_model.row_of(key) is not None or await self.list.reveal(key))
        if key is not None and not found and not await self.client.apply(thread_exists, key):
            fallback = await self.client.apply(most_compacted)
            if select is not None:
                self.ui.banner.show_error("thread_not_found", f"no thread {select!r}; showing {fallback!r}")
            key = fallback
        if key is None:
            key = await self.client.apply(most_compacted)  # by default the thread with the most compaction history: what the inspector is for
        if key is not None:
            await self.select_thread(key, find=not found)

    def show_columns(self) -> None:
        """The Source column shown only when a thread held is imported (the Gen column then makes
        room for the title: the generation is in the header)."""
        model = self.ui.thread_model
        imported = any(t.source_format for t in model.held_threads())
        self.ui.thread_list.setColumnHidden(COL_SOURCE, not imported)
        self.ui.thread_list.setColumnHidden(COL_GENERATION, imported)

    # == the status bar ===========================================================================
    def say(self, text: str, key: str | None = None) -> None:
        """A status-bar message about thread ``key`` (None: about the database): opening another
        thread clears a message about a thread that is not the one opened."""
        self.ui.statusBar().showMessage(text)
        self._message_about = key if key is not None else DATABASE

    def _on_message(self, text: str) -> None:
        """A message shown by any component: it is about the thread open when it was shown."""
        if text:
            self._message_about = self.view.key
        else:
            self._message_about = None

    def _clear_other_thread_message(self, key: str) -> None:
        bar = self.ui.statusBar()
        about = self._message_about
        if bar.currentMessage() and about is not None and about != DATABASE and about != key:
            bar.clearMessage()

    # == threads ================================================================================
    async def select_thread(self, key: str, *, find: bool = True) -> None:
        """Select ``key`` in the list and load it. A thread beyond the rows held is looked for
        while it opens (``find``): its row counted by the database and its page fetched, however
        far down the list (:meth:`.thread_list.ThreadListController.reveal`)."""
        row = self.ui.thread_model.row_of(key)
        if row is not None:
            self.list.select_row(row)
        elif find:
            self.tasks.spawn(self.list.reveal(key), "find the thread in the list")
        await self.load_thread(key)

    def _on_thread_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        """A row made current *and selected* (a click, the keyboard) opens its thread. Qt also makes
        the first row current, unselected, when the list gets the focus back with no current row (a
        closed menu: Filters → Clear filters): that opens nothing (issue 26's trial). A mouse click
        makes its row current first and selects it after (``QAbstractItemView.mousePressEvent``), so
        the selection's change is heard too; a thread asked for and still loading is not asked again.
        A click back on the open row while another thread loads opens the open one afresh (the other
        load is cancelled): the panels never end on a thread the list does not show selected."""
        if not current.isValid() or not self.ui.thread_list.selectionModel().isRowSelected(current.row(), current.parent()):
            return
        key = current.data(KeyRole)
        asked = self._asked
        if asked is not None and asked[0] == key and not asked[1].done():
            return
        loading = asked[0] if asked is not None and not asked[1].done() else self.view.key  # asked for, or its view bound
        if key and (self.state.thread is None or key != self.state.thread.key or (loading is not None and loading != key)):
            self._asked = (key, self.tasks.spawn(self.load_thread(key), "load thread"))  # (back on the open row: the other load is dropped)

    async def load_thread(self, key: str, *, keep: int | None = None, scroll: int | None = None, restore: ViewState | None = None) -> None:
        """Open a new view of ``key`` (cancelling every task of the previous one) and wait until it
        has loaded or was itself superseded; ``keep`` re-selects a message id, ``scroll`` the
        scroll position; ``restore`` puts back all the user made of the previous view of the same
        thread (:func:`capture_view`). A failure is reported by the view's task group."""
        if restore is None and keep is not None and self.state.thread is not None and self.state.thread.key == key:
            restore = capture_view(self.ui, self.paging)  # a re-read of the open thread keeps the view as it is
        if restore is not None:
            keep = restore.message if keep is None else keep
            scroll = restore.scroll if scroll is None else scroll
        self.view.bind(key)
        self.list.recheck()  # another thread loading: nothing acts on the one shown until it is open
        await finished(self.view.spawn(self._load(key, keep, scroll, restore), "load thread"))

    async def _load(self, key: str, keep: int | None, scroll: int | None, restore: ViewState | None = None) -> None:
        """The first page is shown before the side panels (status, pressure history, replay,
        events) are read: those read the whole thread and must not hold up the timeline.

        Nothing that fails here ends the view: a thread whose header cannot be read shows the
        reason in place of its timeline; a state, page or panel that cannot be read leaves that
        part empty (a failed page is a gap row to retry) and the banner says why."""
        ui, model = self.ui, self.ui.timeline_model
        ui.confirm.hide()
        if self.state.thread is None or self.state.thread.key != key:
            self._clear_other_thread_message(key)
        # the header, the compaction state, the source's compactions and the first page in one trip
        first = await self.client.apply_interactive(read_opening, key, self.paging.first_request())
        info = first.info
        if isinstance(info, Exception):  # shown in place of the thread
            self._show_broken(key, info)
            raise info
        problems: list[tuple[str, BaseException]] = []
        boundary = None
        try:
            if isinstance(first.state, Exception):
                raise first.state
            boundary = BoundaryInfo.from_state(*first.state)
        except Exception as exc:  # noqa: BLE001 - the timeline still shows, without its summary card
            problems.append(("read compaction state", exc))
        sources: tuple[SourceCompaction, ...] = ()
        if isinstance(first.sources, Exception):  # the timeline still shows, without the source's boundaries
            problems.append(("read the source's compactions", first.sources))
        else:
            sources = first.sources
        self.state.thread = info
        self.state.status = None
        self.state.mark = first.mark
        self.list.recheck()  # the panels show the thread selected from here on
        self.state.compaction = compaction_of(first.state, sources) if not isinstance(first.state, Exception) else None
        ui.thread_model.update_thread(info)
        model.reset(key, boundary=boundary, running_turn=info.busy_reason in ("running", "waiting_for_user"), total=count_of(info), sources=sources)
        ui.summary_button.setVisible(boundary is not None)
        ui.thread_title.setText(info.title or key)
        ui.thread_meta.setText(plural(info.message_count, "message"))
        ui.hint_label.hide()
        self.compaction.update_button()
        paints = ui.timeline.paints
        if keep is None:
            ui.detail.clear()
        try:
            if isinstance(first.page, Exception):
                raise first.page
            await self.paging.load_first(first.page)
        except Exception as exc:  # noqa: BLE001 - the timeline stays empty and the detail pane says why
            model.gap_failed()
            problems.append(("read messages", exc))
            ui.thread_meta.setText(f"{plural(info.message_count, 'message')} · cannot be read")
            ui.detail.show_text(
                "Cannot read the messages of this thread",
                f"{error_code(exc)}: {error_text(exc)}\n\nThe thread's other panels and the other threads of this database are not affected.",
            )
        else:
            if keep is not None:
                await self.paging.ensure_loaded(keep)
            if restore is not None:
                ui.timeline.apply_expansion(restore.expansion)
            index = model.index_for_message(keep) if keep is not None else model.boundary_index()
            if keep is None and restore is not None and restore.row is not None:
                index = ui.timeline.index_of_key(restore.row)  # a group row (a turn, the summary card, a gap)
            if not index.isValid() and keep is None and sources:
                found = model.source_indexes()  # an imported thread opens on the source's newest compaction
                index = found[-1] if found else index
            if not index.isValid() and keep is None and model.exhausted:
                index = model.newest_message_index()  # nothing compacted: open on what happens now
            if index.isValid() and restore is not None:  # as it was: a row in a turn the user closed leaves it closed
                ui.timeline.setAutoScroll(False)
                ui.timeline.setCurrentIndex(index)
                ui.timeline.setAutoScroll(True)
            elif index.isValid():  # a fresh thread opens on its summary card
                ui.timeline.setCurrentIndex(index)
            elif keep is None and boundary is not None:
                ui.detail.show_boundary(boundary)  # its row is in a part not loaded yet: the card still shows
            if scroll is not None:
                ui.timeline.executeDelayedItemsLayout()
                ui.timeline.verticalScrollBar().setValue(scroll)
                if index.isValid() and (restore is None or ui.timeline.visualRect(index).isValid()):
                    ui.timeline.scrollTo(index)  # only if that moved it off screen (EnsureVisible; never opening a turn the user closed)
        if restore is not None and restore.tab is not None and restore.tab != ui.tabs.currentIndex():
            ui.tabs.setCurrentIndex(restore.tab)
        await self.paging.painted(paints)  # the side panels read the whole thread: not before the page is on screen
        problems += await self._load_side(key)
        if restore is not None:
            ui.replay.restore_view_state(restore.replay)
            self.events.select(restore.event)
        if problems:
            what, first_error = problems[0]
            others = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self.report(first_error, f"{what} of {key!r}{others}")
            if any(w in ("read messages", "read status") for w, _ in problems):
                ui.thread_model.set_failed(key, error_text(first_error))
        self._loaded(key)

    def _show_broken(self, key: str, exc: BaseException) -> None:
        """A thread that cannot be read at all: an empty timeline, the reason in the header, the
        detail pane and the list's row; the compact button off."""
        ui, reason = self.ui, error_text(exc)
        self.state.thread = None
        self.state.status = None
        self.list.recheck()
        ui.timeline_model.reset(key)
        ui.summary_button.setVisible(False)
        ui.thread_title.setText(key)
        ui.thread_meta.setText(f"Cannot read this thread: {reason}")
        ui.detail.show_text("Cannot read this thread", f"{key}\n\n{error_code(exc)}: {reason}\n\nThe other threads of this database are not affected.")
        ui.thread_model.set_failed(key, reason)
        self.compaction.update_button()

    async def _load_side(self, key: str) -> list[tuple[str, BaseException]]:
        """Status, pressure history, replay and events, each on its own: one that fails leaves its
        panel empty (saying so) and the others are still read. Returns what failed."""
        problems: list[tuple[str, BaseException]] = []
        ui = self.ui

        async def read(what: str, call: Coroutine[Any, Any, Any]) -> Any:
            try:
                return await call
            except Exception as exc:  # noqa: BLE001 - collected, reported once
                problems.append((what, exc))
                return None

        meta = ui.thread_meta.text()
        status = await read("read status", self._measure_status(key))
        if status is None and ui.gauge.progress is not None:  # it failed half-way: no progress left standing
            ui.gauge.set_status(None)
            ui.thread_meta.setText(meta)
        points = await read("read pressure history", self.client.call(CompactionAPI.pressure_history, key))
        episodes = await read("read replay", self.client.call(ReadsAPI.replay, key))
        events = await read("read events", self.client.call(ReadsAPI.events, key, limit=10_000))
        if status is not None:
            self.apply_status(status)
        ui.chart.set_points(points or [])
        if episodes is None:
            ui.replay.show_error(next(error_text(e) for w, e in problems if w == "read replay"))
        else:
            ui.replay.update_episodes(episodes)  # a fresh view of the same thread keeps its episode and step
        self.events.set_events(events or [])
        await self.checks.thread_opened(key, count_of(self.state.thread))
        return problems

    async def _measure_status(self, key: str) -> PressureStatus:
        """The open thread's status; a cold measurement of a huge thread shows its progress in the
        header and on the gauge ("measuring pressure: N of M messages counted"), throttled to
        :data:`STATUS_PROGRESS_INTERVAL`, until the status replaces it."""
        self._measurements += 1
        token = self._measurement = (key, self._measurements)
        total = count_of(self.state.thread)
        meta = self.ui.thread_meta.text()
        loop = asyncio.get_running_loop()

        def post(counted: int, _total: int) -> None:  # on the worker thread
            try:
                loop.call_soon_threadsafe(self._show_status_progress, token, counted, total, meta)
            except RuntimeError:  # the loop is closed (the window went away): nobody is watching
                pass

        relay = ProgressRelay(post, interval=STATUS_PROGRESS_INTERVAL)
        limit = total if total else 1 << 62  # an unknown count: only the interval throttles
        try:
            return await self.client.call(CompactionAPI.status_with_progress, key, lambda counted: relay(counted, limit))
        finally:
            if self._measurement == token:
                self._measurement = None

    def _show_status_progress(self, token: tuple[str, int], counted: int, total: int | None, meta: str) -> None:
        """One progress update, on the GUI thread: ignored when it is of another thread or an
        older load (a stale measurement still running on its worker), or the status is in."""
        state = self.state
        if token != self._measurement or self.view.key != token[0] or state.thread is None or state.thread.key != token[0] or state.status is not None:
            return
        self.ui.gauge.show_progress(counted, total)
        self.ui.thread_meta.setText(" · ".join(m for m in (meta, measuring_text(counted, total)) if m))

    async def reread_status(self, key: str) -> None:
        """Read the open thread's header and status again (as a task of its view)."""
        if self.view.key == key:
            await finished(self.view.spawn(self._reread_status(key), "read status"))

    async def _reread_status(self, key: str) -> None:
        info = await self.client.call(ReadsAPI.thread, key)
        status = await self.client.call(CompactionAPI.status, key)
        self.set_thread(info)
        self.apply_status(status)

    def set_thread(self, info: ThreadInfo) -> None:
        self.state.thread = info
        self.ui.thread_model.update_thread(info)

    async def update_side(self, key: str) -> None:
        """The live refresh found the open thread changed (not compacted): its pressure history,
        replay and events are read again and each panel changes only if what it shows did (the
        chart's and the requests' cursor, the episode and step, the selected event stay); the
        Requests page reads its rows again when the number of requests changed."""
        ui = self.ui
        points = await self.client.call(CompactionAPI.pressure_history, key)
        episodes = await self.client.call(ReadsAPI.replay, key)
        events = await self.client.call(ReadsAPI.events, key, limit=10_000)
        if self.view.key != key:
            return
        if list(points) != list(ui.chart.points()):
            more = len(points) != len(ui.chart.points())
            ui.chart.set_points(points)
            if more:
                ui.replay.reread_requests()
        ui.replay.update_episodes(episodes)
        if list(events) != list(ui.events_model.events()):
            chosen = self.events.selected()
            self.events.set_events(events)
            self.events.select(chosen)

    def apply_status(self, status: PressureStatus) -> None:
        """The thread header, gauge, chart, hint and the list's pressure column from ``status``."""
        ui = self.ui
        self.state.status = status
        blocked = self.compaction.blocked_reason(status.thread)
        view = pressure_view(status, blocked)
        ui.gauge.set_status(status, blocked)
        ui.chart.set_status(status)
        ui.show_pressure_line(view)
        ui.thread_model.set_pressure(status.thread, list_ratio(status), status.tokens, status.threshold)
        info = self.state.thread
        ui.thread_title.setText(info.title if info else status.thread)
        meta = [
            plural(info.message_count, "message") if info else "",
            f"generation {status.generation}",
            compactions_text(status),
            of_threshold_text(status) if status.window_known else "",
            window_text(status),
        ]
        if info and info.model:
            meta.insert(1, info.model)
        if info and info.source_format:
            meta.insert(1, f"imported from {source_name(info.source_format)}")
        ui.thread_meta.setText(" · ".join(m for m in meta if m))
        ui.thread_meta.setToolTip(window_tooltip(status))
        self.compaction.update_button()


#: what :meth:`ThreadsController.say` records for a message about the database (not a thread)
DATABASE = "\x00database"


@dataclass(frozen=True)
class Opening:
    """What a thread shows first, read in one worker trip: each part its value or the exception
    that reading it raised (each fails on its own, as separate reads would); ``mark``: the
    thread's mark (``ReadsAPI.versions``) read before the rest, None if it failed."""

    info: ThreadInfo | Exception
    state: tuple[CompactionState, list[HistoryRecord]] | Exception
    sources: tuple[SourceCompaction, ...] | Exception
    page: TimelinePage | Exception
    mark: Any = None


def thread_exists(service: InspectorService, key: str) -> bool:
    """Whether the store has thread ``key`` (on a worker)."""
    try:
        invoke(service, ReadsAPI.thread, key)
    except ThreadNotFound:
        return False
    return True


def most_compacted(service: InspectorService) -> str | None:
    """The key of the thread with the most compactions (on a worker): the one opened by default."""
    page = service.threads.page(ThreadQuery(sort="compactions"), limit=1)
    return page.threads[0].key if page.threads else None


def compaction_of(state: tuple[CompactionState, list[HistoryRecord]] | CompactionState, sources: Any) -> tuple[Any, ...]:
    """What a timeline is built for: (boundary, generation, compactions, the source's compactions);
    when it changes, the rows change (compacted turns, pruned results, a card), so the live
    refresh reads the whole view again."""
    st = state[0] if isinstance(state, tuple) else state
    return (st.boundary, st.generation, st.compact_count, len(sources) if isinstance(sources, (list, tuple)) else sources)


def capture_view(ui: InspectorLayout, paging: PagingController) -> ViewState:
    """What the user made of the open view (:class:`~.base.ViewState`)."""
    timeline = ui.timeline
    node = ui.timeline_model.node(timeline.currentIndex())
    return ViewState(
        message=paging.selected_message_id(),
        row=timeline.row_key(node) if node is not None else None,
        scroll=timeline.verticalScrollBar().value(),
        expansion=timeline.expansion(),
        tab=ui.tabs.currentIndex(),
        replay=ui.replay.view_state(),
        event=selected_event(ui),
    )


def database_name(url: str) -> str:
    """The one form of a database's name the window shows: a SQLite database as its file path
    (``sqlite:////tmp/a.db`` and ``/tmp/a.db`` read the same), any other URL without its password."""
    raw = url.strip()
    for prefix in ("sqlite+pysqlite:///", "sqlite:///"):
        if raw.startswith(prefix):
            path = raw[len(prefix):].split("?", 1)[0]
            return path or ":memory:"
    return strip_password(raw)


def read_opening(service: InspectorService, key: str, request: PageRequest) -> Opening:
    """The header, the compaction state and its history, the source's compactions (an imported
    thread) and the first page of ``key`` (runs on a worker)."""

    def attempt(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - handed back to the GUI thread, which reports it
            return exc

    marks = attempt(lambda: invoke(service, ReadsAPI.versions, key))
    info = attempt(lambda: invoke(service, ReadsAPI.thread, key))
    if isinstance(info, Exception):
        return Opening(info, info, (), info)
    state = attempt(lambda: (invoke(service, ReadsAPI.compaction_state, key), invoke(service, ReadsAPI.history, key)))
    sources = attempt(lambda: tuple(invoke(service, ReadsAPI.source_compactions, key))) if info.source_format else ()
    mark = None if isinstance(marks, Exception) else marks[1]
    return Opening(info, state, sources, attempt(lambda: read_page(service, key, request)), mark)


def default_database_url() -> str:
    """The embedded demo database, built on first use (runs on a worker thread)."""
    from engine.apps.demo import ensure_demo  # lazy: engine.service and the demo are heavy imports
    from engine.service import default_database_url as default_url

    url = default_url()
    ensure_demo(url)
    return url


def open_engine_service(url: str) -> InspectorService:
    from engine.service import open_service

    return open_service(url)
