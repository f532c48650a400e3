"""Compaction → What if…: replay the open thread under other settings and compare with what happened.

The dialog is a settings form (each setting is left *as recorded* unless its box is ticked), a Run
and a Cancel button with a progress bar, and the result: the comparison table (recorded against
the candidate) or, in sweep mode, one row per value of one parameter and a small chart of the peak
and mean pressure over the values. The run is ``Service.compaction.whatif`` / ``Service.compaction.whatif_sweep`` on a
worker thread (through :class:`~inspector_app.service_client.ServiceClient`): ``progress(done,
total)`` comes back to the GUI thread throttled, Cancel makes ``should_stop()`` true and the engine
raises ``Cancelled`` (its scratch copy removed). A bad setting or an unreachable summarizer is shown
in the dialog, in words.

The settings, the sweep values and the table rows are plain Python (:func:`build_settings`,
:func:`sweep_values`, :func:`comparison_rows`, :func:`sweep_rows`, in
:mod:`inspector_app.logic.whatif`, re-exported here); the models and the chart are thin Qt over them.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QFont, QFontMetrics, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from engine.core.errors import Cancelled, describe_failure

from .. import theme
from ..logic.whatif import (  # noqa: F401 (re-exported: the dialog's plain Python, imported from here)
    MAX_SWEEP,
    METRICS,
    POLICY_NAMES,
    SETTING_BY_KEY,
    SETTINGS,
    SWEEP_METRICS,
    ComparisonRow,
    Metric,
    ProgressRelay,
    Setting,
    SettingsError,
    SummarizerChoice,
    SweepRow,
    Tone,
    _number,
    build_settings,
    comparison_rows,
    metric_change,
    metric_text,
    policy_text,
    setting_for,
    settings_text,
    summarizer_setting,
    sweep_rows,
    sweep_values,
)
from ..models.table import RecordTableModel
from ..service_api import CompactionAPI
from ..service_client import FacetClient, ServiceClient

if TYPE_CHECKING:
    from engine.service import WhatIfComparison, WhatIfSweep

# == models and chart =============================================================================

_TONES = {"better": "ok", "worse": "danger"}


class ComparisonModel(RecordTableModel[ComparisonRow]):
    COLUMNS = ("", "Recorded", "Candidate", "Change")

    def set_rows(self, rows: Sequence[ComparisonRow]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def rows(self) -> list[ComparisonRow]:
        return list(self._rows)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        row, col = self._rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (row.label, row.recorded, row.candidate, row.change)[col]
        if role == Qt.ItemDataRole.ForegroundRole and col == 3 and row.tone in _TONES:
            return QBrush(theme.color(_TONES[row.tone]))
        if role == Qt.ItemDataRole.TextAlignmentRole and col > 0:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class SweepModel(RecordTableModel[SweepRow]):
    #: short titles: nine columns beside the chart
    COLUMNS = ("Value", "Compactions", "Summarizer calls", "Peak", "Mean", "Prompt tokens", "Over window", "Dropped", "Request kept")

    def set_rows(self, rows: Sequence[SweepRow]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def rows(self) -> list[SweepRow]:
        return list(self._rows)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802 (Qt name)
        if role == Qt.ItemDataRole.ToolTipRole and orientation == Qt.Orientation.Horizontal and 0 < section <= len(SWEEP_METRICS):
            return SWEEP_METRICS[section - 1].label
        return super().headerData(section, orientation, role)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        row, col = self._rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return row.value if col == 0 else row.cells[col - 1]
        if role == Qt.ItemDataRole.ForegroundRole and row.recorded:
            return QBrush(theme.color("text_muted"))
        if role == Qt.ItemDataRole.FontRole and row.recorded:
            font = QFont()
            font.setItalic(True)
            return font
        if role == Qt.ItemDataRole.TextAlignmentRole and col > 0:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class SweepChart(QWidget):
    """Peak and mean pressure (share of the window) over the swept values, the recorded run as
    dotted lines, the window (100%) dashed, and the number of compactions above each value."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sweepChart")
        self.setMinimumHeight(170)
        self._sweep: "WhatIfSweep | None" = None

    def sizeHint(self) -> QSize:
        return QSize(480, 200)

    def set_sweep(self, sweep: "WhatIfSweep | None") -> None:
        self._sweep = sweep
        self.update()

    def series(self) -> tuple[list[float], list[float], list[int]]:
        """Peak and mean pressure and the compactions of each run (unreadable figures as 0)."""
        runs = self._sweep.runs if self._sweep is not None else ()
        num = lambda v: float(v) if _number(v) else 0.0  # noqa: E731
        return [num(r.peak_pressure) for r in runs], [num(r.mean_pressure) for r in runs], [int(num(r.compactions)) for r in runs]

    def paintEvent(self, _event: object) -> None:  # noqa: N802 (Qt name)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        outer = QRectF(self.rect()).adjusted(10, 6, -10, -6)
        p.setPen(theme.color("text_muted"))
        sweep = self._sweep
        if sweep is None or not sweep.runs:
            p.drawText(outer, Qt.AlignmentFlag.AlignCenter, "Run a sweep to see the pressure over its values")
            return
        setting = setting_for(sweep.parameter)
        name = setting.label.split(" (")[0] if setting else sweep.parameter
        p.drawText(QRectF(outer.left(), outer.top(), outer.width(), 16), Qt.AlignmentFlag.AlignLeft, f"Pressure by {name.lower()} · n× = compactions")
        peaks, means, compactions = self.series()
        rec_peak = float(sweep.recorded.peak_pressure) if _number(sweep.recorded.peak_pressure) else None
        rec_mean = float(sweep.recorded.mean_pressure) if _number(sweep.recorded.mean_pressure) else None
        top = max([1.0, *peaks, *(v for v in (rec_peak,) if v is not None)]) * 1.12
        area = QRectF(outer.left() + 40, outer.top() + 36, outer.width() - 48, outer.height() - 78)
        y_of = lambda v: area.bottom() - v / top * area.height()  # noqa: E731
        n = len(peaks)
        x_of = lambda i: area.left() + (i * area.width() / (n - 1) if n > 1 else area.width() / 2)  # noqa: E731
        small = QFont(self.font())
        small.setPointSizeF(self.font().pointSizeF() * 0.85)
        p.setFont(small)
        p.setPen(QPen(theme.color("border"), 1))
        p.drawLine(area.bottomLeft(), area.bottomRight())
        p.setPen(theme.color("text_muted"))
        for v in (0.0, 0.5, 1.0):
            p.drawText(QRectF(outer.left(), y_of(v) - 8, 36, 16), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"{v * 100:.0f}%")
        p.setPen(QPen(theme.color("danger"), 1.2, Qt.PenStyle.DashLine))
        p.drawLine(QPointF(area.left(), y_of(1.0)), QPointF(area.right(), y_of(1.0)))
        p.setPen(theme.color("danger"))
        p.drawText(QRectF(area.left() + 4, y_of(1.0) - 16, 200, 14), Qt.AlignmentFlag.AlignLeft, "context window")
        for value, tone in ((rec_peak, "warn"), (rec_mean, "accent")):
            if value is not None:
                p.setPen(QPen(theme.color(tone), 1, Qt.PenStyle.DotLine))
                p.drawLine(QPointF(area.left(), y_of(value)), QPointF(area.right(), y_of(value)))
        for series, tone in ((peaks, "warn"), (means, "accent")):
            path = QPainterPath()
            for i, v in enumerate(series):
                pt = QPointF(x_of(i), y_of(v))
                path.moveTo(pt) if i == 0 else path.lineTo(pt)
            p.setPen(QPen(theme.color(tone), 2))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawPath(path)
            p.setBrush(theme.color(tone))
            for i, v in enumerate(series):
                p.drawEllipse(QPointF(x_of(i), y_of(v)), 3, 3)
        p.setPen(theme.color("text_muted"))
        labels = [setting.shown(v) if setting else str(v) for v in sweep.values]
        every = max(1, math.ceil(n / max(1, int(area.width() // 44))))  # no overlapping labels
        for i, label in enumerate(labels):
            if i % every == 0 or i == n - 1:
                p.drawText(QRectF(x_of(i) - 26, area.bottom() + 3, 52, 14), Qt.AlignmentFlag.AlignCenter, label)
            if i % every == 0 or i == n - 1:
                p.drawText(QRectF(x_of(i) - 20, area.top() - 18, 40, 14), Qt.AlignmentFlag.AlignCenter, f"{compactions[i]}×")
        metrics = QFontMetrics(small)
        items = [("peak pressure", "warn", Qt.PenStyle.SolidLine), ("mean pressure", "accent", Qt.PenStyle.SolidLine),
                 ("recorded", "text_muted", Qt.PenStyle.DotLine)]  # fmt: skip
        widths = [(18 if tone else 0) + metrics.horizontalAdvance(text) + 14 for text, tone, _ in items]
        x, y = area.left() + max(0.0, (area.width() - sum(widths)) / 2), area.bottom() + 27
        for (text, tone, style), width in zip(items, widths):
            if tone is not None:
                p.setPen(QPen(theme.color(tone), 2, style))
                p.drawLine(QPointF(x, y), QPointF(x + 14, y))
                x += 18
            p.setPen(theme.color("text_muted"))
            p.drawText(QRectF(x, y - 8, width, 16), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
            x += width - (18 if tone else 0)


# == the dialog ===================================================================================


class WhatIfDialog(QDialog):
    """The what-if form, its run and its result for one thread (:meth:`set_thread` to change it)."""

    #: a run ended: "done", "cancelled", "failed" (the engine) or "invalid" (the form)
    finishedRun = Signal(str)

    def __init__(self, client: ServiceClient | FacetClient, key: str, title: str | None = None, *, window_tokens: int | None = None,
                 threshold: int | None = None, spawn: Callable[[Any, str], Any] | None = None, parent: QWidget | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self.setObjectName("whatIfDialog")
        self.setWindowTitle("What if…")
        self.client = client
        self.key = key
        self._spawn = spawn or (lambda coro, _what: asyncio.ensure_future(coro))
        self._stop = threading.Event()
        self._run_id = 0
        self._active = False
        self.task: asyncio.Task[Any] | None = None
        self.comparison: "WhatIfComparison | None" = None
        self.sweep: "WhatIfSweep | None" = None

        self.thread_label = QLabel()
        self.thread_label.setObjectName("sectionTitle")
        self.thread_label.setWordWrap(True)
        about = QLabel("Replays the recorded thread through the engine in a scratch copy (the database is never written) and compares with what happened. "
                       "Settings left unticked stay as recorded.")  # fmt: skip
        about.setObjectName("muted")
        about.setWordWrap(True)
        for label in (self.thread_label, about):
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

        # settings
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.checks: dict[str, QCheckBox] = {}
        self.spins: dict[str, QDoubleSpinBox] = {}
        for s in SETTINGS:
            check = QCheckBox(s.label)
            check.setObjectName(f"set_{s.key}")
            check.setToolTip(s.help)
            spin = _spin(s)
            spin.setObjectName(f"value_{s.key}")
            spin.setEnabled(False)
            check.toggled.connect(spin.setEnabled)
            self.checks[s.key], self.spins[s.key] = check, spin
            form.addRow(check, spin)
        self.summarizer = QComboBox()
        self.summarizer.setObjectName("summarizerChoice")
        for text, data in (("extractive (offline, deterministic)", "extractive"), ("OpenAI-compatible endpoint", "openai")):
            self.summarizer.addItem(text, data)
        self.endpoint = QLineEdit()
        self.endpoint.setObjectName("endpointUrl")
        self.endpoint.setPlaceholderText("http://127.0.0.1:8000/v1")
        self.model_name = QLineEdit()
        self.model_name.setObjectName("endpointModel")
        self.model_name.setPlaceholderText("model name")
        self.endpoint.setMinimumWidth(230)
        self.model_name.setMinimumWidth(120)
        endpoint_row = QHBoxLayout()
        endpoint_row.addWidget(self.endpoint, 3)
        endpoint_row.addWidget(self.model_name, 2)
        self._endpoint_box = QWidget()
        self._endpoint_box.setLayout(endpoint_row)
        endpoint_row.setContentsMargins(0, 0, 0, 0)
        self.summarizer.currentIndexChanged.connect(lambda _i: self._endpoint_box.setEnabled(self.summarizer.currentData() == "openai"))
        self._endpoint_box.setEnabled(False)
        form.addRow("Summarizer", self.summarizer)
        form.addRow("Endpoint URL · model", self._endpoint_box)
        settings_box = QGroupBox("Candidate settings")
        settings_box.setLayout(form)

        # mode
        self.compare_mode = QRadioButton("Compare with what happened")
        self.compare_mode.setObjectName("compareMode")
        self.sweep_mode = QRadioButton("Sweep one parameter")
        self.sweep_mode.setObjectName("sweepMode")
        self.compare_mode.setChecked(True)
        modes = QButtonGroup(self)
        modes.addButton(self.compare_mode)
        modes.addButton(self.sweep_mode)
        self.sweep_param = QComboBox()
        self.sweep_param.setObjectName("sweepParameter")
        for s in SETTINGS:
            self.sweep_param.addItem(s.label.split(" (")[0], s.key)
        self.sweep_from, self.sweep_to, self.sweep_step = _spin(SETTINGS[0]), _spin(SETTINGS[0]), _spin(SETTINGS[0])
        for name, spin in (("sweepFrom", self.sweep_from), ("sweepTo", self.sweep_to), ("sweepStep", self.sweep_step)):
            spin.setObjectName(name)
        self.sweep_param.currentIndexChanged.connect(self._on_sweep_param)
        sweep_row = QHBoxLayout()
        sweep_row.setContentsMargins(0, 0, 0, 0)
        for text, w in (("", self.sweep_param), ("from", self.sweep_from), ("to", self.sweep_to), ("step", self.sweep_step)):
            if text:
                sweep_row.addWidget(QLabel(text))
            sweep_row.addWidget(w, 1)
        self._sweep_box = QWidget()
        self._sweep_box.setLayout(sweep_row)
        self._sweep_box.setEnabled(False)
        self.sweep_mode.toggled.connect(self._sweep_box.setEnabled)
        mode_box = QGroupBox("Run")
        ml = QVBoxLayout(mode_box)
        ml.addWidget(self.compare_mode)
        ml.addWidget(self.sweep_mode)
        sweep_row.setContentsMargins(22, 0, 0, 0)  # under its radio button
        ml.addWidget(self._sweep_box)

        # run controls
        self.run_button = QPushButton("Run")
        self.run_button.setObjectName("runWhatIf")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelWhatIf")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setObjectName("whatIfProgress")
        self.progress.setTextVisible(False)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status = QLabel("Not run yet")
        self.status.setObjectName("whatIfStatus")
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        run_row = QHBoxLayout()
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.cancel_button)
        run_row.addWidget(self.progress, 1)
        self.error = QLabel()
        self.error.setObjectName("whatIfError")
        self.error.setWordWrap(True)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.error.hide()

        # results
        self.comparison_model = ComparisonModel(self)
        self.comparison_view = _table("comparisonTable", self.comparison_model)
        self.comparison_view.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.comparison_view.header().setMinimumSectionSize(110)
        self.sweep_model = SweepModel(self)
        self.sweep_view = _table("sweepTable", self.sweep_model)
        self.sweep_view.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.chart = SweepChart()
        sweep_page = QSplitter(Qt.Orientation.Horizontal)
        sweep_page.addWidget(self.sweep_view)
        sweep_page.addWidget(self.chart)
        sweep_page.setChildrenCollapsible(False)
        sweep_page.setStretchFactor(0, 3)
        sweep_page.setStretchFactor(1, 2)
        self.result_note = QLabel()
        self.result_note.setObjectName("muted")
        self.result_note.setWordWrap(True)
        self.result_note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.results = QTabWidget()  # a comparison and a sweep stay side by side once both ran
        self.results.setObjectName("whatIfResults")
        self.results.addTab(self.comparison_view, "Comparison")
        self.results.addTab(sweep_page, "Sweep")
        self._sweep_page = sweep_page
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.close)

        top = QHBoxLayout()
        top.addWidget(settings_box, 0)
        side = QVBoxLayout()
        side.addWidget(mode_box)
        side.addLayout(run_row)
        side.addWidget(self.status)
        side.addWidget(self.error)
        side.addStretch(1)
        top.addLayout(side, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.thread_label)
        layout.addWidget(about)
        layout.addLayout(top)
        layout.addWidget(self.result_note)
        layout.addWidget(self.results, 1)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        bottom.addWidget(self.close_button)
        layout.addLayout(bottom)
        self.resize(1100, 720)
        self.set_thread(key, title, window_tokens=window_tokens, threshold=threshold)
        self._on_sweep_param(0)

    # -- form ------------------------------------------------------------------------------------
    def set_thread(self, key: str, title: str | None = None, *, window_tokens: int | None = None, threshold: int | None = None) -> None:
        """Point the dialog at ``key`` (not while a run is going); the window and threshold it
        reports start the form's context window and threshold ratio."""
        if self.running:
            return
        if key != self.key:
            self.comparison = self.sweep = None
            self.comparison_model.set_rows([])
            self.sweep_model.set_rows([])
            self.chart.set_sweep(None)
            self.result_note.setText("")
            self.status.setText("Not run yet")
            self.progress.setValue(0)
            self._show_error(None)
        self.key = key
        self.thread_label.setText(f"What if “{title or key}” had been compacted differently?")
        if window_tokens and not self.checks["context_window"].isChecked():
            self.spins["context_window"].setValue(window_tokens)
        if window_tokens and threshold and not self.checks["threshold_ratio"].isChecked():
            self.spins["threshold_ratio"].setValue(round(threshold / window_tokens, 2))

    def _on_sweep_param(self, _index: int) -> None:
        s = SETTING_BY_KEY[self.sweep_param.currentData()]
        for spin in (self.sweep_from, self.sweep_to, self.sweep_step):
            _configure(spin, s)
        if s.kind == "ratio":
            start, stop, step = 0.5, min(s.high, 0.95), 0.05 if s.key == "threshold_ratio" else s.step
            if s.key == "retained_tail":
                start, stop, step = 0.05, 0.3, 0.05
        else:
            start, stop, step = s.default / 2, s.default * 2, s.default / 2
        self.sweep_from.setValue(start)
        self.sweep_to.setValue(stop)
        self.sweep_step.setValue(step)

    def form_settings(self) -> dict[str, Any]:
        """The ticked settings and the summarizer as ``Service.compaction.whatif`` takes them (SettingsError)."""
        values = {key: self.spins[key].value() for key, check in self.checks.items() if check.isChecked()}
        summarizer = summarizer_setting(self.summarizer.currentData(), self.endpoint.text(), self.model_name.text())
        return build_settings(values, summarizer)

    def form_sweep(self) -> tuple[str, tuple[float | int, ...]]:
        key = self.sweep_param.currentData()
        return key, sweep_values(key, self.sweep_from.value(), self.sweep_to.value(), self.sweep_step.value())

    # -- running ---------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """A run is going (started with :meth:`start` or awaited as :meth:`run`)."""
        return self._active or (self.task is not None and not self.task.done())

    def start(self) -> Any:
        """Run what the form says (a click on Run); returns the task, or None when already running."""
        if self.running:
            return None
        self.task = self._spawn(self.run(), "what-if")
        return self.task

    def cancel(self) -> None:
        """Ask the running what-if to stop (the engine checks between requests)."""
        if self.running:
            self._stop.set()
            self.cancel_button.setEnabled(False)
            self.status.setText("Cancelling…")

    async def run(self) -> str:
        """Read the form, run off the GUI thread, show the result; returns "done", "cancelled",
        "invalid" (the form) or "failed" (the engine: shown in the dialog)."""
        self._show_error(None)
        try:
            settings = self.form_settings()
            sweep = self.form_sweep() if self.sweep_mode.isChecked() else None
            if sweep is not None:
                settings.pop(sweep[0], None)  # the swept parameter takes the sweep's values, not the form's
        except SettingsError as exc:
            self._show_error(str(exc))
            self.status.setText("Fix the settings and run again")
            self.finishedRun.emit("invalid")
            return "invalid"
        self._run_id += 1
        run_id, key = self._run_id, self.key
        self._stop = stop = threading.Event()
        loop = asyncio.get_running_loop()
        def post(done: int, total: int) -> None:
            try:
                loop.call_soon_threadsafe(self._show_progress, run_id, done, total)
            except RuntimeError:  # the loop is closed (the window went away): nobody is watching
                stop.set()

        relay = ProgressRelay(post)
        self._set_running(True)
        started = time.monotonic()
        what = f"sweep of {SETTING_BY_KEY[sweep[0]].label.split(' (')[0].lower()} over {len(sweep[1])} values" if sweep else "what-if run"
        self.status.setText(f"Running the {what}…")
        outcome = "failed"
        try:
            if sweep is None:
                comparison = await self.client.call(CompactionAPI.whatif, key, settings, progress=relay, should_stop=stop.is_set)
                self._show_comparison(comparison, settings)
            else:
                swept = await self.client.call(CompactionAPI.whatif_sweep, key, sweep[0], sweep[1], settings=settings, progress=relay, should_stop=stop.is_set)
                self._show_sweep(swept, settings)
            outcome = "done"
            self.status.setText(f"Done in {time.monotonic() - started:.1f} s · {what} · the database was not written")
        except Cancelled:
            outcome = "cancelled"
            self.status.setText("Cancelled: nothing was kept (the database was not written)")
        except asyncio.CancelledError:
            stop.set()  # the dialog went away (or the window closes): let the worker stop too
            self._active = False
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is shown in the dialog, in words
            code, text = describe_failure(exc)
            self._show_error(f"{code}: {text}")
            self.status.setText("The run failed: nothing was kept")
        self._set_running(False)
        self.finishedRun.emit(outcome)
        return outcome

    def _set_running(self, on: bool) -> None:
        self._active = on
        self.run_button.setEnabled(not on)
        self.cancel_button.setEnabled(on)
        for w in (*self.checks.values(), self.summarizer, self.compare_mode, self.sweep_mode):
            w.setEnabled(not on)
        for key, spin in self.spins.items():
            spin.setEnabled(not on and self.checks[key].isChecked())
        self._endpoint_box.setEnabled(not on and self.summarizer.currentData() == "openai")
        self._sweep_box.setEnabled(not on and self.sweep_mode.isChecked())
        if on:
            self.progress.setRange(0, 0)  # busy until the first progress report
        elif self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)

    def _show_progress(self, run_id: int, done: int, total: int) -> None:
        if run_id != self._run_id or not self._active or self._stop.is_set():
            return  # a late report of an older run, or one being cancelled
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(done, total))
            self.status.setText(f"Replaying… {done:,} of {total:,} requests")

    def _show_error(self, text: str | None) -> None:
        self.error.setText(text or "")
        self.error.setStyleSheet(f"color: {theme.color('danger').name()};")
        self.error.setVisible(bool(text))

    def _show_comparison(self, comparison: "WhatIfComparison", settings: Mapping[str, Any]) -> None:
        self.comparison = comparison
        self.comparison_model.set_rows(comparison_rows(comparison))
        self.results.setCurrentWidget(self.comparison_view)
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        notes = [f"Candidate: {settings_text(settings)}.", f"Recorded: {policy_text(comparison.recorded.settings)}."]
        notes += [n for n in (getattr(comparison.recorded, "note", None), getattr(comparison.candidate, "note", None)) if n]
        self.result_note.setText(" ".join(notes) + " Green: lower than recorded (better), red: higher.")

    def _show_sweep(self, sweep: "WhatIfSweep", settings: Mapping[str, Any]) -> None:
        self.sweep = sweep
        self.sweep_model.set_rows(sweep_rows(sweep))
        self.chart.set_sweep(sweep)
        self.results.setCurrentWidget(self._sweep_page)
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        rest = {k: v for k, v in settings.items() if k != sweep.parameter}
        self.result_note.setText(
            f"Each row replays the thread with one value; the other settings: {settings_text(rest)}. Recorded: {policy_text(sweep.recorded.settings)}."
        )
        self.results.setTabText(1, f"Sweep ({len(sweep.runs)} runs)")
        self.sweep_view.header().resizeSections(QHeaderView.ResizeMode.ResizeToContents)
        wanted = self.sweep_view.header().length() + self.sweep_view.frameWidth() * 2 + 4  # the whole table, when the chart keeps 320 px
        total = self._sweep_page.width()
        if total > 0:
            table = max(total // 2, min(wanted, total - 320))
            self._sweep_page.setSizes([table, total - table])

    def done(self, result: int) -> None:
        """Closing the dialog (Close, Esc, the window's close button) stops a running what-if (the
        engine removes its scratch copy); the result is discarded."""
        if self.running:
            self._stop.set()
            if self.task is not None:
                self.task.cancel()
        super().done(result)

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        super().showEvent(event)
        self._set_running(self.running)  # a run cancelled with the dialog closed left nothing half-set


def _configure(spin: QDoubleSpinBox, s: Setting) -> None:
    spin.setDecimals(2 if s.kind == "ratio" else 0)
    spin.setRange(s.low if s.kind == "ratio" else 0, s.high)
    spin.setSingleStep(s.step)
    spin.setGroupSeparatorShown(s.kind == "int")


def _spin(s: Setting) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    _configure(spin, s)
    spin.setValue(s.default)
    spin.setButtonSymbols(QAbstractSpinBox.ButtonSymbols.UpDownArrows)
    spin.setMinimumWidth(110)
    return spin


def _table(name: str, model: Any) -> QTreeView:
    view = QTreeView()
    view.setObjectName(name)
    view.setModel(model)
    view.setRootIsDecorated(False)
    view.setUniformRowHeights(True)
    view.setAllColumnsShowFocus(True)
    view.header().setStretchLastSection(False)
    return view
