"""A thread's compaction history: before/after diffs, the envelope of every request, cost, export.

A reader only (nothing is written, nothing is re-executed against a provider). Everything is
rebuilt from what the store recorded: the append-only compaction history and offload records (our
compactions), the source's recorded compactions (an imported thread), the model requests, and the
events (summary usage, dropped specifics, the ephemeral notes of a run that hit a provider error).
Surfaces come from :func:`engine.compaction.replay.snapshot_at` + :func:`engine.core.surface.build_surface` (the
one surface builder), tokens from :mod:`engine.core.meter` (the one meter).

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

from . import core, export, pressure, prices
from .core import *  # noqa: F403 - the package's names are its modules' (each lists them in __all__)
from .export import *  # noqa: F403
from .pressure import *  # noqa: F403
from .prices import *  # noqa: F403

__all__ = [*core.__all__, *export.__all__, *prices.__all__, *pressure.__all__]
