"""One quantity, one number (issue 22): for one compacted thread, the figure each panel shows for the
same quantity agrees with every other panel, with the CLI and with the export.

On the real ``MainWindow`` over the real service: the demo database (built by the real harness) and
a Claude Code session imported from the fixtures (the source's own prune and summary, with the
source's reported token figures). Quantities read off the widgets as a user sees them:

- the pressure: the thread list's cell, the header line and the gauge's headline;
- the tokens of the summary: the summary card and the Pressure tab's "summary" category;
- a compaction's tokens before / after: the Before/after picker, its title and its table's total,
  ``compaction diff --json`` and ``compaction export --json``;
- a compaction's dropped specifics: the picker, the body's headline, the diff, the export's
  overview, and the What-if dialog's recorded run.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine import history
from engine.apps.cli import main as cli_main
from engine.apps.demo import build_demo
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core import figures
from engine.service import Service, open_service
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_PRESSURE
from inspector_app.widgets.whatif import WhatIfDialog
from tests.gui.conftest import run

pytestmark = pytest.mark.gui

RESEARCH = "research-retrieval-latency"  # the demo thread with a summary and prunes
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"
CC_FILE = FIXTURES / "claude-code" / "project" / "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
CC_KEY = "claude-code:7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"
WAIT_MS = 20_000
TOKENS = re.compile(r"([\d,]+) → ([\d,]+)")


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    db = tmp_path_factory.mktemp("numbers-demo") / "demo.db"
    workdir = db.with_name("demo.db.workdir")
    with ThreadPoolExecutor(1) as pool:  # asyncio.run must not meet a test's qasync loop
        pool.submit(build_demo, str(db), workdir=workdir).result(timeout=120)
    return db, workdir


@pytest.fixture(scope="module")
def imported_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    db = tmp_path_factory.mktemp("numbers-import") / "sessions.db"
    workdir = db.with_name("sessions.db.workdir")
    svc = open_service(str(db), workdir=workdir, create=True)
    try:
        reports = svc.imports.import_file(CC_FILE)
        assert reports[0].thread == CC_KEY
    finally:
        svc.close()
    return db, workdir


def _opener(db: Path, workdir: Path) -> Any:
    return lambda _url: open_service(str(db), workdir=workdir, summarizer=ExtractiveSummarizer(), policies=None)


def _window(qtbot: Any, window_factory: Any, db: tuple[Path, Path], key: str) -> MainWindow:
    w = window_factory(_opener(*db))
    assert run(qtbot, w, w.open_database(str(db[0]), select=key), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle and w.gauge.status is not None and w.gauge.status.thread == key, timeout=WAIT_MS)
    return w


def _fresh(db: tuple[Path, Path]) -> Service:
    return open_service(str(db[0]), workdir=db[1], summarizer=ExtractiveSummarizer(), policies=None)


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert cli_main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


# -- the pressure ----------------------------------------------------------------------------------


def _pressure_everywhere(w: MainWindow, key: str) -> tuple[str, str, str]:
    """(thread list cell, the header's figure, the gauge's headline figure)."""
    model = w.thread_model
    listed = model.data(model.index(model.row_of(key), COL_PRESSURE))
    header = re.search(r"([\d,.]+%) of threshold", w.thread_meta.text())
    gauge = re.search(r"([\d,.]+%)", w.gauge.view.headline)  # type: ignore[union-attr]
    assert header is not None and gauge is not None, (w.thread_meta.text(), w.gauge.view)
    return listed, header.group(1), gauge.group(1)


@pytest.mark.parametrize("which", ["demo", "imported"])
def test_the_pressure_reads_the_same_in_the_list_the_header_and_the_gauge(
    qtbot: Any, window_factory: Any, demo_db: tuple[Path, Path], imported_db: tuple[Path, Path], which: str
) -> None:
    db, key = (demo_db, RESEARCH) if which == "demo" else (imported_db, CC_KEY)
    w = _window(qtbot, window_factory, db, key)
    svc = _fresh(db)
    try:
        status = svc.compaction.status(key)
    finally:
        svc.close()
    listed, header, gauge = _pressure_everywhere(w, key)
    assert listed == header == gauge == figures.percent(status.pressure_ratio), (listed, header, gauge)


# -- the summary's tokens --------------------------------------------------------------------------


def test_the_summary_card_and_the_pressure_tab_give_the_summary_the_same_tokens(
    qtbot: Any, window_factory: Any, demo_db: tuple[Path, Path]
) -> None:
    w = _window(qtbot, window_factory, demo_db, RESEARCH)
    assert w.detail.stack.currentWidget() is w.detail.card  # a compacted thread opens on its summary card
    card = re.search(r"([\d,]+) tokens · generation", w.detail.card_title.text())
    (legend,) = [t for t in w.gauge.legend_texts() if t.startswith("summary")]
    assert card is not None, w.detail.card_title.text()
    svc = _fresh(demo_db)
    try:
        state, status = svc.reads.compaction_state(RESEARCH), svc.compaction.status(RESEARCH)
    finally:
        svc.close()
    assert legend.split()[-1] == card.group(1) == figures.tokens(status.breakdown["summary"]) == figures.tokens(state.summary_tokens)


# -- a compaction's before / after and dropped specifics -------------------------------------------


def _show_compaction(qtbot: Any, w: MainWindow, index: int) -> Any:
    view = w.replay.diff
    if view.current_diff() is None or view.current_diff().index != index:
        view.compactionChosen.emit(index)
    qtbot.waitUntil(lambda: w.idle and view.current_diff() is not None and view.current_diff().index == index, timeout=WAIT_MS)
    return view


def _panel_figures(view: Any, index: int) -> dict[str, Any]:
    """What the Before/after page shows of compaction ``index``: the picker's, the title's and the
    table's tokens, the picker's and the body's dropped counts."""
    label = view.picker.itemText(index - 1)
    picker_tokens = TOKENS.search(label)
    title_tokens = TOKENS.search(view.title.text())
    total = [v for v in view.tokens_model.values() if v[0] == "total"]
    picked = re.search(r"([\d,]+) dropped", label)
    body = re.search(r"^([\d,]+) specifics? dropped", view.dropped_title.text())
    return {
        "picker": picker_tokens.groups() if picker_tokens else None,
        "title": title_tokens.groups() if title_tokens else None,
        "table": (figures.tokens(total[0][1]), figures.tokens(total[0][2])) if total else None,
        "picker_dropped": picked.group(1) if picked else "0",
        "body_dropped": body.group(1) if body else ("0" if view.dropped_title.text().startswith("No specifics dropped") else None),
        "label": label,
        "headline": view.dropped_title.text(),
    }


