"""What-if runs (engine/whatif/, ``compaction whatif``): a recorded thread replayed under another
policy in a scratch copy, never writing to the source, deterministic with the extractive summarizer,
cancellable, with an OpenAI-compatible summarizer through the loopback simulator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engine.apps.cli import whatif_cmd
from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.core.errors import Cancelled, EngineError
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.service import Service, open_service
from engine.whatif import EngineReplay, WhatIfSettingError, WhatIfSummarizerFailed, parse_settings, parse_sweep, run_sweep, run_whatif

from .conftest import MODEL, POLICY, PROVIDER, filler

PROBE = "Current request: reconcile invoice INV-{t} against ledger entry L-{t} and report the difference."


def session(turns: int = 6, rounds: int = 3, result_tokens: int = 500) -> list[Message]:
    """A recorded agent session: per turn a request, tool rounds with sizable results, an answer."""
    out: list[Message] = []
    for t in range(turns):
        out.append(user(PROBE.format(t=t)))
        for r in range(rounds):
            call = ToolCall(f"c{t}-{r}", "query_kb", json.dumps({"query": f"INV-{t} part {r}"}))
            out.append(assistant(f"Checking part {r} of INV-{t}.", call))
            out.append(tool_result(call.id, filler(result_tokens, f"ledger rows for INV-{t} part {r} (doc-{t}{r})"), name="query_kb"))
        out.append(assistant(filler(120, f"INV-{t} reconciled: the difference is {t * 7} EUR.")))
    return out


def record(svc: Service, key: str, messages: list[Message]) -> str:
    """Write ``messages`` as the engine would have while the agent ran (pressure path before each
    assistant message), so the source has model requests, compactions and events of its own."""
    svc.runs.create_thread(key, title=f"source {key}", system_prompt="You reconcile invoices.", provider=PROVIDER, model=MODEL)
    replay = EngineReplay(svc.store, key, compactor=svc.compactor, snapshots=svc.snapshots, route=(PROVIDER, MODEL), record_requests=True)
    for m in messages:
        if m.role == "assistant":
            replay.step()
        replay.add(m)
    replay.finish()
    return key


def row_counts(svc: Service) -> dict[str, int]:
    engine = svc.store.engine
    with engine.connect() as conn:
        names = sa.inspect(conn).get_table_names()
        return {n: conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar_one() for n in names}


@pytest.fixture
def source(db_url: str, tmp_path: Path, new_key) -> tuple[Service, str]:
    svc = open_service(db_url, workdir=tmp_path / "wd", policies=dict(POLICY), create=True)
    key = record(svc, new_key("src"), session())
    yield svc, key
    svc.close()


def test_whatif_never_writes_to_the_source(source: tuple[Service, str], tmp_path: Path) -> None:
    svc, key = source
    assert svc.reads.history(key), "the source thread compacted while it was recorded"
    before = row_counts(svc)
    result = run_whatif(svc.store, key, {"threshold_ratio": "0.5", "retained_tail": 0.1}, policies=svc.policies, scratch_root=str(tmp_path))
    sweep = run_sweep(svc.store, key, "threshold_ratio", [0.6, 0.9], policies=svc.policies, scratch_root=str(tmp_path))
    assert row_counts(svc) == before
    assert result.candidate.requests == result.recorded.requests == 6 * 4
    assert len(sweep.runs) == 2
    assert list(tmp_path.glob("compaction-whatif-*")) == []  # every scratch copy is gone


def test_whatif_leaves_a_sqlite_file_byte_for_byte(tmp_path: Path, new_key) -> None:
    path = tmp_path / "source.db"
    url = f"sqlite:///{path}"
    svc = open_service(url, workdir=tmp_path / "wd", policies=dict(POLICY), create=True)
    key = record(svc, new_key("bytes"), session())
    svc.close()  # checkpoints the write-ahead log into the file

    def files() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(tmp_path.glob("source.db*")) if p.stat().st_size}

    before = files()
    svc = open_service(url, workdir=tmp_path / "wd", policies=dict(POLICY))
    try:
        counts = row_counts(svc)
        run_whatif(svc.store, key, ["threshold_ratio=0.5"], policies=svc.policies)
        run_sweep(svc.store, key, "threshold_ratio", ["0.6", "0.95"], policies=svc.policies)
        assert row_counts(svc) == counts
    finally:
        svc.close()
    assert files() == before


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_source(request: pytest.FixtureRequest, tmp_path: Path, new_key) -> tuple[Service, str]:
    """A source alone in a new database, so its message ids start at 1 like the scratch copy's: the
    extractive summary cites message ids (``#12``), and a thread written after others in a shared
    database has larger ones, whose tokens differ (docs/cli.md, whatif)."""
    url = f"sqlite:///{tmp_path / 'fresh.db'}" if request.param == "sqlite" else request.getfixturevalue("new_pg_database")()
    svc = open_service(url, workdir=tmp_path / "wd", policies=dict(POLICY), create=True)
    key = record(svc, new_key("src"), session())
    yield svc, key
    svc.close()


def test_default_settings_reproduce_what_the_engine_recorded(fresh_source: tuple[Service, str]) -> None:
    """The source was written by the same pressure path under the same policy: the candidate with
    no setting changed is the recorded run (same requests, tokens, compactions, calls)."""
    svc, key = fresh_source
    c = run_whatif(svc.store, key, {}, policies=svc.policies)
    rec, cand = c.recorded, c.candidate
    assert rec.compactions > 0
    same = ("requests", "compactions", "by_kind", "summarizer_calls", "peak_pressure", "mean_pressure", "prompt_tokens", "steps_over_window",
            "specifics_dropped")
    assert {f: getattr(cand, f) for f in same} == {f: getattr(rec, f) for f in same}
    assert [p.tokens for p in cand.points] == [p.tokens for p in rec.points]
    assert cand.request_kept is True and rec.request_kept is None
    assert cand.note is None  # every real pressure check measured what the tally's sum predicted
    assert cand.settings["summarizer"] == "extractive" and cand.settings["threshold_ratio"] == 0.8


def test_a_lower_threshold_compacts_more(source: tuple[Service, str]) -> None:
    svc, key = source
    low = run_whatif(svc.store, key, ["threshold_ratio=0.4"], policies=svc.policies).candidate
    high = run_whatif(svc.store, key, ["threshold_ratio=0.95"], policies=svc.policies).candidate
    assert low.compactions > high.compactions
    assert low.peak_pressure <= 0.4 + 1e-9 < high.peak_pressure
    assert low.prompt_tokens < high.prompt_tokens


def test_sweep_is_deterministic_with_the_extractive_summarizer(source: tuple[Service, str]) -> None:
    svc, key = source
    parameter, values = parse_sweep("threshold_ratio=0.5:0.9:0.2")
    assert (parameter, values) == ("threshold_ratio", (0.5, 0.7, 0.9))
    seen: list[tuple[int, int]] = []
    a = run_sweep(svc.store, key, parameter, values, policies=svc.policies, progress=lambda d, t: seen.append((d, t)))
    b = run_sweep(svc.store, key, parameter, values, policies=svc.policies)
    assert a == b  # every figure and every point (durations are not compared)
    assert [r.settings["threshold_ratio"] for r in a.runs] == [0.5, 0.7, 0.9]
    assert [r.peak_pressure <= v + 1e-9 for r, v in zip(a.runs, values)] == [True] * 3
    total = 3 * svc.reads.message_count(key)
    assert seen[-1] == (total, total) and all(d2 >= d1 for (d1, _), (d2, _) in zip(seen, seen[1:]))


BAD_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"threshold": 0.5}, "unknown what-if setting 'threshold'"),
    ({"threshold_ratio": "high"}, "threshold_ratio must be a number in (0, 1]"),
    ({"threshold_ratio": 1.5}, "threshold_ratio must be in (0, 1]"),
    ({"context_window": "0"}, "context_window must be >= 1"),
    ({"tool_result_limit": "2.5"}, "tool_result_limit_tokens must be a whole number"),
    ({"preview_budget": 3000}, "preview_tokens (3000) must be smaller than tool_result_limit_tokens (2000)"),
    ({"threshold_tokens": 9000}, "threshold_tokens (9000) exceeds the context window (8000)"),
    ({"summarizer": "gpt"}, "summarizer must be 'extractive' or 'openai:<base_url>#<model>'"),
    ({"summarizer": "openai:http://127.0.0.1:9/v1"}, "name the model after '#'"),
    ({"summarizer": "openai:ftp://x#m"}, "must start with http:// or https://"),
    ({"retained_tail": 0.1, "retained_tail_ratio": 0.2}, "retained_tail_ratio is set twice"),
]


def test_bad_settings_are_clear_errors(source: tuple[Service, str], tmp_path: Path) -> None:
    svc, key = source
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for settings, words in BAD_SETTINGS:
        with pytest.raises(WhatIfSettingError) as err:
            run_whatif(svc.store, key, settings, policies=svc.policies, scratch_root=str(scratch))
        assert words in err.value.message and err.value.code == "invalid_whatif_setting", (settings, err.value.message)
        assert "\n" not in err.value.message
        with pytest.raises(WhatIfSettingError):
            run_sweep(svc.store, key, "retained_tail", [0.1], settings=settings, policies=svc.policies, scratch_root=str(scratch))
    assert list(scratch.iterdir()) == []  # refused before any scratch copy


def test_bad_sweeps_are_clear_errors() -> None:
    for spec, words in [
        ("threshold_ratio", "a sweep is key=start:stop:step"),
        ("threshold_ratio=0.9:0.5:0.1", "stop >= start"),
        ("threshold_ratio=0.5:0.9", "a range is start:stop:step"),
        ("threshold_ratio=0.01:1:0.01", "at most 50"),
        ("nope=1,2", "unknown what-if setting 'nope'"),
        ("threshold_ratio=0.5,2", "threshold_ratio must be in (0, 1]"),
    ]:
        with pytest.raises(WhatIfSettingError, match=None) as err:
            parse_sweep(spec)
        assert words in err.value.message, (spec, err.value.message)
    assert parse_sweep("context_window=4000,8000") == ("context_window", (4000, 8000))
    assert parse_settings(["retained_tail=0.1", "preview_budget=500"]) == {"retained_tail_ratio": 0.1, "preview_tokens": 500}


def test_cancel_removes_the_scratch_copy(source: tuple[Service, str], tmp_path: Path) -> None:
    svc, key = source
    tmp_path = tmp_path / "scratch"
    tmp_path.mkdir()
    polls = {"n": 0}

    def stop() -> bool:
        polls["n"] += 1
        seen = list(tmp_path.glob("compaction-whatif-*/scratch.db"))
        if polls["n"] == 10:
            assert seen, "the scratch copy exists while the run goes on"
            return True
        return False

    before = row_counts(svc)
    with pytest.raises(Cancelled) as err:
        run_whatif(svc.store, key, {"threshold_ratio": 0.5}, policies=svc.policies, should_stop=stop, scratch_root=str(tmp_path))
    assert isinstance(err.value, EngineError) and err.value.code == "cancelled"
    assert list(tmp_path.iterdir()) == []
    assert row_counts(svc) == before


def test_a_failure_removes_the_scratch_copy(source: tuple[Service, str], tmp_path: Path) -> None:
    svc, key = source
    tmp_path = tmp_path / "scratch"
    tmp_path.mkdir()

    def broken(done: int, total: int) -> None:
        if done > 20:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        run_whatif(svc.store, key, {}, policies=svc.policies, progress=broken, scratch_root=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_openai_compatible_summarizer_through_the_simulator(source: tuple[Service, str]) -> None:
    svc, key = source
    summary = "Summary: invoices INV-0 to INV-3 reconciled; ledger entries L-0 to L-3 checked."
    with ProviderSimulator(context_window=1_000_000, fallback=Reply(content=summary)) as sim:
        spec = f"openai:{sim.base_url}#sim-model"
        c = run_whatif(svc.store, key, {"summarizer": spec, "threshold_ratio": 0.5}, policies=svc.policies)
        sent = sim.requests
    assert c.candidate.settings["summarizer"] == spec
    assert c.candidate.summarizer_calls == len(sent) > 0
    assert all(r.path.endswith("/chat/completions") for r in sent)


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"


def test_imported_session_whatif(db_url: str, tmp_path: Path, new_key) -> None:
    """An imported Claude Code session: the recorded run is the source's reported usage and its
    own compactions; the candidate calls the model where the source's responses were (one request
    per recorded response, though Claude Code writes a response as several messages)."""
    svc = open_service(db_url, workdir=tmp_path / "wd", create=True)
    try:
        path = FIXTURES / "claude-code" / "project" / "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
        main = svc.imports.import_file(path, thread=new_key("cc"))[0]
        before = row_counts(svc)
        c = run_whatif(svc.store, main.thread, {"threshold_ratio": 0.5, "context_window": 4000}, policies=svc.policies)
        assert row_counts(svc) == before
        requests = [r for r in svc.store.model_requests(main.thread) if r.origin == "imported"]
        assert c.recorded.requests == len(requests) == c.candidate.requests > 0
        assert c.recorded.by_kind == {"source prune": 1, "source summary": 1}
        # the source recorded no dropped specifics: the recorded run counts what the before/after view computes
        from engine.history import compaction_diff

        diffs = [compaction_diff(svc.store, main.thread, i) for i in (1, 2)]
        assert c.recorded.specifics_dropped == sum(d.dropped.dropped_count for d in diffs if d.dropped is not None) > 0
        assert "recorded by claude-code" in (c.recorded.note or "")
        assert c.recorded.prompt_tokens == sum(r.reported_prompt_tokens for r in requests)
        assert c.candidate.context_window == 4000 and c.candidate.requests_without_request == 0
    finally:
        svc.close()


def test_an_unreachable_summarizer_stops_the_whatif(source: tuple[Service, str], tmp_path: Path) -> None:
    svc, key = source
    with ProviderSimulator() as sim:
        url = sim.base_url
    # the simulator is closed: nothing listens on its port any more
    with pytest.raises(WhatIfSummarizerFailed) as err:
        run_whatif(svc.store, key, {"summarizer": f"openai:{url}#m", "threshold_ratio": 0.5}, policies=svc.policies, scratch_root=str(tmp_path))
    assert err.value.code == "whatif_summarizer_failed" and f"openai:{url}#m" in err.value.message and "nothing was kept" in err.value.message
    assert list(tmp_path.glob("compaction-whatif-*")) == []


def test_unknown_thread(source: tuple[Service, str]) -> None:
    svc, _ = source
    with pytest.raises(EngineError) as err:
        run_whatif(svc.store, "no-such-thread", {}, policies=svc.policies)
    assert err.value.code == "thread_not_found"


# -- the command line ------------------------------------------------------------------------------


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="compaction")
    whatif_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["whatif", *argv])
    return args.run(args)


def test_cli_whatif_json_and_table(tmp_path: Path, new_key, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    svc = open_service(url, workdir=tmp_path / "wd", policies=dict(POLICY), create=True)
    svc.steering.set_policy(dict(POLICY))  # the policy every later command on this database uses
    key = record(svc, new_key("cli"), session(turns=4))
    svc.close()

    assert cli("--db", url, "--thread", key, "--set", "threshold_ratio=0.5", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["thread"] == key and set(data) == {"thread", "recorded", "candidate"}
    run_keys = {"label", "settings", "context_window", "requests", "compactions", "by_kind", "summarizer_calls", "peak_pressure",
                "mean_pressure", "prompt_tokens", "steps_over_window", "specifics_dropped", "request_kept",
                "requests_without_request", "duration_ms", "note"}
    assert set(data["recorded"]) == set(data["candidate"]) == run_keys
    assert data["candidate"]["settings"]["threshold_ratio"] == 0.5

    assert cli("--db", url, "--thread", key, "--sweep", "threshold_ratio=0.5:0.9:0.4") == 0
    out = capsys.readouterr().out
    assert "RUN" in out and "recorded" in out and "threshold_ratio=0.5" in out and "threshold_ratio=0.9" in out

    assert cli("--db", url, "--thread", key, "--sweep", "threshold_ratio=0.5,0.9", "--json", "--points") == 0
    sweep = json.loads(capsys.readouterr().out)
    assert sweep["parameter"] == "threshold_ratio" and sweep["values"] == [0.5, 0.9]
    assert len(sweep["runs"]) == 2 and len(sweep["runs"][0]["points"]) == sweep["runs"][0]["requests"]

    assert cli("--db", url, "--thread", key, "--set", "thresold=0.5") == 2
    assert "error: unknown what-if setting 'thresold'" in capsys.readouterr().err
    assert cli("--db", url, "--thread", key, "--set", "threshold_ratio", "--json") == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid_whatif_setting"
