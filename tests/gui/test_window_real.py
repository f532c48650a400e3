"""The main window on a REAL demo database, through ``engine.service.open_service``.

The demo is built once per session by ``engine.apps.demo.build_demo`` (scripted agents through the real
harness); tests that write get their own copy of the SQLite file and its Workdir. Sync tests with
``qtbot.waitUntil`` on the per-test qasync loop (never wait on signals inside a
coroutine: see conftest.py). Every window is checked for leaked top-level widgets by ``window_factory``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QPushButton

from engine.apps.demo import build_demo
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core.messages import META_PRUNED, assistant, user
from engine.core.meter import default_meter
from engine.core.views import Offload
from engine.service import Service, open_service
from inspector_app import theme
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_STATE
from inspector_app.models.timeline import COL_TOKENS, MessageIdRole, NodeKindRole
from inspector_app.panels.events.model import EventRole
from tests.gui.conftest import run

pytestmark = pytest.mark.gui

RESEARCH = "research-retrieval-latency"
CODING = "coding-lock-test-failure"
NEAR_HINT = "near-hint-line"
RECOVERS = "overflow-recovers"
WAIT_MS = 15_000
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Demo:
    db: Path
    workdir: Path

    @property
    def url(self) -> str:
        return str(self.db)


def _build(db: Path) -> Demo:
    """Build the demo on a plain thread: ``asyncio.run`` must not meet a test's qasync loop."""
    workdir = db.with_name(db.name + ".workdir")
    with ThreadPoolExecutor(1) as pool:
        pool.submit(build_demo, str(db), workdir=workdir).result(timeout=120)
    return Demo(db, workdir)


def _open(demo: Demo) -> Service:
    """The real service as the inspector opens it: the demo's Workdir, the offline summarizer and
    the policies stored in the database (``policies=None`` reads the store-wide setting)."""
    return open_service(demo.url, workdir=demo.workdir, summarizer=ExtractiveSummarizer(), policies=None)


@contextmanager
def fresh(demo: Demo) -> Iterator[Service]:
    """A second, independent connection: what the database really holds."""
    svc = _open(demo)
    try:
        yield svc
    finally:
        svc.close()


