"""Idle agent trajectories, the current request, dangling calls and closing markers (engine/core/units.py)."""

from __future__ import annotations

import pytest

from engine.core.messages import META_SYNTHETIC, Message, ToolCall, assistant, system, tool_result, user
from engine.core.units import (
    META_MISSING_RESULT,
    InvalidCut,
    assert_valid_cut,
    build_units,
    current_request,
    dangling_calls,
    is_balanced,
    is_closing_marker,
    is_request,
    late_closures,
    select_prefix,
    split_rounds,
)


class Conv:
    """Persisted history with increasing ids."""

    def __init__(self) -> None:
        self.msgs: list[Message] = []

    def _add(self, make) -> "Conv":
        self.msgs.append(make(len(self.msgs) + 1))
        return self

    def user(self, text: str = "question", **meta) -> "Conv":
        return self._add(lambda i: user(text, id=i, **meta))

    def call(self, *call_ids: str, name: str = "bash") -> "Conv":
        return self._add(lambda i: assistant("", *(ToolCall(c, name) for c in call_ids), id=i))

    def say(self, text: str = "done") -> "Conv":
        return self._add(lambda i: assistant(text, id=i))

    def result(self, call_id: str, text: str = "ok", **meta) -> "Conv":
        return self._add(lambda i: tool_result(call_id, text, id=i, **meta))

    def missing(self, call_id: str) -> "Conv":
        return self.result(call_id, "no result was recorded for this call", **{META_MISSING_RESULT: True})


def tokens(m: Message) -> int:
    return 50 if m.role == "tool" else 10


def trajectory(rounds: int = 300) -> Conv:
    c = Conv().user("Fix the failing test in tests/test_refunds.py and open a PR")
    for i in range(rounds):
        c.call(f"call-{i}").result(f"call-{i}", f"output of step {i}")
    return c


def take_all(units, *, tail_tokens: int, tail: str = "tokens"):
    return select_prefix(units, message_tokens=tokens, envelope_tokens=10**9, target_tokens=-1,
                         retained_tail_tokens=tail_tokens, recent_rounds=5, tail=tail)  # type: ignore[arg-type]


# -- idle trajectories ---------------------------------------------------------------------------


def test_a_300_round_single_request_trajectory_is_one_unit_in_the_finished_mode():
    c = trajectory()
    units = build_units(c.msgs, running_turn=False)
    assert [u.kind for u in units] == ["turn"]
    assert take_all(units, tail_tokens=1200, tail="auto").units == ()  # what made manual compaction a no-op


def test_split_last_turn_cuts_the_finished_trajectory_like_a_running_turn():
    c = trajectory()
    units = build_units(c.msgs, running_turn=False, split_last_turn=True)
    assert [u.kind for u in units] == ["turn_user"] + ["round"] * 300
    assert units == build_units(c.msgs, running_turn=True)  # the same cut as while it ran
    assert units[0].messages == (c.msgs[0],)

    sel = take_all(units, tail_tokens=1200)  # 20 rounds of 60 tokens
    assert sel.units[0].kind == "turn_user" and sel.units[0].messages[0] is c.msgs[0]  # the request goes along
    assert len(sel.units) == 1 + 280
    kept = c.msgs[len(sel.messages):]
    assert sum(map(tokens, kept)) >= 1200 and len(kept) == 40  # the newest 20 rounds stay verbatim
    assert sel.boundary == sel.messages[-1].id == 561
    assert_valid_cut(c.msgs, sel.boundary, running_turn=True)
    assert current_request(c.msgs) is c.msgs[0]  # still identifiable for the summary


def test_split_trajectory_selection_stops_at_the_target():
    c = trajectory()
    units = build_units(c.msgs, running_turn=False, split_last_turn=True)
    envelope = sum(map(tokens, c.msgs))  # 18,010
    sel = select_prefix(units, message_tokens=tokens, envelope_tokens=envelope, target_tokens=6000,
                        retained_tail_tokens=1200, recent_rounds=5, summary_tokens=lambda _r: 500, tail="tokens")
    removed = sum(map(tokens, sel.messages))
    assert envelope - removed + 500 <= 6000
    assert envelope - (removed - 60) + 500 > 6000  # one round less would not have reached it


