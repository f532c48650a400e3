"""Compaction as a plan: the pure decisions of whether to compact, which results to prune, which
units a summary takes and how much it may take.

No I/O and no store: token counts come in as functions (the meter's cached per-message count), the
policy as a :class:`ResolvedPolicy`. Each trigger has its plan, a :class:`CompactionPlan`:
:func:`plan_manual` (Compact now), :func:`plan_pressure` (before a model step: prune first, a
summary of the oldest units only when the prune is not enough) and :func:`plan_overflow` (after a
context-overflow error: prune, then one summary of the largest balanced head range; nothing to do
when neither would change the surface). The :mod:`engine.compaction.compactor` applies a plan against the
store, the Workdir and a summarizer, and plans again from what each write left (issue 24:
"compaction as plan, then apply").

The summary budget (docs/compaction.md, "Summary budget") is a rule, not a per-trace tuning:

- **total** (:func:`summary_ceiling`): :func:`engine.core.policy.summary_total_tokens` of the window, the
  target, the distinct identifiers the summary has to carry (the span's and the previous summary's)
  and the room that keeps the envelope after the compaction at or under the target;
- **prose** (:func:`summary_budget`, a request's ``max_tokens``): what a language model writes,
  ``summary_max_tokens`` but at most a quarter of the target (and never more than the total);
- **identifier room** (:func:`identifier_budget`): the rest of the total, which only identifier lines
  use (the extractive summary's, or the index the engine appends to a model's summary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, NamedTuple, Protocol, Sequence

from ..core.messages import META_PRUNED, Message, Surface, summary_message
from ..core.meter import Measurement
from ..core.policy import SUMMARY_MAX_SHARE, SUMMARY_MIN_TOKENS, ResolvedPolicy, summary_total_tokens
from ..core.previews import replacement_preview
from ..core.specifics import expand_grouped, extract_identifiers, group_identifiers
from ..core.surface import history_part
from ..core.units import (
    Selection,
    TailRule,
    Turn,
    Unit,
    build_units,
    current_request,
    is_request,
    pinned_rounds,
    prefix_ends,
    select_overflow_head,
    select_prefix,
)
from ..core.views import Snapshot

__all__ = [
    "IDENTIFIER_ROOM_SHARE",
    "CompactionPlan",
    "Measured",
    "StaleRule",
    "manual_selection",
    "overflow_selection",
    "plan_manual",
    "plan_overflow",
    "plan_pressure",
    "pressure_selection",
    "prune_candidates",
    "request_text",
    "select_units",
    "unpinned_history",
    "cap_batch",
    "identifier_budget",
    "request_budgets",
    "room_after",
    "span_identifiers",
    "summary_budget",
    "summary_ceiling",
    "summary_estimate",
    "summary_request_budgets",
    "tail_gives_way",
    "turn_over",
]

#: the most of the target a summary and its identifier lines may take together (the rule's ceiling;
#: benchmarks/peers.py gives the peers the same room)
IDENTIFIER_ROOM_SHARE = SUMMARY_MAX_SHARE


def summary_budget(policy: ResolvedPolicy) -> int:
    """Tokens a language model may write: ``summary_max_tokens``, but never more than a quarter
    of the summarization target, so a small window is not filled by its own summary."""
    return max(SUMMARY_MIN_TOKENS, min(policy.policy.summary_max_tokens, policy.target_tokens // 4))


def summary_ceiling(policy: ResolvedPolicy, identifiers: int | None = None, room: int | None = None) -> int:
    """The most a summary may take, identifier lines included: the budget rule for ``identifiers``
    distinct identifiers and ``room`` (:func:`engine.core.policy.summary_total_tokens`); with
    ``identifiers`` unknown (None), the rule's ceiling: 3/5 of the target (within ``room``)."""
    if identifiers is None:
        most = max(SUMMARY_MIN_TOKENS, math.floor(SUMMARY_MAX_SHARE * policy.target_tokens))
        return most if room is None else max(SUMMARY_MIN_TOKENS, min(most, room))
    return summary_total_tokens(policy.context_window, policy.target_tokens, identifiers, room)


