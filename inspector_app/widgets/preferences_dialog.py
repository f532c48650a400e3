"""Edit → Preferences… (Ctrl+,): the summarizer (extractive, or an OpenAI-compatible endpoint with
its API key), the default policy of new databases and imports, the poll interval, the theme and the
operator's display name (issue #28).

The settings are :mod:`engine.core.config`'s, shared with ``compaction config``: a TOML file in the
user's config directory, the API key in the OS keyring (kept for this session only, never on disk,
where there is no keyring). A setting an environment variable overrides is shown read-only with
the variable's name. The theme stays where the window keeps it (QSettings, :mod:`..preferences`,
the same as View → Theme).

Nothing here blocks the GUI thread: reading the settings (the keyring may be a D-Bus call), saving
them and *Test connection* (one tiny chat request through :class:`engine.llm.ChatClient`) run on
the service client's workers (``run``), started as tasks (``spawn``). The API key typed in the
field goes to the keyring and to the request's Authorization header only: never into a label, a
log or the settings file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.core.config import API_KEY, KEYS, KeyStatus, Resolved, SettingError, Settings, keyring_status, store_api_key

from ..logic.choices import THEME_MODES

Run = Callable[..., Awaitable[Any]]
Spawn = Callable[[Any, str], Any]

KINDS = (("extractive", "Extractive (offline, no model)"), ("openai", "OpenAI-compatible endpoint"))


@dataclass(frozen=True)
class Loaded:
    """What the dialog shows, read on a worker."""

    values: dict[str, Resolved]
    keyring: KeyStatus
    path: str


@dataclass(frozen=True)
class Saved:
    """What Save changed: the poll interval (ms), the theme, whether the summarizer settings
    changed, and where the API key went (a sentence), for the window to apply and say."""

    poll_ms: int
    theme: str
    summarizer_changed: bool
    key_message: str | None


def load_settings(settings: Settings) -> Loaded:
    """Every setting with its source and the keyring's state (blocking: run it on a worker)."""
    return Loaded({r.name: r for r in settings.list()}, keyring_status(), str(settings.path))


def test_connection(base_url: str, model: str, timeout: float, typed_key: str | None, settings: Settings) -> Any:
    """Test connection with the fields as they are: the typed key, else the stored one (blocking)."""
    from engine.service import check_connection

    key = typed_key or settings.get(API_KEY).value
    return check_connection(base_url, model, api_key=key or None, timeout=min(timeout, 30.0))


def save_settings(settings: Settings, values: dict[str, Any], key: str | None, forget_key: bool) -> str | None:
    """Write the non-secret settings in one go and the API key to the keyring (blocking)."""
    settings.set_many(values)
    if forget_key:
        return store_api_key(None)[1]
    if key:
        return store_api_key(key)[1]
    return None


