"""What-if runs: a recorded thread replayed through the engine under another policy, in a scratch copy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import Cancelled

__all__ = ["Cancelled", "WhatIfComparison", "WhatIfRun", "WhatIfSweep"]

Progress = Callable[[int, int], None]
ShouldStop = Callable[[], bool]


@dataclass(frozen=True)
class WhatIfRun:
    """The figures of one run over a whole thread: ``recorded`` (what happened) or a candidate policy.

    Pressures are ratios of the envelope's tokens to the context window. ``specifics_dropped`` and
    ``request_kept`` are ``None`` when unknown (a recorded run without the events that say)."""

    label: str
    settings: Mapping[str, Any]
    requests: int
    compactions: int
    summarizer_calls: int
    peak_pressure: float
    mean_pressure: float
    prompt_tokens: int
    steps_over_window: int
    specifics_dropped: int | None
    request_kept: bool | None
    duration_ms: float
    #: compactions by kind ("prune", "summary")
    by_kind: Mapping[str, int] = field(default_factory=dict)
    #: per-request figures (index, tokens, pressure, compacted): ``()`` unless asked for
    points: tuple["WhatIfPoint", ...] = ()
    note: str | None = None

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "settings": dict(self.settings),
            "requests": self.requests,
            "compactions": self.compactions,
            "by_kind": dict(self.by_kind),
            "summarizer_calls": self.summarizer_calls,
            "peak_pressure": round(self.peak_pressure, 4),
            "mean_pressure": round(self.mean_pressure, 4),
            "prompt_tokens": self.prompt_tokens,
            "steps_over_window": self.steps_over_window,
            "specifics_dropped": self.specifics_dropped,
            "request_kept": self.request_kept,
            "duration_ms": round(self.duration_ms, 1),
            "note": self.note,
        }


@dataclass(frozen=True)
class WhatIfPoint:
    """One model request of a run: the envelope's tokens after compaction and what compaction did."""

    index: int
    tokens: int
    pressure: float
    compactions: int
    summarizer_calls: int


@dataclass(frozen=True)
class WhatIfComparison:
    thread: str
    recorded: WhatIfRun
    candidate: WhatIfRun

    def to_json(self) -> dict:
        return {"thread": self.thread, "recorded": self.recorded.to_json(), "candidate": self.candidate.to_json()}


@dataclass(frozen=True)
class WhatIfSweep:
    thread: str
    parameter: str
    values: tuple
    runs: tuple[WhatIfRun, ...]
    recorded: WhatIfRun

    def to_json(self) -> dict:
        return {
            "thread": self.thread,
            "parameter": self.parameter,
            "values": list(self.values),
            "recorded": self.recorded.to_json(),
            "runs": [r.to_json() for r in self.runs],
        }
