"""The summary budget rule (issue 25): it follows the window and the identifier density, bounded,
and never more than what keeps the envelope after the compaction at or under the target."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from engine.compaction.plan import (
    identifier_budget,
    request_budgets,
    room_after,
    span_identifiers,
    summary_budget,
    summary_ceiling,
    summary_estimate,
    tail_gives_way,
)
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.policy import (
    SUMMARY_MIN_TOKENS,
    SUMMARY_TOKENS_PER_IDENTIFIER,
    CompactionPolicy,
    PolicyError,
    ResolvedPolicy,
    summary_total_tokens,
)
from engine.core.units import build_units, select_prefix

WINDOWS = (32_768, 200_000, 1_000_000)
SPARSE, DENSE = 0, 2_000  # distinct identifiers the summary has to carry


def resolved(window: int, **policy: object) -> ResolvedPolicy:
    return ResolvedPolicy(CompactionPolicy(**policy), window, "p", "m", "override")  # type: ignore[arg-type]


@pytest.mark.parametrize("window", WINDOWS)
def test_the_budget_follows_the_window_and_the_density_within_its_bounds(window):
    target = resolved(window).target_tokens
    sparse = summary_total_tokens(window, target, SPARSE)
    dense = summary_total_tokens(window, target, DENSE)
    assert sparse == window // 16  # a sixteenth of the window when nothing dense is carried
    ceiling = target * 3 // 5
    assert dense == min(window // 16 + SUMMARY_TOKENS_PER_IDENTIFIER * DENSE, ceiling)
    assert sparse < dense <= ceiling  # denser spans get more, never more than 3/5 of the target
    assert summary_total_tokens(window, target, 10**9) == ceiling  # the ceiling holds whatever the density


def test_three_windows_two_densities_exact_figures():
    # window → (target, sparse, dense): 32k: 13,107 → 2,048 / 7,864 (the ceiling, 3/5); 200k: 80,000 → 12,500 /
    # 36,500; 1M: 400,000 → 62,500 / 86,500 (12 tokens per identifier). The old fixed budget was 8,192 (at most a quarter of the target).
    figures = {w: (resolved(w).target_tokens, summary_total_tokens(w, resolved(w).target_tokens, SPARSE),
                   summary_total_tokens(w, resolved(w).target_tokens, DENSE)) for w in WINDOWS}
    assert figures == {32_768: (13_107, 2_048, 7_864), 200_000: (80_000, 12_500, 36_500), 1_000_000: (400_000, 62_500, 86_500)}


def test_the_room_caps_the_budget_and_the_floor_holds():
    assert summary_total_tokens(200_000, 80_000, DENSE, room=5_000) == 5_000  # what keeps the result under the target
    assert summary_total_tokens(200_000, 80_000, DENSE, room=-40) == SUMMARY_MIN_TOKENS  # never below the floor
    assert summary_total_tokens(1_024, 409, 0) == SUMMARY_MIN_TOKENS
    with pytest.raises(PolicyError):
        summary_total_tokens(0, 10)
    with pytest.raises(PolicyError):
        summary_total_tokens(32_768, 13_107, -1)


@pytest.mark.parametrize("window", WINDOWS)
def test_a_request_splits_the_total_into_prose_and_identifier_room(window):
    pol = resolved(window)
    for density in (SPARSE, DENSE):
        total = summary_ceiling(pol, density)
        max_tokens, ids = request_budgets(pol, identifiers=density, room=None, request_tokens=None)
        assert max_tokens == min(summary_budget(pol), total) and max_tokens + ids == max(total, max_tokens)
        assert ids == identifier_budget(pol, max_tokens, identifiers=density)
    # a long current request is always allowed its own length + 256, whatever the rule gives
    max_tokens, _ = request_budgets(pol, identifiers=0, room=300, request_tokens=5_000)
    assert max_tokens == 5_256


def test_the_projection_of_a_new_summary():
    pol = resolved(131_072)
    framing = 12
    estimate = summary_estimate(pol, framing=framing, previous_summary=18_000 + framing)
    assert estimate(0) == 0
    # a quarter of what it replaces (the previous summary included), at most the ceiling
    assert estimate(40_000) == framing + (40_000 + 18_000) // 4
    assert estimate(10**7) == framing + summary_ceiling(pol)
    assert summary_ceiling(pol) == math.floor(pol.target_tokens * 3 / 5)
    # the room: the target minus what stays after the compaction
    assert room_after(52_428, envelope=108_000, removed=70_000, previous_summary=18_012, framing=12) == 52_428 - (108_000 - 70_000 - 18_012) - 12
    # the target out of reach whatever the summary (below the floor): the room is the previous summary's text,
    # not the floor, so the last call allowed carries what the previous summary carried
    assert room_after(52_428, envelope=600_000, removed=90_000, previous_summary=18_012, framing=12) == 18_000
    assert room_after(52_428, envelope=600_000, removed=90_000, previous_summary=0, framing=12) < 0  # no previous summary: as it was


def test_span_identifiers_counts_distinct_identifiers_not_visible_elsewhere():
    call = ToolCall("c1", "read_file", '{"path": "src/app/main.py"}')
    msgs = [user("look at src/app/main.py"), assistant("reading", call),
            tool_result("c1", "see src/app/util.py and https://docs.example.com/a and doc-123456 and src/app/util.py", name="read_file")]
    assert span_identifiers(msgs) == 4
    assert span_identifiers(msgs, "previous: doc-999999") == 5
    assert span_identifiers(msgs, visible=["doc-123456 stays"]) == 3
    # a previous summary's grouped identifiers count as their members (src/app/b.py, doc-999998, doc-999999 are new)
    assert span_identifiers(msgs, "- src/app/{main,util,b}.py\n- doc-{999998,999999}") == 7


def test_the_verbatim_request_is_not_counted_in_the_summary_ceiling():
    pol = resolved(6_417)  # the 20-round SWE-agent trajectory's window (benchmarks/real_corpus.py): target 2,566
    ceiling = summary_ceiling(pol, 220)
    assert ceiling == math.floor(pol.target_tokens * 3 / 5)  # 1,539: it binds
    max_tokens, ids = request_budgets(pol, identifiers=220, room=None, request_tokens=1_044)
    assert max_tokens == 1_044 + 256 and max_tokens + ids == ceiling + 1_044  # the ceiling is the summary's, beside the request
    # a sparse range: the rule's total (window / 16) beside a short request
    assert sum(request_budgets(pol, identifiers=0, room=None, request_tokens=40)) == summary_ceiling(pol, 0) + 40 == 6_417 // 16 + 40
    max_tokens, ids = request_budgets(pol, identifiers=220, room=2_000, request_tokens=1_044)
    assert max_tokens + ids == 2_000  # never more than the room
    assert request_budgets(pol, identifiers=220, room=2_000, request_tokens=None) == (summary_budget(pol), ceiling - summary_budget(pol))


def _count_text(text: str) -> int:
    return len(text) // 4 + 1


def _count_message(m) -> int:
    return _count_text(m.content) + sum(_count_text(c.arguments) for c in m.tool_calls) + 4


def _trajectory(rounds: str) -> list:
    """One request, then one round per letter: ``p`` a search naming 12 paths, ``f`` a 60-line file
    read naming one, ``w`` words only; persisted ids 1, 2, ..."""
    msgs = [user("Fix the quoted header bug. " + "Follow the instructions. " * 60)]
    for r, kind in enumerate(rounds):
        call = ToolCall(f"c{r}", "bash", '{"cmd": "step"}')
        if kind == "p":
            out = "\n".join(f"/repo/pkg/mod{r:02d}_{i:02d}/reader_{i:03d}.py" for i in range(12))
        elif kind == "f":
            out = f"[File: /repo/pkg/file_{r:03d}.py]\n" + "\n".join(f"{i}: parse the header row and strict value buffer" for i in range(60))
        else:
            out = "ok " * 200
        msgs += [assistant(f"step {r}", call), tool_result(f"c{r}", out, name="bash")]
    return [replace(m, id=i + 1) for i, m in enumerate(msgs)]


def _give_way(msgs, *, target: int, tail_units: int):
    units = build_units(msgs, running_turn=False, split_last_turn=True)
    tail = sum(_count_message(m) for u in units[-tail_units:] for m in u.messages)
    sel = select_prefix(units, message_tokens=_count_message, envelope_tokens=sum(map(_count_message, msgs)), target_tokens=-1,
                        retained_tail_tokens=tail, tail="tokens")
    assert len(units) - len(sel.units) == tail_units
    envelope = sum(map(_count_message, msgs))
    out = tail_gives_way(units, sel, _count_message, _count_text, envelope=envelope, target=target, previous_summary=0,
                         previous_text=None, request=msgs[0].content)
    return units, sel, out


def test_the_retained_tail_gives_way_to_identifiers_that_would_not_fit():
    msgs = _trajectory("pppfpfp")  # the tail: a file read (1 path, ~800 tokens), then a search (12 paths)
    units, sel, out = _give_way(msgs, target=1_500, tail_units=2)
    assert len(out.units) == len(units) - 1  # the file read gave way; the newest round stays, whatever the need
    assert out.boundary == units[-2].last_id and out.removed_tokens == sel.removed_tokens + sum(_count_message(m) for m in units[-2].messages)
    # room enough for every identifier: the tail stays as the retained tail ratio made it
    units, sel, out = _give_way(msgs, target=6_000, tail_units=2)
    assert out == sel


def test_the_tail_gives_way_only_for_identifiers():
    # nothing to carry (no identifier before the tail): the tail stays, however tight the room
    units, sel, out = _give_way(_trajectory("wwwfwfw"), target=600, tail_units=3)
    assert out == sel
    # one unit alone in the tail: it is the newest, it never gives way
    units, sel, out = _give_way(_trajectory("pppfp"), target=600, tail_units=1)
    assert out == sel
