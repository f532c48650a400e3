"""Replay of every request (issue #14): the requests list and its cursor without views, the
envelope shown for a request, the steps of an overflow recovery in place among the requests, the
pressure chart's click that opens a request, and the stale surface of the previous thread."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QApplication

from engine.core.errors import EngineError
from engine.core.messages import META_PRUNED, system, user
from inspector_app.main_window import MainWindow
from inspector_app.panels.replay.model import EnvelopeRole, RequestsModel, RowKindRole, breakdown_text, envelope_surface, request_rows
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService

# -- models, without views ----------------------------------------------------------------------


def test_request_rows_take_the_pressure_points_and_put_recoveries_last_without_their_run(fake: FakeService) -> None:
    points = fake.pressure_history("acme-vat")
    episodes = fake.replay("acme-vat")
    rows = request_rows(len(points), points, episodes)
    requests = [r for r in rows if r.replay_step is None]
    assert [r.index for r in requests] == list(range(5)) and [r.point for r in requests] == points
    steps = [r for r in rows if r.replay_step is not None]
    assert len(steps) == sum(len(e.steps) for e in episodes) == 7
    assert rows[5:] == steps  # runs 7 and 9 have no recorded request here: their steps go last, in order
    assert [r.compaction for r in requests] == [None, None, "summary", None, None]
    # points that are not one per request are not used (the rows are numbered only)
    assert all(r.point is None for r in request_rows(5, points[:3]))


def test_a_recovery_goes_right_before_the_request_its_run_retried(fake: FakeService) -> None:
    from dataclasses import replace

    points = fake.pressure_history("acme-vat")
    retried = replace(points[3], compaction="overflow")
    points = [*points[:3], retried, points[4]]
    episode, gave_up = fake.replay("acme-vat")
    rows = request_rows(5, points, [replace(episode, run_id=retried.run_id), replace(gave_up, run_id=points[4].run_id)])
    at = next(i for i, r in enumerate(rows) if r.point is retried)
    assert [r.replay_step for r in rows[at - len(episode.steps) : at]] == list(episode.steps)
    # the run that gave up retried nothing: its steps follow its last request
    last = next(i for i, r in enumerate(rows) if r.point is points[4])
    assert [r.replay_step for r in rows[last + 1 :]] == list(gave_up.steps)


def test_requests_model_cursor_steps_clamps_and_finds_requests(qapp: QApplication, fake: FakeService) -> None:
    envelopes = fake.request_envelopes("acme-vat")
    points = fake.pressure_history("acme-vat")
    model = RequestsModel()
    moves: list[int] = []
    model.currentChanged.connect(moves.append)
    model.set_requests(len(envelopes), points)
    assert model.rowCount() == len(envelopes) == model.request_count == 5
    assert model.row_index == 4 and moves == [4]  # opens on the newest request
    assert not model.can_forward() and model.can_back()
    model.forward()
    assert model.row_index == 4  # clamped
    model.go(-3)
    assert model.row_index == 0 and not model.can_back()
    first = model.index(0)
    assert first.data(RowKindRole) == "request" and first.data(EnvelopeRole) is None  # not built yet
    assert first.data() == f"Request 1 of 5 · {points[0].tokens:,} tok"
    model.set_envelope(envelopes[0])
    assert first.data(EnvelopeRole) == envelopes[0] and first.data() == f"Request 1 of 5 · {points[0].tokens:,} tok"  # the recorded size, as the chart's
    assert moves[-1] == 0  # the current row's envelope arrived: shown again
    model.set_envelope(envelopes[4])
    assert model.index(2).data() == f"Request 3 of 5 · {points[2].tokens:,} tok · after summary"  # the request right after the summary
    assert all(model.index(r).data(Qt.ItemDataRole.DecorationRole) is not None for r in range(5))
    unnumbered = RequestsModel()
    unnumbered.set_requests(5)  # no pressure points: the built envelope's size
    unnumbered.set_envelope(envelopes[3])
    assert unnumbered.index(3).data() == f"Request 4 of 5 · {envelopes[3].tokens:,} tok" and unnumbered.index(2).data() == "Request 3 of 5"
    assert model.row_of_request_id(points[3].request_id) == 3 and model.row_of_request_id(999) == -1
    model.set_requests(5, points, select=1, envelopes=model.envelopes())
    assert model.row_index == 1 and model.current_envelope() is None and model.envelope(4) == envelopes[4]
    model.clear()
    assert model.rowCount() == 0 and model.current() is None and moves[-1] == -1


def test_the_envelope_surface_is_summary_messages_then_notes(fake: FakeService) -> None:
    t = fake.threads["beta-running"]
    t.ephemeral = (system("Budget: 2 tool calls left in this run."),)
    last = fake.request_envelopes("beta-running")[-1]
    assert last.ephemeral and last.ephemeral[0].is_ephemeral
    surface = envelope_surface(last)
    assert surface[-1].is_ephemeral and surface.count(surface[-1]) == 1  # listed once, last
    compacted = fake.request_envelopes("acme-vat")[4]
    surface = envelope_surface(compacted)
    assert surface[0].metadata.get("summary") and compacted.summary in surface[0].content
    assert [m.id for m in surface if m.metadata.get(META_PRUNED)] == list(compacted.pruned_ids) == [7]
    assert breakdown_text({"system": 10, "tools": 0, "user": 1_200, "extra": 3}) == "system 10 · user 1,200 · extra 3"


# -- the window -----------------------------------------------------------------------------------


def _requests_page(qtbot: Any, w: MainWindow) -> Any:
    w.show_tab("replay")
    panel = w.replay
    panel.show_page("requests")
    qtbot.waitUntil(lambda: panel.requests_state == "loaded" and w.idle, timeout=5000)
    return panel


def _built(qtbot: Any, w: MainWindow) -> None:
    """Wait until the current request's envelope is shown (it is rebuilt on a worker)."""
    qtbot.waitUntil(lambda: w.replay.requests_model.current_envelope() is not None and w.idle, timeout=5000)


