# Over 800 lines: the held path (pressure), the streamed path (status), the stream worker and an imported thread's source view share one entry and one tally; the source view (_source_view and its helpers, ~150 lines) could move to a module of its own.
"""Incremental snapshots and measurements per thread: a check costs O(new messages), not O(thread).

A :class:`SnapshotCache` keeps, per thread, what the last read saw: the compaction state, the id of
the newest message read, and per encoding a :class:`Tally` (running per-category token totals of
the surface's history part, every message's count in two flat arrays of 12 bytes a message, and
what :func:`engine.core.surface.build_surface` leaves out: closing markers whose call is behind the
boundary, as :func:`engine.core.units.place_closing_markers`; whether the synthetic user message is
needed). Nothing is trusted from memory: every check reads the database (another process may have
compacted or pruned), in one consistent read transaction (:func:`engine.store.reads.thread_reading`),
then an unchanged state reads only the messages above the last one seen (never changed; ids grow
under the conversation lock), none when the conversation row's newest message id (recorded by the
write door with every append) is the last seen; another state (a prune, a summary) is measured
again. The pressure path first reads the thread's version on a driver connection
(:func:`engine.store.reads.quick_thread_read`: the key row and the newest completed request in one
statement; on a SQLite file a connection of its own, out of the pool, which first asks its
``PRAGMA data_version``: unchanged since the version was read there, no other connection
committed since, and the write door, which runs its transactions on that same connection when it
is free, journals each one there, so the version is known without the statement when this
process wrote nothing since, or only appended the messages it handed over): the same version is
answered with the held snapshot, a version that only grew by messages with them, anything else
with the transaction above. The messages this process's write door committed (``Store.on_appended`` →
:meth:`SnapshotCache.appended`) are handed over with their ids, so when the version grew by
exactly those none is read; a message another writer appended in between makes the count differ
(or moves the data_version) and they are read.

Two kinds of entries. A *held* entry (:meth:`SnapshotCache.snapshot`, the pressure path) keeps the
snapshot's messages and the shown history, since the compactor and the model need them; its
measurement (:meth:`SnapshotCache.measure`) adds only the envelope's fixed parts (system prompt,
summary, tools, synthetic message, ephemeral notes) to the tally. A *streamed* entry
(:meth:`SnapshotCache.thread_measure`, ``status`` and the inspector's panels) never holds messages:
a cold measurement reads the thread in pages of :data:`PAGE` messages, so memory stays bounded by a
page plus the arrays, whatever the length of the thread. The write door keeps every message's
count with its row (``messages.tokens`` under ``TokenMeter.count_key``, migration 0003): a message
counted under this meter's key is read without its text (a :class:`engine.store.reads.CountedRow`)
and adds its kept count, so a cold status reads ids, roles, calls and metadata and encodes
nothing. The other rows (written before 0003, under another encoding, pruned: shown as their
preview) are read whole and counted; when a thread of at least ``worker_min_messages`` messages
has pages of them, a counting worker process (``python -m engine.core.meter``) encodes each page while
the next one is read (tiktoken keeps the GIL on short texts, so threads would not overlap). A
cold measurement of such a thread runs whole in a stream worker process (``python -m
engine.snapshots``, about 70 MB, only for that measurement): the calling process only waits, so
the inspector's GUI thread keeps the GIL, and holds no page.

It only reads (``Store.reading``); nothing here writes to the database.
"""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from contextlib import nullcontext
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from .core.messages import META_EPHEMERAL, META_SYNTHETIC, Envelope, Message, Surface, Tagged, summary_message, system
from .core.meter import CATEGORIES, TOKENS_REPLY_PRIMING, Measurement, TokenMeter, count_key, count_texts, default_meter, join_counts, message_category
from .core.surface import SYNTHETIC_USER_TEXT, build_surface, envelope_of, shown_message, shown_messages
from .core.units import current_request, is_closing_marker, place_closing_markers
from .core.views import SOURCE_NAMES, ModelRequest, Offload, Snapshot, SourceCompaction, SourceView
from .store import Store
from .store.reads import CountedRow, ThreadReader, ThreadVersion, quick_thread_read, thread_reading
from .workers import CountWorker as _CountWorker, read_array as _read_array, start_worker as _start_worker

__all__ = ["PAGE", "SnapshotCache", "SourceView", "Tally", "ThreadMeasure"]

log = logging.getLogger(__name__)

#: messages read and counted at a time by a cold streamed measurement
PAGE = 5000
#: texts sent to the counting worker at a time (a page has about two texts a message)
WORKER_CHUNK = 2000
#: rows the write door handed over (:meth:`SnapshotCache.appended`) kept per thread until a quick check takes them
HANDED = 1000


