# Over 500 lines: the unit rules, the cut checks and the request / dangling-call rules share one matching of calls to results.
"""Turns, tool rounds, compaction units, and where a compaction may cut.

Pure: no I/O and no token counting of its own (costs come in as a function, normally the
meter's cached per-message count). Messages are persisted history in physical (id) order; system
messages without an id (ephemeral notes) may appear anywhere and simply ride along with the
turn, round or unit they sit in.

Structure
---------
- **Turn**: a user message that starts a turn (:func:`starts_turn`: a real request, see
  :func:`is_request`, or an unflagged user message with no text, e.g. an image-only prompt) and
  everything up to the next one. A *meta* user message (``meta_kind`` or a :data:`NOT_REQUEST_FLAGS`
  flag: an imported caveat, command, its output, a system reminder, a skill text, an interruption
  marker; the compactor's synthetic message; a carrier of tool results) starts no turn: it belongs
  to the turn it appears in, inside a round like a system note. The first turn may have no request
  (history that begins after a boundary inside a turn, or a thread of meta messages only). System
  and meta user messages before the first request, with no assistant or tool message among them,
  are its leading context: they ride with that request's turn (as its head, before the request).
- **Tool round**: one assistant message plus the tool results answering its calls, in any
  order (and any system or meta user messages among them), up to the next assistant message. A text-only assistant message is a round of its own.
  A round is *open* if any of its calls has no result inside it. A group of tool results / notes
  before the first assistant message of a turn is a *head group* (a ``ToolRound`` with no
  assistant message, never open).
- **Orphan**: a tool result that answers no call still pending in view (no earlier assistant
  call, or the call was already answered). A result that arrives after a *later* assistant
  message is not counted towards its round, so that round stays open and nothing at or after it
  is ever taken: call and result are never separated. (After the next user message such a result
  is an orphan of the new turn, and the earlier turn is open.)
- **Closing marker**: a tool result flagged ``missing_result`` (or ``aborted``) that the write door
  records for a call that never got a result. The door can only append, so on an idle thread the
  marker of a call deep in history arrives late; unlike another late result it *closes* its call
  (``late_closures``): the round is not open, a cut may take it, and the marker left after the
  boundary is an orphan there (the surface should not send it). ``dangling_calls`` lists the
  calls still to close, per assistant message.
- **Units** (``build_units``): one ``"turn"`` unit per finished turn (open if any of its rounds
  is open). In the running turn: a ``"turn_user"`` unit (the user message with the head group)
  and one ``"round"`` unit per tool round. Without a user message, a head group holding orphan
  results is a ``"round"`` unit of its own; one holding only system notes rides with the first
  round. ``split_last_turn`` cuts a *finished* last turn the same way (idle trajectories: one
  request, hundreds of rounds), to be selected with ``tail="tokens"``. ``split_turn`` cuts any
  earlier finished turn it chooses the same way, whatever follows it (the compactor: a turn larger
  than the target; docs/compaction.md "Units").
- **Current request** (``current_request``): the newest user message that is a real request, not
  meta, synthetic, a command or its output, a reminder or a carrier of tool results.

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
   apply (§2.5: with a contiguous prefix it would force a hole; the target stop keeps recent history).
   ``tail="tokens"`` applies the token tail to every unit, split rounds included (the idle
   trajectory: its newest rounds holding the retained tail stay verbatim, at least one);
   ``tail="rounds"`` forces the round rule.
5. A ``"turn_user"`` unit is only taken together with the round right after it; if that round
   cannot be taken, stop before the user message.
6. ``max_units`` caps how many units one selection takes (never splitting a unit).

``select_overflow_head`` applies rules 1, 3 and 5 with only the newest unit protected and no
target: the largest tool-pair-balanced head range that keeps the newest indivisible unit.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable, Collection, Iterator, Literal, Mapping, Sequence

from .messages import META_SYNTHETIC, Message, Tagged, ToolCall

UnitKind = Literal["turn", "turn_user", "round"]
UNIT_KINDS: frozenset[str] = frozenset({"turn", "turn_user", "round"})
TailRule = Literal["auto", "tokens", "rounds"]
TAIL_RULES: tuple[str, ...] = ("auto", "tokens", "rounds")

#: metadata flag of the closing marker the write door records for a call that never got a result
#: (says so to the model; not a made-up result). Belongs beside engine.core.messages' META_* keys.
META_MISSING_RESULT = "missing_result"
#: tool results with any of these flags are closing markers (``aborted``: the cancellation results)
CLOSING_FLAGS: tuple[str, ...] = (META_MISSING_RESULT, "aborted")

__all__ = [
    "CLOSING_FLAGS",
    "META_MISSING_RESULT",
    "NOT_REQUEST_FLAGS",
    "TAIL_RULES",
    "DanglingCalls",
    "InvalidCut",
    "InvalidHistory",
    "Selection",
    "TailRule",
    "ToolRound",
    "Turn",
    "Unit",
    "UnitKind",
    "assert_valid_cut",
    "build_units",
    "current_request",
    "dangling_calls",
    "is_balanced",
    "is_closing_marker",
    "is_request",
    "late_closures",
    "orphan_call_ids",
    "place_closing_markers",
    "prefix_ends",
    "select_overflow_head",
    "select_prefix",
    "split_rounds",
    "split_turns",
    "starts_turn",
]


class InvalidHistory(ValueError):
    """Messages that cannot be split: persisted ids out of order, a request inside a round."""


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
    """A request (:func:`starts_turn`) and everything until the next one, with its leading context
    and the meta user messages inside it; ``user`` (the request) is None for a headless turn."""

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
    """A contiguous head range of units; ``boundary`` is the last persisted id taken.

    ``planned_tokens``: when this is the first batch of a larger selection that later calls will
    take (``engine.compaction.plan.cap_batch``), the tokens of the whole selection; None otherwise."""

    units: tuple[Unit, ...]
    boundary: int | None
    removed_tokens: int
    planned_tokens: int | None = None

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(m for u in self.units for m in u.messages)


# -- splitting ---------------------------------------------------------------------------------


def split_turns(messages: Sequence[Message]) -> list[Turn]:
    """Cut before every message that :func:`starts_turn`; leading system and meta user messages
    (no assistant or tool message among them) join the first request's turn."""
    turns: list[Turn] = []
    current: list[Message] = []
    user: Message | None = None
    for m in messages:
        if m.role == "user" and starts_turn(m):
            leading_context = user is None and all(x.role in ("system", "user") for x in current)
            if current and not leading_context:
                turns.append(Turn(tuple(current), user))
                current = []
            user = m
        current.append(m)
    if current:
        turns.append(Turn(tuple(current), user))
    return turns


