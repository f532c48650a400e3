# Over 800 lines: every frozen record the service returns, in one module the inspector may import (an import contract allows engine.core.views); the fleet records (issue 26) and the source-format table could move to modules of their own once that contract names them.
"""Read models: the plain, frozen records that ``engine.service`` queries return.

The inspector (and any agent platform) only ever sees these, never ORM rows or SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Mapping

from .messages import Message

if TYPE_CHECKING:
    from .specifics import DroppedSpecifics

BusyReason = Literal["running", "waiting_for_user", "queued"]
RunStatus = Literal["queued", "running", "waiting_for_user", "completed", "failed", "cancelled"]

ACTIVE_RUN_STATUSES: tuple[str, ...] = ("running", "waiting_for_user")


@dataclass(frozen=True, slots=True)
class SourceFormat:
    """How an imported thread's format is named: ``name`` alone (a menu, a chart's series, the
    thread header: ``Agents SDK``), ``phrase`` inside a sentence (``the Agents SDK session names no
    model…``), ``badge`` in the thread list's Source column (``Claude``) and ``short``, the badge
    in a narrow list (``CC``)."""

    name: str
    phrase: str
    badge: str
    short: str


#: every transcript format an importer writes (``engine.importers.*.FORMAT``), by that format: the
#: one table the CLI and the inspector name a thread's source from (a test checks every importer has
#: its row). ``cline`` covers the Cline, Roo Code and Kilo Code task folders (the thread's extra.tool says which).
SOURCE_FORMATS: Mapping[str, SourceFormat] = {
    "claude-code": SourceFormat("Claude Code", "Claude Code", "Claude", "CC"),
    "codex": SourceFormat("Codex", "Codex", "Codex", "Cx"),
    "openai-chat": SourceFormat("OpenAI chat", "the OpenAI chat log", "OpenAI", "OAI"),
    "openai-responses": SourceFormat("OpenAI Responses", "the OpenAI Responses log", "OpenAI", "OAI"),
    "anthropic": SourceFormat("Anthropic", "the Anthropic API", "Anthropic", "Ant"),
    "agents-sdk": SourceFormat("Agents SDK", "the Agents SDK session", "Agents SDK", "SDK"),
    "openhands": SourceFormat("OpenHands", "OpenHands", "OpenHands", "OH"),
    "openhands-eval": SourceFormat("OpenHands eval", "the OpenHands evaluation output", "OH eval", "OHe"),
    "swe-agent": SourceFormat("SWE-agent", "SWE-agent", "SWE-agent", "SWE"),
    "cline": SourceFormat("Cline", "Cline", "Cline", "Cl"),
    "opencode": SourceFormat("opencode", "opencode", "opencode", "oc"),
    "gemini-cli": SourceFormat("Gemini CLI", "Gemini CLI", "Gemini", "Gm"),
    "aider": SourceFormat("Aider", "Aider", "Aider", "Ai"),
}

#: the transcript formats by the phrase that names their tool in a sentence (``SourceFormat.phrase``)
SOURCE_NAMES: Mapping[str, str] = {fmt: f.phrase for fmt, f in SOURCE_FORMATS.items()}


def source_format_name(fmt: str | None) -> str:
    """``Claude Code`` for ``claude-code`` (``SourceFormat.name``); a format the table does not
    know reads as written; ``""`` for a thread written live (no source)."""
    if not fmt:
        return ""
    known = SOURCE_FORMATS.get(fmt)
    return known.name if known is not None else fmt


@dataclass(frozen=True, slots=True)
class LockedThread:
    """The locked thread's own columns as the write door's transaction sees them
    (:meth:`engine.store.door.Locked.thread`): a copy, read under the lock; the door's later writes
    in the same transaction show in the next call, never in this record."""

    id: int
    key: str
    title: str
    provider: str | None
    model: str | None
    system_prompt: str
    #: the transcript format the thread was imported from; None: written live
    source_format: str | None
    reported_context_window: int | None
    message_count: int


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """One conversation, as the threads list shows it."""

    id: int
    key: str
    title: str
    agent: str | None
    provider: str | None
    model: str | None
    message_count: int
    generation: int
    compact_count: int
    boundary: int | None
    busy_reason: BusyReason | None
    created_at: datetime
    updated_at: datetime
    #: the transcript format the thread was imported from (``claude-code``, ``codex``, …); None: written live
    source_format: str | None = None
    #: imported threads: the file read, the source's session id, its working directory, the
    #: context window the source reported, the parent session (a sub-agent) and its thread key
    source_file: str | None = None
    source_session_id: str | None = None
    source_cwd: str | None = None
    reported_context_window: int | None = None
    parent_source_session_id: str | None = None
    parent_thread: str | None = None
    #: the compactions the source itself recorded (summaries and prunes, as the import reported
    #: them); ``compact_count`` counts them too, beside our engine's own
    source_compact_count: int = 0
    #: set when the thread's own rows cannot be read (``corrupt_row`` …): the reason in words; the
    #: other fields are then placeholders (0, empty, the epoch) and the thread cannot be opened
    error: str | None = None
    #: the kept tokens (what the next request holds: ``PressureStatus.tokens``), its threshold and
    #: context window as last stored with the thread (docs/schema.md, migration 0006); None: never
    #: measured. For a thread whose status was just computed they equal the status's figures.
    kept_tokens: int | None = None
    threshold: int | None = None
    window: int | None = None

    @property
    def busy(self) -> bool:
        return self.busy_reason is not None

    @property
    def pressure(self) -> float | None:
        """kept / threshold (the same ratio as ``PressureStatus.pressure_ratio``); None when unknown."""
        if self.kept_tokens is None or not self.threshold:
            return None
        return self.kept_tokens / self.threshold

    @property
    def imported(self) -> bool:
        return self.source_format is not None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A persisted message with what the store knows about it."""

    message: Message
    conversation_id: int
    created_at: datetime
    #: set when the tool result was pruned: the offload record's sha256 (the surface shows a preview)
    offload_sha256: str | None = None

    @property
    def id(self) -> int:
        assert self.message.id is not None
        return self.message.id


