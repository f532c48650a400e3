"""What the thread header and the gauge say about a thread's pressure, in words (Qt-free).

Five distinct states, each with its own words, never one hint for all of them:

- ``below``: under 85% of the threshold: nothing to say;
- ``hint``: 85% to 100% of the threshold: the hint line ("consider compacting now"), display only;
- ``over_threshold``: at or over the threshold, inside the context window: the next model step
  compacts first;
- ``over_window``: more tokens than the context window holds: the provider refuses the next
  request as it stands;
- ``cannot_compact``: over the threshold (or the window) and compaction cannot bring it down: the
  last manual compaction said why (``no_op`` with its reason, ``still_over_threshold`` with its
  note, a refused summary with its cause).

An assumed window (``window_source == "assumed"``: the model is in no catalogue and nothing
reported one) is shown as assumed, with ``window_detail`` as the explanation. A recorded threshold
(``window_source == "recorded"``: a thread written live by an agent whose policy this process does
not have, measured against the threshold its last model request recorded instead of an assumed
window's) is named with the percentage (``98.8% of threshold 12,800 (recorded)``), its window as
recorded or "not recorded".

An imported thread is shown as its source ran it (``status.basis == "source"``: what the source
would send next, after its last recorded compaction); the line under the header names that and
gives our engine's measure of the whole history beside it ("our engine, whole history: …"), the
tooltip how the source's figure was made. A sixth state, ``window_unknown`` (an imported session
whose model nobody catalogued and whose source reported no window), says so with the recorded
usage, in neutral colours: never an alarm measured against another database's fallback window.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core import figures
from engine.core.views import SOURCE_NAMES, PressureStatus

HINT_RATIO = 0.85
HINT_TEXT = "85% of the threshold reached: consider compacting now"
STATES: tuple[str, ...] = ("below", "hint", "over_threshold", "over_window", "cannot_compact", "window_unknown")


@dataclass(frozen=True, slots=True)
class PressureView:
    """The state of a thread's pressure and its words (``text`` is empty below the hint line)."""

    state: str
    headline: str
    text: str
    #: the theme colour token of the state
    tone: str
    #: the whole reason when compaction cannot help (the header's tooltip)
    reason: str | None = None

    @property
    def shown(self) -> bool:
        """Whether the header shows a line for this state."""
        return bool(self.text)


def percent(status: PressureStatus) -> str:
    """``1,487%`` / ``86.2%``: the share of the threshold (:func:`engine.core.figures.percent`, the
    thread list's figure too: floored to a tenth below 1000%); ``–`` when no window (so no
    threshold) is known."""
    if status.state == "window_unknown":
        return "–"
    return figures.percent(status.pressure_ratio)


def of_threshold_text(status: PressureStatus) -> str:
    """``12.3% of threshold``, or what the share is of when the threshold is not this process's
    policy's: ``98.8% of threshold 12,800 (recorded)`` (the header, beside :func:`window_text`)."""
    if status.window_source == "recorded":
        return f"{percent(status)} of threshold {status.threshold:,} (recorded)"
    return f"{percent(status)} of threshold"


def compactions_text(status: PressureStatus) -> str:
    """The header's count: ``3 summaries`` (ours), ``4 compactions (4 by Claude Code)`` when the
    source recorded some (``compact_count`` counts both)."""
    n = status.compact_count
    if not status.source_compact_count:
        return figures.plural(n, "summary", "summaries")
    return f"{figures.plural(n, 'compaction')} ({status.source_compact_count:,} by {source_name(status)})"


def list_ratio(status: PressureStatus) -> float | None:
    """The thread list's pressure: ``pressure_ratio``, None (shown ``–``) when no window is known."""
    return status.pressure_ratio if status.state != "window_unknown" else None


def over_window(status: PressureStatus) -> bool:
    return status.state == "over_window"


def over_threshold(status: PressureStatus) -> bool:
    """At or over the threshold (the window may be exceeded too)."""
    return status.state in ("over_threshold", "over_window")


#: a reason longer than this is cut at its first parenthesis in the header (the tooltip has it all)
SHORT_REASON = 160


def short_reason(reason: str) -> str:
    """``reason`` for one header line: a long one ends before its first parenthesised detail."""
    if len(reason) <= SHORT_REASON:
        return reason
    cut = reason.find(" (", 40)
    return reason[:cut] + " (…)" if 0 < cut <= SHORT_REASON else reason[: SHORT_REASON - 1] + "…"


def source_name(status: PressureStatus) -> str:
    """The tool an imported thread came from, in words (``Claude Code``), else ``the source``."""
    return SOURCE_NAMES.get(status.source_format or "", status.source_format or "the source")


def engine_text(status: PressureStatus) -> str | None:
    """``our engine, whole history: 225,436 tokens`` beside an imported thread's source figure."""
    if status.basis != "source" or status.engine_tokens is None:
        return None
    return f"our engine, whole history: {figures.tokens(status.engine_tokens)} tokens"