def split_rounds(messages: Sequence[Message], *, closed_late: Mapping[int, Counter[str]] | None = None) -> list[ToolRound]:
    """Cut the non-user part of a turn into tool rounds (see the module docstring).

    ``closed_late`` (``id(assistant message)`` → call ids) names calls answered by a closing marker
    recorded later, possibly after this turn (:func:`late_closures` of the whole history; computed
    from ``messages`` when not given): they do not keep their round open."""
    rounds: list[ToolRound] = []
    current: list[Message] = []
    # call id -> calls without a result (plain dicts: the Counter arithmetic of each round was most
    # of a summary plan's unit building); a count never goes below 0
    pending: dict[str, int] = {}  # of the current round
    earlier: dict[str, int] = {}  # of earlier rounds
    orphans: list[Message] = []
    closures = late_closures(messages) if closed_late is None else closed_late

    def flush() -> None:
        if current:
            closed = closures.get(id(current[0])) if current[0].role == "assistant" else None
            if closed:  # still open: a call with more calls waiting than closed by a later marker
                still = any(n > closed.get(c, 0) for c, n in pending.items() if n > 0)
            else:
                still = any(n > 0 for n in pending.values())
            rounds.append(ToolRound(tuple(current), open=still, orphans=tuple(orphans)))

    for m in messages:
        role = m.role
        if role == "user" and starts_turn(m):
            raise InvalidHistory(f"split_rounds got a user message that starts a turn (id {m.id}); pass the part after it")
        if role == "assistant":
            flush()
            for c, n in pending.items():
                if n > 0:
                    earlier[c] = earlier.get(c, 0) + n
            current, orphans, pending = [m], [], {}
            for call in m.tool_calls:
                pending[call.id] = pending.get(call.id, 0) + 1
            continue
        current.append(m)
        if role == "tool":
            call_id = m.tool_call_id or ""
            if pending.get(call_id, 0) > 0:
                pending[call_id] -= 1
            elif earlier.get(call_id, 0) > 0:  # late result: its own round was already closed as open
                earlier[call_id] -= 1
            else:
                orphans.append(m)
    flush()
    return rounds


