"""Use cases: the one API that the CLI, the inspector and agent platforms call.

Intake goes through the store's conversation lock; compaction through :class:`Compactor`; queries
return :mod:`engine.views` records. The inspector calls exactly these methods (off its GUI thread),
so manual compaction from the GUI runs the same code path as ``compaction compact``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import platformdirs

from .compactor import Compactor, Measured, RunState
from .errors import EngineError
from .messages import InvalidMessage, Message
from .policy import PolicySet
from .replay import build_episodes
from .store import Store, display_url, normalize_url
from .summarizers.base import Summarizer, make_summarizer_from_env
from .views import (
    CompactionEvent,
    CompactionState,
    Episode,
    HistoryRecord,
    ManualResult,
    Offload,
    PressurePoint,
    PressureStatus,
    StoredMessage,
    ThreadInfo,
)
from .workdir import Workdir, WorkdirMissing

APP_NAME = "compaction-inspector"
ENV_WORKDIR = "COMPACTION_WORKDIR"
ENV_DB = "COMPACTION_DB"
#: the configured window when neither an override nor the known-model table knows the model
DEFAULT_CONTEXT_WINDOW = 128_000
POLICY_SETTING = "policy"


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def default_database_url() -> str:
    """``$COMPACTION_DB``, else the embedded demo database in the user's data directory."""
    return os.environ.get(ENV_DB) or str(data_dir() / "demo.db")


