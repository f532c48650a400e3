"""The demo database: built by running the harness, deterministic, with every scenario the issue names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.apps.demo import build_demo
from engine.core.errors import EngineError
from engine.service import open_service

VOLATILE = {"duration_ms", "specifics_ms", "created_at", "updated_at"}  # wall times and clocks


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _dump(db: Path, workdir: Path) -> dict[str, Any]:
    svc = open_service(str(db), workdir=workdir)
    try:
        out: dict[str, Any] = {}
        for t in svc.reads.list_threads():
            msgs = [
                (m.id, m.message.role, m.message.content, [(c.id, c.name, c.arguments) for c in m.message.tool_calls], m.message.tool_call_id, m.offload_sha256)
                for m in svc.reads.messages_page(t.key, limit=10_000)
            ]
            state = svc.reads.compaction_state(t.key)
            events = [(e.kind, e.trigger, e.run_id, _clean(dict(e.data))) for e in svc.reads.events(t.key)]
            runs = [(r.status, r.error_code, r.error_message) for r in svc.store.runs(t.key)]
            requests = [(r.step, r.estimated_tokens, r.reported_prompt_tokens, r.outcome, r.error_code) for r in svc.store.model_requests(t.key)]
            out[t.key] = {
                "title": t.title,
                "busy": t.busy_reason,
                "messages": msgs,
                "state": (state.boundary, state.summary, state.generation, state.boundary_hash, state.compact_count),
                "events": events,
                "runs": runs,
                "requests": requests,
            }
        return out
    finally:
        svc.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("demo")
    db = root / "demo.db"
    workdir = root / "demo.db.workdir"
    build_demo(str(db), seed=7)
    return db, workdir, _dump(db, workdir)


def test_same_seed_same_database(demo: tuple[Path, Path, dict[str, Any]]) -> None:
    db, workdir, first = demo
    build_demo(str(db), seed=7, force=True)
    assert _dump(db, workdir) == first


def test_refuses_to_overwrite_without_force(demo: tuple[Path, Path, dict[str, Any]]) -> None:
    db, _, _ = demo
    with pytest.raises(EngineError, match="--force"):
        build_demo(str(db))


def test_every_scenario_is_there(demo: tuple[Path, Path, dict[str, Any]]) -> None:
    db, workdir, dump = demo
    # research: pruning, then a rolling summary across turns
    research = dump["research-retrieval-latency"]
    kinds = [e[0] for e in research["events"]]
    assert "prune" in kinds and "summary" in kinds
    assert research["state"][4] >= 1 and research["state"][1]
    # coding: big logs and parallel tool calls
    coding = dump["coding-lock-test-failure"]
    assert any(len(m[3]) >= 2 for m in coding["messages"]), "a message with parallel tool calls"
    assert any(m[5] for m in coding["messages"]), "a pruned shell log"
    # overflow that recovers: provider error, then a retry, then success
    rec = [e[0] for e in dump["overflow-recovers"]["events"]]
    assert rec.index("provider_error") < rec.index("retry") < rec.index("recovered")
    assert dump["overflow-recovers"]["runs"][-1][0] == "completed"
    # overflow that cannot recover: the original provider error is the run's error
    gave = dump["overflow-gives-up"]
    assert gave["runs"][-1][0] == "failed" and gave["runs"][-1][1] == "CONTEXT_WINDOW_EXCEEDED"
    assert "maximum context length" in gave["runs"][-1][2]
    assert [e[0] for e in gave["events"]][-1] == "gave_up"
    # busy threads
    assert dump["busy-running"]["busy"] == "running"
    assert dump["busy-waiting-for-user"]["busy"] == "waiting_for_user"
    assert dump["busy-queued"]["busy"] == "queued"
    # a Chinese-language session
    assert any("检索" in m[2] for m in dump["zh-检索延迟分析"]["messages"])


def test_hint_thread_sits_just_above_the_hint_line(demo: tuple[Path, Path, dict[str, Any]]) -> None:
    db, workdir, _ = demo
    svc = open_service(str(db), workdir=workdir)
    try:
        st = svc.compaction.status("near-hint-line")
        assert st.hint and 0.85 <= st.pressure_ratio < 0.90
        assert not svc.compaction.status("coding-lock-test-failure").hint
    finally:
        svc.close()


def test_replay_of_the_demo_recovery(demo: tuple[Path, Path, dict[str, Any]]) -> None:
    db, workdir, _ = demo
    svc = open_service(str(db), workdir=workdir)
    try:
        (episode,) = svc.reads.replay("overflow-recovers")
        assert episode.outcome == "recovered"
        kinds = [s.kind for s in episode.steps]
        assert kinds[0] == "provider_error" and "retry" in kinds and kinds[-1] == "recovered"
        assert episode.steps[0].error_code == "CONTEXT_WINDOW_EXCEEDED"
        retry = next(s for s in episode.steps if s.kind == "retry")
        assert retry.generation_after > retry.generation_before
        (lost,) = svc.reads.replay("overflow-gives-up")
        assert lost.outcome == "gave_up" and "maximum context length" in (lost.steps[-1].error_message or "")
    finally:
        svc.close()


def test_compact_now_has_work_on_the_coding_thread(demo: tuple[Path, Path, dict[str, Any]], tmp_path: Path) -> None:
    """The demo keeps one idle, uncompacted thread below the hint line whose first turn lies outside
    the retained tail, so manual compaction visibly does something there."""
    import shutil

    db, workdir, _ = demo
    shutil.copy(db, tmp_path / "copy.db")
    shutil.copytree(workdir, tmp_path / "copy.db.workdir")
    svc = open_service(str(tmp_path / "copy.db"), workdir=tmp_path / "copy.db.workdir")
    try:
        assert not svc.compaction.status("coding-lock-test-failure").hint
        result = svc.compaction.compact("coding-lock-test-failure")
        assert result.status == "completed" and result.after_tokens < result.before_tokens
    finally:
        svc.close()


def _threads(url: str) -> list[str]:
    svc = open_service(url)
    try:
        return [t.key for t in svc.reads.list_threads()]
    finally:
        svc.close()


def test_the_embedded_demo_database_made_by_an_older_version_is_upgraded_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package upgrade must not leave the first window on "schema outdated": the demo database in
    the data directory is ours and is migrated (nothing lost); a user's database never is."""
    import shutil

    from engine.apps.demo import ensure_demo
    from engine.service import data_dir
    from engine.store.db import SchemaOutdated, downgrade

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    demo_db = data_dir() / "demo.db"
    assert str(demo_db).startswith(str(tmp_path))
    assert ensure_demo(str(demo_db)) is True  # built on first run
    threads = _threads(str(demo_db))
    other = tmp_path / "mine.db"
    shutil.copy(demo_db, other)

    downgrade(str(demo_db), "0001")
    with pytest.raises(SchemaOutdated):
        open_service(str(demo_db))
    assert ensure_demo(str(demo_db)) is False  # not rebuilt...
    assert _threads(str(demo_db)) == threads  # ...but upgraded, nothing lost

    downgrade(str(other), "0001")
    assert ensure_demo(str(other)) is False
    with pytest.raises(SchemaOutdated):  # a user's database is migrated only on request
        open_service(str(other))


def test_every_demo_thread_is_measured_for_the_list(demo: tuple[Path, Path, dict[str, Any]]) -> None:
    """The thread list shows a pressure for every demo thread before any is opened: its stored kept
    tokens, threshold and window are what a status measures now."""
    from engine.core.views import ThreadQuery

    db, workdir, dumped = demo
    svc = open_service(str(db), workdir=workdir)
    try:
        listed = svc.threads.page(ThreadQuery(), limit=100).threads
        assert {t.key for t in listed} == set(dumped)
        for t in listed:
            st = svc.compaction.status(t.key, remember=False)
            assert t.kept_tokens is not None and t.pressure is not None, t.key
            assert (t.kept_tokens, t.threshold, t.window) == (st.tokens, st.threshold, st.context_window), t.key
    finally:
        svc.close()
