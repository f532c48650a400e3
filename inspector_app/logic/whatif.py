"""The what-if dialog's plain Python: the settings form's settings, the sweep values, the result
rows and the progress throttle (no Qt: :mod:`inspector_app.widgets.whatif` is the thin Qt over it).

The settings, the sweep values and the table rows are :func:`build_settings`,
:func:`sweep_values`, :func:`comparison_rows` and :func:`sweep_rows`; :class:`ProgressRelay`
passes the engine's ``progress(done, total)`` on at most every ``interval`` seconds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping
from urllib.parse import urlparse

from engine.core import figures

if TYPE_CHECKING:
    from engine.service import WhatIfComparison, WhatIfSweep

# == settings (Qt-free) ===========================================================================


class SettingsError(ValueError):
    """A setting the form cannot send (shown in the dialog, never raised past it)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One numeric setting of the form: its key for ``Service.compaction.whatif``, its label and its range."""

    key: str
    label: str
    kind: Literal["ratio", "int"]
    default: float
    low: float
    high: float
    step: float
    help: str

    def value(self, raw: float) -> float | int:
        """``raw`` as the service takes it (a ratio to 4 decimals, a whole number), or SettingsError."""
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or math.isnan(raw):
            raise SettingsError(f"{self.label}: {raw!r} is not a number")
        if not (self.low <= raw <= self.high):
            shown = (lambda v: f"{v:g}") if self.kind == "ratio" else (lambda v: f"{int(v):,}")
            raise SettingsError(f"{self.label} must be between {shown(self.low)} and {shown(self.high)}, not {shown(raw)}")
        return round(float(raw), 4) if self.kind == "ratio" else int(round(raw))

    def shown(self, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        return f"{value:.2f}".rstrip("0").rstrip(".") if self.kind == "ratio" else f"{int(value):,}"


#: the numeric settings, in form order (the defaults are the engine's policy defaults, shown only
#: as a starting point: an unticked setting is not sent and the run keeps what was recorded)
SETTINGS: tuple[Setting, ...] = (
    Setting("threshold_ratio", "Threshold (share of the window)", "ratio", 0.8, 0.05, 1.0, 0.05,
            "Compaction starts when the envelope reaches this share of the context window"),
    Setting("retained_tail", "Retained tail (share of the window)", "ratio", 0.16, 0.01, 0.5, 0.01,
            "The most recent history kept verbatim after a summary"),
    Setting("tool_result_limit", "Tool-result limit (tokens)", "int", 2000, 1, 10_000_000, 100,
            "A tool result larger than this is pruned to a preview once its turn is over"),
    Setting("preview_budget", "Preview budget (tokens)", "int", 600, 0, 1_000_000, 50,
            "The size of the preview that replaces a pruned tool result"),
    Setting("context_window", "Context window (tokens)", "int", 128_000, 1_000, 10_000_000, 1_000,
            "The model's context window the pressure is measured against"),
)  # fmt: skip
SETTING_BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
#: the policy's own names the engine may answer with (engine/whatif/settings.py ALIASES, reversed)
POLICY_NAMES: dict[str, str] = {"retained_tail_ratio": "retained_tail", "tool_result_limit_tokens": "tool_result_limit", "preview_tokens": "preview_budget"}


def setting_for(key: str) -> Setting | None:
    """The form's setting for ``key`` (its short name or the policy's own)."""
    return SETTING_BY_KEY.get(POLICY_NAMES.get(key, key))
#: the most runs a sweep may ask for (each replays the whole thread)
MAX_SWEEP = 25

SummarizerChoice = Literal["extractive", "openai"]


def summarizer_setting(choice: SummarizerChoice, url: str = "", model: str = "") -> str:
    """The ``summarizer`` setting: ``extractive`` (offline, deterministic: the engine's default for
    a what-if) or ``openai:<base_url>#<model>`` for an OpenAI-compatible endpoint (an http(s) URL
    and a model name are required)."""
    if choice == "extractive":
        return "extractive"
    url, model = url.strip(), model.strip()
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise SettingsError(f"Endpoint URL must be an http:// or https:// URL with a host{f', not {url!r}' if url else ''}")
    if "#" in url:
        raise SettingsError("Endpoint URL must not contain '#'")
    if not model:
        raise SettingsError("Model: the endpoint needs a model name")
    if choice != "openai":
        raise SettingsError(f"unknown summarizer {choice!r}")
    return f"openai:{url.rstrip('/')}#{model}"


def build_settings(values: Mapping[str, float], summarizer: str | None = None) -> dict[str, Any]:
    """The settings mapping for ``Service.compaction.whatif`` from the ticked form values (``key -> raw``)."""
    out: dict[str, Any] = {}
    for key, raw in values.items():
        setting = SETTING_BY_KEY.get(key)
        if setting is None:
            raise SettingsError(f"unknown setting {key!r}")
        out[key] = setting.value(raw)
    if summarizer is not None:
        out["summarizer"] = summarizer
    return out


def sweep_values(key: str, start: float, stop: float, step: float) -> tuple[float | int, ...]:
    """``start``, ``start + step``, … up to ``stop`` (included when it falls on a step) for the
    setting ``key``: at most :data:`MAX_SWEEP` values, each within the setting's range."""
    setting = SETTING_BY_KEY.get(key)
    if setting is None:
        raise SettingsError(f"cannot sweep {key!r}")
    if not step > 0:
        raise SettingsError("Sweep step must be greater than 0")
    if stop < start:
        raise SettingsError(f"Sweep: 'to' ({setting.shown(stop)}) is below 'from' ({setting.shown(start)})")
    count = int(math.floor((stop - start) / step + 1e-9)) + 1
    if count > MAX_SWEEP:
        raise SettingsError(f"Sweep: {count} values; at most {MAX_SWEEP} (each replays the whole thread): use a larger step")
    values: list[float | int] = []
    for i in range(count):
        v = setting.value(start + i * step)
        if not values or v != values[-1]:
            values.append(v)
    if len(values) < 2:
        raise SettingsError("Sweep: give at least two values (from below to)")
    return tuple(values)


