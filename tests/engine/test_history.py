"""engine.history on real databases (SQLite and PostgreSQL): the envelope of every recorded request
(threads written by the real harness against the loopback provider simulator, the extractive
summarizer), before/after diffs of a manual compaction, a prune and a Claude Code recorded
compaction, the cost of a compaction, the JSON export round trip and the ``diff`` / ``export`` CLI."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from engine import history
from engine.apps.cli import history_cmd
from engine.apps.harness.loop import AgentHarness, Tool, ToolRegistry
from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.protocol import SummaryRequest, SummaryResult
from engine.core.errors import ThreadNotFound
from engine.core.messages import META_PRUNED, ToolCall, assistant, tool_result, user
from engine.core.views import DIFF_CATEGORIES, CompactionCost, CompactionEntry, RequestEnvelope
from engine.llm import ChatClient
from engine.service import Service, open_service
from tests import door_ops

PROVIDER, MODEL = "sim", "sim-8k"
WINDOW = 8000  # threshold 6400; tool results over 2000 tokens are pruned
POLICY = {"models": [{"provider": PROVIDER, "model": MODEL, "context_window": WINDOW, "summary_max_tokens": 400}]}
SYSTEM = "You are a test agent. Use the tools when they help."
CC_MAIN = Path(__file__).parents[1] / "fixtures/sessions/claude-code/project/7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
CC_KEY = "claude-code:7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"


def bulk(rows: int, tag: str = "row") -> str:
    return " ".join(f"{tag}{i} value{i * 7} lorem ipsum" for i in range(rows))


@pytest.fixture
def svc(db_url: str, tmp_path: Path) -> Iterator[Service]:
    s = open_service(db_url, workdir=tmp_path / "wd", summarizer=ExtractiveSummarizer(), policies=POLICY, create=True)
    yield s
    s.close()


@pytest.fixture
def key(svc: Service) -> str:
    k = f"h-{uuid.uuid4().hex[:12]}"
    svc.runs.create_thread(k, provider=PROVIDER, model=MODEL, system_prompt=SYSTEM)
    return k


def _run(coro_factory: Any, timeout: float = 60.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro_factory(), timeout)

    return asyncio.run(bounded())


def drive(svc: Service, key: str, sim: ProviderSimulator, turns: list[tuple[str, list[Reply]]], *, tool_text: str,
          notes: list[str] | None = None) -> None:
    """Run each (question, scripted replies) turn through the real harness."""
    tool = Tool("query_kb", lambda args: tool_text, description="search the knowledge base")

    async def scenario() -> None:
        async with ChatClient(sim.base_url, provider=PROVIDER, timeout=10) as provider:
            h = AgentHarness(svc, provider, model=MODEL, provider_name=PROVIDER, tools=ToolRegistry([tool]))
            for question, replies in turns:
                sim.script(replies)
                result = await h.run(key, question, notes=notes)
                assert result.status == "completed", result

    _run(scenario)


def kb_turns(n: int) -> list[tuple[str, list[Reply]]]:
    return [(f"Question {i}: look up doc-{i} in /srv/kb/index{i}.json", [Reply(tool_calls=(("query_kb", {"query": f"doc-{i}"}),)),
                                                                          Reply(content=f"Answer {i}: doc-{i} is owned by team {i}. " + bulk(40))])
            for i in range(n)]


@pytest.fixture
def sim() -> Iterator[ProviderSimulator]:
    with ProviderSimulator(context_window=WINDOW, model=MODEL) as s:
        yield s


# -- envelopes -------------------------------------------------------------------------------------


def test_every_envelope_is_what_the_compactor_measured(svc: Service, key: str, sim: ProviderSimulator) -> None:
    drive(svc, key, sim, kb_turns(8), tool_text=bulk(420, "kb"))
    requests = svc.store.model_requests(key)
    envs = history.request_envelopes(svc.store, key)
    assert len(envs) == len(requests) == 16
    assert any(h.kind == "prune" for h in svc.reads.history(key)), "the scenario must prune"
    assert any(h.kind == "summary" for h in svc.reads.history(key)), "the scenario must summarize"
    for e, r, sent in zip(envs, requests, sim.requests):
        assert isinstance(e, RequestEnvelope) and e.origin == "engine"
        assert e.request_id == r.id and e.step == r.step and e.run_id == r.run_id
        assert e.tokens == r.estimated_tokens and e.exact and e.note is None, (e.index, e.tokens, r.estimated_tokens)
        assert e.tokens == sent.prompt_tokens  # and the simulator counted the same body
        assert sum(e.breakdown.values()) == e.tokens
        assert e.ephemeral == ()
        assert e.threshold == r.threshold == 6400 and e.outcome == "ok"
        for mid in e.pruned_ids:  # a pruned result is its preview
            m = next(x for x in e.messages if x.id == mid)
            assert m.metadata[META_PRUNED] and m.content != bulk(420, "kb")
    # generations only grow, and each envelope holds no message written after its request
    gens = [e.generation for e in envs]
    assert gens == sorted(gens) and gens[-1] == svc.reads.compaction_state(key).generation
    for e in envs:
        assert all(m.id is None or m.id <= e.last_message_id for m in e.messages)
    assert [e.index for e in envs[-3:]] == [13, 14, 15] and envs[-1] == history.request_envelope(svc.store, key, -1)


def test_an_overflow_recovery_keeps_its_steps_in_the_request_replay(svc: Service, key: str, sim: ProviderSimulator) -> None:
    sim.context_window = 2000  # the provider refuses what the engine still accepts
    drive(svc, key, sim, [("Look it up", [Reply(tool_calls=(("query_kb", {"query": "x"}),)), Reply(content="all done")])],
          tool_text=bulk(400, "big"), notes=["Answer in one paragraph."])
    envs = list(history.request_envelopes(svc.store, key))
    # the run's ephemeral notes were recorded with its provider error: every request of the run has them
    for e, sent in zip(envs, sim.requests):
        assert [m.content for m in e.ephemeral] == ["Answer in one paragraph."] and e.messages[-1].is_ephemeral
        assert e.exact and e.tokens == sent.prompt_tokens
    outcomes = [e.outcome for e in envs]
    assert outcomes == ["ok", "error", "ok", "ok"] or outcomes == ["ok", "error", "ok"], outcomes
    failed = envs[1]
    assert failed.episode_step == "provider_error" and failed.exact
    retry = envs[2]
    assert retry.episode_step == "retry" and retry.generation == failed.generation + 1 and retry.tokens < failed.tokens
    assert retry.pruned_ids and not failed.pruned_ids
    (episode,) = svc.reads.replay(key)  # the episode's own steps are still there
    assert [s.kind for s in episode.steps] == ["provider_error", "prune", "retry", "recovered"]


def test_an_imported_thread_replays_what_the_source_model_saw(svc: Service) -> None:
    svc.imports.import_file(CC_MAIN)
    envs = list(history.request_envelopes(svc.store, CC_KEY))
    requests = svc.store.model_requests(CC_KEY)
    assert len(envs) == len(requests) == 5 and all(e.origin == "imported" and not e.exact for e in envs)
    assert [e.reported_prompt_tokens for e in envs] == [r.reported_prompt_tokens for r in requests]
    # before the source's microcompaction nothing is cleared; after it the two results are
    micro = svc.reads.source_compactions(CC_KEY)[0]
    two = (micro.replaced_first_id, micro.replaced_last_id)
    assert micro.kind == "prune" and envs[1].pruned_ids == () and envs[2].pruned_ids == two
    cleared = [m for m in envs[2].messages if m.id in two]
    assert len(cleared) == 2 and all(m.content == history.SOURCE_CLEARED_TEXT and not m.attachments for m in cleared)
    # after its summary the model saw the summary and what followed, nothing before
    (summary,) = [c for c in svc.reads.source_compactions(CC_KEY) if c.kind == "summary"]
    after = envs[3]
    assert after.summary == summary.summary and after.boundary == summary.replaced_last_id
    assert all(m.id is None or m.id > summary.replaced_last_id for m in after.messages)
    for e, r in zip(envs, requests):
        assert all(m.id is None or m.id < r.message_id for m in e.messages)


def test_unknown_thread_and_index(svc: Service, key: str) -> None:
    with pytest.raises(ThreadNotFound):
        history.request_envelopes(svc.store, "no-such-thread")
    assert len(history.request_envelopes(svc.store, key)) == 0
    with pytest.raises(IndexError):
        history.request_envelope(svc.store, key, 0)
    with pytest.raises(history.CompactionNotFound, match="has no compactions"):
        history.compaction_diff(svc.store, key)


# -- diffs ------------------------------------------------------------------------------------------


def _manual_thread(svc: Service, key: str) -> None:
    for i in range(8):
        svc.runs.append_message(key, user(f"Question {i}: what does /srv/app/mod{i}.py do?"))
        svc.runs.append_message(key, assistant(f"Answer {i}: it parses ticket-{i}. " + bulk(60)))
    svc.runs.append_message(key, user("Current request: summarize the status of ticket-7."))


def test_diff_of_a_manual_compaction(svc: Service, key: str) -> None:
    _manual_thread(svc, key)
    before = [m for m in svc.store.messages_after(key, None)]
    result = svc.compaction.compact(key)
    assert result.status == "completed"
    (entry,) = history.compaction_history(svc.store, key)
    d = history.compaction_diff(svc.store, key)
    assert (d.index, d.kind, d.trigger, d.origin) == (1, "manual", "manual", "engine") == (entry.index, entry.kind, entry.trigger, entry.origin)
    assert (d.generation_before, d.generation_after) == (0, 1)
    state = svc.reads.compaction_state(key)
    assert d.summary == state.summary and d.previous_summary is None
    assert [m.id for m in d.summarized] == [m.id for m in before if m.id <= state.boundary]
    assert [m.id for m in d.kept] == [m.id for m in before if m.id > state.boundary]
    assert d.pruned == ()
    assert set(d.tokens_before) == set(d.tokens_after) == set(DIFF_CATEGORIES)
    for side in (d.tokens_before, d.tokens_after):
        assert side["total"] == sum(v for k, v in side.items() if k != "total")
    assert d.tokens_before["total"] == result.before_tokens and d.tokens_after["total"] == result.after_tokens
    assert d.tokens_before["summary"] == 0 < d.tokens_after["summary"]
    assert [m.id for m in d.before if m.id is not None] == [m.id for m in before]
    assert history.compaction_cost(svc.store, key) == history.compaction_cost(svc.store, key, 1) == entry.cost
    assert entry.cost.following_requests == 0 and entry.cost.saved_prompt_tokens == 0  # no request went out after it yet
    assert (entry.tokens_before, entry.tokens_after) == (result.before_tokens, result.after_tokens)
    if d.dropped is not None:  # engine.core.specifics: dropped ones are in the summarized range and not shown after
        shown = (d.summary or "") + " ".join(m.content for m in d.after)
        for x in d.dropped.dropped:
            assert x.value not in shown


def test_diff_of_a_prune(svc: Service, key: str, sim: ProviderSimulator) -> None:
    drive(svc, key, sim, kb_turns(3), tool_text=bulk(420, "kb"))
    hist = svc.reads.history(key)
    prune = next(h for h in hist if h.kind == "prune")
    entries = history.compaction_history(svc.store, key)
    n = next(e.index for e in entries if e.kind == "prune")
    d = history.compaction_diff(svc.store, key, n)
    assert d.kind == "prune" and d.trigger == "pressure" and d.summarized == ()
    assert [o.message_id for o in d.pruned] == list(prune.pruned_message_ids)
    offloads = svc.reads.offloads(key)
    for o in d.pruned:
        assert o == offloads[o.message_id]
        shown = next(m for m in d.after if m.id == o.message_id)
        assert shown.content == o.preview
        original = next(m for m in d.before if m.id == o.message_id)
        assert original.content == bulk(420, "kb")
    assert d.tokens_before["previews"] == 0 < d.tokens_after["previews"]
    assert d.tokens_before["total"] == prune.tokens_before and d.tokens_after["total"] == prune.tokens_after
    # a prune records what its previews left out (issue 25), as a summary does: these results name nothing
    assert d.dropped is not None and d.dropped.dropped_count == 0


def test_diff_of_a_claude_code_recorded_compaction(svc: Service) -> None:
    svc.imports.import_file(CC_MAIN)
    recorded = svc.reads.source_compactions(CC_KEY)
    entries = history.compaction_history(svc.store, CC_KEY)
    assert [(e.kind, e.origin) for e in entries] == [("prune", "claude-code"), ("summary", "claude-code")]
    assert [e.record_id for e in entries] == [c.id for c in recorded]
    summary_c = recorded[1]
    d = history.compaction_diff(svc.store, CC_KEY)  # the latest: the compact_boundary
    assert (d.index, d.kind, d.trigger, d.origin) == (2, "summary", "manual", "claude-code")
    assert d.summary == summary_c.summary and d.generation_before is None
    assert [m.id for m in d.summarized] == [m.id for m in svc.store.messages_after(CC_KEY, None)
                                            if summary_c.replaced_first_id <= m.id <= summary_c.replaced_last_id]
    assert d.kept == () and d.tokens_after["messages"] == 0 and d.tokens_after["summary"] > 0
    assert d.tokens_before["total"] > d.tokens_after["total"]
    assert d.dropped is not None  # computed with engine.core.specifics for a source's compaction
    assert any(x.value.endswith("parser.py") for x in d.dropped.dropped) or d.dropped.seen >= 0
    # the microcompaction: its two cleared results, nothing summarized
    p = history.compaction_diff(svc.store, CC_KEY, 1)
    two = [recorded[0].replaced_first_id, recorded[0].replaced_last_id]
    assert p.kind == "prune" and [m.id for m in p.cleared] == two and p.summarized == ()
    assert all(m.content == history.SOURCE_CLEARED_TEXT for m in p.after if m.id in two)
    assert all(m.content != history.SOURCE_CLEARED_TEXT for m in p.before)
    assert p.tokens_before["total"] > p.tokens_after["total"]
    # cost of the microcompaction from the source's own figures: tokensSaved per following request
    cost = history.read_history(svc.store, CC_KEY).cost(1)
    assert cost.source == "recorded" and cost.saved_prompt_tokens == 2100 * cost.following_requests == 2100
    assert cost.model and cost.money is not None and cost.money > 0 and cost.currency == "USD"
    # one number for before / after: the source's reported figures, in the diff, the entry and the cost
    for e, diff in zip(entries, (p, d)):
        assert (diff.measured_before, diff.measured_after, diff.measured_by) == (e.tokens_before, e.tokens_after, "source")
    assert (p.measured_before, p.measured_after) == (30_122, 30_122 - 2_100)  # preTokens and tokensSaved
    assert d.measured_before == 48_211 and d.measured_before != d.tokens_before["total"]  # our count lacks its system prompt
    with pytest.raises(history.CompactionNotFound, match="1 to 2"):
        history.compaction_diff(svc.store, CC_KEY, 3)


# -- cost -------------------------------------------------------------------------------------------


def test_cost_arithmetic_on_a_constructed_case() -> None:
    from genai_prices import Usage, calc_price

    c = history.price_cost(summarizer_prompt_tokens=4_000, summarizer_completion_tokens=500, saved_prompt_tokens=30_000,
                           following_requests=3, source="meter", model="gpt-4o", provider="openai", summarizer_model="gpt-4o-mini")
    saved = float(calc_price(Usage(input_tokens=30_000), "gpt-4o", provider_id="openai").total_price)
    summ = float(calc_price(Usage(input_tokens=4_000, output_tokens=500), "gpt-4o-mini").total_price)
    assert saved == pytest.approx(30_000 * 2.5 / 1e6)  # gpt-4o input: $2.50 / MTok in the bundled data
    assert c.saved_money == pytest.approx(saved) and c.summarizer_money == pytest.approx(summ)
    assert c.money == pytest.approx(saved - summ) and c.currency == "USD"
    # an unknown model: tokens, no money, and why
    u = history.price_cost(summarizer_prompt_tokens=0, summarizer_completion_tokens=0, saved_prompt_tokens=10,
                           following_requests=1, source="meter", model="sim-8k", extractive=True)
    assert u.money is None and "sim-8k" in (u.price_note or "")
    # a compaction that grew the prompt costs money
    g = history.price_cost(summarizer_prompt_tokens=None, summarizer_completion_tokens=None, saved_prompt_tokens=-1_000_000,
                           following_requests=1, source="meter", model="gpt-4o", extractive=True)
    assert g.money == pytest.approx(-2.5)


def test_recorded_savings_scale_by_the_provider_ratio(svc: Service, key: str, sim: ProviderSimulator) -> None:
    drive(svc, key, sim, kb_turns(3), tool_text=bulk(420, "kb"))
    th = history.read_history(svc.store, key)
    first = th.compactions[0]
    following = th.following_requests(first)
    assert following and all(r.reported_prompt_tokens and r.estimated_tokens for r in following)
    h = first.record
    delta = h.tokens_before - h.tokens_after
    expected = sum((2 * delta * r.reported_prompt_tokens + r.estimated_tokens) // (2 * r.estimated_tokens) for r in following)
    cost = th.cost(first.index)
    assert cost.source == "recorded" and cost.saved_prompt_tokens == expected and cost.following_requests == len(following)
    assert (cost.summarizer_prompt_tokens, cost.summarizer_completion_tokens) == (0, 0)  # a prune calls no summarizer
    nxt = th.compactions[1].record.created_at if len(th.compactions) > 1 else None
    assert all(r.created_at >= h.created_at and (nxt is None or r.created_at < nxt) for r in following)


def test_prices_never_touch_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("genai-prices tried to open a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    money, why = history.price_tokens("claude-sonnet-4-5", input_tokens=100_000)
    assert why is None and money == pytest.approx(0.30)  # $3 / MTok below the 200k tier


# -- export -----------------------------------------------------------------------------------------


def test_export_round_trips_to_json(svc: Service, key: str, sim: ProviderSimulator) -> None:
    drive(svc, key, sim, kb_turns(6), tool_text=bulk(420, "kb"))
    svc.runs.append_message(key, user("Current request: what about doc-3?"))
    svc.compaction.compact(key)
    entries = history.compaction_history(svc.store, key)
    assert len(entries) >= 3 and {e.kind for e in entries} >= {"prune", "manual"}
    text = history.export_history(svc.store, key, "json")
    data = json.loads(text)
    assert data["format"] == "compaction-history" and data["version"] == 1 and data["thread"] == key
    assert history.load_export(text) == entries
    assert all(isinstance(e, CompactionEntry) and (e.cost is None or isinstance(e.cost, CompactionCost)) for e in entries)
    md = history.export_history(svc.store, key, "md")
    assert md.startswith(f"# Compaction history of `{key}`") and len(re.findall(r"^### \d+\. ", md, re.MULTILINE)) == len(entries)
    manual = entries[-1]
    assert manual.summary and manual.summary.splitlines()[0] in md


def test_load_export_refuses_what_is_not_an_export() -> None:
    for bad, words in [("nope", "not a JSON export"), ("{}", "not a compaction-history export"),
                       ('{"format": "compaction-history", "version": 9, "compactions": []}', "unsupported export version"),
                       ('{"format": "compaction-history", "version": 1, "compactions": [{"index": "x"}]}', "integer 'index'"),
                       ('{"format": "compaction-history", "version": 1, "compactions": [{"index": 1, "kind": "prune", "origin": "engine", '
                        '"created_at": "yesterday"}]}', "not an ISO time")]:
        with pytest.raises(history.InvalidExport, match=words):
            history.load_export(bad)
    e = CompactionEntry(1, "summary", "pressure", "engine", datetime(2026, 1, 2, tzinfo=UTC), 10, 5, "s", None,
                        CompactionCost(1, 2, 3, 4, "meter", "gpt-4o", 0.5, "USD", None, 0.25, 0.75))
    assert history.load_export(history.export_json("k", [e])) == [e]
    with pytest.raises(history.InvalidExport, match="unknown export format"):
        history.export_history(None, "k", "xml")  # type: ignore[arg-type]


# -- CLI (called through its own parser: the lead registers it in engine.apps.cli) -------------------------


def cli(*argv: str) -> int:
    p = argparse.ArgumentParser(prog="compaction")
    sub = p.add_subparsers(dest="command")
    history_cmd.add_parser(sub)
    args = p.parse_args(list(argv))
    return args.run(args)


def test_cli_diff_json_and_text(svc: Service, key: str, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _manual_thread(svc, key)
    svc.compaction.compact(key)
    assert cli("diff", "--db", db_url, "--thread", key, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    d = history.compaction_diff(svc.store, key)
    assert data["thread"] == key and data["compaction"] == 1 and data["compactions"] == 1
    assert data["kind"] == "manual" and data["tokens_before"] == dict(d.tokens_before) and data["tokens_after"] == dict(d.tokens_after)
    assert [m["id"] for m in data["summarized"]] == [m.id for m in d.summarized]
    assert [m["id"] for m in data["kept"]] == [m.id for m in d.kept] and data["summary"] == d.summary
    assert set(data) == {"thread", "compaction", "compactions", "kind", "trigger", "origin", "created_at", "generation_before",
                         "generation_after", "tokens", "tokens_before", "tokens_after", "previous_summary", "summary", "summarized", "kept",
                         "pruned", "cleared", "dropped", "cost", "note", "record_id", "written_by"}
    assert set(data["cost"]) == set(CompactionCost.__dataclass_fields__)
    assert cli("diff", "--db", db_url, "--thread", key, "--compaction", "1") == 0
    out = capsys.readouterr().out
    assert out.startswith("compaction 1 of 1: manual (manual, engine)") and "summarized: " in out


def test_cli_errors_are_one_line_and_exit_2(svc: Service, key: str, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("diff", "--db", db_url, "--thread", "no-such-thread") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert cli("diff", "--db", db_url, "--thread", key, "--json") == 2  # no compactions yet
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "compaction_not_found"
    _manual_thread(svc, key)
    svc.compaction.compact(key)
    assert cli("diff", "--db", db_url, "--thread", key, "--compaction", "2", "--json") == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "compaction_not_found" and "1 to 1" in error["message"]
    with pytest.raises(SystemExit) as exc:  # 0 is a usage error (argparse: exit 2)
        cli("diff", "--db", db_url, "--thread", key, "--compaction", "0")
    assert exc.value.code == 2
    capsys.readouterr()
    assert cli("export", "--db", db_url, "--thread", "no-such-thread", "--format", "md") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: "), err


def test_cli_export(svc: Service, key: str, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _manual_thread(svc, key)
    svc.compaction.compact(key)
    assert cli("export", "--db", db_url, "--thread", key, "--format", "json") == 0
    assert history.load_export(capsys.readouterr().out) == history.compaction_history(svc.store, key)
    out = tmp_path / "h.md"
    assert cli("export", "--db", db_url, "--thread", key, "--format", "md", "--output", str(out)) == 0
    assert out.read_text(encoding="utf-8") == history.export_history(svc.store, key, "md")
    assert cli("export", "--db", db_url, "--thread", key, "--format", "md", "--output", str(tmp_path / "missing" / "h.md")) == 2
    err = capsys.readouterr().err
    assert "error: cannot write" in err and "Traceback" not in err


def test_cli_docs_sections_match_the_parser() -> None:
    """docs/cli.md documents ``diff`` and ``export`` with exactly their options (tests/test_docs.py
    checks this too once the lead registers the commands in engine.apps.cli)."""
    import re

    doc = (Path(__file__).parents[2] / "docs/cli.md").read_text(encoding="utf-8")
    p = argparse.ArgumentParser(prog="compaction")
    sub = p.add_subparsers(dest="command")
    history_cmd.add_parser(sub)
    synopses = {m.group(1): m.group(2) for m in re.finditer(r"`compaction (\w+)([^`]*)`", doc)}
    for name, sp in sub.choices.items():
        options = {o for a in sp._actions if a.help != argparse.SUPPRESS for o in a.option_strings if o.startswith("--") and o != "--help"}
        assert set(re.findall(r"--[a-z][a-z-]*", synopses[name])) == options, name
    diff = doc[doc.index("`compaction diff"):]
    for k in ("thread", "compaction", "compactions", "tokens_before", "tokens_after", "summarized", "kept", "pruned", "cleared",
              "dropped", "cost", "summary", "previous_summary", "note", *DIFF_CATEGORIES):
        assert f'"{k}"' in diff, k


def test_a_second_read_sees_what_changed(svc: Service, key: str, sim: ProviderSimulator) -> None:
    drive(svc, key, sim, kb_turns(1), tool_text="kb says 42")
    first = history.read_history(svc.store, key)
    assert history.read_history(svc.store, key) is first  # unchanged: the same read
    assert len(history.request_envelopes(svc.store, key)) == 2
    rid = svc.steps.record_model_request(key, provider=PROVIDER, model=MODEL, estimated_tokens=5, threshold=6400)
    pending = history.request_envelope(svc.store, key, -1)
    assert pending.request_id == rid and pending.outcome == "pending" and not pending.exact
    svc.steps.complete_model_request(key, rid, outcome="ok", reported_prompt_tokens=7)
    done = history.request_envelope(svc.store, key, -1)  # a completion is seen without any other change
    assert done.outcome == "ok" and done.reported_prompt_tokens == 7
    drive(svc, key, sim, kb_turns(1), tool_text="kb says 43")
    assert len(history.request_envelopes(svc.store, key)) == 5


class Terse:
    """A summarizer that keeps nothing specific (like a language model that summarizes loosely),
    reporting the usage an OpenAI-compatible endpoint would."""

    name = "terse"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        text = f"Current request: {request.current_request or ''}\nThe user asked about several modules; each was explained."
        return SummaryResult(text=text, model="gpt-4o-mini",
                             prompt_tokens=1_200, completion_tokens=40, calls=1, extractive=False)


@pytest.fixture
def terse_svc(db_url: str, tmp_path: Path) -> Iterator[Service]:
    s = open_service(db_url, workdir=tmp_path / "wd-terse", summarizer=Terse(), policies=POLICY, create=True)
    yield s
    s.close()


def test_dropped_specifics_recorded_with_the_summary_event_are_read_back(terse_svc: Service) -> None:
    """A summary event that carries the dropped specifics (the compactor records them) is what the
    diff shows; one written before those keys existed gets them computed from the surfaces, equal
    to what the compactor recorded."""
    from engine.core.specifics import DroppedSpecifics

    svc = terse_svc
    key = f"h-{uuid.uuid4().hex[:12]}"
    svc.runs.create_thread(key, provider=PROVIDER, model=MODEL, system_prompt=SYSTEM)
    _manual_thread(svc, key)
    assert svc.compaction.compact(key).status == "completed"
    cost = history.compaction_cost(svc.store, key)  # a priced summarizer: its usage in money
    assert (cost.summarizer_prompt_tokens, cost.summarizer_completion_tokens) == (1_200, 40)
    assert cost.summarizer_money == pytest.approx(history.price_tokens("gpt-4o-mini", input_tokens=1_200, output_tokens=40)[0])
    # nothing went out after it yet: it saved nothing and cost the summarizer call
    assert cost.following_requests == 0 and cost.saved_money == 0 and cost.money == pytest.approx(-cost.summarizer_money) and cost.money < 0
    recorded_by_compactor = history.compaction_diff(svc.store, key).dropped
    assert isinstance(recorded_by_compactor, DroppedSpecifics) and recorded_by_compactor.dropped_count > 0
    (event,) = [e for e in svc.reads.events(key) if e.kind == "summary"]
    old = {k: v for k, v in event.data.items() if k not in ("specifics_seen", "dropped_specifics", "dropped_referenced", "dropped", "dropped_truncated")}
    door_ops.add_event(svc.store, key, "summary", old, trigger="manual")  # as an engine before issue 14 wrote it
    computed = history.compaction_diff(svc.store, key)
    assert isinstance(computed.dropped, DroppedSpecifics) and "computed now" in (computed.note or "")
    shown = (computed.summary or "") + " ".join(m.content for m in computed.after)
    assert all(x.value not in shown for x in computed.dropped.dropped)
    assert computed.dropped == recorded_by_compactor  # the same texts as the compactor's own record
    recorded = {**event.data, "specifics_seen": 9, "dropped_specifics": 2, "dropped_referenced": 1, "dropped_truncated": False,
                "dropped": [{"kind": "path", "value": "/srv/app/mod0.py", "referenced": True},
                            {"kind": "identifier", "value": "ticket-1", "referenced": False}, "not an entry"]}
    door_ops.add_event(svc.store, key, "summary", recorded, trigger="manual")  # as a newer engine writes it
    d = history.compaction_diff(svc.store, key)
    assert d.dropped is not None and d.dropped.seen == 9 and d.dropped.dropped_count == 2 and d.dropped.referenced_count == 1
    assert [(x.kind, x.value, x.referenced) for x in d.dropped.dropped] == [("path", "/srv/app/mod0.py", True), ("identifier", "ticket-1", False)]
    assert "computed now" not in (d.note or "")
    (entry,) = history.compaction_history(svc.store, key)
    assert entry.dropped == d.dropped
    text = history.export_history(svc.store, key, "json")
    assert history.load_export(text)[0].dropped == d.dropped
    md = history.export_history(svc.store, key, "md")
    assert "Dropped specifics: 2 of 9 seen, 1 referenced" in md and "`/srv/app/mod0.py` — referenced" in md


def test_a_condensation_that_keeps_the_first_events_keeps_them_on_the_surface(svc: Service) -> None:
    """OpenHands forgets a middle range (the first events stay): the diff summarizes only that range
    and the next request's envelope still holds the first events."""
    (report,) = svc.imports.import_file(Path(__file__).parents[1] / "fixtures/sessions/openhands/v1/5e2f9a0c4b7d")
    key = report.thread
    (sc,) = svc.reads.source_compactions(key)
    ids = [m.id for m in svc.store.messages_after(key, None)]
    assert ids[0] < sc.replaced_first_id  # the fixture keeps its first events
    d = history.compaction_diff(svc.store, key)
    assert d.origin == "openhands" and [m.id for m in d.summarized] == [i for i in ids if sc.replaced_first_id <= i <= sc.replaced_last_id]
    assert [m.id for m in d.kept] == [i for i in ids if i < sc.replaced_first_id]
    last = history.request_envelope(svc.store, key, -1)
    assert last.summary == sc.summary
    assert [m.id for m in last.messages if m.id is not None] == [i for i in ids if i < sc.replaced_first_id or sc.replaced_last_id < i < svc.store.model_requests(key)[-1].message_id]


