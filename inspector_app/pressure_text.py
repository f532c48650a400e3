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
reported one) is shown as assumed, with ``window_detail`` as the explanation.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine import figures
from engine.views import PressureStatus

HINT_RATIO = 0.85
HINT_TEXT = "85% of the threshold reached: consider compacting now"
STATES: tuple[str, ...] = ("below", "hint", "over_threshold", "over_window", "cannot_compact")


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
    """``1,487%`` / ``86.2%``: the share of the threshold (:func:`engine.figures.percent`, the
    thread list's figure too: floored to a tenth below 1000%)."""
    return figures.percent(status.pressure_ratio)


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


def pressure_view(status: PressureStatus, blocked: str | None = None) -> PressureView:
    """The state of ``status``; ``blocked``: why compaction cannot help (from the last manual
    compaction of this thread), or None."""
    pct = percent(status)
    if (over_threshold(status) or over_window(status)) and blocked:
        where = "the context window" if over_window(status) else "the threshold"
        text = f"Over {where} ({pct} of the threshold) · cannot compact: {short_reason(blocked)}"
        return PressureView("cannot_compact", f"Cannot compact · {pct} of threshold", text, "danger", blocked)
    if over_window(status):
        return PressureView(
            "over_window",
            f"Over the window · {pct} of threshold",
            f"Over the context window: {status.tokens:,} tokens, the window holds {status.context_window:,}; the provider refuses the next request unless it is compacted",
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


def window_text(status: PressureStatus) -> str:
    """``window 128,000`` with where it came from when that matters: ``(assumed)`` for a window
    nobody reported or catalogued, ``(reported)`` for one the source recorded."""
    suffix = {"assumed": " (assumed)", "reported": " (reported)"}.get(status.window_source or "", "")
    return f"window {status.context_window:,}{suffix}"


def window_tooltip(status: PressureStatus) -> str:
    """Where the window came from, in words."""
    source = status.window_source or "unknown"
    lines = {
        "assumed": "Assumed window: the model is in no catalogue and the source reported none",
        "reported": "Window reported by the source",
        "override": "Window configured in the policy",
        "catalog": "Window from the model catalogue",
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