def _turn_parts(turn: Turn, closures: Mapping[int, Counter[str]]) -> tuple[tuple[Message, ...], list[ToolRound]]:
    """(messages up to and including the request, rounds of the rest)."""
    if turn.user is None:
        return (), split_rounds(turn.messages, closed_late=closures)
    cut = next(i for i, m in enumerate(turn.messages) if m is turn.user) + 1
    return turn.messages[:cut], split_rounds(turn.messages[cut:], closed_late=closures)


# -- closing markers and dangling calls ------------------------------------------------------------


def is_closing_marker(message: Tagged) -> bool:
    """A tool result recorded *for* a call rather than *by* it: no result was recorded (idle thread)
    or the run was cancelled first (metadata :data:`CLOSING_FLAGS`, or an importer's
    ``repair: "missing_result"``)."""
    meta = message.metadata
    return message.role == "tool" and (any(meta.get(flag) for flag in CLOSING_FLAGS) or meta.get("repair") == META_MISSING_RESULT)


def _match_calls(messages: Sequence[Message]) -> Iterator[tuple[Message, ToolCall, int, int | None]]:
    """(assistant, call, its index, index of the result answering it or None), calls in order.

    As in :func:`split_rounds` (providers may reuse ids): a result answers the newest assistant
    message's unanswered call with its id, else the oldest earlier one; a result answering no such
    call is an orphan and answers nothing."""
    waiting: dict[str, deque[tuple[int, int]]] = {}  # call id -> (index of the call slot, message index)
    slots: list[tuple[Message, ToolCall, int, int | None]] = []
    newest = -1  # index of the newest assistant message
    for index, m in enumerate(messages):
        if m.role == "assistant":
            newest = index
            for call in m.tool_calls:
                waiting.setdefault(call.id, deque()).append((len(slots), index))
                slots.append((m, call, index, None))
        elif m.role == "tool":
            queue = waiting.get(m.tool_call_id or "")
            if queue:
                slot, _ = queue.pop() if queue[-1][1] == newest else queue.popleft()
                assistant, call, at, _ = slots[slot]
                slots[slot] = (assistant, call, at, index)
    return iter(slots)


def late_closures(messages: Sequence[Message]) -> dict[int, Counter[str]]:
    """``id(assistant)`` → call ids answered by a closing marker that arrived after a later
    assistant or user message (the write door can only append: a call left dangling deep in an
    idle thread is closed at its end). Such a call no longer keeps its round open."""
    out: dict[int, Counter[str]] = {}
    if not any(m.role == "tool" and m.metadata and is_closing_marker(m) for m in messages):
        return out  # the common case, without matching every call
    for assistant, call, at, answered in _match_calls(messages):
        if answered is None or not is_closing_marker(messages[answered]):
            continue
        if any(m.role in ("assistant", "user") for m in messages[at + 1 : answered]):
            out.setdefault(id(assistant), Counter())[call.id] += 1
    return out