@dataclass(frozen=True, slots=True)
class Offload:
    """A tool result whose full text lives in the Workdir; the model sees ``preview``. The one
    offload record type: what a prune records and what the store reads back."""

    message_id: int
    tool_name: str
    path: str
    sha256: str
    preview: str
    original_tokens: int
    preview_tokens: int
    #: the generation the prune created; ``None`` on an offload not recorded yet (the input of
    #: ``Locked.record_prune``, which sets it)
    generation: int | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CompactionState:
    """The persisted compaction state of one conversation."""

    conversation_id: int
    boundary: int | None = None
    summary: str | None = None
    summary_tokens: int = 0
    generation: int = 0
    boundary_hash: str | None = None
    compact_count: int = 0
    updated_at: datetime | None = None
    #: bumped by every pin / unpin / thread-policy change (``compaction_state.pins_version``): part
    #: of the key of every cached snapshot, and compared by the summary's compare-and-swap
    pins_version: int = 0


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """One append-only compaction history record (prune, summary or manual compaction)."""

    id: int
    conversation_id: int
    kind: Literal["prune", "summary", "manual"]
    trigger: str
    generation_before: int
    generation_after: int
    boundary_before: int | None
    boundary_after: int | None
    summary: str | None
    pruned_message_ids: tuple[int, ...]
    tokens_before: int | None
    tokens_after: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """One recorded step (kinds and payloads: docs/events.md). ``data`` holds the kind-specific details."""

    id: int
    conversation_id: int
    run_id: int | None
    kind: str
    trigger: str | None
    created_at: datetime
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunInfo:
    id: int
    conversation_id: int
    status: RunStatus
    created_at: datetime
    finished_at: datetime | None = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    id: int
    conversation_id: int
    run_id: int | None
    step: int
    provider: str
    model: str
    estimated_tokens: int | None
    threshold: int | None
    reported_prompt_tokens: int | None
    reported_completion_tokens: int | None
    outcome: str
    error_code: str | None
    error_message: str | None
    created_at: datetime
    #: what the provider reported beside the prompt (parts of ``reported_prompt_tokens``)
    reported_cache_read_tokens: int | None = None
    reported_cache_creation_tokens: int | None = None
    reported_reasoning_tokens: int | None = None
    response_id: str | None = None
    context_window: int | None = None
    #: ``engine`` (sent by our harness or a platform) or ``imported`` (a source's usage record)
    origin: Literal["engine", "imported"] = "engine"
    #: imported: the (last) message that response produced
    message_id: int | None = None