# == result rows (Qt-free) ========================================================================

Tone = Literal["better", "worse", "same"] | None


@dataclass(frozen=True, slots=True)
class Metric:
    attr: str
    label: str
    kind: Literal["count", "ratio", "tokens", "bool"]


#: the rows of the comparison, in order (lower is better for every number; kept is better)
METRICS: tuple[Metric, ...] = (
    Metric("requests", "Requests replayed", "count"),
    Metric("compactions", "Compactions", "count"),
    Metric("summarizer_calls", "Summarizer calls", "count"),
    Metric("peak_pressure", "Peak pressure", "ratio"),
    Metric("mean_pressure", "Mean pressure", "ratio"),
    Metric("prompt_tokens", "Prompt tokens over the session", "tokens"),
    Metric("steps_over_window", "Steps over the window", "count"),
    Metric("specifics_dropped", "Specifics dropped", "count"),
    Metric("request_kept", "Current request kept", "bool"),
)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def metric_text(kind: str, v: Any) -> str:
    """One figure in words; ``None`` (unknown) is "not known"."""
    if v is None:
        return "not known"
    if kind == "bool":
        return "yes" if v is True else "no" if v is False else str(v)
    if not _number(v):
        return f"unreadable ({str(v)[:20]})"
    if kind == "ratio":
        return figures.percent(v)
    return figures.count(int(v))


def metric_change(kind: str, before: Any, after: Any) -> tuple[str, Tone]:
    """The candidate against the recorded run: the difference in words and whether it is better."""
    if kind == "bool":
        if not isinstance(before, bool) or not isinstance(after, bool):
            return "", None
        if before == after:
            return "same", "same"
        return ("kept now", "better") if after else ("lost now", "worse")
    if not _number(before) or not _number(after):
        return "", None
    diff = after - before
    tone: Tone = "same" if abs(diff) < 1e-9 else ("better" if diff < 0 else "worse")
    if tone == "same":
        return "same", tone
    sign = "+" if diff > 0 else "−"
    if kind == "ratio":
        return f"{sign}{abs(diff) * 100:.1f} pt", tone
    text = f"{sign}{abs(int(diff)):,}"
    if kind == "tokens" and before:
        text += f" ({sign}{abs(diff) / before * 100:.1f}%)"
    return text, tone


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    label: str
    recorded: str
    candidate: str
    change: str
    tone: Tone


def comparison_rows(comparison: "WhatIfComparison") -> list[ComparisonRow]:
    """One row per :data:`METRICS` entry: recorded, candidate and the change."""
    rows: list[ComparisonRow] = []
    for m in METRICS:
        before, after = getattr(comparison.recorded, m.attr, None), getattr(comparison.candidate, m.attr, None)
        change, tone = metric_change(m.kind, before, after)
        rows.append(ComparisonRow(m.label, metric_text(m.kind, before), metric_text(m.kind, after), change, tone))
    return rows


def settings_text(settings: Mapping[str, Any]) -> str:
    """``threshold 0.6 · tail 0.1 · summarizer extractive``: what a run changed, in words."""
    parts = []
    for key, value in settings.items():
        setting = setting_for(key)
        parts.append(f"{setting.label.split(' (')[0].lower()} {setting.shown(value)}" if setting else f"{key} {value}")
    return " · ".join(parts) or "as recorded"


def policy_text(settings: Any) -> str:
    """What a run's settings say about the form's settings and the summarizer (the engine answers
    with the whole policy, by the policy's own names): ``threshold 0.8 · retained tail 0.16 · …``."""
    if not isinstance(settings, Mapping):
        return "not known"
    shown = {}
    for key, value in settings.items():
        if value is not None and (setting_for(key) is not None or key == "summarizer"):
            shown[key] = value
    return settings_text(shown) if shown else "not known"


#: the sweep table's metric columns (after the swept value)
SWEEP_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS if m.attr != "requests")


@dataclass(frozen=True, slots=True)
class SweepRow:
    value: str
    cells: tuple[str, ...]
    recorded: bool = False


def sweep_rows(sweep: "WhatIfSweep") -> list[SweepRow]:
    """The recorded run first, then one row per swept value."""
    setting = setting_for(sweep.parameter)
    rows = [SweepRow("recorded", tuple(metric_text(m.kind, getattr(sweep.recorded, m.attr, None)) for m in SWEEP_METRICS), recorded=True)]
    for value, run in zip(sweep.values, sweep.runs):
        shown = setting.shown(value) if setting else str(value)
        rows.append(SweepRow(shown, tuple(metric_text(m.kind, getattr(run, m.attr, None)) for m in SWEEP_METRICS)))
    return rows


class ProgressRelay:
    """``progress(done, total)`` as the engine calls it on a worker thread, passed on to ``post`` at
    most every ``interval`` seconds (and always for the last step), so a 100k-request run does not
    flood the GUI loop."""

    def __init__(self, post: Callable[[int, int], None], interval: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        self._post = post
        self._interval = interval
        self._clock = clock
        self._last = -math.inf

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if done >= total or now - self._last >= self._interval:
            self._last = now
            self._post(done, total)
