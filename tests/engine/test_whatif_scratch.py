"""What-if runs made cheaper (issue 24) give the same figures: a scratch database copied from the
process's migrated template equals one migrated for the run, and a sweep that reads the source once
(messages held for every run) equals separate what-ifs that each page through the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.service import Service, open_service
from engine.store.db import code_head
from engine.whatif import run_sweep, run_whatif, runs as whatif_runs

from .conftest import POLICY
from .test_whatif import record, session


@pytest.fixture
def source(db_url: str, tmp_path: Path, new_key) -> tuple[Service, str]:
    svc = open_service(db_url, workdir=tmp_path / "wd", policies=dict(POLICY), create=True)
    key = record(svc, new_key("src"), session(turns=5, rounds=3))
    yield svc, key
    svc.close()


def test_scratch_copies_of_the_template_are_empty_independent_and_current(tmp_path: Path) -> None:
    a = whatif_runs.open_scratch(tmp_path / "a.db")
    b = whatif_runs.open_scratch(tmp_path / "b.db")
    try:
        assert a.schema.status == b.schema.status == "current" and a.writable and b.writable
        assert whatif_runs._templates.keys() >= {code_head()}
        assert list(tmp_path.glob("*.template*")) == []  # the migrated first copy is not left behind
        a.create_conversation("whatif", title="a", provider="p", model="m")
        assert [t.key for t in a.list_threads()] == ["whatif"]
        assert b.list_threads() == []  # a copy shares nothing with another
    finally:
        a.close()
        b.close()


def test_a_template_scratch_gives_what_a_migrated_one_gives(source: tuple[Service, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc, key = source
    settings = {"threshold_ratio": 0.5}
    monkeypatch.setattr(whatif_runs, "_templates", {})  # this run migrates its scratch database itself
    migrated = run_whatif(svc.store, key, settings, policies=svc.policies, scratch_root=str(tmp_path))
    assert code_head() in whatif_runs._templates
    copied = run_whatif(svc.store, key, settings, policies=svc.policies, scratch_root=str(tmp_path))  # copied from the template
    assert migrated.candidate.compactions > 0
    assert copied == migrated  # every figure and every point (durations are not compared)
    assert list(tmp_path.glob("compaction-whatif-*")) == []  # both scratch copies removed


def test_a_sweep_reading_the_source_once_equals_separate_whatifs(source: tuple[Service, str], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    svc, key = source
    values = [0.45, 0.7, 0.95]
    reads: list[int] = []
    paged = whatif_runs._source_messages

    def counting(store, k, *meter):  # noqa: ANN001, ANN002, ANN202 - the module's own reader (and the meter it hands counts to), counted
        reads.append(1)
        return paged(store, k, *meter)

    monkeypatch.setattr(whatif_runs, "_source_messages", counting)
    sweep = run_sweep(svc.store, key, "threshold_ratio", values, policies=svc.policies, scratch_root=str(tmp_path))
    assert len(reads) == 1  # one read of the source for the three runs
    single = [run_whatif(svc.store, key, {"threshold_ratio": v}, policies=svc.policies, scratch_root=str(tmp_path)).candidate for v in values]
    assert len(reads) == 4
    assert list(sweep.runs) == single
    assert len({r.compactions for r in single}) > 1  # the values make different runs

    monkeypatch.setattr(whatif_runs, "HELD_MESSAGES", 0)  # a thread too long to hold: every run pages through the source
    reads.clear()
    paged_sweep = run_sweep(svc.store, key, "threshold_ratio", values, policies=svc.policies, scratch_root=str(tmp_path))
    assert len(reads) == len(values)
    assert paged_sweep == sweep


def test_a_whatif_prunes_into_its_scratch_workdir_without_fsync(source: tuple[Service, str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The scratch copy's Workdir is removed with the run, so its files are written without the
    fsyncs the thread's own Workdir makes (engine.core.workdir, durable=False); the run still
    prunes, saving every pruned result in full there."""
    import os

    from engine.core import workdir as workdir_module

    svc, key = source
    saved: list[bool] = []
    real_save = workdir_module.Workdir.save

    def save(self: workdir_module.Workdir, tool_name: str, content: str) -> workdir_module.SavedResult:
        saved.append(self.durable)
        return real_save(self, tool_name, content)

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(workdir_module.Workdir, "save", save)
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    run = run_whatif(svc.store, key, {"threshold_ratio": 0.5}, policies=svc.policies, scratch_root=str(tmp_path))
    assert run.candidate.by_kind.get("prune", 0) > 0 and saved and not any(saved)
    assert synced == []


def test_a_whatif_makes_no_automatic_collection_and_turns_the_collector_back_on(source: tuple[Service, str], tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """While a what-if (a sweep too) runs, its replay included, the collector is off; it is on again
    once the what-if ends, also after a failure, only when the last of several what-ifs (threads)
    ends, and not at all when it was off before."""
    import gc
    import threading

    svc, key = source
    assert gc.isenabled()
    seen: list[bool] = []
    step = whatif_runs.EngineReplay.step

    def watched(self: whatif_runs.EngineReplay) -> whatif_runs.ReplayStep:
        seen.append(gc.isenabled())
        return step(self)

    monkeypatch.setattr(whatif_runs.EngineReplay, "step", watched)
    run = run_whatif(svc.store, key, {"threshold_ratio": 0.5}, policies=svc.policies, scratch_root=str(tmp_path))
    assert run.candidate.requests == len(seen) > 0 and not any(seen)
    assert gc.isenabled()
    seen.clear()
    sweep = run_sweep(svc.store, key, "threshold_ratio", [0.5, 0.9], policies=svc.policies, scratch_root=str(tmp_path))
    assert sum(r.requests for r in sweep.runs) == len(seen) > 0 and not any(seen)
    assert gc.isenabled()

    with pytest.raises(RuntimeError), whatif_runs.no_automatic_collection():
        raise RuntimeError("a failing run")
    assert gc.isenabled()

    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with whatif_runs.no_automatic_collection():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=other)
    with whatif_runs.no_automatic_collection():
        worker.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other what-if still runs
    release.set()
    worker.join(10)
    assert gc.isenabled()

    gc.disable()
    try:
        with whatif_runs.no_automatic_collection():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
