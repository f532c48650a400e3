"""Revert and redo of the last compaction (issue 23) on real SQLite and PostgreSQL databases.

Revert brings back the exact surface from before the compaction (boundary, summary and the tool
results its prunes replaced, verified against the Workdir), a redo the compacted one, each as a new
generation written through the write door under the idle check, with one event and one audit row
naming the operator. A source's recorded compaction cannot be reverted and says why. 100 races of
intake against revert / redo lose or interleave no write.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from engine.compaction.compactor import RunState
from engine.core.checks import ServiceReader, check_thread
from engine.core.errors import NotRevertible, ThreadBusy
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.surface import build_surface, envelope_of

from .conftest import Counting, add, filler, finished_turns, new_thread, route, thread_state
from .test_manual import long_thread, make_busy

BACKENDS = [pytest.param("make_pg_service", marks=pytest.mark.postgres, id="postgres"), pytest.param("make_service", id="sqlite")]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"


def envelope(svc, key: str) -> dict:
    """What the model is sent next, whole: the envelope in the OpenAI wire format, and the state."""
    snap = svc.store.snapshot(key)
    surface = build_surface(snap)
    env = envelope_of(snap, surface)
    return {
        "wire": env.to_openai(),
        "messages": [(m.id, m.role, m.content, m.tool_call_id, tuple(m.tool_calls)) for m in surface.messages],
        "summary": snap.state.summary,
        "boundary": snap.state.boundary,
    }


def problems(svc, key: str) -> list:
    return check_thread(ServiceReader(svc), key)


def pressure_thread(svc, key: str) -> None:
    """Turns with big tool results (pruned by pressure) before a short current request."""
    new_thread(svc, key)
    for i in range(6):
        call = ToolCall(f"c{i}", "query_kb", f'{{"q": "doc-{i}"}}')
        add(svc, key, user(f"Question {i}: look up doc-{i}."), assistant(f"Looking up doc-{i}.", call))
        add(svc, key, tool_result(call.id, filler(2600, f"doc-{i} body"), name="query_kb"), assistant(filler(200, f"Answer {i}.")))
    add(svc, key, user("Last question: who owns doc-42?"))
    route(svc, key)


def audit_of(svc, key: str, action: str | None = None) -> list:
    return svc.steering.audit(thread=key, actions=[action] if action else None)


@pytest.mark.parametrize("factory", BACKENDS)
def test_revert_restores_the_exact_surface_and_redo_the_compacted_one(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("revert")
    long_thread(svc, key)
    before = envelope(svc, key)
    assert svc.compaction.compact(key).status == "completed"
    compacted = envelope(svc, key)
    assert compacted != before and compacted["boundary"] is not None
    gen = svc.reads.compaction_state(key).generation

    first = svc.compaction.revert(key, reason="summary lost the owner")
    assert first.action == "revert" and first.generation_after == gen + 1
    assert envelope(svc, key) == before  # the exact previous surface, as a new generation
    assert svc.reads.compaction_state(key).generation == gen + 1

    redo = svc.compaction.revert(key, reason="it was fine")
    assert redo.action == "redo" and redo.history_ids == first.history_ids
    assert envelope(svc, key) == compacted

    again = svc.compaction.revert(key)
    assert again.action == "revert" and envelope(svc, key) == before
    assert problems(svc, key) == []
    # nothing deleted: every generation has its history row, the compaction's own row kept
    history = svc.reads.history(key)
    assert [h.trigger for h in history][-3:] == ["revert", "redo", "revert"]
    assert [h.generation_after for h in history] == list(range(1, len(history) + 1))
    # one event and one audit row per act, naming the operator
    kinds = [e.kind for e in svc.reads.events(key)]
    assert kinds.count("revert") == 2 and kinds.count("redo") == 1
    rows = [a for a in audit_of(svc, key) if a.action in ("revert", "redo")]
    assert [a.action for a in rows] == ["revert", "redo", "revert"]
    assert {a.operator for a in rows} == {svc.store.operator()} and svc.store.operator()
    assert rows[0].reason == "summary lost the owner" and rows[0].before["generation"] == gen and rows[0].after["generation"] == gen + 1
    assert [a.id for a in rows] == [first.audit_id, redo.audit_id, again.audit_id]


@pytest.mark.parametrize("factory", BACKENDS)
def test_revert_of_a_pressure_compaction_brings_the_pruned_results_back_verbatim(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("revert-prune")
    pressure_thread(svc, key)
    before = envelope(svc, key)
    outcome = svc.steps.compact_for_pressure(key, RunState(), running_turn=False)
    assert outcome.progressed
    pruned = set(svc.reads.offloads(key))
    assert pruned, "the pressure step pruned nothing: the test needs a prune"
    compacted = envelope(svc, key)

    result = svc.compaction.revert(key)
    assert set(result.results) >= pruned - {m for m in pruned if before["boundary"] is not None and m <= before["boundary"]}
    assert envelope(svc, key) == before  # the originals, not the previews
    assert svc.reads.offloads(key) == {}
    shown = {m[0]: m[2] for m in envelope(svc, key)["messages"]}
    for mid in pruned:
        assert "doc-" in shown[mid] and len(shown[mid]) > 5000  # the whole original

    assert svc.compaction.revert(key).action == "redo"
    assert envelope(svc, key) == compacted and set(svc.reads.offloads(key)) == pruned
    assert problems(svc, key) == []


@pytest.mark.parametrize("factory", BACKENDS)
def test_revert_refuses_a_busy_thread_and_writes_nothing(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("revert-busy")
    long_thread(svc, key)
    svc.compaction.compact(key)
    make_busy(svc, key, "running")
    state = thread_state(svc, key)
    with pytest.raises(ThreadBusy):
        svc.compaction.revert(key)
    assert thread_state(svc, key) == state and audit_of(svc, key, "revert") == []


def test_nothing_to_revert_and_a_missing_original(make_service, new_key, tmp_path):
    svc = make_service(Counting())
    key = new_thread(svc, new_key("fresh"))
    finished_turns(svc, key, 2)
    with pytest.raises(NotRevertible) as caught:
        svc.compaction.revert(key)
    assert caught.value.code == "nothing_to_revert"
    assert svc.compaction.revert_target(key).action is None and svc.compaction.revert_target(key).code == "nothing_to_revert"

    key = new_key("lost-original")
    pressure_thread(svc, key)
    svc.steps.compact_for_pressure(key, RunState(), running_turn=False)
    offload = next(iter(svc.reads.offloads(key).values()))
    Path(svc.workdir.path_for(offload.tool_name, offload.sha256)).write_text("tampered")
    state = thread_state(svc, key)
    with pytest.raises(NotRevertible) as caught:
        svc.compaction.revert(key)
    assert caught.value.code == "original_missing" and f"#{offload.message_id}" in caught.value.message
    assert thread_state(svc, key) == state and audit_of(svc, key) == []


def test_a_source_compaction_cannot_be_reverted(make_service, new_key):
    svc = make_service(Counting())
    fixture = FIXTURES / "claude-code" / "auto-compactions" / "4d8e2b61-9c3a-4f70-8e15-2a6c9b0d7e34.jsonl"
    key = new_key("imported")
    reports = svc.imports.import_file(fixture, thread=key)
    key = reports[0].thread
    assert reports[0].compactions >= 1
    with pytest.raises(NotRevertible) as caught:
        svc.compaction.revert(key)
    assert caught.value.code == "source_compaction" and "recorded by its source" in caught.value.message
    target = svc.compaction.revert_target(key)
    assert target.action is None and target.code == "source_compaction"


@pytest.mark.parametrize("factory", BACKENDS)
def test_100_races_of_intake_against_revert_lose_no_write(request, new_key, factory):
    make = request.getfixturevalue(factory)
    reverter = make(Counting())
    intake = make(Counting())  # another client: its own connections
    key = new_key("race")
    long_thread(intake, key)
    reverter.compaction.compact(key)
    compacted_boundary = reverter.reads.compaction_state(key).boundary
    reverted_boundary = None
    expected = [m[0:3] for m in thread_state(intake, key)["messages"]]
    started = time.monotonic()
    for race in range(100):
        barrier = threading.Barrier(2, timeout=20)
        out: dict = {}

        def append() -> None:
            barrier.wait()
            out["ids"] = [intake.runs.append_message(key, user(f"race {race} message {j}")) for j in range(3)]

        def revert() -> None:
            barrier.wait()
            out["result"] = reverter.compaction.revert(key, reason=f"race {race}")

        threads = [threading.Thread(target=append), threading.Thread(target=revert)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), f"race {race} did not finish"
        result = out["result"]
        assert result.action == ("revert" if race % 2 == 0 else "redo")
        if race == 0:
            reverted_boundary = result.boundary_after
        assert result.boundary_after == (reverted_boundary if race % 2 == 0 else compacted_boundary)
        expected += [(i, "user", f"race {race} message {j}") for j, i in enumerate(out["ids"])]
        assert out["ids"] == sorted(out["ids"])  # one writer's messages in order, none interleaved
    elapsed = time.monotonic() - started
    messages = [m[0:3] for m in thread_state(intake, key)["messages"]]
    assert messages == sorted(expected)  # every write kept, in id order
    assert [m for m in messages if m[2].startswith("race ")] == [e for e in sorted(expected) if e[2].startswith("race ")]
    history = intake.reads.history(key)
    assert [h.generation_after for h in history] == list(range(1, len(history) + 1))
    assert [a.action for a in intake.steering.audit(thread=key, actions=["revert", "redo"], limit=1000)] == ["revert", "redo"] * 50
    assert problems(intake, key) == []
    print(f"100 races took {elapsed:.1f} s")  # each race is a bounded wait (t.join(30)), the total is not asserted


def test_cli_revert_audit_and_read_only(make_service, new_key, sqlite_url, tmp_path, capsys, monkeypatch):
    import json

    from engine.apps.cli import main

    svc = make_service(Counting())
    key = new_key("cli")
    long_thread(svc, key)
    svc.compaction.compact(key)
    monkeypatch.setenv("COMPACTION_WORKDIR", str(svc.workdir.root))
    db = sqlite_url
    capsys.readouterr()
    assert main(["revert", "--db", db, "--thread", key, "--reason", "from the CLI", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["action"] == "revert" and out["operator"] == svc.store.operator() and out["history_ids"]
    assert main(["audit", "--db", db, "--thread", key, "--action", "revert", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["entries"]
    assert [(r["action"], r["reason"], r["operator"]) for r in rows] == [("revert", "from the CLI", svc.store.operator())]
    # --read-only: the store opens read-only (SQLite mode=ro) and a write says so in words, exit 2
    state = thread_state(svc, key)
    monkeypatch.setenv("COMPACTION_READ_ONLY", "0")  # main sets it to 1: monkeypatch puts back what was before the test
    assert main(["--read-only", "revert", "--db", db, "--thread", key, "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "read_only" and "read-only: opened with --read-only" in error["message"]
    assert thread_state(svc, key) == state and audit_of(svc, key, "redo") == []
    monkeypatch.setenv("COMPACTION_READ_ONLY", "0")
    assert main(["audit", "--db", db, "--thread", key, "--after", str(rows[-1]["id"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"entries": [], "next_after": None}


def test_a_result_a_revert_brought_back_is_not_pruned_again(make_service, new_key):
    svc = make_service(Counting())
    key = new_key("no-reprune")
    pressure_thread(svc, key)
    svc.steps.compact_for_pressure(key, RunState(), running_turn=False)
    pruned = set(svc.reads.offloads(key))
    assert svc.compaction.revert(key).action == "revert" and svc.reads.offloads(key) == {}
    svc.steps.compact_for_pressure(key, RunState(), running_turn=False)
    assert not set(svc.reads.offloads(key)) & pruned  # summarized maybe, never shown as a preview again
    assert problems(svc, key) == []