def place_closing_markers(messages: Sequence[Message]) -> list[Message]:
    """``messages`` in the order a provider accepts: each late closing marker moved to right after
    its call's round (after the results already there), and a closing marker whose call is not in
    ``messages`` (it is behind the boundary) left out, since it would be an orphan. Everything else
    keeps its place; without closing markers this is ``list(messages)``."""
    out = list(messages)
    if not any(m.role == "tool" and m.metadata and is_closing_marker(m) for m in messages):
        return out
    call_of: dict[int, int] = {}  # index of a marker -> index of the assistant whose call it answers
    for _, _, at, answered in _match_calls(messages):
        if answered is not None and is_closing_marker(messages[answered]):
            call_of[answered] = at
    moved: dict[int, list[Message]] = {}  # assistant index -> the late markers of its round
    keep: list[int] = []
    for index, m in enumerate(messages):
        if m.role == "tool" and m.metadata and is_closing_marker(m):
            call_at = call_of.get(index)
            if call_at is None:
                continue  # its call is behind the boundary: an orphan on the surface
            if any(x.role in ("assistant", "user") for x in messages[call_at + 1 : index]):
                moved.setdefault(call_at, []).append(m)
                continue
        keep.append(index)
    if not moved and len(keep) == len(messages):
        return out
    out = []
    pending: list[Message] = []  # markers waiting for the end of their round's results
    for index in keep:
        m = messages[index]
        if pending and m.role != "tool":
            out.extend(pending)
            pending = []
        out.append(m)
        if index in moved:
            pending = moved[index]
    out.extend(pending)
    return out


@dataclass(frozen=True, slots=True)
class DanglingCalls:
    """The calls of one assistant message that no result answers anywhere after it."""

    assistant: Message
    calls: tuple[ToolCall, ...]


def dangling_calls(messages: Sequence[Message]) -> list[DanglingCalls]:
    """Every unanswered call in ``messages`` (normally: everything after the boundary), grouped per
    assistant message in order: older rounds too, not only the newest. On an idle thread the write
    door closes each with a closing marker (:data:`META_MISSING_RESULT`); while a run is active a
    missing result may still come and nothing must be closed."""
    groups: dict[int, tuple[Message, list[ToolCall]]] = {}
    for assistant, call, _, answered in _match_calls(messages):
        if answered is None:
            groups.setdefault(id(assistant), (assistant, []))[1].append(call)
    return [DanglingCalls(a, tuple(calls)) for a, calls in groups.values()]


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


def build_units(
    messages: Sequence[Message], *, running_turn: bool, split_last_turn: bool = False, split_turn: Callable[[Turn], bool] | None = None
) -> list[Unit]:
    """The ordered units of the history; with ``running_turn`` the last turn is cut into rounds.

    ``split_last_turn`` cuts the *finished* last turn the same way (``"turn_user"`` + ``"round"``
    units): the idle-trajectory mode of manual compaction, where one request and hundreds of tool
    rounds are one turn. Select with ``tail="tokens"`` so the newest rounds holding the retained
    tail stay verbatim.

    ``split_turn`` cuts every other finished turn for which it returns True the same way, whatever
    follows it (the compactor: a turn larger than the target, which could otherwise only be taken
    whole or not at all; ``lambda t: True`` cuts every turn). A turn with an open round is never
    cut: its units would be taken up to that round anyway."""
    _check_order(messages)
    turns = split_turns(messages)
    closures = late_closures(messages)
    units: list[Unit] = []
    for index, turn in enumerate(turns):
        head, rounds = _turn_parts(turn, closures)
        last = index == len(turns) - 1
        if ((running_turn or split_last_turn) and last) or (split_turn is not None and not last and not any(r.open for r in rounds) and split_turn(turn)):
            units.extend(_running_units(head, turn.user, rounds))
        else:
            orphans = tuple(o for r in rounds for o in r.orphans)
            units.append(Unit("turn", turn.messages, open=any(r.open for r in rounds), orphans=orphans))
    return units


# -- the current request ---------------------------------------------------------------------------