@pytest.mark.parametrize("which", ["demo", "imported"])
def test_before_after_reads_one_number_in_the_picker_the_title_the_table_the_cli_and_the_export(
    qtbot: Any, window_factory: Any, demo_db: tuple[Path, Path], imported_db: tuple[Path, Path], which: str,
    capsys: pytest.CaptureFixture[str]
) -> None:
    db, key = (demo_db, RESEARCH) if which == "demo" else (imported_db, CC_KEY)
    w = _window(qtbot, window_factory, db, key)
    w.show_tab("replay")
    w.replay.show_page("diff")
    qtbot.waitUntil(lambda: w.replay.diff_state in ("loaded", "error") and w.idle, timeout=WAIT_MS)
    assert w.replay.diff_state == "loaded"
    count = w.replay.diff.picker.count()
    assert count >= 2
    shown_all = [_panel_figures(_show_compaction(qtbot, w, index), index) for index in range(1, count + 1)]
    for index, shown in enumerate(shown_all, 1):  # the page agrees with itself
        assert shown["picker"] is not None and shown["picker"] == shown["title"] == shown["table"], (index, shown)
        if shown["body_dropped"] is not None:
            assert shown["picker_dropped"] == shown["body_dropped"], (index, shown)
    exported = _cli_json(capsys, "export", "--db", str(db[0]), "--thread", key, "--format", "json")
    rows = exported["overview"]["rows"]
    assert len(rows) == count
    compared_dropped = 0
    for index, shown in enumerate(shown_all, 1):  # and with the CLI and the export
        cli = _cli_json(capsys, "diff", "--db", str(db[0]), "--thread", key, "--compaction", str(index), "--json")
        row = rows[index - 1]
        expected = (figures.tokens(cli["tokens"]["before"]), figures.tokens(cli["tokens"]["after"]))
        assert shown["picker"] == expected, (index, shown)
        assert (row["tokens_before"], row["tokens_after"]) == (cli["tokens"]["before"], cli["tokens"]["after"])
        assert exported["compactions"][index - 1]["tokens_before"] == cli["tokens"]["before"]
        dropped = cli["dropped"]["dropped_count"] if cli["dropped"] is not None else (0 if cli["kind"] == "prune" else None)
        assert row["dropped"] == dropped, (index, row, cli["dropped"])
        if cli["dropped"] is not None:
            assert shown["picker_dropped"] == shown["body_dropped"] == figures.count(dropped), (index, shown)
            listed = len(cli["dropped"]["dropped"])
            assert ("the list shows the first" in shown["headline"]) is (listed < dropped)
            compared_dropped += 1
    assert compared_dropped, "no compaction with a dropped list: the dropped figures were never compared"
    if which == "imported":  # the source's reported figures, not our count of what was imported
        assert (rows[1]["tokens_before"], rows[0]["tokens_before"]) == (48_211, 30_122)
        assert shown_all[1]["table"][0] == "48,211"