@dataclass(frozen=True, slots=True)
class SourceCompaction:
    """A compaction the source itself recorded (not one of ours): Claude Code ``compact_boundary``
    + its summary, a Claude Code microcompaction (``kind="prune"``), Codex ``compacted``,
    OpenHands ``Condensation``. Shown in the timeline as the source's boundary; never applied."""

    id: int
    conversation_id: int
    source: str  # the format that recorded it (``claude-code``, ``codex``, ``openhands`` …)
    kind: Literal["summary", "prune"]
    trigger: str | None  # ``auto`` / ``manual`` … as the source wrote it
    tokens_before: int | None
    summary: str | None  # None when the source kept it only encrypted
    #: the compaction happened right after this message (None: before the first message)
    after_message_id: int | None
    #: the messages it replaced (first and last id; None when none of them were imported)
    replaced_first_id: int | None
    replaced_last_id: int | None
    source_id: str
    source_timestamp: str | None
    #: what the source put back besides the summary (Codex ``replacement_history``), as
    #: ``{"role", "text", "meta_kind"?}`` objects
    kept: tuple[Mapping[str, Any], ...] = ()
    #: source ids of what was forgotten (OpenHands event ids, Claude Code tool-use ids)
    forgotten: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PressureStatus:
    """The pressure of a thread for the next turn (CLI ``compaction status``, the gauge).

    ``tokens`` is what the next request would hold. For a thread written live (or an imported one
    our engine has compacted) that is our envelope (``basis == "engine"``). For an imported thread
    our engine has not compacted it is what the *source* would send next (``basis == "source"``):
    its last recorded request's prompt plus what followed, or, when the source compacted after its
    last recorded request, its summary plus what it kept and what followed (``source_detail`` says
    which); our engine's measure of the whole imported history is then ``engine_tokens``.
    ``window_source == "unknown"`` (an imported thread whose model no catalogue knows and whose
    source reported no window): ``threshold`` and ``context_window`` are 0 and the state is
    ``window_unknown``, never an alarm."""

    thread: str
    tokens: int
    threshold: int
    context_window: int
    breakdown: Mapping[str, int]
    boundary: int | None
    generation: int
    compact_count: int
    busy_reason: BusyReason | None
    anchored_tokens: int | None = None
    #: where the context window came from: ``thread`` / ``override`` / ``reported`` / ``catalog`` /
    #: ``assumed``; ``recorded``: this process would only assume the window of a thread written live,
    #: and ``threshold`` is the one its last model request recorded (the agent's policy;
    #: ``context_window`` the window that request recorded, 0 when none), ``unknown``: see above
    window_source: str | None = None
    #: what matched (catalogue entry, reporting source) in words, for the status line and the gauge
    window_detail: str | None = None
    #: what ``tokens`` measures: ``engine`` (our envelope) or ``source`` (what the imported source
    #: would send next, after its last recorded compaction)
    basis: Literal["engine", "source"] = "engine"
    #: ``basis == "source"``: our engine's measure of the thread (the whole imported history)
    engine_tokens: int | None = None
    #: ``basis == "source"``: how the source's figure was made, in words
    source_detail: str | None = None
    #: compactions the source recorded (included in ``compact_count``)
    source_compact_count: int = 0
    #: the prompt size the thread's last recorded request reported (the chart's last point), if any
    recorded_prompt_tokens: int | None = None
    #: an imported thread: the format it was read from (``SOURCE_NAMES`` names its tool)
    source_format: str | None = None
    #: an imported thread: usage its source recorded for the whole session, in words (SWE-agent
    #: ``model_stats``), when it recorded no per-request usage to anchor on
    recorded_usage: str | None = None

    @property
    def window_known(self) -> bool:
        return self.window_source != "unknown"

    @property
    def pressure_ratio(self) -> float:
        return self.tokens / self.threshold if self.threshold else 0.0

    @property
    def hint(self) -> bool:
        """85% of the threshold: display only, never triggers anything. 84.9% → no hint, 85.0% → hint."""
        return self.threshold > 0 and self.tokens * 1000 >= self.threshold * 850

    @property
    def state(self) -> Literal["below", "hint", "over_threshold", "over_window", "window_unknown"]:
        """The one rule for what the CLI and the gauge say: no window known (an imported thread
        whose model nobody catalogued: no threshold to compare with); more tokens than the context
        window holds; at or over the threshold (the next model step compacts first); the hint band
        (85% up to the threshold); below it. Whether compaction *can* help is the caller's to add."""
        if not self.window_known:
            return "window_unknown"
        if self.context_window > 0 and self.tokens > self.context_window:
            return "over_window"
        if self.threshold > 0 and self.tokens >= self.threshold:
            return "over_threshold"
        return "hint" if self.hint else "below"

    @property
    def busy(self) -> bool:
        return self.busy_reason is not None