def test_the_token_tail_keeps_at_least_the_newest_round_and_the_request_needs_a_round():
    c = trajectory(rounds=3)
    units = build_units(c.msgs, running_turn=False, split_last_turn=True)
    sel = take_all(units, tail_tokens=0)
    assert [u.kind for u in sel.units] == ["turn_user", "round", "round"]  # the newest round stays
    one = trajectory(rounds=1)
    assert take_all(build_units(one.msgs, running_turn=False, split_last_turn=True), tail_tokens=0).units == ()


def test_earlier_turns_stay_whole_and_only_the_last_turn_is_split():
    c = Conv().user("hi").say("hello").user("now do the task")
    for i in range(10):
        c.call(f"k{i}").result(f"k{i}")
    units = build_units(c.msgs, running_turn=False, split_last_turn=True)
    assert [u.kind for u in units] == ["turn", "turn_user"] + ["round"] * 10
    sel = take_all(units, tail_tokens=180)  # three rounds
    assert [u.kind for u in sel.units] == ["turn", "turn_user"] + ["round"] * 7


def test_tail_rules_are_checked():
    units = build_units(trajectory(5).msgs, running_turn=True)
    assert take_all(units, tail_tokens=0, tail="rounds").units == ()  # the 5 newest rounds are all there is
    assert len(take_all(units, tail_tokens=0, tail="tokens").units) == 5  # the request and 4 rounds
    with pytest.raises(ValueError, match="unknown tail rule 'newest'"):
        take_all(units, tail_tokens=0, tail="newest")


# -- the current request -------------------------------------------------------------------------


def test_current_request_skips_claude_code_command_output_and_meta_messages():
    c = (
        Conv()
        .user("Refactor the billing module")
        .call("t1").result("t1")
        .say("Done.")
        .user("<command-name>/exit</command-name>\n<command-message>exit</command-message>\n<command-args></command-args>")
        .user("<local-command-stdout>Goodbye!</local-command-stdout>")
        .user("Caveat: The messages below were generated by the user while running local commands. DO NOT respond.")
        .user("<system-reminder>The TodoWrite tool hasn't been used recently.</system-reminder>")
        .user("[Request interrupted by user for tool use]")
        .user("expanded skill text", meta=True)
        .user("observation: 3 files changed", tool_result=True)
        .user("   ")
    )
    c.msgs.append(Message("user", "(continue from the summary)", metadata={META_SYNTHETIC: True}))  # the compactor's
    assert current_request(c.msgs) is c.msgs[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Please fix the flaky test", True),
        ("<system-reminder>context</system-reminder>\nAlso update the changelog", True),  # real text beside a reminder
        ("Compare <b>bold</b> and <i>italic</i> rendering", True),  # other tags are just text
        ("<bash-input>ls</bash-input>", False),
        ("<bash-stdout>a.txt</bash-stdout><bash-stderr></bash-stderr>", False),
        ("<local-command-stderr>error</local-command-stderr>", False),
        ("[Request interrupted by user]", False),
        ("This session is being continued from a previous conversation that ran out of context.", False),
        ("Base directory for this skill: /home/u/.claude/skills/pdf\n\n# PDF skill", False),
        ("", False),
    ],
)
def test_is_request(text: str, expected: bool):
    assert is_request(user(text)) is expected


def test_is_request_only_for_user_messages_and_none_without_a_request():
    assert not is_request(assistant("Please fix it"))
    assert not is_request(system("Please fix it"))
    assert current_request([user("<local-command-stdout>Goodbye!</local-command-stdout>", id=1), assistant("x", id=2)]) is None
    assert current_request([]) is None


# -- dangling calls and closing markers -----------------------------------------------------------


