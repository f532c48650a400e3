"""What-if results: the figures of one run (:class:`WhatIfRun`, one :class:`WhatIfPoint` per model
request), a comparison with what was recorded and a sweep (see :mod:`engine.whatif`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhatIfPoint:
    """One model request of a run: the envelope's tokens as sent and what compaction did before it."""

    index: int
    tokens: int
    pressure: float
    #: compactions (prunes and summaries) made just before this request
    compactions: int
    summarizer_calls: int
    #: the current request was verbatim in the envelope (None: no current request / not known)
    request_kept: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "tokens": self.tokens, "pressure": round(self.pressure, 4), "compactions": self.compactions,
                "summarizer_calls": self.summarizer_calls, "request_kept": self.request_kept}


@dataclass(frozen=True)
class WhatIfRun:
    """The figures of one run over a whole thread: ``recorded`` (what happened) or a candidate policy.

    Pressures are ratios of the envelope's tokens to the run's context window; ``prompt_tokens`` is
    the sum of the envelopes sent over the session; ``steps_over_window`` the requests whose
    envelope was larger than the window. ``specifics_dropped`` (summed over the summaries'
    ``dropped_specifics``) and ``request_kept`` (the current request verbatim at every request) are
    ``None`` when unknown. Two runs compare equal whatever their ``duration_ms``."""

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
    duration_ms: float = field(compare=False)
    #: compactions by kind ("prune", "summary", "manual")
    by_kind: Mapping[str, int] = field(default_factory=dict)
    #: requests whose envelope lacked the current request verbatim (None: not known)
    requests_without_request: int | None = None
    context_window: int | None = None
    #: one point per model request, in order (the GUI's chart)
    points: tuple[WhatIfPoint, ...] = field(default=(), repr=False)
    note: str | None = None

    def to_json(self, *, points: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label,
            "settings": dict(self.settings),
            "context_window": self.context_window,
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
            "requests_without_request": self.requests_without_request,
            "duration_ms": round(self.duration_ms, 1),
            "note": self.note,
        }
        if points:
            out["points"] = [p.to_json() for p in self.points]
        return out


@dataclass(frozen=True)
class WhatIfComparison:
    thread: str
    recorded: WhatIfRun
    candidate: WhatIfRun

    def to_json(self, *, points: bool = False) -> dict[str, Any]:
        return {"thread": self.thread, "recorded": self.recorded.to_json(points=points), "candidate": self.candidate.to_json(points=points)}


@dataclass(frozen=True)
class WhatIfSweep:
    thread: str
    parameter: str
    values: tuple[Any, ...]
    runs: tuple[WhatIfRun, ...]
    recorded: WhatIfRun

    def to_json(self, *, points: bool = False) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "parameter": self.parameter,
            "values": list(self.values),
            "recorded": self.recorded.to_json(points=points),
            "runs": [r.to_json(points=points) for r in self.runs],
        }

