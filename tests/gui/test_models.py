"""Item models tested without views: rows, roles, paging, boundary row, markers, replay cursor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import QApplication

from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.views import CompactionEvent, StoredMessage
from inspector_app import theme
from inspector_app.models.threads import COL_MESSAGES, COL_PRESSURE, COL_STATE, KeyRole, ThreadListModel
from inspector_app.models.timeline import (
    COL_MARKERS,
    COL_TOKENS,
    UNKNOWN,
    BoundaryInfo,
    CompactedRole,
    MarkersRole,
    MessageIdRole,
    MessageRole,
    NodeKindRole,
    PageRequest,
    TimelineModel,
    TimelinePage,
    TokensRole,
    message_matches,
)
from inspector_app.panels.events.model import EventsModel, TargetRole, event_detail
from inspector_app.panels.replay.model import ReplayModel, SurfaceModel, step_label
from tests.gui.fake_service import T0, FakeService, install_demo, long_conversation

pytestmark = pytest.mark.gui
ROOT = QModelIndex()


@pytest.fixture
def fake(tmp_path: Path) -> FakeService:
    service = FakeService(tmp_path / "workdir")
    install_demo(service)
    return service


def page(service: FakeService, key: str, after_id: int | None, limit: int) -> TimelinePage:
    return read(service, key, PageRequest(after_id=after_id, limit=limit))


def read(service: FakeService, key: str, request: PageRequest) -> TimelinePage:
    """What the window does off the GUI thread: the keyset read, offloads, token counts (10 each)."""
    rows = service.reads.messages_page(key, **request.query())
    pruned = [s.id for s in rows if s.offload_sha256]
    return request.page(rows, {s.id: 10 for s in rows}, service.reads.offloads(key, pruned))


def fresh(service: FakeService, key: str, *, running: bool = False) -> TimelineModel:
    model = TimelineModel()
    state = service.reads.compaction_state(key)
    model.reset(key, boundary=BoundaryInfo.from_state(state, service.reads.history(key)), running_turn=running, total=service.reads.message_count(key))
    return model


def load(service: FakeService, key: str, *, limit: int = 500, running: bool = False) -> TimelineModel:
    """Drive the model the way the window does: the first page, then the trailing gap, forward."""
    model = fresh(service, key, running=running)
    model.insert_page(read(service, key, PageRequest(limit=limit)))
    while model.gaps():
        gap = model.gaps()[-1]
        request = model.gap_request(gap, backward=False, limit=limit)
        assert request is not None and model.gap_request(gap, backward=False, limit=limit) is None  # one read in flight per gap
        model.insert_page(read(service, key, request))
    return model


def tree(model: TimelineModel, parent: QModelIndex = ROOT, depth: int = 0) -> list[tuple[int, str, str]]:
    out = []
    for r in range(model.rowCount(parent)):
        index = model.index(r, 0, parent)
        out.append((depth, model.data(index, NodeKindRole), model.data(index)))
        out += tree(model, index, depth + 1)
    return out


def find_row(model: TimelineModel, message_id: int) -> QModelIndex:
    index = model.index_for_message(message_id)
    assert index.isValid()
    return index


# -- threads -----------------------------------------------------------------------------------


def test_thread_list_rows_states_and_pressure(qapp: QApplication, fake: FakeService) -> None:
    model = ThreadListModel()
    model.set_threads(fake.list_threads())
    assert model.rowCount() == 5 and model.columnCount() == 6
    states = {model.data(model.index(r, 0), KeyRole): model.data(model.index(r, COL_STATE)) for r in range(5)}
    assert states == {"acme-vat": "idle", "beta-running": "running", "delta-queued": "queued", "gamma-waiting": "waiting", "omega-long": "idle"}
    assert model.data(model.index(0, COL_PRESSURE)) == "–"
    model.set_pressure("omega-long", 0.8496)
    model.set_pressure("acme-vat", 0.85)
    assert model.data(model.index(4, COL_PRESSURE)) == "84.9%"  # never rounds up into the hint (the header's figure)
    assert model.data(model.index(0, COL_PRESSURE)) == "85.0%"
    # the search is the database's now (issue 26): tests/gui/test_thread_list_paged.py


def test_thread_list_refresh_in_place_keeps_rows(qapp: QApplication, fake: FakeService) -> None:
    model = ThreadListModel()
    model.set_threads(fake.list_threads())
    resets: list[bool] = []
    model.modelReset.connect(lambda: resets.append(True))
    fake.append("acme-vat", user("again"))
    model.set_threads(fake.list_threads())
    assert not resets and model.data(model.index(0, COL_MESSAGES)) == "13"


# -- timeline ----------------------------------------------------------------------------------


def test_boundary_row_dims_compacted_units_and_groups_parallel_calls(qapp: QApplication, fake: FakeService) -> None:
    model = load(fake, "acme-vat")
    top = [(model.data(model.index(r, 0), NodeKindRole), model.data(model.index(r, 0), CompactedRole)) for r in range(model.rowCount())]
    assert top == [("unit", True), ("boundary", False), ("unit", False), ("unit", False)]
    assert model.data(model.index(1, 0)).startswith("Compacted history ends at #4")
    assert model.data(model.index(1, COL_TOKENS)) == str(fake.compaction_state("acme-vat").summary_tokens)
    compacted = model.index(0, 0, model.index(0, 0))
    assert model.data(compacted, CompactedRole) is True
    assert model.data(compacted, Qt.ItemDataRole.ForegroundRole).color() == theme.color("text_dim")
    round_index = model.index(1, 0, model.index(2, 0))
    assert model.data(round_index, NodeKindRole) == "round"
    assert model.data(round_index) == "Tool round · query_kb, web_search · 2 parallel calls"
    assert [model.data(model.index(r, 0, round_index), MessageIdRole) for r in range(model.rowCount(round_index))] == [6, 7, 8]


def test_markers_pruned_and_orphan_are_flagged_not_hidden(qapp: QApplication, fake: FakeService) -> None:
    model = load(fake, "acme-vat")
    pruned = find_row(model, 7)
    assert model.data(pruned, MarkersRole) == ("pruned",)
    assert model.data(pruned.siblingAtColumn(COL_MARKERS)) == "pruned"
    assert "40-token preview of 900 tokens" in model.data(pruned, Qt.ItemDataRole.ToolTipRole)
    orphan = find_row(model, 11)
    assert model.data(orphan, MarkersRole) == ("orphan",)
    assert "orphan" in model.data(orphan.parent(), MarkersRole)
    assert [m for _, kind, m in tree(model) if kind == "message"].__len__() == 12  # every message has a row


def test_open_round_synthetic_and_ephemeral_markers(qapp: QApplication) -> None:
    model = TimelineModel()
    model.reset("t", running_turn=True)
    msgs = [
        user("please run it"),
        Message("user", "(continued)", metadata={"synthetic": True}),
        assistant("", ToolCall("a", "run", "{}"), ToolCall("b", "run", "{}")),
        tool_result("a", "ok", name="run"),
        Message("system", "background job finished", metadata={"ephemeral": True}),
    ]
    stored = tuple(StoredMessage(Message(m.role, m.content, id=i + 1, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name, metadata=m.metadata), 1, T0) for i, m in enumerate(msgs))
    model.append_page(TimelinePage(stored, exhausted=True))
    assert "synthetic" in model.data(find_row(model, 2), MarkersRole)
    assert "open round" in model.data(find_row(model, 3), MarkersRole)
    assert "ephemeral" in model.data(find_row(model, 5), MarkersRole)
    kinds = [(d, k) for d, k, _ in tree(model) if d == 0]
    assert kinds == [(0, "unit"), (0, "unit")]  # running turn: turn_user (the synthetic message starts no turn), then the round
    assert "open round" in model.data(model.index(1, 0), MarkersRole)


def test_keyset_paging_across_unit_boundaries_gives_the_same_tree(qapp: QApplication, fake: FakeService) -> None:
    whole = load(fake, "acme-vat", limit=500)
    paged = load(fake, "acme-vat", limit=5)
    assert tree(paged) == tree(whole)
    assert paged.exhausted and not paged.gaps() and not paged.canFetchMore(ROOT)
    after = [args[1] for name, args in fake.calls if name == "messages_page" and args[2] == 5]
    assert after == [None, 5, 10]  # ascending keyset after the last loaded id; 2 < 5 rows ends it


def test_gap_row_asks_for_the_next_page_and_failures_stop_asking(qapp: QApplication, fake: FakeService) -> None:
    model = fresh(fake, "omega-long")
    model.insert_page(page(fake, "omega-long", None, 100))
    (gap,) = model.gaps()
    assert model.loaded_count() == 100 and not model.reaches_end
    index = model.index_of(gap)
    assert index.row() == model.rowCount() - 1 and model.data(index, NodeKindRole) == "gap"
    assert model.data(index) == "… 700 messages not loaded — Enter to load"
    request = model.gap_request(gap, backward=False, limit=100)
    assert request == PageRequest(after_id=fake.threads["omega-long"].messages[99].id, limit=100)
    assert model.data(index).startswith("… loading")
    model.gap_failed(gap)
    assert gap.failed and model.data(index).endswith("Enter to retry")
    model.gap_cancelled(gap)  # Enter on the row asks again
    assert model.gap_request(gap, backward=True, limit=100) == PageRequest(before_id=None, backward=True, limit=100)


def test_live_append_after_the_end_keeps_earlier_rows(qapp: QApplication, fake: FakeService) -> None:
    model = load(fake, "acme-vat")
    nodes = [model.node(model.index(r, 0)) for r in range(model.rowCount())]
    removed: list[tuple[int, int]] = []
    inserted: list[tuple[int, int]] = []
    model.rowsRemoved.connect(lambda _p, a, b: removed.append((a, b)))
    model.rowsInserted.connect(lambda p, a, b: inserted.append((a, b)) if not p.isValid() else None)
    fake.append("acme-vat", user("new turn"))
    model.append_page(page(fake, "acme-vat", model.last_id(), 500))
    assert [model.node(model.index(r, 0)) for r in range(4)] == nodes  # every earlier row kept, none removed
    assert removed == [] and inserted == [(4, 4)]
    assert model.rowCount() == 5


def test_search_matches_content_tool_names_and_arguments(qapp: QApplication, fake: FakeService) -> None:
    messages = {s.id: s.message for s in fake.threads["acme-vat"].messages}
    assert [i for i, m in messages.items() if message_matches(m, "eu reverse")] == [6]
    assert [i for i, m in messages.items() if message_matches(m, "lookup_invoice")] == [2]  # the call, by its name
    long = fake.threads["acme-vat"].messages[6]  # a 4,400-character tool result
    model = load(fake, "acme-vat")
    preview = model.node(model.index_for_message(long.id)).label
    assert len(preview) <= 240 and not long.message.content.endswith(preview)  # the model keeps a bounded preview
    assert message_matches(long.message, "b2b services within the eu. reverse charge applies")  # the search reads the body


def test_no_boundary_row_without_compaction(qapp: QApplication, fake: FakeService) -> None:
    model = load(fake, "gamma-waiting")
    assert not model.boundary_index().isValid()
    assert all(not model.data(model.index(r, 0), CompactedRole) for r in range(model.rowCount()))


# -- timeline: gaps, both ends, page edges ------------------------------------------------------


def test_newest_page_leaves_one_gap_row_that_fills_from_either_side(qapp: QApplication, fake: FakeService) -> None:
    fake.add_thread("zeta", long_conversation(3000))
    ids = [s.id for s in fake.threads["zeta"].messages]
    whole = load(fake, "zeta", limit=5000)
    model = fresh(fake, "zeta")
    model.insert_page(read(fake, "zeta", PageRequest(limit=100)))
    request = model.end_request(100)
    assert request == PageRequest(backward=True, limit=100) and request.query()["before_id"] > ids[-1]
    model.insert_page(read(fake, "zeta", request))
    assert model.reaches_end and not model.exhausted and model.end_request(100) is None
    (gap,) = model.gaps()
    assert (gap.first_id, gap.last_id, gap.count) == (ids[99], ids[-100], 2800)
    assert model.data(model.index_of(gap)) == "… 2,800 messages not loaded — Enter to load"
    assert model.message_ids() == ids[:100] + ids[-100:]
    assert model.newest_message_index().data(MessageIdRole) == ids[-1]
    removed: list[tuple[int, int]] = []
    model.rowsRemoved.connect(lambda p, a, b: removed.append((a, b)) if not p.isValid() else None)
    first_rows = [model.node(model.index(r, 0)) for r in range(5)]
    backward = True
    while model.gaps():
        gap = model.gaps()[0]
        request = model.gap_request(gap, backward=backward, limit=250)
        assert request == (PageRequest(before_id=gap.last_id, backward=True, limit=250) if backward else PageRequest(after_id=gap.first_id, limit=250))
        model.insert_page(read(fake, "zeta", request))
        assert model.message_ids() == sorted(model.message_ids()) and len(model.message_ids()) == model.loaded_count()
        backward = not backward
        if model.gaps():
            assert model.gaps()[0] is gap and gap.count == 3000 - model.loaded_count()  # the same row, shrinking
    assert tree(model) == tree(whole)  # the same units and rounds, whichever side the pages came from
    assert [model.node(model.index(r, 0)) for r in range(5)] == first_rows  # earlier rows were never rebuilt
    assert all(a == b for a, b in removed) and len(removed) <= 12  # single rows at gap edges, never ranges


def test_a_round_cut_by_a_page_edge_continues_instead_of_open_or_orphan(qapp: QApplication, fake: FakeService) -> None:
    msgs = [user("go"), assistant("", ToolCall("a", "f", "{}"), ToolCall("b", "g", "{}")), tool_result("a", "ra", name="f"), tool_result("b", "rb", name="g"), assistant("done")]
    ids = [s.id for s in fake.add_thread("cut", msgs).messages]
    model = fresh(fake, "cut")
    model.insert_page(read(fake, "cut", PageRequest(limit=3)))  # b's result is on the next page
    call = model.index_for_message(ids[1])
    assert model.data(call, MarkersRole) == ("continues",)
    assert model.data(call.parent(), MarkersRole) == ("continues",) and model.data(call.parent().parent(), MarkersRole) == ("continues",)
    round_node = model.node(call.parent())
    model.insert_page(read(fake, "cut", model.gap_request(model.gaps()[0], backward=False, limit=3)))
    assert model.exhausted and model.node(model.index_for_message(ids[1]).parent()) is round_node  # completed in place
    assert model.data(model.index_for_message(ids[1]), MarkersRole) == () and round_node.markers == ()
    tail = fresh(fake, "cut")  # the newest page alone: b's result answers a call in the gap above
    tail.insert_page(read(fake, "cut", PageRequest(backward=True, limit=2)))
    assert tail.data(tail.index_for_message(ids[3]), MarkersRole) == ("continues",)
    assert tail.data(tail.index(1, 0), MarkersRole) == ("continues",) and tail.data(tail.index(1, 0)) == "Turn (continued)"
    assert [tail.data(tail.index(r, 0), NodeKindRole) for r in range(tail.rowCount())] == ["gap", "unit"]
    open_thread = [user("go"), assistant("", ToolCall("x", "f", "{}")), assistant("next"), tool_result("zz", "?", name="f")]
    ids = [s.id for s in fake.add_thread("open", open_thread).messages]
    real = load(fake, "open", limit=2)  # really open and a real orphan: flagged as such once loaded
    assert real.data(real.index_for_message(ids[1]), MarkersRole) == ("open round",)
    assert real.data(real.index_for_message(ids[3]), MarkersRole) == ("orphan",)


def test_boundary_in_a_gap_shows_once_its_page_is_loaded(qapp: QApplication, fake: FakeService) -> None:
    messages = fake.add_thread("zeta", long_conversation(1000)).messages
    ids = [s.id for s in messages]
    b = next(messages[i].id for i in range(500, 1000) if messages[i + 1].message.role == "user")
    fake.set_boundary("zeta", b, "Everything before the middle, summarized.")
    model = fresh(fake, "zeta")
    model.insert_page(read(fake, "zeta", PageRequest(limit=100)))
    model.insert_page(read(fake, "zeta", model.end_request(100)))
    assert model.boundary is not None and not model.boundary_index().isValid()  # its place is not loaded
    assert model.node(model.index_for_message(ids[0])).compacted and not model.node(model.index_for_message(ids[-1])).compacted
    before = fake.messages_page("zeta", before_id=b + 1, limit=30)
    after = fake.messages_page("zeta", after_id=b, limit=70)
    model.insert_page(TimelinePage(tuple(before + after), follows=UNKNOWN))  # the page around it, as the summary card loads it
    boundary = model.boundary_index()
    assert boundary.isValid() and len(model.gaps()) == 2
    above, below = model.node(model.index(boundary.row() - 1, 0)), model.node(model.index(boundary.row() + 1, 0))
    assert above.last_id == b and above.compacted and below.first_id == b + 1 and not below.compacted
    assert [model.data(model.index(r, 0), NodeKindRole) for r in range(model.rowCount())].count("boundary") == 1


def test_rows_keep_previews_not_bodies(qapp: QApplication, fake: FakeService) -> None:
    model = load(fake, "acme-vat")
    stored = fake.threads["acme-vat"].messages[6]  # 4,400 characters
    row = model.data(model.index_for_message(stored.id), MessageRole)
    assert row.id == stored.id and row.shape.content == "" and len(row.preview) <= 240
    assert [c.name for c in row.shape.tool_calls] == [] and row.shape.tool_call_id == stored.message.tool_call_id
    call_row = model.data(model.index_for_message(6), MessageRole)
    assert [(c.id, c.name, c.arguments) for c in call_row.shape.tool_calls] == [("c2", "query_kb", ""), ("c3", "web_search", "")]
    assert "reverse charge" in call_row.preview  # the arguments live on in the bounded preview only


def test_token_counts_arriving_after_the_rows_update_messages_and_their_sums(qapp: QApplication, fake: FakeService) -> None:
    model = fresh(fake, "acme-vat")
    rows = fake.messages_page("acme-vat", limit=500)
    model.insert_page(PageRequest(limit=500).page(rows))  # shown before tiktoken ran
    round_index = model.index_for_message(7).parent()
    assert model.data(round_index, TokensRole) is None and model.data(round_index.siblingAtColumn(COL_TOKENS)) == ""
    changed: list[int] = []
    notices: list[int] = []

    def on_changed(top: Any, bottom: Any) -> None:
        notices.append(1)
        assert top.column() == bottom.column() == COL_TOKENS and top.parent() == bottom.parent()
        changed.extend(model.node(top.siblingAtRow(r)).first_id or 0 for r in range(top.row(), bottom.row() + 1))

    model.dataChanged.connect(on_changed)
    model.set_tokens({s.id: s.id * 10 for s in rows}, {7: 900})
    assert model.data(round_index, TokensRole) == 60 + 70 + 80
    assert model.data(round_index.parent(), TokensRole) == sum(i * 10 for i in range(5, 10))  # the unit: 5..9
    assert model.node(model.index_for_message(7)).original_tokens == 900
    assert {6, 7, 8} <= set(changed)  # rows repaint their badges
    groups = {id(n.parent) for n in model.message_nodes()} | {id(model.core.root)}
    assert len(notices) <= len(groups) < len(rows)  # one notice per parent, not one per row
    notices.clear()
    model.set_tokens({s.id: s.id * 10 for s in rows})
    assert not notices  # counts that did not change repaint nothing


def test_evicting_far_rows_turns_them_back_into_a_gap_that_reloads_the_same(qapp: QApplication, fake: FakeService) -> None:
    messages = fake.add_thread("zeta", long_conversation(1000)).messages
    ids = [s.id for s in messages]
    fake.set_boundary("zeta", next(messages[i].id for i in range(100, 1000) if messages[i + 1].message.role == "user"), "s")
    whole = load(fake, "zeta", limit=5000)
    model = load(fake, "zeta", limit=200)
    rows = model.rowCount()
    kept = model.node(model.index(rows // 2, 0))
    above = sum(len(model.node(model.index(r, 0)).infos()) for r in range(rows // 2))
    dropped = model.evict_before(rows // 2)
    assert dropped == above
    assert model.node(model.index(1, 0)) is kept and model.data(model.index(0, 0), NodeKindRole) == "gap"
    assert model.loaded_count() == 1000 - dropped and not model.reaches_start and model.reaches_end
    assert model.gaps()[0].count == dropped and not model.boundary_index().isValid()  # the boundary went with its rows
    assert model.evict_after(model.rowCount() - 10) > 0 and not model.reaches_end and model.last_id() < ids[-1]
    while model.gaps():  # both gaps reload the same rows
        gap = model.gaps()[0]
        model.insert_page(read(fake, "zeta", model.gap_request(gap, backward=gap.first_id is None, limit=150)))
    assert tree(model) == tree(whole)


# -- replay ------------------------------------------------------------------------------------


def test_replay_cursor_steps_and_clamps(qapp: QApplication, fake: FakeService) -> None:
    model = ReplayModel()
    moves: list[int] = []
    model.currentChanged.connect(moves.append)
    model.set_episodes(fake.replay("acme-vat"))
    assert model.rowCount() == 4 and model.step_index == 0 and not model.can_back()
    model.forward()
    model.forward()
    assert model.current_step().kind == "summary" and model.can_back() and model.can_forward()
    model.go(99)
    assert model.step_index == 3 and not model.can_forward()
    model.back()
    assert model.current_step().kind == "summary"
    model.select_episode(1)
    assert model.rowCount() == 3 and model.step_index == 0
    assert step_label(1, model.current_episode().steps[1]).endswith("no progress")
    assert model.data(model.index(1), Qt.ItemDataRole.ForegroundRole).color() == theme.color("danger")
    assert moves == [0, 1, 2, 3, 2, 0]


def test_surface_model_lists_the_messages(qapp: QApplication, fake: FakeService) -> None:
    step = fake.replay("acme-vat")[0].steps[1]
    model = SurfaceModel()
    model.set_messages(step.surface or ())
    assert model.rowCount() == 8
    assert model.data(model.index(0)) == "Thanks. Can you also check the knowledge base on reverse charge?"


# -- theme -------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [theme.LIGHT, theme.DARK])
def test_stylesheet_fills_every_token(tokens: theme.Tokens) -> None:
    qss = theme.stylesheet(tokens)
    assert "$" not in qss and tokens.accent in qss and tokens.banner_bg in qss


def test_theme_manager_applies_and_resolves(qapp: QApplication) -> None:
    manager = theme.ThemeManager(qapp, "dark")
    try:
        assert manager.apply() is theme.DARK and theme.current() is theme.DARK
        assert qapp.palette().window().color().name() == theme.DARK.window
        assert manager.apply("light") is theme.LIGHT
        assert theme.resolve("system") in (theme.LIGHT, theme.DARK)
    finally:
        manager.apply("light")
        qapp.setStyleSheet("")
        manager.deleteLater()


def test_icons_exist_for_every_role_and_row_kind(qapp: QApplication) -> None:
    for name in ("user", "assistant", "tool", "system", "turn", "round", "boundary", "summary", "orphan", "warning", "close", "back", "forward", "search", "database", "refresh", "app"):
        assert not theme.icon(name).isNull(), name


# -- events ------------------------------------------------------------------------------------


def _event(i: int, kind: str, trigger: str | None, **data: object) -> CompactionEvent:
    return CompactionEvent(id=i, conversation_id=1, run_id=3, kind=kind, trigger=trigger, created_at=T0, data=data)


def test_events_model_describes_each_event_and_points_at_its_subject(qapp: QApplication) -> None:
    prune = _event(1, "prune", "pressure", tokens_before=11_452, tokens_after=3_842, generation_before=0, generation_after=1,
                   pruned=[{"message_id": 3}, {"message_id": 5}])
    summary = _event(2, "summary", "manual", tokens_before=9_834, tokens_after=7_606, generation_before=5, generation_after=6,
                     boundary_before=None, boundary_after=8, summary_tokens=711)
    error = _event(3, "provider_error", "overflow", tokens=8_543, error_code="CONTEXT_WINDOW_EXCEEDED", error_message="too long: 8543 > 6000")
    model = EventsModel()
    model.set_events([prune, summary, error])
    assert model.rowCount() == 3 and model.columnCount() == 3
    assert model.index(0, 1).data() == "prune\npressure"
    assert event_detail(prune) == "11,452 → 3,842 tok · gen 0 → 1\npruned 2 results: #3, #5"
    assert event_detail(summary) == "9,834 → 7,606 tok · gen 5 → 6\nboundary #8, summary 711 tok"
    assert event_detail(error) == "8,543 tok\nCONTEXT_WINDOW_EXCEEDED"
    assert "too long: 8543 > 6000" in model.index(2, 2).data(Qt.ItemDataRole.ToolTipRole)  # the full message
    assert [model.index(r, 0).data(TargetRole) for r in range(3)] == [3, 8, None]
    assert model.index(2, 1).data(Qt.ItemDataRole.ForegroundRole).color() == theme.color("danger")


def test_pruned_row_counts_what_the_model_sees_and_tells_the_original_size(qapp: QApplication, fake: FakeService) -> None:
    rows = fake.messages_page("acme-vat", limit=500)
    offloads = fake.offloads("acme-vat", [s.id for s in rows if s.offload_sha256])
    (pruned_id,) = offloads
    model = TimelineModel()
    model.reset("acme-vat", boundary=BoundaryInfo.from_state(fake.compaction_state("acme-vat"), fake.history("acme-vat")))
    model.append_page(TimelinePage(tuple(rows), {s.id: 10 for s in rows} | {pruned_id: 48}, offloads, exhausted=True, original_tokens={pruned_id: 910}))
    index = find_row(model, pruned_id)
    assert index.siblingAtColumn(COL_TOKENS).data() == "48"
    assert "the model sees a 48-token preview of 910 tokens (910 → 48)" in index.data(Qt.ItemDataRole.ToolTipRole)
    assert model.node(index.parent()).tokens == sum(model.node(model.index(r, 0, index.parent())).tokens for r in range(model.rowCount(index.parent())))