# -- the what-if's recorded run --------------------------------------------------------------------


def test_the_whatif_recorded_run_counts_the_dropped_specifics_the_diff_computed(
    qtbot: Any, window_factory: Any, imported_db: tuple[Path, Path]
) -> None:
    w = _window(qtbot, window_factory, imported_db, CC_KEY)
    svc = _fresh(imported_db)
    try:
        entries = history.compaction_history(svc.store, CC_KEY)
        diffs = [history.compaction_diff(svc.store, CC_KEY, e.index) for e in entries]
    finally:
        svc.close()
    computed = sum(d.dropped.dropped_count for d in diffs if d.dropped is not None)
    assert computed > 0 and all(d.dropped is not None for d in diffs)  # the diff computes them for the source's compactions
    w.whatif_action.trigger()
    dialog = w.compaction.whatif_dialog
    assert isinstance(dialog, WhatIfDialog) and dialog.isVisible()
    dialog.checks["threshold_ratio"].setChecked(True)
    dialog.spins["threshold_ratio"].setValue(0.5)
    outcomes: list[str] = []
    dialog.finishedRun.connect(outcomes.append)
    dialog.run_button.click()
    qtbot.waitUntil(lambda: bool(outcomes) and not dialog.running and w.idle, timeout=60_000)
    assert outcomes == ["done"], dialog.error.text()
    rows = {r.label: r for r in dialog.comparison_model.rows()}
    assert rows["Specifics dropped"].recorded == figures.count(computed) != "not known"
    assert dialog.comparison is not None and dialog.comparison.recorded.specifics_dropped == computed
    dialog.close()


# -- a capped list ---------------------------------------------------------------------------------


def test_a_capped_dropped_list_is_counted_whole_and_says_it_is_capped(qapp: Any) -> None:
    """658 specifics dropped, the first 500 listed (the cap): the picker and the body both say 658,
    and the body says the list is the first 500 of 658."""
    from dataclasses import replace

    from engine.core.specifics import MAX_DROPPED, DroppedSpecific, DroppedSpecifics
    from engine.core.views import CompactionDiff, CompactionEntry
    from inspector_app.models.diff import DiffTokensModel, compaction_label
    from inspector_app.widgets.dropped import DroppedView

    listed = tuple(DroppedSpecific("identifier", f"ticket-{i}") for i in range(MAX_DROPPED))
    dropped = DroppedSpecifics(seen=676, dropped=listed, truncated=True, dropped_count=658)
    entry = CompactionEntry(index=3, kind="summary", trigger="auto", origin="claude-code", created_at=None, tokens_before=97_470,
                            tokens_after=22_599, summary="s", dropped=dropped, cost=None)
    label = compaction_label(entry, 4)
    assert label == "#3 of 4 · summary (auto) · 97,470 → 22,599 tok · recorded by claude-code · 658 dropped"
    headline = DroppedView.from_specifics(dropped).headline()
    assert headline.startswith("658 specifics dropped of 676 seen") and headline.endswith("(the list shows the first 500 of 658)")
    # the table: the categories as rebuilt, the total the compaction's own figures (the rebuilt sum beside it)
    rebuilt = {"system": 3, "tools": 0, "summary": 0, "messages": 76_840, "previews": 40, "total": 76_883}
    after = {"system": 3, "tools": 0, "summary": 2_129, "messages": 0, "previews": 0, "total": 2_132}
    diff = CompactionDiff(index=3, kind="summary", trigger="auto", origin="claude-code", created_at=None, generation_before=None,
                          generation_after=None, previous_summary=None, summarized=(), summary="s", kept=(), pruned=(),
                          tokens_before=rebuilt, tokens_after=after, dropped=dropped)
    model = DiffTokensModel()
    model.set_diff(replace(diff, measured_before=97_470, measured_after=22_599, measured_by="source"))
    assert model.values()[-2:] == [(DiffTokensModel.REBUILT, 76_883, 2_132), ("total", 97_470, 22_599)]
    model.set_diff(diff)  # nothing measured (an older engine): the rebuilt count is the figure
    assert model.values()[-1] == ("total", 76_883, 2_132) and DiffTokensModel.REBUILT not in [v[0] for v in model.values()]
