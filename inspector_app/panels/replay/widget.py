"""The replay panel: step through every request of a thread and see the envelope the model received
at each (the steps of an overflow recovery in place), step through one recovery episode, and the
before/after view of a compaction.

Three pages: **Requests** (:class:`~inspector_app.panels.replay.model.RequestsModel`), **Recoveries**
(the episodes, :class:`~inspector_app.panels.replay.model.ReplayModel`) and **Before / after**
(:class:`~inspector_app.widgets.diff.DiffView`). The panel shows what it is given; the replay
controller (:mod:`inspector_app.panels.replay.controller`) reads the requests and the compactions off
the GUI thread when a page is first shown for a thread (:attr:`ReplayPanel.requestsWanted`,
:attr:`ReplayPanel.diffWanted`), and :meth:`ReplayPanel.clear_thread` empties every page the moment
another thread is opened, so nothing of the previous thread stays on screen."""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListView,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine.core import figures
from engine.core.messages import summary_message
from engine.core.views import Episode, PressurePoint, ReplayStep, RequestEnvelope

from ... import theme
from ...models.diff import LineRole
from ...widgets.diff import DiffView
from .model import MessageRole, ReplayModel, RequestRow, RequestsModel, SurfaceModel, breakdown_text, envelope_surface, episode_label

#: the panel's pages, in order (``--replay-view``)
PAGES: tuple[str, ...] = ("requests", "recoveries", "diff")


def _fmt(v: int | None) -> str:
    return "–" if v is None else f"{v:,}"


def _change(before: int | None, after: int | None) -> str:
    """``a → b`` for a step that records both values, else the one it records."""
    if before is not None and after is not None:
        return f"{before:,} → {after:,}"
    return _fmt(before if before is not None else after)


