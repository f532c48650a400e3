"""Revert on the summary card, the Audit tab and a store that cannot be written (issue 23).

- **Revert**: the summary card's button reverts the open thread's last compaction of ours (Redo
  after a revert); what it would do is read when the card shows (``revert_target``); the reason
  typed beside it goes to the audit log. The thread is then read again.
- **Audit**: the Audit tab lists the audit log (this thread or all, by operator and action).
- **Read-only**: when the service says the store cannot be written (a database role without the
  privileges, or ``--read-only``), the header says so, and every write action is disabled with the
  reason in its tooltip: "read-only: your database role cannot write". No write is attempted, so no
  raw permission error ever reaches the user.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel

from engine.core.errors import EngineError

from ...logic.state import ThreadState
from ...logic.tasks import TaskSet, ThreadTasks
from ...logic.window import Window
from ...service_api import CompactionAPI, SteeringAPI
from ...service_client import FacetClient
from .widget import AuditPanel

#: the audit rows read per page
AUDIT_PAGE = 200
#: a widget or action with this dynamic property set to True writes to the database: disabled read-only
WRITE_PROPERTY = "dbWrite"


class RevertAuditController:
    def __init__(
        self,
        ui: Any,
        client: FacetClient,
        tasks: TaskSet,
        view: ThreadTasks,
        state: ThreadState,
        report: Callable[[BaseException, str], None],
        *,
        window: Window,
        compaction: Any,
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.view = view
        self.state = state
        self.report = report
        self.window = window
        self.compaction = compaction
        #: why the store cannot be written, in words (None: writable or not known yet)
        self.read_only: str | None = None
        self.reverting = False
        self.last_result: Any = None
        self.panel: AuditPanel = ui.audit_panel  # the Audit tab (built with the side tabs: layout)
        self.panel.filtersChanged.connect(lambda: self.tasks.spawn(self.load_audit(), "read the audit log"))
        self.panel.moreRequested.connect(lambda: self.tasks.spawn(self.load_audit(more=True), "read the audit log"))
        self.badge = QLabel("")
        self.badge.setObjectName("readOnlyBadge")
        self.badge.setWordWrap(True)
        self.badge.hide()
        ui.thread_header.layout().insertWidget(1, self.badge)
        ui.detail.boundaryCardShown.connect(self._card_shown)
        ui.detail.revertRequested.connect(self._revert_requested)
        #: Compaction → Revert last compaction (Redo after a revert): reachable when no summary card is
        #: (a revert of the first compaction leaves none)
        self.action = QAction("Revert last compaction", ui)
        self.action.setObjectName("revertAction")
        self.action.setEnabled(False)
        self.action.triggered.connect(lambda: self._revert_requested(""))
        ui.compaction_menu.addAction(self.action)
        ui.compaction_menu.aboutToShow.connect(self._apply_target)  # the thread may have become busy since
        #: what Revert would do on the thread :attr:`_target_key` (read when a thread loads and when its card shows)
        self.target: Any = None
        self._target_key: str | None = None
        compaction.held_listeners.append(lambda _why: self._apply_target())  # another thread selected (loading): held

    # -- access -----------------------------------------------------------------------------
    async def database_opened(self) -> None:
        """Ask the store whether it can be written and set the window up for it; then the audit."""
        try:
            access = await self.client.call(SteeringAPI.access)
        except Exception as exc:  # noqa: BLE001 - shown, as any failure
            self.report(exc, "read the database's access")
            return
        self.apply_access(access)
        await self.load_audit()

    def apply_access(self, access: dict[str, Any]) -> None:
        ui = self.ui
        self.read_only = None if access.get("writable", True) else (access.get("words") or "read-only")
        self.compaction.read_only = self.read_only
        if self.read_only:
            self.badge.setText(f"{self.read_only} · viewing as {access.get('operator') or 'this role'}")
            self.badge.setToolTip("Compact, Revert, Import and every other write are disabled. docs/roles.md explains the roles.")
            self.badge.show()
            if "read-only" not in ui.windowTitle():
                ui.setWindowTitle(f"{ui.windowTitle()} · read-only")
        else:
            self.badge.hide()
        self.compaction.update_button()
        self.apply_write_controls()

    def write_controls(self) -> list[Any]:
        """Every control that writes to the database."""
        ui = self.ui
        found: list[Any] = [ui.compact_button, ui.compact_action, ui.import_action, ui.detail.revert_button, ui.detail.revert_reason, self.action, ui.sessions.action]
        found += [obj for obj in ui.findChildren(QObject) if obj.property(WRITE_PROPERTY) is True and obj not in found]
        return found

    def apply_write_controls(self) -> None:
        if not self.read_only:
            return
        for control in self.write_controls():
            control.setEnabled(False)
            control.setToolTip(self.read_only)
            if hasattr(control, "setStatusTip"):
                control.setStatusTip(self.read_only)

    # -- revert -----------------------------------------------------------------------------
    def _card_shown(self, _info: object) -> None:
        button = self.ui.detail.revert_button
        if self.read_only:
            button.setEnabled(False)
            button.setToolTip(self.read_only)
            self.ui.detail.revert_reason.setEnabled(False)
            return
        if self.state.thread is not None:
            self.view.spawn(self._read_target(self.state.thread.key), "read what Revert would do")

    def thread_loaded(self, key: str) -> None:
        """A thread was (re)loaded: what Revert would do now (the menu's action), and its audit."""
        self.tasks.spawn(self.load_audit(), "read the audit log")
        if self.read_only:
            self.action.setEnabled(False)
            self.action.setToolTip(self.read_only)
            return
        self.view.spawn(self._read_target(key), "read what Revert would do")

    async def _read_target(self, key: str) -> None:
        target = await self.client.call(CompactionAPI.revert_target, key)
        if self.state.thread is None or self.state.thread.key != key:
            return
        self.target, self._target_key = target, key
        self._apply_target()

    def _apply_target(self) -> None:
        """The menu's action and the card's button from what Revert would do and whether the thread is
        idle (a revert needs an idle thread, as Compact now: disabled with the reason, never a refusal)."""
        target = self.target
        if target is None or self.state.thread is None:
            return
        held = self.compaction.held()  # the list's selected thread is another, still loading
        if held or self._target_key != self.state.thread.key:  # (what Revert would do on this one is not read yet)
            self._hold(held or "Reading what Revert would do on this thread…")
            return
        busy = self.compaction.busy()
        label = "Redo the reverted compaction" if target.action == "redo" else "Revert last compaction"
        why = self.read_only or (f"Revert needs an idle thread; this one is {busy}." if busy and target.action else target.why or "")
        self.action.setText(f"{label} (can't: {busy})" if busy and target.action and not self.read_only else label)
        self.action.setEnabled(target.action is not None and not self.read_only and not busy)
        self.action.setToolTip(why)
        self.action.setStatusTip(why)
        button = self.ui.detail.revert_button
        self.ui.detail.revert_reason.setEnabled(target.action is not None and not self.read_only)
        if self.read_only:  # learnt while this was read: never enabled on a store that cannot be written
            button.setEnabled(False)
            button.setToolTip(self.read_only)
            return
        if target.action is None:
            button.setText("Revert")
            button.setEnabled(False)
            button.setToolTip(target.why or "Nothing to revert")
        elif target.action == "redo":
            button.setText("Redo")
            button.setEnabled(not self.reverting)
            button.setToolTip("The last act on this thread was a revert: apply the compaction it undid again (a new generation)")
        else:
            button.setText("Revert")
            button.setEnabled(not self.reverting)
            button.setToolTip("Bring back the boundary, summary and pruned results from before the last compaction (a new generation; nothing is deleted)")

    def _hold(self, why: str) -> None:
        """The menu's action and the card's button disabled, saying ``why`` (the store's read-only reason first)."""
        why = self.read_only or why
        redo = self.target is not None and self.state.thread is not None and self._target_key == self.state.thread.key and self.target.action == "redo"
        self.action.setText("Redo the reverted compaction" if redo else "Revert last compaction")
        self.action.setEnabled(False)
        self.action.setToolTip(why)
        self.action.setStatusTip(why)
        self.ui.detail.revert_button.setEnabled(False)
        self.ui.detail.revert_button.setToolTip(why)
        self.ui.detail.revert_reason.setEnabled(False)

    def _revert_requested(self, reason: str) -> None:
        if self.state.thread is None or self.read_only:
            return
        held = self.compaction.held()
        if held:  # the panels show a thread the list no longer has selected: said, nothing asked of the store
            self.ui.statusBar().showMessage(f"{held}: nothing reverted")
            return
        busy = self.compaction.busy()
        if busy:  # the card's button: said in words, nothing asked of the store
            self.ui.statusBar().showMessage(f"Can't revert: the thread is {busy} (Revert needs an idle thread; nothing changed)")
            return
        self.tasks.spawn(self.revert(self.state.thread.key, reason or None), "revert")

    async def revert(self, key: str, reason: str | None = None) -> Any:
        """Revert (or redo) the last compaction of ``key``, then read the thread again."""
        bar = self.ui.statusBar()
        self.reverting = True
        self.ui.detail.revert_button.setEnabled(False)
        bar.showMessage("Reverting…")
        try:
            result = await self.client.call(CompactionAPI.revert, key, reason=reason)
        except EngineError as exc:
            self.report(exc, "revert")
            bar.showMessage("Revert refused: nothing changed")
            return None
        finally:
            self.reverting = False
        self.last_result = result
        self.ui.detail.revert_reason.clear()
        done = ("Reverted the last compaction" if result.action == "revert" else "Redid the reverted compaction") + (
            f": {result.tokens_before:,} → {result.tokens_after:,} tokens, generation {result.generation_after}"
        )
        if self.state.thread is not None and self.state.thread.key == key:
            self.ui.banner.clear()
            await self.window.load_thread(key)
        bar.showMessage(done if self.state.thread is not None and self.state.thread.key == key else f"{key}: {done}")
        await self.load_audit()
        return result

    # -- audit ------------------------------------------------------------------------------
    async def load_audit(self, *, more: bool = False) -> None:
        panel = self.panel
        thread = self.state.thread.key if self.state.thread is not None and panel.this_thread.isChecked() else None
        after = None
        if more and panel.model.rowCount():
            after = panel.model.entries()[-1].id
        try:
            operators = await self.client.call(SteeringAPI.audit_operators)
            rows = await self.client.call(
                SteeringAPI.audit, thread=thread, operator=panel.chosen_operator(), actions=panel.chosen_actions(), after_id=after, limit=AUDIT_PAGE
            )
        except Exception as exc:  # noqa: BLE001 - shown, as any failure
            self.report(exc, "read the audit log")
            return
        panel.set_operators(operators)
        panel.view.setColumnHidden(2, thread is not None)  # one thread: its name in every row says nothing
        panel.model.set_entries(rows, append=more)
        panel.more.setVisible(len(rows) == AUDIT_PAGE)
        n = panel.model.rowCount()
        where = f"thread {thread}" if thread else "every thread"
        panel.status.setText(f"{n} action{'s' if n != 1 else ''} on {where}" if n else f"No recorded action on {where} yet")
