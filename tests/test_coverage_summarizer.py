"""What our summarizers keep beyond identifiers (issue 25): the extractive summary's facts section,
the model summarizer's prompt asking for the same facts, and the summarizer calls and identifiers
kept of an existing benchmark trace's pressure replay."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engine.messages import ToolCall, assistant, tool_result, user
from engine.summarizers.extractive import ExtractiveSummarizer
from engine.summarizers.facts import LINE_CHARS, fact_lines
from engine.summarizers.openai_compat import render_prompt
from engine.summarizers.protocol import SummaryRequest
from tests import coverage_sessions as cs

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_fact_lines_of_each_kind():
    decision = assistant("Reading more.\nWe will go with PostgreSQL 16.2 for the queue because it supports SKIP LOCKED.")
    assert fact_lines(decision) == ["We will go with PostgreSQL 16.2 for the queue because it supports SKIP LOCKED."]
    log = tool_result("c", "\n".join(["collected 3 items", "test_a PASSED", "E   ValueError: bad refund amount -3",
                                      "FAILED tests/test_refund.py::test_negative - ValueError", "1 failed, 2 passed in 0.4s"]), name="bash")
    assert fact_lines(log) == ["E ValueError: bad refund amount -3", "FAILED tests/test_refund.py::test_negative - ValueError"]
    bench = tool_result("c", "warmup done\np99 latency 88 ms, throughput 950 req/s\nworker-1 ok", name="bash")
    assert fact_lines(bench) == ["p99 latency 88 ms, throughput 950 req/s"]
    edit = assistant("Fixed src/refunds/amount.py: validate() rejects negative amounts now.",
                     ToolCall("e", "str_replace", json.dumps({"path": "src/refunds/amount.py", "old_str": "def validate(x):\n    pass", "new_str": "def validate(x):\n    check(x)"})))
    assert fact_lines(edit) == ["Fixed src/refunds/amount.py: validate() rejects negative amounts now."]  # the text names the edit already
    quiet = assistant("Next step.", ToolCall("e", "edit_file", json.dumps({"path": "src/a.py", "old_string": "class Cart:", "new_string": "class Cart(Base):"})))
    assert fact_lines(quiet) == ["edit_file src/a.py: Cart"]
    # prose that names nothing and decides nothing gives nothing; a long line is clipped around the fact
    assert fact_lines(assistant("Looking at the next file.")) == [] and fact_lines(user("we will use X because Y")) == []
    long = assistant("x " * 400 + "Decision: use redis-py 5.0.4 because of blocking_timeout " + "y " * 400)
    (line,) = fact_lines(long)
    assert "redis-py 5.0.4" in line and len(line) <= LINE_CHARS + 2


def test_the_extractive_summary_keeps_the_six_facts_and_carries_them_forward():
    msgs = tuple(cs.coding_session(finished=True))
    first = ExtractiveSummarizer().summarize(SummaryRequest(msgs[:40], current_request=cs.REQUEST, max_tokens=1500))
    assert "## Facts: decisions, errors and fixes, edits, figures" in first.text
    early = [f for f in cs.FACTS if 0 <= f.round < 19]  # the facts planted in the first 19 rounds (messages 1-39)
    assert all(k in first.text for f in early for k in f.keys)
    second = ExtractiveSummarizer().summarize(SummaryRequest(msgs[40:-2], previous_summary=first.text, current_request=cs.NEXT_REQUEST, max_tokens=1500))
    assert all(k in second.text for f in cs.FACTS for k in f.keys)  # the rolling summary keeps the old facts and the new


def test_the_model_summarizer_is_asked_for_the_facts():
    system, _ = render_prompt(SummaryRequest((user("hi"), assistant("hello")), max_tokens=500))
    for asked in ("decisions with their reasons", "errors with their fixes", "files edited and how", "numbers with their units", "user constraints"):
        assert asked in system


@pytest.mark.parametrize("family", [
    "research",
    "chinese",
])
def test_an_existing_trace_keeps_its_summarizer_calls_and_identifiers(family, tmp_path):
    """The 100k traces' pressure replay (benchmarks/ours.py, as `make bench` runs it): one summarizer
    call each before issue 25 and after, and ≥ 90 % of the identifiers seen so far still visible right
    after each compaction (98.6 % and 99.0 % measured)."""
    sys.path[:0] = [str(BENCH)]
    try:
        import ours
        import traces
        from own_figures import WINDOWS
    finally:
        del sys.path[0]
    trace = traces.generate(family, 100_000)
    rep, _, _ = ours.replay(trace, WINDOWS[100_000], tmp_path, traces.Reference())
    assert rep.summarizer_calls == 1
    assert rep.kept_after_compaction and min(rep.kept_after_compaction) >= 0.9
    assert rep.over_window_steps == 0
