"""The Qt-free timeline core, without a QApplication.

The property: for a random thread (turns, parallel and late tool results, open rounds, orphans,
notes, pruned results, a boundary at a unit end, a running last turn or not), any sequence of page
loads (from the start, the newest page, gap fills from above and below, a page around one message)
and evictions, finished by filling every gap, gives the tree that loading the whole thread at once
gives — also while the thread grows. After every step the tree's invariants hold and the change notices, replayed on a shadow
tree, describe exactly what happened. Then unit tests of the gap/segment arithmetic.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.messages import Message, ToolCall
from engine.units import build_units
from engine.views import SourceCompaction, StoredMessage
from inspector_app.timeline import UNKNOWN, BoundaryInfo, Node, PageRequest, Timeline, TimelinePage
from inspector_app.timeline import segments
from inspector_app.timeline.segments import Placement, Run, Span

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)


# -- a random thread and a keyset reader over it -------------------------------------------------


@dataclass
class Thread:
    stored: list[StoredMessage]
    running: bool
    boundary: int | None
    #: how many messages exist so far (the thread grows while it is inspected)
    visible: int = -1
    #: compactions the source recorded (an imported thread): rows of their own after their unit
    sources: tuple[SourceCompaction, ...] = ()

    def __post_init__(self) -> None:
        if self.visible < 0:
            self.visible = len(self.stored)

    @property
    def ids(self) -> list[int]:
        return [s.id for s in self.stored[: self.visible]]

    def page(self, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500) -> list[StoredMessage]:
        """The store's keyset read: the first ``limit`` after ``after_id``, or the last before ``before_id``."""
        rows = [s for s in self.stored[: self.visible] if (after_id is None or s.id > after_id) and (before_id is None or s.id < before_id)]
        return rows[-limit:] if before_id is not None and after_id is None else rows[:limit]

    def tokens(self, rows: list[StoredMessage]) -> tuple[dict[int, int], dict[int, int]]:
        """Deterministic counts: what the model sees, and the full size of the pruned ones."""
        return {s.id: s.id % 13 + 1 for s in rows}, {s.id: 100 + s.id for s in rows if s.offload_sha256}

    def read(self, request: PageRequest, *, with_tokens: bool = True) -> TimelinePage:
        rows = self.page(**request.query())
        seen, original = self.tokens(rows) if with_tokens else ({}, {})
        return request.page(rows, seen, {}, original)

    def boundary_info(self) -> BoundaryInfo | None:
        if self.boundary is None:
            return None
        return BoundaryInfo(self.boundary, "summary", 42, 3, 1, T0, "summary", "pressure")


@st.composite
def threads(draw: Any) -> Thread:
    msgs: list[tuple[Message, bool]] = []
    calls = 0
    if draw(st.integers(0, 4)) == 0:
        msgs.append((Message("system", "you are helpful"), False))
    headless = draw(st.integers(0, 5)) == 0  # an imported thread may start inside a turn
    for turn in range(draw(st.integers(1, 7))):
        if turn or not headless:
            synthetic = draw(st.integers(0, 6)) == 0
            msgs.append((Message("user", f"question {turn}", metadata={"synthetic": True} if synthetic else {}), False))
        pending: list[tuple[str, str]] = []  # calls of this turn without a result yet, any round
        for _ in range(draw(st.integers(0, 7))):
            step = draw(st.sampled_from(["calls", "calls", "text", "result", "result", "result", "orphan", "note"]))
            if step == "calls":
                new = [(f"c{calls + k}", draw(st.sampled_from(["lookup", "search", "run"]))) for k in range(draw(st.integers(1, 3)))]
                calls += len(new)
                content = draw(st.sampled_from(["", "", "let me check"]))
                msgs.append((Message("assistant", content, tool_calls=tuple(ToolCall(c, name, '{"q": 1}') for c, name in new)), False))
                pending += new
            elif step == "text":
                msgs.append((Message("assistant", f"answer {turn}"), False))
            elif step == "result" and pending:
                call, name = pending.pop(draw(st.integers(0, len(pending) - 1)))  # any order; earlier rounds' results come late
                msgs.append((Message("tool", f"result of {call}", tool_call_id=call, name=name), draw(st.booleans())))
            elif step == "orphan":
                msgs.append((Message("tool", "stray", tool_call_id=f"zz{len(msgs)}", name="lookup"), False))
            elif step == "note":
                msgs.append((Message("system", "background job finished", metadata={"ephemeral": True}), False))
    if not msgs:
        msgs.append((Message("user", "hello"), False))
    next_id = draw(st.integers(1, 40))
    stored = []
    for m, pruned in msgs:
        stored.append(StoredMessage(Message(m.role, m.content, id=next_id, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name, metadata=m.metadata), 1, T0, "ab" * 32 if pruned else None))
        next_id += draw(st.integers(1, 3))  # ids of a shared store are not dense
    running = draw(st.booleans())
    ends = [u.last_id for u in build_units([s.message for s in stored], running_turn=running)]
    boundary = draw(st.one_of(st.none(), st.sampled_from(ends)))
    shown = next(i + 1 for i, s in enumerate(stored) if s.id == boundary) if boundary is not None else 1
    after = st.sampled_from([s.id for s in stored])
    sources = tuple(
        SourceCompaction(i + 1, 1, "claude-code", draw(st.sampled_from(["summary", "prune"])), "auto", 1000 * (i + 1), "s", draw(after), None, None, f"u{i}", None)
        for i in range(draw(st.integers(0, 3)))
    )  # several may follow the same unit, or the boundary's
    return Thread(stored, running, boundary, draw(st.integers(shown, len(stored))), sources)  # the rest arrives later


