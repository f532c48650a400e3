"""Use cases: the one API that the CLI, the inspector, the harness and agent platforms call.

:class:`Service` is a set of facets, each a small class reached as an attribute, all sharing one
:class:`~engine.service.core.ServiceCore` (store, Workdir, summarizer, compactor, snapshots):

- ``svc.runs`` (:mod:`.runs`): threads, messages, queued requests, a run's life;
- ``svc.steps`` (:mod:`.steps`): a model step's transactions, the step driver's
  :class:`engine.step.StepPort` (``StepDriver(svc.steps, key, ...)``);
- ``svc.compaction`` (:mod:`.compaction`): compact / revert, pressure figures, the summarizer, what-if;
- ``svc.reads`` (:mod:`.reads`): a thread, its messages, state, events, offloads, its history;
- ``svc.steering`` (:mod:`.steering`): pins, thread and store policies, the audit log, access;
- ``svc.imports`` (:mod:`.imports`): transcript import, following files, discovered sessions;
- ``svc.threads`` (:mod:`engine.fleet`): the thread list at scale and the fleet's figures.

Every write goes through the store's write door (``Store.locked`` → :class:`engine.store.Locked`),
which holds the conversation lock and refuses a write that breaks a conversation invariant
(``invalid_message``, nothing written); compaction goes through :class:`Compactor`; queries return
:mod:`engine.core.views` records. The inspector calls exactly these methods (off its GUI thread), so
manual compaction from the GUI runs the same code path as ``compaction compact``; the harness
(:mod:`engine.apps.harness.loop`) uses nothing else of the engine's state.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from ..compaction.compactor import Compactor, RunState
from ..compaction.summarizers.factory import ConnectionReport, check_connection, make_summarizer  # noqa: F401 (check_connection, ConnectionReport: the inspector's Test connection)
from ..compaction.summarizers.protocol import Summarizer
from ..core.errors import EngineError
from ..core.policy import PolicySet
from ..core.workdir import Workdir
from ..discovery import DiscoveredSession, SessionFollower, discover
from ..fleet import ThreadsFacet
from ..importing import ImportReport
from ..locations import (  # noqa: F401 (re-exported: the CLI, the inspector and the adapters import them from here)
    APP_NAME,
    DEFAULT_CONTEXT_WINDOW,
    ENV_DB,
    ENV_WORKDIR,
    POLICY_SETTING,
    apply_default_policy,
    data_dir,
    default_database_url,
    default_workdir,
    load_policies,
    sessions_database_url,
)
from ..snapshots import SnapshotCache
from ..store import (
    InvalidDatabaseURL,
    InvalidSetting,  # noqa: F401 - re-exported
    Store,
    display_url,
    normalize_url,  # noqa: F401 - re-exported (the inspector reads URLs with it)
)
from ..whatif import WhatIfComparison, WhatIfRun, WhatIfSweep
from .compaction import CompactionFacet
from .core import ServiceCore
from .imports import ImportsFacet
from .reads import ReadsFacet
from .runs import RunsFacet
from .steering import SteeringFacet
from .steps import StepsFacet


def open_service(
    url: str | None = None,
    *,
    workdir: str | os.PathLike[str] | None = None,
    summarizer: Summarizer | None = None,
    policies: PolicySet | Mapping[str, Any] | None = None,
    create: bool = False,
    read_only: bool = False,
) -> "Service":
    if url is None:
        url = default_database_url()
    elif not isinstance(url, str) or not url.strip():
        raise InvalidDatabaseURL("empty database URL: name a SQLite file or a postgresql:// URL (omit it for the default database)")
    # ``--read-only`` of the CLI and the inspector: COMPACTION_READ_ONLY=1 forces it on any database
    read_only = read_only or os.environ.get("COMPACTION_READ_ONLY", "") == "1"
    store = Store.open(url, create=create and not read_only, read_only=read_only)
    try:
        if create and policies is None:
            apply_default_policy(store)
        return Service(
            store,
            workdir=Workdir(workdir or default_workdir(url)),
            summarizer=summarizer or make_summarizer(),
            policies=load_policies(store, policies),
        )
    except Exception:
        store.close()
        raise


class Service:
    """The facets (see the module docstring), the database's URL, ``close`` and the policies in force.

    ``store``, ``workdir``, ``compactor``, ``snapshots`` and ``summarizer`` are the shared core's,
    for the engine's own internals and their tests; callers use the facets."""

    def __init__(self, store: Store, *, workdir: Workdir, summarizer: Summarizer, policies: PolicySet) -> None:
        core = ServiceCore(store, workdir=workdir, summarizer=summarizer, policies=policies)
        self._core = core
        self.store: Store = core.store
        self.workdir: Workdir = core.workdir
        self.compactor: Compactor = core.compactor
        self.snapshots: SnapshotCache = core.snapshots
        self.threads: ThreadsFacet = core.threads
        self.runs = RunsFacet(core)
        self.steps = StepsFacet(core)
        self.compaction = CompactionFacet(core)
        self.reads = ReadsFacet(core)
        self.steering = SteeringFacet(core)
        self.imports = ImportsFacet(core)

    @property
    def summarizer(self) -> Summarizer:
        """Who writes this service's summaries (``svc.compaction.reload_summarizer`` replaces it)."""
        return self._core.summarizer

    @property
    def policies(self) -> PolicySet:
        """The compaction policies in force (held by the compactor alone: one holder)."""
        return self._core.policies

    @policies.setter
    def policies(self, policies: PolicySet) -> None:
        self._core.policies = policies

    @property
    def url(self) -> str:
        return display_url(self._core.store.url)

    def close(self) -> None:
        self._core.store.close()



__all__ = [
    "CompactionFacet", "DiscoveredSession", "EngineError", "ImportReport", "ImportsFacet", "ReadsFacet", "RunState", "RunsFacet",
    "Service", "ServiceCore", "SessionFollower", "SteeringFacet", "StepsFacet", "WhatIfComparison", "WhatIfRun", "WhatIfSweep",
    "data_dir", "default_database_url", "discover", "open_service",
]
