"""A rejected manual compaction (issue 24): the cause comes with the error (``CannotCompact.detail``),
so the window reads no events to find it; who wrote the rejected summary is asked of the service
(``summarizer_info``) only to decide whether to offer the offline extractive summarizer."""

from __future__ import annotations

from typing import Any

import pytest

from engine.core.errors import CannotCompact
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService

pytestmark = pytest.mark.gui

DETAIL = "HTTP 429 from http://127.0.0.1:9/v1 after 2 attempts"


def rejected(detail: str | None = DETAIL, *, code: str = "summary_rejected") -> CannotCompact:
    exc = CannotCompact("summary rejected (summarizer_failed); nothing was changed", code=code, reason="summarizer_failed")
    if detail is not None:
        exc.explain(detail)
    return exc


def compact(qtbot: Any, window: Any) -> None:
    run(qtbot, window, window.compact(window.state.thread.key))
    qtbot.waitUntil(lambda: window.idle, timeout=5000)


def test_the_cause_comes_with_the_error_and_no_event_is_read(qtbot: Any, window: Any, fake: FakeService) -> None:
    fake.compact_error = rejected()
    fake.summarizer_name = "openai-compatible:m"
    events_before = fake.called("events")
    compact(qtbot, window)
    assert DETAIL in window.banner.text()
    assert window.statusBar().currentMessage() == "Compaction refused: nothing changed"
    assert fake.called("events") == events_before  # no paging through the thread's events for the cause
    assert fake.called("summarizer_info") == 1
    assert window.confirm.isVisible() and window.confirm.confirm_button.text() == "Compact with extractive"
    assert DETAIL in window.confirm.label.text()
    assert DETAIL in window.compact_button.toolTip() or window.compaction.blocked_reason(window.state.thread.key) == DETAIL


def test_a_rejection_by_the_extractive_summarizer_offers_nothing(qtbot: Any, window: Any, fake: FakeService) -> None:
    fake.compact_error = rejected(None)  # no cause known: the reason stands for it
    fake.summarizer_name = "extractive"
    compact(qtbot, window)
    assert window.statusBar().currentMessage() == "Compaction refused: nothing changed"
    assert not window.confirm.isVisible()
    assert window.compaction.blocked_reason(window.state.thread.key) == "summarizer_failed"


def test_other_refusals_ask_nothing_more(qtbot: Any, window: Any, fake: FakeService) -> None:
    fake.compact_error = rejected(None, code="cannot_compact")
    events_before = fake.called("events")
    compact(qtbot, window)
    assert fake.called("summarizer_info") == 0 and fake.called("events") == events_before
    assert not window.confirm.isVisible()


def test_an_extractive_retry_does_not_ask_who_writes(qtbot: Any, window: Any, fake: FakeService) -> None:
    fake.compact_error = rejected()
    run(qtbot, window, window.compaction.compact(window.state.thread.key, summarizer="extractive"))
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
    assert fake.called("summarizer_info") == 0 and not window.confirm.isVisible()
