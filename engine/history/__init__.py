"""A thread's compaction history: before/after diffs, the envelope of every request, cost, export.

A reader only (nothing is written, nothing is re-executed against a provider). Everything is
rebuilt from what the store recorded: the append-only compaction history and offload records (our
compactions), the source's recorded compactions (an imported thread), the model requests, and the
events (summary usage, dropped specifics, the ephemeral notes of a run that hit a provider error).
Surfaces come from :func:`engine.replay.snapshot_at` + :func:`engine.surface.build_surface` (the
one surface builder), tokens from :mod:`engine.meter` (the one meter).

Where a request sits in the history: an engine request is placed by the provider error it got
(generation and newest message recorded), else by time (the generation of the last history record
and the newest message written before the request row); the rebuilt envelope is ``exact`` when its
count equals the estimate the engine recorded with the request. An imported request saw what the
*source's* model saw: the source's own summary and cleared tool results (never ours), the messages
before the one its response produced.

Scale: the thread is read once (messages, history, offloads, requests, events; O(messages) memory);
each envelope is built on demand (:class:`RequestEnvelopes` is a lazy sequence: O(surface) time and
memory per envelope, nothing kept), so a thread with thousands of requests is never held as
thousands of surfaces.
"""

from .prices import price_cost, price_tokens
from .core import (
    EXPORT_FORMAT,
    EXPORT_VERSION,  # public in the old module too (not in __all__)
    META_SOURCE_CLEARED,
    SOURCE_CLEARED_TEXT,
    CompactionNotFound,
    HistorySource,
    InvalidExport,
    RequestEnvelopes,
    ThreadHistory,
    compaction_cost,
    compaction_diff,
    compaction_history,
    read_history,
    request_envelope,
    request_envelopes,
)
from .export import (
    cost_to_json,
    entry_from_json,
    entry_to_json,
    export_history,
    export_json,
    export_markdown,
    load_export,
)

__all__ = [
    "EXPORT_FORMAT",
    "SOURCE_CLEARED_TEXT",
    "CompactionNotFound",
    "HistorySource",
    "InvalidExport",
    "RequestEnvelopes",
    "ThreadHistory",
    "compaction_cost",
    "compaction_diff",
    "compaction_history",
    "cost_to_json",
    "entry_from_json",
    "entry_to_json",
    "export_history",
    "export_json",
    "export_markdown",
    "load_export",
    "price_cost",
    "price_tokens",
    "read_history",
    "request_envelope",
    "request_envelopes",
]
