"""Instructions (issue 23): a manual compaction's instructions and a thread's standing ones reach
the language-model summarizer's prompt (the loopback provider simulator receives them), the
extractive summary keeps what they name, the summary event records them, and each manual
compaction and instruction change writes one audit row with the operator. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.compactor import RunState
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.openai_compat import OpenAICompatSummarizer
from engine.compaction.summarizers.protocol import SummaryRequest, instruction_terms
from engine.core.messages import assistant, user

from .conftest import Counting, add, filler, finished_turns, new_thread, route
from .test_pins import audit_rows

FACTORIES = [pytest.param("make_pg_service", marks=pytest.mark.postgres), "make_service"]
#: a sentence buried in an early answer: no identifier, so only an instruction keeps it
FACT = "the retention window is 45 days for archived tenants"
INSTRUCTIONS = 'Keep "retention window is 45 days" and every path under src/billing/.'


def thread_with_fact(svc, key, turns=16):
    new_thread(svc, key)
    finished_turns(svc, key, 2)
    add(svc, key, user("What did the audit find?"), assistant(filler(200, "Findings.") + f" Also: {FACT}. " + filler(60)))
    finished_turns(svc, key, turns)
    add(svc, key, user("Summarize the open items."))
    return key


def completion(text: str) -> Reply:
    return Reply.raw({"id": "c1", "object": "chat.completion", "model": "summ",
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 100, "completion_tokens": 20}})


@pytest.mark.parametrize("factory", FACTORIES)
def test_instructions_reach_the_model_summarizers_prompt(request, new_key, factory):
    with ProviderSimulator(context_window=1_000_000) as sim:
        sim.script([completion(f"Summary: the audit found {FACT}. Current request: Summarize the open items.")] * 8)
        model = OpenAICompatSummarizer(sim.base_url, "summ", api_key="sk-test", timeout=5.0, retries=0, backoff=0.0)
        svc = request.getfixturevalue(factory)(model)
        key = thread_with_fact(svc, new_key("instr-model"))

        result = svc.compaction.compact(key, instructions=INSTRUCTIONS, reason="support ticket 881")

        assert result.status == "completed"
        prompts = [r.body["messages"][1]["content"] for r in sim.requests]
        assert prompts and all("<instructions>\n" + INSTRUCTIONS + "\n</instructions>" in p for p in prompts)
    ev = [e for e in svc.reads.events(key) if e.kind == "summary"][-1]
    assert ev.data["instructions"] == INSTRUCTIONS
    [row] = audit_rows(svc, key)
    assert (row["action"], row["reason"], row["operator"]) == ("compact", "support ticket 881", svc.steering.operator())
    assert row["after"]["instructions"] == INSTRUCTIONS and row["after"]["status"] == "completed"
    assert row["before"]["generation"] == 0 and row["after"]["generation"] == result.generation


@pytest.mark.parametrize("factory", FACTORIES)
def test_the_extractive_summary_keeps_what_the_instructions_name(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting(ExtractiveSummarizer()))
    plain = thread_with_fact(svc, new_key("instr-none"))
    told = thread_with_fact(svc, new_key("instr-told"))

    assert svc.compaction.compact(plain).status == "completed"
    assert svc.compaction.compact(told, instructions=INSTRUCTIONS).status == "completed"

    assert FACT not in (svc.reads.compaction_state(plain).summary or "")  # without instructions it goes
    summary = svc.reads.compaction_state(told).summary or ""
    assert "Kept as instructed" in summary and "retention window is 45 days" in summary


@pytest.mark.parametrize("factory", FACTORIES)
def test_standing_instructions_steer_a_pressure_compaction_and_are_audited(request, new_key, factory):
    counter = Counting(ExtractiveSummarizer())
    svc = request.getfixturevalue(factory)(counter)
    key = thread_with_fact(svc, new_key("instr-standing"), turns=22)  # over the 6400-token threshold
    view = svc.steering.set_instructions(key, INSTRUCTIONS, reason="keep the retention fact")
    assert view.instructions == INSTRUCTIONS
    route(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert out.action == "summarized"
    assert counter.requests and all(r.instructions == INSTRUCTIONS for r in counter.requests)
    assert "retention window is 45 days" in (svc.reads.compaction_state(key).summary or "")
    [row] = audit_rows(svc, key)
    assert (row["action"], row["operator"], row["reason"]) == ("instructions", svc.steering.operator(), "keep the retention fact")
    assert row["before"] == {} and row["after"] == {"instructions": INSTRUCTIONS}
    svc.steering.set_instructions(key, None)
    assert svc.steering.thread_policy(key).instructions is None
    assert [r["action"] for r in audit_rows(svc, key)] == ["instructions", "instructions"]


def test_instruction_terms_and_the_prompt_block():
    assert instruction_terms('keep `KB-1042`, "owner is alice", src/app/, notes.md and #12; call_7') == (
        "KB-1042", "owner is alice", "src/app/", "notes.md", "#12", "call_7")
    from engine.compaction.summarizers.openai_compat import render_prompt
    req = SummaryRequest(messages=(user("hi"),), instructions="Keep src/")
    assert "<instructions>\nKeep src/\n</instructions>" in render_prompt(req)[1]
    assert "<instructions>" not in render_prompt(SummaryRequest(messages=(user("hi"),)))[1]


def test_the_before_after_view_shows_the_instructions_and_what_survived(make_service, new_key):
    svc = make_service(Counting(ExtractiveSummarizer()))
    key = thread_with_fact(svc, new_key("instr-diff"))
    svc.compaction.compact(key, instructions='keep "retention window is 45 days" and "no-such-phrase-here"')
    diff = svc.reads.compaction_diff(key)
    assert diff.instructions.startswith("keep ")
    assert dict(diff.instructions_kept) == {"retention window is 45 days": True, "no-such-phrase-here": False}
