"""The summary card's dropped specifics: the count, the warning when the current request or the
retained tail refers to something dropped, the full list (kind, value, referenced) on demand, and
the Copy button. Read from the ``summary`` event's data for our boundary (older events: "not
recorded"; a field of the wrong type: an error in place, never a crash) and from
``compaction_diff(...).dropped`` for a source's recorded compaction.

The reading rules (:class:`DroppedView`, :func:`boundary_dropped`) and the item model are tested
without a view; the card in the window over the fake service."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.specifics import DroppedSpecific, DroppedSpecifics
from engine.core.views import CompactionEvent, SourceCompaction
from inspector_app.main_window import MainWindow
from inspector_app.models.timeline import BoundaryInfo
from inspector_app.widgets.dropped import DroppedItem, DroppedModel, DroppedView, boundary_dropped
from tests.gui.conftest import run
from tests.gui.fake_service import T0, FakeService, install_demo
from tests.gui.shoot_issue14 import INCIDENT, Incident, incident  # noqa: F401 (incident: the fixture)

pytestmark = pytest.mark.gui

DROPPED = [
    {"kind": "path", "value": "/srv/app/config/vat.yaml", "referenced": False},
    {"kind": "identifier", "value": "doc-4411", "referenced": True},
    {"kind": "command", "value": "pytest -x tests/test_vat.py", "referenced": False},
]
FULL = {"specifics_seen": 14, "dropped_specifics": 3, "dropped_referenced": 1, "dropped": DROPPED, "dropped_truncated": False}


def event(data: dict[str, Any], *, conversation_id: int = 1, kind: str = "summary", eid: int = 1) -> CompactionEvent:
    return CompactionEvent(eid, conversation_id, None, kind, "pressure", T0, data)


def card(boundary: int = 4, generation: int = 1) -> BoundaryInfo:
    return BoundaryInfo(boundary, "the summary", 10, generation, 1, T0, "summary", "pressure")


# -- reading the event's data (no Qt view) ------------------------------------------------------


def test_a_full_event_gives_the_count_the_warning_and_the_list_referenced_first() -> None:
    view = DroppedView.from_event_data({"boundary_after": 4, **FULL})
    assert view.state == "recorded" and (view.seen, view.count, view.referenced, view.truncated) == (14, 3, 1, False)
    assert [i.value for i in view.items] == ["doc-4411", "/srv/app/config/vat.yaml", "pytest -x tests/test_vat.py"]  # what the model still needs first
    assert view.headline() == "3 specifics dropped of 14 seen: in neither the summary nor what the model still sees"
    assert view.warning() == (
        "1 dropped specific is still referred to by the current request or the retained tail: the model can no longer see what it resolves to"
    )
    assert view.error() is None
    assert view.lines()[0] == "identifier\tdoc-4411\treferenced"


def test_an_old_event_without_the_fields_says_not_recorded() -> None:
    view = DroppedView.from_event_data({"tokens_before": 100, "tokens_after": 40, "dropped_identifiers": 2})
    assert view.state == "not_recorded" and view.warning() is None and not view.items
    assert view.headline().startswith("Dropped specifics: not recorded")


def test_nothing_dropped_has_no_warning() -> None:
    view = DroppedView.from_event_data({"specifics_seen": 9, "dropped_specifics": 0, "dropped_referenced": 0, "dropped": [], "dropped_truncated": False})
    assert view.state == "recorded" and view.count == 0 and view.warning() is None
    assert view.headline().startswith("No specifics dropped (9 seen")


@pytest.mark.parametrize(
    ("data", "state", "problem"),
    [
        ({"dropped_specifics": "many", "dropped": DROPPED}, "recorded", "dropped_specifics is not a count"),  # counted from the list
        ({"dropped_specifics": 2, "dropped": "doc-1, doc-2"}, "recorded", "the dropped list is not a list"),
        ({"dropped_specifics": True}, "error", "dropped_specifics is not a count"),
        ({"specifics_seen": -3, "dropped": [{"kind": "path"}, 7, {"kind": "url", "value": "https://x.test/a", "referenced": "yes"}]}, "recorded", "3 entries"),
        ({"dropped_truncated": "no", "dropped_specifics": 1, "dropped": DROPPED[:1]}, "recorded", "dropped_truncated is not true/false"),
    ],
)
def test_a_field_of_the_wrong_type_is_reported_in_place(data: dict[str, Any], state: str, problem: str) -> None:
    view = DroppedView.from_event_data(data)
    assert view.state == state
    assert problem in (view.error() or "")
    view.headline(), view.warning(), view.lines()  # never raises


def test_data_that_is_not_an_object_is_an_error() -> None:
    view = DroppedView.from_event_data(["not", "an", "object"])
    assert view.state == "error" and view.error() == "the event's data is not an object"


def test_a_capped_list_says_how_many_more() -> None:
    view = DroppedView.from_event_data({"specifics_seen": 900, "dropped_specifics": 620, "dropped": DROPPED, "dropped_truncated": True})
    assert view.truncated and view.count == 620 and len(view.items) == 3
    assert view.referenced == 1  # counted from the list when the event does not say
    assert view.lines()[-1] == "… 617 more not recorded (the list is capped)"


def test_the_boundary_card_reads_the_newest_summary_event_of_its_boundary_and_thread() -> None:
    events = [
        event({"boundary_after": 4, "generation_after": 1, **FULL}, eid=1),
        event({"boundary_after": 4, "generation_after": 1, "specifics_seen": 5, "dropped_specifics": 0, "dropped": []}, conversation_id=2, eid=2),  # another thread
        event({"boundary_after": 9, "generation_after": 2, "specifics_seen": 1, "dropped_specifics": 0}, eid=3),  # a later boundary
        event({"pruned": [{"message_id": 3}]}, kind="prune", eid=4),
    ]
    assert boundary_dropped(events, card(4, 1), conversation_id=1).count == 3
    assert boundary_dropped(events, card(9, 2), conversation_id=1).count == 0
    assert boundary_dropped(events, card(4, 1), conversation_id=2).seen == 5
    assert boundary_dropped(events, card(7, 3), conversation_id=1).state == "not_recorded"
    assert boundary_dropped([], card()).state == "not_recorded"


def test_a_diff_s_dropped_specifics_read_like_the_event() -> None:
    specifics = DroppedSpecifics(seen=6, dropped=(DroppedSpecific("path", "src/vat.py"), DroppedSpecific("url", "https://example.eu/vat", True)))
    view = DroppedView.from_specifics(specifics)
    assert (view.state, view.seen, view.count, view.referenced) == ("recorded", 6, 2, 1)
    assert view.items[0] == DroppedItem("url", "https://example.eu/vat", True)
    assert DroppedView.from_specifics(None).state == "not_recorded"
    assert DroppedView.from_specifics(object()).state == "error"  # nothing readable: said so, not raised


def test_the_model_lists_kind_value_referenced(qapp: Any) -> None:
    model = DroppedModel()
    model.set_items(DroppedView.from_event_data(FULL).items)
    assert model.rowCount() == 3 and model.columnCount() == 3
    assert [model.headerData(c, Qt.Orientation.Horizontal) for c in range(3)] == ["Kind", "Value", "Referenced"]
    assert [model.index(0, c).data() for c in range(3)] == ["identifier", "doc-4411", "yes"]
    assert model.index(1, 2).data() == ""
    assert model.index(0, 1).data(Qt.ItemDataRole.ForegroundRole) is not None  # referenced: in the danger colour
    assert model.index(1, 1).data(Qt.ItemDataRole.ForegroundRole) is None
    assert "no longer see it" in model.index(0, 0).data(Qt.ItemDataRole.ToolTipRole)


# -- the card in the window ---------------------------------------------------------------------


class EventsFake(FakeService):
    """The fake with scripted compaction events per thread (the plain fake records none)."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.scripted: dict[str, list[CompactionEvent]] = {}

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[CompactionEvent]:
        super().events(key, after_id=after_id, limit=limit)
        return list(self.scripted.get(key, []))