def snapshot(demo: Demo, key: str) -> tuple[int, int | None, int, int, int]:
    """(generation, boundary, compact_count, message count, event count) from a fresh connection."""
    with fresh(demo) as svc:
        state = svc.reads.compaction_state(key)
        return state.generation, state.boundary, state.compact_count, svc.reads.message_count(key), len(svc.reads.events(key, limit=100_000))


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo database, built once; tests that use it directly must not write."""
    return _build(tmp_path_factory.mktemp("demo") / "demo.db")


@pytest.fixture
def demo_copy(demo: Demo, tmp_path: Path) -> Demo:
    """A private copy of the demo (SQLite file and Workdir) for a test that writes."""
    db = tmp_path / demo.db.name
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(demo.db) + suffix)
        if src.exists():
            shutil.copy2(src, str(db) + suffix)
    workdir = tmp_path / demo.workdir.name
    shutil.copytree(demo.workdir, workdir)
    return Demo(db, workdir)


@pytest.fixture
def open_demo(qtbot: Any, window_factory: Any) -> Callable[..., MainWindow]:
    """``open_demo(demo, thread, page_size=..., wrap=...)`` → a window with ``thread`` loaded."""

    def make(d: Demo, thread: str, *, page_size: int = 500, wrap: Callable[[Service], Any] | None = None) -> MainWindow:
        def opener(_url: str) -> Any:
            svc = _open(d)
            return wrap(svc) if wrap else svc

        w = window_factory(opener, page_size=page_size)
        assert run(qtbot, w, w.open_database(d.url, select=thread), timeout=WAIT_MS)
        qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
        assert w.timeline_model.key == thread and not w.banner.isVisible(), w.banner.text()
        return w

    return make


def select_message(qtbot: Any, w: MainWindow, message_id: int) -> None:
    index = w.timeline_model.index_for_message(message_id)
    assert index.isValid(), message_id
    w.timeline.setCurrentIndex(index)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)


def click_compact_and_confirm(qtbot: Any, w: MainWindow, between: Callable[[], None] = lambda: None) -> None:
    qtbot.mouseClick(w.compact_button, Qt.MouseButton.LeftButton)
    assert w.confirm.isVisible()
    between()
    qtbot.mouseClick(w.confirm.confirm_button, Qt.MouseButton.LeftButton)


def visible_offload(demo: Demo, key: str) -> Offload:
    """A pruned tool result after the boundary (on the surface, in an expanded unit)."""
    with fresh(demo) as svc:
        boundary = svc.reads.compaction_state(key).boundary or 0
        return next(o for i, o in sorted(svc.reads.offloads(key).items()) if i > boundary)


# -- reading --------------------------------------------------------------------------------------


def test_selecting_a_thread_fills_the_timeline_and_the_gauge(qtbot: Any, open_demo: Any, demo: Demo) -> None:
    w = open_demo(demo, CODING)
    row = w.thread_proxy.mapFromSource(w.thread_model.index(w.thread_model.row_of(RESEARCH), 0))
    w.thread_list.setCurrentIndex(row)  # as a click in the list does
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == RESEARCH and w.gauge.status is not None and w.gauge.status.thread == RESEARCH, timeout=WAIT_MS)
    with fresh(demo) as svc:
        info, status, points = svc.reads.thread(RESEARCH), svc.compaction.status(RESEARCH), svc.compaction.pressure_history(RESEARCH)
        ids = [s.id for s in svc.reads.messages_page(RESEARCH, limit=500)]
    assert w.timeline_model.loaded_count() == info.message_count == len(ids)
    assert w.timeline_model.message_ids() == ids
    assert w.gauge.status.tokens == status.tokens and w.gauge.status.threshold == status.threshold
    assert len(w.chart.points()) == len(points) > 0
    assert w.thread_title.text() == info.title and f"generation {status.generation}" in w.thread_meta.text()


def test_research_has_the_boundary_row_and_the_summary_card(qtbot: Any, open_demo: Any, demo: Demo) -> None:
    w = open_demo(demo, RESEARCH)
    with fresh(demo) as svc:
        state = svc.reads.compaction_state(RESEARCH)
    model = w.timeline_model
    boundary = model.boundary_index()
    assert boundary.isValid() and model.boundary.boundary == state.boundary
    assert f"#{state.boundary}" in model.data(boundary)
    assert model.data(model.index(0, 0), NodeKindRole) == "unit" and model.node(model.index(0, 0)).compacted
    # a thread with compaction history opens on its summary card
    assert w.timeline.currentIndex() == boundary
    assert w.detail.stack.currentWidget() is w.detail.card
    assert w.detail.card_text.toPlainText() == state.summary
    assert f"generation {state.generation}" in w.detail.card_title.text() and "summary / pressure" in w.detail.card_title.text()


@pytest.mark.parametrize(("key", "hint"), [(NEAR_HINT, True), (CODING, False)])
def test_hint_follows_the_85_percent_line(qtbot: Any, open_demo: Any, demo: Demo, key: str, hint: bool) -> None:
    w = open_demo(demo, key)
    ratio = w.gauge.status.pressure_ratio
    assert (ratio >= 0.85) is hint and 0.80 <= ratio < 1.0  # the demo's threads sit around the line
    assert w.gauge.hint_active is hint and w.hint_label.isVisible() is hint
    assert w.chart.threshold() == w.gauge.status.threshold  # the chart draws the threshold and the hint line
    w.gauge.grab(), w.chart.grab()  # both paint without error


# -- manual compaction ----------------------------------------------------------------------------


def test_compact_now_changes_the_database_and_the_view(qtbot: Any, open_demo: Any, demo_copy: Demo) -> None:
    generation, boundary, count, messages, events = snapshot(demo_copy, CODING)
    w = open_demo(demo_copy, CODING)
    tokens_before = w.gauge.status.tokens
    assert w.compact_button.isEnabled() and w.compact_button.text() == "Compact now"
    click_compact_and_confirm(qtbot, w)
    qtbot.waitUntil(lambda: w.idle and "Compacted" in w.statusBar().currentMessage(), timeout=WAIT_MS)
    g2, b2, c2, m2, e2 = snapshot(demo_copy, CODING)
    assert g2 > generation and b2 is not None and (boundary is None or b2 > boundary) and c2 == count + 1
    assert m2 == messages and e2 > events  # raw messages kept, the compaction recorded
    assert w.timeline_model.boundary.boundary == b2 and w.timeline_model.boundary_index().isValid()
    assert w.gauge.status.generation == g2 and w.gauge.status.tokens < tokens_before
    assert not w.banner.isVisible() and w.compact_button.isEnabled()


def test_compact_now_with_nothing_to_summarize_says_so_and_changes_nothing(qtbot: Any, open_demo: Any, demo_copy: Demo) -> None:
    w = open_demo(demo_copy, RESEARCH)
    click_compact_and_confirm(qtbot, w)  # the first one compacts down to the retained tail...
    qtbot.waitUntil(lambda: w.idle and "Compacted" in w.statusBar().currentMessage(), timeout=WAIT_MS)
    before = snapshot(demo_copy, RESEARCH)
    click_compact_and_confirm(qtbot, w)  # ...so the second has nothing left to summarize
    qtbot.waitUntil(lambda: w.idle and "Nothing to compact" in w.statusBar().currentMessage(), timeout=WAIT_MS)
    assert "insufficient_history" in w.statusBar().currentMessage()
    assert snapshot(demo_copy, RESEARCH) == before
    assert not w.banner.isVisible()


@pytest.mark.parametrize(("key", "reason", "state"), [("busy-running", "running", "running"), ("busy-waiting-for-user", "waiting for the user", "waiting"), ("busy-queued", "queued", "queued")])
def test_busy_threads_disable_compact_and_say_why(qtbot: Any, open_demo: Any, demo: Demo, key: str, reason: str, state: str) -> None:
    w = open_demo(demo, key)
    button = w.findChild(QPushButton, "compactButton")
    assert not button.isEnabled()
    assert reason in button.text() and reason in button.toolTip()
    assert w.busy_label.isVisible() and "compact by hand once" in w.busy_label.text()
    row = w.thread_model.row_of(key)
    assert w.thread_model.index(row, COL_STATE).data() == state


class QueueBeforeCompact:
    """The real service, but an agent queues a request (on its own connection) just before the
    compaction takes the lock: the window's idle status is stale by then."""

    def __init__(self, svc: Service, demo: Demo) -> None:
        self._svc = svc
        self._demo = demo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._svc, name)

    @property
    def compaction(self) -> Any:
        return _QueueingCompaction(self._svc, self._demo)  # svc.compaction.compact is the one intercepted