class Tally:
    """Running token totals of a history part (the persisted messages of a surface) for one encoding.

    Messages are added in id order as shown to the model (a pruned result as its preview). A closing
    marker that answers no call seen before it is left out (its call is behind the boundary), as
    :func:`engine.core.units.place_closing_markers` does; the matching follows
    :func:`engine.core.units._match_calls` (a result answers the newest assistant message's call with
    its id, else the oldest earlier one), keeping only the calls still unanswered."""

    __slots__ = ("meter", "totals", "ids", "counts", "_waiting", "_newest", "first_role", "fixed")

    def __init__(self, meter: TokenMeter | None) -> None:
        #: the meter of the held path (None in a stream worker, which only adds kept counts)
        self.meter = meter
        self.totals: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.ids = array("q")
        self.counts = array("i")  # a message never has 2**31 tokens
        self._waiting: dict[str, deque[int]] = {}
        self._newest = -1
        #: role of the first non-system message the surface keeps (None: none yet)
        self.first_role: str | None = None
        #: (what they depend on, tokens by category) of the envelope's fixed parts (see _measurement)
        self.fixed: tuple[Any, dict[str, int]] | None = None

    def held_meter(self) -> TokenMeter:
        """The meter of the held path (a stream worker's tally has none)."""
        if self.meter is None:
            raise RuntimeError("a stream worker's tally has no meter: it only adds kept counts")
        return self.meter

    def add(self, shown: Sequence[Message | CountedRow], counts: Sequence[int]) -> None:
        waiting = self._waiting
        totals = self.totals
        for m, n in zip(shown, counts):
            role = m.role
            keep = True
            if role == "assistant":
                self._newest = m.id  # type: ignore[assignment]
                for call_id in m.call_ids:
                    waiting.setdefault(call_id, deque()).append(m.id)  # type: ignore[arg-type]
            elif role == "tool":
                key = m.tool_call_id or ""
                queue = waiting.get(key)
                if queue:
                    queue.pop() if queue[-1] == self._newest else queue.popleft()
                    if not queue:
                        del waiting[key]
                elif m.metadata and is_closing_marker(m):
                    keep = False  # its call is not on the surface: left out as an orphan
            self.ids.append(m.id)  # type: ignore[arg-type]
            self.counts.append(n)
            if keep:
                totals[message_category(m)] += n
                if self.first_role is None and role != "system":
                    self.first_role = role

    def copy(self) -> "Tally":
        """A tally of the same messages that changes apart from this one (a measurement may hold this one)."""
        t = Tally(self.meter)
        t.totals, t.ids, t.counts = dict(self.totals), array("q", self.ids), array("i", self.counts)
        t._waiting = {k: deque(q) for k, q in self._waiting.items()}
        t._newest, t.first_role, t.fixed = self._newest, self.first_role, self.fixed
        return t

    def reprice(self, message_id: int, was: Tagged, now: Tagged, count: int) -> bool:
        """Message ``message_id``, added as ``was``, is now shown as ``now`` (a pruned result: its
        preview) of ``count`` tokens; False (nothing changed) when it is not here or may be left
        out of the totals (a closing marker: kept or not by where its call is)."""
        i = bisect_left(self.ids, message_id)
        if i == len(self.ids) or self.ids[i] != message_id or was.role != "tool" or now.role != "tool" or (
                was.metadata and is_closing_marker(was)) or (now.metadata and is_closing_marker(now)):
            return False
        self.totals[message_category(was)] -= self.counts[i]
        self.totals[message_category(now)] += count
        self.counts[i] = count
        return True

    @property
    def history_tokens(self) -> int:
        return sum(self.totals.values())

    def state(self) -> tuple[Any, ...]:
        """What :meth:`load` restores besides the two arrays (a stream worker sends it back, then the
        arrays as their raw bytes): everything but the meter and the fixed parts."""
        return (self.totals, self._waiting, self._newest, self.first_role)

    def load(self, state: tuple[Any, ...], ids: array, counts: array) -> None:
        self.totals, self._waiting, self._newest, self.first_role = state
        self.ids, self.counts = ids, counts
        self.fixed = None

    def tokens_after(self, message_id: int, upto: int | None = None) -> int:
        """Tokens of the messages with an id above ``message_id`` (as counted, markers included),
        among the first ``upto`` messages added (all when None)."""
        end = len(self.ids) if upto is None else upto
        i = bisect_right(self.ids, message_id, 0, end)
        return sum(self.counts[i:end])


@dataclass(frozen=True)
class ThreadMeasure:
    """A thread's head (its snapshot without messages) and the measurement of its envelope."""

    head: Snapshot
    measurement: Measurement
    meter: TokenMeter
    tally: Tally
    #: how many messages the tally had counted for this measurement (it may grow afterwards)
    counted: int
    #: the thread's newest completed model request (``Store.last_completed_request``), read in
    #: the same transaction as the head
    last_request: ModelRequest | None = None
    #: an imported thread: its source's view (:class:`SourceView`), read in the same transaction;
    #: None for a thread written live
    source: SourceView | None = None
    #: the thread's last message id when measured (``conversations.last_message_id``): the guard
    #: of the pressure write-back (a later append wins)
    last_message_id: int | None = None

    @property
    def tokens(self) -> int:
        return self.measurement.total

    def tokens_after(self, message_id: int) -> int:
        """Tokens of this measurement's messages with an id above ``message_id``."""
        return self.tally.tokens_after(message_id, self.counted)


class _Entry:
    __slots__ = ("head", "last_id", "tallies", "snapshot", "shown", "messages", "row", "measured", "source", "version", "routed")

    def __init__(self, head: Snapshot) -> None:
        self.head = head  # messages=(): state, configuration, offloads, current request
        #: the key row (``ThreadReader.row``) ``snapshot`` / ``measured`` were made from: when the
        #: next read gives an equal row (and busy reason), nothing changed and they are returned as is
        self.row: Any = None
        self.measured: ThreadMeasure | None = None
        self.last_id: int | None = head.state.boundary
        self.tallies: dict[str, Tally] = {}
        self.snapshot: Snapshot | None = None  # held entries only
        self.shown: list[Message] | None = None  # held: the shown history, closing markers placed
        self.messages: tuple[Message, ...] | None = None  # held: the stored messages after the boundary
        #: (what it depends on, the source view) of an imported thread (see :func:`_source_view`)
        self.source: tuple[Any, SourceView] | None = None
        #: held: the database's version ``snapshot`` is of, and the route (newest completed request)
        self.version: ThreadVersion | None = None
        self.routed: ModelRequest | None = None

    @property
    def held(self) -> bool:
        return self.messages is not None


def _kept_across(entry: _Entry, head: Snapshot) -> bool:
    """Whether a held entry's messages still hold every message after ``head``'s boundary that was
    there when it was read: the same conversation and a boundary that did not move back (a revert
    moves it back: the messages before the old boundary were never held)."""
    return _kept_for(entry, head.conversation_id, head.state.boundary)


def _kept_for(entry: _Entry, conversation_id: int, boundary: int | None) -> bool:
    old = entry.head.state.boundary
    return (entry.head.conversation_id == conversation_id and entry.messages is not None
            and (boundary == old or (boundary is not None and (old is None or boundary > old))))


def _same_key(entry: _Entry, head: Snapshot) -> bool:
    return entry.head.conversation_id == head.conversation_id and entry.head.state == head.state


