"""Queries: a thread, its messages, state, events, offloads, and what compaction kept and dropped.

Reached as ``svc.reads`` (:class:`engine.service.Service`); shares one :class:`ServiceCore` with the other facets."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .. import history
from ..compaction.replay import build_episodes
from ..core.views import (  # issue 23
    CompactionDiff,
    CompactionEntry,
    CompactionEvent,
    CompactionState,
    Episode,
    HistoryRecord,
    Offload,
    SourceCompaction,
    StoredMessage,
    ThreadInfo,
)
from ..core.workdir import Workdir, WorkdirMissing
from ..history import RequestEnvelopes, ThreadHistory
from .core import ServiceCore


class ReadsFacet:
    """Queries: a thread, its messages, state, events, offloads, and what compaction kept and dropped."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def thread(self, key: str) -> ThreadInfo:
        return self._core.store.thread(key)

    def list_threads(self, text: str | None = None, after_key: str | None = None, limit: int = 500) -> list[ThreadInfo]:
        return self._core.store.list_threads(text=text, after_key=after_key, limit=limit)

    def messages_page(self, key: str, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500) -> list[StoredMessage]:
        return self._core.store.messages_page(key, after_id=after_id, before_id=before_id, limit=limit)

    def message_count(self, key: str) -> int:
        return self._core.store.message_count(key)

    def versions(self, key: str | None = None) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
        """Cheap marks of the thread list and of thread ``key`` (:meth:`Store.versions`): equal
        marks mean nothing a reader shows has changed; the inspector's live refresh reads these
        every few seconds and re-reads only what changed."""
        return self._core.store.versions(key)

    def compaction_state(self, key: str) -> CompactionState:
        return self._core.store.compaction_state(key)

    def history(self, key: str) -> list[HistoryRecord]:
        return self._core.store.history(key)

    def history_page(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[HistoryRecord]:
        """The thread's compaction history rows oldest first after ``after_id``, at most ``limit``."""
        return self._core.store.history(key, after_id=after_id, limit=limit)

    def tools(self, key: str) -> tuple[dict[str, Any], ...]:
        """The thread's stored tool schemas (what the envelope carries beside the messages)."""
        return self._core.store.conversation_config(key)[1]

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000,
               kinds: Sequence[str] | None = None) -> list[CompactionEvent]:
        """The thread's events oldest first after ``after_id`` (only ``kinds`` when given)."""
        return self._core.store.events(key, after_id=after_id, limit=limit, kinds=kinds)

    def offloads(self, key: str, message_ids: Sequence[int] | None = None) -> dict[int, Offload]:
        return self._core.store.offloads(key, message_ids)

    def read_original(self, offload: Offload) -> str:
        """The full tool result, its SHA-256 verified (raises WorkdirError). Looked up by name in this
        service's Workdir first (a copied or moved database with its Workdir still works), then at
        the path recorded when it was pruned."""
        try:
            return self._core.workdir.read(offload.sha256, tool_name=offload.tool_name)
        except WorkdirMissing:
            recorded = Path(offload.path)
            return Workdir(recorded.parent).read(offload.sha256, tool_name=offload.tool_name, path=recorded)

    def source_compactions(self, key: str) -> list[SourceCompaction]:
        """The compactions the thread's source recorded (Claude Code, Codex, OpenHands), in order;
        empty for a thread written live. Shown as the source's boundaries, never applied."""
        return self._core.store.source_compactions(key)

    def replay(self, key: str) -> list[Episode]:
        """Every overflow-recovery episode of the thread, step by step, from recorded events."""
        return build_episodes(self._core.store, key)

    def request_envelopes(self, key: str) -> RequestEnvelopes:
        """The envelope the model received at every recorded request of the thread (lazy sequence)."""
        return history.request_envelopes(self._core.store, key)

    def thread_history(self, key: str) -> ThreadHistory:
        """The thread's compactions read once (cached while the thread is unchanged): diffs and
        costs computed from it on demand."""
        return history.read_history(self._core.store, key)

    def compaction_diff(self, key: str, compaction: int | None = None) -> CompactionDiff:
        """Before / after of the thread's ``compaction``-th compaction (1-based; None: the latest)."""
        return history.compaction_diff(self._core.store, key, compaction)

    def compaction_history(self, key: str) -> list[CompactionEntry]:
        """Every compaction of the thread (ours and the source's), with dropped specifics and cost."""
        return history.compaction_history(self._core.store, key)

    def export_history(self, key: str, format: str = "md") -> str:
        """The compaction history as Markdown (``md``) or JSON (``json``)."""
        return history.export_history(self._core.store, key, format)


__all__ = ["ReadsFacet"]