class _QueueingCompaction:
    """``svc.compaction`` of :class:`QueueBeforeCompact`: the real facet but for ``compact``."""

    def __init__(self, svc: Service, demo: Demo) -> None:
        self._svc = svc
        self._demo = demo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._svc.compaction, name)

    def compact(self, key: str, **options: Any) -> Any:
        with fresh(self._demo) as agent:
            agent.runs.queue_request(key, "One more thing before you compact")
        return self._svc.compaction.compact(key, **options)


@pytest.mark.parametrize("when", ["before_confirm", "before_lock"])
def test_thread_made_busy_after_the_click_is_refused_and_nothing_changes(qtbot: Any, open_demo: Any, demo_copy: Demo, when: str) -> None:
    before = snapshot(demo_copy, RESEARCH)
    wrap = (lambda svc: QueueBeforeCompact(svc, demo_copy)) if when == "before_lock" else None
    w = open_demo(demo_copy, RESEARCH, wrap=wrap)
    assert w.compact_button.isEnabled()
    failures: list[tuple[str, str]] = []
    w.failed.connect(lambda code, msg: failures.append((code, msg)))

    def agent_queues() -> None:
        if when == "before_confirm":
            with fresh(demo_copy) as agent:
                agent.runs.queue_request(RESEARCH, "Another question")

    click_compact_and_confirm(qtbot, w, between=agent_queues)
    qtbot.waitUntil(lambda: w.idle and bool(failures), timeout=WAIT_MS)
    assert failures[0][0] == "thread_busy" and "queued" in failures[0][1]
    assert w.banner.isVisible() and w.banner.text().startswith("thread_busy")
    assert snapshot(demo_copy, RESEARCH) == before  # generation, boundary, compactions, messages, events
    assert w.timeline_model.boundary.boundary == before[1]
    # the window re-read the thread: the button now says why
    assert not w.compact_button.isEnabled() and "queued" in w.compact_button.text()
    assert w.busy.isHidden() and "refused" in w.statusBar().currentMessage()


