"""The timeline tree without Qt: nodes, markers, and the builder that groups a contiguous run of
messages into units → tool rounds → messages with the boundary row where compacted history ends.

Grouping comes from ``engine.core.units`` (the same cut points compaction uses): a turn opens at a
request (``engine.core.units.starts_turn``); meta user messages (caveats, commands and their output,
reminders, interruption markers) are rows inside the turn they appear in. A run cut by a gap is
built knowing it (``cut_before`` / ``cut_after``): a unit whose missing part is not loaded is marked
"continues" instead of "open round" or "orphan".
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from engine.core.messages import META_PRUNED, Message
from engine.core.units import ToolRound, Unit, build_units, split_rounds, starts_turn
from engine.core.views import Offload, SourceCompaction, StoredMessage

from .pages import FLAG_ERROR, FLAG_META, FLAG_NO_RESULT, BoundaryInfo, MessageRow, message_flags, one_line, source_headline

COLUMNS: tuple[str, ...] = ("Message", "Tokens", "Markers", "#")
COL_TEXT, COL_TOKENS, COL_MARKERS, COL_ID = range(len(COLUMNS))

MARKER_PRUNED = "pruned"
MARKER_SYNTHETIC = "synthetic"
MARKER_EPHEMERAL = "ephemeral"
MARKER_OPEN = "open round"
MARKER_ORPHAN = "orphan"
MARKER_CONTINUES = "continues"

#: unit kinds of the running turn (a running last turn is cut into a user head and round units)
RUNNING_KINDS = ("round", "turn_user")


class Node:
    """One row of the tree: a unit, a tool round, a message, the boundary or a gap.

    ``row`` is kept current (O(1) ``parent()``/``index()``); a gap knows the loaded ids around it
    (``first_id``: the last id above, ``last_id``: the first id below, ``None``: the thread's edge)."""

    __slots__ = ("kind", "parent", "children", "row", "info", "label", "icon", "tokens", "original_tokens", "markers", "compacted", "first_id", "last_id", "unit_kind", "count", "loading", "failed", "source")

    def __init__(self, kind: str, parent: "Node | None" = None) -> None:
        self.kind = kind
        self.parent = parent
        self.children: list[Node] = []
        self.row = 0
        self.info: MessageRow | None = None
        self.label = ""
        self.icon = ""
        self.tokens: int | None = None  # what the model sees
        self.original_tokens: int | None = None  # the full text, when it was pruned
        self.markers: tuple[str, ...] = ()
        self.compacted = False
        self.first_id: int | None = None
        self.last_id: int | None = None
        self.unit_kind = ""
        self.count: int | None = None  # a gap: messages not loaded, when known
        self.loading = False
        self.failed = False
        self.source: SourceCompaction | None = None  # a "source" row: the compaction the source recorded

    def __repr__(self) -> str:
        return f"<Node {self.kind} {self.first_id}..{self.last_id} {self.label[:30]!r}>"

    def add(self, child: "Node") -> None:
        child.parent = self
        child.row = len(self.children)
        self.children.append(child)

    def walk(self) -> Iterator["Node"]:
        """This node's descendants in display order."""
        for child in self.children:
            yield child
            yield from child.walk()

    def infos(self) -> list[MessageRow]:
        """The messages under this node, in order."""
        return [n.info for n in ([self] if self.info else self.walk()) if n.info is not None]

    def state(self) -> tuple[Any, ...]:
        """Everything a row shows (a change emits dataChanged)."""
        return (self.label, self.icon, self.tokens, self.original_tokens, self.markers, self.compacted, self.first_id, self.last_id, self.count, self.loading, self.failed)

    def take(self, other: "Node") -> None:
        """Copy ``other``'s row fields (not its children) into this node."""
        self.info, self.label, self.icon, self.tokens, self.original_tokens = other.info, other.label, other.icon, other.tokens, other.original_tokens
        self.markers, self.compacted, self.first_id, self.last_id, self.unit_kind = other.markers, other.compacted, other.first_id, other.last_id, other.unit_kind
        self.count, self.loading, self.failed, self.source = other.count, other.loading, other.failed, other.source

    def depth(self) -> int:
        """0 for a top-level row (a child of the root)."""
        depth, node = -1, self
        while node.parent is not None:
            node, depth = node.parent, depth + 1
        return depth


def same(old: Node, new: Node) -> bool:
    """``old`` becomes ``new`` when a range is rebuilt: same kind and (for rows with messages)
    overlapping ids."""
    if old.kind != new.kind:
        return False
    if old.kind in ("gap", "boundary"):
        return True
    if old.kind == "source":
        return old.source is not None and new.source is not None and old.source.id == new.source.id
    if old.kind == "message":
        return old.first_id == new.first_id
    if old.first_id is None or old.last_id is None or new.first_id is None or new.last_id is None:
        return False
    return old.first_id <= new.last_id and new.first_id <= old.last_id


# -- markers -----------------------------------------------------------------------------------


def _markers(shape: Message, pruned: bool, *, orphan: bool = False, open_round: bool = False, continues: bool = False, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
    out: list[str] = list(flags)
    if pruned:
        out.append(MARKER_PRUNED)
    if shape.is_synthetic:
        out.append(MARKER_SYNTHETIC)
    if shape.is_ephemeral:
        out.append(MARKER_EPHEMERAL)
    if open_round and shape.tool_calls:
        out.append(MARKER_OPEN)
    if orphan:
        out.append(MARKER_ORPHAN)
    if continues:
        out.append(MARKER_CONTINUES)
    return tuple(out)


def message_markers(stored: StoredMessage, *, orphan: bool = False, open_round: bool = False) -> tuple[str, ...]:
    """The markers a message row carries."""
    m = stored.message
    return _markers(m, bool(stored.offload_sha256 or m.metadata.get(META_PRUNED)), orphan=orphan, open_round=open_round, flags=message_flags(m))


def _round_label(messages: Sequence[Message]) -> str:
    calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls]
    if not calls:
        return "Tool results" if any(m.role == "tool" for m in messages) else "Notes"
    names = ", ".join(dict.fromkeys(c.name for c in calls))
    suffix = f" · {len(calls)} parallel calls" if len(calls) > 1 else ""
    return one_line(f"Tool round · {names}{suffix}")


def _flags(open_: bool, orphans: bool, *, open_continues: bool, orphans_continue: bool) -> tuple[str, ...]:
    """Group markers: an open round or orphans at a gap edge "continue" in the gap instead."""
    out = []
    if open_ and not open_continues:
        out.append(MARKER_OPEN)
    if orphans and not orphans_continue:
        out.append(MARKER_ORPHAN)
    if (open_ and open_continues) or (orphans and orphans_continue):
        out.append(MARKER_CONTINUES)
    return tuple(out)


# -- building ----------------------------------------------------------------------------------


class Builder:
    """Turns a contiguous run of messages into top-level nodes (units with rounds and messages).

    ``cut_before``: a gap precedes the run (results may answer calls in it); ``cut_after``: a gap
    follows it (its last round may get its results there)."""

    def __init__(self, rows: Sequence[MessageRow], tokens: Mapping[int, int], original: Mapping[int, int], boundary: int | None, *, cut_before: bool, cut_after: bool) -> None:
        self._rows = {id(r.shape): r for r in rows}
        self._tokens = tokens
        self._original = original
        self._boundary = boundary
        self._cut_before = cut_before
        self._cut_after = cut_after

    def build(self, *, running: bool) -> list[Node]:
        units = build_units([r.shape for r in self._rows.values()], running_turn=running)
        last = len(units) - 1
        return [self._unit_node(u, first=i == 0, last=i == last) for i, u in enumerate(units)]

    def _message_node(self, m: Message, *, orphan: bool = False, open_round: bool = False, continues: bool = False) -> Node:
        row = self._rows[id(m)]
        node = Node("message")
        node.info = row
        node.label = row.preview
        node.icon = m.role
        node.tokens = self._tokens.get(row.id)
        node.original_tokens = self._original.get(row.id)
        node.markers = _markers(m, row.pruned, orphan=orphan, open_round=open_round, continues=continues, flags=row.flags)
        node.first_id = node.last_id = row.id
        node.compacted = self._boundary is not None and row.id <= self._boundary
        return node

    def _group(self, kind: str, label: str, icon: str, children: list[Node], markers: tuple[str, ...], unit_kind: str = "") -> Node:
        node = Node(kind)
        node.label, node.icon, node.markers, node.unit_kind = label, icon, markers, unit_kind
        for child in children:
            node.add(child)
        counted = [c.tokens for c in children if c.tokens is not None]
        node.tokens = sum(counted) if counted else None
        ids = [i for c in children for i in (c.first_id, c.last_id) if i is not None]
        node.first_id, node.last_id = (min(ids), max(ids)) if ids else (None, None)
        node.compacted = bool(children) and all(c.compacted for c in children)
        return node

    def _round_children(self, r: ToolRound, orphan_ids: set[int], *, open_continues: bool, orphans_continue: bool) -> list[Node]:
        out = []
        for m in r.messages:
            orphan = id(m) in orphan_ids
            cut_call = open_continues and r.open and bool(m.tool_calls)
            out.append(self._message_node(m, orphan=orphan and not orphans_continue, open_round=r.open and not open_continues, continues=cut_call or (orphan and orphans_continue)))
        return out

    def _round_nodes(self, r: ToolRound, orphan_ids: set[int], *, open_continues: bool, orphans_continue: bool) -> list[Node]:
        """A round with tool calls (or a group of tool results) becomes a round row; the messages
        of a round without either (a text answer, with the notes or meta messages after it) stay
        message rows of the turn."""
        children = self._round_children(r, orphan_ids, open_continues=open_continues, orphans_continue=orphans_continue)
        if not any(m.tool_calls or m.role == "tool" for m in r.messages):
            return children
        markers = _flags(r.open, bool(r.orphans), open_continues=open_continues, orphans_continue=orphans_continue)
        return [self._group("round", _round_label(r.messages), "round", children, markers)]

    def _unit_node(self, unit: Unit, *, first: bool, last: bool) -> Node:
        msgs = unit.messages
        orphan_ids = {id(m) for m in unit.orphans}
        orphans_continue = first and self._cut_before and not any(starts_turn(m) for m in msgs)
        open_continues = last and self._cut_after
        if unit.kind == "round":
            r = ToolRound(msgs, unit.open, unit.orphans)
            children = self._round_children(r, orphan_ids, open_continues=open_continues, orphans_continue=orphans_continue)
            markers = _flags(unit.open, bool(unit.orphans), open_continues=open_continues, orphans_continue=orphans_continue)
            return self._group("unit", _round_label(msgs) + " · running turn", "round", children, markers, "round")
        cut = next((i + 1 for i, m in enumerate(msgs) if starts_turn(m)), 0)  # after the request (and its leading context)
        head, rest = msgs[:cut], msgs[cut:]
        user = head[-1] if head else None
        user_label = self._rows[id(user)].preview if user else ""
        if unit.kind == "turn_user":
            children = [self._message_node(m, orphan=id(m) in orphan_ids) for m in msgs]
            markers = _flags(False, bool(unit.orphans), open_continues=False, orphans_continue=False)
            return self._group("unit", one_line("Running turn · " + user_label), "turn", children, markers, "turn_user")
        children = [self._message_node(m) for m in head]
        rounds = split_rounds(rest)
        for i, r in enumerate(rounds):
            children.extend(self._round_nodes(r, orphan_ids, open_continues=open_continues and i == len(rounds) - 1, orphans_continue=orphans_continue))
        really_open = any(r.open for r in rounds[:-1]) or (bool(rounds) and rounds[-1].open and not open_continues)
        cut_open = open_continues and bool(rounds) and rounds[-1].open
        markers = _flags(really_open, bool(unit.orphans) and not orphans_continue, open_continues=False, orphans_continue=False)
        if cut_open or (unit.orphans and orphans_continue):
            markers += (MARKER_CONTINUES,)
        icon = "turn"
        if user:
            label = f"Turn · {user_label}"
        elif msgs and all(m.role in ("system", "developer") or m.is_meta for m in msgs):  # instructions before any request
            label, icon = f"Context · {self._rows[id(msgs[0])].preview}", "context"
        else:
            label = "Turn (continued)"
        return self._group("unit", one_line(label), icon, children, markers, "turn")


def boundary_node(boundary: BoundaryInfo) -> Node:
    """The row between the compacted history and the surface."""
    node = Node("boundary")
    node.label = boundary.headline()
    node.icon = "boundary"
    node.tokens = boundary.summary_tokens
    return node


def source_node(sc: SourceCompaction) -> Node:
    """The row of a compaction the source recorded (not one of ours): after the unit it followed."""
    node = Node("source")
    node.label = source_headline(sc)
    node.icon = "boundary"
    node.source = sc
    return node


def place_sources(nodes: list[Node], sources: Sequence[SourceCompaction]) -> list[Node]:
    """``nodes`` (top-level units of a contiguous run) with a row for each source compaction whose
    place is in the run: right after the unit holding its ``after_message_id`` (a source compacts
    between turns; one recorded inside a unit still shows after it). One recorded before any
    imported message (``after_message_id`` None) has no place in the timeline."""
    if not sources:
        return nodes
    out: list[Node] = []
    pending = sorted((sc for sc in sources if sc.after_message_id is not None), key=lambda sc: (sc.after_message_id, sc.id))
    for node in nodes:
        out.append(node)
        if node.kind != "unit" or node.first_id is None or node.last_id is None:
            continue
        out += [source_node(sc) for sc in pending if node.first_id <= sc.after_message_id <= node.last_id]  # type: ignore[operator]
    return out


def partition(
    rows: Sequence[MessageRow],
    tokens: Mapping[int, int],
    original_tokens: Mapping[int, int],
    boundary: BoundaryInfo | None,
    *,
    cut_before: bool,
    cut_after: bool,
    running: bool,
    sources: Sequence[SourceCompaction] = (),
) -> list[Node]:
    """Top-level nodes of a contiguous run: its units, with the boundary row where the compacted
    part ends (when that place is in the run) and a row for each compaction the source recorded
    (:func:`place_sources`). ``running``: the run ends the thread and its last turn is still running."""
    if not rows:
        return []
    b = boundary.boundary if boundary else None
    before = [r for r in rows if b is not None and r.id <= b]
    after = list(rows[len(before) :])
    placed = bool(before) and (bool(after) or before[-1].id == b)
    nodes: list[Node] = []
    if before:
        nodes += _build_split(before, tokens, original_tokens, b, sources, cut_before=cut_before, cut_after=cut_after and not placed, running=False)
    if placed:
        assert boundary is not None
        nodes.append(boundary_node(boundary))
    if after:
        nodes += _build_split(after, tokens, original_tokens, b, sources, cut_before=cut_before and not before, cut_after=cut_after, running=running)
    return place_sources(nodes, sources)


def _build_split(
    rows: Sequence[MessageRow],
    tokens: Mapping[int, int],
    original_tokens: Mapping[int, int],
    boundary: int | None,
    sources: Sequence[SourceCompaction],
    *,
    cut_before: bool,
    cut_after: bool,
    running: bool,
) -> list[Node]:
    """The units of ``rows``, split where the source compacted inside them: the source ran its
    next requests from its summary, so what follows a compaction recorded in the middle of a turn
    is a unit of its own ("Turn (continued)") after the compaction's row (:func:`place_sources`),
    not part of the turn before it. The split depends only on the rows and the sources, so a
    thread loaded page by page groups exactly as one loaded whole."""
    cuts = sorted({sc.after_message_id for sc in sources if sc.after_message_id is not None and rows[0].id <= sc.after_message_id < rows[-1].id})
    if not cuts:
        return Builder(rows, tokens, original_tokens, boundary, cut_before=cut_before, cut_after=cut_after).build(running=running)
    pieces: list[list[MessageRow]] = []
    piece: list[MessageRow] = []
    pending = iter(cuts)
    cut = next(pending, None)
    for row in rows:
        while cut is not None and piece and row.id > cut:
            pieces.append(piece)
            piece = []
            cut = next(pending, None)
        while cut is not None and row.id > cut:  # several compactions after the same message: one split
            cut = next(pending, None)
        piece.append(row)
    pieces.append(piece)
    last = len(pieces) - 1
    nodes: list[Node] = []
    for i, part in enumerate(pieces):
        nodes += Builder(part, tokens, original_tokens, boundary, cut_before=cut_before and i == 0, cut_after=cut_after and i == last).build(running=running and i == last)
    return nodes


# -- what a row says ---------------------------------------------------------------------------


def display_text(node: Node, col: int) -> str:
    """The text of ``node`` in column ``col``."""
    if col == COL_TEXT:
        return node.label
    if col == COL_TOKENS:
        return "" if node.tokens is None else f"{node.tokens:,}"
    if col == COL_MARKERS:
        return " · ".join(node.markers)
    if node.kind == "message" and node.first_id is not None:
        return str(node.first_id)
    return ""


def tooltip_text(node: Node, boundary: BoundaryInfo | None, offload: Offload | None) -> str | None:
    """The tooltip of ``node`` (``offload``: the record of its message, when it was pruned)."""
    lines: list[str] = []
    if node.kind == "boundary" and boundary is not None:
        return "Everything above is represented only by the rolling summary.\n" + boundary.headline()
    if node.kind == "source" and node.source is not None:
        return "A compaction the source itself recorded (not one of ours): the messages stay, our engine can compact them to compare.\n" + node.label
    if node.kind == "gap":
        where = " and ".join(([f"after #{node.first_id}"] if node.first_id is not None else [])
                             + ([f"before #{node.last_id}"] if node.last_id is not None else []))
        return f"Messages {where or 'of this thread'} are not loaded yet: they load when this row scrolls into view, or press Enter."
    if node.compacted:
        lines.append("compacted: the model sees only the summary of this")
    if node.info is not None:
        if offload is not None:
            full = node.original_tokens if node.original_tokens is not None else offload.original_tokens
            seen = node.tokens if node.original_tokens is not None and node.tokens is not None else offload.preview_tokens
            lines.append(f"pruned: the model sees a {seen:,}-token preview of {full:,} tokens ({full:,} → {seen:,})")
        elif MARKER_PRUNED in node.markers:
            lines.append("pruned: the model sees a preview")
    if MARKER_ORPHAN in node.markers:
        lines.append("orphan: answers no pending tool call")
    if MARKER_OPEN in node.markers:
        lines.append("open round: a call has no result yet")
    if MARKER_CONTINUES in node.markers:
        lines.append("continues: the rest of this is in messages not loaded yet")
    if FLAG_ERROR in node.markers:
        lines.append("error: the tool reported a failure")
    if FLAG_NO_RESULT in node.markers:
        lines.append("no result: the call got no result in the source; this recorded marker closes it")
    if FLAG_META in node.markers and node.info is not None:
        lines.append(f"meta ({node.info.shape.meta_kind}): not a request, the source recorded it in the user's or system's name")
    return "\n".join(lines) or None
