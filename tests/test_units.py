"""Turns, tool rounds, units and cut selection (engine/units.py).

Over 500 lines on purpose: one test module per pure-core module, and units has the most edge cases
(running turns, orphans, history starting mid-turn, balanced heads) plus its Hypothesis properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.messages import Message, ToolCall, assistant, system, tool_result, user
from engine.units import (
    InvalidCut,
    InvalidHistory,
    Selection,
    Unit,
    assert_valid_cut,
    build_units,
    is_balanced,
    orphan_call_ids,
    select_overflow_head,
    select_prefix,
    split_rounds,
    split_turns,
)


class Conv:
    """Builds persisted history with increasing ids."""

    def __init__(self, start: int = 1) -> None:
        self.msgs: list[Message] = []
        self._next = start

    def _add(self, make) -> "Conv":
        self.msgs.append(make(self._next))
        self._next += 1
        return self

    def user(self, text: str = "question") -> "Conv":
        return self._add(lambda i: user(text, id=i))

    def call(self, *call_ids: str, text: str = "") -> "Conv":
        return self._add(lambda i: assistant(text, *(ToolCall(c, "search") for c in call_ids), id=i))

    def say(self, text: str = "answer") -> "Conv":
        return self._add(lambda i: assistant(text, id=i))

    def result(self, call_id: str, text: str = "result") -> "Conv":
        return self._add(lambda i: tool_result(call_id, text, id=i))

    def note(self, text: str = "ephemeral note") -> "Conv":
        self.msgs.append(system(text))  # no id: not persisted
        return self


def ten(_m: Message) -> int:
    return 10


def ids(messages) -> list[int | None]:
    return [m.id for m in messages]


def kinds(units: list[Unit]) -> list[str]:
    return [u.kind for u in units]


def largest(units, **kw) -> Selection:
    return select_prefix(units, message_tokens=ten, envelope_tokens=10_000, target_tokens=-1, **kw)


# -- splitting ---------------------------------------------------------------------------------


def test_parallel_calls_are_one_round_and_results_may_arrive_out_of_order():
    c = Conv().call("a", "b", "c").result("c").result("a").result("b").call("d").result("d")
    rounds = split_rounds(c.msgs)
    assert [ids(r.messages) for r in rounds] == [[1, 2, 3, 4], [5, 6]]
    assert [r.open for r in rounds] == [False, False]
    assert rounds[0].assistant is c.msgs[0]


def test_round_with_unanswered_call_is_open():
    c = Conv().call("a", "b").result("b")
    (r,) = split_rounds(c.msgs)
    assert r.open and r.orphans == ()


def test_text_only_assistant_is_a_round_of_its_own():
    c = Conv().say("thinking").call("a").result("a").say("done")
    rounds = split_rounds(c.msgs)
    assert [ids(r.messages) for r in rounds] == [[1], [2, 3], [4]]
    assert not any(r.open for r in rounds)


def test_split_rounds_rejects_a_user_message():
    with pytest.raises(InvalidHistory, match="user message"):
        split_rounds(Conv().user().say().msgs)


def test_late_result_keeps_its_round_open_and_is_not_an_orphan():
    c = Conv().call("a").call("b").result("b").result("a")
    rounds = split_rounds(c.msgs)
    assert [r.open for r in rounds] == [True, False]
    assert rounds[1].orphans == ()


def test_reused_call_ids_across_rounds_are_matched_per_round():
    c = Conv().call("call_0").result("call_0").call("call_0").result("call_0")
    rounds = split_rounds(c.msgs)
    assert [r.open for r in rounds] == [False, False]
    assert all(r.orphans == () for r in rounds)
    assert is_balanced(c.msgs)


def test_split_turns_cuts_at_user_messages_and_leading_notes_join_the_first_turn():
    c = Conv().note().user().say().user().call("a").result("a")
    turns = split_turns(c.msgs)
    assert [len(t.messages) for t in turns] == [3, 3]
    assert turns[0].user is c.msgs[1] and turns[1].user is c.msgs[3]


def test_history_without_user_message_is_one_headless_turn():
    c = Conv(40).result("gone").call("a").result("a").say()
    (turn,) = split_turns(c.msgs)
    assert turn.user is None and ids(turn.messages) == [40, 41, 42, 43]


def test_empty_input():
    assert split_turns([]) == [] and split_rounds([]) == []
    assert build_units([], running_turn=True) == [] and build_units([], running_turn=False) == []
    for running in (True, False):
        sel = largest(build_units([], running_turn=running))
        assert sel == Selection((), None, 0)
    assert select_overflow_head([], message_tokens=ten) == Selection((), None, 0)


def test_ids_out_of_order_fail_loudly():
    msgs = [user("a", id=5), assistant("b", id=3)]
    with pytest.raises(InvalidHistory, match="3 follows 5"):
        build_units(msgs, running_turn=False)


# -- units -------------------------------------------------------------------------------------


def test_finished_history_is_one_unit_per_turn():
    c = Conv().user().call("a", "b").result("b").result("a").say().user().say()
    units = build_units(c.msgs, running_turn=False)
    assert kinds(units) == ["turn", "turn"]
    assert [(u.first_id, u.last_id) for u in units] == [(1, 5), (6, 7)]


def test_running_turn_is_user_unit_then_rounds_with_open_round_marked():
    c = Conv().user().say().user().call("a").result("a").say("x").call("b", "c").result("c")
    units = build_units(c.msgs, running_turn=True)
    assert kinds(units) == ["turn", "turn_user", "round", "round", "round"]
    assert [u.open for u in units] == [False, False, False, False, True]
    assert ids(units[1].messages) == [3]


def test_finished_turn_with_open_round_is_open():
    c = Conv().user().call("a").user().say()
    units = build_units(c.msgs, running_turn=False)
    assert [u.open for u in units] == [True, False]
    assert largest(units).units == ()


def test_result_after_the_next_user_message_keeps_the_earlier_turn_open():
    c = Conv().user().call("a").user().result("a").say().user().say()
    units = build_units(c.msgs, running_turn=False)
    assert [u.open for u in units] == [True, False, False]
    assert largest(units).units == ()


def test_orphans_at_head_go_with_the_user_message():
    c = Conv().user().result("gone").call("a").result("a")
    (unit,) = build_units(c.msgs, running_turn=False)
    assert ids(unit.orphans) == [2] and not unit.open
    running = build_units(c.msgs, running_turn=True)
    assert kinds(running) == ["turn_user", "round"]
    assert ids(running[0].messages) == [1, 2] and ids(running[0].orphans) == [2]


def test_orphans_without_user_are_their_own_head_unit():
    c = Conv(10).result("gone1").result("gone2").call("a").result("a").call("b").result("b")
    units = build_units(c.msgs, running_turn=True)
    assert kinds(units) == ["round", "round", "round"]
    assert ids(units[0].orphans) == [10, 11] and units[0].messages == units[0].orphans
    sel = largest(units, recent_rounds=1)
    assert sel.boundary == 13 and not is_balanced(sel.messages)
    assert is_balanced(sel.messages, known_orphans=orphan_call_ids(c.msgs))


def test_history_starting_with_assistant_after_a_boundary_inside_a_turn():
    c = Conv(100).call("a").result("a").say("x").call("b").result("b")
    units = build_units(c.msgs, running_turn=True)
    assert kinds(units) == ["round", "round", "round"]
    sel = largest(units, recent_rounds=1)
    assert sel.boundary == 102 and ids(sel.messages) == [100, 101, 102]
    finished = build_units(c.msgs, running_turn=False)
    assert kinds(finished) == ["turn"] and largest(finished).units == ()


def test_system_messages_without_id_ride_along():
    c = Conv().user().note().call("a", "b").result("a").note().result("b").note().say()
    units = build_units(c.msgs, running_turn=True)
    assert kinds(units) == ["turn_user", "round", "round"]
    assert [len(u.messages) for u in units] == [2, 5, 1]
    assert not units[1].open and units[1].last_id == 4
    sel = largest(units, recent_rounds=1)
    assert sel.boundary == 4 and list(sel.messages) == c.msgs[:7]
    assert_valid_cut(c.msgs, sel.boundary)


def test_headless_notes_before_first_assistant_ride_with_first_round():
    c = Conv(7).note().call("a").result("a").say()
    units = build_units(c.msgs, running_turn=True)
    assert kinds(units) == ["round", "round"] and len(units[0].messages) == 3


def test_unit_without_persisted_id_is_never_taken():
    units = build_units([system("note"), system("other")], running_turn=True)
    assert kinds(units) == ["round"] and units[0].first_id is None
    assert largest(units).units == ()


def test_unit_rejects_unknown_kind_and_empty_messages():
    with pytest.raises(ValueError, match="kind"):
        Unit("chunk", (user("x", id=1),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        Unit("turn", ())


# -- select_prefix -----------------------------------------------------------------------------


def five_turns() -> Conv:
    c = Conv()
    for n in range(5):
        c.user(f"q{n}").call(f"c{n}").result(f"c{n}").say(f"a{n}")
    return c  # 4 messages = 40 tokens per turn


def test_target_reached_early_stops():
    units = build_units(five_turns().msgs, running_turn=False)
    sel = select_prefix(units, message_tokens=ten, envelope_tokens=300, target_tokens=230)
    assert len(sel.units) == 2 and sel.removed_tokens == 80 and sel.boundary == 8
    assert select_prefix(units, message_tokens=ten, envelope_tokens=300, target_tokens=300).units == ()


def test_summary_estimate_counts_in_the_projection():
    units = build_units(five_turns().msgs, running_turn=False)
    sel = select_prefix(
        units, message_tokens=ten, envelope_tokens=300, target_tokens=230, summary_tokens=lambda removed: 25
    )
    assert len(sel.units) == 3  # 300-80+25 = 245 > 230; 300-120+25 = 205


def test_retained_tail_is_respected_and_at_least_the_newest_unit():
    units = build_units(five_turns().msgs, running_turn=False)
    assert len(largest(units).units) == 4
    assert len(largest(units, retained_tail_tokens=41).units) == 3
    assert len(largest(units, retained_tail_tokens=80).units) == 3
    assert len(largest(units, retained_tail_tokens=10_000).units) == 0


def test_unreachable_target_returns_the_largest_allowed_prefix():
    units = build_units(five_turns().msgs, running_turn=False)
    sel = select_prefix(units, message_tokens=ten, envelope_tokens=200, target_tokens=0, retained_tail_tokens=40)
    assert len(sel.units) == 4 and sel.removed_tokens == 160


def test_max_units_caps_the_batch():
    units = build_units(five_turns().msgs, running_turn=False)
    assert len(largest(units, max_units=2).units) == 2


def test_negative_parameters_are_rejected():
    with pytest.raises(ValueError, match="negative"):
        largest([], recent_rounds=-1)


def running_turn(rounds: int) -> Conv:
    c = Conv().user("old").say("old answer").user("now")
    for n in range(rounds):
        c.call(f"r{n}").result(f"r{n}")
    return c  # turn(2) turn_user(1) round(2)*rounds


def test_recent_rounds_are_respected_in_the_running_turn():
    units = build_units(running_turn(4).msgs, running_turn=True)
    sel = largest(units, recent_rounds=2)
    assert kinds(list(sel.units)) == ["turn", "turn_user", "round", "round"]
    assert sel.boundary == 7
    assert len(largest(units, recent_rounds=4).units) == 1  # only the finished turn


def test_token_tail_does_not_apply_to_the_running_turn():
    units = build_units(running_turn(3).msgs, running_turn=True)
    sel = largest(units, recent_rounds=1, retained_tail_tokens=10_000)
    assert sel.boundary == 7


def test_turn_user_only_with_a_round_after_it():
    units = build_units(running_turn(2).msgs, running_turn=True)
    # the target is reached after the finished turn: the user message alone is never a step
    sel = select_prefix(units, message_tokens=ten, envelope_tokens=100, target_tokens=85, recent_rounds=1)
    assert kinds(list(sel.units)) == ["turn"]
    sel = select_prefix(units, message_tokens=ten, envelope_tokens=100, target_tokens=75, recent_rounds=1)
    assert kinds(list(sel.units)) == ["turn", "turn_user", "round"] and sel.removed_tokens == 50
    # the only round after it is protected or open: stop before the user message
    assert kinds(list(largest(units, recent_rounds=2).units)) == ["turn"]
    c = running_turn(0).call("x")
    assert kinds(list(largest(build_units(c.msgs, running_turn=True)).units)) == ["turn"]
    assert kinds(list(largest(units, max_units=2).units)) == ["turn"]


def test_open_round_is_never_taken():
    c = running_turn(1).call("a", "b").result("a").call("c").result("c")
    units = build_units(c.msgs, running_turn=True)
    assert [u.open for u in units] == [False, False, False, True, False]
    assert largest(units).boundary == 5
    assert select_overflow_head(units, message_tokens=ten).boundary == 5


# -- overflow head -----------------------------------------------------------------------------


def test_overflow_head_keeps_the_newest_unit():
    units = build_units(five_turns().msgs, running_turn=False)
    sel = select_overflow_head(units, message_tokens=ten)
    assert len(sel.units) == 4 and sel.boundary == 16 and sel.removed_tokens == 160
    running = build_units(running_turn(1).msgs, running_turn=True)
    assert kinds(list(select_overflow_head(running, message_tokens=ten).units)) == ["turn"]
    running = build_units(running_turn(2).msgs, running_turn=True)
    assert select_overflow_head(running, message_tokens=ten).boundary == 5


# -- balance and cut checks --------------------------------------------------------------------


def test_is_balanced():
    c = Conv().call("a", "b").result("b").result("a")
    assert is_balanced(c.msgs)
    assert not is_balanced(c.msgs[:2])
    assert not is_balanced(c.msgs[1:])
    assert not is_balanced(c.msgs[1:], known_orphans={"b"})  # a is still orphaned
    assert is_balanced(c.msgs[2:], known_orphans={"a"})


def test_assert_valid_cut():
    c = Conv().user().call("a", "b").result("a").result("b").say().user("now").call("c").result("c").say()
    assert_valid_cut(c.msgs, None)
    assert_valid_cut(c.msgs, 5, running_turn=False)
    assert_valid_cut(c.msgs, 8)
    with pytest.raises(InvalidCut, match="splits a tool round"):
        assert_valid_cut(c.msgs, 3)
    with pytest.raises(InvalidCut, match="does not end a unit"):
        assert_valid_cut(c.msgs, 4)
    with pytest.raises(InvalidCut, match="does not end a unit"):
        assert_valid_cut(c.msgs, 8, running_turn=False)
    with pytest.raises(InvalidCut, match="without a round"):
        assert_valid_cut(c.msgs, 6)
    with pytest.raises(InvalidCut, match="not a message in view"):
        assert_valid_cut(c.msgs, 99)


# -- properties --------------------------------------------------------------------------------


@st.composite
def conversations(draw) -> list[Message]:
    """Valid random histories: parallel calls in any order, text rounds, open rounds, late results,
    head orphans, headless starts, reused call ids, unpersisted notes, gaps in ids."""
    out: list[Message] = []
    next_id = draw(st.integers(1, 50))
    counter = iter(range(10**6))
    reuse_ids = draw(st.booleans())
    deferred: list[str] = []

    def pid() -> int:
        nonlocal next_id
        next_id += draw(st.integers(1, 3))
        return next_id

    def text() -> str:
        return "x" * draw(st.integers(0, 60))

    def maybe_note() -> None:
        if draw(st.integers(0, 9)) == 0:
            out.append(system(text()))

    def orphans() -> None:
        for _ in range(draw(st.integers(0, 2))):
            out.append(tool_result(f"gone{next(counter)}", text(), id=pid()))

    def one_round(force_open: bool = False) -> None:
        n_calls = draw(st.integers(1 if force_open else 0, 3))
        calls = [f"call_{k}" if reuse_ids else f"c{next(counter)}" for k in range(n_calls)]
        out.append(assistant(text(), *(ToolCall(c, "tool") for c in calls), id=pid()))
        answered = draw(st.permutations(calls))
        if calls and (force_open or draw(st.integers(0, 19)) == 0):  # open round
            cut = draw(st.integers(0, len(calls) - 1))
            if draw(st.booleans()):
                deferred.extend(answered[cut:])  # the missing results arrive late
            answered = answered[:cut]
        for c in answered:
            maybe_note()
            out.append(tool_result(c, text(), id=pid()))
        maybe_note()

    def flush_deferred() -> None:
        while deferred:
            out.append(tool_result(deferred.pop(), text(), id=pid()))

    headless = draw(st.booleans())
    if headless:
        orphans()
        for _ in range(draw(st.integers(0, 3))):
            one_round()
    for _ in range(draw(st.integers(0, 5))):
        maybe_note()
        out.append(user(text(), id=pid()))
        if not headless and draw(st.integers(0, 4)) == 0:
            orphans()
        for r in range(draw(st.integers(0, 4))):
            one_round()
            if r and draw(st.booleans()):
                flush_deferred()
    if draw(st.booleans()):  # the running turn's newest round waits for results
        one_round(force_open=True)
    return out


def tokens(m: Message) -> int:
    return len(m.content) + 3


def cost(messages) -> int:
    return sum(tokens(m) for m in messages)


def round_cut_points(messages: list[Message]) -> set[int]:
    """Indices where a cut separates no tool round (turn starts, user-message ends, round starts)."""
    points, pos = {0, len(messages)}, 0
    for turn in split_turns(messages):
        points.add(pos)
        if turn.user is not None:
            cut = next(i for i, m in enumerate(turn.messages) if m is turn.user) + 1
            points.add(pos + cut)
            rest, pos = turn.messages[cut:], pos + cut
        else:
            rest = turn.messages
        for r in split_rounds(rest):
            points.add(pos)
            pos += len(r.messages)
    return points


def overflow_oracle(units: list[Unit]) -> int:
    """How many units overflow recovery takes, computed the naive way."""
    k = 0
    while k < len(units) - 1 and not units[k].open and units[k].last_id is not None:
        k += 1
    if k and units[k - 1].kind == "turn_user":
        k -= 1
    return k


FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(conversations(), st.booleans())
def test_property_splits_partition_the_history(msgs, running):
    turns = split_turns(msgs)
    assert [m for t in turns for m in t.messages] == msgs
    assert all(t.user is not None for t in turns[1:])  # only the first turn may lack a user
    units = build_units(msgs, running_turn=running)
    assert [m for u in units for m in u.messages] == msgs
    assert all(o in u.messages and o.role == "tool" for u in units for o in u.orphans)
    for turn in turns:
        for r in split_rounds([m for m in turn.messages if m is not turn.user]):
            if r.assistant is None:  # head group: orphans and notes only
                assert not r.open and all(m.role in ("tool", "system") for m in r.messages)
                continue
            assert r.messages[0] is r.assistant or r.messages[0].role == "system"
            results = Counter(m.tool_call_id for m in r.messages if m.role == "tool")
            assert r.open == bool(Counter(r.assistant.call_ids) - results)


@FAST
@given(
    conversations(),
    st.booleans(),
    st.integers(0, 400),
    st.integers(0, 6),
    st.integers(-1, 400),
    st.integers(0, 200),
    st.one_of(st.none(), st.integers(0, 60)),
    st.one_of(st.none(), st.integers(0, 8)),
)
def test_property_select_prefix(msgs, running, tail, recent, target_gap, extra, summary, max_units):
    units = build_units(msgs, running_turn=running)
    envelope = cost(msgs) + extra
    target = envelope - target_gap if target_gap >= 0 else -1

    def estimate(removed: int) -> int:
        return 0 if summary is None else min(removed, summary)

    sel = select_prefix(
        units,
        message_tokens=tokens,
        envelope_tokens=envelope,
        target_tokens=target,
        retained_tail_tokens=tail,
        recent_rounds=recent,
        summary_tokens=estimate,
        max_units=max_units,
    )
    k = len(sel.units)
    cut = len(sel.messages)
    # a contiguous prefix ending on a unit boundary, never splitting a tool round
    assert sel.units == tuple(units[:k])
    assert list(sel.messages) == msgs[:cut]
    assert cut in round_cut_points(msgs)
    assert sel.boundary == next((m.id for m in reversed(sel.messages) if m.id is not None), None)
    assert is_balanced(sel.messages, known_orphans=orphan_call_ids(msgs))
    assert_valid_cut(msgs, sel.boundary, running_turn=running)
    assert sel.removed_tokens == cost(sel.messages)
    # never an open unit; the user message of the running turn only with a round after it
    assert not any(u.open for u in sel.units)
    assert not sel.units or sel.units[-1].kind != "turn_user"
    assert max_units is None or k <= max_units
    # protected tail
    rest = units[k:]
    if any(u.kind != "turn" for u in units):
        total_rounds = sum(u.kind == "round" for u in units)
        assert sum(u.kind == "round" for u in rest) >= min(recent, total_rounds)
    elif units:
        assert rest and cost(m for u in rest for m in u.messages) >= min(tail, cost(msgs))

    # stop as soon as the target is reached; otherwise the largest allowed prefix
    def projected(removed: int) -> int:
        return envelope - removed + estimate(removed)

    if k:
        step = 2 if k >= 2 and sel.units[-2].kind == "turn_user" else 1
        assert projected(cost(m for u in sel.units[:-step] for m in u.messages)) > target
    if projected(sel.removed_tokens) > target:
        widest = select_prefix(
            units,
            message_tokens=tokens,
            envelope_tokens=envelope,
            target_tokens=-1,
            retained_tail_tokens=tail,
            recent_rounds=recent,
            max_units=max_units,
        )
        assert widest == sel


@FAST
@given(conversations(), st.booleans())
def test_property_overflow_head(msgs, running):
    units = build_units(msgs, running_turn=running)
    sel = select_overflow_head(units, message_tokens=tokens)
    k = len(sel.units)
    assert sel.units == tuple(units[:k])
    assert not units or k < len(units)  # the newest unit is kept
    assert k == overflow_oracle(units)
    assert not any(u.open for u in sel.units)
    assert is_balanced(sel.messages, known_orphans=orphan_call_ids(msgs))
    assert len(sel.messages) in round_cut_points(msgs)
    assert_valid_cut(msgs, sel.boundary, running_turn=running)
    assert sel.removed_tokens == cost(sel.messages)
    if not running:  # finished history: same as the widest prefix with no token tail
        assert sel == select_prefix(units, message_tokens=tokens, envelope_tokens=cost(msgs), target_tokens=-1)