# -- replay, pruned results, search, events --------------------------------------------------------


def test_replay_steps_forward_and_back_through_the_recovery(qtbot: Any, open_demo: Any, demo: Demo) -> None:
    w = open_demo(demo, RECOVERS)
    with fresh(demo) as svc:
        (episode,) = svc.reads.replay(RECOVERS)
    assert episode.outcome == "recovered" and [s.kind for s in episode.steps][:2] == ["provider_error", "prune"]
    w.show_tab("replay")
    panel = w.replay
    back, forward = panel.back_button, panel.forward_button
    total = len(episode.steps)

    def surface_rows() -> list[str]:
        return [panel.surface_model.index(r).data() for r in range(panel.surface_model.rowCount())]

    assert panel.kind.text() == f"Step 1 of {total}: provider_error" and not back.isEnabled()
    assert panel.facts["error"].text().startswith(episode.steps[0].error_code)
    assert len(surface_rows()) == len(episode.steps[0].surface) and not any(r.startswith("[preview]") for r in surface_rows())
    qtbot.mouseClick(forward, Qt.MouseButton.LeftButton)
    prune = episode.steps[1]
    assert panel.kind.text() == f"Step 2 of {total}: prune"
    assert panel.facts["tokens"].text() == f"{prune.tokens_before:,} → {prune.tokens_after:,}"
    assert panel.facts["generation"].text() == f"{prune.generation_before} → {prune.generation_after}"
    pruned = [m for m in prune.surface if m.metadata.get(META_PRUNED)]
    assert pruned and sum(r.startswith("[preview]") for r in surface_rows()) == len(pruned)
    for _ in range(total):
        qtbot.mouseClick(forward, Qt.MouseButton.LeftButton)
    assert panel.kind.text() == f"Step {total} of {total}: {episode.steps[-1].kind}" and not forward.isEnabled()
    qtbot.mouseClick(back, Qt.MouseButton.LeftButton)
    assert panel.kind.text() == f"Step {total - 1} of {total}: {episode.steps[-2].kind}"
    assert panel.steps.currentIndex().row() == total - 2


def test_pruned_result_badge_shows_what_the_model_sees_and_the_detail_verifies_the_original(qtbot: Any, open_demo: Any, demo: Demo) -> None:
    offload = visible_offload(demo, RESEARCH)
    w = open_demo(demo, RESEARCH)
    with fresh(demo) as svc:
        stored = next(s for s in svc.reads.messages_page(RESEARCH, limit=500) if s.id == offload.message_id)
        original_text = svc.reads.read_original(offload)
    meter = default_meter(w.state.thread.model)
    seen = meter.count_messages([stored.message.with_content(offload.preview, **{META_PRUNED: offload.sha256})])[0]
    full = meter.count_messages([stored.message])[0]
    assert seen < full
    index = w.timeline_model.index_for_message(offload.message_id)
    assert index.siblingAtColumn(COL_TOKENS).data() == f"{seen:,}"  # the badge: what the model sees
    assert f"({full:,} → {seen:,})" in index.data(Qt.ItemDataRole.ToolTipRole)
    select_message(qtbot, w, offload.message_id)
    qtbot.waitUntil(lambda: "verified" in w.detail.original_status.text(), timeout=WAIT_MS)
    d = w.detail
    assert d.showing_pruned and d.preview.toPlainText() == offload.preview
    assert json.loads(d.original.toPlainText()) == json.loads(original_text)  # pretty-printed, same data
    assert "SHA-256 verified" in d.original_status.text() and f"sees {seen:,} of {full:,} tokens" in d.original_status.text()
    assert f"{full:,} → {seen:,} tokens" in d.header.text()
    assert f"{seen:,} tokens" in d.preview_title.text() and f"{full:,} tokens" in d.original_title.text()
    assert not w.banner.isVisible()


