"""The inspector never dies of data, and never shows a password.

Malformed rows are written with plain SQL into a copy of the real demo database (the plants of
``tests/engine/test_cli_robust.py``); the window opens it offscreen through the real service, with
no ``--thread`` (so it opens the broken thread: it is made the one with the most compactions).
Whatever the row, no exception escapes, the broken thread says why in place (its row in the list,
the header or a panel, the banner in words: no Python type names), the other threads load fully,
and the list's pressure is measured past the failing thread.

Sync tests with ``qtbot.waitUntil`` on the per-test qasync loop (see conftest.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from PySide6.QtCore import QSettings, Qt

from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core.errors import describe_failure
from engine.service import open_service
from engine.store import normalize_url
from inspector_app.logic.state import describe
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_PRESSURE, PressureRole
from tests.engine.test_cli_robust import OTHER, PLANTS, PYTHON_NAME, VICTIM, copy_pg, demo_pg_template, plant  # noqa: F401 (fixtures)
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService
from tests.gui.test_window_real import Demo, _build

pytestmark = pytest.mark.gui
WAIT_MS = 15_000
SECRET = "pa/SECRET#x?y"


@pytest.fixture(scope="session")
def robust_demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    return _build(tmp_path_factory.mktemp("robust-gui") / "demo.db")


def _copy(demo: Demo, tmp_path: Path) -> Demo:
    import shutil

    db = tmp_path / demo.db.name
    for suffix in ("", "-wal", "-shm"):
        if Path(str(demo.db) + suffix).exists():
            shutil.copy2(str(demo.db) + suffix, str(db) + suffix)
    workdir = tmp_path / demo.workdir.name
    shutil.copytree(demo.workdir, workdir)
    return Demo(db, workdir)


def _make_default(url: str, key: str) -> None:
    """Make ``key`` the thread the window opens without ``--thread`` (the most compactions)."""
    engine = sa.create_engine(normalize_url(url))
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE compaction_state SET compact_count = 99 WHERE conversation_id = (SELECT id FROM conversations WHERE thread_key = :k)"),
            {"k": key},
        )
    engine.dispose()


@pytest.fixture
def unhandled(qloop: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every exception that reaches the loop's handler or ``sys.excepthook``."""
    seen: list[Any] = []
    qloop.set_exception_handler(lambda _loop, context: seen.append(context))
    monkeypatch.setattr(sys, "excepthook", lambda *exc: seen.append(exc))
    return seen


