"""The honest header and gauge: below, the 85% hint (only up to 100%), over the threshold, over the
window and "cannot compact: <reason>" are distinct states with their own words; an assumed window
is shown as assumed; the gauge legend fits seven-digit counts; the Checks tab shows the findings of
``engine.core.checks`` for the open thread."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from PySide6.QtGui import QFontMetrics

from engine.core.views import ManualResult, PressureStatus
from inspector_app.logic.pressure_text import (
    HINT_TEXT,
    manual_outcome,
    numbers_text,
    of_threshold_text,
    pressure_view,
    window_text,
    window_tooltip,
)
from inspector_app.main_window import MainWindow
from inspector_app.panels.pressure.widget import CATEGORIES, legend_layout
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService

pytestmark = pytest.mark.gui


def status(tokens: int, *, threshold: int = 100_000, window: int = 128_000, source: str | None = "catalog", detail: str | None = None) -> PressureStatus:
    return PressureStatus("t", tokens, threshold, window, {}, None, 0, 0, None, window_source=source, window_detail=detail)


# -- the words, without Qt ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "state"),
    [(10_000, "below"), (84_999, "below"), (85_000, "hint"), (99_999, "hint"), (100_000, "over_threshold"), (128_000, "over_threshold"), (128_001, "over_window"), (487_000, "over_window")],
)
def test_each_pressure_has_one_state(tokens: int, state: str) -> None:
    view = pressure_view(status(tokens))
    assert view.state == state
    assert (view.text == HINT_TEXT) is (state == "hint"), "the 85% hint text only between 85% and 100%"
    assert view.shown is (state != "below")


def test_the_states_say_different_things() -> None:
    over = pressure_view(status(110_000))
    assert over.text.startswith("Over the threshold (110.0%)") and "next model step compacts first" in over.text
    window = pressure_view(status(487_000))
    assert "Over the context window: 487,000 tokens, the window holds 128,000" in window.text and window.headline == "Over the window · 487.0% of threshold"
    blocked = pressure_view(status(487_000), "nothing to compact (insufficient_history)")
    assert blocked.state == "cannot_compact" and blocked.text == "Over the context window (487.0% of the threshold) · cannot compact: nothing to compact (insufficient_history)"
    assert pressure_view(status(50_000), "nothing to compact").state == "below", "a reason alone is not a state: only over the threshold"
    assert pressure_view(status(1_439_000, threshold=1000, window=10**7)).headline == "Over the threshold · 143,900%"
    assert over.headline == "Over the threshold · 110.0%" and blocked.headline == "Cannot compact · 487.0% of threshold"


def test_an_assumed_window_is_shown_as_assumed() -> None:
    assumed = status(1000, source="assumed", detail="gpt-9 is not in the catalogue: configured fallback window")
    assert window_text(assumed) == "window 128,000 (assumed)"
    assert "Assumed window" in window_tooltip(assumed) and "gpt-9 is not in the catalogue" in window_tooltip(assumed)
    assert window_text(status(1000, source="reported")) == "window 128,000 (reported)"
    assert window_text(status(1000, source="catalog")) == "window 128,000"


def test_a_recorded_threshold_is_named_with_its_share() -> None:
    """A thread measured against the threshold its agent recorded (window_source ``recorded``):
    the share names that threshold, the window says it was not recorded (no assumed 128,000 beside
    it), or the window the request recorded; a policy's threshold keeps the short words."""
    s = status(11_378, threshold=12_800, window=0, source="recorded", detail="threshold 12,800 recorded with the thread's last model request")
    assert of_threshold_text(s) == "88.8% of threshold 12,800 (recorded)"
    assert window_text(s) == "window not recorded"
    assert numbers_text(s) == "11,378 / 12,800 tokens · window not recorded"
    assert pressure_view(s).state == "hint" and pressure_view(s).headline == "88.8% of threshold"
    assert window_tooltip(s).startswith("Threshold recorded by the agent") and "12,800 recorded" in window_tooltip(s)
    assert window_text(replace(s, context_window=16_000)) == "window 16,000 (recorded)"
    assert pressure_view(replace(s, tokens=16_001, context_window=16_000)).state == "over_window"
    assert of_threshold_text(status(50_000)) == "50.0% of threshold"


def test_a_manual_compaction_that_stays_over_says_why() -> None:
    assert manual_outcome("completed", None, False, None) is None
    assert manual_outcome("no_op", "insufficient_history", False, None) == "nothing to compact (insufficient_history)"
    long = "138,013 tokens, threshold 102,400: nothing before the retained tail can be summarized (138,010 tokens kept verbatim; " + "x" * 200 + ")"
    why = manual_outcome("no_op", "insufficient_history", True, long)
    assert why == f"nothing to compact (insufficient_history): {long}"
    view = pressure_view(status(138_013, threshold=102_400), why)
    assert view.text.endswith("cannot compact: nothing to compact (insufficient_history): 138,013 tokens, threshold 102,400: nothing before the retained tail can be summarized (…)")
    assert view.reason == why
    assert manual_outcome("completed", None, True, "the retained tail alone is 120,000 tokens") == "still over the threshold after compacting (the retained tail alone is 120,000 tokens)"


def test_the_legend_takes_fewer_columns_rather_than_cut_a_count() -> None:
    advance = lambda text: 7.0 * len(text)  # noqa: E731 - a fixed-width font of 7 px per character
    texts = [f"tool results  {1_523_456:,}"] + ["user  12"] * 5
    cols, rects = legend_layout(texts, 400, advance)
    assert cols == 2 and all(advance(t) <= r.width() for t, r in zip(texts, rects))
    assert legend_layout(["a  1"] * 6, 400, advance)[0] == 3 and legend_layout(texts, 200, advance)[0] == 1