def parallel_with_missing_results() -> Conv:
    """A 4-way parallel call with two results missing, then the work went on (a real Claude Code shape)."""
    c = Conv().user("Investigate the outage")
    c.call("a", "b", "c", "d").result("a").result("c")
    for i in range(6):
        c.call(f"n{i}").result(f"n{i}")
    return c.say("Here is what I found.")


def test_dangling_calls_are_listed_per_assistant_message_not_only_the_newest():
    c = parallel_with_missing_results()
    c.call("x", "finish", name="finish")  # the newest round: OpenHands' finish never gets a result
    c.result("x")
    found = dangling_calls(c.msgs)
    assert [(d.assistant.id, [call.id for call in d.calls]) for d in found] == [(2, ["b", "d"]), (18, ["finish"])]
    assert found[1].calls[0].name == "finish"


def test_dangling_calls_ignore_orphans_and_match_reused_ids_in_order():
    c = Conv().result("ghost").call("r").result("r").call("r").call("q").result("q")
    assert [(d.assistant.id, [x.id for x in d.calls]) for d in dangling_calls(c.msgs)] == [(4, ["r"])]
    assert dangling_calls(Conv().user("hi").say("hello").msgs) == []
    reused = Conv().call("r").call("r").result("r")  # the result belongs to the newest round, as in the units
    assert [d.assistant.id for d in dangling_calls(reused.msgs)] == [1]
    assert [r.open for r in split_rounds(reused.msgs)] == [True, False]


def test_a_missing_result_blocks_compaction_until_a_closing_marker_is_appended():
    c = parallel_with_missing_results()
    units = build_units(c.msgs, running_turn=False, split_last_turn=True)
    assert units[1].open  # the parallel round
    assert take_all(units, tail_tokens=0).units == ()  # nothing can be taken: the first round is open

    c.missing("b").result("d", "[no result was recorded in the source for this tool call]", repair="missing_result")
    assert all(is_closing_marker(m) for m in c.msgs[-2:])  # the door's flag, and an importer's repair mark
    units = build_units(c.msgs, running_turn=False, split_last_turn=True)
    assert not any(u.open for u in units)
    sel = take_all(units, tail_tokens=0)
    assert [u.kind for u in sel.units] == ["turn_user"] + ["round"] * 7  # up to the markers' round
    assert_valid_cut(c.msgs, sel.boundary, running_turn=True)
    round_end = 4  # after the results of a and c: b and d are answered by the markers after the cut
    assert_valid_cut(c.msgs, round_end, running_turn=True)
    assert is_balanced(c.msgs[:round_end], closed_later={"b", "d"})
    assert not is_balanced(c.msgs[:round_end])


def test_a_late_ordinary_result_still_keeps_its_round_open():
    c = parallel_with_missing_results().result("b", "a real but late result").result("d")
    units = build_units(c.msgs, running_turn=False, split_last_turn=True)
    assert units[1].open and late_closures(c.msgs) == {}
    with pytest.raises(InvalidCut):
        assert_valid_cut(c.msgs, 4, running_turn=True)


def test_a_closing_marker_after_a_later_user_message_closes_the_earlier_turn():
    c = Conv().user("first").call("a", "b").result("a").say("partial").user("second").say("ok")
    assert build_units(c.msgs, running_turn=False)[0].open
    c.missing("b")
    units = build_units(c.msgs, running_turn=False)
    assert [u.kind for u in units] == ["turn", "turn"] and not units[0].open
    assert [m.id for m in units[1].orphans] == [7]  # the marker is an orphan of the new turn
    assert_valid_cut(c.msgs, 4, running_turn=False)


def test_markers_in_their_own_round_change_nothing_and_split_rounds_sees_them_alone():
    c = Conv().call("a", "b").result("a").result("b", "aborted", aborted=True).call("z").missing("z")
    rounds = split_rounds(c.msgs)
    assert [r.open for r in rounds] == [False, False] and late_closures(c.msgs) == {}
    late = Conv().call("a", "b").result("a").call("z").result("z").missing("b")
    assert [r.open for r in split_rounds(late.msgs)] == [False, False]
    assert dangling_calls(late.msgs) == []