#: metadata flags of user-role messages that are not requests: ``meta`` (imported meta messages,
#: e.g. Claude Code's ``isMeta``), the compactor's synthetic user message, a user message carrying
#: tool results (classic SWE-agent observations, Anthropic ``tool_result`` blocks), a source's
#: compaction summary
NOT_REQUEST_FLAGS: tuple[str, ...] = ("meta", META_SYNTHETIC, "tool_result", "tool_results", "compact_summary")
#: wrapper tags whose content is never a request (Claude Code slash commands, their output,
#: ``!`` shell mode, injected reminders and hooks)
WRAPPER_TAGS: tuple[str, ...] = (
    "command-name", "command-message", "command-args", "command-contents", "local-command-stdout",
    "local-command-stderr", "local-command-caveat", "system-reminder", "bash-input", "bash-stdout",
    "bash-stderr", "user-prompt-submit-hook",
)
_WRAPPED = re.compile(r"<(" + "|".join(map(re.escape, WRAPPER_TAGS)) + r")(?:\s[^>]*)?>.*?</\1>", re.S)
#: texts that a client writes in the user's name (interruptions, a summary continuing a session,
#: an injected skill; the same rules as engine.importers.claude_code.meta_kind)
_NOT_REQUEST_TEXT = re.compile(
    r"^\[Request interrupted by user[^\]]*\]$|^Caveat: The messages below were generated by the user while running"
    r"|^This session is being continued from a previous conversation|^Base directory for this skill:",
)


def _flagged(message: Message) -> bool:
    """Marked as not a request: ``meta_kind`` set or a :data:`NOT_REQUEST_FLAGS` metadata flag."""
    return message.meta_kind is not None or any(message.metadata.get(flag) for flag in NOT_REQUEST_FLAGS)


def is_request(message: Message) -> bool:
    """True for a user message that is a real request: not meta (``meta_kind`` or the ``meta``
    flag), not synthetic, not a command, its output or a reminder (text made only of
    :data:`WRAPPER_TAGS` elements), not a carrier of tool results, not an interruption marker or a
    continuation summary, not empty."""
    if message.role != "user" or _flagged(message):
        return False
    text = message.content.strip()
    if not text or _NOT_REQUEST_TEXT.search(text):
        return False
    return bool(_WRAPPED.sub("", text).strip()) if "<" in text else True


def starts_turn(message: Message) -> bool:
    """True for a user message that starts a turn: a request (:func:`is_request`), or an unflagged
    user message with no text (what the user sent, e.g. only an image; it is no current request,
    as it has no text to keep). Every other user message is meta and rides in the turn it is in."""
    if message.role != "user":
        return False
    return is_request(message) or (not message.content.strip() and not _flagged(message))


def current_request(messages: Sequence[Message]) -> Message | None:
    """The newest user message of ``messages`` (in order) that :func:`is_request` accepts."""
    return next((m for m in reversed(messages) if m.role == "user" and is_request(m)), None)


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


def is_balanced(
    messages: Sequence[Message], *, known_orphans: Collection[str] = (), closed_later: Collection[str] = ()
) -> bool:
    """Every call in the range has its result in the range and every result its call.

    Results are matched to calls in order (a provider may reuse call ids across rounds). A result
    without a call makes the range unbalanced unless its call id is in ``known_orphans``: results
    that were already orphans in the whole input (``orphan_call_ids(all_messages)``), which no cut
    can make worse. For a head range of the input the two notions agree. A call without a result
    in the range is allowed when its id is in ``closed_later``: a closing marker after the range
    answers it (:func:`late_closures`).
    """
    unmatched, pending = _unmatched_results(messages)
    return all(c in closed_later for c in pending) and all(m.tool_call_id in known_orphans for m in unmatched)


def assert_valid_cut(
    all_messages: Sequence[Message], boundary: int | None, *, running_turn: bool = True, split_turn: Callable[[Turn], bool] | None = None
) -> None:
    """Raise :class:`InvalidCut` unless ``boundary`` ends a unit and splits no tool round.

    ``running_turn=True`` (default) accepts round ends inside the last turn (also the cuts of the
    ``split_last_turn`` mode); a boundary right after that turn's user message (user taken without
    a round) is rejected. ``split_turn`` (as in :func:`build_units`) accepts round ends inside the
    earlier finished turns it cuts. A call answered only by a closing marker after the boundary is allowed.
    """
    if boundary is None:
        return
    index = next((i for i, m in enumerate(all_messages) if m.id == boundary), None)
    if index is None:
        raise InvalidCut(f"boundary {boundary} is not a message in view")
    closed = {m.tool_call_id or "" for m in all_messages[index + 1 :] if is_closing_marker(m)}
    if not is_balanced(all_messages[: index + 1], known_orphans=orphan_call_ids(all_messages), closed_later=closed):
        raise InvalidCut(f"boundary {boundary} splits a tool round (a call and its result on both sides)")
    unit = next((u for u in build_units(all_messages, running_turn=running_turn, split_turn=split_turn) if u.last_id == boundary), None)
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