def identifier_budget(policy: ResolvedPolicy, max_tokens: int | None = None, *, identifiers: int | None = None, room: int | None = None) -> int:
    """Tokens beyond ``max_tokens`` (default :func:`summary_budget`) that identifier lines alone may
    take: the rest of :func:`summary_ceiling`. 0 where the prose budget already reaches it."""
    budget = summary_budget(policy) if max_tokens is None else max_tokens
    return max(0, summary_ceiling(policy, identifiers, room) - budget)


def request_budgets(policy: ResolvedPolicy, *, identifiers: int, room: int | None, request_tokens: int | None) -> tuple[int, int]:
    """``(max_tokens, identifier_tokens)`` of one summary request. The prose budget stays within the
    total; a long current request is allowed its token count + 256, so it can be copied verbatim.

    The current request, copied verbatim, is history kept as it was, not summary: the rule's total
    (⌊window / 16⌋ + 12 per identifier, at most 3/5 of the target) is for the summary beside it, and
    ``room`` bounds the whole. Counting a
    1,044-token request inside a 1,539-token ceiling left a 20-round SWE-agent trajectory 239
    tokens of identifier lines (docs/compaction.md, "Summary budget")."""
    total = summary_ceiling(policy, identifiers, room)
    if request_tokens:
        widened = summary_ceiling(policy, identifiers) + request_tokens
        total = max(total, widened if room is None else min(widened, room))
    max_tokens = min(summary_budget(policy), total)
    if request_tokens is not None:
        max_tokens = max(max_tokens, request_tokens + 256)
    return max_tokens, max(0, total - max_tokens)


def room_after(target: int, *, envelope: int, removed: int, previous_summary: int, framing: int) -> int:
    """What a new summary may take so that the envelope after it is at or under ``target``:
    ``envelope`` minus the ``removed`` messages and the ``previous_summary`` message it replaces,
    minus the new summary message's ``framing``.

    When the target is out of reach whatever the summary (that room is below the floor,
    :data:`engine.core.policy.SUMMARY_MIN_TOKENS`: the last call a compaction is allowed, with history
    still over the target after its batch), the room is at least the previous summary's text: the
    new summary may carry what that one carried (the envelope still shrinks by the batch) instead
    of being cut to the floor. Measured (compact now on a whole 1M trace, 5 calls): the fifth
    summary was cut from 18k to 303 tokens and research-1M kept 3,371 of 6,423 identifiers."""
    room = target - (envelope - removed - previous_summary) - framing
    if room < SUMMARY_MIN_TOKENS and previous_summary > framing:
        return max(room, previous_summary - framing)
    return room


