"""The main window's widgets and how they are laid out: threads | timeline | detail · pressure · replay · events.

:class:`InspectorLayout` builds every widget and holds it as an attribute; it wires no behaviour
(the components in :mod:`inspector_app.controllers` connect the signals they handle). Only what is
pure layout is connected here: the thread filter box and the Find shortcut.
"""

from __future__ import annotations

from typing import Any, cast

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, QSize, Qt, QTimer
from PySide6.QtGui import QAction, QFont, QFontMetrics, QKeySequence, QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QBoxLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLayout,
    QLineEdit,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QToolBar,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from engine.core.views import SOURCE_FORMATS

from . import theme
from .logic.choices import SIDE_TABS, TABS, tab_title
from .logic.pressure_text import HINT_TEXT, PressureView
from .models.threads import COL_GENERATION, COL_MESSAGES, COL_PRESSURE, COL_SOURCE, COL_STATE, COL_TITLE, StateRole, ThreadListModel, ThreadListProxy
from .models.timeline import COL_ID, COL_MARKERS, COL_TOKENS, MARKER_CONTINUES, MARKER_OPEN, MARKER_ORPHAN, MARKER_PRUNED, MarkersRole, TimelineModel
from .panels.audit.widget import AuditPanel
from .panels.checks.widget import ChecksPanel
from .panels.detail.widget import DetailPane
from .panels.events.widget import EventsPanel
from .panels.pressure.widget import PressurePage
from .panels.registry import build_pages
from .panels.replay.widget import ReplayPanel
from .widgets.bars import ConfirmBar, ErrorBanner
from .widgets.delegates import Pill, PillDelegate
from .widgets.thread_filters import ThreadFilters
from .widgets.thread_table import ThreadTable
from .widgets.timeline_view import TimelineView

STATE_TOKENS = {"idle": "ok", "running": "info", "waiting": "warn", "queued": "text_muted"}
MARKER_TOKENS = {MARKER_PRUNED: "cat_tool_results", MARKER_ORPHAN: "danger", MARKER_OPEN: "warn", MARKER_CONTINUES: "text_muted", "pinned": "accent"}
STATE_SHORT = {"running": "run", "waiting": "wait", "queued": "queue"}
#: the Source badge when its name does not fit the column (the full name is in the cell's tooltip)
SOURCE_SHORT = {f.badge: f.short for f in SOURCE_FORMATS.values()}
#: every Source badge the list may show: the column is sized for the widest (never from the rows held)
SOURCE_BADGES = sorted(SOURCE_SHORT)

#: the smallest widths the three panes keep (the splitter never squeezes one below them)
MIN_LEFT, MIN_CENTER, MIN_RIGHT = 220, 385, 280  # the centre: the thread header's three buttons in a row
#: the characters of a title the thread list's default width shows (when the window has the room)
TITLE_CHARS = 20
#: the side tabs' titles with counts the default split leaves room for (more events or violations
#: than that widen the side panel at the timeline's expense, and the thread list's at its minimum)
COUNTED_TABS = {"events": "Events (99)", "checks": "Checks (9)"}
#: below this width the thread header puts its buttons under its texts (the texts keep a real width)
HEADER_TEXT_MIN = 300
#: the window width the toolbar's words need until it has measured them (below it: icons only)
TOOLBAR_WORDS_MIN = 800


def state_pills(index: QModelIndex | QPersistentModelIndex) -> list[Pill]:
    state = index.data(StateRole)
    return [Pill(state, STATE_TOKENS.get(state, "text_muted"), STATE_SHORT.get(state, ""))] if state else []


def source_pills(index: QModelIndex | QPersistentModelIndex) -> list[Pill]:
    text = index.data()
    return [Pill(text, "info", SOURCE_SHORT.get(text, text[:3]))] if text else []


def token_pills(index: QModelIndex | QPersistentModelIndex) -> list[Pill]:
    text = index.data()
    return [Pill(text, "badge_bg")] if text else []


def marker_pills(index: QModelIndex | QPersistentModelIndex) -> list[Pill]:
    return [Pill(m, MARKER_TOKENS.get(m, "info"), icon=theme.marker_icon(m)) for m in (index.data(MarkersRole) or ())]