def test_every_badge_is_the_services_count_of_what_the_model_sees(qtbot: Any, open_demo: Any, demo: Demo) -> None:
    w = open_demo(demo, CODING)
    with fresh(demo) as svc:
        page = svc.reads.messages_page(CODING, limit=500)
        offloads = svc.reads.offloads(CODING)
        counts = svc.compaction.visible_tokens(CODING, page, offloads)
        model = svc.reads.thread(CODING).model
    qtbot.waitUntil(lambda: all(w.timeline_model.index_for_message(s.id).siblingAtColumn(COL_TOKENS).data() for s in page), timeout=WAIT_MS)
    badges = {s.id: w.timeline_model.index_for_message(s.id).siblingAtColumn(COL_TOKENS).data() for s in page}
    assert badges == {i: f"{n:,}" for i, n in counts.seen.items()}
    meter = default_meter(model)  # the same numbers, counted independently of the service
    plain = [s for s in page if s.id not in offloads]
    assert [counts.seen[s.id] for s in plain] == meter.count_messages([s.message for s in plain])
    assert set(counts.original) == {s.id for s in page if s.id in offloads} != set()


@pytest.fixture
def own_demo(tmp_path: Path) -> Demo:
    """A demo built for this test alone: offload records hold absolute Workdir paths, so a copied
    demo cannot read its originals (see the xfail below) and tampering needs the real one."""
    return _build(tmp_path / "own.db")


def test_missing_or_tampered_original_is_an_error_not_shown(qtbot: Any, open_demo: Any, own_demo: Demo) -> None:
    with fresh(own_demo) as svc:
        boundary = svc.reads.compaction_state(CODING).boundary or 0
        tampered, missing = [o for i, o in sorted(svc.reads.offloads(CODING).items()) if i > boundary][:2]
    Path(tampered.path).write_text(Path(tampered.path).read_text(encoding="utf-8") + "\n(edited by hand)", encoding="utf-8")
    Path(missing.path).unlink()
    w = open_demo(own_demo, CODING)
    for offload, code in ((tampered, "workdir_integrity"), (missing, "workdir_missing")):
        select_message(qtbot, w, offload.message_id)
        qtbot.waitUntil(lambda: "not available" in w.detail.original_status.text(), timeout=WAIT_MS)
        assert code in w.detail.original_status.text()
        assert w.detail.original.toPlainText() == ""  # nothing unverified is shown
        assert w.detail.preview.toPlainText() == offload.preview  # the preview still is
        assert w.banner.text().startswith(code)


def test_a_copied_demo_reads_its_originals_from_its_own_workdir(qtbot: Any, open_demo: Any, demo_copy: Demo) -> None:
    offload = visible_offload(demo_copy, RESEARCH)
    w = open_demo(demo_copy, RESEARCH)
    select_message(qtbot, w, offload.message_id)
    qtbot.waitUntil(lambda: w.detail.original_status.text().startswith(("✓", "Original not")), timeout=WAIT_MS)
    assert "SHA-256 verified" in w.detail.original_status.text(), w.detail.original_status.text()


