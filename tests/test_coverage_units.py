"""Any turn is divisible at its tool rounds (issue 25): a finished turn is cut into its request and
one unit per round when the compactor asks (``split_turn``), whatever follows it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.compaction.plan import turn_over
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.units import InvalidCut, assert_valid_cut, build_units, select_prefix


def with_ids(messages: list[Message]) -> list[Message]:
    return [replace(m, id=i + 1) for i, m in enumerate(messages)]


def long_turn(rounds: int = 6) -> list[Message]:
    out: list[Message] = [user("fix the checkout race")]
    for i in range(rounds):
        call = ToolCall(f"c{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
        out += [assistant(f"step {i}", call), tool_result(call.id, f"output {i}", name="read_file")]
    out.append(assistant("done"))
    return out


def ten(_m: Message) -> int:
    return 10


def test_a_finished_turn_followed_by_a_request_is_one_unit_unless_split():
    msgs = with_ids(long_turn() + [user("now write the release note")])
    whole = build_units(msgs, running_turn=False, split_last_turn=True)
    assert [u.kind for u in whole] == ["turn", "turn_user"]  # the old rule: indivisible

    split = build_units(msgs, running_turn=False, split_last_turn=True, split_turn=lambda t: True)
    assert [u.kind for u in split] == ["turn_user"] + ["round"] * 7 + ["turn_user"]
    assert split[0].messages[0].content == "fix the checkout race" and split[-1].messages[-1].content == "now write the release note"


def test_only_turns_over_the_size_are_split_and_the_last_turn_is_left_to_its_own_rule():
    small = [user("hi"), assistant("hello")]
    msgs = with_ids(small + long_turn() + small)
    over = turn_over(100, ten)  # the long turn is 14 messages = 140 tokens, the small ones 20
    units = build_units(msgs, running_turn=False, split_turn=over)
    assert [u.kind for u in units] == ["turn", "turn_user"] + ["round"] * 7 + ["turn"]


def test_an_open_finished_turn_is_never_split():
    call = ToolCall("x", "grep", "{}")
    msgs = with_ids([user("a"), assistant("call", call), assistant("went on without the result"), user("b")])
    units = build_units(msgs, running_turn=False, split_turn=lambda t: True)
    assert [u.kind for u in units] == ["turn", "turn"] and units[0].open


def test_selection_keeps_the_current_request_and_the_newest_rounds():
    msgs = with_ids(long_turn() + [user("now write the release note")])
    units = build_units(msgs, running_turn=False, split_last_turn=True, split_turn=lambda t: True)
    sel = select_prefix(units, message_tokens=ten, envelope_tokens=len(msgs) * 10, target_tokens=-1, retained_tail_tokens=40, tail="tokens")
    kept = [m for m in msgs if m.id > sel.boundary]
    assert kept[-1].content == "now write the release note"  # the current request stays verbatim
    assert [m.content for m in kept[:-1]] == ["step 5", "output 5", "done"]  # and the rounds it follows (the tail)
    assert sel.units[0].kind == "turn_user" and sel.units[-1].kind == "round"  # the old request goes with its rounds
    assert_valid_cut(msgs, sel.boundary, split_turn=lambda t: True)
    with pytest.raises(InvalidCut):  # without the split, a round end inside a finished turn is no unit end
        assert_valid_cut(msgs, sel.boundary, running_turn=False)