# -- signatures, invariants, a shadow of the change notices --------------------------------------


def signature(node: Node) -> tuple[Any, ...]:
    """Everything a row shows, with its children: two trees with equal signatures look the same."""
    return (node.kind, node.unit_kind, node.label, node.icon, node.tokens, node.original_tokens, node.markers, node.compacted,
            node.first_id, node.last_id, node.info.preview if node.info else None, tuple(signature(c) for c in node.children))


class Shadow:
    """Replays the change notices on a copy of the structure (what a Qt view would believe)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.children: dict[int, list[Node]] = {}
        self.pending: tuple[str, Node, int, int] | None = None
        self.resets = 0
        self.changes = 0

    def _register(self, node: Node) -> None:
        self.children[id(node)] = list(node.children)
        for child in node.children:
            self._register(child)

    def begin_reset(self) -> None:
        assert self.pending is None
        self.pending = ("reset", Node("root"), 0, 0)

    def end_reset(self) -> None:
        assert self.pending is not None and self.pending[0] == "reset"
        self.pending = None
        self.children = {}
        self._register(self.timeline.root)
        self.resets += 1

    def begin_insert(self, parent: Node, first: int, last: int) -> None:
        assert self.pending is None and 0 <= first <= last
        assert self.children[id(parent)] == parent.children, "the tree changed before begin_insert"
        assert first <= len(parent.children)
        self.pending = ("insert", parent, first, last)

    def end_insert(self) -> None:
        assert self.pending is not None
        kind, parent, first, last = self.pending
        assert kind == "insert"
        self.pending = None
        rows = self.children[id(parent)]
        new = parent.children[first : last + 1]
        assert len(new) == last - first + 1 and len(parent.children) == len(rows) + len(new)
        rows[first:first] = new
        for node in new:
            assert node.parent is parent
            self._register(node)

    def begin_remove(self, parent: Node, first: int, last: int) -> None:
        assert self.pending is None and 0 <= first <= last < len(parent.children)
        assert self.children[id(parent)] == parent.children, "the tree changed before begin_remove"
        self.pending = ("remove", parent, first, last)

    def end_remove(self) -> None:
        assert self.pending is not None
        kind, parent, first, last = self.pending
        assert kind == "remove"
        self.pending = None
        rows = self.children[id(parent)]
        del rows[first : last + 1]
        assert rows == parent.children

    def changed(self, node: Node) -> None:
        assert self.pending is None and node.parent is not None
        assert node in self.children[id(node.parent)]
        self.changes += 1

    def check(self) -> None:
        """Every node the tree holds is where the notices put it."""
        assert self.pending is None

        def walk(node: Node) -> None:
            assert self.children.get(id(node)) == node.children
            for child in node.children:
                walk(child)

        walk(self.timeline.root)


def check_invariants(timeline: Timeline, thread: Thread) -> None:
    root = timeline.root
    position = {i: n for n, i in enumerate(thread.ids)}

    def walk(node: Node) -> None:
        for r, child in enumerate(node.children):
            assert child.row == r and child.parent is node
            walk(child)

    walk(root)
    ids = timeline.message_ids()
    assert ids == sorted(ids) and len(set(ids)) == len(ids) == timeline.loaded_count()
    assert all(timeline.node_for(i) is not None and timeline.node_for(i).info.id == i for i in ids)  # type: ignore[union-attr]
    top = root.children
    assert timeline.gaps() == [n for n in top if n.kind == "gap"]
    for r, node in enumerate(top):
        assert node.kind in ("unit", "gap", "boundary", "source")
        if node.kind != "gap":
            continue
        above = next((n.last_id for n in reversed(top[:r]) if n.kind == "unit"), None)
        below = next((n.first_id for n in top[r + 1 :] if n.kind == "unit"), None)
        assert (node.first_id, node.last_id) == (above, below), "a gap knows the loaded ids around it"
        assert r + 1 >= len(top) or top[r + 1].kind != "gap", "no two gaps in a row"
    # a segment (rows between gaps) is a contiguous run of the thread: nothing missing inside it
    segment: list[int] = []
    for node in [*top, Node("gap")]:
        if node.kind == "gap":
            spots = [position[i] for i in segment]
            assert spots == list(range(spots[0], spots[0] + len(spots))) if spots else True
            segment = []
        else:
            segment += [i.id for i in node.infos()]
    assert timeline.reaches_start == (bool(ids) and ids[0] == thread.ids[0] and not (top and top[0].kind == "gap"))
    assert timeline.reaches_end == (bool(ids) and ids[-1] == thread.ids[-1] and not (top and top[-1].kind == "gap"))
    assert timeline.last_id() == (max(ids) if ids else None)
    assert [n.kind for n in top].count("boundary") <= 1
    shown = [n.source.id for n in top if n.kind == "source"]  # type: ignore[union-attr]
    assert len(shown) == len(set(shown)), "a source's compaction shows once"
    for r, node in enumerate(top):
        if node.kind == "source":  # right after the unit holding the message it followed (or another source row)
            unit = next(n for n in reversed(top[:r]) if n.kind != "source")
            assert unit.kind == "unit" and unit.first_id <= node.source.after_message_id <= unit.last_id  # type: ignore[union-attr,operator]
    marker = timeline.boundary_node()
    assert (marker is not None) == any(n.kind == "boundary" for n in top)


def loaded_at_once(thread: Thread) -> Timeline:
    whole = Timeline()
    whole.reset("t", boundary=thread.boundary_info(), running_turn=thread.running, total=len(thread.stored), sources=thread.sources)
    whole.insert_page(thread.read(PageRequest(limit=10_000)))
    assert whole.exhausted and whole.message_ids() == thread.ids
    return whole


OPS = st.lists(
    st.tuples(st.sampled_from(["start", "end", "forward", "backward", "around", "evict_top", "evict_bottom", "grow"]), st.integers(0, 10_000), st.integers(1, 9), st.booleans()),
    max_size=18,
)


def apply(timeline: Timeline, thread: Thread, op: str, pick: int, limit: int, with_tokens: bool) -> None:
    """One step of what the window may do."""
    page: TimelinePage | None = None
    if op == "start":
        page = thread.read(PageRequest(limit=limit), with_tokens=with_tokens)
    elif op == "end":
        request = timeline.end_request(limit)
        page = thread.read(request, with_tokens=with_tokens) if request is not None else None
    elif op in ("forward", "backward") and timeline.gaps():
        gaps = timeline.gaps()
        gap = gaps[pick % len(gaps)]
        request = timeline.gap_request(gap, backward=op == "backward", limit=limit)
        assert request is not None and timeline.gap_request(gap, backward=False, limit=limit) is None  # one read in flight per gap
        page = thread.read(request, with_tokens=with_tokens)
    elif op == "around":  # the page around one message, as the summary card reads it
        at = thread.ids[pick % len(thread.ids)]
        rows = thread.page(before_id=at + 1, limit=limit) + thread.page(after_id=at, limit=limit)
        seen, original = thread.tokens(rows) if with_tokens else ({}, {})
        page = TimelinePage(tuple(rows), seen, {}, False, original, follows=UNKNOWN)
    elif op == "evict_top":
        timeline.evict_before(pick % (len(timeline.root.children) + 1))
    elif op == "evict_bottom":
        timeline.evict_after(pick % (len(timeline.root.children) + 1))
    elif op == "grow":
        grow(timeline, thread, 1 + pick % 6, limit)
    if page is not None:
        timeline.insert_page(page)
        if not with_tokens:  # counted after the rows were shown
            timeline.set_tokens(*thread.tokens(list(page.messages)))
        if op in ("end", "forward", "backward"):
            assert not timeline.loading, "the answer to a gap's read clears its loading state"
    timeline.gap_cancelled()  # reads still marked in flight are dropped, as the window does on a move


def grow(timeline: Timeline, thread: Thread, count: int, limit: int) -> None:
    """``count`` more messages arrive; a timeline that shows the end reads what follows its newest
    row, as the window does when the thread's count grows."""
    if thread.visible == len(thread.stored):
        return
    thread.visible = min(len(thread.stored), thread.visible + count)
    timeline.set_total(thread.visible)
    if timeline.reaches_end:
        timeline.append_page(thread.read(PageRequest(after_id=timeline.last_id(), limit=limit)))