# -- the window ----------------------------------------------------------------------------------


def load(qtbot: Any, w: MainWindow, key: str = "acme-vat") -> None:
    run(qtbot, w, w.load_thread(key))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)


def test_the_header_states_in_the_window(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    t = fake.threads["acme-vat"]
    seen = {}
    for tokens in (62_000, 90_000, 110_000, 150_000):
        t.tokens = tokens
        load(qtbot, window)
        seen[tokens] = (window.hint_label.isVisible(), window.hint_label.text(), window.gauge.view.state)  # type: ignore[union-attr]
        window.gauge.grab()  # each state paints
    assert seen[62_000][0] is False and seen[62_000][2] == "below"
    assert seen[90_000] == (True, HINT_TEXT, "hint")
    assert seen[110_000][0] and seen[110_000][1].startswith("Over the threshold (110.0%)") and seen[110_000][2] == "over_threshold"
    assert seen[150_000][0] and seen[150_000][1].startswith("Over the context window: 150,000 tokens") and seen[150_000][2] == "over_window"
    assert "150.0% of threshold" in window.thread_meta.text()
    assert not window.gauge.hint_active, "no 85% hint past 100%"


def test_cannot_compact_says_why_until_the_thread_changes(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    t = fake.threads["acme-vat"]
    t.tokens = 150_000
    t.compact_result = ManualResult("completed", None, 150_000, 120_000, 6, 4, 2, 1, still_over_threshold=True, note="the retained tail alone is 120,000 tokens")
    load(qtbot, window)
    run(qtbot, window, window.compact("acme-vat"))
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
    assert window.gauge.view.state == "cannot_compact"  # type: ignore[union-attr]
    assert window.hint_label.text() == "Over the context window (150.0% of the threshold) · cannot compact: still over the threshold after compacting (the retained tail alone is 120,000 tokens)"
    assert "still over the threshold: the retained tail alone is 120,000 tokens" in window.statusBar().currentMessage()
    assert window.compact_button.toolTip().startswith("The last manual compaction could not bring this thread under its threshold: still over")
    t.compact_result = ManualResult("no_op", "insufficient_history", 150_000, 150_000, 0, 4, 2, 0)
    run(qtbot, window, window.compact("acme-vat"))
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
    assert window.hint_label.text().endswith("cannot compact: nothing to compact (insufficient_history)")
    fake.append("acme-vat", t.messages[0].message)  # the thread changed: compaction may help again
    load(qtbot, window)
    assert window.gauge.view.state == "over_window"  # type: ignore[union-attr]


def test_an_assumed_window_in_the_header_and_the_gauge(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    t = fake.threads["acme-vat"]
    t.window_source, t.window_detail = "assumed", "gpt-4o-2099 is not in the catalogue: configured fallback window"
    load(qtbot, window)
    assert "window 128,000 (assumed)" in window.thread_meta.text()
    assert "gpt-4o-2099 is not in the catalogue" in window.thread_meta.toolTip()
    assert "Assumed window" in window.gauge.toolTip()


def test_the_gauge_legend_fits_a_seven_digit_count(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    fake.threads["acme-vat"].tokens = 9_876_543  # tool results alone take seven digits
    load(qtbot, window)
    window.show_tab("pressure")
    qtbot.waitUntil(lambda: window.gauge.isVisible(), timeout=5000)
    metrics = QFontMetrics(window.gauge.font())
    texts = window.gauge.legend_texts()
    assert any(len(t.split()[-1].replace(",", "")) >= 7 for t in texts), texts
    for width in (window.gauge.width(), 360, 300):
        window.gauge.resize(width, window.gauge.height())
        _cols, rects = window.gauge.legend()
        for text, rect in zip(texts, rects):
            assert metrics.horizontalAdvance(text) <= rect.width(), (width, text, rect.width())
    assert len(texts) == len(CATEGORIES)
    window.gauge.grab()


def test_the_checks_tab_shows_the_findings_of_the_open_thread(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    findings = window.findings_model.findings()
    assert [f.check for f in findings] == ["orphan_result"]  # the support conversation's late result answers no call
    assert "answers 'c9', which is not a pending call" in findings[0].message
    assert window.tabs.tabText(4) == "Checks (1)" and "1 violation" in window.checks_note.text()
    t = fake.threads["acme-vat"]
    t.info = replace(t.info, message_count=99)  # a stored count that is wrong
    load(qtbot, window)
    assert {f.check for f in window.findings_model.findings()} == {"orphan_result", "message_count"}
    run(qtbot, window, window.select_thread("gamma-waiting"))
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
    assert window.findings_model.findings() == [] and window.tabs.tabText(4) == "Checks" and window.checks_note.text().startswith("No violations")


def test_a_long_thread_is_checked_when_its_tab_opens(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    from tests.gui.fake_service import long_conversation

    fake.add_thread("zz-long", long_conversation(2_400))
    run(qtbot, window, window.load_thread("zz-long"))
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
    reads = sum(1 for name, args in fake.calls if name == "messages_page" and args[0] == "zz-long")
    assert "run when this tab is opened" in window.checks_note.text()
    window.show_tab("checks")
    qtbot.waitUntil(lambda: window.idle and window.checks_note.text().startswith("No violations"), timeout=10_000)
    assert sum(1 for name, args in fake.calls if name == "messages_page" and args[0] == "zz-long") > reads
