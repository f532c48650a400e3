"""Every row readable: one session of every supported format imported into a real SQLite database,
each thread opened in the real window, every row expanded and painted. Each message row shows its
text (or a labelled placeholder) and its role's icon, and nothing is logged: no Qt message, no
"Error calling Python override" from a paint, no missing resource.

(The Codex rollout once showed a blank timeline: its ``developer`` message had no icon, the
``FileNotFoundError`` raised inside ``QTreeView::paintEvent`` and the rest of the paint was lost.)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

import pytest
from PySide6.QtCore import QModelIndex, Qt, QtMsgType, qInstallMessageHandler
from PySide6.QtGui import QIcon

from engine.apps.cli import main as cli
from engine.service import open_service
from inspector_app import theme
from inspector_app.main_window import MainWindow
from inspector_app.models.timeline import COL_TEXT, NodeKindRole
from tests.gui.conftest import run

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]
SESSIONS = ROOT / "tests/fixtures/sessions"
#: one file (a directory for OpenHands V1) of every supported format
FILES = {
    "claude-code": SESSIONS / "claude-code/project/7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl",
    "codex": SESSIONS / "codex/2026/11/30/rollout-2026-11-30T10-00-00-019ad3f2-7a10-7c31-b2c4-5e6f7a8b9c0d.jsonl",
    "openai-chat": SESSIONS / "openai-chat/messages.json",
    "openai-responses": SESSIONS / "openai-responses/response.json",
    "anthropic": SESSIONS / "anthropic/request.json",
    "openhands": SESSIONS / "openhands/v1/5e2f9a0c4b7d",
    "swe-agent": SESSIONS / "swe-agent/function-calling/calc__calc-2.traj",
    "openhands-eval": SESSIONS / "openhands-eval/swe-bench-lite-run_1/output.jsonl",
    "aider": SESSIONS / "aider/slugify/.aider.chat.history.md",
    "gemini-cli": SESSIONS / "gemini-cli/tmp/9b0e4f1c2d3a/chats/session-2026-11-30T10-02-8c1d2e3f.jsonl",
    "agents-sdk": SESSIONS / "agents-sdk/sessions.sqlite",
    "cline": SESSIONS / "cline/saoudrizwan.claude-dev/tasks/1764843000000",
    "opencode": SESSIONS / "opencode/storage",
}
#: what the offscreen platform says about itself on every show (not about the app)
BENIGN = ("propagateSizeHints",)


@pytest.fixture
def qt_messages() -> Iterator[list[str]]:
    """Every message Qt logs while the test runs (warnings, criticals, debug)."""
    seen: list[str] = []

    def handler(kind: QtMsgType, _context: Any, text: str) -> None:
        if not any(b in text for b in BENIGN):
            seen.append(f"{kind.name}: {text}")

    previous = qInstallMessageHandler(handler)
    yield seen
    qInstallMessageHandler(previous)


@pytest.fixture
def imported(tmp_path: Path) -> tuple[Path, list[str]]:
    """A real SQLite database with one session of every format imported through the service."""
    db = tmp_path / "sessions.db"
    assert cli(["migrate", "--db", str(db)]) == 0
    svc = open_service(str(db), workdir=tmp_path / "workdir")
    try:
        for fmt, path in FILES.items():
            reports = svc.imports.import_file(path)
            assert reports and reports[0].messages > 0 and {r.format for r in reports} == {fmt}, fmt
        keys = [t.key for t in svc.reads.list_threads()]
    finally:
        svc.close()
    return db, keys


def test_every_supported_format_has_its_file() -> None:
    from engine.importers import FORMATS

    assert set(FILES) == set(FORMATS)  # a format added to the importers gets a session here


def rows(model: Any, parent: QModelIndex = QModelIndex()) -> Iterator[QModelIndex]:
    for r in range(model.rowCount(parent)):
        index = model.index(r, COL_TEXT, parent)
        yield index
        yield from rows(model, index)


def check_rows(w: MainWindow, key: str) -> int:
    """Every row of the open thread expanded and painted; every message row has text and an icon."""
    w.timeline.expandAll()
    w.timeline.viewport().grab()  # a real paint of what is on screen (errors inside it go to stderr)
    model, messages = w.timeline_model, 0
    for index in rows(model):
        text = model.data(index, Qt.ItemDataRole.DisplayRole)
        assert isinstance(text, str) and text.strip(), (key, index.row(), model.data(index, NodeKindRole))
        if model.data(index, NodeKindRole) == "message":
            messages += 1
            icon = model.data(index, Qt.ItemDataRole.DecorationRole)
            assert isinstance(icon, QIcon) and not icon.isNull(), (key, text)
        w.timeline.scrollTo(index)
        w.timeline.viewport().grab()
    return messages


def test_every_imported_row_shows_its_text_and_nothing_is_logged(
    qtbot: Any, window_factory: Any, imported: tuple[Path, list[str]], tmp_path: Path, capfd: Any, caplog: Any, qt_messages: list[str]
) -> None:
    db, keys = imported
    caplog.set_level(logging.WARNING, logger=theme.__name__)
    w = window_factory(lambda url: open_service(url, workdir=tmp_path / "workdir"))
    w.resize(1100, 700)
    assert run(qtbot, w, w.open_database(str(db)), timeout=15_000)
    qtbot.waitUntil(lambda: w.idle, timeout=15_000)
    counted = {}
    for key in keys:
        run(qtbot, w, w.select_thread(key), timeout=15_000)
        qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == key, timeout=15_000)
        w.grab()  # the whole window painted: header, side panel, list
        counted[key] = check_rows(w, key)
        run(qtbot, w, w.refresh(), timeout=15_000)  # a refresh keeps every row readable
        qtbot.waitUntil(lambda: w.idle, timeout=15_000)
        assert check_rows(w, key) == counted[key]
    svc = open_service(str(db), workdir=tmp_path / "workdir")
    try:
        assert counted == {k: svc.reads.message_count(k) for k in keys}  # every message has its row
    finally:
        svc.close()
    err = capfd.readouterr().err
    assert "Error calling Python override" not in err and "Traceback" not in err, err[-2000:]
    assert not qt_messages, qt_messages
    assert not [r for r in caplog.records if r.name == theme.__name__], [r.getMessage() for r in caplog.records]


def test_a_missing_icon_draws_the_generic_one_and_never_raises(caplog: Any, qapp: Any) -> None:
    caplog.set_level(logging.WARNING, logger=theme.__name__)
    missing = theme.icon("no-such-icon-anywhere", "danger")
    assert not missing.isNull() and missing.pixmap(16, 16).toImage() == theme.icon(theme.GENERIC_ICON, "danger").pixmap(16, 16).toImage()
    assert any("no-such-icon-anywhere" in r.getMessage() for r in caplog.records)
    for role in ("system", "developer", "user", "assistant", "tool"):  # every role has an icon of its own
        assert theme.role_icon(role) != theme.GENERIC_ICON
    for kind in ("environment_context", "user_instructions", "turn_aborted", "system_reminder", "command", "some_future_kind"):
        assert theme.role_icon("user", kind) != theme.GENERIC_ICON
    for marker in ("pruned", "synthetic", "ephemeral", "open round", "orphan", "continues", "thinking", "image", "2 images", "document", "error", "meta", "no result"):
        assert theme.marker_icon(marker) != theme.GENERIC_ICON, marker


def test_a_broken_install_still_draws_and_styles_without_raising(qapp: Any, tmp_path: Path, monkeypatch: Any, caplog: Any) -> None:
    """No resources at all (an install that lost them): icons are empty, the palette alone styles the
    window; nothing raises (icon() runs inside data() and paints)."""
    caplog.set_level(logging.WARNING, logger=theme.__name__)

    class NoResources:
        @staticmethod
        def files(_package: str) -> Path:
            return tmp_path  # an empty folder: resources/icons/*.svg and inspector.qss are missing

    monkeypatch.setattr(theme, "importlib_resources", NoResources)
    monkeypatch.setattr(theme, "_icon_cache", {})
    monkeypatch.setattr(theme, "_warned", set())
    assert theme.icon("developer", "cat_system").isNull() and theme.icon(theme.GENERIC_ICON).isNull()
    assert theme.stylesheet(theme.LIGHT) == ""
    messages = [r.getMessage() for r in caplog.records]
    assert any("'developer' is missing" in m for m in messages) and any("inspector.qss" in m for m in messages)