@dataclass(frozen=True, slots=True)
class PressurePoint:
    """One recorded model request, for the per-turn pressure chart."""

    request_id: int
    run_id: int | None
    step: int
    tokens: int
    threshold: int | None
    #: "prune" / "summary" / "manual" / "overflow" when one of ours happened before it; "recorded"
    #: when the imported source recorded one of its own since its previous request
    compaction: str | None
    created_at: datetime
    #: ``imported``: a source's usage record; ``tokens`` is then the prompt size the source reported
    origin: str = "engine"
    reported_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ManualResult:
    """Result of a manual compaction (CLI ``compaction compact --json``)."""

    status: Literal["completed", "no_op"]
    reason: str | None
    before_tokens: int
    after_tokens: int
    compacted_messages: int
    boundary: int | None
    generation: int
    summarizer_calls: int
    #: the compaction ran but the thread is still at or over its threshold (``note`` says why)
    still_over_threshold: bool = False
    note: str | None = None


@dataclass(frozen=True, slots=True)
class RevertResult:
    """Result of ``compaction revert`` (``Service.compaction.revert``): a revert or, of a revert, a redo."""

    action: Literal["revert", "redo"]
    thread: str
    generation_before: int
    generation_after: int
    boundary_before: int | None
    boundary_after: int | None
    #: the compaction history rows undone (revert) or applied again (redo)
    history_ids: tuple[int, ...]
    #: tool results shown verbatim again (revert) or as their previews again (redo)
    results: tuple[int, ...]
    tokens_before: int
    tokens_after: int
    operator: str
    audit_id: int


@dataclass(frozen=True, slots=True)
class RevertTarget:
    """What ``Revert`` on a thread would do now (the summary card's button): ``action`` is
    ``revert``, ``redo`` or ``None`` with ``why`` in words (``code`` the error it would raise)."""

    action: Literal["revert", "redo"] | None
    history_ids: tuple[int, ...] = ()
    code: str | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action (``audit_log``): who, when, why, and the state before and after."""

    id: int
    thread: str | None
    action: str
    operator: str
    display_name: str | None
    reason: str | None
    at: datetime
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """One step of an overflow-recovery episode, read back from recorded events."""

    kind: str  # provider_error / prune / summary / summary_rejected / retry / gave_up / cancelled / recovered
    attempt: int
    error_code: str | None = None
    error_message: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    generation_before: int | None = None
    generation_after: int | None = None
    no_progress: bool = False
    #: the surface the model would have seen after this step (rebuilt from history), if known
    surface: tuple[Message, ...] | None = None
    summary: str | None = None
    event_id: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Episode:
    """One overflow-recovery episode of a run."""

    run_id: int | None
    outcome: Literal["recovered", "gave_up", "cancelled"]
    steps: tuple[ReplayStep, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything compaction needs about a thread, read in one transaction."""

    thread: str
    conversation_id: int
    system_prompt: str
    tools: tuple[Mapping[str, Any], ...]
    provider: str | None
    model: str | None
    state: CompactionState
    #: persisted messages after the boundary, in physical order (original content)
    messages: tuple[Message, ...]
    #: offload records by message id (for every pruned tool result of the thread)
    offloads: Mapping[int, Offload]
    #: the user's current request (``engine.core.units.current_request``), even before the boundary
    current_request: Message | None
    busy_reason: BusyReason | None
    #: imported threads: the context window the source reported, and the source's format (its
    #: reporter), for ``PolicySet.resolve(..., reported_window=, reported_by=)``
    reported_context_window: int | None = None
    source_format: str | None = None
    #: ids of the pinned messages (as stored; ``engine.core.units.pinned_rounds`` widens them to their
    #: tool rounds) and the pinned messages at or before the boundary, in id order: they stay on
    #: the surface verbatim after the summary (read only when ``state.pins_version`` > 0)
    pins: frozenset[int] = frozenset()
    pinned: tuple[Message, ...] = ()
    #: this thread's own policy overrides (``thread_policies.overrides``), None when it has none
    thread_policy: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class VisibleTokens:
    """Token counts of stored messages for the inspector's badges (``Service.compaction.visible_tokens``)."""

    #: message id -> tokens of the message as the model sees it (a pruned result: its preview)
    seen: dict[int, int]
    #: message id -> tokens of the full original, for each pruned message only
    original: dict[int, int]


