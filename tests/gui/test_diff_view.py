"""The before/after view of a compaction (issue #14): its item models without views (the two sides'
lines and what happened to each message, tokens by category, the picker's labels), then the window:
read lazily off the GUI thread, two compactions stepped through, the dropped specifics with the
referenced ones first and highlighted, Enter on the timeline's boundary row, a thread without
compactions, the view in a window of its own, and a diff that cannot be rebuilt."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import QApplication

from engine.core.errors import EngineError
from engine.core.messages import ToolCall, assistant, tool_result, user
from inspector_app import theme
from inspector_app.main_window import MainWindow
from inspector_app.models.diff import DiffSideModel, DiffTokensModel, StatusRole, compaction_label, diff_lines, side_counts
from inspector_app.models.timeline import MessageIdRole
from inspector_app.panels.replay.model import MessageRole
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService, fake_tokens
from tests.gui.test_window_real import RESEARCH, WAIT_MS, demo, fresh, open_demo  # noqa: F401 (fixtures)

DEPLOY = "deploy-config"


def add_deploy_thread(fake: FakeService) -> None:
    """Two compactions: the first summarizes the config hunt and drops the config's full path,
    which the retained request still names by its short form; the second folds that summary and the
    next turn into a new one."""
    t = fake.add_thread(DEPLOY, [
        user("The deploy fails: read /srv/app/config.yaml and tell me what is wrong."),
        assistant("", ToolCall("r1", "read_file", '{"path": "/srv/app/config.yaml"}')),
        tool_result("r1", "replicas: 0\nimage: registry.example.com/app:1.4.2\n" + "# padding\n" * 60, name="read_file"),
        assistant("replicas is 0, and the pod log says Error: ImagePullBackOff for registry.example.com/app:1.4.2"),
        user("Done. Now check config.yaml again and the 512 MiB memory limit."),
        assistant("", ToolCall("r2", "read_file", '{"path": "/srv/app/limits.yaml"}')),
        tool_result("r2", "memory: 512Mi\ncpu: 250m\n" + "# more padding\n" * 80, name="read_file"),
        assistant("The limit is 512 MiB; the app needs about 700 MiB."),
        user("Raise it to 1 GiB and redeploy."),
        assistant("Raised the limit to 1 GiB; redeployed."),
    ], title="Deploy config", prune=(2, 6))  # fmt: skip
    ids = [m.id for m in t.messages]
    fake.set_boundary(DEPLOY, ids[3], "The deploy failed because replicas was 0; it was scaled to 3.")
    fake.set_boundary(DEPLOY, ids[7], "Replicas fixed; the memory limit was 512 MiB, too low.")
    # the second compaction started where the first ended
    t.history[1] = type(t.history[1])(**{**{f: getattr(t.history[1], f) for f in t.history[1].__slots__}, "boundary_before": ids[3]})


# -- models, without views ----------------------------------------------------------------------


def test_the_two_sides_say_what_happened_to_each_message(fake: FakeService) -> None:
    add_deploy_thread(fake)
    first = fake.compaction_diff(DEPLOY, 1)
    before, after = diff_lines(first)
    summarized = {m.id for m in first.summarized}
    assert [line.status for line in before if line.message.id in summarized] == ["summarized"] * 4
    assert [line.status for line in before][4:] == ["kept"] * (len(before) - 4)  # the user's next request stays
    assert after[0].status == "summary" and first.summary in after[0].message.content
    assert {line.status for line in after[1:]} == {"kept"}
    second = fake.compaction_diff(DEPLOY, 2)
    before, after = diff_lines(second)
    assert before[0].status == "previous_summary" and first.summary in before[0].message.content
    assert side_counts(before)["summarized"] == 4 and side_counts(after) == {"summary": 1, "kept": 1}
    assert not any(line.status == "summarized" for line in after)


def test_a_pruned_result_is_pruned_on_the_before_side_and_a_preview_after(fake: FakeService) -> None:
    diff = fake.compaction_diff("acme-vat")
    # acme-vat's knowledge-base result (#7) is a preview only after its turn: not this compaction's
    before, after = diff_lines(diff)
    assert [line.status for line in before] == ["summarized"] * 4 + ["kept"]
    assert [line.status for line in after] == ["summary", "kept"]
    from dataclasses import replace

    from engine.core.surface import shown_message

    t = fake.threads["acme-vat"]
    offload = t.offloads[7]
    kb = next(s.message for s in t.messages if s.id == 7)
    pruned = replace(diff, before=(*diff.before, kb), after=(*diff.after, shown_message(kb, offload)), pruned=(offload,))
    before, after = diff_lines(pruned)
    assert before[-1].status == "pruned" and after[-1].status == "pruned"
    model = DiffSideModel()
    model.set_lines(after)
    text = model.index(model.rowCount() - 1).data()
    assert text.startswith("[pruned → preview] #7 ") and offload.preview[:20] in text
    assert model.index(0).data(StatusRole) == "summary" and model.index(0).data(Qt.ItemDataRole.FontRole).bold()


def test_tokens_by_category_before_after_and_the_change(qapp: QApplication, fake: FakeService) -> None:
    diff = fake.compaction_diff("acme-vat")
    model = DiffTokensModel()
    model.set_diff(diff)
    rows = {model.index(r, 0).data(): [model.index(r, c).data() for c in range(1, 4)] for r in range(model.rowCount())}
    assert list(rows) == ["system", "tools", "summary", "messages", "previews", "total"]
    summary_tokens = fake_tokens(diff.summary or "", user(""))
    assert rows["summary"] == ["0", f"{summary_tokens:,}", f"+{summary_tokens:,}"]
    b, a = diff.tokens_before["total"], diff.tokens_after["total"]
    assert rows["total"] == [f"{b:,}", f"{a:,}", f"{a - b:+,}"] and a < b
    change = model.index(5, 3).data(Qt.ItemDataRole.ForegroundRole)
    assert isinstance(change, QBrush) and change.color() == theme.color("ok")  # fewer tokens: good
    model.set_diff(None)
    assert model.rowCount() == 0


def test_the_pickers_labels(fake: FakeService) -> None:
    add_deploy_thread(fake)
    entries = fake.compaction_history(DEPLOY)
    assert len(entries) == 2
    label = compaction_label(entries[0], 2)
    assert label.startswith("#1 of 2 · summary (pressure) · ") and f"{entries[0].tokens_before:,} → {entries[0].tokens_after:,} tok" in label
    assert label.endswith(" · 3 dropped")  # the config's path, the error and the image version


# -- the window -----------------------------------------------------------------------------------


def _diff_page(qtbot: Any, w: MainWindow) -> Any:
    w.show_tab("replay")
    w.replay.show_page("diff")
    qtbot.waitUntil(lambda: w.replay.diff_state in ("loaded", "error") and w.idle, timeout=5000)
    return w.replay.diff


def test_the_diff_is_read_when_its_page_is_shown(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    assert fake.called("compaction_diff") == 0 and fake.called("compaction_history") == 0
    view = _diff_page(qtbot, window)
    assert fake.called("compaction_diff") == 1 and fake.called("compaction_history") == 1
    diff = fake.compaction_diff("acme-vat")
    assert view.current_diff() == diff and view.picker.count() == 1 and view.status.isHidden()
    assert view.title.text() == f"Compaction 1: summary (pressure) · {diff.tokens_before['total']:,} → {diff.tokens_after['total']:,} tokens · generation 0 → 1"
    assert view.before_model.rowCount() == 5 and view.after_model.rowCount() == 2
    assert view.before_title.text() == "Before · 5 lines · 4 → summary · 1 kept"
    assert view.after_title.text() == "After · 2 lines · the summary · 1 kept"
    assert view.summary.toPlainText() == diff.summary
    assert view.tokens_model.rowCount() == 6
    assert view.dropped_title.text().startswith("No specifics dropped (2 seen before the compaction)")
    assert not view.previous_button.isEnabled() and not view.next_button.isEnabled()


def test_stepping_through_two_compactions_with_the_referenced_drops_first(qtbot: Any, make_window: Any, fake: FakeService) -> None:
    add_deploy_thread(fake)
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select=DEPLOY))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    view = _diff_page(qtbot, w)
    assert view.current_diff().index == 2 and view.picker.currentIndex() == 1  # the latest first
    assert view.previous_button.isEnabled() and not view.next_button.isEnabled()
    qtbot.mouseClick(view.previous_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.current_diff() is not None and view.current_diff().index == 1 and w.idle, timeout=5000)
    first = fake.compaction_diff(DEPLOY, 1)
    assert first.dropped is not None and first.dropped.referenced  # the retained request names the config path
    items = view.dropped_model.items()
    assert [i.value for i in items if i.referenced] == [d.value for d in first.dropped.referenced]
    assert items[0].referenced and not items[-1].referenced  # the referenced ones first
    assert view.dropped_model.index(0, 1).data(Qt.ItemDataRole.ForegroundRole).color() == theme.color("danger")
    assert not view.dropped_warning.isHidden() and "still referred to" in view.dropped_warning.text()
    assert view.dropped_title.text().startswith(f"{first.dropped.dropped_count} specifics dropped of {first.dropped.seen} seen")
    # the picker goes to the second one again
    view.picker.activated.emit(1)
    qtbot.waitUntil(lambda: view.current_diff().index == 2 and w.idle, timeout=5000)
    assert view.before_model.index(0).data(StatusRole) == "previous_summary"
    assert fake.called("compaction_history") == 1  # the list is read once per view


def test_enter_on_the_boundary_row_opens_its_before_after(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    index = w.timeline_model.boundary_index()
    assert index.isValid()
    w.timeline.setCurrentIndex(index)
    w.timeline.activated.emit(index)
    qtbot.waitUntil(lambda: w.replay.diff_state == "loaded" and w.idle, timeout=5000)
    assert w.tabs.currentWidget() is w.replay and w.replay.page() == "diff"
    assert w.replay.diff.current_diff() == fake.compaction_diff("acme-vat")
    assert fake.called("compaction_diff") == 2  # ours, and the test's


def test_a_thread_without_compactions_shows_none_and_nothing_of_the_previous_one(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    view = _diff_page(qtbot, w)
    assert view.before_model.rowCount() > 0
    run(qtbot, w, w.select_thread("gamma-waiting"))
    qtbot.waitUntil(lambda: w.idle and w.replay.diff_state == "loaded", timeout=5000)
    assert view.current_diff() is None and view.before_model.rowCount() == 0 and view.after_model.rowCount() == 0
    assert view.picker.count() == 0 and view.dropped_model.rowCount() == 0 and view.summary.toPlainText() == ""
    assert view.status.text() == "This thread has no compactions: nothing was summarized or pruned yet." and view.body.isHidden()


def test_the_view_in_a_window_of_its_own(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    view = _diff_page(qtbot, w)
    qtbot.mouseClick(view.pop_button, Qt.MouseButton.LeftButton)
    popped = w.replay_control.window
    assert popped is not None and popped.isVisible() and popped.width() > w.tabs.width()
    assert popped.view.current_diff() == view.current_diff() and popped.view.before_model.rowCount() == view.before_model.rowCount()
    assert popped.view.pop_button.isHidden()
    popped.close()


def test_a_diff_that_cannot_be_rebuilt_says_why(qtbot: Any, window: MainWindow, fake: FakeService, monkeypatch: Any) -> None:
    def broken(key: str, compaction: int | None = None) -> Any:
        raise EngineError("the history record 1 names a boundary that is not in the thread", code="corrupt_row")

    monkeypatch.setattr(fake, "compaction_diff", broken)
    view = _diff_page(qtbot, window)
    assert window.replay.diff_state == "error" and view.current_diff() is None
    assert view.status.text() == "The before/after view cannot be rebuilt: the history record 1 names a boundary that is not in the thread"
    assert window.banner.isVisible()


# -- the real service, on the demo database -------------------------------------------------------


def test_the_real_services_before_after_and_requests_on_the_research_thread(qtbot: Any, open_demo: Any, demo: Any) -> None:
    """``Service.reads.compaction_diff`` / ``request_envelopes`` through the window: the summary's
    before/after as a fresh connection rebuilds it, and a request's envelope built on a worker
    from the service's lazy sequence."""
    with fresh(demo) as svc:
        entries = svc.reads.compaction_history(RESEARCH)
        summary = next(e.index for e in entries if e.kind == "summary")
        expected = svc.reads.compaction_diff(RESEARCH, summary)
        envelopes = svc.reads.request_envelopes(RESEARCH)
        count, fifth = len(envelopes), envelopes[4]
    w = open_demo(demo, RESEARCH)
    w.replay_control.show_compaction(summary)
    qtbot.waitUntil(lambda: w.replay.diff_state == "loaded" and w.idle, timeout=WAIT_MS)
    view = w.replay.diff
    assert view.picker.count() == len(entries) and view.current_diff() == expected
    before, after = diff_lines(expected)
    assert view.before_model.rowCount() == len(before) and view.after_model.rowCount() == len(after)
    assert side_counts(before).get("summarized") == len(expected.summarized) > 0
    assert view.tokens_model.values()[-1] == ("total", expected.tokens_before["total"], expected.tokens_after["total"])
    if expected.dropped is not None:
        assert len(view.dropped_model.items()) == len(expected.dropped.dropped)
    w.replay_control.go_to_request(4)
    qtbot.waitUntil(lambda: w.replay.requests_model.current_envelope() is not None and w.idle, timeout=WAIT_MS)
    assert w.replay.requests_model.request_count == count
    assert w.replay.requests_model.current_envelope() == fifth
    assert w.replay.request_title.text().startswith(f"Request 5 of {count}")


