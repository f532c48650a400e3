"""The threads facet of the service (``svc.threads``, issue 26): the thread list at any scale and
the fleet view's aggregates, as plain records of :mod:`engine.core.views`.

- :meth:`ThreadsFacet.page` / :meth:`count`: a keyset page of the threads a
  :class:`engine.core.views.ThreadQuery` matches, sorted, searched and filtered by the database
  (:mod:`engine.store.fleet`), with the total ("N of M") and an opaque cursor for the next page.
  The pressure column is the kept tokens stored with each thread (``ThreadInfo.kept_tokens`` /
  ``threshold`` / ``pressure``), never a status per row.
- :meth:`ThreadsFacet.stats`: ``compaction stats`` and the fleet view (:class:`engine.core.views.FleetStats`):
  every aggregate a grouped query of the database; only the summarizer's money is priced here, once
  per summarizer model (``genai-prices``).
- :meth:`ThreadsFacet.remember`: the write-back that keeps the stored figure equal to the status
  (``Service.compaction.status`` calls it with every measurement; compaction, revert and import measure the
  thread after they write). Inside :meth:`ThreadsFacet.deferred` (a bulk import) the write-backs
  are collected and written a batch at a time, one transaction per batch instead of per thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Callable, Sequence

from .core.errors import EngineError
from .core.views import (
    PRESSURE_BAND_LABELS,
    PRESSURE_BANDS,
    BandCount,
    DailyCompactions,
    DroppedBucket,
    DroppedThread,
    FleetStats,
    PressureStatus,
    ThreadPage,
    ThreadQuery,
)
from .history.prices import price_tokens
from .store import FleetReads, Store
from .store.fleet import DROPPED_BUCKETS

if TYPE_CHECKING:
    from .snapshots import ThreadMeasure

__all__ = ["ALL_THREADS", "STATS_DAYS", "ThreadsFacet"]

log = logging.getLogger(__name__)

#: every thread, newest activity first (the default query)
ALL_THREADS = ThreadQuery()
#: the window of ``FleetStats.per_day``: the last 30 UTC days
STATS_DAYS = 30
#: the threads ``FleetStats.worst_threads`` lists
WORST_THREADS = 10
#: :meth:`ThreadsFacet.deferred`: write the collected figures once this many threads wait, or this
#: many seconds after the previous batch (so the list of another process lags a bulk import little)
DEFERRED_BATCH, DEFERRED_SECONDS = 200, 2.0

#: (conversation id, kept, threshold, window, last message id, generation)
Figures = tuple[int, int, int | None, int | None, int | None, int]


class ThreadsFacet:
    """``svc.threads``: the thread list and the fleet aggregates of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads = FleetReads(store)
        #: conversation id -> the figures last stored for it by this process, with the state they
        #: were measured at (the same measurement again writes nothing)
        self._remembered: dict[int, tuple[int, int | None, int | None, int | None, int]] = {}
        #: inside :meth:`deferred`: conversation id -> the figures waiting to be written; else None
        self._pending: dict[int, Figures] | None = None
        self._pending_since = 0.0
        #: inside :meth:`deferred` with ``measure``: where :meth:`remeasure` sends the keys instead
        self._measurer: Callable[[Sequence[str]], None] | None = None
        self._lock = threading.Lock()

    def page(self, query: ThreadQuery = ALL_THREADS, *, after: str | None = None, offset: int = 0, limit: int = 200) -> ThreadPage:
        """One page of the threads ``query`` matches (at most ``limit``), after the cursor of the
        previous page (``ThreadPage.after``; None: the first page). Stable under concurrent
        inserts: ordered by (sort value, thread id), each page resumes strictly after the last
        row shown. ``offset`` skips that many rows first (a jump into the list, e.g. a scroll bar
        dragged to its middle; the pages after it go on by cursor). ``invalid_query`` for an
        unknown sort or filter, a cursor of another order or a negative offset."""
        return self.reads.page(query, after=after, offset=offset, limit=limit)

    def position(self, query: ThreadQuery, key: str) -> int | None:
        """The row of thread ``key`` in the list of ``query`` (0: the first), or None when the query
        does not match it: a count in the database, however far down the thread is."""
        return self.reads.position(query, key)

    def count(self, query: ThreadQuery = ALL_THREADS) -> int:
        """How many threads ``query`` matches."""
        return self.reads.count(query)

    def stats(self, query: ThreadQuery | None = None, *, days: int = STATS_DAYS, worst: int = WORST_THREADS,
              now: datetime | None = None) -> FleetStats:
        """The fleet aggregates over the threads ``query`` matches (None: every thread); compactions
        per day over the last ``days`` UTC days."""
        if days < 1:
            raise EngineError(f"days must be at least 1, not {days}", code="invalid_query")
        now = (now or datetime.now(UTC)).astimezone(UTC)
        start = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
        a = self.reads.aggregates(query or ThreadQuery(), since=start, worst=worst)
        calls = prompt = completion = 0
        money: float | None = None
        priced = True
        for model, extractive, n, p, c in a.summarizers:
            calls, prompt, completion = calls + n, prompt + p, completion + c
            if extractive or (p == 0 and c == 0):
                continue
            value, _why = price_tokens(model, input_tokens=p, output_tokens=c)
            if value is None:
                priced = False
            else:
                money = (money or 0.0) + value
        if money is None and priced:
            money = 0.0 if calls else None
        return FleetStats(
            threads=a.threads,
            busy=a.busy,
            bands=tuple(BandCount(b, PRESSURE_BAND_LABELS[b], a.bands.get(b, 0)) for b in PRESSURE_BANDS),
            per_day=tuple(DailyCompactions(d, k, s, n) for d, k, s, n in a.per_day),
            compactions=a.compactions,
            dropped_buckets=tuple(DroppedBucket(label, low, high, a.dropped_buckets[i]) for i, (label, low, high) in enumerate(DROPPED_BUCKETS)),
            worst_threads=tuple(DroppedThread(cid, key, title, d, n, w) for cid, key, title, d, n, w in a.worst),
            summarizer_calls=calls,
            summarizer_prompt_tokens=prompt,
            summarizer_completion_tokens=completion,
            summarizer_cost=money,
            currency="USD" if money is not None else None,
            tokens_saved=a.tokens_saved,
            days=days,
            until=now.date().isoformat(),
        )

    def remember(self, status: PressureStatus, measure: ThreadMeasure) -> bool:
        """Store ``status``'s figures with the thread (kept tokens, threshold, window) if nothing
        was appended or compacted since ``measure`` was taken. Best effort: a busy or read-only
        database leaves the stored figure for the next measurement."""
        head = measure.head
        figures = (status.tokens, status.threshold or None, status.context_window or None, measure.last_message_id, head.state.generation)
        if self._remembered.get(head.conversation_id) == figures:
            return True  # written (or found) by this process for this very state: no write transaction per poll
        with self._lock:
            if self._pending is not None:  # a bulk import: written with the next batch
                self._pending[head.conversation_id] = (head.conversation_id, *figures)
                due = len(self._pending) >= DEFERRED_BATCH or time.monotonic() - self._pending_since >= DEFERRED_SECONDS
                if due:
                    self._flush_locked()
                return True
        try:
            stored = self.reads.record_pressure(head.conversation_id, kept=figures[0], threshold=figures[1], window=figures[2],
                                                last_message_id=figures[3], generation=figures[4])
        except EngineError as exc:  # the list keeps its older figure; the status itself is unaffected
            log.debug("pressure of %r not stored: %s", status.thread, exc)
            return False
        if stored:
            if len(self._remembered) >= 10_000:
                self._remembered.clear()
            self._remembered[head.conversation_id] = figures
        return stored

    @contextmanager
    def deferred(self, measure: Callable[[Sequence[str]], None] | None = None) -> Iterator[None]:
        """A bulk import's measurements. Within the block :meth:`remember` collects the figures
        instead of writing each at once, and writes them a batch at a time (``DEFERRED_BATCH``
        threads, or ``DEFERRED_SECONDS`` after the last batch) in one transaction, and what is left
        when the block ends, however it ends (an interrupted import included). Each row keeps its
        guard: a thread appended to or compacted since it was measured keeps the newer state.
        ``measure``: :meth:`remeasure` hands it the keys instead of measuring them here (the bulk
        import's measuring process, ``engine.apps.cli.bulk_import``); it must see them measured. Measuring
        each imported thread in line, with a commit of its own, cost a bulk import about 40 %."""
        with self._lock:
            if self._pending is not None:  # nested: the outer block writes
                outer = True
            else:
                outer, self._pending, self._pending_since, self._measurer = False, {}, time.monotonic(), measure
        try:
            yield
        finally:
            if not outer:
                with self._lock:
                    self._measurer = None
                    self._flush_locked(wait=True)
                    self._pending = None

    def _flush_locked(self, *, wait: bool = False) -> None:
        """Write the pending figures (the lock held); those not written stay for the next batch
        when the database was busy. The last batch (``wait``, the end of :meth:`deferred`) waits
        for another writer as any write does; only when that fails too are they given up."""
        pending = self._pending
        self._pending_since = time.monotonic()
        if not pending:
            return
        batch = list(pending.values())
        try:
            stored = self.reads.record_pressures(batch, wait=wait)
        except EngineError as exc:
            log.debug("pressure of %d threads not stored: %s", len(batch), exc)
            stored = None
        if stored is None:
            return  # busy or read-only: tried again with the next batch
        pending.clear()
        if len(self._remembered) + len(batch) >= 10_000:
            self._remembered.clear()
        for figures, ok in zip(batch, stored):
            if ok:
                self._remembered[figures[0]] = figures[1:]

    def remeasure(self, keys: Sequence[str], status: Callable[[str], PressureStatus]) -> None:
        """After a write that changes what a thread keeps (compaction, revert, import): ``status``
        (``Service.compaction.status``, which calls :meth:`remember`) of each thread, so the list's stored
        figure is the status's. Best effort: never raises (the write itself succeeded). Inside
        :meth:`deferred` with ``measure``: handed to it."""
        measurer = self._measurer
        if measurer is not None:
            measurer(list(dict.fromkeys(keys)))
            return
        for key in dict.fromkeys(keys):
            try:
                status(key)
            except EngineError as exc:
                log.debug("thread %r not measured after the write: %s", key, exc)
