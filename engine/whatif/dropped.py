"""The recorded run's dropped specifics: the count the before/after view shows, summed."""

from __future__ import annotations

from ..history import HistorySource, read_history


def recorded_dropped(source: HistorySource, key: str) -> int | None:
    """Specifics dropped by every compaction of ``key`` (ours and the source's recorded ones),
    each counted as :func:`engine.history.compaction_diff` counts it (all of them, not the capped
    list): what its event recorded, or what the history computes from the rebuilt surfaces for a
    compaction that recorded none (a source's). Our prunes are left out: what their previews leave
    out stays in the Workdir, and a what-if run counts its summaries' only. None when a summary's
    count cannot be had."""
    th = read_history(source, key)
    total = 0
    for c in th.compactions:
        if c.kind == "prune" and c.record is not None:
            continue
        d = th.diff(c.index).dropped
        if d is None:
            if c.kind == "prune":
                continue
            return None
        total += d.dropped_count or 0
    return total