def _window(qtbot: Any, make_window: Any, tmp_path: Path, data: dict[str, Any] | None, key: str = "acme-vat") -> tuple[MainWindow, EventsFake]:
    service = EventsFake(tmp_path / "wd")
    install_demo(service)
    t = service.threads["acme-vat"]
    assert t.state is not None
    if data is not None:
        service.scripted["acme-vat"] = [event({"boundary_after": t.state.boundary, "generation_after": t.state.generation, **data}, conversation_id=t.info.id)]
    w = make_window(opener=lambda _url: service)
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select=key))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    return w, service


def _shows_card(w: MainWindow) -> bool:
    return w.detail.stack.currentWidget() is w.detail.card


def test_the_card_shows_the_count_the_warning_and_the_list_and_copies_the_summary(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    w, service = _window(qtbot, make_window, tmp_path, FULL)
    run(qtbot, w, w.show_boundary())
    assert _shows_card(w)
    d = w.detail
    qtbot.waitUntil(lambda: d.dropped.state == "recorded", timeout=3000)  # the events arrive after the card first shows
    assert d.dropped_label.text().startswith("3 specifics dropped of 14 seen")
    assert d.dropped_warning.isVisible() and "still referred to by the current request or the retained tail" in d.dropped_warning.text()
    assert d.dropped_warning_icon.pixmap() is not None and not d.dropped_warning_icon.pixmap().isNull()
    assert not d.dropped_error.isVisible()
    assert d.dropped_toggle.isVisible() and d.dropped_toggle.text() == "Show the 3 dropped specifics"
    assert not d.dropped_view.isVisible()
    d.dropped_toggle.click()
    assert d.dropped_view.isVisible() and d.dropped_toggle.text() == "Hide the 3 dropped specifics"
    rows = [[d.dropped_model.index(r, c).data() for c in range(3)] for r in range(d.dropped_model.rowCount())]
    assert rows[0] == ["identifier", "doc-4411", "yes"] and ["path", "/srv/app/config/vat.yaml", ""] in rows

    QApplication.clipboard().clear()
    d.copy_button.click()
    assert QApplication.clipboard().text() == "User reported invoice #4411 with 19% VAT; corrected to 20% (AT)."
    assert not w.banner.isVisible()


def test_an_old_summary_event_shows_not_recorded(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    w, _ = _window(qtbot, make_window, tmp_path, {"tokens_before": 95_000, "tokens_after": 30_000})
    run(qtbot, w, w.show_boundary())
    d = w.detail
    assert _shows_card(w) and d.dropped.state == "not_recorded"
    assert d.dropped_label.text().startswith("Dropped specifics: not recorded")
    assert not d.dropped_warning.isVisible() and not d.dropped_toggle.isVisible() and not d.dropped_error.isVisible()


def test_a_bad_field_shows_as_an_error_on_the_card_not_a_crash(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    w, _ = _window(qtbot, make_window, tmp_path, {"dropped_specifics": {"n": 3}, "dropped": 42})
    run(qtbot, w, w.show_boundary())
    d = w.detail
    qtbot.waitUntil(lambda: d.dropped.state == "error", timeout=3000)
    assert d.dropped_label.text() == "Dropped specifics cannot be shown"
    assert d.dropped_error.isVisible() and "dropped_specifics is not a count" in d.dropped_error.text() and "not a list" in d.dropped_error.text()
    assert d.card_text.toPlainText().startswith("User reported invoice #4411")  # the rest of the card still shows
    assert not w.banner.isVisible()


def test_a_provider_that_raises_is_shown_in_place(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    w, _ = _window(qtbot, make_window, tmp_path, FULL)
    w.detail.boundary_dropped = lambda _info: (_ for _ in ()).throw(KeyError("boundary_after"))
    run(qtbot, w, w.show_boundary())
    w.events_model.set_events(w.events_model.events())  # the events read again: the card re-reads them
    assert w.detail.dropped.state == "error" and "cannot be read" in w.detail.dropped_error.text()


def test_a_source_compaction_card_reads_its_diff(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    """An imported thread whose source recorded a compaction: the card asks compaction_diff for it
    (found among the engine's compactions by its record id) and shows what it dropped."""
    service = EventsFake(tmp_path / "wd")
    install_demo(service)
    msgs = [user("Deploy with ./scripts/deploy.sh --env prod and check https://status.example.com/api"),
            assistant("", ToolCall("k1", "Bash", '{"command": "./scripts/deploy.sh --env prod"}')),
            tool_result("k1", "Error: connection refused to db-7.internal:5432", name="Bash"),
            assistant("The deploy failed: db-7.internal refused the connection."),
            user("Retry the deploy on db-7.internal."), assistant("Retrying.")]  # fmt: skip
    t = service.add_thread("cc:deploy", msgs, title="Imported deploy session")
    t.info = replace(t.info, source_format="claude-code")
    t.sources = [SourceCompaction(7, t.info.id, "claude-code", "summary", "auto", 150_000, "The user asked for a deploy.", t.messages[3].id,
                                  t.messages[0].id, t.messages[3].id, "cb-1", None)]  # fmt: skip
    service.set_boundary("cc:deploy", t.messages[1].id, "Ours: an earlier engine summary.")  # an engine compaction before it in the list
    w = make_window(opener=lambda _url: service)
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="cc:deploy"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    index = w.timeline_model.source_indexes()[-1]
    w.timeline.setCurrentIndex(index)
    d = w.detail
    assert d.card_subject == ("source", t.sources[0])
    qtbot.waitUntil(lambda: w.idle and d.dropped.state != "reading", timeout=5000)
    assert d.dropped.state == "recorded", d.dropped
    diff = service.reads.compaction_diff("cc:deploy", 2)
    assert diff.record_id == 7 and diff.dropped is not None
    assert d.dropped.count == diff.dropped.dropped_count and d.dropped.seen == diff.dropped.seen
    assert d.dropped.count > 0 and d.dropped_toggle.isVisible()
    assert any(i.value for i in d.dropped.items)


def test_a_source_card_whose_diff_fails_says_why(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    service = EventsFake(tmp_path / "wd")
    install_demo(service)

    def broken(key: str, compaction: int | None = None) -> Any:
        raise OSError(5, "Input/output error", "/var/db/x.db")

    t = service.add_thread("cc:x", [user("hello"), assistant("hi"), user("again"), assistant("ok")], title="x")
    t.info = replace(t.info, source_format="claude-code")
    t.sources = [SourceCompaction(1, t.info.id, "claude-code", "summary", "auto", 1000, "S.", t.messages[1].id, None, None, "cb", None)]
    service.reads.compaction_diff = broken  # type: ignore[method-assign]
    w = make_window(opener=lambda _url: service)
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="cc:x"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    w.timeline.setCurrentIndex(w.timeline_model.source_indexes()[-1])
    qtbot.waitUntil(lambda: w.idle and w.detail.dropped.state != "reading", timeout=5000)
    assert w.detail.dropped.state == "error"
    assert w.detail.dropped_error.text() == "Cannot read: Input/output error: /var/db/x.db"


# -- the real service ----------------------------------------------------------------------------


def test_the_real_card_warns_about_a_dropped_error_the_request_still_names(qtbot: Any, window_factory: Any, incident: Incident) -> None:
    """The engine's manual compaction of the incident thread: the card's dropped list and its
    warning are the stored summary event's; the CI run's AssertionError, which the current request
    still asks about, is kept by the summary's facts (issue 25), so it is not among them."""
    w = window_factory(lambda _url: incident.open())
    assert run(qtbot, w, w.open_database(incident.url, select=INCIDENT), timeout=20_000)
    qtbot.waitUntil(lambda: w.idle, timeout=20_000)
    run(qtbot, w, w.show_boundary())
    d = w.detail
    qtbot.waitUntil(lambda: d.dropped.state == "recorded", timeout=5000)
    svc = incident.open()
    try:
        data = next(e.data for e in reversed(svc.reads.events(INCIDENT, limit=1000)) if e.kind == "summary")
    finally:
        svc.close()
    assert (d.dropped.seen, d.dropped.count, d.dropped.referenced) == (data["specifics_seen"], data["dropped_specifics"], data["dropped_referenced"])
    items = {i.value: i for i in d.dropped.items}
    # the summary's Facts keep the error the current request asks about (issue 25): not dropped
    assert "AssertionError: 16 workers need 768 MiB" not in items
    referenced = [i for i in d.dropped.items if i.referenced]
    assert len(referenced) == data["dropped_referenced"]
    if referenced:
        assert d.dropped.items[0].referenced  # referenced first
        assert d.dropped_warning.isVisible() and d.dropped_warning.text().startswith(f"{len(referenced)} dropped specific")
    else:
        assert not d.dropped_warning.isVisible()
    d.dropped_toggle.click()
    assert d.dropped_view.isVisible() and d.dropped_model.rowCount() == len(data["dropped"])
    QApplication.clipboard().clear()
    d.copy_button.click()
    assert QApplication.clipboard().text().startswith("[Extractive summary") and "9c41e07" in QApplication.clipboard().text()
    assert not w.banner.isVisible()


def test_a_source_card_shown_again_is_not_read_again(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    service = EventsFake(tmp_path / "wd")
    install_demo(service)
    t = service.add_thread("cc:y", [user("see /srv/app/a.py"), assistant("ok"), user("and b?"), assistant("fine")], title="y")
    t.info = replace(t.info, source_format="claude-code")
    t.sources = [SourceCompaction(3, t.info.id, "claude-code", "summary", "auto", 1000, "S.", t.messages[1].id, t.messages[0].id, t.messages[1].id, "cb", None)]
    w = make_window(opener=lambda _url: service)
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="cc:y"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    source = w.timeline_model.source_indexes()[-1]
    w.timeline.setCurrentIndex(source)
    qtbot.waitUntil(lambda: w.idle and w.detail.dropped.state == "recorded", timeout=5000)
    reads = service.called("compaction_diff")
    first = w.detail.dropped
    w.timeline.setCurrentIndex(w.timeline_model.newest_message_index())
    qtbot.waitUntil(lambda: w.idle and w.detail.card_subject is None, timeout=5000)
    w.timeline.setCurrentIndex(source)
    assert w.detail.dropped == first and w.detail.dropped.state == "recorded"  # at once, from what was read
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert service.called("compaction_diff") == reads


# -- the cost of showing a source's card (issue #11) ---------------------------------------------


def test_a_source_card_with_500_dropped_shows_without_measuring_every_row_or_restyling(qtbot: Any, qapp: QApplication, monkeypatch: pytest.MonkeyPatch) -> None:
    """Showing a source's card (its dropped list already read: answered at once, as the window's
    cache does) asks the model for a bounded number of cells, not every row of the list each time
    the card is polished; the card's style sheet is set once per theme, never per show; the
    colours still follow the card (source / our boundary) and the theme."""
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QTreeView

    from inspector_app import theme
    from inspector_app.panels.detail.widget import DetailPane

    calls = [0]
    data = DroppedModel.data

    def counted(self: DroppedModel, *args: Any) -> Any:
        calls[0] += 1
        return data(self, *args)

    monkeypatch.setattr(DroppedModel, "data", counted)
    dropped = DroppedView.from_event_data({
        "specifics_seen": 900, "dropped_specifics": 500, "dropped_truncated": False,
        "dropped": [{"kind": ("path", "identifier", "command", "quantity")[i % 4], "value": f"/srv/app/module_{i}/file_{i}.py", "referenced": i % 7 == 0} for i in range(500)],
    })  # fmt: skip
    sc = SourceCompaction(7, 1, "claude-code", "summary", "auto", 150_000, "The user asked for a deploy.", 4, 1, 3, "cb-1", None)
    manager = theme.ThemeManager(qapp, "light")
    palette, sheet = qapp.palette(), qapp.styleSheet()
    try:
        manager.apply()
        d = DetailPane()
        qtbot.addWidget(d)
        d.resize(520, 700)
        d.show()
        d.sourceCardShown.connect(lambda shown: d.set_source_dropped(shown, dropped))
        sheets: list[str] = []
        set_sheet = d.card.setStyleSheet
        d.card.setStyleSheet = lambda qss: (sheets.append(qss), set_sheet(qss))[-1]  # type: ignore[method-assign]

        def show(expanded: bool = False) -> int:
            d.show_text("a message", "text")
            qapp.processEvents()
            calls[0] = 0
            d.show_source_compaction(sc)
            if expanded and not d.dropped_toggle.isChecked():
                d.dropped_toggle.click()
            qapp.processEvents()  # its paint
            return calls[0]

        def colour(label: Any) -> str:
            return label.palette().color(QPalette.ColorRole.WindowText).name()

        for expanded in (False, True, True):
            n = show(expanded)
            assert d.dropped_model.rowCount() == 500 and d.dropped_view.isVisible() == expanded
            assert n < 2_000, f"{n:,} DroppedModel.data calls for one show"
        assert sheets == []  # the same theme: the card keeps the sheet it was built with
        d.dropped_view.header().setResizeContentsPrecision(-1)  # Qt's own measure over every row: the same widths
        assert [d.dropped_view.sizeHintForColumn(c) for c in (0, 2)] == [QTreeView.sizeHintForColumn(d.dropped_view, c) for c in (0, 2)]
        assert colour(d.card_title) == theme.LIGHT.info and colour(d.dropped_warning) == theme.LIGHT.danger

        d.show_boundary(card())  # our boundary: the theme's summary card again
        assert colour(d.card_title) == theme.LIGHT.boundary_text and colour(d.dropped_warning) == theme.LIGHT.danger
        assert sheets == []

        manager.apply("dark")
        assert len(sheets) == 1 and theme.DARK.info in sheets[0]  # one new sheet for the new theme
        assert colour(d.card_title) == theme.DARK.boundary_text
        assert show(expanded=True) < 2_000
        assert colour(d.card_title) == theme.DARK.info and colour(d.dropped_warning) == theme.DARK.danger
        assert len(sheets) == 1
    finally:
        manager.apply("light")
        qapp.setStyleSheet(sheet)
        qapp.setPalette(palette)
        manager.deleteLater()


def test_a_source_compaction_card_gives_its_time_to_the_second(qtbot: Any) -> None:
    """Found in a user trial on an OpenHands evaluation output: the card printed the source's time
    raw ("at 2026-11-28T09:14:30.000000"); a message's source time reads to the second."""
    from inspector_app.panels.detail.widget import DetailPane

    d = DetailPane()
    qtbot.addWidget(d)
    sc = SourceCompaction(7, 1, "openhands-eval", "summary", None, None, "S.", 4, 1, 3, "cb-1", "2026-11-28T09:14:30.000000")
    d.show_source_compaction(sc)
    text = d.card_title.text()
    assert d.header.text() == "Recorded by OpenHands eval"
    assert "at 2026-11-28T09:14:30" in text and "09:14:30." not in text, text