def fill(timeline: Timeline, thread: Thread, limit: int) -> None:
    """Load whatever is missing, alternating the side each gap is read from."""
    if not timeline.loaded_count():
        timeline.insert_page(thread.read(PageRequest(limit=limit)))
    steps = 0
    while timeline.gaps():
        steps += 1
        assert steps <= 4 * len(thread.stored) + 4, "filling the gaps makes no progress"
        gap = timeline.gaps()[steps % len(timeline.gaps())]
        request = timeline.gap_request(gap, backward=steps % 2 == 0, limit=limit)
        assert request is not None
        before = (timeline.loaded_count(), len(timeline.gaps()))
        timeline.insert_page(thread.read(request))
        assert (timeline.loaded_count(), len(timeline.gaps())) != before or gap not in timeline.gaps()


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(threads(), OPS, st.integers(1, 9))
def test_any_order_of_loads_and_evictions_gives_the_tree_of_loading_everything(thread: Thread, ops: list[tuple[str, int, int, bool]], fill_limit: int) -> None:
    timeline = Timeline()
    shadow = Shadow(timeline)
    timeline.listener = shadow
    timeline.reset("t", boundary=thread.boundary_info(), running_turn=thread.running, total=len(thread.stored), sources=thread.sources)
    for op, pick, limit, with_tokens in ops:
        apply(timeline, thread, op, pick, limit, with_tokens)
        check_invariants(timeline, thread)
        shadow.check()
    grow(timeline, thread, len(thread.stored), fill_limit)
    fill(timeline, thread, fill_limit)
    check_invariants(timeline, thread)
    shadow.check()
    assert timeline.exhausted and timeline.message_ids() == thread.ids
    assert signature(timeline.root) == signature(loaded_at_once(thread).root)


