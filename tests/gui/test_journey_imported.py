"""Imported sessions as their source ran them, in the real window (issue 22).

A real SQLite database with the demo's fallback window (12,000 tokens, for its own scripted
threads), a Claude Code session with four automatic compactions (about 225k tokens of history,
every recorded request under 50k) and a SWE-agent trajectory that names no model, imported as
File → Import does (through the service). Opened in the real ``MainWindow``:

- the header's pressure is what Claude Code would send next, the same figure as the chart's last
  recorded request (plus its answer) and as ``compaction status --json``; our engine's whole
  history is named beside it; no red alarm (the header once said "Over the context window:
  225,436 tokens … the provider refuses the next request");
- the title is the session's first request (never blank, never ``Compact “” now?``);
- the Events tab lists Claude Code's four compactions as Claude Code's, with trigger and tokens;
- the model-less trajectory says "Window unknown", neutral, never "Over the context window" at
  a toy window's 200 %.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from engine.apps.cli import main as cli
from engine.service import open_service
from inspector_app.logic.pressure_text import pressure_view
from inspector_app.models.threads import COL_PRESSURE
from inspector_app.panels.events.model import COL_DETAIL, COL_KIND, EventRole, SourceRole
from tests.engine.imported_sessions import FIRST_REQUEST, write_claude_code_session, write_swe_agent_trajectory
from tests.gui.conftest import run

pytestmark = pytest.mark.gui
TOY_WINDOW = 12_000  # engine/apps/demo.py's fallback window


@pytest.fixture
def sessions(tmp_path: Path) -> tuple[Path, str, str]:
    db = tmp_path / "sessions.db"
    svc = open_service(str(db), create=True, workdir=tmp_path / "workdir")
    try:
        svc.steering.set_policy({"context_window": TOY_WINDOW})
        cc = svc.imports.import_file(write_claude_code_session(tmp_path / "project"))[0].thread
        swe = svc.imports.import_file(write_swe_agent_trajectory(tmp_path / "trajectories" / "csvkit__csvkit-7.traj"))[0].thread
    finally:
        svc.close()
    return db, cc, swe


def cli_status(db: Path, key: str, capsys: Any) -> dict[str, Any]:
    capsys.readouterr()
    assert cli(["status", "--db", str(db), "--thread", key, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_imported_session_reads_as_its_source_ran_it(qtbot: Any, window_factory: Any, sessions: tuple[Path, str, str], tmp_path: Path,
                                                         capsys: Any) -> None:
    db, cc, swe = sessions
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    w.resize(1400, 900)
    assert run(qtbot, w, w.open_database(str(db)), timeout=20_000)
    qtbot.waitUntil(lambda: w.idle, timeout=20_000)

    # -- the Claude Code session with four automatic compactions
    run(qtbot, w, w.select_thread(cc), timeout=30_000)
    qtbot.waitUntil(lambda: w.idle and w.gauge.status is not None and w.gauge.status.thread == cc, timeout=30_000)
    w.grab()
    status = w.gauge.status
    data = cli_status(db, cc, capsys)
    points = w.chart.points()
    assert points and points[-1].origin == "imported"
    # one figure: the gauge, the header line, the list, the CLI and the chart's last recorded request
    assert status.tokens == data["tokens"] and status.engine_tokens == data["engine_tokens"] and status.threshold == data["threshold"]
    assert data["recorded_prompt_tokens"] == points[-1].tokens
    assert points[-1].tokens <= status.tokens <= points[-1].tokens + 100  # its last request plus that request's answer
    assert max(p.tokens for p in points) < status.threshold
    header = w.hint_label.text()
    assert w.hint_label.isVisibleTo(w) and f"{status.tokens:,}" in header and "Claude Code" in header
    assert f"our engine, whole history: {status.engine_tokens:,}" in header and status.engine_tokens > status.context_window
    assert "Over the context window" not in header and w.hint_label.property("state") == "below"
    assert pressure_view(status).tone != "danger" and "threshold" in w.gauge.view.headline
    row = w.thread_model.row_of(cc)
    assert w.thread_model.index(row, COL_PRESSURE).data() in w.gauge.view.headline  # the list says the header's figure
    # the title: the session's first request, never blank
    assert w.thread_title.text().startswith(FIRST_REQUEST[:40]) and w.state.thread.title == w.thread_title.text()
    w.compaction.ask()
    assert "“”" not in w.confirm.label.text() and FIRST_REQUEST[:40] in w.confirm.label.text()
    w.confirm.hide()
    assert status.compact_count == data["compact_count"] == 4
    # the Events tab: Claude Code's four compactions, as Claude Code's, with trigger and tokens
    model = w.events_model
    assert model.rowCount() == 4 and w.events_empty.isHidden()
    for r in range(4):
        source = model.index(r, 0).data(SourceRole)
        assert source is not None and model.index(r, 0).data(EventRole) is None
        assert model.index(r, COL_KIND).data() == "Claude Code\ncompaction\nauto"
        detail = model.index(r, COL_DETAIL).data(Qt.ItemDataRole.DisplayRole)
        assert f"{source.tokens_before:,} tok before" in detail and "summary of" in detail
        assert "recorded by Claude Code (not by our engine" in model.index(r, COL_KIND).data(Qt.ItemDataRole.ToolTipRole)
    assert "Events (4)" in [w.tabs.tabText(i) for i in range(w.tabs.count())]

    # -- the trajectory that names no model
    run(qtbot, w, w.select_thread(swe), timeout=30_000)
    qtbot.waitUntil(lambda: w.idle and w.gauge.status is not None and w.gauge.status.thread == swe, timeout=30_000)
    w.grab()
    status = w.gauge.status
    assert status.tokens > TOY_WINDOW and status.state == "window_unknown"
    header = w.hint_label.text()
    assert "Window unknown" in header and "Over" not in header and w.hint_label.property("state") == "window_unknown"
    assert "61,840 tokens sent over 12 calls" in header  # the usage the trajectory recorded
    assert w.gauge.view.tone != "danger" and "Window unknown" in w.gauge.view.headline
    assert w.thread_model.index(w.thread_model.row_of(swe), COL_PRESSURE).data() == "–"
    assert w.thread_title.text() == "Parsing a quoted CSV header drops the last column"
    assert cli_status(db, swe, capsys)["state"] == "window_unknown"
