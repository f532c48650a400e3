"""Turns, tool rounds, compaction units, and where a compaction may cut.

Pure: no I/O and no token counting of its own (costs come in as a function, normally the
meter's cached per-message count). Messages are persisted history in physical (id) order; system
messages without an id (ephemeral notes) may appear anywhere and simply ride along with the
turn, round or unit they sit in.

Structure
---------
- **Turn**: a user message and everything up to the next user message. The first turn may have
  no user message (history that begins after a boundary inside a turn). System messages before
  the first user message ride with that user's turn.
- **Tool round**: one assistant message plus the tool results answering its calls, in any
  order, up to the next assistant message. A text-only assistant message is a round of its own.
  A round is *open* if any of its calls has no result inside it. A group of tool results / notes
  before the first assistant message of a turn is a *head group* (a ``ToolRound`` with no
  assistant message, never open).
- **Orphan**: a tool result that answers no call still pending in view (no earlier assistant
  call, or the call was already answered). A result that arrives after a *later* assistant
  message is not counted towards its round, so that round stays open and nothing at or after it
  is ever taken: call and result are never separated. (After the next user message such a result
  is an orphan of the new turn, and the earlier turn is open.)
- **Units** (``build_units``): one ``"turn"`` unit per finished turn (open if any of its rounds
  is open). In the running turn: a ``"turn_user"`` unit (the user message with the head group)
  and one ``"round"`` unit per tool round. Without a user message, a head group holding orphan
  results is a ``"round"`` unit of its own; one holding only system notes rides with the first
  round.

Selection rules (``select_prefix``)
-----------------------------------
1. Units are taken strictly in order from the first one: the range is a contiguous prefix and
   the boundary is the last persisted id of the last unit taken.
2. Stop as soon as ``envelope - removed + summary_tokens(removed) <= target`` (checked before
   each step; a negative target takes the largest allowed prefix, as the projection never goes
   below zero when the envelope covers the messages). If the target cannot be
   reached the largest allowed prefix is returned; the caller decides whether it is worth it.
3. Never take an open unit or a unit with no persisted id: stop there.
4. Never take a protected unit. Finished history (only ``"turn"`` units): the newest units whose
   tokens sum to at least ``retained_tail_tokens``, and always at least the newest unit.
   Running turn (``"turn_user"``/``"round"`` units present): the newest ``recent_rounds`` rounds
   of the running turn (a headless orphan group counts as a round); the token tail does not
   apply (seed 002 §5.1.1 constraint 1: the target stop is what keeps recent history).
5. A ``"turn_user"`` unit is only taken together with the round right after it; if that round
   cannot be taken, stop before the user message.
6. ``max_units`` caps how many units one selection takes (never splitting a unit).

``select_overflow_head`` applies rules 1, 3 and 5 with only the newest unit protected and no
target: the largest tool-pair-balanced head range that keeps the newest indivisible unit.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Collection, Iterator, Literal, Sequence

from .messages import Message

UnitKind = Literal["turn", "turn_user", "round"]
UNIT_KINDS: frozenset[str] = frozenset({"turn", "turn_user", "round"})

__all__ = [
    "InvalidCut",
    "InvalidHistory",
    "Selection",
    "ToolRound",
    "Turn",
    "Unit",
    "UnitKind",
    "assert_valid_cut",
    "build_units",
    "is_balanced",
    "orphan_call_ids",
    "select_overflow_head",
    "select_prefix",
    "split_rounds",
    "split_turns",
]


class InvalidHistory(ValueError):
    """Messages that cannot be split: persisted ids out of order, a user message inside a round."""


class InvalidCut(ValueError):
    """A boundary that splits a tool round or does not end a unit."""


def _first_id(messages: Sequence[Message]) -> int | None:
    return next((m.id for m in messages if m.id is not None), None)


def _last_id(messages: Sequence[Message]) -> int | None:
    return next((m.id for m in reversed(messages) if m.id is not None), None)


@dataclass(frozen=True, slots=True)
class ToolRound:
    """An assistant message and the results answering its calls (or a head group: no assistant)."""

    messages: tuple[Message, ...]
    open: bool
    orphans: tuple[Message, ...] = ()

    @property
    def assistant(self) -> Message | None:
        return next((m for m in self.messages if m.role == "assistant"), None)


@dataclass(frozen=True, slots=True)
class Turn:
    """A user message and everything until the next one; ``user`` is None for a headless turn."""

    messages: tuple[Message, ...]
    user: Message | None


@dataclass(frozen=True, slots=True)
class Unit:
    """The smallest thing compaction may take."""

    kind: UnitKind
    messages: tuple[Message, ...]
    open: bool = False
    orphans: tuple[Message, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in UNIT_KINDS:
            raise ValueError(f"unknown unit kind {self.kind!r}")
        if not self.messages:
            raise ValueError("a unit holds at least one message")

    @property
    def first_id(self) -> int | None:
        return _first_id(self.messages)

    @property
    def last_id(self) -> int | None:
        return _last_id(self.messages)


@dataclass(frozen=True, slots=True)
class Selection:
    """A contiguous head range of units; ``boundary`` is the last persisted id taken."""

    units: tuple[Unit, ...]
    boundary: int | None
    removed_tokens: int

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(m for u in self.units for m in u.messages)


# -- splitting ---------------------------------------------------------------------------------


def split_turns(messages: Sequence[Message]) -> list[Turn]:
    """Cut at every user message; leading system messages join the first user's turn."""
    turns: list[Turn] = []
    current: list[Message] = []
    user: Message | None = None
    for m in messages:
        if m.role == "user":
            leading_notes = user is None and all(x.role == "system" for x in current)
            if current and not leading_notes:
                turns.append(Turn(tuple(current), user))
                current = []
            user = m
        current.append(m)
    if current:
        turns.append(Turn(tuple(current), user))
    return turns


