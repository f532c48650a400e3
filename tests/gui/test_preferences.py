"""Edit → Preferences… (issue #28): the dialog reads the settings on a worker, shows what the
environment overrides, runs Test connection off the GUI thread against the loopback simulator,
saves the non-secret settings to the TOML file and the API key to the keyring (a real in-memory
``keyring`` backend: tests/keyring_backends.py), and the window applies them; a manual compaction
from the GUI uses the configured endpoint and the summary card names it; a rejected model summary
offers the extractive summarizer for that one compaction."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence

from engine.apps.demo import build_demo
from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.core import config
from engine.core.config import ENV_MODEL, Settings
from engine.service import open_service
from inspector_app.main_window import MainWindow
from tests.gui.conftest import run
from tests.keyring_backends import MemoryKeyring

pytestmark = pytest.mark.gui

KEY = "sk-test-GUI-PREFS-0a1b2c3d"
CODING = "coding-lock-test-failure"
WAIT_MS = 15_000


def summarizing(request: Any) -> Reply:
    """A model that writes a summary keeping the current request verbatim."""
    prompt = request.body["messages"][-1]["content"]
    found = re.search(r"<current_request>\n(.*?)\n</current_request>", prompt, re.S)
    if request.body.get("max_tokens") == 1:
        return Reply("ok")
    return Reply(f"The agent fixed the flaky lock test. {'Kept. ' * 4}\n\nCurrent user request:\n{found.group(1) if found else ''}")


def open_prefs(qtbot: Any, w: MainWindow) -> Any:
    w.prefs.action.trigger()
    dialog = w.prefs.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: dialog.loaded is not None and dialog.isEnabled(), timeout=WAIT_MS)
    return dialog


def test_preferences_env_override_test_connection_and_save(qtbot: Any, window: MainWindow, cfg: Path, memory_keyring: MemoryKeyring,
                                                           monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    assert QKeySequence("Ctrl+,") in window.prefs.action.shortcuts()
    assert window.prefs.action in window.prefs.menu.actions() and window.prefs.menu.title() == "&Edit"
    with ProviderSimulator(context_window=1_000_000, model="served-model") as sim:
        Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": sim.base_url, "summarizer.model": "file-model"})
        monkeypatch.setenv(ENV_MODEL, "served-model")
        dialog = open_prefs(qtbot, window)
        # the environment's value is shown, read-only, and said to override the field
        assert dialog.model.text() == "served-model" and not dialog.model.isEnabled()
        assert dialog.base_url.text() == sim.base_url and dialog.base_url.isEnabled()
        assert dialog.env_note.isVisible() and "COMPACTION_SUMMARY_MODEL" in dialog.env_note.text()
        assert "COMPACTION_SUMMARY_MODEL" in dialog.model.toolTip()
        # a keyring backend is installed (memory_keyring): the key goes there, no session-only warning
        assert dialog.key_status.text().startswith("🔒 The key is kept in the OS keyring") and not dialog.key_status.property("warning")
        # Test connection: success (model and latency), then a refused key in words
        sim.script([Reply("ok")])
        qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
        assert dialog.report.ok and dialog.test_result.text().startswith(f"✔ Connected to 127.0.0.1:{sim.port}: model served-model answered in ")
        assert sim.requests[-1].body["max_tokens"] == 1
        dialog.report = None
        dialog.api_key.setText(KEY)
        sim.script([Reply.error(401, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}})])
        qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
        assert not dialog.report.ok and dialog.report.error_code == "AUTH_FAILED"
        assert "refused the API key" in dialog.test_result.text() and KEY not in dialog.test_result.text()
        assert sim.requests[-1].headers.get("authorization") == f"Bearer {KEY}"  # the typed key, in the header only
        # Save: the file gets the fields (not the overridden model), the keyring the key
        dialog.poll.setValue(1.5)
        dialog.operator.setText("Dana")
        qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Save), Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: window.prefs.dialog is None, timeout=WAIT_MS)
    assert memory_keyring.passwords == {(config.KEYRING_SERVICE, config.KEYRING_USER): KEY}
    text = (cfg / "settings.toml").read_text(encoding="utf-8")
    assert 'model = "file-model"' in text and "poll_interval = 1.5" in text and 'name = "Dana"' in text
    # nowhere on disk: the config dir, the window's QSettings file, the fake database's Workdir (all under tmp_path)
    assert [p for p in cfg.parent.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()] == []
    settings.sync()
    assert Path(settings.fileName()).is_relative_to(cfg.parent) and KEY.encode() not in Path(settings.fileName()).read_bytes()
    assert window.live.timer.interval() == 1500
    assert "Preferences saved" in window.statusBar().currentMessage()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("prefs-demo") / "demo.db"
    with ThreadPoolExecutor(1) as pool:  # asyncio.run must not meet a test's qasync loop
        pool.submit(build_demo, str(db), workdir=db.with_name("demo.db.workdir")).result(timeout=120)
    return db


@pytest.fixture
def demo_copy(demo: Path, tmp_path: Path) -> Path:
    db = tmp_path / "demo.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(str(demo) + suffix).exists():
            shutil.copy2(str(demo) + suffix, str(db) + suffix)
    shutil.copytree(demo.with_name("demo.db.workdir"), tmp_path / "demo.db.workdir")
    return db


def open_demo(qtbot: Any, window_factory: Any, db: Path) -> MainWindow:
    """The window as a person starts it: the service's summarizer comes from the settings."""
    w = window_factory(lambda _url: open_service(str(db), workdir=db.with_name("demo.db.workdir")))
    assert run(qtbot, w, w.open_database(str(db), select=CODING), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    return w


def compact(qtbot: Any, w: MainWindow) -> None:
    qtbot.mouseClick(w.compact_button, Qt.MouseButton.LeftButton)
    assert w.confirm.isVisible()
    qtbot.mouseClick(w.confirm.confirm_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.compaction.compacting and w.idle, timeout=WAIT_MS)


def show_card(qtbot: Any, w: MainWindow) -> None:
    qtbot.mouseClick(w.summary_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.detail.card_subject is not None and w.detail.card_subject[0] == "boundary" and w.idle, timeout=WAIT_MS)


def test_a_manual_compaction_from_the_gui_uses_the_configured_endpoint_and_the_card_names_it(
        qtbot: Any, window_factory: Any, demo_copy: Path, cfg: Path, memory_keyring: MemoryKeyring) -> None:
    with ProviderSimulator(context_window=1_000_000, fallback=summarizing, model="qwen2.5-7b-instruct") as sim:
        w = open_demo(qtbot, window_factory, demo_copy)  # opened with the defaults: the extractive summarizer
        # a person chooses the endpoint in Preferences, with the window and its database open
        dialog = open_prefs(qtbot, w)
        assert dialog.kind.currentData() == "extractive" and not dialog.base_url.isEnabled()
        dialog.kind.setCurrentIndex(dialog.kind.findData("openai"))
        assert dialog.base_url.isEnabled() and dialog.test_button.isEnabled()
        dialog.base_url.setText(sim.base_url)
        dialog.model.setText("qwen2.5-7b-instruct")
        dialog.api_key.setText(KEY)
        dialog.operator.setText("Dana")
        qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Save), Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "Summaries are now written by openai-compatible:qwen2.5-7b-instruct at 127.0.0.1:" in w.statusBar().currentMessage(),
                        timeout=WAIT_MS)
        assert memory_keyring.passwords == {(config.KEYRING_SERVICE, config.KEYRING_USER): KEY}
        compact(qtbot, w)
        assert len(sim.requests) >= 1 and sim.requests[0].headers.get("authorization") == f"Bearer {KEY}"
        assert w.statusBar().currentMessage().startswith("Compacted ")
        show_card(qtbot, w)
        qtbot.waitUntil(lambda: w.detail.written_label.isVisible(), timeout=WAIT_MS)
        assert w.detail.written_label.text() == f"Written by model qwen2.5-7b-instruct at 127.0.0.1:{sim.port} · compacted by Dana"
    assert KEY.encode() not in demo_copy.read_bytes()


