"""Smoke tests of two benchmark scripts on tiny sizes: each runs and prints its parseable lines, and
what those lines say is consistent. No timing is asserted (machines are noisy; ``make bench`` is
where times are read).

- ``benchmarks/adapters_langchain.py`` (issue 15) on research-10k;
- ``benchmarks/import_session.py`` (issue 11) on a 50 kB generated Claude Code session, SQLite and
  PostgreSQL (skipped when unreachable, failed with ``COMPACTION_REQUIRE_PG=1``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def run_script(*args: str, timeout: float = 240) -> list[dict[str, Any]]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_API": "pyside6"}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_adapters_langchain_prints_a_run_per_strategy_and_variant_and_a_summary() -> None:
    lines = run_script(str(BENCH / "adapters_langchain.py"), "--sizes", "10000", "--families", "research")
    assert lines and all(d["bench"] == "adapters_langchain" for d in lines)
    summary = lines[-1]
    if summary.get("skipped"):
        pytest.skip(summary["skipped"])
    runs = lines[:-1]
    assert sorted((d["strategy"], d["variant"]) for d in runs) == [
        ("langchain", "normal"), ("langchain", "summarizer fails"), ("ours", "normal"), ("ours", "summarizer fails"),
    ]  # fmt: skip
    for d in runs:
        assert d["trace"] == "research-10k" and d["window"] == 8192
        assert d["model_calls"] > 0 and d["overhead_median_ms"] is not None and d["overhead_median_ms"] >= 0
        if d["strategy"] == "ours":  # the graph state is never edited, and the store holds all of it
            assert d["error"] is None and d["turns_completed"] == d["turns"]
            assert d["lost"] == 0 and d["removed_from_state"] == 0
            assert d["stored_messages"] == d["state_messages_final"]
    by = {(d["strategy"], d["variant"]): d for d in runs}
    # both replay the same trace: the same model calls when both finish
    assert by[("ours", "normal")]["model_calls"] == by[("langchain", "normal")]["model_calls"]
    s = summary["summary"]
    assert s["ours"]["lost_on_failure"] == 0 and s["ours"]["failure_runs_completed"] == s["ours"]["failure_runs"] == 1
    assert s["ours"]["summarizer_calls"] == by[("ours", "normal")]["summarizer_calls"]
    # the rows the lead puts into docs/benchmarks.md render from the summary
    sys.path.insert(0, str(BENCH))
    try:
        import adapters_langchain

        table = adapters_langchain.render(s, runs)
    finally:
        sys.path.remove(str(BENCH))
    assert table.count("\n| research-10k |") == 2 and "History lost, failing summarizer" in table


def test_import_session_generates_the_claude_code_shape_and_reports_both_threads(tmp_path: Path) -> None:
    src = tmp_path / "session.jsonl"
    (gen,) = run_script(str(BENCH / "import_session.py"), "--mb", "0.05", "--generate", str(src))
    entries = [json.loads(line) for line in src.read_text().splitlines()]
    assert len(entries) == gen["entries"] > 10
    kinds = {e["type"] for e in entries}
    assert {"user", "assistant", "system", "file-history-snapshot"} <= kinds
    assistant = [e for e in entries if e["type"] == "assistant"]
    assert all(len(e["message"]["content"]) == 1 for e in assistant)  # one entry per content block
    by_id: dict[str, list[str]] = {}
    for e in assistant:
        by_id.setdefault(e["message"]["id"], []).append(e["message"]["content"][0]["type"])
    assert any(blocks.count("tool_use") >= 1 and len(blocks) >= 2 for blocks in by_id.values())
    assert sum(1 for e in entries if e.get("subtype") == "compact_boundary") == 1 and any(e.get("isCompactSummary") for e in entries)

    lines = run_script(str(BENCH / "import_session.py"), "--mb", "0.05", "--repeats", "1", "--gui-repeats", "1")
    assert [d["backend"] for d in lines] == ["sqlite", "postgresql"]
    for d in lines:
        assert d["bench"] == "import_session"
        if "skipped" in d:
            if os.environ.get("COMPACTION_REQUIRE_PG") == "1":
                pytest.fail(f"{d['backend']}: {d['skipped']} (COMPACTION_REQUIRE_PG=1)")
            continue
        session = d["session"]
        assert d["warnings"] == 0 and d["repairs"] == {}
        assert d["tool_calls"] == session["tool_uses"] and d["compactions"] == session["compactions"] == 1
        assert d["reimport_written"] == 0  # idempotent
        assert 0 < d["import_s"] and d["messages"] > 10
        assert abs(d["harness_messages"] - d["messages"]) < 5
        for label in ("imported", "harness"):
            assert d[f"{label}_first_paint_s"] > 0 and d[f"{label}_end_s"] > 0 and d[f"{label}_reached_end"]
    sys.path.insert(0, str(BENCH))
    try:
        import import_session

        rows = import_session.rows_from(lines)
    finally:
        sys.path.remove(str(BENCH))
    assert rows and all(len(r) == 3 for r in rows)