def test_enter_on_a_sources_compaction_row_opens_its_before_after(qtbot: Any, make_window: Any, fake: FakeService, tmp_path: Any) -> None:
    session = tmp_path / "session-7.jsonl"
    session.write_text('{"type": "user"}\n', encoding="utf-8")
    (report,) = fake.import_file(session)
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select=report.thread))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    (row,) = w.timeline_model.source_indexes()
    w.timeline.setCurrentIndex(row)
    w.timeline.activated.emit(row)
    qtbot.waitUntil(lambda: w.replay.diff_state == "loaded" and w.idle, timeout=5000)
    diff = w.replay.diff.current_diff()
    assert diff is not None and diff.origin == "claude-code" and diff.index == 1 and diff.summary == "Summary the source wrote."
    assert w.replay.diff.title.text().endswith("· recorded by claude-code")
    assert w.replay.diff.status.text().startswith("recorded by claude-code: the surface is rebuilt")  # the diff's note
    # the same from a card (the detail pane's signal, or a caller): the source compaction itself
    w.replay.diff.clear()
    w.replay_control.compare(fake.threads[report.thread].sources[0])
    qtbot.waitUntil(lambda: w.replay.diff.current_diff() is not None and w.idle, timeout=5000)
    assert w.replay.diff.current_diff().origin == "claude-code"


def test_activating_a_line_selects_its_message_in_the_timeline(qtbot: Any, window: MainWindow) -> None:
    w = window
    view = _diff_page(qtbot, w)
    row = next(r for r in range(view.before_model.rowCount()) if view.before_model.index(r).data(StatusRole) == "summarized")
    message_id = view.before_model.lines()[row].message.id
    view.before_view.activated.emit(view.before_model.index(row))
    qtbot.waitUntil(lambda: w.idle and w.timeline.currentIndex().data(MessageIdRole) == message_id, timeout=5000)
    # and in the envelope of a request
    w.replay.show_page("requests")
    qtbot.waitUntil(lambda: w.replay.requests_model.current_envelope() is not None and w.idle, timeout=5000)
    surface = w.replay.request_surface_model
    row = next(r for r in range(surface.rowCount()) if surface.index(r).data(MessageRole).id is not None)
    target = surface.index(row).data(MessageRole).id
    w.replay.request_surface.activated.emit(surface.index(row))
    qtbot.waitUntil(lambda: w.idle and w.timeline.currentIndex().data(MessageIdRole) == target, timeout=5000)
