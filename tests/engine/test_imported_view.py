"""Imported sessions as their source ran them (issue 22).

- the pressure of an imported thread is what the source would send next (after its last recorded
  compaction, anchored to its last recorded request), consistent with the recorded requests (the
  chart's last point) and the same in ``compaction status --json``; our engine's measure of the
  whole history is beside it (``engine_tokens``);
- the source's compactions count in ``compact_count`` (the thread, the list, the status, the CLI);
- a title from the source or its first real request, at import and (for an older import) at read;
- a trajectory that names no model has no window (``window_unknown``), never the database's
  fallback window as if it were the session's.

Store-level tests run on SQLite and PostgreSQL, each on a fresh database (the policy is store-wide).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engine.apps.cli import main as cli
from engine.core.messages import Message
from engine.core.policy import PolicySet
from engine.service import open_service
from engine.store import migrate
from engine.store.reads import request_title
from inspector_app.logic.pressure_text import engine_text, list_ratio, numbers_text, percent, pressure_view
from tests.engine.imported_sessions import CC_OVERHEAD, FIRST_REQUEST, write_claude_code_session, write_swe_agent_trajectory

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = ROOT / "tests/fixtures/sessions"
CC = SESSIONS / "claude-code/project/7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
CODEX = SESSIONS / "codex/2026/11/30/rollout-2026-11-30T10-00-00-019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d.jsonl"
OH_V0 = SESSIONS / "openhands/v0/conversation.json"
OH_V1 = SESSIONS / "openhands/v1/5e2f9a0c4b7d"
SWE = SESSIONS / "swe-agent/classic/calc__calc-1.traj"
#: the demo database's fallback window (engine/apps/demo.py): a toy, for its own scripted threads
TOY_WINDOW = 12_000


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh migrated database on each backend (the policy setting is store-wide)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    migrate(url)
    return url


@pytest.fixture
def service(fresh_url: str, tmp_path: Path) -> Any:
    svc = open_service(fresh_url, workdir=tmp_path / "workdir")
    yield svc
    svc.close()


def cli_json(*args: str, capsys: Any) -> Any:
    capsys.readouterr()
    assert cli([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# -- the pressure as the source ran it ------------------------------------------------------------


def test_four_auto_compactions_measure_what_claude_code_sends_next_on_both_backends(service: Any, fresh_url: str, tmp_path: Path,
                                                                                    capsys: Any) -> None:
    path = write_claude_code_session(tmp_path / "project")  # ~225k tokens over 4 compactions, each segment < 50k
    [report, *_] = service.imports.import_file(path)
    assert report.compactions == 4
    key = report.thread
    st = service.compaction.status(key)
    points = service.compaction.pressure_history(key)
    requests = service.store.model_requests(key)
    last = requests[-1]
    # what the source sends next: its last request (the chart's last point) + its answer + what followed
    assert points[-1].tokens == last.reported_prompt_tokens
    assert st.basis == "source" and st.recorded_prompt_tokens == points[-1].tokens
    assert st.tokens == last.reported_prompt_tokens + last.reported_completion_tokens  # nothing followed its last answer
    assert st.anchored_tokens == st.tokens
    assert max(p.tokens for p in points) < 60_000 and st.tokens < st.threshold
    assert st.state == "below" and st.context_window == 200_000 and st.window_source == "catalog"
    # our engine's whole history, beside it (more than the window: what the header said before)
    assert st.engine_tokens is not None and st.engine_tokens > st.context_window
    assert st.source_detail and "Claude Code" in st.source_detail
    # the source's compactions count
    assert st.compact_count == st.source_compact_count == 4
    info = service.reads.thread(key)
    assert info.compact_count == info.source_compact_count == 4
    assert [t.compact_count for t in service.reads.list_threads() if t.key == key] == [4]
    # the CLI reads the same numbers (one place computes them)
    data = cli_json("status", "--db", fresh_url, "--thread", key, capsys=capsys)
    assert (data["tokens"], data["engine_tokens"], data["threshold"], data["state"], data["compact_count"], data["basis"]) == (
        st.tokens, st.engine_tokens, st.threshold, "below", 4, "source")
    [row] = [r for r in cli_json("threads", "--db", fresh_url, capsys=capsys)["threads"] if r["thread"] == key]
    assert (row["compact_count"], row["source_compactions"], row["title"]) == (4, 4, info.title)
    # the header's words: the source's figure, ours beside it, no alarm
    view = pressure_view(st)
    assert view.state == "below" and view.tone != "danger"
    assert f"{st.tokens:,}" in view.text and f"our engine, whole history: {st.engine_tokens:,}" in view.text
    assert "Over the context window" not in view.text


def test_a_compaction_after_the_last_request_measures_the_summary_and_what_followed(tmp_path: Path) -> None:
    svc = open_service(str(tmp_path / "s.db"), create=True, workdir=tmp_path / "w")
    try:
        path = write_claude_code_session(tmp_path / "project", compactions=2, rounds=4, result_chars=6000, after_last_request=False)
        key = svc.imports.import_file(path)[0].thread
        st = svc.compaction.status(key)
        sources = svc.reads.source_compactions(key)
        last = svc.store.model_requests(key)[-1]
        assert sources[-1].after_message_id > last.message_id  # compacted after its last recorded request
        assert st.basis == "source" and st.anchored_tokens is None
        assert st.tokens == sum(st.breakdown.values())  # the rebuilt envelope, by category
        assert st.breakdown["summary"] > 0 and st.breakdown["tool_results"] == 0  # every tool round was replaced
        assert st.tokens < 1_000 < st.engine_tokens  # the summary and one request, not the whole history
        assert st.tokens < last.reported_prompt_tokens  # smaller than before it compacted
        assert "last compaction" in (st.source_detail or "")
    finally:
        svc.close()


@pytest.mark.parametrize("path, compactions", [(CC, 2), (CODEX, 1), (OH_V0, 1), (OH_V1, 1), (SWE, 0)])
def test_every_format_counts_its_recorded_compactions_and_has_a_title(tmp_path: Path, path: Path, compactions: int) -> None:
    svc = open_service(str(tmp_path / "s.db"), create=True, workdir=tmp_path / "w")
    try:
        [report, *_] = svc.imports.import_file(path)
        st, info = svc.compaction.status(report.thread), svc.reads.thread(report.thread)
        assert report.compactions == compactions
        assert st.compact_count == info.compact_count == info.source_compact_count == compactions
        assert info.title.strip() and "\n" not in info.title and len(info.title) <= 200
        if compactions:  # a source that compacted: measured after it, not over the whole history
            assert st.basis == "source" and st.engine_tokens is not None
    finally:
        svc.close()


def test_our_own_compaction_of_an_imported_thread_measures_our_surface(tmp_path: Path) -> None:
    svc = open_service(str(tmp_path / "s.db"), create=True, workdir=tmp_path / "w")
    try:
        path = write_claude_code_session(tmp_path / "project", compactions=1, rounds=6, result_chars=16_000, tail_rounds=6)
        key = svc.imports.import_file(path)[0].thread
        before = svc.compaction.status(key)
        result = svc.compaction.compact(key)
        st = svc.compaction.status(key)
        assert result.status == "completed" and st.generation > 0
        assert st.basis == "engine" and st.engine_tokens is None  # our compaction replaced the source's view
        assert st.compact_count == before.compact_count + 1 and st.source_compact_count == 1
    finally:
        svc.close()


# -- titles -------------------------------------------------------------------------------------------


def test_titles_come_from_the_first_real_request_trimmed_to_one_line() -> None:
    assert request_title("We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\n"
                         "Parsing a quoted CSV header drops the last column\n\nINSTRUCTIONS:\n...") == "Parsing a quoted CSV header drops the last column"
    assert request_title("<uploaded_files>\n/testbed\n</uploaded_files>\nI've uploaded a repository. Consider the following PR description:\n\n"
                         "<pr_description>\nQuoted headers lose their last column\n</pr_description>") == "Quoted headers lose their last column"
    long = request_title("word " * 100)
    assert len(long) == 80 and long.endswith("…")
    assert request_title("  \n\n  Fix   the\tparser  \nsecond line") == "Fix the parser"


def test_an_older_import_without_a_title_reads_one_and_a_reimport_writes_it(service: Any, fresh_url: str, tmp_path: Path) -> None:
    path = write_swe_agent_trajectory(tmp_path / "t" / "csvkit__csvkit-7.traj", steps=2, observation_chars=300)
    key = service.imports.import_file(path)[0].thread
    assert service.reads.thread(key).title == "Parsing a quoted CSV header drops the last column"
    # a thread imported before titles were made: its row holds ""
    engine = sa.create_engine(fresh_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE conversations SET title = '' WHERE thread_key = :k"), {"k": key})
        read = lambda: conn_title(engine, key)  # noqa: E731
        assert read() == ""
        assert service.reads.thread(key).title == "Parsing a quoted CSV header drops the last column"  # read-time fallback
        assert [t.title for t in service.reads.list_threads() if t.key == key] == ["Parsing a quoted CSV header drops the last column"]
        assert read() == ""  # reading wrote nothing
        service.imports.import_file(path)  # a re-import writes it through the door (our own row)
        assert read() == "Parsing a quoted CSV header drops the last column"
    finally:
        engine.dispose()


def conn_title(engine: sa.Engine, key: str) -> str:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT title FROM conversations WHERE thread_key = :k"), {"k": key}).scalar_one()


# -- a trajectory with no model ------------------------------------------------------------------------


def test_a_trajectory_without_a_model_has_no_window_not_the_databases_toy_one(service: Any, fresh_url: str, tmp_path: Path,
                                                                               capsys: Any) -> None:
    service.steering.set_policy({"context_window": TOY_WINDOW})  # as the demo database's
    path = write_swe_agent_trajectory(tmp_path / "t" / "csvkit__csvkit-7.traj")
    key = service.imports.import_file(path)[0].thread
    st = service.compaction.status(key)
    assert st.tokens > TOY_WINDOW  # a normal run, larger than the toy window
    assert (st.state, st.window_source, st.threshold, st.context_window) == ("window_unknown", "unknown", 0, 0)
    assert "SWE-agent" in (st.window_detail or "") and "no model" in (st.window_detail or "")
    assert "61,840 tokens sent over 12 calls" in (st.recorded_usage or "")  # the usage the trajectory recorded (model_stats)
    assert all(p.threshold is None for p in service.compaction.pressure_history(key))
    view = pressure_view(st)
    assert view.state == "window_unknown" and view.tone != "danger" and "Over" not in view.text and "Window unknown" in view.headline
    assert "61,840 tokens sent" in view.text
    assert percent(st) == "–" and list_ratio(st) is None and "window unknown" in numbers_text(st)
    data = cli_json("status", "--db", fresh_url, "--thread", key, capsys=capsys)
    assert (data["state"], data["window_source"], data["tokens"]) == ("window_unknown", "unknown", st.tokens)
    # a live thread of this database keeps its configured fallback (it is this database's own)
    service.runs.create_thread("live-unknown-model")
    service.runs.append_message("live-unknown-model", Message("user", "hello"))
    live = service.compaction.status("live-unknown-model")
    assert (live.window_source, live.context_window) == ("assumed", TOY_WINDOW)


def test_resolve_known_never_assumes() -> None:
    policies = PolicySet.from_mapping({"context_window": TOY_WINDOW, "models": [{"provider": "p", "model": "mine", "context_window": 5000}]})
    assert policies.resolve(None, None).window_source == "assumed"
    assert policies.resolve_known(None, None) is None
    assert policies.resolve_known("swe-agent", "some-local-model") is None
    assert policies.resolve_known(None, None, reported_window=64_000, reported_by="codex").context_window == 64_000  # type: ignore[union-attr]
    assert policies.resolve_known("p", "mine").context_window == 5000  # type: ignore[union-attr]
    assert policies.resolve_known("anthropic", "claude-sonnet-4-5-20250929").window_source == "catalog"  # type: ignore[union-attr]
    assert PolicySet().resolve_known(None, None) is None  # no fallback either: unknown, not an error


def test_engine_text_names_our_whole_history_only_beside_a_source_figure(tmp_path: Path) -> None:
    svc = open_service(str(tmp_path / "s.db"), create=True, workdir=tmp_path / "w")
    try:
        key = svc.imports.import_file(CC)[0].thread
        st = svc.compaction.status(key)
        assert engine_text(st) == f"our engine, whole history: {st.engine_tokens:,} tokens"
        svc.runs.create_thread("live")
        svc.runs.append_message("live", Message("user", "hi"))
        assert engine_text(svc.compaction.status("live")) is None and svc.compaction.status("live").basis == "engine"
    finally:
        svc.close()


def test_the_committed_fixtures_are_the_generators_shapes() -> None:
    """tests/fixtures/sessions/{claude-code/auto-compactions, swe-agent/no-model} are what
    ``python tests/engine/imported_sessions.py`` writes (kept small)."""
    cc = next((SESSIONS / "claude-code/auto-compactions").glob("*.jsonl"))
    entries = [json.loads(line) for line in cc.read_text().splitlines()]
    boundaries = [e for e in entries if e.get("subtype") == "compact_boundary"]
    assert len(boundaries) == 4 and all(b["compactMetadata"]["trigger"] == "auto" for b in boundaries)
    assert sum(1 for e in entries if e.get("isCompactSummary")) == 4
    assert all(e["message"]["usage"]["cache_read_input_tokens"] + e["message"]["usage"]["cache_creation_input_tokens"] + 4 >= CC_OVERHEAD
               for e in entries if e["type"] == "assistant")
    traj = json.loads(next((SESSIONS / "swe-agent/no-model").glob("*.traj")).read_text())
    assert "replay_config" not in traj and traj["history"][1]["content"].count("ISSUE:") == 1
    assert FIRST_REQUEST in entries[0]["message"]["content"]