def _facts_grid(rows: Sequence[tuple[str, str]]) -> tuple[QGridLayout, dict[str, QLabel], dict[str, QLabel]]:
    """A two-column grid of names and selectable, wrapping values."""
    grid = QGridLayout()
    values: dict[str, QLabel] = {}
    names: dict[str, QLabel] = {}
    for row, (key, title) in enumerate(rows):
        name = QLabel(title)
        name.setObjectName("muted")
        value = QLabel()
        value.setWordWrap(True)
        value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        value.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        grid.addWidget(name, row, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(value, row, 1)
        values[key] = value
        names[key] = name
    grid.setColumnStretch(1, 1)
    return grid, values, names


def _list_view(name: str) -> QListView:
    view = QListView()
    view.setObjectName(name)
    view.setUniformItemSizes(True)
    view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # long rows elide instead of scrolling sideways
    view.setTextElideMode(Qt.TextElideMode.ElideRight)
    view.setResizeMode(QListView.ResizeMode.Adjust)
    return view


def summary_fact(e: RequestEnvelope) -> str:
    """The summary in force at a request: its size and its first line of substance (a summary's
    own header lines, such as the extractive summarizer's notice or headings, skipped)."""
    if not e.summary:
        return "none in force"
    lines = [ln.strip() for ln in e.summary.splitlines() if ln.strip()]
    body = next((ln for ln in lines if not ln.startswith(("[", "#"))), lines[0] if lines else "")
    size = e.breakdown.get("summary")
    head = f"{size:,} tokens" if size else "in force"
    return f"{head} · {body[:160]}{'…' if len(body) > 160 else ''}"


def _nav_buttons(prefix: str) -> tuple[QPushButton, QPushButton]:
    back = QPushButton(theme.icon("back"), "Back")
    back.setObjectName(f"{prefix}Back")
    forward = QPushButton(theme.icon("forward"), "Forward")
    forward.setObjectName(f"{prefix}Forward")
    forward.setLayoutDirection(Qt.LayoutDirection.RightToLeft)
    return back, forward


def _stepper_page(name: str, nav: Sequence[QWidget], above: Sequence[QWidget], items: QListView, facts: Sequence[QWidget | QGridLayout], surface: QListView) -> QWidget:
    """A page that steps through a list: the navigation row (its first widget stretches), what is
    said above the list, the list over the current item's facts and its surface."""
    row = QHBoxLayout()
    for i, w in enumerate(nav):
        row.addWidget(w, 1 if i == 0 else 0)
    info = QWidget()
    il = QVBoxLayout(info)
    il.setContentsMargins(0, 0, 0, 0)
    for f in facts:
        il.addLayout(f) if isinstance(f, QGridLayout) else il.addWidget(f)
    il.addWidget(surface, 1)
    split = QSplitter(Qt.Orientation.Vertical)
    split.setChildrenCollapsible(False)
    split.addWidget(items)
    split.addWidget(info)
    split.setStretchFactor(0, 2)
    split.setStretchFactor(1, 3)
    page = QWidget()
    page.setObjectName(name)
    layout = QVBoxLayout(page)
    layout.setContentsMargins(8, 8, 8, 8)
    layout.addLayout(row)
    for w in above:
        layout.addWidget(w)
    layout.addWidget(split, 1)
    return page


REQUEST_FACTS: tuple[tuple[str, str], ...] = (
    ("tokens", "Tokens"),
    ("breakdown", "Breakdown"),
    ("generation", "Generation"),
    ("summary", "Summary"),
    ("previews", "Previews"),
    ("notes", "Notes"),
    ("outcome", "Outcome"),
)


class ReplayPanel(QWidget):
    """Requests | Recoveries | Before / after."""

    #: the Requests page is shown for a thread whose requests are not read yet
    requestsWanted = Signal()
    #: the current row is request ``index`` whose envelope is not built yet (answer: :meth:`set_envelope`)
    envelopeWanted = Signal(int)
    #: a stored message was activated (Enter, double-click) in a surface or a side of the before/after: its id
    messageActivated = Signal(int)
    #: the Before / after page wants compaction ``n`` (1-based) of the thread, ``None``: the latest
    diffWanted = Signal(object)

    EMPTY_REQUESTS = "No model requests recorded for this thread."

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("replayPanel")
        #: the thread the pages are about (None: nothing open)
        self.key: str | None = None
        #: ``none`` (not read for this thread), ``loading``, ``loaded`` or ``error``
        self.requests_state = "none"
        self.diff_state = "none"
        self.model = ReplayModel(self)
        self.surface_model = SurfaceModel(self)
        self.requests_model = RequestsModel(self)
        self.request_surface_model = SurfaceModel(self)
        #: a request to select once the requests are in (a chart click, a kept cursor): ("index" | "id", n) or ("step", (episode, step))
        self._pending_request: tuple[str, Any] | None = None
        self._points: list[PressurePoint] = []

        self.episodes = QComboBox()
        self.episodes.setObjectName("replayEpisodes")
        self.back_button, self.forward_button = _nav_buttons("replay")
        self.steps = _list_view("replaySteps")
        self.steps.setModel(self.model)
        self.kind = QLabel()
        self.kind.setObjectName("sectionTitle")
        grid, self.facts, _names = _facts_grid((("tokens", "Tokens"), ("generation", "Generation"), ("attempt", "Attempt"), ("error", "Error")))
        self.no_progress = QLabel("No progress: the generation did not grow at this step")
        self.no_progress.setObjectName("noProgress")
        self.no_progress.hide()
        self.surface = _list_view("replaySurface")
        self.surface.setModel(self.surface_model)
        self.surface_title = QLabel("Surface the model would have seen")
        self.surface_title.setObjectName("sectionTitle")
        self.empty = QLabel("No overflow-recovery episodes recorded for this thread.")
        self.empty.setWordWrap(True)
        self.empty.setObjectName("muted")
        recoveries = _stepper_page("replayRecoveries", (self.episodes, self.back_button, self.forward_button), (self.empty,), self.steps,
                                   (self.kind, grid, self.no_progress, self.surface_title), self.surface)  # fmt: skip

        self.diff = DiffView()
        self.pages = QTabWidget()
        self.pages.setObjectName("replayPages")
        self.pages.setDocumentMode(True)
        self.pages.addTab(self._build_requests(), "Requests")
        self.pages.addTab(recoveries, "Recoveries")
        self.pages.addTab(self.diff, "Before / after")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 4, 0, 0)
        outer.addWidget(self.pages)
        self.pages.currentChanged.connect(lambda _i: self._want())
        self.diff.compactionChosen.connect(self.diffWanted.emit)
        for view in (self.surface, self.request_surface, self.diff.before_view, self.diff.after_view):
            view.activated.connect(self._activated)

        self.episodes.currentIndexChanged.connect(self.model.select_episode)
        self.back_button.clicked.connect(self.model.back)
        self.forward_button.clicked.connect(self.model.forward)
        self.steps.clicked.connect(lambda index: self.model.go(index.row()))
        self.model.currentChanged.connect(self._show_step)
        self._show_step(-1)
        self.requests_model.currentChanged.connect(self._show_request)
        self._show_request(-1)

    EMPTY_TEXT = "No overflow-recovery episodes recorded for this thread."

    def _build_requests(self) -> QWidget:
        self.request_back, self.request_forward = _nav_buttons("request")
        self.requests_status = QLabel(self.EMPTY_REQUESTS)
        self.requests_status.setObjectName("muted")
        self.requests_status.setWordWrap(True)
        self.requests_status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.requests = _list_view("replayRequests")
        self.requests.setModel(self.requests_model)
        self.request_title = QLabel()
        self.request_title.setObjectName("sectionTitle")
        self.request_title.setWordWrap(True)
        grid, self.request_facts, self._request_fact_names = _facts_grid(REQUEST_FACTS)
        self.request_surface_title = QLabel("Envelope the model received")
        self.request_surface_title.setObjectName("sectionTitle")
        self.request_surface = _list_view("requestSurface")
        self.request_surface.setModel(self.request_surface_model)
        page = _stepper_page("replayRequestsPage", (self.requests_status, self.request_back, self.request_forward), (), self.requests,
                             (self.request_title, grid, self.request_surface_title), self.request_surface)  # fmt: skip
        self.request_back.clicked.connect(self.requests_model.back)
        self.request_forward.clicked.connect(self.requests_model.forward)
        self.requests.clicked.connect(lambda index: self.requests_model.go(index.row()))
        # the arrow keys move the cursor too
        self.requests.selectionModel().currentChanged.connect(
            lambda current, _previous: self.requests_model.go(current.row()) if current.isValid() else None)
        return page

    def _activated(self, index: QModelIndex) -> None:
        if isinstance(index.model(), SurfaceModel):
            message = index.data(MessageRole)
        else:  # a side of the before/after: its line holds the message
            line = index.data(LineRole)
            message = line.message if line is not None else None
        if message is not None and message.id is not None:
            self.messageActivated.emit(message.id)

    # -- pages ---------------------------------------------------------------------------------
    def show_page(self, name: str) -> None:
        """Show the ``requests``, ``recoveries`` or ``diff`` page (reading what it needs)."""
        self.pages.setCurrentIndex(PAGES.index(name))
        self._want()

    def page(self) -> str:
        return PAGES[self.pages.currentIndex()]

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        self._want()

    def _want(self) -> None:
        """The shown page reads its data the first time it is shown for a thread (lazily: a long
        thread's requests are rebuilt only when someone looks at them)."""
        if self.key is None or not self.isVisible():
            return
        page = self.page()
        if page == "requests" and self.requests_state == "none":
            self.requests_loading()  # asked for once: a second show while it is read asks nothing
            self.requestsWanted.emit()
        elif page == "diff" and self.diff_state == "none":
            self.diff_state = "loading"
            self.diffWanted.emit(None)

    def clear_thread(self, key: str | None) -> None:
        """Another thread (or none) is opened: every page is emptied now, before anything of the new
        one is read, so no surface of the previous thread stays on screen.

        A fresh view of the same thread (an outside compaction re-reads the whole view) empties
        nothing: what is shown stays until its new data replaces it (the pages read again; the
        recoveries never flash "No overflow-recovery episodes" in between), and the compaction the
        Before / after page shows is read again."""
        same = key is not None and key == self.key
        shown = self.diff.current_index() if same else None
        self.key = key
        self.requests_state = "none"
        self.diff_state = "none"
        if same:
            current = self.requests_key()
            self._pending_request = current if current is not None else self._pending_request
            if self.page() == "diff" and self.isVisible():
                self.diff_state = "loading"
                self.diffWanted.emit(shown)
            self._want()
            return
        self._pending_request = None
        self._points = []
        self.requests_model.clear()
        self.requests_status.setObjectName("muted")
        self.requests_status.setText(self.EMPTY_REQUESTS if key is None else "Requests are read when this page is shown.")
        self.set_episodes([])
        self.diff.clear("Select a compaction (or open this page) to see the surface before and after it." if key else "")
        self._want()

    # -- what the user chose, kept across a re-read ------------------------------------------------
    def requests_key(self) -> tuple[str, int] | tuple[str, tuple[int | None, int | None]] | None:
        """The current row of the Requests page as :meth:`select_request` takes it back: ("index",
        request) or ("step", (episode, step)); a choice not applied yet while the rows are read."""
        row = self.requests_model.current()
        if self.requests_state != "loaded" or row is None:
            return self._pending_request
        if row.replay_step is not None:
            return ("step", (row.episode, row.step))
        return ("index", row.index) if row.index is not None else None

    def view_state(self) -> tuple[int, int, int, object]:
        """(page, episode, step, current request): what :meth:`restore_view_state` puts back."""
        return (self.pages.currentIndex(), self.model.episode_index, self.model.step_index, self.requests_key())

    def restore_view_state(self, state: tuple[int, int, int, object] | None) -> None:
        """Put back what :meth:`view_state` kept (a page, episode, step or request that no longer
        exists is left as it is)."""
        if state is None:
            return
        page, episode, step, request = state
        if 0 <= page < self.pages.count() and page != self.pages.currentIndex():
            self.pages.setCurrentIndex(page)
        self.restore_recovery(episode, step)
        if isinstance(request, tuple):
            self._select_key(request)

    def restore_recovery(self, episode: int, step: int) -> None:
        """Episode ``episode`` at step ``step``, when the episodes have them."""
        if 0 <= episode < self.episodes.count() and episode != self.episodes.currentIndex():
            self.episodes.setCurrentIndex(episode)
        if step >= 0 and self.model.episode_index == episode and step < self.model.rowCount():
            self.model.go(step)

    def _select_key(self, request: tuple) -> None:
        kind, value = request
        if self.requests_state != "loaded":
            self._pending_request = request
            return
        row = self._row_of_key(kind, value)
        if row >= 0 and row != self.requests_model.row_index:
            self.requests_model.go(row)

    def _row_of_key(self, kind: str, value: object) -> int:
        model = self.requests_model
        if kind == "index" and isinstance(value, int):
            return model.row_of_request(value)
        if kind == "id" and isinstance(value, int):
            return model.row_of_request_id(value)
        if kind == "step":
            return next((i for i, r in enumerate(model.rows()) if r.replay_step is not None and (r.episode, r.step) == value), -1)
        return -1

    def update_episodes(self, episodes: Sequence[Episode]) -> None:
        """The episodes read again (a live refresh): nothing changes when they are the same; else
        the episode and step shown stay when they still exist."""
        episodes = list(episodes)
        if episodes == self.model.episodes():
            return
        episode, step = self.model.episode_index, self.model.step_index
        self.set_episodes(episodes)
        self.restore_recovery(episode, step)

    def reread_requests(self) -> None:
        """The thread's requests changed (a live refresh): read them again, the cursor kept."""
        if self.requests_state != "loaded":
            return
        self._pending_request = self.requests_key()
        self.requests_state = "none"
        self._want()

    # -- requests ------------------------------------------------------------------------------
    def requests_loading(self) -> None:
        self.requests_state = "loading"
        self.requests_status.setObjectName("muted")
        self.requests_status.setText("Reading the thread's requests …")

    def set_requests(self, count: int, points: Sequence[PressurePoint] = (), *, select: int | None = None, rows: Sequence[RequestRow] | None = None) -> None:
        """The thread has ``count`` requests (``points``: their pressure points, when the chart has
        one per request; ``rows``: their rows, made on a worker); the cursor on request ``select``
        (0-based), else on a pending chart click, else on the last request. Envelopes come one by
        one (:attr:`envelopeWanted`)."""
        self.requests_state = "loaded"
        self._points = list(points)
        pending, self._pending_request = self._pending_request, None
        step: tuple[object, object] | None = None
        if select is None and pending is not None:
            kind, value = pending
            matched = self._points if len(self._points) == count else []
            if kind == "step":
                step = value
            else:
                select = value if kind == "index" else next((i for i, p in enumerate(matched) if p.request_id == value), None)
        self.requests_model.set_requests(count, self._points, self.model.episodes(), select=select, rows=rows)
        if step is not None:
            self._select_key(("step", step))
        self.requests_status.setObjectName("muted")
        self.requests_status.setText(f"{count:,} request{'s' if count != 1 else ''}, oldest first" if count else self.EMPTY_REQUESTS)

    def set_points(self, points: Sequence[PressurePoint]) -> None:
        """The chart's points arrived after the requests: the rows say their sizes and compactions."""
        if self.requests_state == "loaded" and len(points) == self.requests_model.request_count and list(points) != self._points:
            self._rebuild_rows(points)

    def _rebuild_rows(self, points: Sequence[PressurePoint]) -> None:
        model = self.requests_model
        current = model.current()
        keep = current.index if current is not None and current.replay_step is None else None
        step = (current.episode, current.step) if current is not None and current.replay_step is not None else None
        self._points = list(points)
        model.set_requests(model.request_count, self._points, self.model.episodes(), select=keep, envelopes=model.envelopes())
        if step is not None:
            self._select_key(("step", step))

    def set_envelope(self, envelope: RequestEnvelope) -> None:
        """Request ``envelope.index``'s envelope was built (on a worker)."""
        self.requests_model.set_envelope(envelope)

    def requests_failed(self, reason: str) -> None:
        self.requests_state = "error"
        self.requests_model.clear()
        self.requests_status.setObjectName("errorText")
        self.requests_status.setText(f"The requests cannot be rebuilt: {reason}")
        self.requests_status.style().polish(self.requests_status)

    def select_request(self, index: int | None = None, *, request_id: int | None = None) -> bool:
        """Put the cursor on request ``index`` (0-based), or on the one recorded as ``request_id``
        (a pressure point's); if the requests are not read yet, once they are. False when the
        thread has no such request."""
        if self.requests_state != "loaded":
            self._pending_request = ("index", index) if index is not None else ("id", request_id) if request_id is not None else None
            return True
        model = self.requests_model
        row = model.row_of_request(index) if index is not None else model.row_of_request_id(request_id) if request_id is not None else -1
        if row < 0:
            return False
        if model.row_index == row:
            self._show_request(row)  # already there: make sure it is shown and scrolled into view
        else:
            model.go(row)
        return True

    def _show_request(self, row: int) -> None:
        model = self.requests_model
        self.request_back.setEnabled(model.can_back())
        self.request_forward.setEnabled(model.can_forward())
        current: RequestRow | None = model.current()
        if current is None or (current.replay_step is None and current.index is None):
            self.request_title.setText("")
            for label in self.request_facts.values():
                label.setText("")
            self.request_surface_title.setText("Envelope the model received")
            self.request_surface_model.set_messages(())
            return
        index = model.index(row)
        self.requests.setCurrentIndex(index)
        self.requests.scrollTo(index, QListView.ScrollHint.PositionAtCenter if self.requests.isVisible() else QListView.ScrollHint.EnsureVisible)
        if current.replay_step is not None:
            self._show_request_step(current)
            return
        e = model.envelope(current.index)
        point = current.point
        created = e.created_at if e is not None else point.created_at if point is not None else None
        self.request_title.setText(
            f"Request {(current.index or 0) + 1:,} of {model.request_count:,}" + (f" · after {current.compaction}" if current.compaction else "") + (f" · {created:%Y-%m-%d %H:%M:%S}" if created else "")
        )
        f = self.request_facts
        if e is None:  # being built on a worker
            for label in f.values():
                label.setText("")
            if point is not None:
                f["tokens"].setText(f"{point.tokens:,} recorded" + (f" (threshold {point.threshold:,})" if point.threshold else ""))
            self.request_surface_title.setText("Rebuilding the envelope the model received …")
            self.request_surface_model.set_messages(())
            if current.index is not None:
                self.envelopeWanted.emit(current.index)
            return
        limits = []
        if e.threshold:
            limits.append(f"{figures.percent(e.tokens / e.threshold)} of threshold {figures.tokens(e.threshold)}")
        if e.context_window:
            limits.append(f"window {e.context_window:,}")
        reported = f" · the provider reported {e.reported_prompt_tokens:,}" if e.reported_prompt_tokens is not None else ""
        f["tokens"].setText(f"{e.tokens:,}" + (f" ({', '.join(limits)})" if limits else "") + reported)
        f["breakdown"].setText(breakdown_text(e.breakdown) or "–")
        f["generation"].setText(f"{e.generation}" + (f" · boundary after #{e.boundary}" if e.boundary is not None else " · no boundary: nothing summarized yet"))
        f["summary"].setText(summary_fact(e))
        f["previews"].setText(f"{len(e.pruned_ids)} pruned result{'s' if len(e.pruned_ids) != 1 else ''} shown as previews: " + ", ".join(f"#{i}" for i in e.pruned_ids[:12]) + (" …" if len(e.pruned_ids) > 12 else "") if e.pruned_ids else "none")
        f["notes"].setText(f"{len(e.ephemeral)} ephemeral note{'s' if len(e.ephemeral) != 1 else ''} (sent, never stored)" if e.ephemeral else "none")
        exact = "exact: the envelope the engine sent" if e.exact else "rebuilt (not known to be exact)"
        f["outcome"].setText(" · ".join(filter(None, (e.outcome, e.origin, exact, e.note))))
        surface = envelope_surface(e)
        self.request_surface_title.setText(f"Envelope the model received · {len(surface):,} message{'' if len(surface) == 1 else 's'}")
        self.request_surface_title.setToolTip("The summary, the messages as the model saw them and the ephemeral notes; the system prompt and the tools are counted in the breakdown, not listed")
        self.request_surface_model.set_messages(surface)

    def _show_request_step(self, row: RequestRow) -> None:
        step = row.replay_step
        assert step is not None
        episode = self.model.episodes()[row.episode] if row.episode is not None and row.episode < len(self.model.episodes()) else None
        total = len(episode.steps) if episode else 0
        self.request_title.setText(f"Overflow recovery · step {(row.step or 0) + 1} of {total}: {step.kind}" + (" · no progress" if step.no_progress else ""))
        f = self.request_facts
        for label in f.values():
            label.setText("")
        f["tokens"].setText(_change(step.tokens_before, step.tokens_after))
        f["generation"].setText(_change(step.generation_before, step.generation_after))
        f["outcome"].setText(f"attempt {step.attempt}" + (f" · {step.error_code}: {step.error_message}" if step.error_code else "") + (f" · episode {episode.outcome}" if episode else ""))
        if step.surface is None:
            self.request_surface_title.setText("Surface the model would have seen: not recorded for this step")
            self.request_surface_model.set_messages(())
        else:
            surface = ((summary_message(step.summary),) if step.summary else ()) + tuple(step.surface)
            self.request_surface_title.setText(f"Surface the model would have seen ({len(surface)} message{'' if len(surface) == 1 else 's'})")
            self.request_surface_model.set_messages(surface)

    # -- recoveries ----------------------------------------------------------------------------
    def set_episodes(self, episodes: Sequence[Episode]) -> None:
        self.episodes.blockSignals(True)
        self.episodes.clear()
        self.episodes.addItems([episode_label(e) for e in episodes])
        self.episodes.blockSignals(False)
        self.empty.setText(self.EMPTY_TEXT)
        self.empty.setObjectName("muted")
        self.empty.setVisible(not episodes)
        self.model.set_episodes(episodes)
        if self.requests_state == "loaded":  # the recoveries' steps go in place among the requests
            self._rebuild_rows(self._points)

    def show_error(self, reason: str) -> None:
        """The episodes could not be rebuilt: no episodes, and the reason in their place."""
        self.set_episodes([])
        self.empty.setObjectName("errorText")
        self.empty.setText(f"The replay cannot be rebuilt: {reason}")

    def _show_step(self, index: int) -> None:
        step: ReplayStep | None = self.model.current_step()
        self.back_button.setEnabled(self.model.can_back())
        self.forward_button.setEnabled(self.model.can_forward())
        if step is None:
            self.kind.setText("")
            for label in self.facts.values():
                label.setText("")
            self.no_progress.hide()
            self.surface_title.setText("Surface the model would have seen")
            self.surface_model.set_messages(())
            return
        self.steps.setCurrentIndex(self.model.index(index))
        total = self.model.rowCount()
        self.kind.setText(f"Step {index + 1} of {total}: {step.kind}")
        self.facts["tokens"].setText(_change(step.tokens_before, step.tokens_after))
        self.facts["generation"].setText(_change(step.generation_before, step.generation_after))
        self.facts["attempt"].setText(str(step.attempt))
        self.facts["error"].setText(f"{step.error_code}: {step.error_message}" if step.error_code else "–")
        self.no_progress.setVisible(step.no_progress)
        if step.surface is None:
            self.surface_title.setText("Surface the model would have seen: not recorded for this step")
            self.surface_model.set_messages(())
        else:
            surface = ((summary_message(step.summary),) if step.summary else ()) + tuple(step.surface)
            self.surface_title.setText(f"Surface the model would have seen ({len(surface)} message{'' if len(surface) == 1 else 's'})")
            self.surface_model.set_messages(surface)
