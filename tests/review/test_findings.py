"""Regression tests from the independent engine review: each demonstrated a contract violation or
defect (as a strict xfail) before it was fixed. Real SQLite through ``open_service``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import text

from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.compactor import RunState
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.factory import ENV_BASE_URL, ENV_MODEL
from engine.core.errors import EngineError
from engine.core.messages import META_PRUNED, ToolCall, assistant, tool_result, user
from engine.core.policy import PolicyError
from engine.core.surface import build_surface, history_part
from engine.core.units import is_balanced
from engine.core.workdir import SavedResult, Workdir
from engine.service import Service, open_service
from tests import door_ops

WINDOW = 8000  # threshold 6400, target 5439, retained tail 1280, prune > 2000 tokens
POLICY: dict[str, Any] = {"context_window": WINDOW, "default": {"summary_max_tokens": 400}}
REQUEST = "Current request: find doc-42 in the knowledge base and report its owner."
_FILLER = (
    "The quarterly report lists revenue by region, churn by cohort, support load by product line, "
    "and a long appendix of footnotes about methodology, sampling and data quality. "
)


def filler(tokens: int, tag: str = "") -> str:
    return f"{tag} " + _FILLER * max(1, tokens // 35)


def service(tmp_path: Path, policies: dict[str, Any] | None = None, **kw: Any) -> Service:
    return open_service(str(tmp_path / "x.db"), workdir=tmp_path / "wd", create=True, policies=policies or POLICY, **kw)


def thread(svc: Service, key: str = "t") -> str:
    svc.runs.create_thread(key, system_prompt="You are a careful support agent.")
    return key


def route(svc: Service, key: str) -> None:
    rid = door_ops.record_model_request(svc.store, key, provider="sim", model="m", estimated_tokens=1000, threshold=6400)
    door_ops.complete_model_request(svc.store, rid, outcome="ok", reported_prompt_tokens=1000, reported_completion_tokens=10)


def add(svc: Service, key: str, *messages) -> list[int]:
    return [svc.runs.append_message(key, m) for m in messages]


def finished_turns(svc: Service, key: str, n: int, tag: str = "") -> None:
    for i in range(n):
        add(svc, key, user(f"Question {tag}{i}: what does section {i} say?"), assistant(filler(280, f"Answer {tag}{i}.")))


def big_round(svc: Service, key: str, i: int, tokens: int = 2600) -> list[int]:
    call = ToolCall(f"call-{i}", "fetch", "{}")
    return add(svc, key, assistant(f"Fetching part {i}.", call), tool_result(call.id, filler(tokens, f"result {i}"), name="fetch"))


class HookedWorkdir(Workdir):
    """Runs ``hook`` once, inside the first save: another writer acting while a prune is under way."""

    def __init__(self, root: Path, hook: Callable[[], None]) -> None:
        super().__init__(root)
        self.hook = hook
        self.fired = False

    def save(self, tool_name: str, content: str) -> SavedResult:
        if not self.fired:
            self.fired = True
            self.hook()
        return super().save(tool_name, content)


# -- critical: a boundary on a pruned tool result can never be persisted --------------------------


def test_pressure_summary_whose_boundary_is_a_pruned_result_is_persisted(tmp_path: Path) -> None:
    svc = service(tmp_path)
    key = thread(svc)
    add(svc, key, user(REQUEST))
    for r in range(16):  # a long running turn of big results: still over the threshold after pruning
        big_round(svc, key, r)
    route(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    reasons = [e.data.get("reason") for e in svc.reads.events(key) if e.kind == "summary_rejected"]
    assert "cas_conflict" not in reasons
    assert out.action == "summarized" and svc.reads.compaction_state(key).boundary is not None


def test_manual_compaction_past_a_pruned_result(tmp_path: Path) -> None:
    svc = service(tmp_path)
    key = thread(svc)
    finished_turns(svc, key, 10)
    add(svc, key, user("Fetch the big report."))
    big_round(svc, key, 0)  # the run ended right after the tool result (e.g. it failed)
    add(svc, key, user(REQUEST), assistant(filler(1500, "Final answer.")))
    route(svc, key)
    assert svc.steps.compact_for_pressure(key, RunState()).reason == "prune_enough"
    assert svc.reads.offloads(key)

    result = svc.compaction.compact(key)

    assert result.status == "completed"


# -- races between two writers ----------------------------------------------------------------------


def _three_big_results(svc: Service, key: str) -> None:
    add(svc, key, user(REQUEST))
    for r in range(3):
        big_round(svc, key, r)
    route(svc, key)


def test_concurrent_prune_of_the_same_result_is_a_no_op(tmp_path: Path) -> None:
    svc = service(tmp_path)
    other = service(tmp_path)  # a second agent process on the same database
    key = thread(svc)
    _three_big_results(svc, key)
    svc.compactor.workdir = HookedWorkdir(tmp_path / "wd", lambda: other.steps.compact_for_pressure(key, RunState()))

    out = svc.steps.compact_for_pressure(key, RunState())  # raises today

    assert out.tokens_after < out.threshold
    assert svc.reads.compaction_state(key).generation == 1  # one real surface change, one bump


def test_prune_behind_a_concurrently_moved_boundary_does_not_bump_generation(tmp_path: Path) -> None:
    svc = service(tmp_path)
    other = service(tmp_path, summarizer=ExtractiveSummarizer())
    key = thread(svc)
    for i in range(2):
        add(svc, key, user(f"Fetch report {i}."))
        big_round(svc, key, i)
        add(svc, key, assistant(f"Report {i} fetched."))
    finished_turns(svc, key, 8)
    route(svc, key)
    svc.compactor.workdir = HookedWorkdir(tmp_path / "wd", lambda: other.compaction.compact(key))  # manual, mid-prune

    svc.steps.compact_for_pressure(key, RunState())

    state = svc.reads.compaction_state(key)
    assert state.boundary is not None
    assert all(mid > state.boundary for mid in svc.reads.offloads(key)), "offload recorded behind the boundary"
    # only the manual summaries changed the surface: no generation bump for the stale prune
    assert state.generation == state.compact_count


# -- error handling ---------------------------------------------------------------------------------


def test_small_preview_budget_fails_closed_or_is_rejected(tmp_path: Path) -> None:
    policy = {"context_window": WINDOW, "default": {"summary_max_tokens": 400, "tool_result_limit_tokens": 100, "preview_tokens": 16}}  # under the frame (34 tokens since the frame names the file in short)
    try:
        svc = service(tmp_path, policy)
    except PolicyError:
        return  # rejecting the policy up front is a fix too
    key = thread(svc)
    finished_turns(svc, key, 23)
    add(svc, key, user(REQUEST))
    big_round(svc, key, 0, tokens=500)
    route(svc, key)

    svc.steps.compact_for_pressure(key, RunState())  # raises PreviewBudgetError today

    assert not svc.reads.offloads(key)


def test_set_policy_rejects_a_policy_that_cannot_resolve(tmp_path: Path) -> None:
    svc = service(tmp_path)
    key = thread(svc)
    with pytest.raises(PolicyError):
        svc.steering.set_policy({"context_window": WINDOW, "default": {"threshold_tokens": WINDOW * 2}})
    svc.compaction.status(key)


def test_orphan_tool_result_is_refused_or_kept_off_the_surface(tmp_path: Path) -> None:
    svc = service(tmp_path)
    key = thread(svc)
    add(svc, key, user(REQUEST))
    try:
        add(svc, key, tool_result("no-such-call", "stray output", name="fetch"))
    except EngineError:
        assert svc.reads.message_count(key) == 1  # refused, nothing written
        return
    assert is_balanced(history_part(build_surface(svc.store.snapshot(key))))


def test_cli_reports_a_malformed_tool_calls_row_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.apps.cli import main

    svc = service(tmp_path)
    key = thread(svc)
    add(svc, key, user(REQUEST))
    with svc.store.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO messages (conversation_id, role, content, tool_calls, created_at) VALUES (1, 'assistant', '', :calls, :now)"),
            {"calls": '[{"name": "fetch", "arguments": "{}"}]', "now": dt.datetime.now(dt.UTC).isoformat()},
        )
    svc.close()

    rc = main(["status", "--db", str(tmp_path / "x.db"), "--thread", key])

    assert rc == 2 and capsys.readouterr().err.startswith("error: ")


# -- summarizer -------------------------------------------------------------------------------------


def _idle_thread_with_history(svc: Service) -> str:
    key = thread(svc)
    finished_turns(svc, key, 10)
    add(svc, key, user(REQUEST), assistant(filler(1500, "Final answer.")))
    return key


@pytest.fixture
def chat_server() -> Iterator[ProviderSimulator]:
    """The provider simulator with a window no summary prompt reaches: every request takes a scripted reply."""
    with ProviderSimulator(context_window=1_000_000) as sim:
        yield sim


def _unavailable() -> Reply:
    return Reply.error(503, {"error": {"message": "scripted error", "type": "server_error", "code": 503}})


def test_summary_retries_policy_is_honoured(tmp_path: Path, chat_server: ProviderSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BASE_URL, chat_server.base_url)
    monkeypatch.setenv(ENV_MODEL, "summ")
    svc = open_service(
        str(tmp_path / "x.db"), workdir=tmp_path / "wd", create=True,
        policies={"context_window": WINDOW, "default": {"summary_max_tokens": 400, "summary_retries": 0}},
    )
    key = _idle_thread_with_history(svc)
    chat_server.script([_unavailable(), _unavailable()])

    with pytest.raises(EngineError):
        svc.compaction.compact(key)

    assert len(chat_server.requests) == 1


def test_truncated_summary_is_rejected(tmp_path: Path, chat_server: ProviderSimulator) -> None:
    from engine.compaction.summarizers.openai_compat import OpenAICompatSummarizer

    svc = service(tmp_path, summarizer=OpenAICompatSummarizer(chat_server.base_url, "summ", retries=0))
    key = _idle_thread_with_history(svc)
    cut = {
        "id": "x", "object": "chat.completion", "model": "summ",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": f"{REQUEST}\n## Done so far\n- The user asked about sect"}, "finish_reason": "length"}],
    }
    chat_server.script([Reply.raw(cut)])

    with pytest.raises(EngineError):
        svc.compaction.compact(key)

    assert svc.reads.compaction_state(key).summary is None


# -- inspector read model ---------------------------------------------------------------------------


def test_pressure_history_carries_the_recorded_threshold(tmp_path: Path) -> None:
    svc = service(tmp_path)
    key = thread(svc)
    add(svc, key, user(REQUEST))
    route(svc, key)  # recorded with threshold=6400

    [point] = svc.compaction.pressure_history(key)

    assert point.threshold == 6400