class ElidedLabel(QLabel):
    """A one-line label that elides its text at the right when it is narrower than the text;
    :meth:`text` stays the full text, which the tooltip then shows."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt name)
        super().setText(text)
        self._sync_tooltip()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(0, super().minimumSizeHint().height())

    def elided(self) -> bool:
        """The text does not fit the label's width (part of it is drawn as …)."""
        return QFontMetrics(self.font()).horizontalAdvance(self.text()) > self.contentsRect().width()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self._sync_tooltip()

    def _sync_tooltip(self) -> None:
        self.setToolTip(self.text() if self.elided() else "")

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 (Qt name)
        painter = QPainter(self)
        rect = self.contentsRect()
        text = QFontMetrics(self.font()).elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        self.style().drawItemText(painter, rect, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), self.palette(), self.isEnabled(), text, self.foregroundRole())


class ThreadHeader(QFrame):
    """The thread header: the title on a line of its own (elided, whole in its tooltip), then the
    texts beside the buttons, or the buttons under the texts when beside them the texts would be
    narrower than :data:`HEADER_TEXT_MIN` (they wrap, never blank)."""

    def __init__(self, title: QWidget, texts: QVBoxLayout, buttons: list[QWidget]) -> None:
        super().__init__()
        self.setObjectName("threadHeader")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(10, 8, 10, 8)
        outer.setSpacing(2)
        outer.addWidget(title)
        self.box = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.box.setContentsMargins(0, 0, 0, 0)
        outer.addLayout(self.box)
        self.box.addLayout(texts, 1)
        self.buttons = QHBoxLayout()
        self.buttons.setSpacing(6)
        self.buttons.addStretch(1)
        for w in buttons:
            self.buttons.addWidget(w)
        self.box.addLayout(self.buttons)
        self._buttons = buttons
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Maximum)

    @property
    def stacked(self) -> bool:
        """The buttons are under the texts."""
        return self.box.direction() == QBoxLayout.Direction.TopToBottom

    def buttons_width(self) -> int:
        shown = [w for w in self._buttons if not w.isHidden()]
        return sum(w.sizeHint().width() for w in shown) + self.buttons.spacing() * max(0, len(shown) - 1)

    def arrange(self) -> None:
        """Beside or under, from the header's width (which the splitter sets, not this choice)."""
        margins = layout_of(self).contentsMargins()
        room = self.width() - margins.left() - margins.right() - self.box.spacing() - self.buttons_width()
        direction = QBoxLayout.Direction.TopToBottom if room < HEADER_TEXT_MIN else QBoxLayout.Direction.LeftToRight
        if direction != self.box.direction():
            self.box.setDirection(direction)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt name)
        self.arrange()
        super().resizeEvent(event)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a button shown or hidden changes the room
            self.arrange()
        return super().event(event)