def open_window(qtbot: Any, window_factory: Any, demo: Demo) -> tuple[MainWindow, bool, list[tuple[str, str]]]:
    def opener(url: str) -> Any:
        return open_service(url, workdir=demo.workdir, summarizer=ExtractiveSummarizer(), policies=None)

    w = window_factory(opener)
    failures: list[tuple[str, str]] = []
    w.failed.connect(lambda code, text: failures.append((code, text)))
    opened = run(qtbot, w, w.open_database(demo.url), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    return w, opened, failures


def assert_in_words(w: MainWindow, failures: list[tuple[str, str]]) -> None:
    texts = [w.banner.text()] + [f"{c}: {t}" for c, t in failures]
    for text in texts:
        assert not PYTHON_NAME.search(text), text


@pytest.mark.parametrize("name", list(PLANTS))
def test_a_malformed_row_never_kills_the_window(
    name: str, qtbot: Any, window_factory: Any, robust_demo: Demo, tmp_path: Path, unhandled: list[Any]
) -> None:
    demo = _copy(robust_demo, tmp_path)
    exercise(qtbot, window_factory, demo, PLANTS[name], unhandled)


@pytest.mark.postgres
@pytest.mark.parametrize("name", [n for n, p in PLANTS.items() if not p.sqlite_only])
def test_a_malformed_row_never_kills_the_window_on_postgresql(
    name: str, qtbot: Any, window_factory: Any, copy_pg: Any, tmp_path: Path, unhandled: list[Any]
) -> None:
    exercise(qtbot, window_factory, Demo(copy_pg(), tmp_path / "workdir"), PLANTS[name], unhandled)  # type: ignore[arg-type]


def exercise(qtbot: Any, window_factory: Any, demo: Demo, p: Any, unhandled: list[Any]) -> None:
    """Plant ``p``, open the window on the database (no --thread), then use the other threads."""
    name = p.name
    plant(demo.url, p)
    _make_default(demo.url, VICTIM)
    w, opened, failures = open_window(qtbot, window_factory, demo)
    assert not unhandled, unhandled
    assert_in_words(w, failures)
    if not opened:  # the database itself cannot be used (a store-wide setting): the banner says why
        assert p.global_ or name == "thread_updated_at_garbage", (name, w.banner.text())
        assert w.banner.isVisible() and w.banner.text()
        return
    # the store lists a thread whose own row cannot be read with the reason (ThreadInfo.error) and no
    # compaction figures, so the default may then open another thread; the broken one is marked
    listed_broken = w.thread_model.failure(VICTIM) is not None and w.timeline_model.key != VICTIM
    if not listed_broken:
        assert w.timeline_model.key == VICTIM  # opened on the broken thread without dying
        if failures or w.thread_model.failure(VICTIM) is not None:  # the reason is shown, in words
            assert w.banner.isVisible() and w.banner.text()
    # every cell of the side panels' models can be shown (the data of another platform may be anything)
    for model in (w.events_model, w.thread_model, w.replay.model):
        for row in range(model.rowCount()):
            for col in range(model.columnCount()):
                for role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.ForegroundRole):
                    model.index(row, col).data(role)
    # the other threads are usable: OTHER loads completely, with its status
    svc = open_service(demo.url, workdir=demo.workdir, summarizer=ExtractiveSummarizer(), policies=None)
    try:
        total = svc.reads.thread(OTHER).message_count
    finally:
        svc.close()
    run(qtbot, w, w.select_thread(OTHER), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    assert not unhandled, unhandled
    assert w.timeline_model.key == OTHER and w.timeline_model.loaded_count() == total
    assert w.gauge.status is not None and w.gauge.status.thread == OTHER
    assert w.thread_model.failure(OTHER) is None
    # the list's pressures come with its rows (issue 26: no status per row): every row can be shown
    for row in range(w.thread_model.rowCount()):
        w.thread_model.index(row, COL_PRESSURE).data()
    # and back to the broken thread: still no exception, still in words
    run(qtbot, w, w.select_thread(VICTIM), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    for message_id in w.timeline_model.message_ids()[-3:]:  # the planted rows are the newest: read their bodies
        w.timeline.setCurrentIndex(w.timeline_model.index_for_message(message_id))
        qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    assert not unhandled, unhandled
    assert_in_words(w, failures)


def test_a_broken_default_thread_shows_why_in_place(qtbot: Any, window_factory: Any, robust_demo: Demo, tmp_path: Path, unhandled: list[Any]) -> None:
    """The thread opened at start-up cannot even be read: the window still opens, the thread's
    row, header and detail pane say why, the compact button is off."""
    demo = _copy(robust_demo, tmp_path)
    plant(demo.url, PLANTS["metadata_deep"])
    _make_default(demo.url, VICTIM)
    w, opened, failures = open_window(qtbot, window_factory, demo)
    assert opened and not unhandled
    assert w.timeline_model.key == VICTIM
    reason = w.thread_model.failure(VICTIM)
    assert reason is not None and "nested too deeply" in reason, (reason, failures)
    assert "nested too deeply" in w.banner.text() and not PYTHON_NAME.search(w.banner.text())
    assert w.detail.header.text().startswith("Cannot read") and "nested too deeply" in w.detail.body.toPlainText()
    assert w.thread_model.index(w.thread_model.row_of(VICTIM), COL_PRESSURE).data() == "error"
    assert not w.compact_button.isEnabled()


def test_the_list_pressures_need_no_status_and_a_failing_one_marks_only_its_row(qtbot: Any, make_window: Any, fake: FakeService, unhandled: list[Any]) -> None:
    """Issue 26: the pressure column comes with the list's rows (kept tokens / threshold), so
    no thread is measured one by one; the open thread whose status fails says "error" in its row."""
    original = fake.status_with_progress

    def status(key: str, progress: Any) -> Any:
        if key == "acme-vat":
            raise ValueError("measure pressure: bad row")
        return original(key, progress)

    fake.status_with_progress = status  # type: ignore[method-assign]
    w = make_window()
    failures: list[tuple[str, str]] = []
    w.failed.connect(lambda code, text: failures.append((code, text)))
    assert run(qtbot, w, w.open_database("sqlite:///fake.db", select="omega-long"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    model = w.thread_model
    keys = model.keys()
    assert fake.called("status") + fake.called("status_with_progress") <= 2  # the open thread's, not one per row
    assert all(model.index(i, 0).data(PressureRole) is not None for i in range(len(keys)))
    assert model.index(keys.index("acme-vat"), COL_PRESSURE).data() == "62.0%"
    run(qtbot, w, w.select_thread("acme-vat"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert model.failure("acme-vat") and model.index(model.row_of("acme-vat"), COL_PRESSURE).data() == "error"
    assert model.failure("omega-long") is None
    assert failures and all(not PYTHON_NAME.search(f"{c}: {t}") for c, t in failures), failures
    assert "ValueError" not in w.banner.text() and "bad row" in w.banner.text()
    assert not unhandled


# -- passwords -----------------------------------------------------------------------------------


def test_no_password_in_the_title_the_recent_connections_or_an_error(
    qtbot: Any, make_window: Any, fake: FakeService, settings: QSettings, tmp_path: Path
) -> None:
    url = f"postgresql://alice:{SECRET}@127.0.0.1:5432/threads"
    w = make_window(opener=lambda _url: fake)
    assert run(qtbot, w, w.open_database(url))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    settings.sync()
    stored = (tmp_path / "inspector.ini").read_text(encoding="utf-8")
    for text in (w.windowTitle(), stored, w.banner.text()):
        assert "SECRET" not in text and "SECRET" not in text.replace("%2F", "/"), text
    assert "alice@127.0.0.1:5432/threads" in w.windowTitle()

    def broken(u: str) -> Any:  # a driver error that repeats the URL and the password as given
        raise ConnectionError(f"could not connect to {u}: password {SECRET!r} rejected")

    failures: list[str] = []
    w2 = make_window(opener=broken)
    w2.failed.connect(lambda _c, text: failures.append(text))
    assert run(qtbot, w2, w2.open_database(url)) is False
    assert "SECRET" not in w2.banner.text() and failures and all("SECRET" not in f for f in failures), (w2.banner.text(), failures)
    assert "rejected" in w2.banner.text()


def test_an_empty_url_is_an_error_not_the_demo(qtbot: Any, window_factory: Any) -> None:
    def opener(url: str) -> Any:
        return open_service(url)

    w = window_factory(opener)
    assert run(qtbot, w, w.open_database(""), timeout=WAIT_MS) is False
    assert "empty database URL" in w.banner.text()


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("Invalid isoformat string: 'garbage'"),
        RecursionError("maximum recursion depth exceeded while decoding a JSON object"),
        TypeError("cannot convert dictionary update sequence element #0 to a sequence"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        OSError(2, "No such file or directory", "/x"),
        RuntimeError("boom"),
    ],
)
def test_the_window_and_the_cli_describe_failures_with_one_definition(exc: BaseException) -> None:
    from engine.apps.cli import output
    from engine.core import errors

    assert output.describe_failure is errors.describe_failure  # the CLI re-exports the one copy
    assert describe(exc) == describe_failure(exc)
    assert not PYTHON_NAME.search(describe(exc)[1])


def test_a_rejected_manual_compaction_says_why_in_the_banner(qtbot: Any, window_factory: Any, tmp_path: Path, unhandled: list[Any]) -> None:
    from tests.engine.conftest import POLICY, finished_turns, new_thread
    from tests.engine.test_cli_robust import _RateLimited

    db = tmp_path / "rejected.db"
    svc = open_service(f"sqlite:///{db}", workdir=tmp_path / "wd", create=True)
    try:
        svc.steering.set_policy(POLICY)
        new_thread(svc, "t")
        finished_turns(svc, "t", 12)
    finally:
        svc.close()
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "wd", summarizer=_RateLimited(), policies=None))
    assert run(qtbot, w, w.open_database(str(db), select="t"), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    run(qtbot, w, w.compact("t"), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    text = w.banner.text()
    assert text.startswith("summary_rejected: compact: summary rejected (summarizer_failed: HTTP 429 from http://127.0.0.1:9"), text
    assert "after 2 attempts" in text and not unhandled


def test_the_screenshot_line_of_a_failed_open_has_no_password(tmp_path: Path) -> None:
    """What the entry point prints (its one log line) when opening fails: the reason, no password."""
    import subprocess

    code = (
        "import sys\n"
        "from inspector_app.app import main\n"
        "def opener(url):\n"
        "    raise ConnectionError(f'could not connect to {url}')\n"
        f"sys.exit(main(['--db', 'postgresql://alice:{SECRET}@127.0.0.1:1/x', '--screenshot', {str(tmp_path / 'shot.png')!r}], opener=opener))\n"
    )
    env = {"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "QT_API": "pyside6"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 1, proc.stderr
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("compaction-inspector:")]
    assert line and "could not connect" in line[0], proc.stderr
    assert "SECRET" not in proc.stderr + proc.stdout, proc.stderr


def test_a_password_saved_by_an_older_version_is_scrubbed_from_the_file(settings: QSettings, tmp_path: Path) -> None:
    from inspector_app.widgets.connect import RECENT_KEY, RecentConnections

    leaked = f"postgresql://u:{SECRET}@127.0.0.1/db"  # what the urlsplit-based version stored verbatim
    settings.setValue(RECENT_KEY, [leaked, "sqlite:////tmp/a.db"])
    settings.sync()
    assert "SECRET" in (tmp_path / "inspector.ini").read_text(encoding="utf-8")
    assert RecentConnections(settings).urls() == ["postgresql://u@127.0.0.1/db", "sqlite:////tmp/a.db"]
    assert "SECRET" not in (tmp_path / "inspector.ini").read_text(encoding="utf-8")
