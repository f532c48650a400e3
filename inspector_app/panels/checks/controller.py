"""The Checks tab's behaviour (issue 24: moved from the threads controller): the invariants of
docs/schema.md for the open thread (``engine.core.checks``, as ``compaction check`` runs them) on a
worker, when a short thread opens, when the tab is opened on a thread not checked yet, and on Run
checks; the tab's title says how many violations."""

from __future__ import annotations

from typing import Any, Callable

from engine.core.checks import Finding, ServiceReader, check_thread

from ...logic.choices import TABS
from ...logic.state import error_text, plural
from ...logic.tasks import ThreadTasks
from ...service_client import FacetClient
from .widget import ChecksPanel

#: threads up to this many messages are checked as they open; longer ones when the tab is opened
CHECK_AUTO_LIMIT = 2_000


class ChecksController:
    """Runs the checks of the open thread (the view's task) and shows them in :attr:`panel`."""

    def __init__(self, panel: ChecksPanel, tabs: Any, set_count: Callable[[int], None], client: FacetClient, view: ThreadTasks) -> None:
        self.panel = panel
        self.tabs = tabs
        self._set_count = set_count
        self.client = client
        self.view = view
        self._checked: str | None = None  # the thread whose checks the tab shows
        tabs.currentChanged.connect(self._on_tab)
        panel.button.clicked.connect(lambda: self.view.key and self.view.spawn(self._check(self.view.key), "check thread"))

    async def thread_opened(self, key: str, count: int | None) -> None:
        """A view of ``key`` (``count`` messages) is loading its side panels: the tab is emptied and
        the thread checked now when it is short or the tab is open, else when the tab is opened."""
        self.panel.model.set_findings([])
        self._set_count(0)
        self._checked = None
        if self.tabs.currentIndex() == TABS.index("checks") or (count is not None and count <= CHECK_AUTO_LIMIT):
            await self._check(key)
        else:  # checking reads every message: a long thread is checked when the tab is opened
            self.panel.note.setText(f"This thread has {plural(count or 0, 'message')}: its checks run when this tab is opened (or press Run checks).")

    def _on_tab(self, index: int) -> None:
        key = self.view.key
        if index == TABS.index("checks") and key is not None and self._checked != key:
            self.view.spawn(self._check(key), "check thread")

    async def _check(self, key: str) -> None:
        """The invariants of docs/schema.md for this thread (``engine.core.checks``, as ``compaction
        check`` runs them), on a worker: the Checks tab lists what is wrong, its title how many."""
        panel = self.panel
        self._checked = key
        panel.note.setText("Checking…")
        try:
            findings = await self.client.apply(run_checks, key)
        except Exception as exc:  # noqa: BLE001 - the checks themselves failed: said in the tab
            panel.model.set_findings([])
            panel.note.setText(f"The checks could not run: {error_text(exc)}")
            return
        panel.model.set_findings(findings)
        self._set_count(len(findings))
        panel.note.setText(
            f"{plural(len(findings), 'violation')} of docs/schema.md found in this thread." if findings else "No violations: every invariant of docs/schema.md holds for this thread."
        )


def run_checks(service: Any, key: str) -> list[Finding]:
    """:func:`engine.core.checks.check_thread` over the open service (runs on a worker)."""
    return check_thread(ServiceReader(service), key)
