"""Prune big tool results: save the full text to the Workdir first, then replace it by a preview.

A tool result is offloaded when it counts MORE than ``limit_tokens`` (exactly ``limit_tokens``
stays). The replacement counts at most ``min(preview_tokens, limit_tokens)`` (or ``wider_tokens``
when that budget would hide identifiers, below the original's size), so a pruned result is always
smaller than the original. A result already pruned (metadata :data:`META_PRUNED`) is never
pruned again. The full text is written before a :class:`Pruned` (and its replacement message)
exists; when the Workdir cannot store it the result is not replaced: the caller gets a
:class:`PruneFailed` and keeps the original (fail-closed).

A :class:`Pruned` carries the one offload record type, :class:`engine.core.views.Offload`
(``generation=None`` until the store records it), and its replacement is built by
:func:`engine.core.surface.shown_message`, the same function that builds every surface.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Literal, Mapping, Sequence

from engine.core.events import DroppedEntry
from engine.core.messages import META_PRUNED, Message
from engine.core.meter import TokenMeter
from engine.core.previews import SHORT_HASH, PreviewBudgetError, build_replacement, has_records, is_structured_tool, replacement_preview
from engine.core.previews._text import SpaceSplitCounter
from engine.core.specifics import DroppedSpecifics, dropped_at_compaction, dropped_specifics, extract_identifiers
from engine.core.surface import shown_message
from engine.core.views import Offload
from engine.core.workdir import Workdir, WorkdirError, sha256_text

__all__ = [
    "FALLBACK_TOOL_NAME",
    "PruneFailed",
    "PruneReport",
    "Pruned",
    "prune_dropped",
    "prune_surface",
    "prune_tool_result",
    "stale_results",
    "tool_name_of",
    "without_prune_specifics",
]

log = logging.getLogger(__name__)

#: set inside :func:`without_prune_specifics`: a prune computes no dropped specifics
_NO_PRUNE_SPECIFICS: ContextVar[bool] = ContextVar("no_prune_specifics", default=False)


@contextmanager
def without_prune_specifics() -> Iterator[None]:
    """Within this block (this thread or task only), a prune computes no dropped specifics:
    :func:`prune_dropped` returns ``{}`` (the ``prune`` event then has no specifics keys, as when
    they failed) and a replacement carries ``left_out=None`` (no ``specifics_seen`` / ``left_out``
    per result). For a what-if run (:mod:`engine.whatif`): its scratch copy is removed when the run
    ends and none of its figures reads them, so they were ~10 % of its time for nothing. A summary's
    dropped specifics are still computed (the run's ``specifics_dropped``). Previews built here are
    remembered apart from the others, so a real prune never gets one without its counts."""
    token = _NO_PRUNE_SPECIFICS.set(True)
    try:
        yield
    finally:
        _NO_PRUNE_SPECIFICS.reset(token)

FALLBACK_TOOL_NAME = "tool"
#: share of ``preview_tokens`` a stale result's replacement gets (see :func:`stale_results`): half,
#: so ids and URLs of up to about eight results stay while the content goes (on the benchmark
#: traces: 11 summarizer calls instead of 19 at the full preview budget, identifiers kept 55 % vs 54 %)
STALE_PREVIEW_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Pruned:
    """A tool result that was offloaded: its offload record (``generation`` is ``None``, and
    ``message_id`` is ``None`` for a message that was never persisted) and the message the model
    sees instead (:func:`engine.core.surface.shown_message` of the original and the offload)."""

    offload: Offload
    replacement: Message
    #: the specifics of the original its preview does not show (:func:`engine.core.specifics.dropped_specifics`
    #: of the original against the preview alone; the full text is in the Workdir)
    left_out: DroppedSpecifics | None = None

    # read-only shortcuts to the offload record
    @property
    def message_id(self) -> int | None:
        return self.offload.message_id

    @property
    def tool_name(self) -> str:
        return self.offload.tool_name

    @property
    def sha256(self) -> str:
        return self.offload.sha256

    @property
    def path(self) -> str:
        return self.offload.path

    @property
    def preview(self) -> str:
        """The replacement text the model sees."""
        return self.offload.preview

    @property
    def original_tokens(self) -> int:
        return self.offload.original_tokens

    @property
    def preview_tokens(self) -> int:
        return self.offload.preview_tokens


@dataclass(frozen=True, slots=True)
class PruneFailed:
    """A tool result that should have been offloaded but could not be saved; it stays as it is."""

    message_id: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class PruneReport:
    """The surface after pruning (same order), and what was pruned or failed."""

    messages: tuple[Message, ...]
    pruned: tuple[Pruned, ...]
    failed: tuple[PruneFailed, ...]


def tool_name_of(message: Message, messages: Sequence[Message] = ()) -> str:
    """``message.name``, else the name of the assistant call it answers in ``messages``, else "tool"."""
    if message.name:
        return message.name
    for m in messages:
        for call in m.tool_calls:
            if call.id == message.tool_call_id:
                return call.name
    return FALLBACK_TOOL_NAME


def prune_tool_result(
    message: Message,
    *,
    workdir: Workdir,
    count_tokens: Callable[[str], int],
    limit_tokens: int,
    preview_tokens: int,
    tool_name: str | None = None,
    saved_as: Literal["path", "name", "short"] = "path",
    wider_tokens: int | None = None,
    shapes: Mapping[str, str] | None = None,
) -> Pruned | PruneFailed | None:
    """Offload ``message`` if it counts more than ``limit_tokens``.

    ``wider_tokens``: a larger budget the replacement takes instead when the one within
    ``preview_tokens`` would hide identifiers (paths, URLs, ids) the original names and the larger
    one shows more of them (a stale result's half budget, :func:`prune_surface`). Not for a list of
    records (JSON with a result list, or a tool configured to the ``records`` shape): its preview
    already falls back to id-only lines within the budget, so only ids inside the content could
    gain, at the cost of a bigger surface. ``shapes``: tools configured to a preview shape
    (:data:`engine.core.previews.DEFAULT_TOOL_SHAPES` when ``None``).

    ``None``: at or under the limit, or already pruned. :class:`PruneFailed`: the Workdir write
    failed, nothing replaced. ``tool_name`` defaults to :func:`tool_name_of` ``(message)``.
    ``saved_as`` is how the replacement's header names the saved file: the full ``path``, the
    file's ``name`` in the Workdir (``<tool>-<sha256>.txt``, about 13 tokens shorter than a typical
    data directory path), or ``short``: that name with the hash cut to its first
    :data:`~engine.core.previews.SHORT_HASH` hex digits (``<tool>-2ff5fba1c981…``, about 35 tokens
    shorter than the name, paid on every later request); the offload record always keeps the full
    path, which the inspector and ``compaction history`` show.
    Raises ``ValueError`` for a non-tool message or bad limits, and
    :class:`~engine.core.previews.PreviewBudgetError` when the budget cannot hold the header.
    """
    if message.role != "tool":
        raise ValueError(f"only tool results are pruned (got a {message.role} message)")
    if limit_tokens < 0 or preview_tokens <= 0:
        raise ValueError(f"need limit_tokens >= 0 and preview_tokens > 0 (got {limit_tokens}, {preview_tokens})")
    if message.metadata.get(META_PRUNED):
        return None
    count_tokens = _split_counter(count_tokens)
    original_tokens = count_tokens(message.content)
    if original_tokens <= limit_tokens:
        return None
    name = tool_name or tool_name_of(message)
    try:
        sha = sha256_text(message.content)
    except WorkdirError as exc:
        return PruneFailed(message_id=message.id, reason=exc.message)
    # the text is pure and computed first, so a budget error touches no disk; it is only handed
    # out after the full original was written
    shown = _shown_path(workdir.path_for(name, sha), saved_as, sha)
    key = (count_tokens, name, sha, shown, original_tokens, min(preview_tokens, limit_tokens), preview_tokens, wider_tokens,
           None if shapes is None else tuple(sorted(shapes.items())), _NO_PRUNE_SPECIFICS.get())
    preview = _PREVIEWS.get(key)
    if preview is None:
        preview = _preview(message.content, key)
        _PREVIEWS.put(key, preview)
    text, text_tokens, left_out = preview
    try:
        saved = workdir.save(name, message.content)
    except WorkdirError as exc:
        return PruneFailed(message_id=message.id, reason=exc.message)
    offload = Offload(
        message_id=message.id,  # type: ignore[arg-type]  # None only for a message never persisted
        tool_name=name,
        path=saved.path,
        sha256=saved.sha256,
        preview=text,
        original_tokens=original_tokens,
        preview_tokens=text_tokens,
        generation=None,  # set by the store when it records the prune
    )
    return Pruned(offload=offload, replacement=shown_message(message, offload), left_out=left_out)


def _split_counter(count_tokens: Callable[[str], int]) -> Callable[[str], int]:
    """``count_tokens`` as a :class:`~engine.core.previews._text.SpaceSplitCounter` when it is a
    :class:`~engine.core.meter.TokenMeter`'s own ``count_text`` (a byte-pair encoding's count, which adds
    up at a space after a printable character): the previews' fitting then counts each long text
    once in pieces instead of every probed prefix whole. Anything else is returned as it is."""
    meter = getattr(count_tokens, "__self__", None)
    if isinstance(meter, TokenMeter) and getattr(count_tokens, "__func__", None) is TokenMeter.count_text:
        return SpaceSplitCounter(count_tokens, meter.count_piece, ends=meter.token_ends, remember=meter.remember_text)
    return count_tokens


#: what :func:`_preview` computes for one key: (replacement text, its tokens, specifics it leaves out)
_Preview = tuple[str, int, "DroppedSpecifics | None"]
_PreviewKey = tuple[Any, ...]


class _PreviewMemo:
    """The replacements already built, by everything they depend on (:func:`prune_tool_result`'s
    key: the counter, tool name, the original's SHA-256 and token count, the shown path, the
    budgets, the shapes, and whether its left-out specifics are computed): a prune of a what-if sweep's next run, or a replay of the same thread,
    builds no preview twice. An LRU of at most :data:`MAX_ENTRIES` keys; a key holds the
    original's hash, not its text, and a value the preview (within its budget), so what it keeps
    alive is bounded by the budgets. Thread-safe; a preview is built outside the lock (two
    threads may build the same one; both get the same text)."""

    MAX_ENTRIES = 8192

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: OrderedDict[_PreviewKey, _Preview] = OrderedDict()

    def get(self, key: _PreviewKey) -> _Preview | None:
        try:
            hash(key)
        except TypeError:  # a counter that cannot be a key (an object without __hash__): not kept
            return None
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: _PreviewKey, value: _Preview) -> None:
        try:
            hash(key)
        except TypeError:
            return
        with self._lock:
            self._data[key] = value
            if len(self._data) > self.MAX_ENTRIES:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_PREVIEWS = _PreviewMemo()


def _preview(content: str, key: _PreviewKey) -> _Preview:
    """The replacement text of ``content`` for ``key`` (see :class:`_PreviewMemo`), its tokens and
    the specifics its preview leaves out. Raises :class:`~engine.core.previews.PreviewBudgetError` (never
    kept) when the budget cannot hold the header."""
    count_tokens, name, sha, shown, original_tokens, budget, preview_tokens, wider_tokens, shapes_items, no_specifics = key
    shapes = None if shapes_items is None else dict(shapes_items)

    def replacement(budget: int) -> str:
        return build_replacement(name, content, sha256=sha, path=shown, original_tokens=original_tokens, budget_tokens=budget,
                                 count_tokens=count_tokens, shapes=shapes)

    text = replacement(budget)
    if (wider_tokens is not None and preview_tokens < wider_tokens < original_tokens
            and not is_structured_tool(name, shapes) and not has_records(content)):
        idents = extract_identifiers(content)
        hidden = sum(i not in text for i in idents)
        if hidden:
            wider = replacement(wider_tokens)
            if sum(i not in wider for i in idents) < hidden:
                text = wider
    if no_specifics:  # inside without_prune_specifics
        return text, count_tokens(text), None
    try:
        left_out: DroppedSpecifics | None = dropped_specifics(before=[content], summary=None, after=[replacement_preview(text)])
    except Exception:  # a bug in a pure extractor must not lose a prune: the counts stay unknown
        log.warning("specifics left out by a preview failed", exc_info=True)
        left_out = None
    return text, count_tokens(text), left_out


def _shown_path(path: Path, saved_as: str, sha: str) -> str:
    if saved_as == "name":
        return path.name
    if saved_as == "short":  # the name with its hash cut to SHORT_HASH hex digits: no 64-hex run in every later request
        return path.name.split(sha, 1)[0] + sha[:SHORT_HASH] + "…"
    if saved_as != "path":
        raise ValueError(f"saved_as must be 'path' or 'name', got {saved_as!r}")
    return str(path)


def stale_results(messages: Sequence[Message], *, message_tokens: Callable[[Message], int], tail_tokens: int, recent_rounds: int) -> frozenset[int]:
    """Ids of the tool results of ``messages`` (persisted history in order) that lie before the
    protected tail: the newest messages holding ``tail_tokens`` and the newest ``recent_rounds``
    assistant rounds both stay as they are. Under pressure these are offloaded when their preview is
    smaller (:func:`prune_surface` ``stale=``): their ids stay visible in the preview and a prune
    costs no summarizer call."""
    start = len(messages)
    kept = rounds = 0
    while start > 0 and (kept < tail_tokens or rounds < recent_rounds):
        start -= 1
        kept += message_tokens(messages[start])
        rounds += messages[start].role == "assistant"
    return frozenset(m.id for m in messages[:start] if m.role == "tool" and m.id is not None)


def prune_surface(
    messages: Sequence[Message],
    *,
    workdir: Workdir,
    count_tokens: Callable[[str], int],
    limit_tokens: int,
    preview_tokens: int,
    stale: Collection[int] = (),
    shapes: Mapping[str, str] | None = None,
    only: Collection[int] | None = None,
) -> PruneReport:
    """Apply :func:`prune_tool_result` (``saved_as="short"``: the compactor's previews name the file
    in the Workdir by its tool and the hash's first hex digits, not its whole path) to every tool message of ``messages``, keeping their order:
    ``messages`` of the report is the input with each pruned result replaced by its
    :attr:`Pruned.replacement` (the input messages themselves elsewhere).

    A result whose id is in ``stale`` (:func:`stale_results`) is offloaded when it counts more than
    its replacement budget, ``STALE_PREVIEW_SHARE × preview_tokens`` (also at most ``limit_tokens``),
    the others only over ``limit_tokens``; a stale result whose half-budget preview would hide
    identifiers it names takes the full ``preview_tokens`` when that shows more of them (a grep or
    test log naming dozens of paths keeps them).

    ``only``: the ids of the results that can be offloaded under these limits, known beforehand
    (:func:`engine.compaction.plan.prune_candidates`, the same rule: the compactor's plan); every other
    result is left as it is without being looked at (it counts no more than its limit)."""
    out: list[Message] = []
    pruned: list[Pruned] = []
    failed: list[PruneFailed] = []
    call_names = {call.id: call.name for m in messages for call in m.tool_calls}
    stale_preview = max(1, int(preview_tokens * STALE_PREVIEW_SHARE))
    if (limit_tokens < 0 or preview_tokens <= 0) and any(m.role == "tool" for m in messages):  # prune_tool_result's check
        raise ValueError(f"need limit_tokens >= 0 and preview_tokens > 0 (got {limit_tokens}, {preview_tokens})")
    count_tokens = _split_counter(count_tokens)  # once for the surface, not per result (the same counter)
    for m in messages:
        outcome = None
        if m.role == "tool" and (only is None or m.id in only) and not m.metadata.get(META_PRUNED):  # a pruned result: never again
            name = m.name or call_names.get(m.tool_call_id or "", FALLBACK_TOOL_NAME)
            budgets = [stale_preview, preview_tokens] if m.id in stale and stale_preview < preview_tokens else [preview_tokens]
            for i, budget in enumerate(budgets):
                try:
                    outcome = prune_tool_result(
                        m,
                        workdir=workdir,
                        count_tokens=count_tokens,
                        limit_tokens=min(limit_tokens, budget) if m.id in stale else limit_tokens,
                        preview_tokens=budget,
                        tool_name=name,
                        saved_as="short",
                        wider_tokens=preview_tokens if budget < preview_tokens else None,
                        shapes=shapes,
                    )
                    break
                except PreviewBudgetError as exc:  # a policy too tight for the header: keep the original
                    if i == len(budgets) - 1:  # (a stale budget that is too small tries the full one first)
                        outcome = PruneFailed(message_id=m.id, reason=exc.message)
        if isinstance(outcome, Pruned):
            pruned.append(outcome)
            out.append(outcome.replacement)
        else:
            if isinstance(outcome, PruneFailed):
                failed.append(outcome)
            out.append(m)
    return PruneReport(messages=tuple(out), pruned=tuple(pruned), failed=tuple(failed))


def prune_dropped(
    report: PruneReport,
    surface: Sequence[Message],
    *,
    system_prompt: str | None = None,
    summary: str | None = None,
    current_request: str | None = None,
    ids: Collection[int] | None = None,
) -> dict[str, Any]:
    """The ``prune`` event's dropped-specifics keys, the ones a ``summary`` event records
    (``specifics_seen``, ``dropped_specifics``, ``dropped_referenced``, ``dropped``,
    ``dropped_truncated``, ``specifics_ms``): what the pruned originals showed that neither their
    previews nor anything else on the surface after the prune shows (``surface``: the messages
    before it, each pruned one replaced by its preview here), referenced by the current request
    and that surface. ``ids``: the pruned results recorded (default: all of ``report``)."""
    if _NO_PRUNE_SPECIFICS.get():
        return {}
    started = time.perf_counter()
    try:
        return _prune_dropped(report, surface, system_prompt=system_prompt, summary=summary, current_request=current_request, ids=ids, started=started)
    except Exception:  # a bug in a pure extractor must not lose a prune: the keys stay unknown
        log.warning("dropped specifics of a prune failed", exc_info=True)
        return {}


def _prune_dropped(report: PruneReport, surface: Sequence[Message], *, system_prompt: str | None, summary: str | None,
                   current_request: str | None, ids: Collection[int] | None, started: float) -> dict[str, Any]:
    chosen = [p for p in report.pruned if ids is None or p.message_id in ids]
    by_id = {p.message_id: p.replacement for p in chosen if p.message_id is not None}
    originals = {p.message_id for p in chosen}
    replaced: list[Message] = []
    for m in surface:
        if m.id in by_id:
            replaced.append(by_id[m.id])
        else:
            replaced.append(m)
    before = [m for m in surface if m.id in originals and m.id is not None]
    found = dropped_at_compaction(
        summarized=before,
        previous_summary=None,
        summary=summary,
        kept=replaced,
        system_prompt=system_prompt,
        current_request=current_request,
        shown=replacement_preview,
    )
    fields = found.event_fields()
    fields["dropped"] = tuple(DroppedEntry(kind=d.kind, value=d.value, referenced=d.referenced) for d in found.dropped)
    fields["specifics_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return fields