# -- the arithmetic ------------------------------------------------------------------------------


def row(kind: str, first: int | None = None, last: int | None = None, unit_kind: str = "") -> Node:
    node = Node(kind)
    node.first_id, node.last_id, node.unit_kind = first, last, unit_kind
    return node


def test_a_span_holds_the_ids_strictly_between_its_loaded_neighbours() -> None:
    assert Span(3, 9).holds(4) and Span(3, 9).holds(8) and not Span(3, 9).holds(3) and not Span(3, 9).holds(9)
    assert Span(None, 5).holds(-100) and Span(5, None).holds(10**9) and Span(None, None).holds(0)
    assert segments.find_gap([Span(None, 3), Span(7, 12), Span(20, None)], 9) == 1
    assert segments.find_gap([Span(None, 3), Span(7, 12), Span(20, None)], 15) is None
    assert segments.find_gap([Span(None, 3), Span(7, 12), Span(20, None)], 21) == 2


def test_a_page_is_cut_into_runs_at_the_ids_already_loaded() -> None:
    assert segments.split_runs([4, 5, 6], set(), 3, UNKNOWN) == [Run(3, 0, 3, UNKNOWN)]
    # 5 is loaded: the run before it ends at 5, the run after it starts there
    assert segments.split_runs([4, 5, 6], {5}, 3, None) == [Run(3, 0, 1, 5), Run(5, 2, 3, None)]
    # only loaded ids: empty runs, each proving nothing lies between its bounds
    assert segments.split_runs([4, 5], {4, 5}, None, 9) == [Run(None, 0, 0, 4), Run(4, 1, 1, 5), Run(5, 2, 2, 9)]
    assert segments.split_runs([], set(), 7, None) == [Run(7, 0, 0, None)]