def test_a_rejected_model_summary_offers_the_extractive_summarizer_once(
        qtbot: Any, window_factory: Any, demo_copy: Path, cfg: Path) -> None:
    with ProviderSimulator(context_window=1_000_000) as sim:
        Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": sim.base_url, "summarizer.model": "m"})
        sim.script([Reply("I'm sorry, I cannot summarize this conversation.")])
        w = open_demo(qtbot, window_factory, demo_copy)
        generation = w.state.thread.generation
        compact(qtbot, w)
        assert w.statusBar().currentMessage() == "Compaction refused: nothing changed"
        assert w.state.thread.generation == generation  # rejected as before: nothing written
        assert w.confirm.isVisible() and w.confirm.confirm_button.text() == "Compact with extractive"
        assert "The model's summary was rejected" in w.confirm.label.text()
        asked = len(sim.requests)
        qtbot.mouseClick(w.confirm.confirm_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not w.compaction.compacting and w.idle and w.statusBar().currentMessage().startswith("Compacted "), timeout=WAIT_MS)
        assert len(sim.requests) == asked  # the extractive summarizer: no model call
        show_card(qtbot, w)
        qtbot.waitUntil(lambda: w.detail.written_label.isVisible(), timeout=WAIT_MS)
        assert w.detail.written_label.text().startswith("Written by extractive summarizer (offline)")
        # the next Compact now asks again with the configured model (the fallback was for one compaction)
        qtbot.mouseClick(w.compact_button, Qt.MouseButton.LeftButton)
        assert w.confirm.confirm_button.text() == "Compact"
        qtbot.mouseClick(w.confirm.cancel_button, Qt.MouseButton.LeftButton)
