"""Pressure status (the gauge and ``compaction status``): whole-envelope tokens and the hint line.

The hint line is 85% of the threshold, display only: 84.9% shows no hint, 85.0% shows it.
"""

from __future__ import annotations

import pytest

from engine.compaction.compactor import RunState
from engine.core.meter import default_meter
from engine.core.views import PressureStatus
from tests import door_ops

from .conftest import WINDOW, Counting, finished_turns, new_thread, route, running_turn, thread_state

THRESHOLD = WINDOW * 8 // 10


# -- the hint line ----------------------------------------------------------------------------------


def _status(tokens: int, threshold: int) -> PressureStatus:
    return PressureStatus("t", tokens, threshold, WINDOW, {}, None, 0, 0, None)


@pytest.mark.parametrize(("tokens", "threshold"), [(849, 1000), (8490, 10000), (5439, 6400)])
def test_hint_off_at_84_9_percent(tokens, threshold):
    assert not _status(tokens, threshold).hint


@pytest.mark.parametrize(("tokens", "threshold"), [(850, 1000), (8500, 10000), (5440, 6400), (6400, 6400)])
def test_hint_on_at_85_0_percent(tokens, threshold):
    assert _status(tokens, threshold).hint


def test_hint_through_service_status(make_service, new_key):
    probe = make_service(Counting())
    key = new_thread(probe, new_key("hint"))
    finished_turns(probe, key, 6)
    tokens = probe.compaction.status(key).tokens
    on = tokens * 20 // 17  # the largest threshold with tokens >= 85.0% of it
    off = -(-tokens * 1000 // 849)  # the smallest threshold with tokens <= 84.9% of it

    def status_with(threshold: int) -> PressureStatus:
        svc = make_service(Counting(), {"context_window": WINDOW, "default": {"threshold_tokens": threshold}})
        st = svc.compaction.status(key)
        assert st.tokens == tokens and st.threshold == threshold
        return st

    at = status_with(on)
    assert at.hint and round(at.pressure_ratio, 3) == 0.850
    assert not status_with(on + 1).hint  # one token of threshold more and it is below 85%
    below = status_with(off)
    assert not below.hint and round(below.pressure_ratio, 3) == 0.849
    assert thread_state(probe, key)["events"] == []  # the hint never triggers anything


def test_status_reports_the_whole_envelope(make_service, new_key):
    svc = make_service(Counting())
    key = new_thread(svc, new_key("status"))
    finished_turns(svc, key, 3)
    st = svc.compaction.status(key)
    assert st.tokens == sum(st.breakdown.values()) and st.threshold == THRESHOLD and st.context_window == WINDOW
    assert st.tokens == default_meter(None).measure(svc.steps.measure(key).envelope).total


def test_status_follows_busy_state_and_compaction(make_service, new_key):
    svc = make_service(Counting())
    key = new_thread(svc, new_key("status-busy"))
    finished_turns(svc, key, 23)
    running_turn(svc, key)
    route(svc, key)
    before = svc.compaction.status(key)
    assert before.tokens >= THRESHOLD and before.hint and before.breakdown["summary"] == 0
    run = svc.runs.start_run(key)
    assert (svc.compaction.status(key).busy, svc.compaction.status(key).busy_reason) == (True, "running")
    out = svc.steps.compact_for_pressure(key, RunState(run_id=run))
    after = svc.compaction.status(key)
    assert after.tokens == out.tokens_after < before.tokens and after.breakdown["summary"] > 0
    assert (after.boundary, after.generation, after.compact_count) == (svc.reads.compaction_state(key).boundary, 1, 1)
    svc.runs.finish_run(key, run)
    assert not svc.compaction.status(key).busy


def test_status_anchors_on_the_reported_prompt_tokens(make_service, new_key):
    svc = make_service(Counting())
    key = new_thread(svc, new_key("anchor"))
    finished_turns(svc, key, 3)
    assert svc.compaction.status(key).anchored_tokens is None  # nothing reported yet
    rid = door_ops.record_model_request(svc.store, key, provider="sim", model="m", estimated_tokens=1000)
    door_ops.complete_model_request(svc.store, rid, outcome="ok", reported_prompt_tokens=1100)
    st = svc.compaction.status(key)
    assert st.anchored_tokens is not None and st.anchored_tokens > st.tokens  # the provider counts 10% more


def test_status_is_kept_until_the_thread_changes(tmp_path, monkeypatch) -> None:
    """The inspector polls status: an unchanged thread is not read and measured again (no message
    is read), a new message (only it is read) or a busy change is seen at once."""
    from engine.core.messages import assistant, user
    from engine.service import open_service

    svc = open_service(str(tmp_path / "s.db"), workdir=tmp_path / "wd", create=True, policies={"context_window": 8000})
    try:
        svc.runs.create_thread("t", provider="sim", model="m")
        svc.runs.append_message("t", user("hello " * 50))
        first = svc.compaction.status("t")
        from engine.store.reads import ThreadReader  # what engine.snapshots reads through

        reads: list[int] = []  # messages read by each status (only those after the last one seen)
        for name in ("messages_after", "counted_messages_after"):  # the held read and the streamed one
            real = getattr(ThreadReader, name)
            monkeypatch.setattr(ThreadReader, name, lambda self, *a, _real=real, **kw: (lambda out: reads.append(len(out)) or out)(_real(self, *a, **kw)))
        assert svc.compaction.status("t") == first and reads == []
        run = svc.runs.start_run("t")
        assert svc.compaction.status("t").busy_reason == "running"
        reads.clear()
        assert svc.compaction.status("t").busy_reason == "running" and reads == []
        svc.runs.append_message("t", assistant("hi " * 40), run_id=run)
        later = svc.compaction.status("t")
        assert reads == [1] and later.tokens > first.tokens
    finally:
        svc.close()