class PreferencesDialog(QDialog):
    """The Preferences dialog; :attr:`saved` carries a :class:`Saved` once Save has written."""

    saved = Signal(object)

    def __init__(self, run: Run, spawn: Spawn, *, theme: str = "system", settings: Settings | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("preferencesDialog")
        self.setWindowTitle("Preferences")
        self.setMinimumWidth(720)
        # a field the environment overrides (or the extractive summarizer leaves unused) reads as such
        self.setStyleSheet("QLineEdit:disabled, QDoubleSpinBox:disabled, QComboBox:disabled { color: palette(mid); background: palette(window); }")
        self._run = run
        self._spawn = spawn
        self.settings = settings if settings is not None else Settings()
        self.loaded: Loaded | None = None
        #: the last Test connection's report (``engine.compaction.summarizers.ConnectionReport``)
        self.report: Any = None

        # -- the summarizer ----------------------------------------------------------------
        self.kind = QComboBox()
        self.kind.setObjectName("summarizerKind")
        for value, text in KINDS:
            self.kind.addItem(text, value)
        self.base_url = QLineEdit()
        self.base_url.setObjectName("baseUrl")
        self.base_url.setPlaceholderText("https://api.openai.com/v1 · http://127.0.0.1:11434/v1 (Ollama) · http://127.0.0.1:8000/v1 (vLLM)")
        self.model = QLineEdit()
        self.model.setObjectName("model")
        self.model.setPlaceholderText("gpt-4o-mini, qwen2.5:7b, …")
        self.timeout = QDoubleSpinBox()
        self.timeout.setObjectName("timeout")
        self.timeout.setRange(1, 3600)
        self.timeout.setDecimals(0)
        self.timeout.setSuffix(" s")
        self.api_key = QLineEdit()
        self.api_key.setObjectName("apiKey")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.forget_key = QPushButton("Forget the key")
        self.forget_key.setObjectName("forgetKey")
        self.forget_key.setCheckable(True)
        key_row = QHBoxLayout()
        key_row.addWidget(self.api_key, 1)
        key_row.addWidget(self.forget_key)
        self.key_status = QLabel()
        self.key_status.setObjectName("keyStatus")
        self.key_status.setWordWrap(True)
        self.env_note = QLabel()
        self.env_note.setObjectName("envNote")
        self.env_note.setWordWrap(True)
        self.env_note.hide()
        self.test_button = QPushButton("Test connection")
        self.test_button.setObjectName("testConnection")
        self.test_result = QLabel()
        self.test_result.setObjectName("testResult")
        self.test_result.setWordWrap(True)
        self.test_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        test_row = QHBoxLayout()
        test_row.addWidget(self.test_button)
        test_row.addStretch(1)

        summ = QGroupBox("Summarizer")
        form = QFormLayout(summ)
        form.addRow("Summaries written by", self.kind)
        form.addRow("Base URL", self.base_url)
        form.addRow("Model", self.model)
        form.addRow("Timeout", self.timeout)
        form.addRow("API key", key_row)
        form.addRow(self.key_status)
        form.addRow(self.env_note)
        form.addRow("", test_row)
        form.addRow(self.test_result)

        # -- defaults of new databases and imports ------------------------------------------
        self.context_window = QSpinBox()
        self.context_window.setObjectName("contextWindow")
        self.context_window.setRange(0, 10_000_000)
        self.context_window.setSingleStep(1000)
        self.context_window.setSpecialValueText("engine default")
        self.threshold = QDoubleSpinBox()
        self.threshold.setObjectName("thresholdRatio")
        self.threshold.setRange(0, 1)
        self.threshold.setSingleStep(0.05)
        self.threshold.setSpecialValueText("engine default (0.80)")
        self.retained = QDoubleSpinBox()
        self.retained.setObjectName("retainedTailRatio")
        self.retained.setRange(0, 1)
        self.retained.setSingleStep(0.02)
        self.retained.setSpecialValueText("engine default (0.16)")
        self.summary_max = QSpinBox()
        self.summary_max.setObjectName("summaryMaxTokens")
        self.summary_max.setRange(0, 1_000_000)
        self.summary_max.setSingleStep(512)
        self.summary_max.setSpecialValueText("engine default (8,192)")
        policy = QGroupBox("Default policy of new databases and imports")
        pform = QFormLayout(policy)
        pform.addRow("Context window (tokens)", self.context_window)
        pform.addRow("Threshold (share of the window)", self.threshold)
        pform.addRow("Retained tail (share)", self.retained)
        pform.addRow("Summary at most (tokens)", self.summary_max)

        # -- the inspector and the operator -------------------------------------------------
        self.poll = QDoubleSpinBox()
        self.poll.setObjectName("pollInterval")
        self.poll.setRange(0.5, 600)
        self.poll.setDecimals(1)
        self.poll.setSuffix(" s")
        self.theme = QComboBox()
        self.theme.setObjectName("themeMode")
        for mode in THEME_MODES:
            self.theme.addItem(mode.capitalize(), mode)
        self.theme.setCurrentIndex(max(0, self.theme.findData(theme)))
        self.operator = QLineEdit()
        self.operator.setObjectName("operatorName")
        self.operator.setPlaceholderText("recorded with each manual compaction you start")
        ins = QGroupBox("Inspector")
        iform = QFormLayout(ins)
        iform.addRow("Look for new messages every", self.poll)
        iform.addRow("Theme", self.theme)
        iform.addRow("Your display name", self.operator)

        self.where = QLabel()
        self.where.setObjectName("settingsPath")
        self.where.setWordWrap(True)
        self.error = QLabel()
        self.error.setObjectName("prefsError")
        self.error.setWordWrap(True)
        self.error.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(summ)
        layout.addWidget(policy)
        layout.addWidget(ins)
        layout.addWidget(self.where)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)

        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.test_button.clicked.connect(self.start_test)
        self._env_locked: set[str] = set()
        self._kind_changed()

    # -- loading ------------------------------------------------------------------------------
    def start_load(self) -> None:
        self._spawn(self.load(), "read the settings")

    async def load(self) -> None:
        self.setEnabled(False)
        try:
            loaded = await self._run(load_settings, self.settings)
        except SettingError as exc:
            self._show_error(exc.message)
            return
        finally:
            self.setEnabled(True)
        self.show_loaded(loaded)

    def show_loaded(self, loaded: Loaded) -> None:
        self.loaded = loaded
        v = loaded.values
        self.kind.setCurrentIndex(max(0, self.kind.findData(v["summarizer.kind"].value)))
        self.base_url.setText(v["summarizer.base_url"].value or "")
        self.model.setText(v["summarizer.model"].value or "")
        self.timeout.setValue(float(v["summarizer.timeout"].value))
        self.context_window.setValue(v["policy.context_window"].value or 0)
        self.threshold.setValue(v["policy.threshold_ratio"].value or 0)
        self.retained.setValue(v["policy.retained_tail_ratio"].value or 0)
        self.summary_max.setValue(v["policy.summary_max_tokens"].value or 0)
        self.poll.setValue(float(v["inspector.poll_interval"].value))
        self.operator.setText(v["operator.name"].value or "")
        key = v[API_KEY]
        self.api_key.clear()
        self.api_key.setPlaceholderText({"env": f"set by {key.env} (environment)", "keyring": "stored in the OS keyring (type to replace)",
                                         "session": "kept for this session only (type to replace)"}.get(key.source, "none (type one if the endpoint needs it)"))
        self.key_status.setText("🔒 The key is kept in the OS keyring, never in the settings file." if loaded.keyring.available else
                                "⚠ No OS keyring here: a key typed here is kept for this session only, never on disk.")
        self.key_status.setToolTip(loaded.keyring.message)
        self.key_status.setProperty("warning", not loaded.keyring.available)
        # what the environment overrides: shown as such, read-only
        fields = {"summarizer.kind": self.kind, "summarizer.base_url": self.base_url, "summarizer.model": self.model,
                  "summarizer.timeout": self.timeout, API_KEY: self.api_key}
        self._env_locked = {name for name, r in v.items() if r.source == "env"}
        notes = []
        for name, widget in fields.items():
            r = v[name]
            locked = r.source == "env"
            widget.setEnabled(not locked)
            widget.setToolTip(f"Set by {r.env} in the environment: it overrides the settings file" if locked else KEYS[name].help)
            if locked:
                notes.append(f"{name} ← {r.env}")
        self.forget_key.setEnabled(API_KEY not in self._env_locked and key.source in ("keyring", "session"))
        if notes:
            names = sorted({env for n in fields if v[n].source == "env" and (env := v[n].env)})
            self.env_note.setText(f"Set in the environment, overriding the fields: {', '.join(names)} (unset to use the fields).")
            self.env_note.setToolTip("\n".join(notes))
            self.env_note.show()
        else:
            self.env_note.hide()
        self.where.setText(f"Settings file: {loaded.path} (shared with `compaction config`)")
        self._kind_changed()
        self._fit()

    def _kind_changed(self) -> None:
        endpoint = self.kind.currentData() == "openai"
        for name, w in (("summarizer.base_url", self.base_url), ("summarizer.model", self.model), ("summarizer.timeout", self.timeout),
                        (API_KEY, self.api_key)):
            w.setEnabled(endpoint and name not in self._env_locked)
        self.test_button.setEnabled(endpoint)

    # -- Test connection ----------------------------------------------------------------------
    def start_test(self) -> None:
        self._spawn(self.test(), "test connection")

    async def test(self) -> Any:
        base_url, model = self.base_url.text().strip(), self.model.text().strip()
        self.test_button.setEnabled(False)
        self.test_result.setProperty("state", "running")
        self.test_result.setText(f"Sending one tiny request to {base_url or '(no URL)'} …")
        try:
            report = await self._run(test_connection, base_url, model, self.timeout.value(), self.api_key.text().strip() or None, self.settings)
        finally:
            self.test_button.setEnabled(self.kind.currentData() == "openai")
        self.report = report
        self.test_result.setProperty("state", "ok" if report.ok else "failed")
        self.test_result.setText(("✔ " if report.ok else "✘ ") + report.message)
        self.test_result.setStyleSheet("color: #1a7f37;" if report.ok else "color: #cf222e;")
        self._fit()
        return report

    # -- saving -------------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """The non-secret settings as the fields hold them (those the environment overrides left out)."""
        out: dict[str, Any] = {
            "summarizer.kind": self.kind.currentData(),
            "summarizer.base_url": self.base_url.text().strip(),
            "summarizer.model": self.model.text().strip(),
            "summarizer.timeout": self.timeout.value(),
            "policy.context_window": self.context_window.value() or None,
            "policy.threshold_ratio": self.threshold.value() or None,
            "policy.retained_tail_ratio": self.retained.value() or None,
            "policy.summary_max_tokens": self.summary_max.value() or None,
            "inspector.poll_interval": self.poll.value(),
            "operator.name": self.operator.text().strip(),
        }
        return {k: v for k, v in out.items() if k not in self._env_locked}

    def save(self) -> None:
        self._spawn(self.save_now(), "save the preferences")

    async def save_now(self) -> Saved | None:
        values = self.values()
        endpoint = self.kind.currentData() == "openai"
        url = self.base_url.text().strip() if "summarizer.base_url" not in self._env_locked else "(env)"
        model = self.model.text().strip() if "summarizer.model" not in self._env_locked else "(env)"
        if endpoint and not (url and model):
            self._show_error("An OpenAI-compatible endpoint needs a base URL and a model (or choose the extractive summarizer).")
            return None
        before = {k: (self.loaded.values[k].value if self.loaded is not None else None) for k in values if k.startswith("summarizer.")}
        key = self.api_key.text().strip() or None
        forget = self.forget_key.isChecked()
        try:
            said = await self._run(save_settings, self.settings, values, key, forget)
        except SettingError as exc:
            self._show_error(exc.message)
            return None
        self.api_key.clear()  # the key is in the keyring now: not kept in a widget
        changed = key is not None or forget or any(before.get(k) != values[k] for k in before)
        result = Saved(poll_ms=int(round(self.poll.value() * 1000)), theme=str(self.theme.currentData()),
                       summarizer_changed=changed, key_message=said)
        self.saved.emit(result)
        self.accept()
        return result

    def _fit(self) -> None:
        """Give each wrapped line its full height (a wrapped label in a form row is otherwise cut)."""
        width = max(self.width(), self.minimumWidth()) - 70
        for label in (self.key_status, self.env_note, self.test_result, self.where, self.error):
            label.setMinimumHeight(label.heightForWidth(width) if label.text() else 0)
        self.adjustSize()

    def _show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setStyleSheet("color: #cf222e;")
        self.error.show()
        self._fit()


