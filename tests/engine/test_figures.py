"""engine.core.figures: the one formatter of every figure the inspector, the CLI and the export show."""

from __future__ import annotations

import pytest

from engine.core.figures import capped, count, money, percent, plural, signed, tokens, tokens_change
from engine.core.views import PressureStatus


@pytest.mark.parametrize(
    ("ratio", "text"),
    [
        (0.0, "0.0%"),
        (0.8399, "83.9%"),  # floored, never rounded up past what it is
        (0.8496, "84.9%"),  # 84.96% does not read 85% (the hint line starts at 85.0%)
        (0.85, "85.0%"),
        (850 / 1000, "85.0%"),
        (2.549, "254.9%"),
        (9.9999, "999.9%"),
        (10.0, "1,000%"),
        (12.345, "1,234%"),
        (None, "–"),
        (float("nan"), "–"),
    ],
)
def test_percent_floors_to_a_tenth(ratio: float | None, text: str) -> None:
    assert percent(ratio) == text


def test_percent_agrees_with_the_hint_rule_for_every_token_count() -> None:
    """PressureStatus.hint says 85% exactly at tokens * 1000 >= threshold * 850: the words agree."""
    for threshold in (1_000, 12_000, 102_400, 160_000, 9_999_991):
        for tokens_ in range(threshold * 85 // 100 - 3, threshold * 85 // 100 + 4):
            s = PressureStatus(thread="t", tokens=tokens_, threshold=threshold, context_window=threshold * 2, breakdown={},
                               boundary=None, generation=0, compact_count=0, busy_reason=None)
            assert (float(percent(s.pressure_ratio)[:-1]) >= 85.0) is s.hint, (tokens_, threshold, percent(s.pressure_ratio))


def test_tokens_counts_and_changes() -> None:
    assert tokens(1617) == "1,617" and tokens(None) == "unknown" and count(0) == "0"
    assert tokens_change(97_470, 22_599) == "97,470 → 22,599"
    assert tokens_change(None, 5) == "unknown → 5"
    assert signed(1200) == "+1,200" and signed(-800) == "-800" and signed(0) == "0"


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (4.839705, "$4.84"),
        (0.125, "$0.13"),  # half up, not banker's rounding
        (-0.125, "-$0.13"),
        (1234.5, "$1,234.50"),
        (0.0, "$0.00"),
        (0.004, "<$0.01"),
        (-0.0001, "-<$0.01"),
        (None, "unknown"),
    ],
)
def test_money_is_rounded_to_cents(amount: float | None, text: str) -> None:
    assert money(amount) == text


def test_money_in_another_currency_names_it() -> None:
    assert money(2.5, "EUR") == "2.50 EUR"


def test_capped_and_plural() -> None:
    assert capped(500, 658) == "first 500 of 658"
    assert capped(12, 12) == "12" and capped(3, None) == "3"
    assert capped(1000, 1200) == "first 1,000 of 1,200"
    assert plural(1, "compaction") == "1 compaction" and plural(2, "compaction") == "2 compactions"
    assert plural(1, "summary", "summaries") == "1 summary" and plural(0, "summary", "summaries") == "0 summaries"
    assert plural(1234, "specific") == "1,234 specifics"