class _Fitter(QObject):
    """Calls ``fit()`` after the watched widget was resized (and on :meth:`later`), once the
    events of the moment are done: a column shown or hidden, a scroll bar come or gone."""

    def __init__(self, watched: QWidget, fit: Any) -> None:
        super().__init__(watched)
        self._fit = fit
        self._pending = False
        watched.installEventFilter(self)

    def later(self) -> None:
        if not self._pending:
            self._pending = True
            QTimer.singleShot(0, self._run)

    def _run(self) -> None:
        self._pending = False
        self._fit()

    def eventFilter(self, _obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        if event.type() == QEvent.Type.Resize:
            self._fit()
            self.later()
        return False


def layout_of(widget: QWidget) -> QLayout:
    """``widget.layout()`` of a widget given one here (Qt types it optional)."""
    layout = widget.layout()
    if layout is None:
        raise RuntimeError(f"{type(widget).__name__} has no layout")
    return layout


class PageScroll(QScrollArea):
    """A side tab's page in a vertical scroll area (see :func:`scrolled`)."""


class SideTabs(QTabWidget):
    """The side panel's tabs. A page may sit in a :class:`PageScroll`; :meth:`widget`,
    :meth:`currentWidget`, :meth:`indexOf` and :meth:`setCurrentWidget` name the page itself."""

    def widget(self, index: int) -> QWidget | None:
        page = super().widget(index)
        return page.widget() if isinstance(page, PageScroll) else page

    def currentWidget(self) -> QWidget:  # noqa: N802 (Qt name)
        page = self.widget(self.currentIndex())
        return page if page is not None else super().currentWidget()  # no tab: Qt's answer (None)

    def indexOf(self, page: QWidget) -> int:  # noqa: N802 (Qt name)
        return next((i for i in range(self.count()) if self.widget(i) is page), super().indexOf(page))

    def setCurrentWidget(self, page: QWidget) -> None:  # noqa: N802 (Qt name)
        index = self.indexOf(page)
        if index >= 0:
            self.setCurrentIndex(index)


def scrolled(page: QWidget) -> QScrollArea:
    """``page`` in a vertical scroll area: a short window scrolls the side panel instead of clipping it."""
    area = PageScroll()
    area.setObjectName(f"{page.objectName() or 'page'}Scroll")
    area.setWidget(page)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    return area


class InspectorLayout(QMainWindow):
    """Threads list, thread header with *Compact now*, search box, timeline, side tabs, banner,
    toolbar and status bar: the widgets only."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("Compaction Inspector")
        self.setWindowIcon(theme.icon("app", "accent", 32))
        self._build_ui()
        self._build_toolbar()
        self.resize(1440, 880)
        self._sized = False
        #: the splitter follows :func:`splitter_sizes` at every width until the user sets its sizes
        #: (drags a handle, or the last session's sizes are restored: :meth:`restore_splitter`)
        self.auto_split = True

    def _build_ui(self) -> None:
        self.banner = ErrorBanner()

        # threads
        self.thread_model = ThreadListModel(self)
        self.thread_proxy = ThreadListProxy(self)
        self.thread_proxy.setSourceModel(self.thread_model)
        self.thread_filter = QLineEdit()
        self.thread_filter.setObjectName("threadFilter")
        self.thread_filter.setPlaceholderText("Search threads (key, title, source, model)")
        self.thread_filter.setToolTip("Searches the whole database: key, title, source and model, ignoring case")
        self.thread_filter.setClearButtonEnabled(True)
        self.thread_filters = ThreadFilters()  # busy, over threshold, over the hint, imported from …, sort
        self.thread_count = QLabel("")
        self.thread_count.setObjectName("muted")  # "1,500 threads", "12 of 1,500 threads"
        self.thread_list = ThreadTable()  # a table: a tree lays out all its rows (100,000 threads) on every change
        self.thread_list.setObjectName("threadList")
        self.thread_list.setModel(self.thread_proxy)
        self.thread_list.setAlternatingRowColors(False)
        self.thread_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.thread_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a long name keeps its start and its end
        header = self.thread_list.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(COL_TITLE, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(18)
        for col in (COL_SOURCE, COL_PRESSURE, COL_GENERATION, COL_STATE):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
        self._fitting = False
        self._thread_fitter = _Fitter(self.thread_list, self.fit_thread_columns)
        header.sectionResized.connect(lambda _c, old, new: self._thread_fitter.later() if old == 0 or new == 0 else None)  # a column shown or hidden
        for signal in (self.thread_model.modelReset, self.thread_model.rowsInserted, self.thread_model.dataChanged):
            signal.connect(lambda *_args: self._thread_fitter.later())  # new badges, measured pressures
        self.thread_list.setColumnHidden(COL_MESSAGES, True)  # in the thread header and the tooltip; the title needs the room
        self.thread_list.setItemDelegateForColumn(COL_STATE, PillDelegate(state_pills, self.thread_list))
        self.thread_list.setItemDelegateForColumn(COL_SOURCE, PillDelegate(source_pills, self.thread_list))

        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(8, 8, 4, 8)
        title = QLabel("Threads")
        title.setObjectName("sectionTitle")
        ll.addWidget(title)
        search = QHBoxLayout()
        search.setSpacing(4)
        search.addWidget(self.thread_filter, 1)
        search.addWidget(self.thread_filters)
        ll.addLayout(search)
        ll.addWidget(self.thread_list, 1)
        ll.addWidget(self.thread_count)

        # thread header + compact controls
        self.thread_title = ElidedLabel("No thread selected")
        self.thread_title.setObjectName("threadTitle")
        self.thread_meta = QLabel("")
        self.thread_meta.setObjectName("muted")
        self.hint_label = QLabel(HINT_TEXT)  # the pressure line: its words depend on the state (pressure_text)
        self.hint_label.setObjectName("hintLabel")
        self.hint_label.hide()
        self.busy_label = QLabel()
        self.busy_label.setObjectName("busyLabel")
        self.busy_label.hide()
        for label in (self.thread_meta, self.hint_label, self.busy_label):
            label.setWordWrap(True)
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.summary_button = QToolButton()
        self.summary_button.setObjectName("summaryButton")
        self.summary_button.setText("Summary card")
        self.summary_button.setToolTip("Show the rolling summary and where compacted history ends")
        self.summary_button.hide()
        self.compact_button = QPushButton("Compact now")
        self.compact_button.setObjectName("compactButton")
        self.compact_button.setEnabled(False)
        self.whatif_button = QToolButton()
        self.whatif_button.setObjectName("whatIfButton")
        self.whatif_button.setText("What if…")
        self.whatif_button.setToolTip("Replay this thread under other compaction settings (a scratch copy) and compare with what happened")
        self.whatif_button.setEnabled(False)
        self.busy = QProgressBar()
        self.busy.setObjectName("busyIndicator")
        self.busy.setRange(0, 0)
        self.busy.setFixedWidth(90)
        self.busy.setTextVisible(False)
        self.busy.hide()
        texts = QVBoxLayout()
        texts.setSpacing(2)
        texts.addWidget(self.thread_meta)
        texts.addWidget(self.hint_label)
        texts.addWidget(self.busy_label)
        head = ThreadHeader(self.thread_title, texts, [self.busy, self.summary_button, self.whatif_button, self.compact_button])
        self.thread_header = head
        self.confirm = ConfirmBar()

        self.search = QLineEdit()
        self.search.setObjectName("searchBox")
        self.search.setPlaceholderText("Search this thread (Enter: next match)")
        self.search.setClearButtonEnabled(True)
        self.search.addAction(theme.icon("search"), QLineEdit.ActionPosition.LeadingPosition)

        # timeline
        self.timeline_model = TimelineModel(self)
        self.timeline = TimelineView()
        self.timeline.setObjectName("timelineView")
        self.timeline.setModel(self.timeline_model)
        self.timeline.setAllColumnsShowFocus(True)
        self.timeline.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.timeline.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.timeline.setExpandsOnDoubleClick(True)
        th = self.timeline.header()
        th.setStretchLastSection(False)
        th.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        th.setMinimumSectionSize(18)
        for col in (COL_TOKENS, COL_MARKERS, COL_ID):
            th.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
        self._timeline_fitter = _Fitter(self.timeline, self.fit_timeline_columns)
        self.timeline.setItemDelegateForColumn(COL_TOKENS, PillDelegate(token_pills, self.timeline, align_right=True))
        self.timeline.setItemDelegateForColumn(COL_MARKERS, PillDelegate(marker_pills, self.timeline))

        center = QWidget()
        cl = QVBoxLayout(center)
        cl.setContentsMargins(4, 8, 4, 8)
        cl.addWidget(head)
        cl.addWidget(self.confirm)
        cl.addWidget(self.search)
        cl.addWidget(self.timeline, 1)

        # right tabs: each page a panel of its own (inspector_app.panels.registry), built from the one list
        self.pages = build_pages()
        self.detail = cast(DetailPane, self.pages["detail"])
        self.pressure_page = cast(PressurePage, self.pages["pressure"])
        self.gauge, self.chart = self.pressure_page.gauge, self.pressure_page.chart
        self.replay = cast(ReplayPanel, self.pages["replay"])
        self.events_panel = cast(EventsPanel, self.pages["events"])
        self.events_model, self.events_view, self.events_empty = self.events_panel.model, self.events_panel.view, self.events_panel.empty
        self.checks_panel = cast(ChecksPanel, self.pages["checks"])
        self.findings_model, self.findings_view = self.checks_panel.model, self.checks_panel.view
        self.checks_note, self.checks_button = self.checks_panel.note, self.checks_panel.button
        self.audit_panel = cast(AuditPanel, self.pages["audit"])  # its behaviour: panels.audit.controller
        self.tabs = SideTabs()
        self.tabs.setObjectName("sideTabs")
        self.add_side_tabs(self.pages)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(center)
        self.splitter.addWidget(self.tabs)
        self.splitter.setChildrenCollapsible(False)
        self._panes = (left, center, self.tabs)
        for pane, width in ((left, MIN_LEFT), (center, MIN_CENTER), (self.tabs, MIN_RIGHT)):
            pane.setMinimumWidth(width)
        for i, stretch in enumerate((0, 4, 3)):  # a window resized: the thread list keeps its width (a side bar's)
            self.splitter.setStretchFactor(i, stretch)
        self.tabs.tabBar().setElideMode(Qt.TextElideMode.ElideNone)
        self.tabs.tabBar().setUsesScrollButtons(True)
        self.splitter.splitterMoved.connect(self._split_by_user)
        self._split_fitter = _Fitter(self.splitter, self.split_panes)  # a window resized: the default split for its width

        root = QWidget()
        #: the central widget's layout (the banner, the splitter, the welcome page)
        self.root_layout = rl = QVBoxLayout(root)
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
        self.import_action = QAction(theme.icon("tool"), "Import…", self)
        self.import_action.setShortcut(QKeySequence("Ctrl+I"))
        self.import_action.setToolTip("Import transcripts (Claude Code, Codex, OpenAI, Anthropic, OpenHands, SWE-agent): or drop files on the window")
        self.quit_action = QAction("Close window", self)
        self.quit_action.setShortcut(QKeySequence.StandardKey.Close)
        self.quit_action.triggered.connect(self.close)
        self.export_action = QAction("Export compaction history…", self)
        self.export_action.setObjectName("exportHistory")
        self.export_action.setToolTip("Write the open thread's compactions (trigger, tokens, summary, dropped specifics, cost) as Markdown or JSON")
        self.export_action.setEnabled(False)
        file_menu = self.menuBar().addMenu("&File")
        file_menu.setObjectName("fileMenu")
        file_menu.addAction(self.connect_action)
        file_menu.addAction(self.import_action)
        file_menu.addAction(self.export_action)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        self.file_menu = file_menu
        self.whatif_action = QAction("What if…", self)
        self.whatif_action.setObjectName("whatIf")
        self.whatif_action.setShortcut(QKeySequence("Ctrl+Shift+W"))
        self.whatif_action.setToolTip(self.whatif_button.toolTip())
        self.whatif_action.setEnabled(False)
        self.compact_action = QAction(theme.icon("compact"), "Compact now…", self)
        self.compact_action.setObjectName("compactNow")
        self.compact_action.setEnabled(False)
        compaction_menu = self.menuBar().addMenu("&Compaction")
        compaction_menu.setObjectName("compactionMenu")
        compaction_menu.addAction(self.compact_action)
        compaction_menu.addAction(self.whatif_action)
        self.compaction_menu = compaction_menu
        self.refresh_action = QAction(theme.icon("refresh"), "Refresh", self)
        self.refresh_action.setShortcut(QKeySequence.StandardKey.Refresh)
        self.newest_action = QAction(theme.icon("forward"), "Jump to newest", self)
        self.newest_action.setToolTip("Load and show the newest messages of the thread (End in the timeline)")
        bar.addAction(self.connect_action)
        bar.addAction(self.import_action)
        bar.addAction(self.refresh_action)
        bar.addAction(self.newest_action)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        bar.addWidget(spacer)  # the theme button goes at the right end (controllers.theming)
        self.toolbar = bar
        self.addToolBar(bar)
        self.find_action = QAction("Find", self)
        self.find_action.setShortcut(QKeySequence.StandardKey.Find)
        def find() -> None:
            self.search.setFocus()
            self.search.selectAll()

        self.find_action.triggered.connect(find)
        self.addAction(self.find_action)

    def add_side_tabs(self, pages: dict[str, QWidget]) -> None:
        """The side panel's tabs, one per :data:`~inspector_app.logic.choices.SIDE_TABS` in its
        order, each page from ``pages`` by name (every page must be there, and only those)."""
        if set(pages) != set(TABS):
            raise RuntimeError(f"side tab pages {sorted(pages)} are not the side tabs {sorted(TABS)}")
        for tab in SIDE_TABS:
            page = pages[tab.name]
            self.tabs.addTab(scrolled(page) if tab.scrolled else page, tab.title)

    def show_tab(self, name: str) -> None:
        """Show the side tab ``name`` (one of :data:`TABS`)."""
        self.tabs.setCurrentIndex(TABS.index(name))

    def show_pressure_line(self, view: PressureView) -> None:
        """The header's pressure line: the words of the state (none below the 85% hint line)."""
        self.hint_label.setText(view.text)
        self.hint_label.setToolTip(view.reason or "")
        self.hint_label.setProperty("state", view.state)
        self.hint_label.setStyleSheet(f"color: {theme.color(view.tone).name()}; font-weight: 600;")
        self.hint_label.setVisible(view.shown)

    def fit_tabs(self) -> None:
        """The side panel at least as wide as its tab titles (the splitter takes the room from the
        timeline, which keeps :data:`MIN_CENTER`): no tab hides behind the scroll arrows."""
        bar = self.tabs.tabBar()
        bar.ensurePolished()
        wanted = max(MIN_RIGHT, sum(bar.tabSizeHint(i).width() for i in range(bar.count())) + 6)
        if self.tabs.minimumWidth() != wanted:
            self.tabs.setMinimumWidth(wanted)

    def set_checks_count(self, count: int) -> None:
        """The Checks tab's title: how many violations the open thread has."""
        self.tabs.setTabText(TABS.index("checks"), f"{tab_title('checks')} ({count})" if count else tab_title("checks"))
        self.tabs.tabBar().setTabTextColor(TABS.index("checks"), theme.color("danger") if count else self.tabs.tabBar().palette().windowText().color())
        self.fit_tabs()

    def set_events_count(self, count: int) -> None:
        """The events tab's title and its empty-state note."""
        self.events_empty.setVisible(not count)
        self.tabs.setTabText(TABS.index("events"), f"{tab_title('events')} ({count})" if count else tab_title("events"))
        self.fit_tabs()

    def select_row(self, index: QModelIndex) -> None:
        """Make ``index`` the timeline's current row, centred on screen."""
        self.timeline.setCurrentIndex(index)
        self.timeline.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)

    def size_splitter_once(self) -> None:
        """Splitter proportions once the window has its real width (on the first show; after it
        :meth:`split_panes` follows the window's width until the user sets the sizes)."""
        if self._sized:
            return
        self._sized = True
        self.fit_tabs()
        layout_of(self).activate()
        self.root_layout.activate()
        self.split_panes()

    def default_split(self) -> list[int]:
        """The panes' widths :func:`splitter_sizes` gives the splitter's width now."""
        handles = self.splitter.handleWidth() * (self.splitter.count() - 1)
        left, center, right = self._panes
        margins = layout_of(left).contentsMargins()
        wanted = self.thread_list.width_for_title(TITLE_CHARS, SOURCE_BADGES, [SOURCE_SHORT[b] for b in SOURCE_BADGES]) + margins.left() + margins.right()
        minimums = (left.minimumWidth(), center.minimumWidth(), right.minimumWidth())
        return splitter_sizes(self.splitter.width() - handles, minimums, wanted, self.side_room())

    def side_room(self) -> int:
        """The side panel's width with its count tabs reading :data:`COUNTED_TABS` (Events (99),
        Checks (9)): the default split leaves it that room, so a thread whose counts lengthen those
        titles widens the panel into it, never moving the thread list."""
        bar = self.tabs.tabBar()
        fm = QFontMetrics(bar.font())
        extra = 0
        for name, widest in COUNTED_TABS.items():
            text = bar.tabText(TABS.index(name))
            extra += max(0, fm.horizontalAdvance(widest) - fm.horizontalAdvance(text))
        return self.tabs.minimumWidth() + extra

    def split_panes(self) -> None:
        """The default split for the splitter's width, while the user has not set one
        (:attr:`auto_split`); nothing before the first show."""
        if not self._sized or not self.auto_split or self.splitter.width() <= 0:
            return
        sizes = self.default_split()
        if self.splitter.sizes() != sizes:
            self.splitter.setSizes(sizes)

    def restore_splitter(self, state: Any) -> bool:
        """The sizes the user left (the last session's): they win over the default split."""
        restored = bool(self.splitter.restoreState(state))
        if restored:
            self.auto_split = False
        return restored

    @property
    def split_by_user(self) -> bool:
        """The splitter's sizes are not the default split: the user's (dragged or restored), to remember."""
        return not self.auto_split or self.splitter.sizes() != self.default_split()

    def _split_by_user(self, _pos: int, _index: int) -> None:
        self.auto_split = False

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self.fit_toolbar()

    def fit_toolbar(self) -> None:
        """Words beside the toolbar's icons when the window is wide enough for them, icons only
        when not (the Theme button at its end stays on screen). The width the words need is read
        whenever they are shown (:data:`TOOLBAR_WORDS_MIN` before it is known)."""
        words = Qt.ToolButtonStyle.ToolButtonTextBesideIcon
        if self.toolbar.toolButtonStyle() == words:
            self._toolbar_words = self.toolbar.sizeHint().width()
        need = getattr(self, "_toolbar_words", TOOLBAR_WORDS_MIN) + 24
        style = words if self.width() >= need else Qt.ToolButtonStyle.ToolButtonIconOnly
        if self.toolbar.toolButtonStyle() != style:
            self.toolbar.setToolButtonStyle(style)

    def fit_thread_columns(self) -> None:
        """The thread list's columns sized from the font and its width, never from the rows it
        holds (:meth:`ThreadTable.fit_columns`: stable across sorts, searches and refreshes);
        a narrow list shows short Source badges and the State as a dot."""
        if self._fitting:
            return
        self._fitting = True
        try:
            self.thread_list.fit_columns(SOURCE_BADGES, [SOURCE_SHORT[b] for b in SOURCE_BADGES])
        finally:
            self._fitting = False

    def fit_timeline_columns(self) -> None:
        """The timeline's Tokens, Markers and # columns sized from the font and the view's width:
        the Message column keeps at least half of a narrow view (markers draw as icons, the id goes)."""
        fm = QFontMetrics(self.timeline.font())
        view = self.timeline.viewport().width()
        tokens = fm.horizontalAdvance("999,999") + 26
        ident = fm.horizontalAdvance("9999999") + 14  # a message id of 7 digits, as the # column writes it (no separators)
        markers = fm.horizontalAdvance("pruned · open") + 20
        if view >= 900:  # two or three pills side by side (thinking, image, meta …)
            markers = fm.horizontalAdvance("thinkingimagemeta") + 3 * 12 + 2 * 4 + 10
        if view - tokens - markers - ident < view // 2:
            markers = max(3 * 20 + 8, view // 8)  # icons only (PillDelegate), three of them
        if view - tokens - markers - ident < view // 2:
            ident = 0
        if view - tokens - markers - ident >= view // 2:  # room enough: the headings whole too
            tokens, markers = max(tokens, heading_width(self.timeline, COL_TOKENS)), max(markers, heading_width(self.timeline, COL_MARKERS))
        header = self.timeline.header()
        header.resizeSection(COL_TOKENS, tokens)
        header.resizeSection(COL_MARKERS, markers)
        if ident:
            header.resizeSection(COL_ID, ident)
        if self.timeline.isColumnHidden(COL_ID) != (not ident):
            self.timeline.setColumnHidden(COL_ID, not ident)


def heading_width(view: QTreeView | ThreadTable, col: int) -> int:
    """The width column ``col``'s heading needs whole (the style sheet draws headings semi-bold)."""
    font = view.header().font()
    font.setWeight(QFont.Weight.DemiBold)
    text = view.model().headerData(col, Qt.Orientation.Horizontal) or ""
    return QFontMetrics(font).horizontalAdvance(str(text)) + 16


def splitter_sizes(width: int, minimums: tuple[int, int, int] = (MIN_LEFT, MIN_CENTER, MIN_RIGHT), list_wanted: int = 0, side_wanted: int = 0) -> list[int]:
    """The three panes' default widths in ``width``: the side panel 30 % (at least its minimum:
    its tab titles whole, and ``side_wanted``: room for their counts); the thread list 25 %, or ``list_wanted`` (the width its title column
    needs for :data:`TITLE_CHARS` characters) when that is more and the timeline keeps its minimum;
    the timeline the rest. Each at least its minimum (a window too
    narrow for them: the timeline gives first, then the list, then the side panel)."""
    low_left, low_center, low_right = minimums
    right = max(low_right, side_wanted, int(width * 0.30))
    left = max(low_left, int(width * 0.25))
    left = max(left, min(list_wanted, width - right - low_center))
    sizes = [left, width - left - right, right]
    over = sum(max(s, f) for s, f in zip(sizes, minimums)) - width
    sizes = [max(s, f) for s, f in zip(sizes, minimums)]
    if over > 0:  # take it from the centre first, never below the minimums
        for i in (1, 0, 2):
            cut = min(over, sizes[i] - minimums[i])
            sizes[i] -= cut
            over -= cut
    return sizes