class SnapshotCache:
    """Incremental snapshots and measurements of the threads of one store (thread-safe)."""

    def __init__(self, store: Store, *, max_held: int = 8, max_streamed: int = 64, page: int = PAGE,
                 worker: bool = True, worker_min_messages: int = 50_000) -> None:
        self.store = store
        self.page = page
        #: a worker process encodes a cold streamed measurement of a thread of at least
        #: ``worker_min_messages`` messages (False: count in this process)
        self.worker = worker
        self.worker_min_messages = worker_min_messages
        self.max_held = max_held
        self.max_streamed = max_streamed
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._thread_locks: dict[str, threading.Lock] = {}
        #: per held thread, (id, column values) of the messages this process's write door committed
        #: since its last check (:meth:`appended`): the next quick check takes them instead of
        #: reading them, when the database's version says they are all that was appended
        self._handed: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
        listen = getattr(store, "on_appended", None)  # the door's hook (notes/E-patches until it lands)
        if listen is not None:
            listen(self.appended)

    # -- bookkeeping ----------------------------------------------------------------------
    def _key_lock(self, thread: str) -> threading.Lock:
        with self._lock:
            lock = self._thread_locks.get(thread)
            if lock is None:
                lock = self._thread_locks[thread] = threading.Lock()
            return lock

    def _get(self, thread: str) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(thread)
            if entry is not None:
                self._entries.move_to_end(thread)
            return entry

    def _put(self, thread: str, entry: _Entry) -> None:
        with self._lock:
            self._entries[thread] = entry
            self._entries.move_to_end(thread)
            for held, limit in ((True, self.max_held), (False, self.max_streamed)):
                keys = [k for k, e in self._entries.items() if e.held == held]
                for k in keys[: max(0, len(keys) - limit)]:
                    del self._entries[k]

    def invalidate(self, thread: str | None = None) -> None:
        """Forget one thread's entry (or all). Never needed for correctness (the key is read from
        the database on every call); it frees memory."""
        with self._lock:
            if thread is None:
                self._entries.clear()
                self._handed.clear()
            else:
                self._entries.pop(thread, None)
                self._handed.pop(thread, None)

    def appended(self, thread: str, rows: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
        """The write door committed ``rows`` ((id, column values), ``Store.on_appended``) to
        ``thread`` in this process: kept for the thread's next quick check when it has a held entry
        (at most a page). Trusted only as far as the database's version agrees (:func:`_quick`)."""
        with self._lock:
            entry = self._entries.get(thread)
            if entry is None or not entry.held:
                return
            kept = self._handed.setdefault(thread, [])
            if len(kept) + len(rows) > HANDED:  # no quick check took them (the step's own read did): start again
                kept.clear()
            kept.extend(rows)

    def _take_handed(self, thread: str, after: int | None) -> list[tuple[int, Mapping[str, Any]]]:
        """The rows :meth:`appended` kept for ``thread`` with an id above ``after``, in id order
        (two writers' hooks may run in either order); they are forgotten here."""
        with self._lock:
            handed = self._handed.pop(thread, None)
        if not handed:
            return []
        handed = [r for r in handed if after is None or r[0] > after]
        if len(handed) > 1:
            handed.sort(key=lambda r: r[0])
        return handed

    # -- reading --------------------------------------------------------------------------
    def _read_head(self, reader: ThreadReader, entry: _Entry | None, *, with_busy: bool, rebase: bool = False) -> tuple[Snapshot, bool]:
        """(head, still valid): the head with the entry's offloads and request when its key holds.
        ``rebase``: a held entry the new state keeps (:func:`_kept_across`: the caller rebases it)
        gives its request too: messages are only ever appended, so the current request is the
        entry's unless one of those appended since is a newer one (:meth:`_rebased_held` looks)."""
        state = reader.state()
        if entry is not None and entry.head.conversation_id == reader.conversation_id and entry.head.state == state:
            return reader.head(with_busy=with_busy, offloads=entry.head.offloads, current=(entry.head.current_request,)), True
        if rebase and entry is not None and entry.held and _kept_for(entry, reader.conversation_id, state.boundary):
            return reader.head(with_busy=with_busy, current=(entry.head.current_request,)), False
        return reader.head(with_busy=with_busy), False

    def _new_messages(self, reader: ThreadReader, after: int | None) -> Iterable[list[Message]]:
        while True:
            page = reader.messages_after(after, limit=self.page)
            if not page:
                return
            yield page
            if len(page) < self.page:
                return
            after = page[-1].id

    # -- held snapshots (the pressure path) ---------------------------------------------------
    def snapshot(self, thread: str, *, with_busy: bool = False) -> Snapshot:
        """The thread's snapshot, equal to ``Store.snapshot(thread, with_busy=with_busy)``, read
        incrementally: the key and the messages appended since the last call, in one read
        transaction. Its measurement through :meth:`measure` costs O(new messages)."""
        return self._held(thread, with_busy=with_busy, with_route=False)[0]

    def pressure_read(self, thread: str, *, reader: ThreadReader | None = None) -> tuple[Snapshot, ModelRequest | None]:
        """What the pressure check reads before a model step, in one read transaction:
        :meth:`snapshot` (no busy check) and the newest completed model request
        (``Store.last_completed_request``). ``reader``: read in that transaction instead (the
        write door's, ``Locked.thread_reader``: the step's one transaction); if it rolls back, the
        caller invalidates this thread's entry."""
        return self._held(thread, with_busy=False, with_route=True, reader=reader)

    def _held(self, thread: str, *, with_busy: bool, with_route: bool, reader: ThreadReader | None = None) -> tuple[Snapshot, ModelRequest | None]:
        with self._key_lock(thread):
            entry = self._get(thread)
            if (reader is None and not with_busy and entry is not None and entry.held and entry.version is not None
                    and entry.snapshot is not None and entry.snapshot.busy_reason is None):
                quick = self._quick(thread, entry)  # (_get moved the entry to the end already)
                if quick is not None:
                    return quick, entry.routed if with_route else None
            with (nullcontext(reader) if reader is not None else thread_reading(self.store, thread)) as reader:
                version = reader.version()  # the key and the newest completed request, in this read
                routed = version.last_completed_request() if version is not None else None
                if entry is not None and entry.held and entry.snapshot is not None and reader.row == entry.row and _nothing_new(reader, entry):
                    # the same key row: no configuration, state or message changed since the last read
                    busy = reader.busy_reason() if with_busy else None
                    if busy == entry.snapshot.busy_reason:
                        entry.version, entry.routed = version, routed
                        self._put(thread, entry)
                        return entry.snapshot, routed if with_route else None
                head, valid = self._read_head(reader, entry, with_busy=with_busy, rebase=True)
                if entry is not None and entry.held and not valid and _kept_across(entry, head):
                    entry = self._rebased_held(reader, entry, head)
                    head = entry.head
                elif not valid or entry is None or not entry.held:
                    entry = self._cold_held(reader, head)
                else:
                    self._extend_held(reader, entry, head)
                    if entry.head.current_request is not head.current_request:
                        head = replace(head, current_request=entry.head.current_request)
                entry.row = reader.row
                entry.version, entry.routed = version, routed
            snap = replace(head, messages=entry.messages)  # type: ignore[arg-type]
            entry.head = head
            entry.snapshot = snap
            entry.measured = None
            self._put(thread, entry)
            return snap, routed if with_route else None

    def _quick(self, thread: str, entry: _Entry) -> Snapshot | None:
        """The held snapshot after :func:`engine.store.reads.quick_thread_read`: the entry's own for
        the same version, extended when only messages were appended (a request among them is the
        current request); None for anything else (the caller reads in one transaction)."""
        known = entry.version
        assert known is not None and entry.snapshot is not None
        handed = self._take_handed(thread, entry.last_id)
        try:
            version, new = quick_thread_read(self.store, thread, known, entry.last_id, self.page, handed)
        except Exception:  # noqa: BLE001 - the full read comes next and says what the database failure is
            log.debug("quick read of %r failed; reading it whole", thread, exc_info=True)
            return None
        if version is known:  # nothing changed (the same data_version, or the same values read)
            return entry.snapshot
        if version is not None and version.values == known.values:
            entry.version = version  # read on the quick connection: its data_version
            return entry.snapshot
        if version is None or not new or new[-1].id != version.last_message_id:
            return None
        # a user message among them: the newest request of them is the thread's current request
        # now (what the full read's last_user_message finds first: they are the newest messages);
        # none of them a request, the held one stays (as the full read's _extend_held keeps it)
        request = current_request(new) if any(m.role == "user" for m in new) else None
        # the door's kept counts (messages.tokens under tokens_key) of the rows it handed over, when
        # the new messages are those rows: the tallies take them instead of counting the messages
        kept = [(r["tokens"], r["tokens_key"]) for _, r in handed] if len(handed) == len(new) and all(
            m.id == i for m, (i, _) in zip(new, handed)) else None
        self._append_held(entry, new, kept)
        entry.version = version
        entry.measured = None
        entry.snapshot = _with_messages(entry.snapshot, entry.messages)  # type: ignore[arg-type]
        if request is not None:
            entry.head = replace(entry.head, current_request=request)
            entry.snapshot = replace(entry.snapshot, current_request=request)
        return entry.snapshot

    def _cold_held(self, reader: ThreadReader, head: Snapshot) -> _Entry:
        entry = _Entry(head)
        messages = reader.messages_after(head.state.boundary)
        entry.messages = tuple(messages)
        entry.shown = place_closing_markers(shown_messages(messages, head.offloads))
        entry.last_id = messages[-1].id if messages else head.state.boundary
        return entry

    def _rebased_held(self, reader: ThreadReader, old: _Entry, head: Snapshot) -> _Entry:
        """A held entry for a new compaction state whose boundary is the old one or later (a prune,
        a summary): the messages after the new boundary are those the old entry holds after it
        (messages never change once written) and the ones appended since; only those are read
        (a user request among them is the current request now). The shown history is rebuilt with the new offloads; the tallies are carried over when only
        results were pruned (:meth:`_repriced`), else counted again (from the meter's per-message
        cache) at the next measurement."""
        assert old.messages is not None
        boundary = head.state.boundary
        kept = old.messages if boundary is None else tuple(m for m in old.messages if m.id is not None and m.id > boundary)
        new: list[Message] = []
        for page in self._new_messages(reader, old.last_id):
            new.extend(page)
        # a user message among them: the newest request of them is the current request (as in
        # _quick); none, the head's stays (the old entry's: see _read_head)
        request = current_request(new) if any(m.role == "user" for m in new) else None
        entry = _Entry(head if request is None else replace(head, current_request=request))
        entry.messages = kept + tuple(new)
        entry.shown = place_closing_markers(shown_messages(entry.messages, head.offloads))
        entry.last_id = entry.messages[-1].id if entry.messages else boundary
        if old.tallies and boundary == old.head.state.boundary:
            entry.tallies = self._repriced(old, entry, new)
        return entry

    @staticmethod
    def _repriced(old: _Entry, entry: _Entry, new: list[Message]) -> dict[str, Tally]:
        """The tallies of ``old`` for ``entry``, its rebase at the same boundary (a prune: the same
        messages, some results now shown as their previews, plus ``new``, read after them): each
        :func:`_with_pruned`, then ``new`` added. Empty (count again) when one cannot be."""
        assert old.messages is not None
        after = entry.head.offloads
        shown_new = shown_messages(new, after) if after else new
        tallies: dict[str, Tally] = {}
        for name, tally in old.tallies.items():
            t = _with_pruned(tally, old.messages, old.head.offloads, after)
            if t is None:
                return {}
            if shown_new:
                t.add(shown_new, tally.held_meter().count_messages(shown_new))
            tallies[name] = t
        return tallies

    def _extend_held(self, reader: ThreadReader, entry: _Entry, head: Snapshot) -> None:
        if _nothing_new(reader, entry):
            return
        new: list[Message] = []
        for page in self._new_messages(reader, entry.last_id):
            new.extend(page)
        if not new:
            return
        if any(m.role == "user" for m in new):  # the current request may have changed
            entry.head = replace(entry.head, current_request=reader.last_user_message())
        self._append_held(entry, new)

    @staticmethod
    def _append_held(entry: _Entry, new: list[Message], kept: Sequence[tuple[Any, Any]] | None = None) -> None:
        """Add ``new`` (read in id order after ``entry.last_id``) to a held entry and its tallies.
        ``kept``: per new message, the (count, count key) the write door stored with it (a count
        under a tally's ``TokenMeter.count_key`` is that meter's count of the message, see
        ``store.door.with_counts``); a message shown otherwise (pruned) or without one is counted."""
        assert entry.messages is not None and entry.shown is not None
        entry.messages = entry.messages + tuple(new)
        offloads = entry.head.offloads
        shown_new = shown_messages(new, offloads) if offloads else new  # no pruned result: each shown as it is
        for m in new:
            if m.role == "tool" and m.metadata and is_closing_marker(m):
                entry.shown = place_closing_markers(shown_messages(entry.messages, entry.head.offloads))
                break
        else:  # placement of the earlier markers cannot change (see place_closing_markers)
            entry.shown.extend(shown_new)
        entry.last_id = new[-1].id
        for tally in entry.tallies.values():
            meter = tally.held_meter()
            if kept is not None:
                key = meter.count_key
                counts = [n if k == key and n is not None and s is m else None for (n, k), s, m in zip(kept, shown_new, new)]
                if None not in counts:
                    tally.add(shown_new, counts)  # type: ignore[arg-type]  # no None left
                    continue
            tally.add(shown_new, meter.count_messages(shown_new))

    def measure(self, snapshot: Snapshot, meter: TokenMeter, *, ephemeral: Sequence[Message] = ()) -> tuple[Surface, Envelope, Measurement]:
        """(surface, envelope, measurement) of ``snapshot``, equal to ``build_surface`` →
        ``envelope_of`` → ``meter.measure``. For the latest snapshot this cache returned for its
        thread, the history part comes from the running tally (O(new messages)); any other
        snapshot is measured in full."""
        entry = self._get(snapshot.thread)
        if entry is None or entry.snapshot is not snapshot or entry.shown is None or snapshot.pinned:  # pinned behind the boundary: whole
            surface = build_surface(snapshot, ephemeral=ephemeral)
            env = envelope_of(snapshot, surface)
            pruned = self._pruned_measurement(entry, snapshot, meter, ephemeral) if entry is not None else None
            return surface, env, pruned if pruned is not None else meter.measure(env)
        with self._key_lock(snapshot.thread):
            if entry.snapshot is not snapshot:  # extended meanwhile: measure this one in full
                surface = build_surface(snapshot, ephemeral=ephemeral)
                env = envelope_of(snapshot, surface)
                return surface, env, meter.measure(env)
            tally = entry.tallies.get(meter.encoding_name)
            if tally is None:
                tally = entry.tallies[meter.encoding_name] = Tally(meter)
                ordered = shown_messages(entry.messages or (), snapshot.offloads)
                tally.add(ordered, meter.count_messages(ordered))
            shown = list(entry.shown)
            if tally.first_role is not None and tally.first_role != "user":
                shown.insert(0, _synthetic())
            notes = [e if e.is_ephemeral else e.with_content(e.content, **{META_EPHEMERAL: True}) for e in ephemeral]
            shown.extend(notes)
            measurement = _measurement(snapshot, tally, meter, notes)  # under the lock: the tally is this snapshot's
        surface = Surface(messages=tuple(shown), summary=snapshot.state.summary, boundary=snapshot.state.boundary, generation=snapshot.state.generation)
        return surface, envelope_of(snapshot, surface), measurement

    def _pruned_measurement(self, entry: _Entry, snapshot: Snapshot, meter: TokenMeter, ephemeral: Sequence[Message]) -> Measurement | None:
        """The measurement of ``snapshot`` when it is the entry's latest snapshot with more results
        pruned (what a prune measures before writing them: the same messages, more offloads): the
        latest tally :func:`_with_pruned`, plus the envelope's fixed parts and the notes, as for
        the latest snapshot. None for any other (measured whole)."""
        with self._key_lock(snapshot.thread):
            latest = entry.snapshot
            tally = entry.tallies.get(meter.encoding_name)
            if (latest is None or tally is None or snapshot.messages is not latest.messages or snapshot.pinned or latest.pinned
                    or snapshot.state.boundary != latest.state.boundary):
                return None
            pruned = _with_pruned(tally, latest.messages, latest.offloads, snapshot.offloads)
        if pruned is None:
            return None
        notes = [e if e.is_ephemeral else e.with_content(e.content, **{META_EPHEMERAL: True}) for e in ephemeral]
        return _measurement(snapshot, pruned, meter, notes)

    # -- streamed measurements (status, the inspector) ----------------------------------------
    def thread_measure(self, thread: str, *, with_busy: bool = True, progress: Callable[[int], None] | None = None) -> ThreadMeasure:
        """The thread's head and the measurement of its envelope (no ephemeral notes), for the
        thread's own model. Warm: the key and the new messages. Cold: the thread is read in pages
        and no message is kept (bounded memory); ``progress(messages_counted)`` is called after
        each page."""
        with self._key_lock(thread):
            entry = self._get(thread)
            with thread_reading(self.store, thread) as reader:
                last_request = reader.last_completed_request()
                if entry is not None and entry.measured is not None and reader.row == entry.row and _nothing_new(reader, entry):
                    # the same key row: no configuration, state or message changed since the last read
                    if (reader.busy_reason() if with_busy else None) == entry.measured.head.busy_reason:
                        self._put(thread, entry)
                        measured = replace(entry.measured, last_request=last_request)
                        return replace(measured, source=self._source(reader, entry, measured))
                head, valid = self._read_head(reader, entry, with_busy=with_busy)
                meter = default_meter(head.model)
                if valid and entry is not None and entry.held:
                    self._extend_held(reader, entry, head)
                    head = replace(head, current_request=entry.head.current_request)
                    tally = entry.tallies.get(meter.encoding_name)
                    if tally is None:
                        tally = entry.tallies[meter.encoding_name] = Tally(meter)
                        ordered = shown_messages(entry.messages or (), head.offloads)
                        tally.add(ordered, meter.count_messages(ordered))
                    entry.snapshot = replace(head, messages=entry.messages)  # type: ignore[arg-type]
                    entry.version = None  # not read here: the next pressure read reads the thread whole
                else:
                    if not valid or entry is None or meter.encoding_name not in entry.tallies:
                        entry = _Entry(replace(head, messages=()))
                        entry.tallies[meter.encoding_name] = Tally(meter)
                    tally = entry.tallies[meter.encoding_name]
                    self._stream(reader, entry, head, tally, meter, progress)
                    head = replace(head, current_request=entry.head.current_request)
                entry.head = replace(head, messages=())
                entry.row = reader.row
                measured = entry.measured = ThreadMeasure(head=entry.head, measurement=_measurement(head, tally, meter, ()), meter=meter,
                                                          tally=tally, counted=len(tally.ids), last_request=last_request,
                                                          last_message_id=reader.last_message_id())
                source = self._source(reader, entry, measured)
            self._put(thread, entry)
            return replace(measured, source=source) if source is not None else measured

    def _source(self, reader: ThreadReader, entry: _Entry, measured: ThreadMeasure) -> SourceView | None:
        """The source's view of an imported thread (None for a live one), kept with the entry
        while nothing it depends on changed (the key row, the source's compactions, the last
        request)."""
        head = measured.head
        if head.source_format is None:
            return None
        compactions = reader.source_compactions()
        last = measured.last_request
        key = (reader.row, tuple(c.id for c in compactions), last.id if last is not None else None, measured.counted)
        if entry.source is not None and entry.source[0] == key:
            return entry.source[1]
        view = _source_view(reader, measured, compactions)
        entry.source = (key, view)
        return view

    def _stream(self, reader: ThreadReader, entry: _Entry, head: Snapshot, tally: Tally, meter: TokenMeter,
                progress: Callable[[int], None] | None) -> None:
        """Count the messages after ``entry.last_id`` into ``tally`` (:func:`_stream_counts`). A cold
        measurement of a thread of at least ``worker_min_messages`` messages runs in a stream
        worker process (:class:`_StreamWorker`): this process then only waits (the GIL stays free
        for the inspector's GUI thread) and holds no page; if the worker cannot run or finish, the
        thread is streamed here."""
        if _nothing_new(reader, entry):
            return
        upto = reader.last_message_id()
        done: tuple[tuple[Any, array, array], int | None, bool] | None = None
        if not tally.ids and self.worker and upto is not None and reader.message_count() >= self.worker_min_messages and _shareable(self.store):
            job = {"url": self.store.url.render_as_string(hide_password=False), "key": reader.thread_key, "cid": reader.conversation_id,
                   "state": head.state, "model": head.model, "after": entry.last_id, "upto": upto, "page": self.page,
                   "worker_min_messages": self.worker_min_messages}
            try:
                done = _StreamWorker().run(job, progress)
            except Exception:  # noqa: BLE001 - measured here instead (a data error is raised again there)
                log.warning("the stream worker did not finish; measuring in this process", exc_info=True)
        if done is not None:
            (state, ids, counts), entry.last_id, saw_user = done
            tally.load(state, ids, counts)
        else:
            entry.last_id, saw_user, self.worker = _stream_counts(
                reader, tally, lambda: meter, meter.count_key, head.offloads, entry.last_id, upto, self.page,
                worker=self.worker, worker_min_messages=self.worker_min_messages, progress=progress)
        if saw_user:
            entry.head = replace(entry.head, current_request=reader.last_user_message())


def _replaced(compactions: Sequence[SourceCompaction]) -> list[tuple[int, int]]:
    """The id ranges (first, last) the source's summary compactions replaced, merged, in order."""
    spans = sorted((c.replaced_first_id, c.replaced_last_id) for c in compactions
                   if c.kind == "summary" and not c.details.get("failed") and c.replaced_first_id is not None
                   and c.replaced_last_id is not None)
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _kept_message(item: Mapping[str, Any]) -> Message | None:
    """One item of what a source put back after a compaction (Codex ``replacement_history``) as a
    message to count; None for an item without text."""
    text = item.get("text") if isinstance(item.get("text"), str) else ""
    if not text:
        return None
    role = item.get("role") if item.get("role") in ("system", "developer", "user", "assistant") else "user"
    return Message(role, text, id=0)  # type: ignore[arg-type]  # before every stored message (a tally adds in id order)


def _source_view(reader: ThreadReader, measured: ThreadMeasure, compactions: Sequence[SourceCompaction]) -> SourceView:
    """:class:`SourceView` of an imported thread (module docstring of :class:`SourceView`).

    Reads only what the source's envelope holds after its last compaction (our meter's kept counts,
    no text for a counted row); the whole-history tally is reused when the source never
    compacted."""
    head, tally, meter = measured.head, measured.tally, measured.meter
    name = SOURCE_NAMES.get(head.source_format or "", head.source_format or "the source")
    # a failed compaction (an Anthropic block with no content) replaced nothing: the API ignores it
    summaries = [c for c in compactions if c.kind == "summary" and not c.details.get("failed")]
    last_c = max(summaries, key=lambda c: (c.after_message_id or 0, c.id)) if summaries else None
    last = measured.last_request
    recorded = last.reported_prompt_tokens if last is not None and last.origin == "imported" and last.reported_prompt_tokens else None
    after_c = (last_c.after_message_id or 0) if last_c is not None else None
    usage = _recorded_usage(reader.source_meta(), name)
    if head.state.generation:  # our engine compacted the thread: its surface is what goes out next
        return SourceView(measured.tokens, dict(measured.measurement.breakdown), f"our engine compacted this thread after it was imported from {name}",
                          False, len(compactions), recorded, usage)
    if last_c is None:
        breakdown, rebuilt = dict(measured.measurement.breakdown), measured.tokens
        how = f"no compaction recorded by {name}: the whole history"
    else:
        part = Tally(meter)
        kept = [m for m in (_kept_message(k) for k in last_c.kept) if m is not None]
        if kept:
            part.add(kept, meter.count_messages(kept))
        holes = _replaced(compactions)
        ranges: list[tuple[int | None, int | None]] = []  # (after, upto] id spans the envelope holds
        low: int | None = None
        for lo, hi in holes:
            if lo > after_c:  # type: ignore[operator]
                break
            ranges.append((low, min(lo - 1, after_c)))  # type: ignore[type-var]
            low = hi
        ranges.append((low, None))
        for start, upto in ranges:
            if upto is not None and start is not None and upto <= start:
                continue
            _count_span(reader, part, meter, start, upto)
        with_summary = replace(head, state=replace(head.state, summary=last_c.summary or None))
        m = _measurement(with_summary, part, meter, ())
        breakdown, rebuilt = dict(m.breakdown), m.total
        n = len(summaries)
        what = "its summary" if last_c.summary else "its summary (kept encrypted by the source: not counted)"
        how = f"after the last compaction {name} recorded (#{n}): {what}" + (", what it kept" if kept else "") + " and the messages since"
    if recorded is not None and last is not None and (after_c is None or (last.message_id or 0) > after_c):
        since = tally.tokens_after(last.message_id, measured.counted) if last.message_id is not None else 0
        tokens = recorded + (last.reported_completion_tokens or 0) + since
        detail = (f"the last request {name} recorded ({recorded:,} prompt + {last.reported_completion_tokens or 0:,} completion tokens) "
                  f"+ {since:,} since, our count; {how}: {rebuilt:,} by our count")
        return SourceView(tokens, breakdown, detail, True, len(compactions), recorded, usage)
    return SourceView(rebuilt, breakdown, f"{how}, as our meter counts it", False, len(compactions), recorded, usage)


def _recorded_usage(meta: Mapping[str, Any], name: str) -> str | None:
    """What the source recorded of its usage for the whole session, in words (SWE-agent
    ``info.model_stats``: cumulative over its calls, not one request's prompt), else None."""
    extra = meta.get("extra")
    extra = extra if isinstance(extra, dict) else {}
    stats = extra.get("model_stats")
    stats = stats if isinstance(stats, dict) else {}
    sent, calls = stats.get("tokens_sent"), stats.get("api_calls")
    if not isinstance(sent, int) or isinstance(sent, bool) or sent <= 0:
        return None
    over = f" over {calls:,} calls" if isinstance(calls, int) and not isinstance(calls, bool) and calls > 0 else ""
    received = stats.get("tokens_received")
    back = f", {received:,} received" if isinstance(received, int) and not isinstance(received, bool) else ""
    return f"{name} recorded {sent:,} tokens sent{over}{back} in all (summed over the session, not one request's prompt)"


def _count_span(reader: ThreadReader, tally: Tally, meter: TokenMeter, after: int | None, upto: int | None) -> None:
    """Add the messages with an id in (``after``, ``upto``] (all after ``after`` when ``upto`` is
    None) to ``tally``: the kept counts, a message without one counted with ``meter``."""
    while True:
        rows = reader.counted_messages_after(after, key=meter.count_key, limit=PAGE)
        if not rows:
            return
        inside = [(m, n) for m, n in rows if upto is None or m.id <= upto]  # type: ignore[operator]
        if inside:
            todo = [m for m, n in inside if n is None]
            counted = iter(meter.count_messages(todo)) if todo else iter(())  # type: ignore[arg-type]
            tally.add([m for m, _ in inside], [n if n is not None else next(counted) for _, n in inside])
        if len(rows) < PAGE or len(inside) < len(rows):
            return
        after = rows[-1][0].id


def _shareable(store: Store) -> bool:
    """Whether another process can open ``store``'s database (not an in-memory SQLite one)."""
    url = store.url
    return not store.is_sqlite or (url.database not in (None, "", ":memory:") and "mode=memory" not in str(url))


def _stream_counts(reader: ThreadReader, tally: Tally, meter_of: Callable[[], TokenMeter], key: str, offloads: Mapping[int, Offload],
                   after: int | None, upto: int | None, page: int, *, worker: bool, worker_min_messages: int,
                   progress: Callable[[int], None] | None) -> tuple[int | None, bool, bool]:
    """Count the messages with an id in (``after``, ``upto``] (all after ``after`` when ``upto`` is
    None) into ``tally``, a page at a time; returns (the last id read, whether a user message was
    among them, whether a counting worker may still be started).

    A message the write door counted under ``key`` comes with its count and without its text
    (nothing to read or encode); the others (rows written before counts were kept, under another
    encoding, or pruned: shown as their preview) are counted with ``meter_of()`` (called only
    then), by a counting worker process when a huge thread has pages of them."""
    saw_user = False
    counted = 0
    pool: _CountWorker | None = None
    #: pages in id order: (shown, counts with None where still to count, which, fixed, per, worker chunks, local text counts)
    waiting: deque[tuple[list[Any], list[int | None], list[int], list[int], list[int], int, list[int] | None]] = deque()

    def settle(item: tuple[list[Any], list[int | None], list[int], list[int], list[int], int, list[int] | None]) -> None:
        nonlocal counted
        shown, counts, todo, fixed, per, chunks, local = item
        if todo:
            if local is None:
                assert pool is not None
                local = [n for _ in range(chunks) for n in pool.result()]
            for i, n in zip(todo, join_counts(fixed, per, local)):
                counts[i] = n
        tally.add(shown, counts)  # type: ignore[arg-type]  # every None was filled above
        counted += len(shown)
        if progress is not None:
            progress(counted)

    try:
        while upto is None or after is None or after < upto:
            rows = reader.counted_messages_after(after, key=key, limit=page)
            full = len(rows) == page
            if upto is not None:
                rows = [r for r in rows if r[0].id <= upto]  # type: ignore[operator]  # what was appended since is not ours
            if not rows:
                break
            messages = [m for m, _ in rows]
            counts = [n for _, n in rows]
            shown = shown_messages(messages, offloads)  # type: ignore[arg-type]  # a CountedRow is never pruned: itself
            saw_user = saw_user or any(m.role == "user" for m in messages)
            after = messages[-1].id
            todo = [i for i, n in enumerate(counts) if n is None]  # no kept count (a pruned row never has one here)
            meter = meter_of() if todo else None
            fixed, texts, per = meter.split_messages([shown[i] for i in todo]) if meter is not None else ([], [], [])
            if pool is None and worker and len(todo) >= page // 2 and reader.message_count() >= worker_min_messages:
                try:
                    pool = _CountWorker()
                except OSError:  # no interpreter to start (embedded): count here
                    worker = False
            chunks = 0
            local: list[int] | None = None
            if todo and pool is not None:
                # the worker encodes this page while this thread reads and frames the next one; it
                # gets the texts in chunks, so it holds one chunk at a time (its memory stays small)
                assert meter is not None
                for i in range(0, len(texts), WORKER_CHUNK):
                    pool.submit(meter.encoding_name, texts[i : i + WORKER_CHUNK])
                    chunks += 1
            elif todo:
                assert meter is not None
                local = count_texts(meter.encoding_name, texts)
            waiting.append((shown, counts, todo, fixed, per, chunks, local))
            while waiting and (len(waiting) > 1 or not waiting[0][5]):
                settle(waiting.popleft())
            if not full:
                break
        while waiting:
            settle(waiting.popleft())
    finally:
        if pool is not None:
            pool.close()
    return after, saw_user, worker


class _StreamWorker:
    """A cold streamed measurement in another process (``python -m engine.snapshots``): it opens
    the database itself, checks that the thread still has the state the caller read (else it says
    so and the caller streams the thread itself), streams the messages up to the newest id the
    caller saw (:func:`_stream_counts`: messages never change and their ids grow, so it reads
    exactly the caller's messages) and sends back progress and the tally's state. It loads a
    tokenizer only for rows without a kept count. The job goes over stdin (a URL may hold a
    password); messages come back as pickles: ``("progress", n)``, then ``("done", state, last
    id, saw user, n)`` followed by the tally's two arrays as raw bytes (``n`` items each),
    ``("stale",)`` or ``("error", text)``. It opens the database with ``Store.attach`` (no schema
    check: the caller did it), so it never loads the migration code."""

    def run(self, job: Mapping[str, Any], progress: Callable[[int], None] | None) -> tuple[tuple[Any, array, array], int | None, bool] | None:
        proc = _start_worker("engine.snapshots")
        assert proc.stdin is not None and proc.stdout is not None
        try:
            pickle.dump(dict(job), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            proc.stdin.close()
            while True:
                try:
                    msg = pickle.load(proc.stdout)
                except EOFError:
                    raise RuntimeError(f"the stream worker exited ({proc.wait()})") from None
                if msg[0] == "progress":
                    if progress is not None:
                        progress(msg[1])
                    continue
                if msg[0] == "done":
                    _, state, last_id, saw_user, n = msg
                    return (state, _read_array(proc.stdout, "q", n), _read_array(proc.stdout, "i", n)), last_id, saw_user
                if msg[0] == "stale":
                    return None
                raise RuntimeError(f"the stream worker failed: {msg[1]}")
        finally:
            proc.stdout.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _stream_worker_main(stdin: Any, stdout: Any) -> None:
    """The stream worker process (:class:`_StreamWorker`)."""
    job = pickle.load(stdin)

    def send(*msg: Any) -> None:
        pickle.dump(msg, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()

    try:
        store = Store.attach(job["url"])  # the caller opened it and checked its schema
        try:
            with thread_reading(store, job["key"]) as reader:
                if reader.conversation_id != job["cid"] or reader.state() != job["state"]:
                    send("stale")
                    return
                tally = Tally(None)
                meters: list[TokenMeter] = []

                def meter_of() -> TokenMeter:
                    if not meters:
                        meters.append(default_meter(job["model"]))
                    return meters[0]

                key = count_key(job["model"])
                last_id, saw_user, _ = _stream_counts(
                    reader, tally, meter_of, key, reader.offloads_after(job["state"].boundary), job["after"], job["upto"], job["page"],
                    worker=True, worker_min_messages=job["worker_min_messages"], progress=lambda n: send("progress", n))
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - the caller streams the thread itself (and raises a data error there)
        send("error", f"{type(exc).__name__}: {exc}")
        return
    send("done", tally.state(), last_id, saw_user, len(tally.ids))
    tally.ids.tofile(stdout)  # raw, a block at a time: no pickled copy of 12 bytes a message on either side
    tally.counts.tofile(stdout)
    stdout.flush()


def _with_pruned(tally: Tally, messages: Sequence[Message], before: Mapping[int, Offload], after: Mapping[int, Offload]) -> Tally | None:
    """A copy of ``tally`` (of ``messages``, shown with the offloads ``before``) for the same
    messages shown with ``after``, which only adds offloads: every newly pruned result's count
    replaced by its preview's (:meth:`Tally.reprice`), what counting them all again gives (counts
    are per message; which messages count does not depend on their text). None when an offload
    changed or went, or a pruned message is not a plain tool result of the tally."""
    if len(after) < len(before) or len(tally.ids) != len(messages) or any(after.get(i) != o for i, o in before.items()):
        return None
    t = tally.copy()
    if len(after) == len(before):
        return t
    meter = tally.held_meter()
    for m in messages:
        if m.id is not None and m.id not in before and (o := after.get(m.id)) is not None:
            shown = shown_message(m, o)
            if not t.reprice(m.id, m, shown, meter.count_message(shown)):
                return None
    return t


def _nothing_new(reader: ThreadReader, entry: _Entry) -> bool:
    """True when the conversation row says its newest message is the last one this entry read
    (the write door records it with every append, in the same transaction): the read of the
    messages after it is skipped. Anything else (another id, none recorded) reads them."""
    return entry.last_id is not None and reader.last_message_id() == entry.last_id


_SNAPSHOT_FIELDS = tuple(f.name for f in fields(Snapshot) if f.name != "messages")
_snapshot_fields = attrgetter(*_SNAPSHOT_FIELDS)
_set = object.__setattr__


def _with_messages(snapshot: Snapshot, messages: tuple[Message, ...]) -> Snapshot:
    """``replace(snapshot, messages=messages)`` without its generic machinery (the per-step check
    makes one a step): every field copied, ``messages`` set (Snapshot has no ``__post_init__``)."""
    new = object.__new__(Snapshot)
    for name, value in zip(_SNAPSHOT_FIELDS, _snapshot_fields(snapshot)):
        _set(new, name, value)
    _set(new, "messages", messages)
    return new


def _synthetic() -> Message:
    return Message("user", SYNTHETIC_USER_TEXT, metadata={META_SYNTHETIC: True})


def _measurement(head: Snapshot, tally: Tally, meter: TokenMeter, notes: Sequence[Message]) -> Measurement:
    """The envelope's measurement: the tally plus the fixed parts, as :meth:`TokenMeter.measure`.

    The fixed parts (reply priming, tools, system prompt, summary, the synthetic message) are
    counted once per value of what they depend on and kept in the tally (every count is per
    message, so the sum is the same as measuring the envelope whole)."""
    synthetic = tally.first_role is not None and tally.first_role != "user"
    key = (head.system_prompt, head.tools, head.state.summary, synthetic)
    if tally.fixed is None or tally.fixed[0] != key:
        fixed = dict.fromkeys(CATEGORIES, 0)
        fixed["system"] += TOKENS_REPLY_PRIMING
        fixed["tools"] += meter.count_tools(head.tools)
        extra: list[Message] = []
        if head.system_prompt:
            extra.append(system(head.system_prompt))
        if head.state.summary:
            extra.append(summary_message(head.state.summary))
        if synthetic:
            extra.append(_synthetic())
        for m, n in zip(extra, meter.count_messages(extra)):
            fixed[message_category(m)] += n
        tally.fixed = (key, fixed)
    breakdown = dict(tally.totals)
    for category, n in tally.fixed[1].items():
        breakdown[category] += n
    if notes:
        for m, n in zip(notes, meter.count_messages(notes)):
            breakdown[message_category(m)] += n
    if head.pinned:  # pinned messages behind the boundary stay on the surface (engine.core.surface)
        for m, n in zip(head.pinned, meter.count_messages(head.pinned)):
            breakdown[message_category(m)] += n
    return Measurement(total=sum(breakdown.values()), breakdown=MappingProxyType(breakdown), encoding=meter.encoding_name, approximate=meter.approximate)


if __name__ == "__main__":
    _stream_worker_main(sys.stdin.buffer, sys.stdout.buffer)
