"""swe-agent: classic trajectories (observations become tool results) and function-calling ones."""

from __future__ import annotations

import json

from engine.importers import MISSING_RESULT_TEXT, parse

from .helpers import FIXTURES, rows

CLASSIC = FIXTURES / "swe-agent" / "classic" / "calc__calc-1.traj"
FC = FIXTURES / "swe-agent" / "function-calling" / "calc__calc-2.traj"


def test_classic_observations_are_tool_results_of_the_action_before_them():
    (s,) = parse(CLASSIC)
    assert rows(s) == [
        ("system", "h0", "SETTING: You are an autonomous programmer working in a command line.", (), None, None, False,
         None, None),
        ("user", "h1", "Here is a demonstration of how to correctly accomplish this task.\n--- DEMONSTRATION ---\n...",
         (), None, None, False, "demo", None),
        ("user", "h2", "We're currently solving the following issue within our repository.\nISSUE:\nadd() subtracts.\n\n"
         "(Open file: n/a)\nbash-$", (), None, None, False, None, None),
        ("assistant", "h3", "DISCUSSION\nFirst find the file.\n", (("swe-3", "find_file"),), None, None, False, None, None),
        ("tool", "h4", "Found 1 matches for \"calc.py\" in /repo:\n/repo/calc.py\n(Open file: n/a)\nbash-$", (), "swe-3",
         "find_file", False, None, None),
        ("assistant", "h5", "DISCUSSION\nOpen it.\n", (("swe-5", "open"),), None, None, False, None, None),
        ("tool", "h6", "[File: /repo/calc.py (2 lines total)]\n1:def add(a, b):\n2:    return a - b\n"
         "(Open file: /repo/calc.py)\nbash-$", (), "swe-5", "open", False, None, None),
        ("assistant", "h7", "DISCUSSION\nThe sign is wrong; fix and submit.\n", (("swe-7", "submit"),), None, None,
         False, None, None),
        ("tool", "h7#missing:swe-7", MISSING_RESULT_TEXT, (), "swe-7", "submit", False, None, "missing_result"),
    ]
    assert s.messages[1].meta and not s.messages[2].meta
    call = s.messages[3].tool_calls[0]
    assert call.synthetic_id and json.loads(call.arguments) == {"command": "find_file calc.py\n"}
    assert (s.source_session_id, s.model) == ("calc__calc-1", "gpt-4o-2024-08-06")
    assert s.extra["exit_status"] == "submitted" and s.extra["model_stats"]["api_calls"] == 3
    assert s.usage == ()  # model_stats are cumulative totals, not per-request prompt sizes


def test_function_calling_trajectory():
    (s,) = parse(FC)
    assert rows(s) == [
        ("system", "h0", "You are a helpful assistant that can interact with a computer.", (), None, None, False, None,
         None),
        ("user", "h1", "<uploaded_files>\n/repo\n</uploaded_files>\nFix add() in calc.py.", (), None, None, False, None,
         None),
        ("assistant", "h2", "Look at the file and run the tests.", (("call_F1", "str_replace_editor"), ("call_F2", "bash")),
         None, None, False, None, None),
        ("tool", "h3", "OBSERVATION:\n     1\tdef add(a, b):\n     2\t    return a - b", (), "call_F1",
         "str_replace_editor", False, None, None),
        ("tool", "h4", "OBSERVATION:\nF [100%]\n1 failed", (), "call_F2", "bash", False, None, None),
        ("assistant", "h5", "Fix the sign.", (("call_F3", "str_replace_editor"),), None, None, False, None, None),
        ("tool", "h6", "Exited (autosubmitted)", (), "call_X0", None, False, None, "orphan"),
        ("tool", "h5#missing:call_F3", MISSING_RESULT_TEXT, (), "call_F3", "str_replace_editor", False, None,
         "missing_result"),
    ]
    assert s.model == "claude-sonnet-4-20250514" and dict(s.skipped) == {"role:critic": 1}
    assert [str(w) for w in s.warnings] == [
        f"{FC}: history[4]: one observation for 2 calls; kept as the result of the first",
        f"{FC}: history[7]: unknown role 'critic'; skipped",
    ]


def test_trajectory_without_history_is_read_from_its_steps(tmp_path):
    data = json.loads(CLASSIC.read_text())
    data["history"] = []
    path = tmp_path / "x.traj"
    path.write_text(json.dumps(data))
    (s,) = parse(path)
    assert [(m.role, m.source_key, m.tool_call_id, m.repair) for m in s.messages] == [
        ("assistant", "t0", None, None), ("tool", "t0.obs", "swe-t0", None),
        ("assistant", "t1", None, None), ("tool", "t1.obs", "swe-t1", None),
        ("assistant", "t2", None, None), ("tool", "t2.obs", "swe-t2", None),
    ]
    assert [c.name for m in s.messages for c in m.tool_calls] == ["find_file", "open", "submit"]
