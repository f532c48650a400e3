"""What the inspector needs from ``engine.service.Service``: exactly the facet methods it calls.

:class:`InspectorService` is a :class:`typing.Protocol` with one attribute per facet the inspector
uses (``threads``, ``reads``, ``compaction``, ``steering``, ``imports``), each itself a Protocol
(:class:`ThreadsFacet`, :class:`ReadsAPI`, :class:`CompactionAPI`, :class:`SteeringAPI`,
:class:`ImportsAPI`); ``engine.service.Service`` and the GUI tests' fake both satisfy it, and
``tests/gui/test_service_api.py`` checks that the three agree on every method's parameters (names,
kinds, defaults). The client calls a service through these methods, not through method-name
strings: ``await client.call(CompactionAPI.status, key)`` runs ``service.compaction.status(key)``,
so renaming or moving a method breaks the import or the type check, not a click at run time.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from engine.core.views import (
    CompactionDiff,
    CompactionEntry,
    CompactionEvent,
    CompactionState,
    Episode,
    FleetStats,
    HistoryRecord,
    ManualResult,
    Offload,
    PinChange,
    PinInfo,
    PressurePoint,
    PressureStatus,
    RequestEnvelope,
    SourceCompaction,
    StoredMessage,
    ThreadInfo,
    ThreadPage,
    ThreadPolicyView,
    ThreadQuery,
    VisibleTokens,
)

if TYPE_CHECKING:  # engine.service is a heavy import; the GUI loads it lazily (on opening a database)
    from engine.core.views import AuditEntry, RevertResult, RevertTarget
    from engine.service import DiscoveredSession, ImportReport, SessionFollower, WhatIfComparison, WhatIfSweep


class ThreadsFacet(Protocol):
    """``service.threads`` (``engine.fleet``): the thread list and the fleet's figures, each
    computed by the database (issue 26). The GUI calls it from functions run on a worker
    (``client.apply``), never from the GUI thread."""

    def page(self, query: ThreadQuery, *, after: str | None = None, offset: int = 0, limit: int = 200) -> ThreadPage:
        """One keyset page of the threads ``query`` matches, in its order, with their total
        (``offset``: rows skipped first, a jump into the list)."""
        ...

    def position(self, query: ThreadQuery, key: str) -> int | None:
        """The row of thread ``key`` in the list of ``query``, or None when it does not match."""
        ...

    def count(self, query: ThreadQuery) -> int:
        """How many threads ``query`` matches."""
        ...

    def stats(self, query: ThreadQuery | None = None) -> FleetStats:
        """The fleet view's aggregates over the threads ``query`` matches (None: all)."""
        ...


class ReadsAPI(Protocol):
    """``service.reads`` (``engine.service.ReadsFacet``): a thread, its messages, state, events, offloads and history."""

    def thread(self, key: str) -> ThreadInfo:
        """One thread's header (raises ``ThreadNotFound``)."""
        ...

    def messages_page(self, key: str, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500) -> list[StoredMessage]:
        """Ascending keyset page: the first ``limit`` after ``after_id``, or the last before ``before_id``."""
        ...

    def versions(self, key: str | None = None) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
        """Cheap marks of the thread list and of thread ``key``: equal marks, nothing changed (the live refresh's poll)."""
        ...

    def compaction_state(self, key: str) -> CompactionState:
        """Boundary, summary and generation of the thread."""
        ...

    def history(self, key: str) -> list[HistoryRecord]:
        """Every compaction of the thread, oldest first."""
        ...

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000,
               kinds: Sequence[str] | None = None) -> list[CompactionEvent]:
        """Recorded compaction events, oldest first."""
        ...

    def offloads(self, key: str, message_ids: Sequence[int] | None = None) -> dict[int, Offload]:
        """Offload records (pruned tool results) by message id."""
        ...

    def read_original(self, offload: Offload) -> str:
        """The full text of a pruned result, SHA-256 verified (raises on a missing or altered file)."""
        ...

    def replay(self, key: str) -> list[Episode]:
        """Overflow-recovery episodes rebuilt from the events."""
        ...

    def source_compactions(self, key: str) -> list[SourceCompaction]:
        """The compactions the thread's source recorded (an imported Claude Code, Codex or
        OpenHands session), in order; empty for a thread written live."""
        ...

    def request_envelopes(self, key: str) -> Sequence[RequestEnvelope]:
        """Every recorded model request of the thread, replayed: the envelope the model received
        at each (surface, summary, previews, ephemeral notes, tokens by category, generation).
        A lazy sequence: each envelope is rebuilt when indexed, so index it on a worker too."""
        ...

    def compaction_diff(self, key: str, compaction: int | None = None) -> CompactionDiff:
        """One compaction before and after (``compaction``: 1-based ordinal in the thread's
        compaction list; None: the latest)."""
        ...

    def compaction_history(self, key: str) -> list[CompactionEntry]:
        """Every compaction of the thread (engine and the source's), with dropped specifics and cost."""
        ...

    def export_history(self, key: str, format: str = "md") -> str:
        """The compaction history as Markdown (``md``) or JSON (``json``)."""
        ...