# --- issue #14: compaction history (engine/history/ builds these) -----------------------------


@dataclass(frozen=True, slots=True)
class RequestEnvelope:
    """One recorded model request of a thread, replayed: the envelope the model received.

    ``index`` is the request's 0-based position among the thread's recorded requests (id order).
    ``messages`` is the model-visible surface at that request (pruned results as previews, the
    synthetic user message, the ephemeral notes last); ``summary`` the summary in force.
    ``tokens`` is the meter's count of the whole envelope (system prompt, tools, summary, surface),
    ``breakdown`` its categories (``engine.core.meter.CATEGORIES``). ``exact`` is True when the rebuilt
    envelope is known to be the one sent (the engine recorded its estimate and the count matches
    it); False for imported requests (the source's own prompt is not stored) and on a mismatch,
    which ``note`` explains."""

    index: int
    request_id: int | None
    run_id: int | None
    step: int | None
    created_at: datetime | None
    generation: int
    boundary: int | None
    summary: str | None
    messages: tuple[Message, ...]
    pruned_ids: tuple[int, ...]
    ephemeral: tuple[Message, ...]
    tokens: int
    breakdown: Mapping[str, int]
    reported_prompt_tokens: int | None
    context_window: int | None
    threshold: int | None
    outcome: str | None
    #: ``engine`` or ``imported`` (``ModelRequest.origin``)
    origin: str
    exact: bool
    note: str | None = None
    #: the engine's own estimate recorded with the request (``ModelRequest.estimated_tokens``)
    estimated_tokens: int | None = None
    #: the newest persisted message the envelope holds
    last_message_id: int | None = None
    #: overflow recovery: the episode step (``ReplayStep.kind``) this request retried after, if any
    episode_step: str | None = None


#: token categories of :class:`CompactionDiff` ``tokens_before`` / ``tokens_after``
DIFF_CATEGORIES: tuple[str, ...] = ("system", "tools", "summary", "messages", "previews", "total")


@dataclass(frozen=True, slots=True)
class CompactionDiff:
    """One compaction, before and after: what went into the summary, the summary, what stayed, what
    was pruned to a preview, and tokens by category (:data:`DIFF_CATEGORIES`) on both sides.

    ``index`` is the 1-based ordinal in the thread's compaction list (engine history records and the
    source's recorded compactions, in time order). ``origin`` is ``engine`` or the source's format."""

    index: int
    kind: str  # summary / manual / prune
    trigger: str | None
    origin: str
    created_at: datetime | None
    generation_before: int | None
    generation_after: int | None
    previous_summary: str | None
    summarized: tuple[Message, ...]
    summary: str | None
    kept: tuple[Message, ...]
    pruned: tuple[Offload, ...]
    tokens_before: Mapping[str, int]
    tokens_after: Mapping[str, int]
    dropped: "DroppedSpecifics | None"
    note: str | None = None
    #: the surface the model saw right before / right after (``before`` includes what was summarized)
    before: tuple[Message, ...] = ()
    after: tuple[Message, ...] = ()
    #: the compaction's history record id (engine) or source compaction id
    record_id: int | None = None
    #: a source's prune (Claude Code microcompaction): the tool results it cleared (no preview kept)
    cleared: tuple[Message, ...] = ()
    #: THE tokens before / after of this compaction (what every panel, the CLI and the export show):
    #: the envelope the compactor measured when it ran, or the source's reported figures; when
    #: neither was recorded, the rebuilt count (``tokens_before["total"]``). ``measured_by``:
    #: ``compactor``, ``source`` or ``rebuilt``. The categories above are always the rebuilt count.
    measured_before: int | None = None
    measured_after: int | None = None
    measured_by: str | None = None
    #: who wrote the summary (``engine.core.events.written_by``: "model gpt-4o-mini at api.openai.com",
    #: "extractive summarizer (offline)"); None for a prune, a source's compaction, or when not recorded
    written_by: str | None = None
    #: the instructions the compaction followed (issue 23), and for each term they name
    #: (``engine.compaction.summarizers.protocol.instruction_terms``) whether it survived: in the summary or
    #: verbatim on the surface after it
    instructions: str | None = None
    instructions_kept: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True, slots=True)
