"""Compaction → What if…: the settings form, the run off the GUI thread with its progress and
Cancel, the comparison table, the sweep (table and chart), and errors shown in the dialog.

The settings, sweep values, rows and the progress throttle are plain Python; the models are read
without a view; the dialog runs in the window over the fake service (``whatif_delay`` makes a run
slow enough to watch its progress and cancel it)."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt

from engine.core.errors import EngineError
from engine.whatif import WhatIfComparison, WhatIfRun, WhatIfSweep
from inspector_app.main_window import MainWindow
from inspector_app.widgets.whatif import (
    MAX_SWEEP,
    ComparisonModel,
    ProgressRelay,
    SettingsError,
    SweepModel,
    WhatIfDialog,
    build_settings,
    comparison_rows,
    metric_change,
    settings_text,
    summarizer_setting,
    sweep_rows,
    sweep_values,
)
from tests.gui.fake_service import FakeService
from tests.gui.shoot_issue14 import INCIDENT, Incident, incident  # noqa: F401 (incident: the fixture)

pytestmark = pytest.mark.gui


def whatif_run(label: str = "candidate", **kw: Any) -> WhatIfRun:
    figures = dict(requests=40, compactions=2, summarizer_calls=2, peak_pressure=0.91, mean_pressure=0.52, prompt_tokens=1_200_000,
                   steps_over_window=0, specifics_dropped=7, request_kept=True, duration_ms=12.0)  # fmt: skip
    figures.update(kw)
    return WhatIfRun(label, {}, **figures)  # type: ignore[arg-type]


# -- settings (Qt-free) ----------------------------------------------------------------------------


def test_the_summarizer_setting_is_extractive_or_an_openai_endpoint() -> None:
    assert summarizer_setting("extractive") == "extractive"
    assert summarizer_setting("openai", " http://127.0.0.1:8000/v1/ ", " qwen2.5 ") == "openai:http://127.0.0.1:8000/v1#qwen2.5"
    with pytest.raises(SettingsError, match="http:// or https:// URL"):
        summarizer_setting("openai", "localhost:8000", "m")
    with pytest.raises(SettingsError, match="needs a model name"):
        summarizer_setting("openai", "https://api.example.com/v1", "  ")
    with pytest.raises(SettingsError, match="must not contain '#'"):
        summarizer_setting("openai", "https://api.example.com/v1#x", "m")


def test_settings_are_rounded_and_checked_against_their_range() -> None:
    assert build_settings({"threshold_ratio": 0.600000001, "tool_result_limit": 1500.0}, "extractive") == {
        "threshold_ratio": 0.6, "tool_result_limit": 1500, "summarizer": "extractive",
    }  # fmt: skip
    assert isinstance(build_settings({"context_window": 64000.0})["context_window"], int)
    with pytest.raises(SettingsError, match=r"Threshold \(share of the window\) must be between 0.05 and 1, not 1.2"):
        build_settings({"threshold_ratio": 1.2})
    with pytest.raises(SettingsError, match="unknown setting 'temperature'"):
        build_settings({"temperature": 0.2})
    assert settings_text({"threshold_ratio": 0.6, "retained_tail_ratio": 0.1, "summarizer": "extractive"}) == (
        "threshold 0.6 · retained tail 0.1 · summarizer extractive"
    )


def test_sweep_values_include_the_end_and_are_bounded() -> None:
    assert sweep_values("threshold_ratio", 0.5, 0.95, 0.05) == (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
    assert sweep_values("context_window", 32_000, 128_000, 32_000) == (32_000, 64_000, 96_000, 128_000)
    assert sweep_values("threshold_ratio", 0.5, 0.72, 0.1) == (0.5, 0.6, 0.7)  # the end when it falls on a step
    with pytest.raises(SettingsError, match="greater than 0"):
        sweep_values("threshold_ratio", 0.5, 0.9, 0)
    with pytest.raises(SettingsError, match="below 'from'"):
        sweep_values("threshold_ratio", 0.9, 0.5, 0.1)
    with pytest.raises(SettingsError, match=f"at most {MAX_SWEEP}"):
        sweep_values("threshold_ratio", 0.05, 1.0, 0.01)
    with pytest.raises(SettingsError, match="at least two values"):
        sweep_values("threshold_ratio", 0.5, 0.5, 0.1)
    with pytest.raises(SettingsError, match="must be between"):
        sweep_values("retained_tail", 0.3, 0.7, 0.2)


# -- rows and models (Qt-free rows; models without a view) -----------------------------------------


def test_comparison_rows_say_the_change_and_whether_it_is_better() -> None:
    comparison = WhatIfComparison("t", whatif_run("recorded", specifics_dropped=None), whatif_run(compactions=5, peak_pressure=0.7, prompt_tokens=900_000, request_kept=False))
    rows = {r.label: r for r in comparison_rows(comparison)}
    assert list(rows) == ["Requests replayed", "Compactions", "Summarizer calls", "Peak pressure", "Mean pressure",
                          "Prompt tokens over the session", "Steps over the window", "Specifics dropped", "Current request kept"]  # fmt: skip
    assert (rows["Compactions"].recorded, rows["Compactions"].candidate, rows["Compactions"].change, rows["Compactions"].tone) == ("2", "5", "+3", "worse")
    assert (rows["Peak pressure"].recorded, rows["Peak pressure"].candidate, rows["Peak pressure"].change, rows["Peak pressure"].tone) == ("91.0%", "70.0%", "−21.0 pt", "better")
    assert rows["Prompt tokens over the session"].change == "−300,000 (−25.0%)"
    assert rows["Mean pressure"].change == "same" and rows["Mean pressure"].tone == "same"
    assert (rows["Specifics dropped"].recorded, rows["Specifics dropped"].change, rows["Specifics dropped"].tone) == ("not known", "", None)
    assert (rows["Current request kept"].candidate, rows["Current request kept"].change, rows["Current request kept"].tone) == ("no", "lost now", "worse")
    assert metric_change("count", "x", 3) == ("", None)  # an unreadable figure: no change claimed


def test_the_models_show_the_rows(qapp: Any) -> None:
    comparison = WhatIfComparison("t", whatif_run("recorded"), whatif_run(compactions=1))
    model = ComparisonModel()
    model.set_rows(comparison_rows(comparison))
    assert [model.headerData(c, Qt.Orientation.Horizontal) for c in range(4)] == ["", "Recorded", "Candidate", "Change"]
    assert [model.index(1, c).data() for c in range(4)] == ["Compactions", "2", "1", "−1"]
    assert model.index(1, 3).data(Qt.ItemDataRole.ForegroundRole) is not None and model.index(0, 3).data(Qt.ItemDataRole.ForegroundRole) is None

    sweep = WhatIfSweep("t", "threshold_ratio", (0.6, 0.8), (whatif_run(compactions=4), whatif_run(compactions=2)), whatif_run("recorded"))
    rows = sweep_rows(sweep)
    assert [r.value for r in rows] == ["recorded", "0.6", "0.8"] and rows[0].recorded
    smodel = SweepModel()
    smodel.set_rows(rows)
    assert smodel.columnCount() == 9 and smodel.headerData(0, Qt.Orientation.Horizontal) == "Value"
    assert [smodel.index(1, c).data() for c in range(3)] == ["0.6", "4", "2"]
    assert smodel.index(0, 0).data(Qt.ItemDataRole.FontRole).italic()


def test_progress_is_passed_on_at_most_every_interval_and_always_at_the_end() -> None:
    now = [0.0]
    posted: list[tuple[int, int]] = []
    relay = ProgressRelay(lambda d, t: posted.append((d, t)), interval=0.05, clock=lambda: now[0])
    for done in range(1, 101):
        now[0] += 0.001  # 1 ms per request
        relay(done, 100)
    assert posted[0] == (1, 100) and posted[-1] == (100, 100)
    assert 2 <= len(posted) <= 4


# -- the dialog in the window ----------------------------------------------------------------------


def open_dialog(qtbot: Any, w: MainWindow, key: str = "acme-vat") -> WhatIfDialog:
    if w.state.thread is None or w.state.thread.key != key:
        task = w.spawn(w.select_thread(key), "test")
        qtbot.waitUntil(lambda: task.done() and w.idle, timeout=5000)
    w.whatif_action.trigger()  # Compaction → What if…
    dialog = w.compaction.whatif_dialog
    assert isinstance(dialog, WhatIfDialog) and dialog.isVisible()
    return dialog


def finish(qtbot: Any, w: MainWindow, dialog: WhatIfDialog, timeout: int = 10_000) -> list[str]:
    outcomes: list[str] = []
    dialog.finishedRun.connect(outcomes.append)
    dialog.run_button.click()
    qtbot.waitUntil(lambda: bool(outcomes) and not dialog.running and w.idle, timeout=timeout)
    return outcomes


def test_the_compaction_menu_follows_the_compact_button(qtbot: Any, window: MainWindow) -> None:
    w = window
    assert w.compaction_menu.actions()[:2] == [w.compact_action, w.whatif_action]  # then the thread's policy and revert (issue 23)
    assert w.compact_action.isEnabled() and w.compact_button.isEnabled()
    w.compact_action.trigger()
    assert w.confirm.isVisible()  # the same non-blocking question as the button
    task = w.spawn(w.select_thread("beta-running"), "test")
    qtbot.waitUntil(lambda: task.done() and w.idle, timeout=5000)
    assert not w.compact_action.isEnabled() and w.compact_action.toolTip() == w.compact_button.toolTip()
    assert "running" in w.compact_action.toolTip()
    assert w.whatif_action.isEnabled()  # a what-if only reads: a running thread can be asked


def test_the_menu_and_the_header_button_open_the_dialog_for_the_open_thread(qtbot: Any, window: MainWindow) -> None:
    w = window
    assert w.whatif_action in w.compaction_menu.actions() and w.whatif_action.isEnabled() and w.whatif_button.isEnabled()
    dialog = open_dialog(qtbot, w)
    assert dialog.key == "acme-vat" and "ACME VAT correction" in dialog.thread_label.text()
    status = w.state.status
    assert status is not None
    assert dialog.spins["context_window"].value() == status.context_window  # the form starts from the thread's window and threshold
    assert dialog.spins["threshold_ratio"].value() == round(status.threshold / status.context_window, 2)
    assert not any(c.isChecked() for c in dialog.checks.values()) and not dialog.spins["threshold_ratio"].isEnabled()
    dialog.close()
    w.whatif_button.click()
    assert w.compaction.whatif_dialog is dialog and dialog.isVisible()  # the same dialog, shown again
    task = w.spawn(w.select_thread("omega-long"), "test")
    qtbot.waitUntil(lambda: task.done() and w.idle, timeout=5000)
    w.whatif_action.trigger()
    assert dialog.key == "omega-long" and "Omega long thread" in dialog.thread_label.text()


def test_a_run_compares_recorded_and_candidate(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    dialog = open_dialog(qtbot, w)
    dialog.checks["threshold_ratio"].setChecked(True)
    dialog.spins["threshold_ratio"].setValue(0.1)
    dialog.checks["retained_tail"].setChecked(True)
    dialog.spins["retained_tail"].setValue(0.05)
    assert finish(qtbot, w, dialog) == ["done"]
    assert [a for n, a in fake.calls if n == "whatif"] == [("acme-vat", {"threshold_ratio": 0.1, "retained_tail": 0.05, "summarizer": "extractive"})]
    rows = {r.label: r for r in dialog.comparison_model.rows()}
    assert dialog.comparison is not None
    assert rows["Compactions"].recorded == str(dialog.comparison.recorded.compactions)
    assert rows["Compactions"].candidate == str(dialog.comparison.candidate.compactions)
    assert rows["Peak pressure"].candidate == f"{dialog.comparison.candidate.peak_pressure * 100:.1f}%"
    assert dialog.results.currentWidget() is dialog.comparison_view and dialog.comparison_view.model().rowCount() == 9
    assert dialog.status.text().startswith("Done in") and "the database was not written" in dialog.status.text()
    assert dialog.progress.value() == dialog.progress.maximum()
    assert "threshold 0.1" in dialog.result_note.text()
    assert not dialog.error.isVisible() and not w.banner.isVisible()
    assert dialog.run_button.isEnabled() and not dialog.cancel_button.isEnabled()


def test_progress_shows_while_running_and_cancel_stops_the_run(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    fake.whatif_delay = 0.01  # 400 requests: four seconds unless cancelled
    dialog = open_dialog(qtbot, w, "omega-long")
    outcomes: list[str] = []
    dialog.finishedRun.connect(outcomes.append)
    dialog.run_button.click()
    qtbot.waitUntil(dialog.cancel_button.isEnabled, timeout=3000)
    assert dialog.running and not dialog.run_button.isEnabled()
    assert not dialog.checks["threshold_ratio"].isEnabled()  # the form is locked while it runs
    qtbot.waitUntil(lambda: dialog.progress.maximum() == 400 and dialog.progress.value() > 0, timeout=5000)
    assert dialog.status.text().startswith("Replaying…") and "of 400 requests" in dialog.status.text()
    started = dialog.progress.value()
    dialog.cancel_button.click()
    assert dialog.status.text() == "Cancelling…"
    qtbot.waitUntil(lambda: outcomes == ["cancelled"] and w.idle, timeout=3000)
    assert dialog.status.text() == "Cancelled: nothing was kept (the database was not written)"
    assert dialog.progress.value() < 400 and started < 400
    assert dialog.comparison is None and dialog.comparison_model.rowCount() == 0
    assert not dialog.error.isVisible() and not w.banner.isVisible()
    assert dialog.run_button.isEnabled() and dialog.checks["threshold_ratio"].isEnabled()


def test_closing_the_dialog_stops_a_running_what_if(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    fake.whatif_delay = 0.01
    dialog = open_dialog(qtbot, w, "omega-long")
    dialog.run_button.click()
    qtbot.waitUntil(lambda: dialog.progress.value() > 0, timeout=5000)
    dialog.close()
    qtbot.waitUntil(lambda: w.idle, timeout=3000)
    assert not dialog.running and dialog._stop.is_set()
    assert not w.banner.isVisible()  # a cancelled task is silent
    w.whatif_action.trigger()  # opened again: ready to run
    assert dialog.run_button.isEnabled() and not dialog.cancel_button.isEnabled()


def test_a_bad_setting_is_shown_in_the_dialog_and_nothing_runs(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    dialog = open_dialog(qtbot, w)
    dialog.summarizer.setCurrentIndex(dialog.summarizer.findData("openai"))
    assert dialog._endpoint_box.isEnabled()
    dialog.endpoint.setText("ftp://models.example.com")
    dialog.model_name.setText("m")
    assert finish(qtbot, w, dialog) == ["invalid"]
    assert dialog.error.isVisible() and dialog.error.text().startswith("Endpoint URL must be an http:// or https:// URL")
    assert fake.called("whatif") == 0 and not w.banner.isVisible()


def test_an_engine_error_is_shown_in_the_dialog_without_a_traceback(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window

    def unreachable(key: str, settings: Any, *, progress: Any = None, should_stop: Any = None) -> Any:
        raise EngineError("summarizer at http://127.0.0.1:9/v1 unreachable: connection refused", code="summarizer_unavailable")

    fake.whatif = unreachable  # type: ignore[method-assign]
    dialog = open_dialog(qtbot, w)
    dialog.summarizer.setCurrentIndex(dialog.summarizer.findData("openai"))
    dialog.endpoint.setText("http://127.0.0.1:9/v1")
    dialog.model_name.setText("tiny")
    assert finish(qtbot, w, dialog) == ["failed"]
    assert dialog.error.text() == "summarizer_unavailable: summarizer at http://127.0.0.1:9/v1 unreachable: connection refused"
    assert "Traceback" not in dialog.error.text() and dialog.status.text() == "The run failed: nothing was kept"
    assert not w.banner.isVisible() and dialog.run_button.isEnabled()

    fake.whatif = lambda *a, **k: (_ for _ in ()).throw(ValueError("bad shape"))  # type: ignore[method-assign]
    assert finish(qtbot, w, dialog) == ["failed"]
    assert dialog.error.text().startswith("unreadable_data: ")


def test_a_sweep_shows_a_table_and_a_chart_and_is_deterministic(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    dialog = open_dialog(qtbot, w)
    dialog.sweep_mode.setChecked(True)
    assert dialog._sweep_box.isEnabled()
    dialog.sweep_param.setCurrentIndex(dialog.sweep_param.findData("threshold_ratio"))
    dialog.sweep_from.setValue(0.1)
    dialog.sweep_to.setValue(0.5)
    dialog.sweep_step.setValue(0.1)
    assert finish(qtbot, w, dialog) == ["done"]
    assert [a for n, a in fake.calls if n == "whatif_sweep"] == [("acme-vat", "threshold_ratio", (0.1, 0.2, 0.3, 0.4, 0.5))]
    sweep = dialog.sweep
    assert sweep is not None and len(sweep.runs) == 5
    assert dialog.results.currentWidget() is dialog._sweep_page
    rows = dialog.sweep_model.rows()
    assert [r.value for r in rows] == ["recorded", "0.1", "0.2", "0.3", "0.4", "0.5"]
    peaks, means, compactions = dialog.chart.series()
    assert peaks == [r.peak_pressure for r in sweep.runs] and compactions == [r.compactions for r in sweep.runs]
    assert compactions[0] >= compactions[-1]  # a lower threshold compacts at least as often
    dialog.chart.grab()  # paints
    first = [(r.value, r.cells) for r in rows]
    assert finish(qtbot, w, dialog) == ["done"]
    assert [(r.value, r.cells) for r in dialog.sweep_model.rows()] == first  # the same figures again

    dialog.sweep_to.setValue(0.05)  # below from: said in the dialog
    assert finish(qtbot, w, dialog) == ["invalid"]
    assert "below 'from'" in dialog.error.text()


# -- the real service ----------------------------------------------------------------------------


def _stored(incident: Incident) -> tuple[Any, ...]:
    """What the database holds of the incident thread, read on a connection of its own."""
    svc = incident.open()
    try:
        return (
            [t.key for t in svc.reads.list_threads()], svc.reads.message_count(INCIDENT), [h.id for h in svc.reads.history(INCIDENT)],
            [(e.id, e.kind) for e in svc.reads.events(INCIDENT, limit=10_000)], svc.reads.compaction_state(INCIDENT), svc.reads.thread(INCIDENT).generation,
        )  # fmt: skip
    finally:
        svc.close()


def _real_window(qtbot: Any, window_factory: Any, incident: Incident) -> MainWindow:
    w = window_factory(lambda _url: incident.open())
    assert run_task(qtbot, w, w.open_database(incident.url, select=INCIDENT))
    qtbot.waitUntil(lambda: w.idle, timeout=20_000)
    return w


def run_task(qtbot: Any, w: MainWindow, coro: Any) -> Any:
    task = w.spawn(coro, "test")
    qtbot.waitUntil(task.done, timeout=20_000)
    return task.result()


def test_a_real_what_if_and_sweep_compare_and_never_write(qtbot: Any, window_factory: Any, incident: Incident) -> None:
    before = _stored(incident)
    w = _real_window(qtbot, window_factory, incident)
    dialog = open_dialog(qtbot, w, INCIDENT)
    assert dialog.spins["context_window"].value() == 12_000  # the stored policy's window
    dialog.checks["threshold_ratio"].setChecked(True)
    dialog.spins["threshold_ratio"].setValue(0.3)
    assert finish(qtbot, w, dialog, timeout=60_000) == ["done"], dialog.error.text()
    comparison = dialog.comparison
    assert comparison is not None and comparison.candidate.requests > 0
    rows = {r.label: r for r in dialog.comparison_model.rows()}
    assert rows["Requests replayed"].candidate == f"{comparison.candidate.requests:,}"
    assert rows["Compactions"].candidate == f"{comparison.candidate.compactions:,}"
    assert "Recorded: threshold 0.8" in dialog.result_note.text()

    dialog.sweep_mode.setChecked(True)
    dialog.sweep_param.setCurrentIndex(dialog.sweep_param.findData("threshold_ratio"))
    dialog.sweep_from.setValue(0.3)
    dialog.sweep_to.setValue(0.9)
    dialog.sweep_step.setValue(0.3)
    assert finish(qtbot, w, dialog, timeout=60_000) == ["done"], dialog.error.text()
    sweep = dialog.sweep
    assert sweep is not None and [r.value for r in dialog.sweep_model.rows()] == ["recorded", "0.3", "0.6", "0.9"]
    assert sweep.runs[0].compactions == comparison.candidate.compactions  # the same threshold, the same run
    assert sweep.runs[0].compactions >= sweep.runs[-1].compactions
    assert dialog.comparison is comparison and dialog.results.currentWidget() is dialog._sweep_page  # both results kept
    assert not w.banner.isVisible() and not dialog.error.isVisible()
    assert _stored(incident) == before


def test_cancelling_a_real_sweep_keeps_nothing(qtbot: Any, window_factory: Any, incident: Incident) -> None:
    before = _stored(incident)
    w = _real_window(qtbot, window_factory, incident)
    dialog = open_dialog(qtbot, w, INCIDENT)
    dialog.sweep_mode.setChecked(True)
    dialog.sweep_param.setCurrentIndex(dialog.sweep_param.findData("retained_tail"))
    dialog.sweep_from.setValue(0.05)
    dialog.sweep_to.setValue(0.3)
    dialog.sweep_step.setValue(0.01)  # 26 values: too many
    assert finish(qtbot, w, dialog) == ["invalid"] and f"at most {MAX_SWEEP}" in dialog.error.text()
    dialog.sweep_step.setValue(0.025)  # 11 runs
    outcomes: list[str] = []
    dialog.finishedRun.connect(outcomes.append)
    dialog.run_button.click()
    qtbot.waitUntil(lambda: dialog.progress.maximum() > 1 and dialog.progress.value() > 0, timeout=30_000)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: bool(outcomes) and w.idle, timeout=30_000)
    assert outcomes == ["cancelled"] and dialog.status.text().startswith("Cancelled")
    assert dialog.sweep is None and not dialog.error.isVisible() and not w.banner.isVisible()
    assert _stored(incident) == before


def test_a_real_what_if_with_an_openai_compatible_endpoint_and_one_that_is_down(qtbot: Any, window_factory: Any, incident: Incident) -> None:
    """The form's endpoint URL and model reach the engine's summarizer: the loopback simulator
    answers every summary call; once it is closed the run stops with the engine's words in the
    dialog (no banner, no traceback)."""
    from engine.apps.harness.simulator import ProviderSimulator, Reply

    before = _stored(incident)
    w = _real_window(qtbot, window_factory, incident)
    dialog = open_dialog(qtbot, w, INCIDENT)
    dialog.checks["threshold_ratio"].setChecked(True)
    dialog.spins["threshold_ratio"].setValue(0.3)
    dialog.summarizer.setCurrentIndex(dialog.summarizer.findData("openai"))
    summary = "Rollout of v2.14.3 stuck: pods OOMKilled at the 512 MiB limit; commit 9c41e07 doubled the worker pool."
    with ProviderSimulator(context_window=1_000_000, fallback=Reply(content=summary)) as sim:
        dialog.endpoint.setText(sim.base_url)
        dialog.model_name.setText("sim-model")
        assert finish(qtbot, w, dialog, timeout=60_000) == ["done"], dialog.error.text()
        sent = sim.requests
        url = sim.base_url
    assert dialog.comparison is not None
    assert dialog.comparison.candidate.summarizer_calls == len(sent) > 0
    assert all(r.path.endswith("/chat/completions") for r in sent)
    assert f"summarizer openai:{url.rstrip('/')}#sim-model" in dialog.result_note.text()

    assert finish(qtbot, w, dialog, timeout=60_000) == ["failed"]  # the simulator is closed: nothing listens there
    assert dialog.error.text().startswith("whatif_summarizer_failed: ") and "nothing was kept" in dialog.error.text()
    assert "Traceback" not in dialog.error.text() and not w.banner.isVisible()
    assert dialog.comparison is not None  # the previous result stays
    assert _stored(incident) == before
