"""A user trial: the thread list showed a thread at 98.8 % unselected and 12.3 % once clicked, the
header 12.3 % too. The threads were written by agent adapters whose process ran a policy with a
16,000-token window (threshold 12,800, recorded with every model request, their measurements
stored for the list); the inspector, without that policy, assumed 128,000 for the unknown model.

On the real ``MainWindow`` over the real service (policies=None: the inspector's own, which has no
window for the model): a row keeps its figure when it is clicked and after another row is; the
list, the header and the gauge give one number, and the header says what it is measured against
(the threshold recorded by the agent, not an assumed window's)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core.views import ThreadQuery
from engine.service import open_service
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_PRESSURE
from tests.agent_threads import AGENT_THRESHOLD, write_agent_threads
from tests.gui.conftest import run

pytestmark = pytest.mark.gui

WAIT_MS = 20_000
NEAR, FAR = "agent-near", "agent-far"  # ~89 % and ~45 % of the agent's threshold


@pytest.fixture(scope="module")
def agent_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("recorded-threshold")
    db = root / "agents.db"
    write_agent_threads(f"sqlite:///{db}", root / "agent-workdir", {NEAR: 12, FAR: 6})
    return db, root / "inspector-workdir"


def _cell(w: MainWindow, key: str) -> str:
    model = w.thread_model
    return model.data(model.index(model.row_of(key), COL_PRESSURE))


def _open(qtbot: Any, w: MainWindow, key: str) -> None:
    qtbot.waitUntil(lambda: w.idle and w.gauge.status is not None and w.gauge.status.thread == key
                    and w.state.thread is not None and w.state.thread.key == key, timeout=WAIT_MS)


def _click(qtbot: Any, w: MainWindow, key: str) -> None:
    view = w.thread_list
    index = w.thread_proxy.mapFromSource(w.thread_model.index(w.thread_model.row_of(key), 0))
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.visualRect(index).center())
    _open(qtbot, w, key)


def _header_and_gauge(w: MainWindow) -> tuple[str, str]:
    header = re.search(r"([\d,.]+%) of threshold", w.thread_meta.text())
    gauge = re.search(r"([\d,.]+%)", w.gauge.view.headline)  # type: ignore[union-attr]
    assert header is not None and gauge is not None, (w.thread_meta.text(), w.gauge.view)
    return header.group(1), gauge.group(1)


def test_a_row_keeps_its_pressure_when_clicked_and_agrees_with_the_header(
    qtbot: Any, window_factory: Any, agent_db: tuple[Path, Path]
) -> None:
    db, workdir = agent_db
    w = window_factory(lambda _url: open_service(str(db), workdir=workdir, summarizer=ExtractiveSummarizer(), policies=None))
    assert run(qtbot, w, w.open_database(str(db), select=FAR), timeout=WAIT_MS)
    _open(qtbot, w, FAR)
    unselected = _cell(w, NEAR)  # the figure the agent's process stored, before anyone clicks it
    assert float(unselected.rstrip("%")) >= 85.0, unselected  # the agent compacts soon: what support staff must see
    far = _cell(w, FAR)
    assert _header_and_gauge(w) == (far, far)

    _click(qtbot, w, NEAR)
    assert _cell(w, NEAR) == unselected  # clicked: the same number
    assert _header_and_gauge(w) == (unselected, unselected)  # and the header's and the gauge's
    meta = w.thread_meta.text()
    assert f"{unselected} of threshold {AGENT_THRESHOLD:,} (recorded)" in meta, meta  # what it is measured against
    assert "window not recorded" in meta and "128,000" not in meta, meta  # no assumed window beside it
    assert "recorded with the thread's last model request" in w.thread_meta.toolTip()
    assert f"/ {AGENT_THRESHOLD:,} tokens" in w.thread_model.data(
        w.thread_model.index(w.thread_model.row_of(NEAR), COL_PRESSURE), Qt.ItemDataRole.ToolTipRole)
    assert _cell(w, FAR) == far  # the row left keeps its number too

    _click(qtbot, w, FAR)
    assert _cell(w, NEAR) == unselected and _cell(w, FAR) == far
    svc = open_service(str(db), workdir=workdir, policies=None)
    try:  # what the inspector wrote back is the same figure: a restart shows it again
        stored = {t.key: t for t in svc.threads.page(ThreadQuery()).threads}
    finally:
        svc.close()
    assert {k: t.threshold for k, t in stored.items()} == {NEAR: AGENT_THRESHOLD, FAR: AGENT_THRESHOLD}