def prefix_ends(units: Sequence[Unit], limit: int) -> Iterator[int]:
    """Successive allowed prefix ends (exclusive indices) below ``limit``, in order (rules 1, 3, 5)."""
    i = 0
    while i < limit and _takeable(units[i]):
        if units[i].kind == "turn_user":
            after_ok = i + 1 < limit and units[i + 1].kind == "round" and _takeable(units[i + 1])
            if not after_ok:
                return
            i += 1
        i += 1
        yield i


def _protected_start(units: Sequence[Unit], cost: _Costs, retained_tail_tokens: int, recent_rounds: int, tail: TailRule) -> int:
    """Index of the first protected unit (``len(units)`` when none is protected)."""
    n = len(units)
    if tail not in TAIL_RULES:
        raise ValueError(f"unknown tail rule {tail!r} (known: {', '.join(TAIL_RULES)})")
    if tail == "rounds" or (tail == "auto" and any(u.kind != "turn" for u in units)):
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
    tail: TailRule = "auto",
) -> Selection:
    """The shortest contiguous head of units that brings the projected envelope to the target.

    ``tail`` picks the protection rule (4): ``"auto"`` as the units say (running turn → rounds,
    finished history → tokens); ``"tokens"`` the token tail over every unit, split rounds included
    (the ``split_last_turn`` mode); ``"rounds"`` the newest ``recent_rounds`` rounds."""
    if retained_tail_tokens < 0 or recent_rounds < 0 or (max_units is not None and max_units < 0):
        raise ValueError("retained_tail_tokens, recent_rounds and max_units must not be negative")
    cost = _Costs(units, message_tokens)
    limit = _protected_start(units, cost, retained_tail_tokens, recent_rounds, tail)
    if max_units is not None:
        limit = min(limit, max_units)
    estimate = summary_tokens or (lambda _removed: 0)
    taken = removed = 0
    for end in prefix_ends(units, limit):
        if envelope_tokens - removed + estimate(removed) <= target_tokens:
            break
        removed += sum(cost(i) for i in range(taken, end))
        taken = end
    return _selection(units, taken, removed)


def select_overflow_head(units: Sequence[Unit], *, message_tokens: Callable[[Message], int]) -> Selection:
    """The largest tool-pair-balanced head range that keeps the newest indivisible unit."""
    cost = _Costs(units, message_tokens)
    taken = max(prefix_ends(units, len(units) - 1), default=0)
    return _selection(units, taken, sum(cost(i) for i in range(taken)))


# -- pins ----------------------------------------------------------------------------------------


def pinned_rounds(messages: Sequence[Message], pins: Collection[int]) -> frozenset[int]:
    """The ids of ``messages`` a pin keeps: each pinned message, and for a message of a tool round
    the whole round, so call and result are never separated (a pinned call keeps every result
    answering its calls; a pinned result keeps its call and that call's other results). Pure; ids
    of ``pins`` not in ``messages`` are kept as they are."""
    if not pins:
        return frozenset()
    pins = frozenset(pins)
    owner: dict[str, Message] = {}  # call id -> the assistant message that made it
    for m in messages:
        for c in m.tool_calls:
            owner.setdefault(c.id, m)
    results: dict[int, list[int]] = {}  # assistant id -> ids of the results answering it
    for m in messages:
        if m.role == "tool" and m.tool_call_id and m.id is not None:
            a = owner.get(m.tool_call_id)
            if a is not None and a.id is not None and a.id < m.id:
                results.setdefault(a.id, []).append(m.id)
    result_of: dict[int, int] = {r: a for a, rs in results.items() for r in rs}
    out = set(pins)
    for m in messages:
        if m.id is None or m.id not in pins:
            continue
        head = m.id if m.id in results else result_of.get(m.id)
        if head is not None:
            out.add(head)
            out.update(results.get(head, ()))
    return frozenset(out)
