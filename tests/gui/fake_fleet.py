"""The fake service's thread list and fleet figures (``FakeService.threads``), a brute-force stand-in
for ``engine.fleet``: the same contract (``page`` / ``count`` / ``stats`` over a ``ThreadQuery``),
keyset cursors that survive concurrent inserts, every call recorded in the service's ``calls``
as ``threads.page`` / ``threads.count`` / ``threads.stats``."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engine.core.views import (
    PRESSURE_BAND_LABELS,
    PRESSURE_BANDS,
    BandCount,
    DailyCompactions,
    DroppedBucket,
    DroppedThread,
    FleetStats,
    ThreadInfo,
    ThreadPage,
    ThreadQuery,
)

if TYPE_CHECKING:
    from tests.gui.fake_service import FakeService


def band(pressure: float | None) -> str:
    if pressure is None:
        return "unknown"
    if pressure < 0.5:
        return "below_50"
    if pressure < 0.85:
        return "50_85"
    return "85_100" if pressure < 1.0 else "over_100"


def _sort_value(info: ThreadInfo, sort: str) -> Any:
    if sort == "activity":
        return info.updated_at.isoformat()
    if sort == "pressure":
        return -1.0 if info.pressure is None else info.pressure
    if sort == "compactions":
        return info.compact_count
    if sort == "messages":
        return info.message_count
    if sort == "title":
        return (info.title or info.key).casefold()
    return info.key


class FakeThreads(dict):
    """The fake's threads by key (a dict, as the tests script them) and ``svc.threads``: filters
    and sorts them in Python."""

    def __init__(self, service: "FakeService") -> None:
        super().__init__()
        self.service = service
        #: threads with a rejected summary / compacted in the last day (scripted by a test)
        self.rejected: set[str] = set()
        self.recent: set[str] = set()
        #: what ``stats`` answers for the dropped specifics and the summarizer (scripted by a test)
        self.dropped: dict[str, tuple[int, int, int]] = {}
        self.summarizer = (0, 0, 0, None)  # calls, prompt tokens, completion tokens, cost
        #: seconds ``stats`` takes (to watch the fleet view's progress)
        self.stats_delay = 0.0

    def infos(self) -> list[ThreadInfo]:
        svc = self.service
        with svc._lock:
            return [replace(t.info, kept_tokens=t.tokens, threshold=t.threshold, window=t.window) for t in self.values()]

    def matching(self, query: ThreadQuery) -> list[ThreadInfo]:
        """The threads ``query`` matches, in its order (ties by id, in the same direction)."""
        out = []
        text = (query.text or "").casefold()
        for i in self.infos():
            if text and not any(text in (v or "").casefold() for v in (i.key, i.title, i.source_format, i.model)):
                continue
            if query.source_format == "live" and i.source_format is not None:
                continue
            if query.source_format not in (None, "live") and i.source_format != query.source_format:
                continue
            f = query.filters
            p = i.pressure
            if "busy" in f and i.busy_reason is None:
                continue
            if "over_threshold" in f and (p is None or p < 1.0):
                continue
            if "over_hint" in f and (p is None or (i.kept_tokens or 0) * 1000 < (i.threshold or 0) * 850):
                continue
            if "rejected_summary" in f and i.key not in self.rejected:
                continue
            if "compacted_last_day" in f and i.key not in self.recent:
                continue
            out.append(i)
        out.sort(key=lambda i: (_sort_value(i, query.sort), i.id), reverse=query.descending)
        return out

    def page(self, query: ThreadQuery, *, after: str | None = None, offset: int = 0, limit: int = 200) -> ThreadPage:
        self.service._record("threads.page", query, after, limit)
        rows = self.matching(query)
        if after is not None:
            mark = tuple(json.loads(after))
            rows = [i for i in rows if ((_sort_value(i, query.sort), i.id) < mark if query.descending else (_sort_value(i, query.sort), i.id) > mark)]
        rows = rows[offset:]
        total = len(self.matching(query))
        shown = tuple(rows[:limit])
        nxt = json.dumps([_sort_value(shown[-1], query.sort), shown[-1].id]) if len(rows) > limit and shown else None
        return ThreadPage(shown, total, nxt)

    def position(self, query: ThreadQuery, key: str) -> int | None:
        self.service._record("threads.position", query, key)
        return next((n for n, i in enumerate(self.matching(query)) if i.key == key), None)

    def count(self, query: ThreadQuery) -> int:
        self.service._record("threads.count", query)
        return len(self.matching(query))

    def stats(self, query: ThreadQuery | None = None) -> FleetStats:
        import time

        self.service._record("threads.stats", query)
        if self.stats_delay:
            time.sleep(self.stats_delay)
        rows = self.matching(query or ThreadQuery())
        counts = {b: 0 for b in PRESSURE_BANDS}
        for i in rows:
            counts[band(i.pressure)] += 1
        per_day: dict[tuple[str, str, str], int] = {}
        svc = self.service
        with svc._lock:
            for i in rows:
                for h in svc.threads[i.key].history:
                    day = h.created_at.date().isoformat()
                    per_day[(day, h.kind, "engine")] = per_day.get((day, h.kind, "engine"), 0) + 1
        worst = sorted(((k, v) for k, v in self.dropped.items() if any(i.key == k for i in rows)), key=lambda kv: -kv[1][0])
        by_key = {i.key: i for i in rows}
        buckets = [("0", 0, 0), ("1–2", 1, 2), ("3–5", 3, 5), ("6–10", 6, 10), ("11+", 11, None)]
        worst_each = [v[2] for _k, v in worst]
        calls, prompt, completion, cost = self.summarizer
        return FleetStats(
            threads=len(rows), busy=sum(1 for i in rows if i.busy_reason), bands=tuple(BandCount(b, PRESSURE_BAND_LABELS[b], counts[b]) for b in PRESSURE_BANDS),
            per_day=tuple(DailyCompactions(d, k, s, n) for (d, k, s), n in sorted(per_day.items())), compactions=sum(per_day.values()),
            dropped_buckets=tuple(DroppedBucket(lbl, lo, hi, sum(1 for w in worst_each if w >= lo and (hi is None or w <= hi))) for lbl, lo, hi in buckets),
            worst_threads=tuple(DroppedThread(by_key[k].id, k, by_key[k].title, d, c, w) for k, (d, c, w) in worst[:10]),
            summarizer_calls=calls, summarizer_prompt_tokens=prompt, summarizer_completion_tokens=completion, summarizer_cost=cost,
            currency="USD" if cost is not None else None,
            tokens_saved=sum((h.tokens_before or 0) - (h.tokens_after or 0) for i in rows for h in svc.threads[i.key].history),
            days=30, until=datetime(2026, 12, 4).date().isoformat(),
        )  # fmt: skip
