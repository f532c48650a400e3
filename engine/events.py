"""The one event vocabulary: every kind of row in ``compaction_events``.

Pure (no I/O). Writers name a kind from :class:`EventKind` (the store refuses any other); readers
(replay, the inspector, the CLI) compare against the same members. ``docs/events.md`` lists every
kind with its payload; a test fails when it does not.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EventKind"]


class EventKind(StrEnum):
    PRUNE = "prune"
    PRUNE_FAILED = "prune_failed"
    SUMMARY = "summary"
    SUMMARY_REJECTED = "summary_rejected"
    BREAKER_TRIPPED = "breaker_tripped"
    PRESSURE_FAILED = "pressure_failed"
    PROVIDER_ERROR = "provider_error"
    RETRY = "retry"
    RECOVERED = "recovered"
    GAVE_UP = "gave_up"
    CANCELLED = "cancelled"
    HARNESS_ERROR = "harness_error"
    WAITING_FOR_USER = "waiting_for_user"
