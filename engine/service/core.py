"""The one state the facets of :class:`engine.service.Service` share: the store, the Workdir, the
summarizer, the compactor, the snapshot cache and the thread list (``svc.threads``), and the one
place a thread's pressure figures are made (:meth:`ServiceCore.status`)."""

from __future__ import annotations

from typing import Any, Sequence

from ..compaction.compactor import Compactor
from ..compaction.summarizers.protocol import Summarizer
from ..core.config import Settings as UserSettings
from ..core.errors import EngineError
from ..core.policy import PolicySet, recorded_threshold
from ..core.views import (  # issue 23
    SOURCE_NAMES,
    PressureStatus,
)
from ..core.workdir import Workdir
from ..fleet import ThreadsFacet
from ..snapshots import SnapshotCache
from ..store import (
    Store,
)


class ServiceCore:
    """What every facet holds (one per :class:`engine.service.Service`)."""

    def __init__(self, store: Store, *, workdir: Workdir, summarizer: Summarizer, policies: PolicySet) -> None:
        self.store = store
        self.workdir = workdir
        self.summarizer = summarizer
        self.compactor = Compactor(store, summarizer=summarizer, workdir=workdir, policies=policies)
        #: incremental snapshots and measurements, shared by the pressure path (the compactor reads
        #: through it), ``svc.compaction.status`` and ``svc.steps.measure``
        self.snapshots = SnapshotCache(store)
        self.compactor.snapshots = self.snapshots
        #: the thread list at scale and the fleet aggregates (engine/fleet.py)
        self.threads = ThreadsFacet(store)

    @property
    def policies(self) -> PolicySet:
        """The compaction policies in force (held by the compactor alone: one holder)."""
        return self.compactor.policies

    @policies.setter
    def policies(self, policies: PolicySet) -> None:
        self.compactor.policies = policies

    def remeasure(self, keys: Sequence[str]) -> None:
        """Measure ``keys`` again for the thread list (after a write that changed their figures)."""
        self.threads.remeasure(list(keys), self.status)

    @staticmethod
    def display_name(name: str | None) -> str | None:
        if name is not None:
            return name or None
        try:
            return UserSettings().value("operator.name") or None
        except EngineError:
            return None

    def status(self, key: str, progress: Any = None, *, remember: bool = True) -> PressureStatus:
        """The one place a thread's pressure figures are made (``compaction status``, the gauge,
        the header and the list read this). An imported thread our engine has not compacted is
        measured as its source ran it (:class:`engine.snapshots.SourceView`: after the source's
        last recorded compaction, anchored to its last recorded request), with our engine's
        measure of the whole history beside it (``engine_tokens``); its window is never the
        configured fallback (``window_unknown`` instead, :meth:`PolicySet.resolve_known`). A thread
        written live whose window this process would only assume is measured against the threshold
        its last model request recorded when that differs (``window_source == "recorded"``:
        `engine.core.policy.recorded_threshold`)."""
        t = self.snapshots.thread_measure(key, progress=progress)
        head = t.head
        last = t.last_request  # read with the head, in the same transaction
        source = t.source
        reported = head.reported_context_window
        by = head.source_format if reported else None
        policy = (self.policies.resolve_known(head.provider, head.model, reported_window=reported, reported_by=by, thread=head.thread_policy)
                  if source is not None
                  else self.policies.resolve(head.provider, head.model, reported_window=reported, reported_by=by, thread=head.thread_policy))
        anchored = None
        if last is not None and last.reported_prompt_tokens and last.estimated_tokens:
            anchored = t.meter.anchor(t.tokens, reported_prompt_tokens=last.reported_prompt_tokens, estimated_at_report=last.estimated_tokens).anchored
        tokens, breakdown = t.tokens, dict(t.measurement.breakdown)
        extra: dict[str, Any] = {}
        if source is not None:
            extra = {"source_compact_count": source.compactions, "recorded_prompt_tokens": source.recorded_prompt_tokens,
                     "source_format": head.source_format, "recorded_usage": source.recorded_usage}
            if source.anchored and head.state.generation == 0:
                anchored = source.tokens
            if head.state.generation == 0:  # what the source would send next; ours beside it
                tokens, breakdown = source.tokens, dict(source.breakdown)
                extra.update(basis="source", engine_tokens=t.tokens, source_detail=source.detail)
        recorded = recorded_threshold(policy, last, head.provider, head.model, head.thread_policy)
        if policy is None:
            name = SOURCE_NAMES.get(head.source_format or "", head.source_format)
            what = f"model {head.model}" if head.model else "no model"
            window: dict[str, Any] = {"threshold": 0, "context_window": 0, "window_source": "unknown",
                      "window_detail": f"{name} names {what} and reported no context window: window unknown (this database's "
                                       f"fallback window is for its own threads, not an imported session)"}
        elif recorded is not None and last is not None:
            window = {"threshold": recorded, "context_window": last.context_window or 0, "window_source": "recorded",
                      "window_detail": f"threshold {recorded:,} recorded with the thread's last model request (step {last.step}): the "
                                       f"policy its agent ran under; this process knows no window for {head.model or 'the model'} "
                                       f"and would assume {policy.context_window:,} (threshold {policy.threshold:,})"}
        else:
            window = {"threshold": policy.threshold, "context_window": policy.context_window, "window_source": policy.window_source,
                      "window_detail": policy.window_detail}
        status = PressureStatus(
            thread=key,
            tokens=tokens,
            breakdown=breakdown,
            boundary=head.state.boundary,
            generation=head.state.generation,
            compact_count=head.state.compact_count + (source.compactions if source is not None else 0),
            busy_reason=head.busy_reason,
            anchored_tokens=anchored,
            **window,
            **extra,
        )
        if remember:  # the thread list's figure is this one (one number per quantity)
            self.threads.remember(status, t)
        return status


__all__ = ["ServiceCore"]