class CompactionCost:
    """What a compaction cost (the summarizer's tokens) against what it saved (prompt tokens over the
    requests that followed it, until the next compaction). ``source``: ``recorded`` when the saved
    tokens come from provider-reported usage, ``meter`` when from our count. ``money`` (from the
    ``genai-prices`` offline snapshot) is None when the model or its price is unknown
    (``price_note`` says why)."""

    summarizer_prompt_tokens: int | None
    summarizer_completion_tokens: int | None
    saved_prompt_tokens: int
    following_requests: int
    source: Literal["recorded", "meter"]
    model: str | None
    money: float | None
    currency: str | None
    price_note: str | None
    #: money spent on the summarizer call / saved on the following requests (same currency)
    summarizer_money: float | None = None
    saved_money: float | None = None


@dataclass(frozen=True, slots=True)
class CompactionEntry:
    """One line of a thread's compaction history (and of its export)."""

    index: int
    kind: str
    trigger: str | None
    origin: str
    created_at: datetime | None
    tokens_before: int | None
    tokens_after: int | None
    summary: str | None
    dropped: "DroppedSpecifics | None"
    cost: CompactionCost | None
    note: str | None = None
    #: the history record id (``origin == "engine"``) or the ``SourceCompaction.id`` (a source's)
    record_id: int | None = None
    #: who wrote the summary (see :attr:`CompactionDiff.written_by`)
    written_by: str | None = None



@dataclass(frozen=True, slots=True)
class PinInfo:
    """One pinned message of a thread (``Service.steering.pins``)."""

    message_id: int
    pinned_at: datetime | None
    pinned_by: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PinChange:
    """What a pin or unpin did (``Service.steering.pin`` / ``Service.steering.unpin``): the ids it covered (the
    message's whole tool round), those that changed, and the thread's pins version after."""

    thread: str
    message_id: int
    action: Literal["pin", "unpin"]
    covered: tuple[int, ...]
    changed: tuple[int, ...]
    pins_version: int
    audit_id: int | None = None


@dataclass(frozen=True, slots=True)
class ThreadPolicyView:
    """A thread's effective policy (``Service.steering.thread_policy``): each value with where it comes
    from (``thread``, ``model route``, ``store default``), the window and its source, the
    thread's own overrides and its standing instructions."""

    thread: str
    provider: str | None
    model: str | None
    values: Mapping[str, Any]
    origins: Mapping[str, str]
    context_window: int | None
    window_source: str | None
    threshold: int | None
    target_tokens: int | None
    retained_tail_tokens: int | None
    overrides: Mapping[str, Any]
    instructions: str | None = None


@dataclass(frozen=True)
class SourceView:
    """An imported thread as its source ran it: what the source would send next.

    After the source's last recorded summary compaction the source sends its summary, what it kept
    (Codex ``replacement_history``), the messages it did not replace (OpenHands keeps the first
    events) and everything that followed. ``rebuilt`` / ``breakdown`` are our meter's count of that
    envelope (the whole history when the source never compacted). When the source recorded a
    request after that compaction, ``tokens`` is anchored to it: its reported prompt and
    completion plus our count of the messages since (``anchored`` True); else ``tokens`` is
    ``rebuilt``. ``detail`` says which, in words."""

    tokens: int
    breakdown: Mapping[str, int]
    detail: str
    anchored: bool
    #: every compaction the source recorded (summaries and prunes)
    compactions: int
    #: the prompt size the last recorded request reported (the pressure chart's last point)
    recorded_prompt_tokens: int | None
    #: usage the source recorded for the whole session (SWE-agent ``model_stats``), in words
    recorded_usage: str | None = None