def source_tooltip(status: PressureStatus) -> str | None:
    """How the source's figure was made, and ours beside it (the header's tooltip)."""
    if status.basis != "source":
        return None
    lines = [f"As {source_name(status)} ran it: {figures.tokens(status.tokens)} tokens would go out next"]
    if status.source_detail:
        lines.append(status.source_detail)
    if status.recorded_prompt_tokens is not None:
        lines.append(f"last recorded request: {figures.tokens(status.recorded_prompt_tokens)} prompt tokens")
    if status.recorded_usage:
        lines.append(status.recorded_usage)
    if status.source_compact_count:
        lines.append(f"compactions {source_name(status)} recorded: {status.source_compact_count}")
    engine = engine_text(status)
    if engine:
        lines.append(engine[0].upper() + engine[1:] + " (what our engine measures without the source's compactions)")
    return "\n".join(lines)


def pressure_view(status: PressureStatus, blocked: str | None = None) -> PressureView:
    """The state of ``status``; ``blocked``: why compaction cannot help (from the last manual
    compaction of this thread), or None. An imported thread's words name its source and carry
    our engine's whole-history figure beside the source's (:func:`engine_text`)."""
    view = _state_view(status, blocked)
    if status.basis != "source":
        return view
    engine = engine_text(status) if status.engine_tokens != status.tokens else None  # the same figure is said once (the tooltip has both)
    text = view.text or f"As {source_name(status)} ran it: {figures.tokens(status.tokens)} tokens"
    reason = "\n\n".join(r for r in (view.reason, source_tooltip(status)) if r)
    return PressureView(view.state, view.headline, f"{text} · {engine}" if engine else text, view.tone if view.text else "text_muted", reason or None)


def _state_view(status: PressureStatus, blocked: str | None) -> PressureView:
    if status.state == "window_unknown":
        recorded = (f"; its last recorded request: {figures.tokens(status.recorded_prompt_tokens)} prompt tokens"
                    if status.recorded_prompt_tokens is not None else f"; {status.recorded_usage}" if status.recorded_usage else "")
        return PressureView(
            "window_unknown",
            f"Window unknown · {figures.tokens(status.tokens)} tokens",
            f"Window unknown: {source_name(status)} names no model a catalogue knows and reported no window; "
            f"{figures.tokens(status.tokens)} tokens by our count{recorded}",
            "text_muted",
            status.window_detail,
        )
    pct = percent(status)
    if (over_threshold(status) or over_window(status)) and blocked:
        where = "the context window" if over_window(status) else "the threshold"
        text = f"Over {where} ({pct} of the threshold) · cannot compact: {short_reason(blocked)}"
        return PressureView("cannot_compact", f"Cannot compact · {pct} of threshold", text, "danger", blocked)
    if over_window(status):
        return PressureView(
            "over_window",
            f"Over the window · {pct} of threshold",
            f"Over the context window: {figures.tokens(status.tokens)} tokens, the window holds {status.context_window:,}; the provider refuses the next request unless it is compacted",
            "danger",
        )
    if over_threshold(status):
        return PressureView(
            "over_threshold",
            f"Over the threshold · {pct}",
            f"Over the threshold ({pct}): the next model step compacts first; Compact now does it by hand",
            "danger",
        )
    if status.hint:
        return PressureView("hint", f"{pct} of threshold", HINT_TEXT, "warn")
    return PressureView("below", f"{pct} of threshold", "", "text")


def numbers_text(status: PressureStatus) -> str:
    """The gauge's figures: ``22,261 / 160,000 tokens · window 200,000``; without a known window
    ``23,942 tokens · window unknown``."""
    if status.state == "window_unknown":
        return f"{figures.tokens(status.tokens)} tokens · {window_text(status)}"
    return f"{figures.tokens(status.tokens)} / {status.threshold:,} tokens · {window_text(status)}"


def window_text(status: PressureStatus) -> str:
    """``window 128,000`` with where it came from when that matters: ``(assumed)`` for a window
    nobody reported or catalogued, ``(reported)`` for one the source recorded; with a recorded
    threshold, ``(recorded)`` for the window its request recorded, else ``window not recorded``."""
    if status.state == "window_unknown":
        return "window unknown"
    if status.window_source == "recorded" and not status.context_window:
        return "window not recorded"
    suffix = {"assumed": " (assumed)", "reported": " (reported)", "recorded": " (recorded)"}.get(status.window_source or "", "")
    return f"window {status.context_window:,}{suffix}"


def window_tooltip(status: PressureStatus) -> str:
    """Where the window came from, in words."""
    source = status.window_source or "unknown"
    lines = {
        "assumed": "Assumed window: the model is in no catalogue and the source reported none",
        "reported": "Window reported by the source",
        "recorded": "Threshold recorded by the agent that wrote this thread (its policy is not this inspector's; "
                    "the window this inspector has for the model would only be assumed)",
        "override": "Window configured in the policy",
        "catalog": "Window from the model catalogue",
        "unknown": "Window unknown: no catalogue knows the model and the source reported none (no threshold to compare with)",
    }
    head = lines.get(source, f"Window source: {source}")
    return f"{head}\n{status.window_detail}" if status.window_detail else head


def manual_outcome(status: str, reason: str | None, still_over: bool, note: str | None) -> str | None:
    """Why a manual compaction did not bring the thread under its threshold, or None when it
    did: what the header then says after "cannot compact:"."""
    if status == "no_op":
        why = f"nothing to compact ({reason})" if reason else "nothing to compact"
        return f"{why}: {note}" if note else why
    if still_over:
        return f"still over the threshold after compacting ({note})" if note else "still over the threshold after compacting"
    return None
