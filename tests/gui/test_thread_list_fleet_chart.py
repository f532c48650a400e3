"""Issue 26 (user trial): the fleet view's compactions-per-day chart keeps its y-axis labels and
its legend inside the chart at 1600×1000 and 1100×700, whatever the peak (100,000 threads make
thousands of compactions a day) and however many series (every kind of every source)."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtGui import QFontMetrics

from engine.core import figures
from engine.core.views import SOURCE_NAMES, DailyCompactions, FleetStats
from inspector_app.widgets.fleet import FleetWindow

pytestmark = pytest.mark.gui


def stats(peak: int, sources: list[str]) -> FleetStats:
    base = peak // (4 * len(sources))  # every series each day; day 18 reaches the peak
    per_day = []
    for d in range(30):
        day = f"2026-11-{d + 1:02d}"
        for i, source in enumerate(sources):
            for kind in ("summary", "prune"):
                big = d == 17 and i == 0 and kind == "summary"
                per_day.append(DailyCompactions(day, kind, source, peak - base * (2 * len(sources) - 1) if big else base))
    return FleetStats(threads=100_000, busy=12, bands=(), per_day=tuple(per_day), compactions=sum(p.count for p in per_day), dropped_buckets=(),
                      worst_threads=(), summarizer_calls=0, summarizer_prompt_tokens=0, summarizer_completion_tokens=0, summarizer_cost=None,
                      currency=None, tokens_saved=0, days=30, until="2026-11-30")  # fmt: skip


@pytest.mark.parametrize("size", [(1600, 1000), (1100, 700)])
@pytest.mark.parametrize("peak", [461, 23_456, 1_234_567])
def test_the_y_axis_labels_and_the_legend_stay_inside_the_chart(qtbot: Any, size: tuple[int, int], peak: int) -> None:
    window = FleetWindow()
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    window.set_stats(stats(peak, ["engine", *SOURCE_NAMES][:6]))
    qtbot.waitExposed(window)
    qtbot.wait(20)
    chart = window.daily
    assert max(chart.total(d) for d in chart.days) == peak
    fm = QFontMetrics(chart.font())
    inside = chart.rect()
    for text, rect in chart.y_labels():
        assert text in (figures.count(peak), "0")
        assert fm.horizontalAdvance(text) <= rect.width() and inside.contains(rect.toAlignedRect()), (text, rect, inside)
    plot = chart.plot_rect()
    assert plot.height() >= 60 and plot.left() >= max(fm.horizontalAdvance(t) for t, _ in chart.y_labels())
    legend = chart.legend_rects()
    assert len(legend) == len(chart.series)
    for _series, rect in legend:
        assert inside.contains(rect.toAlignedRect()), (rect, inside)
    window.close()
