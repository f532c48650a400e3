"""The pressure chart's points: every recorded model request with the compaction (if any) that
happened just before it (:meth:`engine.service.Service.compaction.pressure_history` reads the rows)."""

from __future__ import annotations

from typing import Sequence

from ..core.views import CompactionEvent, ModelRequest, PressurePoint

__all__ = ["pressure_points"]


def pressure_points(requests: Sequence[ModelRequest], events: Sequence[CompactionEvent], recorded: Sequence[int],
                    imported_threshold: int | None) -> list[PressurePoint]:
    """One point per request, oldest first: an engine request at its estimate against its own
    threshold; an imported one (``origin="imported"``) at the prompt size its source reported
    against ``imported_threshold`` (None: no window known, no threshold line). ``events``: our
    prune and summary events, in order; ``recorded``: the message ids the source's own compactions
    followed, sorted (``compaction="recorded"`` marks one since the previous imported request)."""
    points: list[PressurePoint] = []
    ei = 0
    ri = 0
    for r in requests:
        kinds: list[str] = []
        while ei < len(events) and events[ei].created_at <= r.created_at:
            e = events[ei]
            kinds.append("overflow" if e.trigger == "overflow" else ("manual" if e.trigger == "manual" else e.kind))
            ei += 1
        if r.origin == "imported" and r.message_id is not None:
            while ri < len(recorded) and recorded[ri] < r.message_id:
                kinds.append("recorded")
                ri += 1
        marker = None
        for k in ("overflow", "manual", "summary", "prune", "recorded"):
            if k in kinds:
                marker = k
                break
        imported = r.origin == "imported"
        points.append(
            PressurePoint(
                request_id=r.id,
                run_id=r.run_id,
                step=r.step,
                tokens=(r.reported_prompt_tokens or 0) if imported else (r.estimated_tokens or 0),
                threshold=imported_threshold if imported else r.threshold,
                compaction=marker,
                created_at=r.created_at,
                origin=r.origin,
                reported_tokens=r.reported_prompt_tokens,
            )
        )
    return points
