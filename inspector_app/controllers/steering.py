"""Steering compaction from the inspector (issue 23): pin / unpin a message from the timeline's
context menu (a pinned row carries a pin marker), and the thread's own policy (Compaction →
Thread policy…, or the gauge's menu): threshold, window, retained tail and standing instructions,
each value shown with where it comes from. Every change goes through the service on a worker
thread and writes one audit row there; nothing here blocks the GUI thread."""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QModelIndex, QPoint, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.core.errors import EngineError

from ..logic.tasks import Report, TaskSet, ThreadTasks
from ..logic.window import Window
from ..models.timeline import MessageIdRole
from ..service_api import SteeringAPI

#: the policy values the dialog edits: (key, label, kind)
POLICY_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("threshold_ratio", "Threshold (share of the window)", "ratio"),
    ("context_window", "Context window (tokens)", "tokens"),
    ("retained_tail_ratio", "Retained tail (share of the window)", "ratio"),
)


class ThreadPolicyDialog(QDialog):
    """The open thread's own policy: one field per value with where its value comes from now, the
    standing instructions and a reason. Non-modal (``open()``): Save emits ``accepted``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("threadPolicyDialog")
        self.setWindowTitle("Thread policy")
        self.heading = QLabel()
        self.heading.setWordWrap(True)
        form = QFormLayout()
        self.fields: dict[str, QDoubleSpinBox | QSpinBox] = {}
        self.origins: dict[str, QLabel] = {}
        for key, label, kind in POLICY_FIELDS:
            box: QDoubleSpinBox | QSpinBox
            if kind == "ratio":
                box = ratio = QDoubleSpinBox()
                ratio.setRange(0.01, 1.0)
                ratio.setSingleStep(0.05)
                ratio.setDecimals(2)
            else:
                box = count = QSpinBox()
                count.setRange(1, 10_000_000)
                count.setSingleStep(1000)
                count.setGroupSeparatorShown(True)
            box.setObjectName(f"policy_{key}")
            origin = QLabel()
            origin.setObjectName(f"origin_{key}")
            row = QWidget()
            line = QVBoxLayout(row)
            line.setContentsMargins(0, 0, 0, 0)
            line.addWidget(box)
            line.addWidget(origin)
            form.addRow(label, row)
            self.fields[key], self.origins[key] = box, origin
        self.instructions = QLineEdit()
        self.instructions.setObjectName("policyInstructions")
        self.instructions.setPlaceholderText("standing instructions for every compaction of this thread, e.g. keep every path under src/")
        form.addRow("Instructions", self.instructions)
        self.reason = QLineEdit()
        self.reason.setObjectName("policyReason")
        self.reason.setPlaceholderText("why (recorded in the audit log)")
        form.addRow("Reason", self.reason)
        self.effective = QLabel()
        self.effective.setObjectName("policyEffective")
        self.effective.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addLayout(form)
        layout.addWidget(self.effective)
        layout.addWidget(self.buttons)
        self.view: Any = None

    def show_policy(self, view: Any) -> None:
        """Fill the fields from a ``ThreadPolicyView``."""
        self.view = view
        self.heading.setText(f"Policy of thread {view.thread} (route {view.provider or '–'}/{view.model or '–'}). "
                             "A value set here applies to this thread only.")
        for key, box in self.fields.items():
            value = view.values.get(key)
            if value is not None:
                if isinstance(box, QDoubleSpinBox):
                    box.setValue(float(value))
                else:
                    box.setValue(int(value))
            origin = view.origins.get(key, "store default")
            if key == "context_window" and view.window_source and origin not in ("thread", "model route"):
                origin = f"{origin} ({view.window_source})"
            self.origins[key].setText(f"from {origin}")
        self.instructions.setText(view.instructions or "")
        self.reason.clear()
        if view.threshold is not None:
            self.effective.setText(f"Now: window {view.context_window:,} · threshold {view.threshold:,} · target {view.target_tokens:,} · "
                                   f"retained tail {view.retained_tail_tokens:,} tokens")

    def changes(self) -> dict[str, Any]:
        """The values that differ from what the thread has now (what Save sends)."""
        if self.view is None:
            return {}
        out: dict[str, Any] = {}
        for key, box in self.fields.items():
            value = round(box.value(), 4) if isinstance(box, QDoubleSpinBox) else int(box.value())
            now = self.view.values.get(key)
            if now is None or abs(float(now) - float(value)) > 1e-9:
                out[key] = value
        text = self.instructions.text().strip()
        if text != (self.view.instructions or ""):
            out["instructions"] = text or None
        return out


#: what Thread policy… does (its tooltip when it may)
POLICY_TIP = "Threshold, window, retained tail and standing instructions of this thread only"


class SteeringController:
    """Pins from the timeline's context menu and the thread's own policy dialog."""

    def __init__(self, ui: Any, client: Any, tasks: TaskSet, view: ThreadTasks, report: Report, *,
                 window: Window, compaction: Any = None) -> None:
        self.ui = ui
        #: why nothing may act on the open thread now (``CompactionController.held``: the list's
        #: selected thread is another, still loading); None: the open thread is the one selected
        self._held: Callable[[], "str | None"] = compaction.held if compaction is not None else (lambda: None)
        #: why the store cannot be written (``CompactionController.read_only``, set as the database opens)
        self._read_only: Callable[[], "str | None"] = (lambda: compaction.read_only) if compaction is not None else (lambda: None)
        self.client = client
        self.tasks = tasks
        self.view = view
        self.report = report
        self.window = window
        self.menu: QMenu | None = None
        self.policy_dialog: ThreadPolicyDialog | None = None
        timeline = ui.timeline
        timeline.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        timeline.customContextMenuRequested.connect(self.context_menu)
        self.policy_action = QAction("Thread policy…", ui)
        self.policy_action.setObjectName("threadPolicy")
        self.policy_action.setToolTip(POLICY_TIP)
        self.policy_action.setProperty("dbWrite", True)  # read-only: disabled with the reason (panels.audit.controller.WRITE_PROPERTY)
        self.policy_action.triggered.connect(self.open_policy)
        ui.compaction_menu.addAction(self.policy_action)
        ui.gauge.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)  # the header's gauge: right-click for the thread's policy
        ui.gauge.addAction(self.policy_action)
        if compaction is not None:
            compaction.held_listeners.append(self._apply_held)

    def _apply_held(self, why: str | None) -> None:
        """Thread policy… waits for the thread the list shows selected, saying why (never enabled on a
        store that cannot be written)."""
        read_only = self._read_only()
        tip = read_only or why or POLICY_TIP
        self.policy_action.setEnabled(why is None and not read_only)
        self.policy_action.setToolTip(tip)
        self.policy_action.setStatusTip(tip)

    # -- pins -------------------------------------------------------------------------------
    def thread_opened(self, key: str) -> None:
        """A thread's view opened: read its pins (bound to the view: a newer view cancels it)."""
        self.view.spawn(self.load_pins(key), "read pins")

    async def load_pins(self, key: str) -> None:
        pins = await self.client.call(SteeringAPI.pins, key)
        if self.window.current_key() == key:
            self.ui.timeline_model.set_pinned({p.message_id for p in pins})

    def message_at(self, pos: QPoint) -> int | None:
        index: QModelIndex = self.ui.timeline.indexAt(pos)
        return index.data(MessageIdRole) if index.isValid() else None

    def context_menu(self, pos: QPoint) -> QMenu | None:
        """The row's menu: Pin or Unpin its message (shown without blocking: ``popup``)."""
        mid = self.message_at(pos)
        key = self.window.current_key()
        if mid is None or key is None:
            return None
        menu = QMenu(self.ui.timeline)
        menu.setObjectName("timelineMenu")
        pinned = self.ui.timeline_model.is_pinned(mid)
        action = menu.addAction("Unpin" if pinned else "Pin")
        action.setObjectName("unpinMessage" if pinned else "pinMessage")
        held = self._read_only() or self._held()  # another thread is selected and loading: this row is of the thread shown before
        action.setEnabled(held is None)
        action.setToolTip(held or ("Keep this message (and its tool round) verbatim through compaction" if not pinned else "Let compaction take it again"))
        action.triggered.connect(lambda: self.toggle_pin(key, mid, unpin=pinned))
        self.menu = menu
        menu.popup(self.ui.timeline.viewport().mapToGlobal(pos))
        return menu

    def toggle_pin(self, key: str, message_id: int, *, unpin: bool) -> None:
        held = self._read_only() or self._held()
        if held or self.window.current_key() != key:  # the selection moved on while the menu was open
            self.ui.statusBar().showMessage(f"{held or 'Another thread is open now'}: nothing {'unpinned' if unpin else 'pinned'}")
            return
        self.tasks.spawn(self.pin(key, message_id, unpin=unpin), "unpin" if unpin else "pin")

    async def pin(self, key: str, message_id: int, *, unpin: bool = False, reason: str | None = None) -> None:
        change = await self.client.call(SteeringAPI.pin, key, message_id, reason=reason, unpin=unpin)
        word = "Unpinned" if unpin else "Pinned"
        shown = ", ".join(f"#{i}" for i in change.covered)
        self.ui.statusBar().showMessage(f"{word} {shown}" if change.changed else f"#{message_id} was already {word.lower()}")
        if self.window.current_key() == key:
            await self.load_pins(key)
            await self.window.reread_status(key)

    # -- the thread's policy ----------------------------------------------------------------
    def open_policy(self) -> None:
        key = self.window.current_key()
        if key is None or self._held() or self._read_only():
            return
        if self.policy_dialog is None:
            self.policy_dialog = ThreadPolicyDialog(self.ui)
            self.policy_dialog.accepted.connect(self._save_policy)
        self.view.spawn(self._fill_policy(key), "read the thread policy")

    async def _fill_policy(self, key: str) -> None:
        view = await self.client.call(SteeringAPI.thread_policy, key)
        assert self.policy_dialog is not None
        self.policy_dialog.show_policy(view)
        self.policy_dialog.open()

    def _save_policy(self) -> None:
        dialog = self.policy_dialog
        if dialog is None or dialog.view is None:
            return
        changes = dialog.changes()
        if changes:
            self.tasks.spawn(self.save_policy(dialog.view.thread, changes, dialog.reason.text().strip() or None), "set the thread policy")

    async def save_policy(self, key: str, values: dict[str, Any], reason: str | None) -> None:
        try:
            view = await self.client.call(SteeringAPI.set_thread_policy, key, values, reason=reason)
        except EngineError as exc:
            self.report(exc, "set the thread policy")
            return
        self.ui.statusBar().showMessage(f"Thread policy saved: threshold {view.threshold:,} tokens" if view.threshold else "Thread policy saved")
        if self.window.current_key() == key:
            await self.window.reread_status(key)