def test_requests_are_read_only_when_the_page_is_shown(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    assert fake.called("request_envelopes") == 0  # the detail tab is shown: nothing rebuilt yet
    panel = _requests_page(qtbot, window)
    assert fake.called("request_envelopes") == 1
    qtbot.waitUntil(lambda: panel.requests_model.current_envelope() is not None, timeout=5000)
    assert fake.built == [4] and not any(name == "MainThread" for name in fake.built_on)  # only the shown one, on a worker
    envelopes = fake.request_envelopes("acme-vat")
    assert panel.requests_model.request_count == len(envelopes)
    assert panel.requests_status.text() == "5 requests, oldest first"
    # the newest request is shown: its facts and the envelope the model received
    last = envelopes[-1]
    assert panel.request_title.text().startswith("Request 5 of 5")
    assert panel.request_facts["tokens"].text().startswith(f"{last.tokens:,} (")
    assert panel.request_facts["generation"].text() == f"1 · boundary after #{last.boundary}"
    assert panel.request_facts["summary"].text() == f"{last.breakdown['summary']} tokens · {last.summary}"
    assert panel.request_facts["previews"].text().startswith("1 pruned result shown as previews: #7")
    rows = [panel.request_surface_model.index(r).data() for r in range(panel.request_surface_model.rowCount())]
    assert rows[0].startswith("[summary] ") and sum(r.startswith("[preview] ") for r in rows) == 1
    assert len(rows) == len(envelope_surface(last))
    # the arrow keys move the cursor
    panel.requests.setFocus()
    qtbot.keyClick(panel.requests, Qt.Key.Key_Up)
    assert panel.request_title.text().startswith("Request 4 of 5")
    assert panel.request_surface_title.text() == "Rebuilding the envelope the model received …"
    qtbot.keyClick(panel.requests, Qt.Key.Key_Down)
    assert panel.request_title.text().startswith("Request 5 of 5")
    _built(qtbot, window)
    # back steps to the request before
    qtbot.mouseClick(panel.request_back, Qt.MouseButton.LeftButton)
    assert panel.request_title.text().startswith("Request 4 of 5")
    qtbot.waitUntil(lambda: panel.requests_model.current_envelope() is not None, timeout=5000)
    assert fake.built.count(3) == 1  # built once (when the arrow key went there), then kept
    assert panel.request_facts["previews"].text() == "none"  # the big result is still in its own turn: in full
    reads = fake.called("request_envelopes")
    window.show_tab("detail")
    window.show_tab("replay")
    assert fake.called("request_envelopes") == reads  # read once per view


def test_a_recovery_step_among_the_requests_shows_its_surface(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    panel = _requests_page(qtbot, w)
    _built(qtbot, w)
    model = panel.requests_model
    step_rows = [i for i, r in enumerate(model.rows()) if r.replay_step is not None]
    assert len(step_rows) == 7  # both episodes' steps are in the list
    prune = next(i for i in step_rows if model.rows()[i].replay_step.kind == "prune")
    panel.requests.clicked.emit(model.index(prune))
    assert w.idle  # a recovery step needs no worker: its surface was recorded
    assert panel.request_title.text() == "Overflow recovery · step 2 of 4: prune"
    assert panel.request_facts["tokens"].text() == "131,000 → 104,000"
    assert panel.request_surface_model.rowCount() == 8


def test_the_previous_threads_surface_does_not_stay(qtbot: Any, make_window: Any, fake: FakeService) -> None:
    """The known bug: opening a thread without episodes (or requests) left the previous thread's
    surface in the replay pane."""
    fake.add_thread("epsilon-empty", [user("Is anyone there?")], title="Epsilon: no requests yet")
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    w.show_tab("replay")
    panel = w.replay
    panel.show_page("recoveries")
    panel.forward_button.click()
    assert panel.surface_model.rowCount() > 0 and panel.kind.text().startswith("Step 2")
    panel.show_page("requests")
    qtbot.waitUntil(lambda: panel.requests_state == "loaded" and w.idle, timeout=5000)
    _built(qtbot, w)
    assert panel.request_surface_model.rowCount() > 0
    for key, requests in (("gamma-waiting", 2), ("epsilon-empty", 0)):
        run(qtbot, w, w.select_thread(key))
        qtbot.waitUntil(lambda: w.idle, timeout=5000)
        assert panel.key == key
        qtbot.waitUntil(lambda: panel.requests_state == "loaded", timeout=5000)
        if requests:
            _built(qtbot, w)
        # no episode: nothing of acme-vat's recovery stays
        assert panel.model.rowCount() == 0 and panel.surface_model.rowCount() == 0
        assert panel.kind.text() == "" and panel.surface_title.text() == "Surface the model would have seen"
        assert not panel.empty.isHidden()
        # the requests are this thread's
        assert panel.requests_model.request_count == requests
        envelopes = fake.request_envelopes(key)
        shown = [m.content for m in envelope_surface(envelopes[-1])] if envelopes else []
        rows = [panel.request_surface_model.index(r, 0).data(Qt.ItemDataRole.ToolTipRole) for r in range(panel.request_surface_model.rowCount())]
        assert rows == [c[:2000] for c in shown]
    assert panel.requests_status.text() == "No model requests recorded for this thread."
    assert panel.request_title.text() == "" and all(not label.text() for label in panel.request_facts.values())


def test_a_thread_that_cannot_be_read_leaves_no_surface_behind(qtbot: Any, window: MainWindow, fake: FakeService, monkeypatch: Any) -> None:
    w = window
    panel = _requests_page(qtbot, w)
    _built(qtbot, w)
    assert panel.request_surface_model.rowCount() > 0
    original = fake.thread

    def thread(key: str) -> Any:
        if key == "gamma-waiting":
            raise EngineError("the thread row is corrupt", code="corrupt_row")
        return original(key)

    monkeypatch.setattr(fake, "thread", thread)
    w.spawn(w.load_thread("gamma-waiting"), "test")
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert panel.key == "gamma-waiting" and w.banner.isVisible()
    assert panel.surface_model.rowCount() == 0 and panel.model.rowCount() == 0  # acme-vat's recovery is gone
    qtbot.waitUntil(lambda: panel.requests_state == "loaded", timeout=5000)  # its requests are its own (they can be read)
    _built(qtbot, w)
    gamma = envelope_surface(fake.request_envelopes("gamma-waiting")[-1])
    shown = [panel.request_surface_model.index(r).data(Qt.ItemDataRole.ToolTipRole) for r in range(panel.request_surface_model.rowCount())]
    assert shown == [m.content[:2000] for m in gamma]


def test_clicking_a_point_of_the_chart_opens_that_request(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    w.show_tab("pressure")
    chart = w.chart
    qtbot.waitUntil(lambda: chart.isVisible() and len(chart.points()) == 5, timeout=5000)
    assert fake.called("request_envelopes") == 0
    target = 2
    qtbot.mouseClick(chart, Qt.MouseButton.LeftButton, pos=chart.point_position(target).toPoint())
    panel = w.replay
    assert w.tabs.currentWidget() is panel and panel.page() == "requests"
    _built(qtbot, w)
    current = panel.requests_model.current_envelope()
    assert current is not None and current.request_id == chart.points()[target].request_id and current.index == target
    assert panel.requests.currentIndex().row() == panel.requests_model.row_of_request(target)
    assert panel.request_title.text().startswith("Request 3 of 5 · after summary")
    assert chart.selected() == target
    chart.grab()  # paints the ring without error
    # once loaded, a click selects at once; a click beside every point selects nothing
    w.show_tab("pressure")
    qtbot.mouseClick(chart, Qt.MouseButton.LeftButton, pos=chart.point_position(0).toPoint())
    assert panel.requests_model.current().index == 0 and fake.called("request_envelopes") == 1
    assert chart.point_at(QPointF(chart.point_position(0).x(), 2)) is None
    # stepping in the replay pane moves the chart's ring
    panel.request_forward.click()
    assert chart.selected() == 1


def test_requests_that_cannot_be_rebuilt_say_why_in_place(qtbot: Any, window: MainWindow, fake: FakeService, monkeypatch: Any) -> None:
    def broken(key: str) -> Any:
        raise EngineError("request 3 has no recorded messages", code="corrupt_row")

    monkeypatch.setattr(fake, "request_envelopes", broken)
    w = window
    w.show_tab("replay")
    w.replay.show_page("requests")
    qtbot.waitUntil(lambda: w.replay.requests_state == "error" and w.idle, timeout=5000)
    assert w.replay.requests_status.text() == "The requests cannot be rebuilt: request 3 has no recorded messages"
    assert w.banner.isVisible() and w.replay.requests_model.rowCount() == 0


def test_a_long_threads_requests_do_not_block_the_gui(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    """800 messages, 400 requests: the read runs on a worker, the list shows them all."""
    w = window
    run(qtbot, w, w.select_thread("omega-long"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    panel = _requests_page(qtbot, w)
    assert panel.requests_model.request_count == 400 and panel.request_title.text().startswith("Request 400 of 400")
    for _ in range(30):  # stepping fast: only what is shown gets built, the cursor never waits
        panel.request_back.click()
    assert panel.request_title.text().startswith("Request 370 of 400")
    _built(qtbot, w)
    assert panel.requests_model.current_envelope().index == 369 and len(fake.built) < 32


def test_the_app_opens_the_replay_tab_on_a_request_or_a_compaction() -> None:
    from inspector_app.app import REPLAY_PAGES, parse_args
    from inspector_app.panels.replay.widget import PAGES

    assert REPLAY_PAGES == PAGES
    args = parse_args(["--thread", "t", "--request", "3"])
    assert args.request == 3 and args.tab is None and args.compaction is None
    args = parse_args(["--compaction", "2", "--diff-window", "--replay-view", "diff"])
    assert args.compaction == 2 and args.diff_window and args.replay_view == "diff"


def test_a_hundred_thousand_requests_are_rows_made_off_the_gui_thread(qapp: QApplication) -> None:
    """The rows are plain data (:func:`request_rows` runs on a worker); the model looks a request
    up by index or recorded id without scanning."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import datetime, timezone

    from engine.core.views import PressurePoint

    n = 100_000
    at = datetime(2026, 11, 30, tzinfo=UTC)
    points = [PressurePoint(10 + i, i // 10, i % 10, 1_000 + i, 9_000, "prune" if i % 50 == 0 else None, at) for i in range(n)]
    with ThreadPoolExecutor(1) as pool:
        rows = pool.submit(request_rows, n, points).result()
    model = RequestsModel()
    model.set_requests(n, points, rows=rows)
    assert model.rowCount() == n and model.row_index == n - 1
    assert model.row_of_request_id(10 + 77_777) == 77_777 and model.row_of_request(n - 1) == n - 1
    assert model.index(50).data() == "Request 51 of 100,000 · 1,050 tok · after prune"