def test_a_run_attaches_to_a_side_only_when_its_bound_proves_it() -> None:
    assert segments.attaches_above(None, None) and not segments.attaches_above(5, None)  # the thread's start
    assert segments.attaches_above(5, 5) and segments.attaches_above(3, 5) and not segments.attaches_above(6, 5)
    assert not segments.attaches_above(UNKNOWN, 5) and not segments.attaches_above(None, 5)
    assert segments.attaches_below(None, None) and not segments.attaches_below(9, None)  # the thread's end
    assert segments.attaches_below(9, 9) and segments.attaches_below(12, 9) and not segments.attaches_below(8, 9)
    assert not segments.attaches_below(UNKNOWN, 9)


def test_placing_a_run_finds_its_gap_or_refuses() -> None:
    gaps = [Span(None, 10), Span(20, 30)]
    assert segments.place(gaps, 40, (22, 25), 20, 30) == Placement(1, 20, 30, True, True)
    assert segments.place(gaps, 40, (22, 25), UNKNOWN, UNKNOWN) == Placement(1, 20, 30, False, False)
    assert segments.place(gaps, 40, (5, 8), None, 9) == Placement(0, None, 10, True, False)
    assert segments.place(gaps, 40, (22, 31), 20, None) is None  # overruns its gap: the thread changed under the read
    assert segments.place(gaps, 40, (15, 16), 12, 17) is None  # inside a loaded segment
    assert segments.place(gaps, 40, (41, 45), 40, None) == Placement(None, 40, None, True, True)  # the thread grew
    assert segments.place([], None, (1, 5), None, UNKNOWN) == Placement(None, None, None, True, False)  # the first page
    assert segments.place([], None, (50, 60), UNKNOWN, None) == Placement(None, None, None, False, True)  # the newest page
    # an empty run only proves that a gap holds nothing when it closes both sides
    assert segments.place(gaps, 40, None, 20, 30) == Placement(1, 20, 30, True, True)
    assert segments.place(gaps, 40, None, 20, UNKNOWN) is None
    assert segments.place(gaps, 40, None, UNKNOWN, 30) is None
    assert segments.place(gaps, 40, None, 21, 30) is None  # no gap starts at 21


def test_a_splice_regroups_the_units_its_run_continues() -> None:
    top = [row("unit", 1, 4, "turn"), row("unit", 5, 6, "turn_user"), row("unit", 7, 8, "round"), row("gap", 8, 20), row("unit", 20, 22, "round"), row("unit", 23, 25, "round")]
    both = Placement(0, 8, 20, True, True)
    # above: back over the running turn's rounds to its user head; below: the first unit after the gap
    assert segments.regroup(top, 3, True, both, (9, 19), None) == segments.Regroup(1, 3, 4, 5, True)
    # a run that closes neither side rebuilds only the gap row
    assert segments.regroup(top, 3, True, Placement(0, 8, 20, False, False), (10, 12), None) == segments.Regroup(3, 3, 4, 4, False)
    # the newest rows: the end of the thread is reached, where a running turn is
    end = [row("unit", 1, 4, "turn"), row("unit", 5, 9, "turn")]
    assert segments.regroup(end, 2, False, Placement(None, 9, None, True, True), (10, 12), None) == segments.Regroup(1, 2, 2, 2, True)


def test_a_backward_fill_takes_the_later_rounds_whose_orphans_may_be_late_results() -> None:
    orphaned = row("unit", 12, 13, "round")
    orphaned.markers = ("orphan",)
    top = [row("gap", None, 10), row("unit", 10, 11, "round"), orphaned, row("unit", 14, 15, "round"), row("unit", 16, 16, "round")]
    assert segments.regroup(top, 0, True, Placement(0, None, 10, False, True), (5, 9), None) == segments.Regroup(0, 0, 1, 3, True)
    top[1].unit_kind = "turn"  # a finished turn: its rounds are inside it
    assert segments.regroup(top, 0, True, Placement(0, None, 10, False, True), (5, 9), None) == segments.Regroup(0, 0, 1, 2, False)


def test_a_run_that_closes_the_gap_at_the_boundary_rebuilds_the_unit_after_it() -> None:
    top = [row("gap", None, 6), row("unit", 6, 8, "round")]
    assert segments.regroup(top, 0, True, Placement(0, None, 6, False, True), (3, 5), 5) == segments.Regroup(0, 0, 1, 2, True)


def test_an_empty_page_proving_the_end_regroups_the_last_turn_after_the_boundary() -> None:
    top = [row("unit", 1, 4, "turn"), row("boundary"), row("unit", 5, 9, "turn")]
    assert segments.regroup(top, 3, False, Placement(None, 9, None, True, True), None, 4) == segments.Regroup(2, 3, 3, 3, True)