def test_search_loads_pages_until_it_finds_a_match(qtbot: Any, open_demo: Any, demo_copy: Demo) -> None:
    key = "long-chat"
    with fresh(demo_copy) as agent:  # a long thread, written through the intake API an agent platform uses
        agent.runs.create_thread(key, title="A long chat", provider="sim", model="sim-12k")
        for i in range(300):
            agent.runs.append_message(key, user(f"question {i}: which shard is slow?"))
            agent.runs.append_message(key, assistant(f"answer {i}: shard {i % 7} (p95 {100 + i} ms)" + (" — the needle is here" if i == 100 else "")))
        messages = agent.reads.messages_page(key, limit=1000)
    target = next(s for s in messages if "needle" in s.message.content)
    w = open_demo(demo_copy, key, page_size=50)
    loaded = w.timeline_model.loaded_count()
    assert loaded < 200 and not w.timeline_model.exhausted and not w.timeline_model.contains(target.id)
    w.search.setText("THE NEEDLE")
    qtbot.waitUntil(lambda: w.idle and w.timeline.currentIndex().data(MessageIdRole) == target.id, timeout=WAIT_MS)
    assert w.statusBar().currentMessage() == f"Match 1 of 1: message #{target.id}"
    assert loaded < w.timeline_model.loaded_count() < len(messages)  # the page around the match (and gap rows on screen)
    assert w.timeline_model.gaps() and w.counts_label.text() == f"{w.timeline_model.loaded_count()} of 600 messages loaded"
    w.search.setText("no such text anywhere in this thread")
    qtbot.waitUntil(lambda: w.idle and "No match" in w.statusBar().currentMessage(), timeout=WAIT_MS)
    assert w.statusBar().currentMessage() == "No match for 'no such text anywhere in this thread' in 600 messages"
    assert w.timeline_model.loaded_count() < len(messages) == 600  # the whole thread was read, not loaded
    w.search.setText("question 3:")  # from the start
    qtbot.waitUntil(lambda: w.idle and w.timeline.currentIndex().data(MessageIdRole) == messages[6].id, timeout=WAIT_MS)
    QTest.keyClick(w.search, Qt.Key.Key_Return)  # the only match: the search wraps around to it
    qtbot.waitUntil(lambda: w.idle and w.statusBar().currentMessage() == f"Match 1 of 1: message #{messages[6].id}", timeout=WAIT_MS)


def test_events_tab_lists_the_compactions_and_points_into_the_timeline(qtbot: Any, open_demo: Any, demo: Demo) -> None:
    w = open_demo(demo, RESEARCH)
    with fresh(demo) as svc:
        events = svc.reads.events(RESEARCH, limit=100_000)
    model = w.events_model
    assert [model.index(r, 0).data(EventRole).id for r in range(model.rowCount())] == [e.id for e in events]
    assert w.tabs.tabText(3) == f"Events ({len(events)})"
    w.show_tab("events")
    kinds = [e.kind for e in events]
    prune_row = kinds.index("prune")
    summary_row = kinds.index("summary")
    assert "→" in model.index(prune_row, 2).data() and "pruned" in model.index(prune_row, 2).data()
    click = lambda row: qtbot.mouseClick(w.events_view.viewport(), Qt.MouseButton.LeftButton, pos=w.events_view.visualRect(model.index(row, 1)).center())  # noqa: E731
    click(prune_row)
    first_pruned = events[prune_row].data["pruned"][0]["message_id"]
    assert w.timeline.currentIndex().data(MessageIdRole) == first_pruned
    click(summary_row)
    assert w.timeline.currentIndex() == w.timeline_model.boundary_index() != QModelIndex()


def test_screenshot_of_the_pressure_tab_from_the_demo(demo: Demo, tmp_path: Path) -> None:
    """``--tab`` picks the side tab: the pressure tab of near-hint-line paints the hint in the warn colour."""
    out = tmp_path / "pressure.png"
    proc = subprocess.run(
        [sys.executable, "-m", "inspector_app.app", "--db", demo.url, "--thread", NEAR_HINT, "--tab", "pressure", "--theme", "light", "--screenshot", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    image = QImage(str(out))
    assert image.width() >= 1200 and image.height() >= 700
    warn = QColor(theme.LIGHT.warn)
    side = image.width() * 2 // 3  # the right-hand tabs
    hits = sum(
        1
        for x in range(side, image.width(), 2)
        for y in range(60, 300, 2)
        if abs(image.pixelColor(x, y).red() - warn.red()) + abs(image.pixelColor(x, y).green() - warn.green()) + abs(image.pixelColor(x, y).blue() - warn.blue()) < 60
    )
    assert hits > 100, hits  # the highlighted headline, hint line and hint box