# -- the export's overview (issue 22: one quantity, one number) ---------------------------------------


def _big_entries() -> list[CompactionEntry]:
    from engine.core.specifics import MAX_DROPPED, DroppedSpecific, DroppedSpecifics

    listed = tuple(DroppedSpecific("identifier", f"ticket-{i}", referenced=i < 3) for i in range(MAX_DROPPED))
    dropped = DroppedSpecifics(seen=676, dropped=listed, truncated=True, dropped_count=658, referenced_count=3)
    at = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
    cost = CompactionCost(summarizer_prompt_tokens=70_000, summarizer_completion_tokens=900, saved_prompt_tokens=1_000_000,
                          following_requests=12, source="recorded", model="claude-opus-4-5", money=4.839705, currency="USD",
                          price_note=None, summarizer_money=0.361, saved_money=5.200705)
    prune_cost = replace(cost, summarizer_prompt_tokens=0, summarizer_completion_tokens=0, money=0.004, saved_money=0.004, summarizer_money=0.0)
    return [
        CompactionEntry(index=1, kind="prune", trigger="auto", origin="engine", created_at=at, tokens_before=30_122,
                        tokens_after=28_022, summary=None, dropped=None, cost=prune_cost),
        CompactionEntry(index=2, kind="summary", trigger="auto", origin="claude-code", created_at=at, tokens_before=97_470,
                        tokens_after=22_599, summary="the summary\n" * 50, dropped=dropped, cost=cost),
    ]