def test_the_property_found_cases_load_like_the_whole_thread() -> None:
    """The three differences the property found, as plain examples (each failed before the fix)."""

    def thread(messages: list[Message], boundary: int | None) -> Thread:
        return Thread([StoredMessage(replace_id(m, i + 1), 1, T0) for i, m in enumerate(messages)], True, boundary)

    def call(name: str) -> Message:
        return Message("assistant", "", tool_calls=(ToolCall(name, "lookup", "{}"),))

    def result(name: str) -> Message:
        return Message("tool", "r", tool_call_id=name, name="lookup")

    cases = [
        # a full first page, then an empty one proves the end: the running turn after the boundary is regrouped
        (thread([Message("system", "s"), Message("user", "q"), Message("assistant", "a")], 2), [("start", 3), ("forward", 3)]),
        # filled backward one message at a time: c3's late result is not an orphan once c3 is loaded
        (thread([Message("user", "q"), call("c3"), call("c4"), call("c5"), call("c6"), result("c3"), Message("assistant", "a")], None),
         [("start", 1)] + [("backward", 1)] * 7),
        # the round right after the boundary: its orphan "continues" only while the gap above it is open
        (thread([Message("user", "q"), call("c6"), result("zz"), Message("assistant", "a")], 1), [("end", 3), ("backward", 1), ("forward", 1)]),
    ]
    for case, steps in cases:
        timeline = Timeline()
        timeline.reset("t", boundary=case.boundary_info(), running_turn=True)
        for op, limit in steps:
            apply(timeline, case, op, 0, limit, True)
        assert timeline.exhausted
        assert signature(timeline.root) == signature(loaded_at_once(case).root)


def replace_id(m: Message, i: int) -> Message:
    return Message(m.role, m.content, id=i, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name, metadata=m.metadata)


def test_a_splice_does_not_regroup_across_the_boundary_row() -> None:
    top = [row("unit", 1, 4, "turn"), row("boundary"), row("unit", 5, 6, "turn"), row("gap", 6, 9), row("unit", 9, 12, "turn")]
    assert segments.regroup(top, 3, True, Placement(0, 6, 9, True, True), (7, 8), 4) == segments.Regroup(2, 3, 4, 5, False)
    # the compacted unit ending at the boundary is taken with its boundary row
    compacted = [row("unit", 1, 2, "turn"), row("gap", 2, 3), row("unit", 3, 4, "turn"), row("boundary"), row("unit", 5, 6, "turn")]
    assert segments.regroup(compacted, 1, True, Placement(0, 2, 3, True, True), None, 4) == segments.Regroup(0, 1, 2, 4, False)


def test_evictions_keep_a_unit_and_say_what_is_dropped() -> None:
    top = [row("unit", 1, 3, "turn"), row("unit", 4, 6, "turn"), row("boundary"), row("unit", 7, 9, "turn"), row("gap", 9, None)]
    assert segments.evict_before(top, 1, None) == (1, 2)
    assert segments.evict_before(top, 1, 6) == (1, 3)  # with the boundary row after the kept unit
    assert segments.evict_before(top, 2, 6) == (3, 4)  # from the first unit at or after the row
    assert segments.evict_before(top, 0, None) is None and segments.evict_before(top, 4, None) is None
    assert segments.evict_after(top, 2) == 1  # from the last unit at or before the row
    assert segments.evict_after(top, 3) == 3 and segments.evict_after(top, 4) == 3
    short = [row("unit", 1, 3, "turn")]
    assert segments.evict_after(short, 0) is None and segments.evict_before(short, 0, None) is None


def test_gap_counts_and_labels() -> None:
    assert segments.gap_count(100, 30, 1) == 70
    assert segments.gap_count(100, 30, 2) is None  # two gaps: who holds what is unknown
    assert segments.gap_count(None, 30, 1) is None and segments.gap_count(20, 30, 1) is None
    assert segments.gap_label(2800, loading=False, failed=False) == "… 2,800 messages not loaded — Enter to load"
    assert segments.gap_label(None, loading=True, failed=False) == "… loading (more messages not loaded)"
    assert segments.gap_label(5, loading=False, failed=True) == "… 5 messages not loaded: loading failed — Enter to retry"


def test_the_core_imports_no_qt() -> None:
    """The package is plain Python: importing it loads neither PySide6 nor the Qt model."""
    code = "import sys, inspector_app.timeline; print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'qasync') or m.startswith('inspector_app.models')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