def summary_estimate(policy: ResolvedPolicy, *, framing: int, previous_summary: int = 0) -> Callable[[int], int]:
    """The projected size of a new summary replacing ``removed`` tokens and the previous summary
    (``previous_summary``: its message, framing included, 0 when none): a quarter of what it
    replaces (at least 64 tokens, at most the rule's ceiling) plus its ``framing``.

    The previous summary is counted as if it stayed on the surface: a compaction lands below the
    target by about its size, so each one buys that much more headroom. Counting it as replaced
    (landing at the target) took the summarizer calls of research-1M from 4 to 5 and of chinese-1M
    from 4 to 6 with fewer identifiers kept (docs/compaction.md, "Summary budget")."""
    cap = summary_ceiling(policy)
    previous_text = max(0, previous_summary - framing)

    def estimate(removed: int) -> int:
        return framing + min(cap, max(64, (removed + previous_text) // 4)) if removed else 0

    return estimate


def cap_batch(sel: Selection, message_tokens: Callable[[Message], int], *, budget: int, floor: int = 0) -> Selection:
    """Cut a selection at a unit end so one summary call sees at most ``budget`` tokens (a single
    unit larger than the budget is taken whole: units are indivisible). A batch is never cut below
    ``floor`` tokens (the summary ceiling): a summary of less could not be smaller than it, so the
    next unit, which a later call would take whole anyway, joins it. A cut batch records the whole
    selection's tokens (``planned_tokens``): the budget's room is what stays after all of it."""
    total = 0
    for i, unit in enumerate(sel.units):
        cost = sum(message_tokens(x) for x in unit.messages)
        if i > 0 and total + cost > budget and total >= floor:
            kept = sel.units[:i]
            return Selection(units=kept, boundary=kept[-1].last_id, removed_tokens=total, planned_tokens=sel.removed_tokens)
        total += cost
    return sel


def turn_over(tokens: int, message_tokens: Callable[[Message], int]) -> Callable[[Turn], bool]:
    """The ``split_turn`` of :func:`engine.core.units.build_units` that cuts a finished turn into its
    rounds when it counts more than ``tokens`` (the target): such a turn could otherwise only be
    summarized whole or not at all, whatever follows it."""

    def over(turn: Turn) -> bool:
        total = 0
        for m in turn.messages:
            total += message_tokens(m)
            if total > tokens:
                return True
        return False

    return over


def _shown(m: Message) -> str:
    content = replacement_preview(m.content) if m.role == "tool" and m.metadata.get(META_PRUNED) else m.content
    return "\n".join([content, *(c.arguments for c in m.tool_calls)])


def span_identifiers(messages: Iterable[Message], previous_summary: str | None = None, *, visible: Sequence[str] = ()) -> int:
    """Distinct identifiers (paths, URLs, ids, hashes: :func:`engine.core.specifics.extract_identifiers`)
    a summary of ``messages`` would have to carry: those the messages show (a pruned result as its
    preview, calls with their arguments) and the previous summary (a grouped form
    ``dir/{a,b}.py`` read as its members: :func:`engine.core.specifics.expand_grouped`), less those in ``visible`` texts
    (the current request and what stays verbatim)."""
    found: set[str] = set()
    for m in messages:
        if m.role != "system":
            found.update(extract_identifiers(_shown(m)))
    if previous_summary:  # its identifiers written grouped are read back whole
        found.update(extract_identifiers(expand_grouped(previous_summary)))
    if visible and found:
        found.difference_update(extract_identifiers("\n".join(visible)))
    return len(found)


def tail_gives_way(
    units: Sequence[Unit],
    sel: Selection,
    count_message: Callable[[Message], int],
    count_text: Callable[[str], int],
    *,
    envelope: int,
    target: int,
    previous_summary: int,
    previous_text: str | None,
    request: str | None,
) -> Selection:
    """``sel`` (a prefix of ``units`` ending where the retained tail begins) extended into that
    tail while the identifiers the summary has to carry need more room than the target leaves
    them: the retained tail gives way to the summary's identifier lines (docs/compaction.md,
    "Summary budget").

    Need: the tokens of the grouped identifier lines (:func:`engine.core.specifics.group_identifiers`)
    of the distinct identifiers the range and the previous summary show and neither the current
    request nor what stays verbatim shows. Room for them: :func:`room_after` the range, less the
    current request (copied verbatim) and :data:`engine.core.policy.SUMMARY_MIN_TOKENS` of prose, at
    least 0 (a request too long for the room is not the identifiers' shortfall). The range takes
    the fewest further units after which the need fits, else those leaving the smallest shortfall;
    never the newest unit (the current request and the newest round always stay). Where nothing
    would be dropped (no identifier to carry, or they fit), ``sel`` is returned unchanged."""
    n, k = len(units), len(sel.units)
    ends = [e for e in prefix_ends(units, n - 1) if e > k]
    if not ends:
        return sel
    framing = count_message(summary_message(""))
    request_tokens = count_text(request) if request else 0

    def ids(messages: Iterable[Message]) -> set[str]:
        found: set[str] = set()
        for m in messages:
            if m.role != "system":
                found.update(extract_identifiers(_shown(m)))
        return found

    per_unit = [ids(units[i].messages) for i in range(k, n)]  # the tail's units
    seen = ids(sel.messages)
    if previous_text:
        seen.update(extract_identifiers(expand_grouped(previous_text)))
    seen.difference_update(extract_identifiers(request or ""))
    later: list[set[str]] = [set() for _ in range(n - k + 1)]  # later[j]: identifiers the tail shows from unit k + j on
    for j in range(n - k - 1, -1, -1):
        later[j] = later[j + 1] | per_unit[j]

    def slack(end: int, removed: int) -> int | None:
        carried = seen.union(*per_unit[: end - k]) - later[end - k]
        if not carried:
            return None
        room = room_after(target, envelope=envelope, removed=removed, previous_summary=previous_summary, framing=framing)
        lines = "\n".join("- " + g for g in group_identifiers(sorted(carried)))
        return max(0, room - request_tokens - SUMMARY_MIN_TOKENS) - count_text(lines)

    first = slack(k, sel.removed_tokens)
    if first is None or first >= 0:
        return sel
    best, taken, removed = first, k, sel.removed_tokens
    at, total = k, sel.removed_tokens
    for end in ends:
        total += sum(count_message(x) for u in units[at:end] for x in u.messages)
        at = end
        now = slack(end, total)
        if now is not None and now > best:
            best, taken, removed = now, end, total
        if best >= 0:
            break
    if taken == k:
        return sel
    chosen = tuple(units[:taken])
    return Selection(chosen, chosen[-1].last_id, removed)


# -- what Compact now would do (the plan), and the selections the compactor applies ------------


class _Meter(Protocol):
    def count_message(self, message: Message, /) -> int: ...
    def count_text(self, text: str, /) -> int: ...


class Measured(Protocol):
    """What the decisions read of :class:`engine.compaction.compactor.Measured` (values only: no store)."""

    @property
    def snapshot(self) -> Snapshot: ...
    @property
    def surface(self) -> Surface: ...
    @property
    def measurement(self) -> Measurement: ...
    @property
    def policy(self) -> ResolvedPolicy: ...
    @property
    def meter(self) -> _Meter: ...
    @property
    def tokens(self) -> int: ...


@dataclass(frozen=True)
class CompactionPlan:
    """What one compaction step would do on a thread as measured (read only).

    ``trigger``: ``manual``, ``pressure`` or ``overflow``. ``possible`` False: nothing would be
    written, and ``reason`` says why (``insufficient_history``, ``below_threshold``, ``auto_off``,
    ``nothing_to_compact``, or ``breaker_tripped`` when there is no result to prune either).
    Otherwise:

    - **prune** (pressure and overflow; Compact now does not prune): ``prune``, the tool results
      the prune step offloads (at or over their limit, not pruned yet; the Workdir may still refuse
      one, :func:`prune_candidates`), ``prune_stale`` those of them before the protected tail (the
      smaller stale budget), ``prune_tokens`` what they take now;
    - **summary** (the first summary call, planned on the surface as measured: after a prune the
      compactor plans again from what it left): ``selected_messages`` messages from
      ``first_selected`` up to ``selected_boundary`` (``removed_tokens`` of them), the previous
      summary replaced with them (``replaced_tokens`` in all), the request's ``max_tokens`` and
      ``identifier_tokens`` budgets, and ``expected_after``: the envelope with the projected summary
      in place of the range (a projection, :func:`engine.compaction.plan.summary_estimate`; the summarizer's
      text decides the real figure). No range (``selected_messages`` 0) with ``reason`` set: no
      summary is planned (``breaker_tripped``: the run's breaker stops automatic summaries;
      ``nothing_to_compact``: nothing before the retained tail can be summarized).

    ``selection`` is the range itself (the units the compactor hands the summarizer); it is no
    figure of the plan: :meth:`as_dict` (what ``compaction compact --plan --json`` prints) leaves it out."""

    trigger: str
    possible: bool
    reason: str | None
    tokens_before: int
    threshold: int
    target: int
    selected_messages: int = 0
    selected_boundary: int | None = None
    first_selected: int | None = None
    removed_tokens: int = 0
    replaced_tokens: int = 0
    planned_tokens: int = 0
    max_tokens: int = 0
    identifier_tokens: int = 0
    expected_after: int | None = None
    pinned: tuple[int, ...] = ()
    prune: tuple[int, ...] = ()
    prune_stale: tuple[int, ...] = ()
    prune_tokens: int = 0
    selection: Selection | None = field(default=None, compare=False, repr=False)

    @property
    def summarizes(self) -> bool:
        """Whether a summary call is planned (a range is selected)."""
        return self.selection is not None and bool(self.selection.units)

    def as_dict(self) -> dict[str, object]:
        """The plan's figures (every field but ``selection``), for JSON."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "selection"}


class StaleRule(NamedTuple):
    """What the prune step treats as stale (:func:`engine.compaction.pruning.stale_results` of the unpinned
    history: tool results before the protected tail) and the share of ``preview_tokens`` their
    replacement gets (:data:`engine.compaction.pruning.STALE_PREVIEW_SHARE`). Handed in by the caller: the
    pruning module sits beside this one, not below it."""

    ids: frozenset[int]
    share: float


def request_text(m: Measured) -> str | None:
    """The user's current request (§2.5): the store's, when it is a real request
    (:func:`engine.core.units.is_request`), else the newest real request in view, else none."""
    snap = m.snapshot
    stored = snap.current_request
    if stored is not None and is_request(stored):
        return stored.content
    visible = current_request(snap.messages)
    return visible.content if visible is not None else None


def _pins(m: Measured) -> frozenset[int]:
    return pinned_rounds(history_part(m.surface), m.snapshot.pins) if m.snapshot.pins else frozenset()


#: the last (surface, snapshot, unpinned history): a pressure step asks for the same surface's
#: history three or four times (the stale rule, the prune candidates, the summary's units)
_last_unpinned: tuple[Surface, Snapshot, tuple[Message, ...]] | None = None


def unpinned_history(m: Measured) -> tuple[Message, ...]:
    """The surface's history without the pinned messages (widened to their tool rounds).
    Remembered for the last surface and snapshot objects (both immutable; what it depends on)."""
    global _last_unpinned
    last = _last_unpinned
    if last is not None and last[0] is m.surface and last[1] is m.snapshot:
        return last[2]
    history = history_part(m.surface)
    pins = _pins(m)
    out = tuple(x for x in history if x.id not in pins) if pins else history
    _last_unpinned = (m.surface, m.snapshot, out)
    return out


def select_units(m: Measured, units: Sequence[Unit], *, target: int, tail: TailRule = "auto", give_way: bool = False) -> Selection:
    """The range one summary call takes: the prefix before the retained tail (:func:`engine.core.units.select_prefix`),
    extended into the tail for the identifiers when ``give_way`` (:func:`engine.compaction.plan.tail_gives_way`),
    cut to what one call of a summarizer with the same window can read (:func:`engine.compaction.plan.cap_batch`)."""
    pol = m.policy
    sel = select_prefix(
        units, message_tokens=m.meter.count_message, envelope_tokens=m.tokens, target_tokens=target, retained_tail_tokens=pol.retained_tail_tokens,
        recent_rounds=pol.policy.loop_recent_tool_rounds, tail=tail,
        summary_tokens=summary_estimate(pol, framing=m.meter.count_message(summary_message("")), previous_summary=m.measurement.breakdown["summary"]),
    )
    if give_way and sel.units:  # manual: all before the retained tail selected; the tail yields to the identifiers (plan.tail_gives_way)
        sel = tail_gives_way(units, sel, m.meter.count_message, m.meter.count_text, envelope=m.tokens, target=pol.target_tokens,
                             previous_summary=m.measurement.breakdown["summary"], previous_text=m.snapshot.state.summary, request=request_text(m))
    # one call must fit a summarizer model with the same window: the previous summary and the
    # messages it reads, and the summary it writes (a model writes the budget; the identifier
    # room holds id lines no model writes: the extractive summary's, or the index the engine
    # appends to a model's summary), with a tenth for the prompt around them
    previous = m.meter.count_text(m.snapshot.state.summary) if m.snapshot.state.summary else 0
    budget = pol.context_window * 9 // 10 - previous - summary_budget(pol)
    return cap_batch(sel, m.meter.count_message, budget=max(1, budget), floor=summary_ceiling(pol))


def manual_selection(m: Measured) -> Selection:
    """Everything before the retained tail (§4.3), the finished last turn split into rounds;
    empty when what it would replace is no bigger than the smallest summary of it (the framing,
    the current request verbatim and a line), which could only be rejected as not smaller."""
    units = build_units(unpinned_history(m), running_turn=False, split_last_turn=True, split_turn=turn_over(m.policy.target_tokens, m.meter.count_message))
    sel = select_units(m, units, target=-1, tail="tokens", give_way=True)
    state = m.snapshot.state
    request = request_text(m)
    replaced = sel.removed_tokens + (m.meter.count_text(state.summary) if state.summary else 0)
    smallest = m.meter.count_message(summary_message(request or "")) + 64
    return sel if replaced > smallest else Selection((), None, 0)


def summary_request_budgets(m: Measured, sel: Selection, *, current: str | None, more_calls: bool) -> tuple[int, int]:
    """``(max_tokens, identifier_tokens)`` of the summary request for ``sel`` (:func:`request_budgets`):
    the window, the identifiers the summary carries, and the room that keeps the envelope after it
    at or under the target (a first batch of several, when later calls may take the rest
    (``more_calls``): the room is what stays after the whole selection; on the last call allowed,
    what stays after this batch)."""
    meter = m.meter
    planned = sel.planned_tokens if more_calls else None
    room = room_after(m.policy.target_tokens, envelope=m.tokens, removed=planned or sum(meter.count_message(x) for x in sel.messages),
                      previous_summary=m.measurement.breakdown["summary"], framing=meter.count_message(summary_message("")))
    return request_budgets(m.policy, identifiers=span_identifiers(sel.messages, m.snapshot.state.summary), room=room,
                           request_tokens=meter.count_text(current) if current else None)


def _summary_plan(trigger: str, m: Measured, sel: Selection, *, more_calls: bool, pins: tuple[int, ...], prune: tuple[tuple[int, ...], tuple[int, ...], int] = ((), (), 0),
                  current: str | None = None) -> CompactionPlan:
    """The plan of one summary call of ``sel`` on ``m`` (``sel`` not empty): its range, the budgets
    of its request (:func:`summary_request_budgets`, as the compactor sends them) and the projected envelope."""
    pol, meter, state = m.policy, m.meter, m.snapshot.state
    removed = sum(meter.count_message(x) for x in sel.messages)
    previous_text = meter.count_text(state.summary) if state.summary else 0
    framing = meter.count_message(summary_message(""))
    max_tokens, identifier_tokens = summary_request_budgets(m, sel, current=current, more_calls=more_calls)
    estimate = summary_estimate(pol, framing=framing, previous_summary=m.measurement.breakdown["summary"])
    expected = m.tokens - removed - m.measurement.breakdown["summary"] + estimate(removed)
    messages = sel.messages
    return CompactionPlan(
        trigger, True, None, m.tokens, pol.threshold, pol.target_tokens,
        selected_messages=len(messages), selected_boundary=sel.boundary, first_selected=messages[0].id if messages else None,
        removed_tokens=removed, replaced_tokens=removed + previous_text, planned_tokens=sel.planned_tokens or removed,
        max_tokens=max_tokens, identifier_tokens=identifier_tokens, expected_after=expected, pinned=pins,
        prune=prune[0], prune_stale=prune[1], prune_tokens=prune[2], selection=sel,
    )


def plan_manual(m: Measured, *, call: int = 0) -> CompactionPlan:
    """What Compact now would do on ``m`` as its ``call``-th summary call (0: the first): the range
    (:func:`manual_selection`), the budgets of its summary request and the projected envelope."""
    pins = tuple(sorted(_pins(m)))
    sel = manual_selection(m)
    if not sel.units:
        return CompactionPlan("manual", False, "insufficient_history", m.tokens, m.policy.threshold, m.policy.target_tokens, pinned=pins)
    limit = max(1, m.policy.policy.loop_max_compaction_rounds)
    return _summary_plan("manual", m, sel, more_calls=call < limit - 1, pins=pins, current=request_text(m))


# -- pressure (§2) and overflow (§3): prune first, then summarize --------------------------------


def prune_candidates(history: Sequence[Message], count_text: Callable[[str], int], *, limit_tokens: int, preview_tokens: int,
                     stale: StaleRule) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """``(ids, stale ids, tokens)`` of the tool results of ``history`` (the unpinned history) the
    prune step offloads: not pruned yet and counting more than their limit: ``limit_tokens``, or
    for a stale result (``stale.ids``) its replacement budget ``stale.share × preview_tokens``
    (at most ``preview_tokens`` and ``limit_tokens``), the rule of :func:`engine.compaction.pruning.prune_surface`.
    A candidate may still stay as it is when it is applied: the Workdir refuses the original, or
    the budget cannot hold the preview's header (a failed prune, recorded)."""
    stale_budget = min(max(1, int(preview_tokens * stale.share)), preview_tokens)
    ids: list[int] = []
    stale_ids: list[int] = []
    tokens = 0
    for x in history:
        if x.role != "tool" or x.id is None or x.metadata.get(META_PRUNED):
            continue
        old = x.id in stale.ids
        n = count_text(x.content)
        if n > (min(limit_tokens, stale_budget) if old else limit_tokens):
            ids.append(x.id)
            tokens += n
            if old:
                stale_ids.append(x.id)
    return tuple(ids), tuple(stale_ids), tokens


def _prune_part(m: Measured, stale: StaleRule | None) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    if stale is None:
        return (), (), 0
    pol = m.policy.policy
    return prune_candidates(unpinned_history(m), m.meter.count_text, limit_tokens=pol.tool_result_limit_tokens, preview_tokens=pol.preview_tokens, stale=stale)


def pressure_selection(m: Measured, *, running_turn: bool = True) -> Selection:
    """The range of a pressure summary call (§2.4): the oldest units before the retained tail
    (the running turn's rounds are units of their own when ``running_turn``; a finished turn larger
    than the target is cut into its rounds), enough of them to reach the target."""
    units = build_units(unpinned_history(m), running_turn=running_turn, split_turn=turn_over(m.policy.target_tokens, m.meter.count_message))
    return select_units(m, units, target=m.policy.target_tokens, tail="auto" if running_turn else "tokens")


def overflow_selection(m: Measured) -> Selection:
    """The range of the overflow summary (§3.2): the largest tool-pair-balanced head range that
    keeps the newest unit (:func:`engine.core.units.select_overflow_head`)."""
    return select_overflow_head(build_units(unpinned_history(m), running_turn=True), message_tokens=m.meter.count_message)


def plan_pressure(m: Measured, *, stale: StaleRule | None, running_turn: bool = True, breaker_tripped: bool = False, call: int = 0,
                  summary: bool = True) -> CompactionPlan:
    """What pressure compaction (§2) would do on ``m`` before a model step.

    Nothing below the threshold (``below_threshold``; only for the first call, ``call`` 0: once
    started, a compaction goes on to the target) or with automatic compaction off (``auto_off``).
    Otherwise the prune step first (``stale``: the caller's :class:`StaleRule`; None plans no
    prune, as after the prune step), then, unless the run's breaker has tripped or ``summary`` is
    False (the prune step alone), the ``call``-th summary call of the oldest units
    (:func:`pressure_selection`; ``call`` only sets whether more calls may follow: the compactor
    stops after ``loop_max_compaction_rounds`` calls, this function does not). A plan with a prune
    plans its summary on the surface as it is: the compactor plans again after the prune, and
    summarizes only when the prune left the envelope at or over the threshold."""
    pol = m.policy
    pins = tuple(sorted(_pins(m)))
    if call == 0 and m.tokens < pol.threshold:
        return CompactionPlan("pressure", False, "below_threshold", m.tokens, pol.threshold, pol.target_tokens, pinned=pins)
    if not pol.policy.auto:
        return CompactionPlan("pressure", False, "auto_off", m.tokens, pol.threshold, pol.target_tokens, pinned=pins)
    prune = _prune_part(m, stale)
    why = "breaker_tripped" if breaker_tripped else None
    sel = pressure_selection(m, running_turn=running_turn) if summary and why is None else None
    if sel is not None and not sel.units:  # no attempt is made, so no breaker (§2.8): later steps may free units
        why = "nothing_to_compact"
    if sel is None or not sel.units:
        return CompactionPlan("pressure", bool(prune[0]), why, m.tokens, pol.threshold, pol.target_tokens, pinned=pins,
                              prune=prune[0], prune_stale=prune[1], prune_tokens=prune[2])
    rounds = pol.policy.loop_max_compaction_rounds
    return _summary_plan("pressure", m, sel, more_calls=call < rounds - 1, pins=pins, prune=prune, current=request_text(m))


def plan_overflow(m: Measured, *, stale: StaleRule | None) -> CompactionPlan:
    """What overflow recovery (§3.2) would do on ``m`` after the provider refused the request as too
    long: prune without a threshold check (``stale``: the caller's :class:`StaleRule`; None: no
    prune), then one summary of the largest balanced head range that keeps the newest unit
    (:func:`overflow_selection`; planned on the surface as it is, planned again after a prune).
    ``possible`` False (``nothing_to_compact``): no result to prune and no range to summarize, so
    the surface cannot change and a retry would send the same request."""
    pol = m.policy
    pins = tuple(sorted(_pins(m)))
    prune = _prune_part(m, stale)
    sel = overflow_selection(m)
    if not sel.units:
        return CompactionPlan("overflow", bool(prune[0]), None if prune[0] else "nothing_to_compact", m.tokens, pol.threshold, pol.target_tokens, pinned=pins,
                              prune=prune[0], prune_stale=prune[1], prune_tokens=prune[2])
    return _summary_plan("overflow", m, sel, more_calls=False, pins=pins, prune=prune, current=request_text(m))