def test_the_markdown_export_opens_with_an_overview_and_folds_the_long_lists() -> None:
    entries = _big_entries()
    md = history.export_markdown("k", entries)
    overview, _, rest = md.partition("## Compactions")
    assert "## Overview" in overview and rest  # the overview first, then the compactions
    assert "2 compactions (1 prune, 1 summary) · 658 specifics dropped · net $4.84" in overview
    rows = [line for line in overview.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| # | Kind | Trigger | Origin | Tokens before | Tokens after | Dropped specifics | Net money |")
    assert rows[1] == "| 1 | prune | auto | engine | 30,122 | 28,022 | 0 | <$0.01 |"
    assert rows[2] == "| 2 | summary | auto | claude-code | 97,470 | 22,599 | 658 of 676 | $4.84 |"
    assert rows[3] == "| **total** | | | | | | **658** | **$4.84** |"
    assert "ticket-" not in overview and "the summary" not in overview  # the long parts come later
    assert "4.839705" not in md and "$5.20" in md and "$0.36" in md  # money rounded to cents, everywhere
    # the 500 listed of 658 dropped, in a collapsible section that says it is capped
    assert "<details><summary>Dropped specifics (first 500 of 658)</summary>" in rest
    folded = rest.split("<details><summary>Dropped specifics", 1)[1].split("</details>", 1)[0]
    assert folded.count("- identifier: `ticket-") == 500
    assert "<details><summary>Summary</summary>" in rest
    assert "- Dropped specifics: 658 of 676 seen, 3 referenced" in rest


def test_the_json_export_keeps_full_precision_and_adds_the_overview() -> None:
    entries = _big_entries()
    data = json.loads(history.export_json("k", entries))
    o = data["overview"]
    assert (o["compactions"], o["kinds"], o["dropped_specifics"], o["dropped_known"]) == (2, {"prune": 1, "summary": 1}, 658, 2)
    assert o["money"] == pytest.approx(4.839705 + 0.004) and o["priced"] == 2 and o["currency"] == "USD"
    assert o["saved_prompt_tokens"] == 2_000_000
    assert [(r["tokens_before"], r["tokens_after"], r["dropped"], r["seen"], r["listed"], r["money"]) for r in o["rows"]] == [
        (30_122, 28_022, 0, None, 0, 0.004), (97_470, 22_599, 658, 676, 500, 4.839705)]
    assert data["compactions"][1]["cost"]["money"] == 4.839705  # full precision kept
    assert history.load_export(history.export_json("k", entries)) == entries  # still read back


def test_the_overview_of_an_imported_session_is_the_figures_of_its_entries(svc: Service) -> None:
    svc.imports.import_file(CC_MAIN)
    entries = history.compaction_history(svc.store, CC_KEY)
    diffs = [history.compaction_diff(svc.store, CC_KEY, e.index) for e in entries]
    o = history.overview(entries)
    assert [(r.tokens_before, r.tokens_after) for r in o.rows] == [(d.measured_before, d.measured_after) for d in diffs]
    assert [r.dropped for r in o.rows] == [d.dropped.dropped_count for d in diffs]  # type: ignore[union-attr]
    md = history.export_history(svc.store, CC_KEY, "md")
    assert md.index("## Overview") < md.index("## Compactions") < md.index("<details>")
    assert f"| 2 | summary | manual | claude-code | 48,211 | {entries[1].tokens_after:,} |" in md