class CompactionAPI(Protocol):
    """``service.compaction`` (``engine.service.CompactionFacet``): compact / revert, the pressure figures, the summarizer, what-if."""

    def status(self, key: str, *, remember: bool = True) -> PressureStatus:
        """Pressure of the next turn against the threshold, with the busy reason; ``remember``: store its
        figures with the thread (the thread list's pressure column)."""
        ...

    def status_with_progress(self, key: str, progress: Callable[[int], None]) -> PressureStatus:
        """:meth:`status`, calling ``progress(messages_counted)`` (on the worker thread) after each
        page of a cold measurement: a huge thread measured for the first time, or after a
        compaction. A warm status (only the new messages counted) may never call it."""
        ...

    def pressure_history(self, key: str) -> list[PressurePoint]:
        """Measured envelope of every recorded model request."""
        ...

    def compact(self, key: str, *, summarizer: str | None = None, operator: str | None = None,
                instructions: str | None = None, reason: str | None = None) -> ManualResult:
        """Manual compaction of an idle thread (raises ``ThreadBusy``); ``summarizer="extractive"``:
        this one with the offline summarizer; ``operator``: who asks (default: the settings' name);
        ``instructions``: what the summary must keep; ``reason``: why (the audit log)."""
        ...

    def summarizer_info(self) -> dict[str, str | None]:
        """Who writes this service's summaries: ``summarizer`` (its name) and ``summarizer_host``."""
        ...

    def reload_summarizer(self) -> dict[str, str | None]:
        """Build the summarizer again from the user's settings (after Preferences); who writes now."""
        ...

    def visible_tokens(self, key: str, stored: Sequence[StoredMessage], offloads: Mapping[int, Offload]) -> VisibleTokens:
        """Tokens of each message as the model sees it (a pruned result as its preview) and the
        full count of each pruned one: the timeline's token badges."""
        ...

    def whatif(
        self,
        key: str,
        settings: Mapping[str, Any],
        *,
        progress: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> "WhatIfComparison":
        """Replay the thread under other settings in a scratch copy and compare with what happened
        (``progress(done, total)``; ``should_stop()`` true raises ``engine.core.errors.Cancelled``)."""
        ...

    def whatif_sweep(
        self,
        key: str,
        parameter: str,
        values: Sequence[Any],
        *,
        settings: Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> "WhatIfSweep":
        """One what-if run per value of ``parameter`` (the other settings from ``settings``)."""
        ...

    def revert(self, key: str, *, reason: str | None = None, display_name: str | None = None) -> "RevertResult":
        """Revert the thread's last compaction of ours, or redo it after a revert (raises ``ThreadBusy``, ``NotRevertible``)."""
        ...

    def revert_target(self, key: str) -> "RevertTarget":
        """What Revert on the thread would do now (``revert`` / ``redo`` / None and why)."""
        ...


class SteeringAPI(Protocol):
    """``service.steering`` (``engine.service.SteeringFacet``): pins, the thread's own policy, the audit log, access."""

    def pins(self, key: str) -> "list[PinInfo]":
        """The thread's pinned messages (issue 23)."""
        ...

    def pin(self, key: str, message_id: int, *, reason: str | None = None, display_name: str | None = None, unpin: bool = False) -> "PinChange":
        """Pin (``unpin``: unpin) a message with its tool round; one audit row."""
        ...

    def thread_policy(self, key: str) -> "ThreadPolicyView":
        """The thread's effective policy, each value with where it comes from."""
        ...

    def set_thread_policy(self, key: str, values: Mapping[str, Any] | None = None, *, unset: Sequence[str] = (),
                          reason: str | None = None, display_name: str | None = None) -> "ThreadPolicyView":
        """Set / remove values of the thread's own policy (and its standing instructions); one audit row."""
        ...

    def audit(
        self, *, thread: str | None = None, operator: str | None = None, actions: Sequence[str] | None = None, after_id: int | None = None, limit: int = 200
    ) -> list["AuditEntry"]:
        """Audit rows oldest first, keyset-paged by id, filtered by thread, operator and actions."""
        ...

    def audit_operators(self) -> list[str]:
        """The operators the audit log names."""
        ...

    def access(self) -> dict[str, Any]:
        """``{"writable", "reason", "words", "operator"}``: whether this store can be written, and why not."""
        ...


class ImportsAPI(Protocol):
    """``service.imports`` (``engine.service.ImportsFacet``): transcript import and the sessions on this machine."""

    def import_file(self, path: str | os.PathLike[str], *, format: str | None = None, thread: str | None = None) -> "list[ImportReport]":
        """Import one transcript file or directory: one report per session (raises
        ``ImportFormatError`` when it is not that format)."""
        ...

    def discover_sessions(self, folders: Sequence[str] = (), *, home: str | None = None) -> "list[DiscoveredSession]":
        """The sessions each tool keeps in its default locations (under ``home``) and in ``folders``,
        newest first, marked with the threads of this database imported from each."""
        ...

    def follow_sessions(self, folders: Sequence[str] = (), *, home: str | None = None, on_reports: Any = None,
                        on_error: Any = None, debounce_ms: int = 400) -> "SessionFollower":
        """Follow all: import new and growing sessions there as they change (a watcher thread of its
        own, started; ``stop()`` it); the callbacks are called on that thread."""
        ...


class InspectorService(Protocol):
    """The service API the inspector uses (every call runs on a worker thread): one attribute per
    facet of ``engine.service.Service``, and ``close``."""

    @property
    def threads(self) -> ThreadsFacet:
        """The thread list and the fleet view (issue 26): ``engine.fleet.ThreadsFacet``."""
        ...

    @property
    def reads(self) -> ReadsAPI: ...

    @property
    def compaction(self) -> CompactionAPI: ...

    @property
    def steering(self) -> SteeringAPI: ...

    @property
    def imports(self) -> ImportsAPI: ...

    def close(self) -> None:
        """Release the database and any open resources."""
        ...


#: each facet Protocol and the attribute of :class:`InspectorService` (and of ``engine.service.Service``) that holds it
FACETS: dict[type, str] = {ReadsAPI: "reads", CompactionAPI: "compaction", SteeringAPI: "steering", ImportsAPI: "imports"}


#: the facet methods the inspector uses on ``service.threads`` (issue 26)
THREADS_METHODS: tuple[str, ...] = tuple(name for name, value in vars(ThreadsFacet).items() if callable(value) and not name.startswith("_"))

#: the methods of each facet Protocol, by facet attribute (what a service must provide)
FACET_METHODS: dict[str, tuple[str, ...]] = {
    attr: tuple(name for name, value in vars(api).items() if callable(value) and not name.startswith("_")) for api, attr in FACETS.items()
}