#: the thread list's sort keys (``ThreadQuery.sort``); ties are broken by thread id
THREAD_SORTS: tuple[str, ...] = ("activity", "pressure", "compactions", "messages", "title", "key")
#: the thread list's filters (``ThreadQuery.filters``, ANDed): busy now; kept ≥ threshold; kept ≥ 85%
#: of the threshold (the hint line); a ``summary_rejected`` event; a compaction (ours or the source's) in the last 24 h
THREAD_FILTERS: tuple[str, ...] = ("busy", "over_threshold", "over_hint", "rejected_summary", "compacted_last_day")


@dataclass(frozen=True, slots=True)
class ThreadQuery:
    """Which threads a thread list shows, in which order (``svc.threads.page`` / ``count`` / ``stats``)."""

    #: substring of key, title, source format or model; case-insensitive; CJK works; % and _ literal
    text: str | None = None
    #: one of THREAD_SORTS; ties broken by thread id, so paging is stable
    sort: str = "activity"
    descending: bool = True
    #: a subset of THREAD_FILTERS, ANDed
    filters: frozenset[str] = frozenset()
    #: imported from this format (``claude-code`` …); ``live``: threads not imported
    source_format: str | None = None


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of a thread list."""

    threads: tuple[ThreadInfo, ...]
    #: threads matching the query (the M of "N of M")
    total: int
    #: opaque keyset cursor for the next page; None at the end
    after: str | None


#: pressure bands of ``FleetStats.bands``: never measured, <50%, 50–85%, 85–100% (the hint line up to
#: the threshold), ≥100% (at or over the threshold)
PRESSURE_BANDS: tuple[str, ...] = ("unknown", "below_50", "50_85", "85_100", "over_100")
PRESSURE_BAND_LABELS: Mapping[str, str] = {
    "unknown": "unknown", "below_50": "<50%", "50_85": "50–85%", "85_100": "85–100%", "over_100": "≥100%",
}


@dataclass(frozen=True, slots=True)
class BandCount:
    band: str  # one of PRESSURE_BANDS
    label: str
    threads: int


@dataclass(frozen=True, slots=True)
class DailyCompactions:
    """Compactions of one UTC day, of one kind, by one source: ``engine`` (ours) or the imported
    format whose tool recorded them (``claude-code`` …)."""

    day: str  # YYYY-MM-DD (UTC)
    kind: str  # prune / summary / manual (ours); summary / prune (a source's)
    source: str
    count: int


@dataclass(frozen=True, slots=True)
class DroppedBucket:
    """Summaries that dropped between ``low`` and ``high`` specifics (``high`` None: and more)."""

    label: str
    low: int
    high: int | None
    compactions: int


@dataclass(frozen=True, slots=True)
class DroppedThread:
    """A thread whose summaries dropped the most specifics."""

    thread_id: int
    key: str
    title: str
    dropped: int  # specifics dropped over all its summaries
    compactions: int  # its summaries that recorded dropped specifics
    worst: int  # the most one summary dropped


@dataclass(frozen=True, slots=True)
class FleetStats:
    """``compaction stats`` / the fleet view: aggregates over the threads a query matches, each
    computed by the database. ``to_json()`` is the ``--json`` document."""

    threads: int
    busy: int
    bands: tuple[BandCount, ...]
    #: our compactions (compaction_history) and the sources' (source_compactions), per UTC day
    per_day: tuple[DailyCompactions, ...]
    compactions: int
    #: summaries (summary events) bucketed by the specifics they dropped; those written before
    #: specifics were recorded are not counted
    dropped_buckets: tuple[DroppedBucket, ...]
    worst_threads: tuple[DroppedThread, ...]
    summarizer_calls: int
    summarizer_prompt_tokens: int
    summarizer_completion_tokens: int
    #: money spent on the summarizer (genai-prices, per model); None when no model's price is known
    summarizer_cost: float | None
    currency: str | None
    #: tokens our compactions took out of the request (tokens_before − tokens_after, summed)
    tokens_saved: int
    #: the per_day window: days counted back from ``until`` (UTC)
    days: int
    until: str

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (lists, not tuples): what ``json.dumps`` writes and ``json.loads`` reads back."""
        from dataclasses import asdict

        def plain(value: Any) -> Any:
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value

        out: dict[str, Any] = plain(asdict(self))
        return out