def split_rounds(messages: Sequence[Message]) -> list[ToolRound]:
    """Cut the non-user part of a turn into tool rounds (see the module docstring)."""
    rounds: list[ToolRound] = []
    current: list[Message] = []
    pending: Counter[str] = Counter()  # calls of the current round still without a result
    earlier: Counter[str] = Counter()  # calls of earlier rounds still without a result
    orphans: list[Message] = []

    def flush() -> None:
        if current:
            rounds.append(ToolRound(tuple(current), open=bool(+pending), orphans=tuple(orphans)))

    for m in messages:
        if m.role == "user":
            raise InvalidHistory(f"split_rounds got a user message (id {m.id}); pass the part after it")
        if m.role == "assistant":
            flush()
            earlier.update(+pending)
            current, orphans, pending = [m], [], Counter(m.call_ids)
            continue
        current.append(m)
        if m.role == "tool":
            call_id = m.tool_call_id or ""
            if pending[call_id] > 0:
                pending[call_id] -= 1
            elif earlier[call_id] > 0:  # late result: its own round was already closed as open
                earlier[call_id] -= 1
            else:
                orphans.append(m)
    flush()
    return rounds


def _turn_parts(turn: Turn) -> tuple[tuple[Message, ...], list[ToolRound]]:
    """(messages up to and including the user message, rounds of the rest)."""
    if turn.user is None:
        return (), split_rounds(turn.messages)
    cut = next(i for i, m in enumerate(turn.messages) if m is turn.user) + 1
    return turn.messages[:cut], split_rounds(turn.messages[cut:])


def _check_order(messages: Sequence[Message]) -> None:
    last: int | None = None
    for m in messages:
        if m.id is None:
            continue
        if last is not None and m.id <= last:
            raise InvalidHistory(f"persisted ids must increase: {m.id} follows {last}")
        last = m.id


def _running_units(head: tuple[Message, ...], user: Message | None, rounds: list[ToolRound]) -> list[Unit]:
    out: list[Unit] = []
    head_orphans: tuple[Message, ...] = ()
    if rounds and rounds[0].assistant is None:
        group = rounds.pop(0)
        if user is not None:
            head, head_orphans = head + group.messages, group.orphans
        elif group.orphans or not rounds:
            out.append(Unit("round", group.messages, orphans=group.orphans))
        else:  # only notes before the first assistant message: they ride with the first round
            first = rounds[0]
            rounds[0] = ToolRound(group.messages + first.messages, first.open, first.orphans)
    if user is not None:
        out.append(Unit("turn_user", head, orphans=head_orphans))
    out.extend(Unit("round", r.messages, open=r.open, orphans=r.orphans) for r in rounds)
    return out


def build_units(messages: Sequence[Message], *, running_turn: bool) -> list[Unit]:
    """The ordered units of the history; with ``running_turn`` the last turn is cut into rounds."""
    _check_order(messages)
    turns = split_turns(messages)
    units: list[Unit] = []
    for index, turn in enumerate(turns):
        head, rounds = _turn_parts(turn)
        if running_turn and index == len(turns) - 1:
            units.extend(_running_units(head, turn.user, rounds))
        else:
            orphans = tuple(o for r in rounds for o in r.orphans)
            units.append(Unit("turn", turn.messages, open=any(r.open for r in rounds), orphans=orphans))
    return units


# -- balance -----------------------------------------------------------------------------------


def _unmatched_results(messages: Sequence[Message]) -> tuple[list[Message], Counter[str]]:
    """(tool results answering no pending call, calls left without a result), matched in order."""
    pending: Counter[str] = Counter()
    unmatched: list[Message] = []
    for m in messages:
        if m.role == "assistant":
            pending.update(m.call_ids)
        elif m.role == "tool":
            call_id = m.tool_call_id or ""
            if pending[call_id] > 0:
                pending[call_id] -= 1
            else:
                unmatched.append(m)
    return unmatched, +pending


def orphan_call_ids(messages: Sequence[Message]) -> frozenset[str]:
    """Call ids of the tool results in ``messages`` that answer no call pending before them."""
    return frozenset(m.tool_call_id or "" for m in _unmatched_results(messages)[0])