def default_workdir(url: str) -> Path:
    """``$COMPACTION_WORKDIR``, else ``<db>.workdir`` beside a SQLite file, else the data directory."""
    env = os.environ.get(ENV_WORKDIR)
    if env:
        return Path(env)
    u = normalize_url(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        p = Path(u.database)
        return p.with_name(p.name + ".workdir")
    return data_dir() / "workdir"


def load_policies(store: Store, explicit: PolicySet | Mapping[str, Any] | None = None) -> PolicySet:
    """Explicit configuration, else the store-wide ``policy`` setting, else the defaults."""
    if isinstance(explicit, PolicySet):
        return explicit
    data: Mapping[str, Any] | None = explicit if explicit is not None else store.get_setting(POLICY_SETTING)
    data = dict(data or {})
    data.setdefault("context_window", DEFAULT_CONTEXT_WINDOW)
    return PolicySet.from_mapping(data)


def open_service(
    url: str | None = None,
    *,
    workdir: str | os.PathLike[str] | None = None,
    summarizer: Summarizer | None = None,
    policies: PolicySet | Mapping[str, Any] | None = None,
    create: bool = False,
) -> "Service":
    url = url or default_database_url()
    store = Store.open(url, create=create)
    try:
        return Service(
            store,
            workdir=Workdir(workdir or default_workdir(url)),
            summarizer=summarizer or make_summarizer_from_env(),
            policies=load_policies(store, policies),
        )
    except Exception:
        store.close()
        raise


class Service:
    def __init__(self, store: Store, *, workdir: Workdir, summarizer: Summarizer, policies: PolicySet) -> None:
        self.store = store
        self.workdir = workdir
        self.summarizer = summarizer
        self.policies = policies
        self.compactor = Compactor(store, summarizer=summarizer, workdir=workdir, policies=policies)
        #: the last status per thread, with the stamp it was measured at (see :meth:`status`)
        self._status_cache: dict[str, tuple[tuple[Any, ...], PressureStatus]] = {}

    @property
    def url(self) -> str:
        return display_url(self.store.url)

    def close(self) -> None:
        self.store.close()

    # -- intake (agent platforms, the harness) -------------------------------------------
    def create_thread(self, key: str, **kwargs: Any) -> int:
        return self.store.create_conversation(key, **kwargs)

    def append_message(self, key: str, message: Message, *, run_id: int | None = None) -> int:
        """Append under the conversation lock. A tool result must answer a pending call of the newest
        assistant message: an orphan would be rejected by every OpenAI-compatible provider on every
        later request, so it is refused here (``invalid_message``) and nothing is written."""
        with self.store.locked(key) as tx:
            if message.role == "tool" and message.tool_call_id not in {c.id for c in tx.unanswered_calls()}:
                raise InvalidMessage(f"orphan tool result: no pending call {message.tool_call_id!r} on thread {key!r}")
            return tx.append_message(message, run_id=run_id)

    def queue_request(self, key: str, content: str) -> int:
        return self.store.queue_request(key, content)

    def start_run(self, key: str, *, request_id: int | None = None) -> int:
        return self.store.start_run(key, request_id=request_id)

    def finish_run(self, key: str, run_id: int, **kwargs: Any) -> None:
        self.store.finish_run(key, run_id, **kwargs)

    def interrupt_run(self, key: str, run_id: int) -> None:
        self.store.interrupt_run(key, run_id)

    def cancel_run(self, key: str, run_id: int) -> None:
        self.store.cancel_run(key, run_id)

    # -- compaction -----------------------------------------------------------------------
    def compact(self, key: str) -> ManualResult:
        """Manual compaction (§4). Raises :class:`engine.errors.ThreadBusy` on a busy thread."""
        return self.compactor.manual(key)

    def compact_for_pressure(self, key: str, run: RunState, *, running_turn: bool = True):
        return self.compactor.pressure(key, run, running_turn=running_turn)

    def measure(self, key: str, *, ephemeral: Sequence[Message] = ()) -> Measured:
        return self.compactor.measure(self.store.snapshot(key), ephemeral=ephemeral)

    # -- queries (the inspector) ------------------------------------------------------------
    def list_threads(self, text: str | None = None, after_key: str | None = None, limit: int = 500) -> list[ThreadInfo]:
        return self.store.list_threads(text=text, after_key=after_key, limit=limit)

    def thread(self, key: str) -> ThreadInfo:
        return self.store.thread(key)

    def messages_page(self, key: str, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500) -> list[StoredMessage]:
        return self.store.messages_page(key, after_id=after_id, before_id=before_id, limit=limit)

    def message_count(self, key: str) -> int:
        return self.store.message_count(key)

    def compaction_state(self, key: str) -> CompactionState:
        return self.store.compaction_state(key)

    def history(self, key: str) -> list[HistoryRecord]:
        return self.store.history(key)

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000) -> list[CompactionEvent]:
        return self.store.events(key, after_id=after_id, limit=limit)

    def offloads(self, key: str, message_ids: Sequence[int] | None = None) -> dict[int, Offload]:
        return self.store.offloads(key, message_ids)

    def read_original(self, offload: Offload) -> str:
        """The full tool result, its SHA-256 verified (raises WorkdirError). Looked up by name in this
        service's Workdir first (a copied or moved database with its Workdir still works), then at
        the path recorded when it was pruned."""
        try:
            return self.workdir.read(offload.sha256, tool_name=offload.tool_name)
        except WorkdirMissing:
            recorded = Path(offload.path)
            return Workdir(recorded.parent).read(offload.sha256, tool_name=offload.tool_name, path=recorded)

    def status(self, key: str) -> PressureStatus:
        """The pressure of a thread for its next turn.

        Measuring means reading every message after the boundary; an inspector polls this every few
        seconds. So the result is kept per thread with a stamp read from the conversation row
        (message count, last message, generation, boundary, route, newest model request): an
        unchanged stamp returns the kept status at the cost of two small queries, with the busy
        reason always fresh."""
        info = self.store.thread(key)
        last = self.store.last_completed_request(key)
        stamp = (info.message_count, info.updated_at, info.generation, info.boundary, info.provider, info.model, last.id if last else None)
        kept = self._status_cache.get(key)
        if kept is not None and kept[0] == stamp:
            return replace(kept[1], busy_reason=info.busy_reason)
        snap = self.store.snapshot(key)
        m = self.compactor.measure(snap)
        anchored = None
        if last is not None and last.reported_prompt_tokens and last.estimated_tokens:
            anchored = m.meter.anchor(m.tokens, reported_prompt_tokens=last.reported_prompt_tokens, estimated_at_report=last.estimated_tokens).anchored
        status = PressureStatus(
            thread=key,
            tokens=m.tokens,
            threshold=m.policy.threshold,
            context_window=m.policy.context_window,
            breakdown=dict(m.measurement.breakdown),
            boundary=snap.state.boundary,
            generation=snap.state.generation,
            compact_count=snap.state.compact_count,
            busy_reason=snap.busy_reason,
            anchored_tokens=anchored,
        )
        self._status_cache[key] = (stamp, status)
        return status

    def pressure_history(self, key: str) -> list[PressurePoint]:
        """Every recorded model request with the compaction (if any) that happened just before it."""
        requests = self.store.model_requests(key, limit=100_000)
        events = [e for e in self.store.events(key, limit=100_000) if e.kind in ("prune", "summary")]
        points: list[PressurePoint] = []
        ei = 0
        for r in requests:
            kinds: list[str] = []
            while ei < len(events) and events[ei].created_at <= r.created_at:
                e = events[ei]
                kinds.append("overflow" if e.trigger == "overflow" else ("manual" if e.trigger == "manual" else e.kind))
                ei += 1
            marker = None
            for k in ("overflow", "manual", "summary", "prune"):
                if k in kinds:
                    marker = k
                    break
            points.append(
                PressurePoint(
                    request_id=r.id,
                    run_id=r.run_id,
                    step=r.step,
                    tokens=r.estimated_tokens or 0,
                    threshold=r.threshold,
                    compaction=marker,
                    created_at=r.created_at,
                )
            )
        return points

    def replay(self, key: str) -> list[Episode]:
        """Every overflow-recovery episode of the thread, step by step, from recorded events."""
        return build_episodes(self.store, key)

    # -- configuration --------------------------------------------------------------------
    def set_policy(self, data: Mapping[str, Any]) -> None:
        """Validate and store the store-wide policy (shared by every agent and inspector).

        Every (provider, model) it names, and the default, must resolve: a policy that cannot be
        used (e.g. a retained tail larger than the target) is refused before anything is stored."""
        policies = load_policies(self.store, data)
        for provider, model in [(None, None), *policies.overrides]:
            r = policies.resolve(provider, model)
            r.threshold, r.target_tokens, r.retained_tail_tokens  # raise PolicyError if unusable
        self.store.put_setting(POLICY_SETTING, dict(data))
        self.policies = policies
        self.compactor.policies = policies
        self._status_cache.clear()



__all__ = ["Service", "open_service", "default_database_url", "data_dir", "EngineError"]
