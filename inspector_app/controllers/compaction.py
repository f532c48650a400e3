"""*Compact now*: the button and what it says about a busy thread, the non-blocking confirmation,
and the manual compaction itself (off the GUI thread, then the thread is read again).

Also what the compaction menu and the summary cards need from the service: Compaction → What if…
(:class:`~inspector_app.widgets.whatif.WhatIfDialog`), File → Export compaction history… (Markdown or
JSON, read and written off the GUI thread) and the dropped specifics of a source's compaction
(``compaction_diff(...).dropped``) for its card."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog

from engine.core.errors import CannotCompact, EngineError, ThreadBusy
from engine.core.views import SourceCompaction

from ..layout import InspectorLayout
from ..logic.pressure_text import manual_outcome
from ..logic.state import ThreadState, error_text, plural
from ..logic.tasks import Report, TaskSet, ThreadTasks
from ..logic.window import Window
from ..preferences import remember_directory, start_directory
from ..service_api import CompactionAPI, ReadsAPI
from ..service_client import FacetClient
from ..widgets.dropped import DroppedView
from ..widgets.whatif import WhatIfDialog

#: File → Export compaction history…: the name filters and the format of each
EXPORT_FILTERS: dict[str, str] = {"Markdown (*.md)": "md", "JSON (*.json)": "json"}
_EXTENSIONS = {".md": "md", ".markdown": "md", ".json": "json"}


def export_target(path: str, name_filter: str | None = None) -> tuple[Path, str]:
    """The file and format of an export: the format from the file's extension (``.md``,
    ``.markdown``, ``.json``), else from the chosen filter (its extension is added)."""
    target = Path(path)
    fmt = _EXTENSIONS.get(target.suffix.lower())
    if fmt is not None:
        return target, fmt
    fmt = EXPORT_FILTERS.get(name_filter or "", "md")
    return target.with_name(target.name + (".json" if fmt == "json" else ".md")), fmt


def default_export_name(key: str, fmt: str = "md") -> str:
    """``<thread key>-compactions.md`` with what a file name cannot hold replaced."""
    stem = re.sub(r"[^\w.\-]+", "_", key).strip("._") or "thread"
    return f"{stem}-compactions.{'json' if fmt == 'json' else 'md'}"


def write_export(path: Path, text: str) -> int:
    """Write ``text`` to ``path`` (UTF-8) all at once: a temporary file beside it, then renamed, so
    a failed write never leaves half a file (nor removes an older one). Returns the bytes written;
    an ``OSError`` says why it could not be written."""
    data = text.encode("utf-8")
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:  # name the file the user chose, not our temporary one
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(data)

BUSY_TEXT = {"running": "running", "waiting_for_user": "waiting for the user", "queued": "queued"}
BUSY_NOTE = {
    "running": "A run is in progress: compact by hand once it has finished.",
    "waiting_for_user": "The agent is waiting for the user's answer: compact by hand once the turn is over.",
    "queued": "A request is queued for this thread: compact by hand once it has run.",
}

#: what What if… and Export… do (their tooltips); with no open thread they say why they are disabled
WHATIF_TIP = "Replay this thread under other compaction settings (a scratch copy) and compare with what happened"
EXPORT_TIP = "Write the open thread's compactions (trigger, tokens, summary, dropped specifics, cost) as Markdown or JSON"
NO_THREAD = "Open a thread first"



def compact_action_text(button: str) -> str:
    """Compaction → Compact now…'s text from the button's: greyed with the same reason in words
    ("Compact now… (can't: running)"), so a disabled item reads as one without hovering it."""
    if button.startswith("Can't compact: "):
        return f"Compact now… (can't: {button.removeprefix('Can' + chr(39) + 't compact: ')})"
    return button if button.endswith("…") else "Compact now…"


class CompactionController:
    """Manual compaction of the open thread.

    The compaction is a window-wide task: it goes on (and reports) if another thread is opened
    meanwhile; only the re-read that follows is skipped then.
    """

    def __init__(
        self,
        ui: InspectorLayout,
        client: FacetClient,
        tasks: TaskSet,
        view: ThreadTasks,
        state: ThreadState,
        report: Report,
        *,
        window: Window,
        selected: Callable[[], "int | None"],
        settings: QSettings | None = None,
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.view = view
        self.state = state
        self.report = report
        self.window = window
        self._selected = selected
        self._settings = settings if settings is not None else QSettings()
        self.compacting = False
        #: the thread a rejected model summary may be compacted again with the extractive summarizer
        self._fallback: str | None = None
        #: thread key -> (its message count then, why the last manual compaction could not bring it
        #: under its threshold): the header's "cannot compact: <reason>" until the thread changes
        self._blocked: dict[str, tuple[object, str]] = {}
        ui.compact_button.clicked.connect(self.ask)
        ui.confirm.accepted.connect(self._confirmed)
        #: the what-if dialog (one per window, pointed at the open thread when it is opened)
        self.whatif_dialog: WhatIfDialog | None = None
        self.export_dialog: QFileDialog | None = None
        #: the last export: (path, format) written, for tests and the status bar
        self.exported: tuple[Path, str] | None = None
        ui.whatif_button.clicked.connect(self.open_whatif)
        ui.whatif_action.triggered.connect(self.open_whatif)
        ui.compact_action.triggered.connect(self.ask)
        ui.export_action.triggered.connect(self.ask_export)
        ui.detail.sourceCardShown.connect(self.read_source_dropped)
        #: the dropped specifics of a source's compactions, by (thread, compaction, messages, generation)
        self._source_dropped_cache: dict[tuple[object, ...], DroppedView] = {}
        #: told :meth:`held` whenever it changes (the list's selection and the open thread part or agree again)
        self.held_listeners: list[Callable[[str | None], None]] = []

    def ask(self) -> None:
        thread = self.state.thread
        if thread is not None and not self.loading_selected:
            self._fallback = None
            self.ui.confirm.confirm_button.setText("Compact")
            self.ui.confirm.ask(f"Compact “{thread.title or thread.key}” now? All complete history before the retained tail is summarized; "
                                "the raw messages are kept, and pinned messages stay verbatim.", fields=True)

    def _confirmed(self) -> None:
        fallback, self._fallback = self._fallback, None
        self.ui.confirm.confirm_button.setText("Compact")
        if fallback is not None:  # the model's summary was rejected: this one compaction with the extractive summarizer
            self.tasks.spawn(self.compact(fallback, summarizer="extractive"), "compact (extractive)")
        elif self.state.thread is not None and not self.loading_selected:
            instructions, reason = self.ui.confirm.values()
            self.tasks.spawn(self.compact(self.state.thread.key, instructions=instructions, reason=reason), "compact")

    def offer_extractive(self, key: str, why: str) -> None:
        """The configured model's summary was rejected (nothing changed): offer the offline
        extractive summarizer for this one compaction (issue #28)."""
        self._fallback = key
        self.ui.confirm.confirm_button.setText("Compact with extractive")
        self.ui.confirm.ask(f"The model's summary was rejected ({why}); nothing was changed. Compact this thread once with the "
                            "offline extractive summarizer instead? (Preferences keep the model for later compactions.)")

    async def compact(self, key: str, *, summarizer: str | None = None, instructions: str | None = None, reason: str | None = None) -> None:
        """Manual compaction off the GUI thread; on success re-read everything from the service."""
        ui, bar = self.ui, self.ui.statusBar()
        self.compacting = True
        ui.busy.show()
        self.update_button()
        bar.showMessage("Compacting…")
        try:
            result = await self.client.call(CompactionAPI.compact, key, summarizer=summarizer, instructions=instructions, reason=reason)
        except EngineError as exc:
            rejected_by = None  # who wrote the rejected summary: the configured summarizer (asked only when it was used)
            if isinstance(exc, CannotCompact) and exc.code == "summary_rejected" and summarizer is None:
                rejected_by = await self._configured_summarizer()
            if isinstance(exc, CannotCompact):
                self._block(key, exc.detail or exc.reason or exc.message)
            self.report(exc, "compact")
            bar.showMessage("Compaction refused: nothing changed")
            if isinstance(exc, (ThreadBusy, CannotCompact)) and self.view.key == key:  # busy since we looked, or cannot compact: show it
                await self.window.reread_status(key)
            if isinstance(exc, CannotCompact) and rejected_by not in (None, "extractive"):
                self.offer_extractive(key, exc.detail or exc.reason or "rejected")
            return
        finally:
            self.compacting = False
            ui.busy.hide()
            self.update_button()
        why = manual_outcome(result.status, result.reason, result.still_over_threshold, result.note)
        if why:
            self._block(key, why)
        else:
            self._blocked.pop(key, None)
        if self.view.key == key:  # still the open thread
            ui.banner.clear()
            await self.window.load_thread(key, keep=self._selected())
        if result.status == "no_op":
            bar.showMessage(f"Nothing to compact ({result.reason})" if self.view.key == key else f"{key}: nothing to compact ({result.reason})")
        else:
            done = f"Compacted {plural(result.compacted_messages, 'message')}: {result.before_tokens:,} → {result.after_tokens:,} tokens, generation {result.generation}"
            if result.still_over_threshold:
                done += f" · still over the threshold: {result.note or 'the retained part alone reaches it'}"
            bar.showMessage(done if self.view.key == key else f"{key}: {done}")  # another thread open meanwhile: say which

    def _block(self, key: str, why: str) -> None:
        thread = self.state.thread
        self._blocked[key] = (thread.message_count if thread is not None and thread.key == key else None, why)

    def blocked_reason(self, key: str) -> str | None:
        """Why the last manual compaction of ``key`` could not bring it under its threshold, while
        the thread has not changed since (None otherwise)."""
        kept = self._blocked.get(key)
        thread = self.state.thread
        if kept is None:
            return None
        if thread is not None and thread.key == key and kept[0] is not None and thread.message_count != kept[0]:
            del self._blocked[key]  # new messages: compaction may help now
            return None
        return kept[1]

    async def _configured_summarizer(self) -> str | None:
        """The name of the summarizer a compaction with none chosen uses (``extractive``,
        ``openai-compatible:<model>``); None when it cannot be read. The cause of a rejection
        comes with the error itself (``CannotCompact.detail``): no event is read for it."""
        try:
            who = await self.client.call(CompactionAPI.summarizer_info)
        except Exception:  # noqa: BLE001 - the rejection itself is what must be shown
            return None
        return who.get("summarizer")

    # -- what if … ---------------------------------------------------------------------------
    def open_whatif(self) -> WhatIfDialog | None:
        """The what-if dialog for the open thread (the one already open is raised; pointed at the
        open thread unless it is running)."""
        thread = self.state.thread
        if thread is None or self.loading_selected:
            return None
        status = self.state.status if self.state.status is not None and self.state.status.thread == thread.key else None
        window = status.context_window if status is not None else None
        threshold = status.threshold if status is not None else None
        dialog = self.whatif_dialog
        if dialog is None:
            dialog = WhatIfDialog(self.client, thread.key, thread.title, window_tokens=window, threshold=threshold, spawn=self.tasks.spawn, parent=self.ui)
            self.whatif_dialog = dialog
        else:
            dialog.set_thread(thread.key, thread.title, window_tokens=window, threshold=threshold)
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog

    # -- export ------------------------------------------------------------------------------
    def ask_export(self) -> QFileDialog | None:
        """The save dialog (non-blocking); the chosen file is written by :meth:`export`."""
        thread = self.state.thread
        if thread is None or self.loading_selected:
            return None
        start = str(Path(start_directory(self._settings)) / default_export_name(thread.key))  # the last folder used, else home
        dialog = QFileDialog(self.ui, f"Export the compaction history of “{thread.title or thread.key}”", start, ";;".join(EXPORT_FILTERS))
        dialog.setObjectName("exportFileDialog")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setFileMode(QFileDialog.FileMode.AnyFile)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        key = thread.key

        def chosen(path: str) -> None:
            target, fmt = export_target(path, dialog.selectedNameFilter())
            remember_directory(self._settings, target.parent)
            self.tasks.spawn(self.export(key, target, fmt), "export compaction history")

        dialog.fileSelected.connect(chosen)
        dialog.filterSelected.connect(lambda f: dialog.selectFile(default_export_name(key, EXPORT_FILTERS.get(f, "md"))))
        dialog.finished.connect(lambda _r: setattr(self, "export_dialog", None))
        self.export_dialog = dialog
        dialog.open()
        return dialog

    async def export(self, key: str, path: str | os.PathLike[str], fmt: str = "md") -> bool:
        """Read the history as ``fmt`` and write it to ``path``, both off the GUI thread. A failure
        (the file cannot be written, the history cannot be read) is in the banner and the status
        bar; nothing half-written is left. True when written."""
        target, bar = Path(path), self.ui.statusBar()
        bar.showMessage(f"Exporting the compaction history of {key} …")
        self.ui.busy.show()
        try:
            text = await self.client.call(ReadsAPI.export_history, key, fmt)
            size = await self.client.run(write_export, target, text)
        except Exception as exc:  # noqa: BLE001 - shown, never raised into Qt
            self.report(exc, f"export to {target}")
            bar.showMessage(f"Export failed: {error_text(exc)}")
            return False
        finally:
            self.ui.busy.hide()
        self.exported = (target, fmt)
        bar.showMessage(f"Exported the compaction history of {key} ({'JSON' if fmt == 'json' else 'Markdown'}, {size:,} bytes) to {target}")
        return True

    # -- the card of a source's compaction --------------------------------------------------
    def _source_key(self, key: str, sc: SourceCompaction) -> tuple[object, ...]:
        thread = self.state.thread
        if thread is None or thread.key != key:
            return (key, sc.id, None, None)
        return (key, sc.id, thread.message_count, thread.generation)

    def read_source_dropped(self, sc: SourceCompaction) -> None:
        """The card of a source's compaction is shown: read its dropped specifics (once per thread
        state: a diff rebuilds both surfaces)."""
        key = self.view.key
        if key is None:
            return
        known = self._source_dropped_cache.get(self._source_key(key, sc))
        if known is not None:
            self.ui.detail.set_source_dropped(sc, known)
        else:
            self.view.spawn(self._source_dropped(key, sc), "read dropped specifics")

    async def _source_dropped(self, key: str, sc: SourceCompaction) -> DroppedView:
        """The dropped specifics of ``sc`` from its diff (placed in the thread's compaction list:
        after every engine compaction of its time, so its ordinal is found by trying upward from
        its place among the source's); shown on its card, an error in place (and read again the
        next time)."""
        try:
            view = DroppedView.from_specifics((await self.source_diff(key, sc)).dropped)
        except Exception as exc:  # noqa: BLE001 - shown on the card, in words
            view = DroppedView.failed(error_text(exc))
        else:
            if len(self._source_dropped_cache) >= 256:
                self._source_dropped_cache.clear()
            self._source_dropped_cache[self._source_key(key, sc)] = view
        self.ui.detail.set_source_dropped(sc, view)
        return view

    async def source_diff(self, key: str, sc: SourceCompaction):
        """``compaction_diff`` of the source's compaction ``sc``."""
        sources = await self.client.call(ReadsAPI.source_compactions, key)
        engine = await self.client.call(ReadsAPI.history, key)
        place = next((n for n, c in enumerate(sources, 1) if c.id == sc.id), None)
        if place is None:
            raise EngineError(f"the source's compaction {sc.id} is no longer in thread {key!r}", code="no_compaction")
        total = len(sources) + len(engine)
        for index in dict.fromkeys([place + n for n in range(len(engine) + 1)] + list(range(1, total + 1))):
            if not 1 <= index <= total:
                continue
            diff = await self.client.call(ReadsAPI.compaction_diff, key, index)
            if diff.origin != "engine" and diff.record_id in (None, sc.id):
                return diff
        raise EngineError(f"the source's compaction {sc.id} is not in the compaction list of {key!r}", code="no_compaction")

    #: the list's selected thread is not the one the panels show (a click on another row, Ctrl+End
    #: to an unloaded page: that thread is loading): nothing acts on the one shown
    LOADING_SELECTED = "Can't: loading the selected thread (the panels still show the one open before)"
    loading_selected = False

    def set_loading_selected(self, loading: bool) -> None:
        """Told by the thread list (``ThreadListController.apart``): the buttons and menus that act on
        the open thread are disabled with :data:`LOADING_SELECTED` while it is True; every other
        controller with such an action (Revert, Pin, Thread policy…) is told too (:attr:`held_listeners`)."""
        self.loading_selected = loading
        if loading and self._fallback is None:
            self.ui.confirm.hide()  # "Compact … now?" was about the thread the list no longer selects
        self.update_button()
        for listener in self.held_listeners:
            listener(self.held())

    def busy(self) -> str | None:
        """Why the open thread is not idle, in words ("running", "waiting for the user", "queued");
        None when it is idle or its status is not read yet. Compact now and Revert both need an idle thread."""
        status = self.state.status
        reason = status.busy_reason if status is not None else None
        return BUSY_TEXT.get(reason, reason) if reason else None

    def held(self) -> str | None:
        """Why nothing may act on the open thread now (None: it is the thread the list shows selected)."""
        return self.LOADING_SELECTED if self.loading_selected else None

    def update_button(self) -> None:
        """Enabled on an idle thread; otherwise it (and the note under the title) says why not.
        Compaction → Compact now… follows the button: disabled with the same reason in its tooltip
        and status tip. What if… and Export need an open thread, and say so when there is none."""
        open_thread = self.state.thread is not None and not self.loading_selected
        ui = self.ui
        for w, action, what in ((ui.whatif_button, ui.whatif_action, WHATIF_TIP), (None, ui.export_action, EXPORT_TIP)):
            tip = what if open_thread else self.LOADING_SELECTED if self.loading_selected else f"{NO_THREAD}: {what[0].lower()}{what[1:]}"
            for x in (w, action):
                if x is not None:
                    x.setEnabled(open_thread)
                    x.setToolTip(tip)
            action.setStatusTip(tip)
        try:
            self._update_compact_button()
        finally:
            ui.compact_action.setEnabled(ui.compact_button.isEnabled())
            ui.compact_action.setText(compact_action_text(ui.compact_button.text()))
            ui.compact_action.setToolTip(ui.compact_button.toolTip())
            ui.compact_action.setStatusTip(ui.compact_button.toolTip())

    #: why the store cannot be written, in words (issue 23; set by the revert/audit controller): Compact disabled with it
    read_only: str | None = None

    def _update_compact_button(self) -> None:
        button, note = self.ui.compact_button, self.ui.busy_label
        if self.read_only:
            button.setEnabled(False)
            button.setText("Compact now")
            button.setToolTip(self.read_only)
            return
        if self.compacting:
            button.setEnabled(False)
            button.setText("Compacting…")
            button.setToolTip("A manual compaction is running")
            return
        if self.loading_selected:
            button.setEnabled(False)
            button.setText("Compact now")
            button.setToolTip(self.LOADING_SELECTED)
            return
        status = self.state.status
        reason = status.busy_reason if status else None
        note.setText(BUSY_NOTE.get(reason, reason) if reason else "")
        note.setVisible(bool(reason))
        if status is None:
            button.setEnabled(False)
            button.setText("Compact now")
            button.setToolTip("Open a thread first" if self.state.thread is None else "Reading the thread's state…")
        elif reason:
            busy = self.busy()
            button.setEnabled(False)
            button.setText(f"Can't compact: {busy}")
            button.setToolTip(f"Manual compaction needs an idle thread; this one is {busy}.")
        else:
            button.setEnabled(True)
            button.setText("Compact now")
            blocked = self.blocked_reason(status.thread)
            button.setToolTip(
                f"The last manual compaction could not bring this thread under its threshold: {blocked}" if blocked else "Summarize all complete history before the retained tail"
            )
