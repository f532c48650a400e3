"""Per-thread policy (issue 23): threshold, window and retained tail set for one thread change
that thread only; the effective policy says where each value comes from (thread, model route,
store default); a value that cannot be used is refused with nothing written; each change writes
one audit row with the operator. SQLite and PostgreSQL; the CLI on SQLite."""

from __future__ import annotations

import json

import pytest

from engine.apps.cli import main as cli
from engine.compaction.compactor import RunState
from engine.core.messages import user
from engine.core.policy import PolicyError

from .conftest import MODEL, PROVIDER, WINDOW, Counting, add, finished_turns, new_thread, route
from .test_pins import audit_rows

FACTORIES = [pytest.param("make_pg_service", marks=pytest.mark.postgres), "make_service"]
#: the small policy of the conftest, with a model route that sets the summary budget
POLICY = {"context_window": WINDOW, "default": {"summary_max_tokens": 400},
          "models": [{"provider": PROVIDER, "model": MODEL, "preview_tokens": 500}]}


def thread_at(svc, key, turns):
    new_thread(svc, key)
    finished_turns(svc, key, turns)
    add(svc, key, user("And now?"))
    route(svc, key)
    return key


@pytest.mark.parametrize("factory", FACTORIES)
def test_a_thread_threshold_changes_that_thread_only(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting(), policies=POLICY)
    a = thread_at(svc, new_key("pol-a"), 15)  # ~4500 tokens: under the store's 6400, over 0.5 × 8000
    b = thread_at(svc, new_key("pol-b"), 15)
    assert svc.compaction.status(a).threshold == svc.compaction.status(b).threshold == 6400

    view = svc.steering.set_thread_policy(a, {"threshold_ratio": 0.5}, reason="this customer's agent runs long")

    assert view.threshold == 4000 and view.origins["threshold_ratio"] == "thread"
    assert view.origins["preview_tokens"] == "model route" and view.origins["summary_max_tokens"] == "store default"
    assert view.origins["context_window"] == "store default" or view.window_source in ("assumed", "catalog")
    assert svc.compaction.status(a).threshold == 4000 and svc.compaction.status(b).threshold == 6400
    assert svc.steering.thread_policy(b).origins["threshold_ratio"] == "store default"
    out_a = svc.steps.compact_for_pressure(a, RunState())
    out_b = svc.steps.compact_for_pressure(b, RunState())
    assert out_a.action == "summarized" and out_a.threshold == 4000
    assert out_b.reason == "below_threshold" and out_b.threshold == 6400
    [row] = audit_rows(svc, a)
    assert (row["action"], row["operator"], row["reason"]) == ("policy", svc.steering.operator(), "this customer's agent runs long")
    assert row["before"] == {} and row["after"] == {"threshold_ratio": 0.5}
    assert audit_rows(svc, b) == []


@pytest.mark.parametrize("factory", FACTORIES)
def test_window_and_tail_for_one_thread_and_unset(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting(), policies=POLICY)
    key = thread_at(svc, new_key("pol-window"), 3)
    view = svc.steering.set_thread_policy(key, {"context_window": 16000, "retained_tail_ratio": 0.05})
    assert (view.context_window, view.window_source, view.origins["context_window"]) == (16000, "thread", "thread")
    assert view.threshold == 12800 and view.retained_tail_tokens == 800
    assert svc.compaction.status(key).context_window == 16000
    view = svc.steering.set_thread_policy(key, unset=["context_window", "retained_tail_ratio"])
    assert view.context_window == WINDOW and view.overrides == {}
    assert [r["action"] for r in audit_rows(svc, key)] == ["policy", "policy"]


@pytest.mark.parametrize("factory", FACTORIES)
def test_an_unusable_thread_policy_is_refused_and_nothing_is_written(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting(), policies=POLICY)
    key = thread_at(svc, new_key("pol-bad"), 2)
    for bad in ({"threshold_ratio": 2}, {"no_such_key": 1}, {"threshold_tokens": 10**9}):
        with pytest.raises(PolicyError):
            svc.steering.set_thread_policy(key, bad)
    assert svc.steering.thread_policy(key).overrides == {} and audit_rows(svc, key) == []
    assert svc.store.snapshot(key).state.pins_version == 0


def test_cli_policy_set_and_show(make_service, sqlite_url, new_key, capsys):
    svc = make_service(Counting(), policies=POLICY)
    key = thread_at(svc, new_key("pol-cli"), 2)
    assert cli(["policy", "--db", sqlite_url, "--thread", key, "--set", "threshold_ratio=0.7", "--reason", "cli", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["values"]["threshold_ratio"] == {"value": 0.7, "from": "thread"}
    assert data["thread_overrides"] == {"threshold_ratio": 0.7} and data["threshold"] == data["context_window"] * 7 // 10
    assert cli(["policy", "--db", sqlite_url, "--thread", key]) == 0
    assert "from thread" in capsys.readouterr().out
    assert cli(["policy", "--db", sqlite_url, "--thread", key, "--set", "threshold_ratio=7"]) == 2
    assert "threshold_ratio" in capsys.readouterr().err
    [row] = audit_rows(svc, key)
    assert row["action"] == "policy" and row["reason"] == "cli"


def test_cli_pin_and_compact_with_instructions(make_service, sqlite_url, new_key, capsys):
    svc = make_service(Counting(), policies=POLICY)
    key = thread_at(svc, new_key("pin-cli"), 18)
    first = svc.store.messages_after(key, None)[1].id  # the first answer
    assert cli(["pin", "--db", sqlite_url, "--thread", key, "--message", str(first), "--reason", "evidence", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changed"] == [first] and data["action"] == "pin" and data["operator"]
    assert cli(["pin", "--db", sqlite_url, "--thread", key, "--list", "--json"]) == 0
    assert [p["message_id"] for p in json.loads(capsys.readouterr().out)["pins"]] == [first]
    # the CLI runs under the store's policy (a large window): this thread gets the small one
    assert cli(["policy", "--db", sqlite_url, "--thread", key, "--set", "context_window=8000"]) == 0
    capsys.readouterr()
    assert cli(["compact", "--db", sqlite_url, "--thread", key, "--instructions", "keep #3", "--reason", "cli test", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "completed" and out["instructions"] == "keep #3" and out["boundary"] > first
    assert first in {m.id for m in svc.store.snapshot(key).pinned}
    assert cli(["pin", "--db", sqlite_url, "--thread", key, "--message", str(first), "--unpin"]) == 0
    assert [r["action"] for r in audit_rows(svc, key)] == ["pin", "policy", "compact", "unpin"]
