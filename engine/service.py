# Over 800 lines: the one use-case API (intake, runs, requests, compaction, steering, queries, import) until issue 24 (open) splits it into facets like svc.threads (engine/fleet.py); the logic lives in the compactor, the store, the snapshots, history and importing.
"""Use cases: the one API that the CLI, the inspector, the harness and agent platforms call.

Every write goes through the store's write door (``Store.locked`` → :class:`engine.store.Locked`),
which holds the conversation lock and refuses a write that breaks a conversation invariant
(``invalid_message``, nothing written); compaction goes through :class:`Compactor`; queries return
:mod:`engine.views` records. The inspector calls exactly these methods (off its GUI thread), so
manual compaction from the GUI runs the same code path as ``compaction compact``; the harness
(:mod:`engine.harness.loop`) uses nothing else of the engine's state.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import history, whatif
from .compactor import Compactor, Measured, Outcome, RunState
from .config import Settings as UserSettings
from .discovery import DiscoveredSession, SessionFollower, discover, store_writer
from .errors import EngineError
from .events import CancelledEvent, Event, EventKind, HarnessErrorEvent, WaitingForUserEvent, write_event, write_thread_event
from .fleet import ThreadsFacet
from .history import RequestEnvelopes, ThreadHistory
from .importing import ImportReport, follow_path, import_path
from .locations import (  # noqa: F401 (re-exported: the CLI, the inspector and the adapters import them from here)
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
from .messages import Message, ToolCall
from .meter import default_meter
from .policy import THREAD_INSTRUCTIONS, PolicyError, PolicySet, ResolvedPolicy, thread_overrides
from .replay import build_episodes
from .snapshots import SnapshotCache
from .step import StepStart
from .store import (
    ABORTED_TEXT,
    InvalidDatabaseURL,
    InvalidSetting,  # noqa: F401 - re-exported
    InvalidTransition,
    Store,
    access as _access,
    display_url,
    normalize_url,  # noqa: F401 - re-exported (the inspector reads URLs with it)
    reverts as _reverts,
)
from .store.reads import thread_reading
from .summarizers.extractive import ExtractiveSummarizer
from .summarizers.factory import ConnectionReport, check_connection, make_summarizer, provenance  # noqa: F401 (check_connection, ConnectionReport: the inspector's Test connection)
from .summarizers.protocol import Summarizer
from .surface import shown_message
from .views import (  # issue 23
    SOURCE_NAMES,
    AuditEntry,
    CompactionDiff,
    CompactionEntry,
    CompactionEvent,
    CompactionState,
    Episode,
    HistoryRecord,
    ManualResult,
    ModelRequest,
    Offload,
    PinChange,
    PinInfo,
    PressurePoint,
    PressureStatus,
    RevertResult,
    RevertTarget,
    SourceCompaction,
    StoredMessage,
    ThreadInfo,
    ThreadPolicyView,
    VisibleTokens,
)
from .whatif import WhatIfComparison, WhatIfRun, WhatIfSweep
from .workdir import Workdir, WorkdirMissing


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
    def __init__(self, store: Store, *, workdir: Workdir, summarizer: Summarizer, policies: PolicySet) -> None:
        self.store = store
        self.workdir = workdir
        self.summarizer = summarizer
        self.compactor = Compactor(store, summarizer=summarizer, workdir=workdir, policies=policies)
        #: incremental snapshots and measurements, shared by the pressure path (the compactor reads
        #: through it), :meth:`status` and :meth:`measure`
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

    def policy_for(self, provider: str | None, model: str | None, *, reported_window: int | None = None,
                   reported_by: str | None = None) -> ResolvedPolicy:
        """The policy resolved for one route (threshold, target, retries, …); ``reported_window``
        is a window the thread's source reported (used when no override names the route)."""
        return self.policies.resolve(provider, model, reported_window=reported_window, reported_by=reported_by)

    @property
    def url(self) -> str:
        return display_url(self.store.url)

    def close(self) -> None:
        self.store.close()

    # -- intake (agent platforms, the harness): each call is one trip through the write door ----
    def create_thread(self, key: str, **kwargs: Any) -> int:
        return self.store.create_conversation(key, **kwargs)

    def configure(self, key: str, *, system_prompt: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Set the thread's system prompt and / or tool schemas (part of every envelope)."""
        with self.store.locked(key) as tx:
            tx.configure(system_prompt=system_prompt, tools=tools)

    def append_message(self, key: str, message: Message, *, run_id: int | None = None) -> int:
        """Append under the conversation lock. The write door checks the conversation invariants:
        a tool result must answer a pending call of the newest assistant message (an orphan, or a
        second answer, would be rejected by every OpenAI-compatible provider on every later
        request), one assistant message never repeats a call id. A violation raises
        :class:`engine.messages.InvalidMessage` (``invalid_message``) and nothing is written."""
        return self.store.append_message(key, message, run_id=run_id)

    def append_messages(self, key: str, messages: Sequence[Message], *, run_id: int | None = None) -> list[int]:
        """Append several messages in one transaction, all or none (same checks as
        :meth:`append_message`). Returns their ids in order."""
        return self.store.append_messages(key, messages, run_id=run_id)

    def queue_request(self, key: str, content: str) -> int:
        return self.store.queue_request(key, content)

    def start_run(
        self,
        key: str,
        *,
        request_id: int | None = None,
        message: Message | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Start a run (``thread_busy`` if one is active), in one transaction with, when given, the
        thread's tool schemas and the message that opens the run (the user's request). Returns
        the run id, known to the caller only once it is committed."""
        with self.store.locked(key) as tx:
            if tools is not None:
                tx.configure(tools=tools)
            if message is not None:
                tx.append_message(message)
            return tx.start_run(request_id=request_id)

    def resume_run(self, key: str, run_id: int, answer: str) -> list[ToolCall]:
        """Continue a run that waits for the user, in one transaction: the run is running again and
        ``answer`` becomes the result of the first pending call (the one that asked), or a user
        message when no call is pending. Returns the calls still pending after it, in order."""
        with self.store.locked(key) as tx:
            tx.set_run_status(run_id, "running")
            pending = tx.unanswered_calls()
            if pending:
                call = pending[0]  # calls run in order: the first unanswered one asked
                tx.append_message(Message("tool", answer, tool_call_id=call.id, name=call.name), run_id=run_id)
            else:
                tx.append_message(Message("user", answer), run_id=run_id)
            return tx.unanswered_calls()

    def wait_for_user(self, key: str, run_id: int, *, call: ToolCall, question: str) -> None:
        """The run waits for the user's answer to ``question``, asked by ``call`` (one transaction
        with its ``waiting_for_user`` event)."""
        with self.store.locked(key) as tx:
            tx.set_run_status(run_id, "waiting_for_user")
            write_event(tx, WaitingForUserEvent(tool=call.name, call_id=call.id, question=question), run_id=run_id)

    def finish_run(self, key: str, run_id: int, *, failed: bool = False, error_code: str | None = None, error_message: str | None = None) -> None:
        """End a running run as completed, or as failed with the error that ended it."""
        self.store.finish_run(key, run_id, failed=failed, error_code=error_code, error_message=error_message)

    def interrupt_run(self, key: str, run_id: int) -> None:
        self.store.interrupt_run(key, run_id)

    def cancel_run(self, key: str, run_id: int) -> int:
        """Cancel a run; its calls that never ran get aborted results. Returns how many."""
        return self.store.cancel_run(key, run_id)

    def settle_run(
        self,
        key: str,
        run_id: int,
        status: str,
        *,
        aborted_text: str = ABORTED_TEXT,
        error_code: str | None = None,
        error_message: str | None = None,
        event: CancelledEvent | HarnessErrorEvent | None = None,
        trigger: str | None = None,
    ) -> int | None:
        """End a run as ``status`` (``cancelled`` / ``failed``) and answer every call it left
        unanswered with ``aborted_text`` (no orphan call is left), with, when ``event`` is given,
        that event (its ``aborted_calls`` set to that number) in the same transaction. Returns how
        many calls were answered, or None when the run could not take that status (already
        ended): then nothing is written."""
        with self.store.locked(key) as tx:
            try:
                aborted = tx.settle_run(run_id, status, aborted_text=aborted_text, error_code=error_code, error_message=error_message)
            except InvalidTransition:
                return None
            if event is not None:
                write_event(tx, replace(event, aborted_calls=aborted), trigger=trigger, run_id=run_id)
            return aborted

    # -- model requests and events ----------------------------------------------------------
    def record_model_request(
        self,
        key: str,
        *,
        provider: str,
        model: str,
        run_id: int | None = None,
        step: int = 0,
        estimated_tokens: int | None = None,
        threshold: int | None = None,
    ) -> int:
        """Record a request about to be sent (outcome ``pending``); its route becomes the thread's."""
        return self.store.record_model_request(
            key, provider=provider, model=model, run_id=run_id, step=step, estimated_tokens=estimated_tokens, threshold=threshold
        )

    def complete_model_request(
        self,
        key: str,
        request_id: int,
        *,
        outcome: str,
        reported_prompt_tokens: int | None = None,
        reported_completion_tokens: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        """Record how a request of thread ``key`` ended: ``ok`` (with the provider's usage),
        ``error`` or ``cancelled`` (with the error)."""
        with self.store.locked(key) as tx:
            tx.complete_model_request(
                request_id,
                outcome=outcome,
                reported_prompt_tokens=reported_prompt_tokens,
                reported_completion_tokens=reported_completion_tokens,
                error_code=error_code,
                error_message=error_message,
            )

    # -- the step driver's transactions (engine.step) ----------------------------------------
    def begin_step(self, key: str, run: RunState, *, provider: str, model: str, step: int,
                   messages: Sequence[Message] = (), record: bool = True) -> StepStart:
        """A model step's hot path in ONE transaction through the write door: ``messages`` not yet
        stored (their ``source_key`` asked of the database's unique key; one without a key is always
        new), the pressure check (:meth:`Compactor.check`, reading the snapshot in this transaction)
        and, when nothing needs compacting, the request record for ``(provider, model)``. When
        compaction is needed only the intake is committed (``StepStart.outcome`` is None): the
        driver then compacts outside the lock."""
        try:
            with self.store.locked(key) as tx:
                ids = self._intake(tx, messages, run.run_id)
                snap, routed = self.snapshots.pressure_read(key, reader=tx.thread_reader())
                try:  # measuring only (no I/O); a failure goes the slow path, which records it (§2.9)
                    checked = self.compactor.check(snap, routed, run)
                except Exception:  # noqa: BLE001 - the slow path measures again and records the failure (§2.9)
                    return StepStart(ids)
                if not isinstance(checked, Outcome):
                    return StepStart(ids)
                m = checked.measured
                if m is None or (m.policy.provider, m.policy.model) != (provider, model):
                    m = self.compactor.measure(snap, ephemeral=run.ephemeral, provider=provider, model=model)
                rid = None
                if record:
                    rid = tx.record_model_request(provider=provider, model=model, run_id=run.run_id, step=step,
                                                  estimated_tokens=m.tokens, threshold=m.policy.threshold)
                return StepStart(ids, checked, m, rid)
        except BaseException:
            self.snapshots.invalidate(key)  # it may have read this transaction's writes
            raise

    def finish_step(self, key: str, request_id: int | None, *, outcome: str, reported_prompt_tokens: int | None = None,
                    reported_completion_tokens: int | None = None, error_code: str | None = None, error_message: str | None = None,
                    messages: Sequence[Message] = (), run_id: int | None = None, event: Event | None = None,
                    trigger: str | None = None) -> list[int]:
        """How a model step ended, in one transaction: the request's outcome and usage, the
        response's ``messages`` not yet stored (as :meth:`begin_step` takes them in), and ``event``
        (``recovered``). ``request_id=None``: no request, the messages alone (an adapter storing
        what a framework hands back outside a model call). Returns the new ids."""
        with self.store.locked(key) as tx:
            if request_id is not None:
                tx.complete_model_request(request_id, outcome=outcome, reported_prompt_tokens=reported_prompt_tokens,
                                          reported_completion_tokens=reported_completion_tokens, error_code=error_code,
                                          error_message=error_message)
            ids = self._intake(tx, messages, run_id)
            if event is not None:
                write_event(tx, event, trigger=trigger, run_id=run_id)
            return ids

    @staticmethod
    def _intake(tx: Any, messages: Sequence[Message], run_id: int | None) -> list[int]:
        if not messages:
            return []
        keys = [m.source_key for m in messages if m.source_key is not None]
        stored = tx.stored_source_keys(keys) if keys else set()
        new: list[Message] = []
        for m in messages:
            if m.source_key is not None:
                if m.source_key in stored:
                    continue
                stored.add(m.source_key)
            new.append(m)
        return tx.append_messages(new, run_id=run_id) if new else []

    def last_completed_request(self, key: str) -> ModelRequest | None:
        """The newest request that completed (``ok``): its route is what pressure measures for."""
        return self.store.last_completed_request(key)

    def add_event(self, key: str, event: Event, *, trigger: str | None = None, run_id: int | None = None) -> int:
        """Record one typed event (:mod:`engine.events`); a trigger its kind is never written with
        raises ``ValueError``."""
        return write_thread_event(self.store, key, event, trigger=trigger, run_id=run_id)

    # -- compaction -----------------------------------------------------------------------
    def compact(self, key: str, *, summarizer: str | None = None, operator: str | None = None,
                instructions: str | None = None, reason: str | None = None) -> ManualResult:
        """Manual compaction (§4). Raises :class:`engine.errors.ThreadBusy` on a busy thread.
        ``summarizer="extractive"``: this one compaction with the offline extractive summarizer
        (offered when the configured model's summary was rejected); ``None``: the configured one.
        ``operator``: who asks (recorded in the event); ``None``: the ``operator.name`` setting."""
        if summarizer not in (None, "configured", "extractive"):
            raise EngineError(f"summarizer must be 'extractive' or None, not {summarizer!r}", code="invalid_argument")
        if operator is None:
            try:
                operator = UserSettings().value("operator.name") or None
            except EngineError:
                operator = None
        result = self.compactor.manual(key, summarizer=ExtractiveSummarizer() if summarizer == "extractive" else None, operator=operator,
                                       instructions=instructions, reason=reason, audit=self.store.operator())
        self.threads.remeasure([key], self._status)  # only after a compaction: a refused one writes nothing at all
        return result

    # -- revert / redo, the audit log, access (issue 23) ----------------------------------
    def revert(self, key: str, *, reason: str | None = None, display_name: str | None = None) -> RevertResult:
        """Revert the thread's last compaction of ours, or redo it when the last act was a revert
        (:meth:`engine.compactor.Compactor.revert`): under the row lock and the idle check
        (:class:`engine.errors.ThreadBusy`), a new generation, one event and one audit row.
        ``display_name``: ``None`` takes the ``operator.name`` setting."""
        if display_name is None:
            try:
                display_name = UserSettings().value("operator.name") or None
            except EngineError:
                display_name = None
        result = self.compactor.revert(key, display_name=display_name, reason=reason)
        self.threads.remeasure([key], self._status)
        return result

    def revert_target(self, key: str) -> RevertTarget:
        """What Revert on thread ``key`` would do now (read only, no lock): the summary card's button."""
        return _reverts.revert_target(self.store, key)

    def audit(
        self, *, thread: str | None = None, operator: str | None = None, actions: Sequence[str] | None = None, after_id: int | None = None, limit: int = 200
    ) -> list[AuditEntry]:
        """The audit log oldest first, ``limit`` rows after ``after_id`` (keyset), filtered by
        thread key, operator (role / OS user or display name) and actions."""
        return _reverts.read_audit(self.store, thread=thread, operator=operator, actions=actions, after_id=after_id, limit=limit)

    def audit_operators(self) -> list[str]:
        """The operators the audit log names (the Audit list's filter)."""
        return _reverts.audit_operators(self.store)

    def access(self) -> dict[str, Any]:
        """Whether this store can be written: ``{"writable": bool, "reason": None | "role" |
        "forced" | "file" | "schema", "words": str | None, "operator": str}``."""
        self.store.check_role()
        reason = self.store.read_only_reason if self.store.read_only else (None if self.store.writable else "schema")
        words = None if reason is None else (_access.read_only_words(reason) if reason != "schema" else "read-only: the schema is newer than this program")
        return {"writable": reason is None, "reason": reason, "words": words, "operator": self.store.operator()}

    def summarizer_info(self) -> dict[str, str | None]:
        """Who writes this service's summaries: ``summarizer`` (name) and ``summarizer_host``."""
        return provenance(self.summarizer)

    def reload_summarizer(self) -> dict[str, str | None]:
        """Build the summarizer again from the user's settings (after Preferences changed them);
        raises :class:`engine.summarizers.SummarizerError` (``config``) when they do not make one."""
        summarizer = make_summarizer()
        self.summarizer = summarizer
        self.compactor.summarizer = summarizer
        return provenance(summarizer)

    def compact_for_pressure(self, key: str, run: RunState, *, running_turn: bool = True) -> Outcome:
        """Pressure compaction before a model step: prune, then summarize if still at the threshold."""
        outcome = self.compactor.pressure(key, run, running_turn=running_turn)
        self.threads.remeasure([key], self._status)
        return outcome

    def recover_overflow(self, key: str, run: RunState, *, provider: str | None = None, model: str | None = None) -> Outcome:
        """Overflow recovery after the provider said the request is too long: prune without a
        threshold check, then one shrinking summary. ``Outcome.progressed`` says whether the
        surface changed (a retry only makes sense then)."""
        outcome = self.compactor.overflow(key, run, provider=provider, model=model)
        self.threads.remeasure([key], self._status)
        return outcome

    def measure(self, key: str, *, ephemeral: Sequence[Message] = (), provider: str | None = None, model: str | None = None) -> Measured:
        """The envelope the model would get now (from a fresh snapshot) and its token count, for the
        given route (default: the thread's)."""
        # the compactor measures against a window the thread's source reported (for its own model)
        return self.compactor.measure(self.snapshots.snapshot(key, with_busy=True), ephemeral=ephemeral, provider=provider, model=model)

    def visible_tokens(self, key: str, stored: Sequence[StoredMessage], offloads: Mapping[int, Offload]) -> VisibleTokens:
        """Token badges for ``stored`` (messages of thread ``key``), counted with the meter of the
        thread's routed model: each message as the model sees it (a pruned tool result as its
        preview, :func:`engine.surface.shown_message`), and the full original of each pruned one."""
        meter = default_meter(self.store.thread(key).model)
        shown = [shown_message(s.message, offloads.get(s.id)) for s in stored]
        seen = dict(zip((s.id for s in stored), meter.count_messages(shown)))
        pruned = [s for s, m in zip(stored, shown) if m is not s.message]
        original = dict(zip((s.id for s in pruned), meter.count_messages([s.message for s in pruned]))) if pruned else {}
        return VisibleTokens(seen=seen, original=original)

    # -- queries (the inspector) ------------------------------------------------------------
    def recount(self, key: str, *, batch: int = 2000, progress: Callable[[int], None] | None = None) -> int:
        """Keep a token count with every message of ``key`` that has none under the thread's count
        key (rows written before migration 0003, or counted for another model's encoding), so a
        cold status reads no text for them (``compaction recount``, docs/cli.md). A batch is read
        and counted outside the conversation lock (message rows never change) and its counts
        written through the door under it, so intake waits at most for one batch's write.
        ``progress(recounted)`` after each batch. Returns how many rows took a count."""
        meter = default_meter(self.store.thread(key).model)
        after: int | None = None
        done = 0
        while True:
            with thread_reading(self.store, key) as reader:
                rows = reader.counted_messages_after(after, key=meter.count_key, limit=batch)
            if not rows:
                return done
            after = rows[-1][0].id
            todo = [m for m, n in rows if n is None and isinstance(m, Message)]  # a row without a count comes whole
            if todo:
                counts = meter.count_messages(todo, cache=False)
                with self.store.locked(key) as tx:
                    done += tx.record_counts({m.id: n for m, n in zip(todo, counts) if m.id is not None}, meter.count_key)
            if progress is not None:
                progress(done)

    def list_threads(self, text: str | None = None, after_key: str | None = None, limit: int = 500) -> list[ThreadInfo]:
        return self.store.list_threads(text=text, after_key=after_key, limit=limit)

    def thread(self, key: str) -> ThreadInfo:
        return self.store.thread(key)

    def messages_page(self, key: str, *, after_id: int | None = None, before_id: int | None = None, limit: int = 500) -> list[StoredMessage]:
        return self.store.messages_page(key, after_id=after_id, before_id=before_id, limit=limit)

    def message_count(self, key: str) -> int:
        return self.store.message_count(key)

    def versions(self, key: str | None = None) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
        """Cheap marks of the thread list and of thread ``key`` (:meth:`Store.versions`): equal
        marks mean nothing a reader shows has changed; the inspector's live refresh reads these
        every few seconds and re-reads only what changed."""
        return self.store.versions(key)

    def compaction_state(self, key: str) -> CompactionState:
        return self.store.compaction_state(key)

    def history(self, key: str) -> list[HistoryRecord]:
        return self.store.history(key)

    def events(self, key: str, *, after_id: int | None = None, limit: int = 1000,
               kinds: Sequence[str] | None = None) -> list[CompactionEvent]:
        """The thread's events oldest first after ``after_id`` (only ``kinds`` when given)."""
        return self.store.events(key, after_id=after_id, limit=limit, kinds=kinds)

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

    def status(self, key: str, *, remember: bool = True) -> PressureStatus:
        """The pressure of a thread for its next turn.

        Measured incrementally (:class:`engine.snapshots.SnapshotCache`, shared with the pressure
        path): each call reads the thread's key (state, configuration, busy reason) and only the
        messages appended since the last call, in one read transaction, so an unchanged thread
        costs a few small queries and one new message one count. A compaction or prune (by any
        process) changes the key and the thread is measured again, streamed in pages: a thread of
        any length is measured in bounded memory. ``progress(messages_counted)``, when given, is
        called after each page of such a cold measurement. ``remember`` (default): store the figures
        with the thread for the thread list (``svc.threads``; once per measured state, never waiting
        for a writer); a read-only command (``compaction status``) passes False and writes nothing."""
        return self._status(key, remember=remember)

    def _status(self, key: str, progress: Any = None, *, remember: bool = True) -> PressureStatus:
        """The one place a thread's pressure figures are made (``compaction status``, the gauge,
        the header and the list read this). An imported thread our engine has not compacted is
        measured as its source ran it (:class:`engine.snapshots.SourceView`: after the source's
        last recorded compaction, anchored to its last recorded request), with our engine's
        measure of the whole history beside it (``engine_tokens``); its window is never the
        configured fallback (``window_unknown`` instead, :meth:`PolicySet.resolve_known`)."""
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
        if policy is None:
            name = SOURCE_NAMES.get(head.source_format or "", head.source_format)
            what = f"model {head.model}" if head.model else "no model"
            window: dict[str, Any] = {"threshold": 0, "context_window": 0, "window_source": "unknown",
                      "window_detail": f"{name} names {what} and reported no context window: window unknown (this database's "
                                       f"fallback window is for its own threads, not an imported session)"}
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

    def status_with_progress(self, key: str, progress: Any) -> PressureStatus:
        """:meth:`status`, calling ``progress(messages_counted)`` after each page of a cold
        measurement (a huge thread measured for the first time, or after a compaction)."""
        return self._status(key, progress)

    def pressure_history(self, key: str) -> list[PressurePoint]:
        """Every recorded model request with the compaction (if any) that happened just before it.

        An imported request (``origin="imported"``) has no estimate of ours: its point is the
        prompt size the source reported, against the threshold in force for the thread now (the
        source's reported window included), and ``compaction="recorded"`` marks a compaction the
        source recorded since its previous request."""
        requests = self.store.model_requests(key, limit=100_000)
        events = [e for e in self.store.events(key, limit=100_000) if e.kind in (EventKind.PRUNE, EventKind.SUMMARY)]
        recorded: list[int] = []
        imported_threshold: int | None = None
        if any(r.origin == "imported" for r in requests):
            info = self.store.thread(key)
            recorded = sorted(c.after_message_id or 0 for c in self.store.source_compactions(key))
            known = self.policies.resolve_known(info.provider, info.model, reported_window=info.reported_context_window,
                                                reported_by=info.source_format)
            imported_threshold = known.threshold if known is not None else None  # no window known: no threshold line
        return history.pressure_points(requests, events, recorded, imported_threshold)

    def source_compactions(self, key: str) -> list[SourceCompaction]:
        """The compactions the thread's source recorded (Claude Code, Codex, OpenHands), in order;
        empty for a thread written live. Shown as the source's boundaries, never applied."""
        return self.store.source_compactions(key)

    # -- import ---------------------------------------------------------------------------
    def imported_sources(self) -> list[tuple[str, str, datetime | None]]:
        """(source file as recorded, thread key, last written) of every imported thread (a bulk
        import's resume and discovery compare the files on disk with these)."""
        return self.store.imported_sources()

    def import_file(self, path: str | os.PathLike[str], *, format: str | None = None, thread: str | None = None) -> list[ImportReport]:
        """Import one transcript file or directory (format detected from its content, or
        ``format``): one report per session (a Claude Code session comes with its sub-agents),
        each written in one transaction, idempotent by source keys (docs/import.md). Raises
        :class:`engine.importers.ImportFormatError` (one line) when it is not that format."""
        reports = import_path(self.store, Path(path), format=format, thread=thread)
        self.threads.remeasure([r.thread for r in reports if r.created or r.messages or r.compactions or r.requests], self._status)
        self.snapshots.invalidate()  # not needed for correctness (keys are read); frees memory
        return reports

    def follow_file(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        thread: str | None = None,
        poll_seconds: float = 0.5,
        stop: Any = None,
        seconds: float | None = None,
        on_reports: Any = None,
    ) -> list[ImportReport]:
        """Tail a growing Claude Code / Codex JSONL file, appending entries as they are written,
        until ``stop`` (a ``threading.Event``) is set, ``seconds`` passed, or SIGINT / SIGTERM.
        ``on_reports(reports)`` is called after each pass that wrote something."""
        return follow_path(self.store, Path(path), format=format, thread=thread, poll_seconds=poll_seconds, stop=stop,
                           seconds=seconds, on_reports=on_reports)

    # -- discovery (docs/import.md#discovery) --------------------------------------------
    def discover_sessions(self, folders: Sequence[str] = (), *, home: str | None = None) -> list[DiscoveredSession]:
        """The sessions on this machine (each tool's default locations under ``home``, default the
        user's, and ``folders``), newest first, each marked with the threads of this database
        imported from it (:mod:`engine.discovery`)."""
        return discover(folders, home=home, imported=self.store.imported_sources())

    def follow_sessions(self, folders: Sequence[str] = (), *, home: str | None = None, on_reports: Any = None,
                        on_error: Any = None, debounce_ms: int = 400) -> SessionFollower:
        """Follow all: import new and growing sessions under the default locations and ``folders``
        into this database as they change, on a watcher thread of its own (started; ``stop()`` it).
        ``on_reports(reports)`` / ``on_error(path, exc)`` are called on that thread."""
        return SessionFollower(store_writer(self.store), folders=folders, home=home, on_reports=on_reports,
                               on_error=on_error, debounce_ms=debounce_ms).start()

    def close_dangling_calls(self, key: str, reason: str = "closed by the inspector") -> int:
        """On an idle thread (``thread_busy`` otherwise), close every call after the boundary that
        has no result with a ``missing_result`` marker. Returns how many were closed."""
        with self.store.locked(key) as tx:
            return tx.close_dangling_calls(reason)

    def replay(self, key: str) -> list[Episode]:
        """Every overflow-recovery episode of the thread, step by step, from recorded events."""
        return build_episodes(self.store, key)

    # -- what compaction kept and dropped (docs/contract.md, issue #14) -------------------
    def request_envelopes(self, key: str) -> RequestEnvelopes:
        """The envelope the model received at every recorded request of the thread (lazy sequence)."""
        return history.request_envelopes(self.store, key)

    def thread_history(self, key: str) -> ThreadHistory:
        """The thread's compactions read once (cached while the thread is unchanged): diffs and
        costs computed from it on demand."""
        return history.read_history(self.store, key)

    def compaction_diff(self, key: str, compaction: int | None = None) -> CompactionDiff:
        """Before / after of the thread's ``compaction``-th compaction (1-based; None: the latest)."""
        return history.compaction_diff(self.store, key, compaction)

    def compaction_history(self, key: str) -> list[CompactionEntry]:
        """Every compaction of the thread (ours and the source's), with dropped specifics and cost."""
        return history.compaction_history(self.store, key)

    def export_history(self, key: str, format: str = "md") -> str:
        """The compaction history as Markdown (``md``) or JSON (``json``)."""
        return history.export_history(self.store, key, format)

    def whatif(self, key: str, settings: Mapping[str, Any], *, progress: Any = None, should_stop: Any = None) -> WhatIfComparison:
        """Replay the thread in a scratch copy under ``settings`` and compare with what happened."""
        return whatif.run_whatif(self.store, key, settings, policies=self.policies, progress=progress, should_stop=should_stop)

    def whatif_sweep(self, key: str, parameter: str, values: Sequence[Any], *, settings: Mapping[str, Any] | None = None,
                     progress: Any = None, should_stop: Any = None) -> WhatIfSweep:
        """:meth:`whatif` for each of ``values`` of one ``parameter``."""
        return whatif.run_sweep(self.store, key, parameter, values, policies=self.policies, settings=settings,
                                progress=progress, should_stop=should_stop)

    # -- steering: pins, the thread's own policy and instructions (each writes one audit row) --
    def operator(self) -> str:
        """Who acts on this store (PostgreSQL ``current_user``, the OS user on SQLite)."""
        return self.store.operator()

    @staticmethod
    def _display_name(name: str | None) -> str | None:
        if name is not None:
            return name or None
        try:
            return UserSettings().value("operator.name") or None
        except EngineError:
            return None

    def pins(self, key: str) -> list[PinInfo]:
        """The pinned messages of thread ``key`` (a pinned round: one entry per message)."""
        return self.store.pins(key)

    def pin(self, key: str, message_id: int, *, reason: str | None = None, display_name: str | None = None, unpin: bool = False) -> PinChange:
        """Pin (or ``unpin``) a message of thread ``key`` with its whole tool round: it is never
        pruned or summarized and stays verbatim in its place (docs/contract.md, Pins). One audit
        row (``pin`` / ``unpin``) in the same transaction when something changed."""
        action = "unpin" if unpin else "pin"
        who = self.store.operator()
        with self.store.locked(key) as tx:
            before = tx.pinned_ids()
            covered = tx.pin_round(message_id)
            changed = tx.unpin(message_id) if unpin else tx.pin(message_id, operator=who, reason=reason)
            audit_id = None
            if changed:
                audit_id = tx.record_audit(action, operator=who, display_name=self._display_name(display_name), reason=reason,
                                           before={"message_id": int(message_id), "pinned": before},
                                           after={"message_id": int(message_id), "pinned": tx.pinned_ids(), "changed": changed})
            version = tx.state().pins_version
        self.snapshots.invalidate(key)
        return PinChange(key, int(message_id), action, tuple(covered), tuple(changed), version, audit_id)  # type: ignore[arg-type]

    def unpin(self, key: str, message_id: int, *, reason: str | None = None, display_name: str | None = None) -> PinChange:
        return self.pin(key, message_id, reason=reason, display_name=display_name, unpin=True)

    def thread_policy(self, key: str) -> ThreadPolicyView:
        """Thread ``key``'s effective policy, each value with where it comes from (the thread, its
        model route, the store default), its window and standing instructions."""
        with self.store.reading(key) as reader:
            head = reader.head(with_busy=False, with_offloads=False, with_request=False)
        own = dict(head.thread_policy or {})
        reported = head.reported_context_window
        try:
            r: ResolvedPolicy | None = self.policies.resolve(head.provider, head.model, reported_window=reported,
                                                             reported_by=head.source_format if reported else None, thread=own)
        except PolicyError:
            r = None
        policy = r.policy if r is not None else self.policies.default.with_overrides(thread_overrides(own))
        values = {f: getattr(policy, f) for f in sorted(self.policies.origins(head.provider, head.model, own))}
        origins = dict(self.policies.origins(head.provider, head.model, own))
        if r is not None:
            values["context_window"] = r.context_window
            origins["context_window"] = {"thread": "thread", "override": "model route"}.get(r.window_source, r.window_source)
        instructions = own.get(THREAD_INSTRUCTIONS)
        return ThreadPolicyView(key, head.provider, head.model, values, origins, r.context_window if r else None, r.window_source if r else None,
                                r.threshold if r else None, r.target_tokens if r else None, r.retained_tail_tokens if r else None,
                                {k: v for k, v in own.items() if k != THREAD_INSTRUCTIONS}, instructions if isinstance(instructions, str) else None)

    def set_thread_policy(self, key: str, values: Mapping[str, Any] | None = None, *, unset: Sequence[str] = (),
                          reason: str | None = None, display_name: str | None = None) -> ThreadPolicyView:
        """Set (``values``) or remove (``unset``) policy values for thread ``key`` only
        (``threshold_ratio``, ``threshold_tokens``, ``context_window``, ``retained_tail_ratio``, any
        policy key; ``instructions``: the standing compaction instructions, "" or None removes
        them). Refused (``invalid_policy``, nothing written) when the result cannot be used. One
        audit row (``policy``, or ``instructions`` when only they changed)."""
        who = self.store.operator()
        with self.store.locked(key) as tx:
            old = tx.thread_policy()
            new = dict(old)
            for k in unset:
                new.pop(k, None)
            for k, v in (values or {}).items():
                if v is None or (k == THREAD_INSTRUCTIONS and isinstance(v, str) and not v.strip()):
                    new.pop(k, None)
                else:
                    new[k] = v
            if THREAD_INSTRUCTIONS in new and not isinstance(new[THREAD_INSTRUCTIONS], str):
                raise PolicyError("instructions must be text")
            own = thread_overrides(new)  # unknown keys, bad values: PolicyError
            conv = tx.conv
            reported = conv.reported_context_window
            r = self.policies.resolve(conv.provider, conv.model, reported_window=reported, reported_by=conv.source_format if reported else None, thread=own)
            _ = r.threshold, r.target_tokens, r.retained_tail_tokens  # raise PolicyError if unusable
            if new != old:
                tx.set_thread_policy(new, operator=who)
                only_text = {k for k in set(old) | set(new) if old.get(k) != new.get(k)} == {THREAD_INSTRUCTIONS}
                tx.record_audit("instructions" if only_text else "policy", operator=who, display_name=self._display_name(display_name),
                                reason=reason, before=old, after=new)
        self.snapshots.invalidate(key)
        return self.thread_policy(key)

    def set_instructions(self, key: str, instructions: str | None, *, reason: str | None = None, display_name: str | None = None) -> ThreadPolicyView:
        """The thread's standing compaction instructions (None or "" removes them): every later
        compaction of the thread, automatic or manual, follows them unless given its own."""
        return self.set_thread_policy(key, {THREAD_INSTRUCTIONS: instructions}, reason=reason, display_name=display_name)

    # -- configuration --------------------------------------------------------------------
    def set_policy(self, data: Mapping[str, Any]) -> None:
        """Validate and store the store-wide policy (shared by every agent and inspector).

        Every (provider, model) it names, and the default, must resolve: a policy that cannot be
        used (e.g. a retained tail larger than the target) is refused before anything is stored."""
        policies = load_policies(self.store, data)
        for provider, model in [(None, None), *policies.overrides]:
            r = policies.resolve(provider, model)
            _ = r.threshold, r.target_tokens, r.retained_tail_tokens  # raise PolicyError if unusable
        self.store.put_setting(POLICY_SETTING, dict(data))
        self.policies = policies



__all__ = ["DiscoveredSession", "EngineError", "ImportReport", "SessionFollower", "discover", "RunState", "Service", "WhatIfComparison", "WhatIfRun", "WhatIfSweep", "data_dir", "default_database_url", "open_service"]