def is_balanced(messages: Sequence[Message], *, known_orphans: Collection[str] = ()) -> bool:
    """Every call in the range has its result in the range and every result its call.

    Results are matched to calls in order (a provider may reuse call ids across rounds). A result
    without a call makes the range unbalanced unless its call id is in ``known_orphans``: results
    that were already orphans in the whole input (``orphan_call_ids(all_messages)``), which no cut
    can make worse. For a head range of the input the two notions agree.
    """
    unmatched, pending = _unmatched_results(messages)
    return not pending and all(m.tool_call_id in known_orphans for m in unmatched)


def assert_valid_cut(all_messages: Sequence[Message], boundary: int | None, *, running_turn: bool = True) -> None:
    """Raise :class:`InvalidCut` unless ``boundary`` ends a unit and splits no tool round.

    ``running_turn=True`` (default) accepts round ends inside the last turn; a boundary right
    after the running turn's user message (user taken without a round) is rejected.
    """
    if boundary is None:
        return
    index = next((i for i, m in enumerate(all_messages) if m.id == boundary), None)
    if index is None:
        raise InvalidCut(f"boundary {boundary} is not a message in view")
    if not is_balanced(all_messages[: index + 1], known_orphans=orphan_call_ids(all_messages)):
        raise InvalidCut(f"boundary {boundary} splits a tool round (a call and its result on both sides)")
    unit = next((u for u in build_units(all_messages, running_turn=running_turn) if u.last_id == boundary), None)
    if unit is None:
        raise InvalidCut(f"boundary {boundary} does not end a unit")
    if unit.kind == "turn_user":
        raise InvalidCut(f"boundary {boundary} takes the running turn's user message without a round")


# -- selection ---------------------------------------------------------------------------------


class _Costs:
    """Per-unit token costs, counted lazily (only the units a decision looks at)."""

    def __init__(self, units: Sequence[Unit], message_tokens: Callable[[Message], int]) -> None:
        self._units = units
        self._count = message_tokens
        self._cache: dict[int, int] = {}

    def __call__(self, index: int) -> int:
        if index not in self._cache:
            self._cache[index] = sum(self._count(m) for m in self._units[index].messages)
        return self._cache[index]


def _takeable(unit: Unit) -> bool:
    return not unit.open and unit.last_id is not None


def _steps(units: Sequence[Unit], limit: int) -> Iterator[int]:
    """Successive allowed prefix ends (exclusive indices) below ``limit``, in order."""
    i = 0
    while i < limit and _takeable(units[i]):
        if units[i].kind == "turn_user":
            after_ok = i + 1 < limit and units[i + 1].kind == "round" and _takeable(units[i + 1])
            if not after_ok:
                return
            i += 1
        i += 1
        yield i


def _protected_start(units: Sequence[Unit], cost: _Costs, retained_tail_tokens: int, recent_rounds: int) -> int:
    """Index of the first protected unit (``len(units)`` when none is protected)."""
    n = len(units)
    if any(u.kind != "turn" for u in units):
        rounds = [i for i, u in enumerate(units) if u.kind == "round"]
        if recent_rounds == 0 or not rounds:
            return n
        return rounds[-min(recent_rounds, len(rounds))]
    kept, i = 0, n
    while i > 0:
        i -= 1
        kept += cost(i)
        if kept >= retained_tail_tokens:
            break
    return i


def _selection(units: Sequence[Unit], taken: int, removed: int) -> Selection:
    chosen = tuple(units[:taken])
    return Selection(chosen, chosen[-1].last_id if chosen else None, removed)


def select_prefix(
    units: Sequence[Unit],
    *,
    message_tokens: Callable[[Message], int],
    envelope_tokens: int,
    target_tokens: int,
    retained_tail_tokens: int = 0,
    recent_rounds: int = 0,
    summary_tokens: Callable[[int], int] | None = None,
    max_units: int | None = None,
) -> Selection:
    """The shortest contiguous head of units that brings the projected envelope to the target."""
    if retained_tail_tokens < 0 or recent_rounds < 0 or (max_units is not None and max_units < 0):
        raise ValueError("retained_tail_tokens, recent_rounds and max_units must not be negative")
    cost = _Costs(units, message_tokens)
    limit = _protected_start(units, cost, retained_tail_tokens, recent_rounds)
    if max_units is not None:
        limit = min(limit, max_units)
    estimate = summary_tokens or (lambda _removed: 0)
    taken = removed = 0
    for end in _steps(units, limit):
        if envelope_tokens - removed + estimate(removed) <= target_tokens:
            break
        removed += sum(cost(i) for i in range(taken, end))
        taken = end
    return _selection(units, taken, removed)


def select_overflow_head(units: Sequence[Unit], *, message_tokens: Callable[[Message], int]) -> Selection:
    """The largest tool-pair-balanced head range that keeps the newest indivisible unit."""
    cost = _Costs(units, message_tokens)
    taken = max(_steps(units, len(units) - 1), default=0)
    return _selection(units, taken, sum(cost(i) for i in range(taken)))