# == the window's side: Edit → Preferences… =======================================================
class PreferencesHook:
    """Edit → Preferences… (Ctrl+,) on ``window`` (a ``MainWindow``): opens one dialog at a time
    and applies what Save changed: the poll interval, the theme, and the summarizer of the open
    database's service (rebuilt from the settings on a worker)."""

    def __init__(self, window: Any, settings: Settings | None = None) -> None:
        from PySide6.QtGui import QAction, QKeySequence

        self.window = window
        self.settings = settings
        self.dialog: PreferencesDialog | None = None
        self.action = QAction("Preferences…", window)
        self.action.setObjectName("preferences")
        self.action.setShortcuts([QKeySequence("Ctrl+,"), QKeySequence(QKeySequence.StandardKey.Preferences)])
        self.action.setMenuRole(QAction.MenuRole.PreferencesRole)
        self.action.setToolTip("The summarizer and its API key, the default policy of new databases, the poll interval, the theme, your name")
        self.action.setStatusTip(self.action.toolTip())
        self.action.triggered.connect(self.open)
        bar = window.menuBar()
        self.menu = QMenuFor(window)
        self.menu.addAction(self.action)
        after = bar.actions()
        at = next((i + 1 for i, a in enumerate(after) if a is window.file_menu.menuAction()), len(after))
        if at < len(after):
            bar.insertMenu(after[at], self.menu)
        else:
            bar.addMenu(self.menu)

    def open(self) -> PreferencesDialog:
        w = self.window
        if self.dialog is None:
            mode = w.theme_manager.mode if w.theme_manager is not None else "system"
            self.dialog = PreferencesDialog(w.client.run, w.spawn, theme=mode, settings=self.settings, parent=w)
            self.dialog.saved.connect(self.apply)
            self.dialog.finished.connect(self._closed)
            self.dialog.start_load()
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()
        return self.dialog

    def _closed(self, _result: int) -> None:
        if self.dialog is not None:
            self.dialog.deleteLater()
            self.dialog = None

    def apply(self, saved: Saved) -> None:
        w = self.window
        w.live.timer.setInterval(saved.poll_ms)
        if w.theme_manager is not None and saved.theme != w.theme_manager.mode:
            w.theming.set_theme(saved.theme)
        said = ["Preferences saved"]
        if saved.key_message:
            said.append(saved.key_message)
        w.statusBar().showMessage(". ".join(said))
        if saved.summarizer_changed and w.client.connected:
            w.spawn(self.reload_summarizer(said), "use the new summarizer")

    async def reload_summarizer(self, said: list[str]) -> None:
        from ..service_api import CompactionAPI

        who = await self.window.client.call(CompactionAPI.reload_summarizer)
        host = f" at {who['summarizer_host']}" if who.get("summarizer_host") else ""
        self.window.statusBar().showMessage(". ".join(said + [f"Summaries are now written by {who['summarizer']}{host}"]))


def QMenuFor(window: Any) -> Any:  # noqa: N802 - a factory named for what it makes
    from PySide6.QtWidgets import QMenu

    menu = QMenu("&Edit", window)
    menu.setObjectName("editMenu")
    menu.setToolTipsVisible(True)
    return menu
