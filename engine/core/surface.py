"""What the model sees: the one place that turns stored messages into the model-visible surface.

Pure (no I/O). The compactor measures and sends exactly this; pruning builds its replacements with
:func:`shown_message`; the service's token badges count it; replay rebuilds it for past steps.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .messages import META_EPHEMERAL, META_PRUNED, META_SYNTHETIC, Envelope, Message, Surface
from .units import place_closing_markers
from .views import Offload, Snapshot

__all__ = ["SYNTHETIC_USER_TEXT", "build_surface", "envelope_of", "history_part", "shown_message", "shown_messages"]

SYNTHETIC_USER_TEXT = (
    "(Earlier messages were compacted into the summary above.) Continue the current task from the summary "
    "and the messages below; do not repeat steps that are already done."
)


#: pruned results as shown, by the original message object's id: (original, offload, shown). The
#: snapshots hand the same message and offload objects to every read, so a thread's surface is
#: rebuilt at each pressure check from these instead of new copies (a what-if's ~10^5 rebuilds);
#: cleared whole when full. An entry holds its original, so the id is not reused while it is kept.
_SHOWN: dict[int, tuple[Message, Offload, Message]] = {}
_SHOWN_LIMIT = 4096


def shown_message(message: Message, offload: Offload | None) -> Message:
    """``message`` as the model sees it: a pruned tool result is its preview, marked with the
    SHA-256 of the original; anything else is itself."""
    if offload is None or message.role != "tool":
        return message
    hit = _SHOWN.get(id(message))
    if hit is not None and hit[0] is message and (hit[1] is offload or hit[1] == offload):
        return hit[2]
    shown = message.with_content(offload.preview, **{META_PRUNED: offload.sha256})
    if len(_SHOWN) >= _SHOWN_LIMIT:
        _SHOWN.clear()
    _SHOWN[id(message)] = (message, offload, shown)
    return shown


def shown_messages(messages: Sequence[Message], offloads: Mapping[int, Offload]) -> list[Message]:
    """:func:`shown_message` for each message, offloads looked up by message id."""
    return [shown_message(m, offloads.get(m.id) if m.id is not None else None) for m in messages]


def build_surface(snapshot: Snapshot, *, ephemeral: Sequence[Message] = ()) -> Surface:
    """The model-visible surface of a snapshot: pruned results as previews, a synthetic user
    message when the first non-system message would not be a user message, ephemeral notes last.

    Closing markers (a call's recorded "no result", appended when the thread went idle) are placed
    right after their call's round, and one whose call is behind the boundary is left out: an
    OpenAI-compatible provider rejects a result that does not follow its call.

    Pinned messages (``snapshot.pinned``) stay in their place as they were shown when pinned:
    those at or before the boundary right after the summary, in id order (a result pruned before
    its pin stays its preview; a pinned one is never pruned: docs/contract.md, Pins)."""
    messages = snapshot.pinned + snapshot.messages if snapshot.pinned else snapshot.messages
    shown = place_closing_markers(shown_messages(messages, snapshot.offloads))
    first = next((m for m in shown if m.role != "system"), None)
    if first is not None and first.role != "user":
        shown.insert(0, Message("user", SYNTHETIC_USER_TEXT, metadata={META_SYNTHETIC: True}))
    for e in ephemeral:
        shown.append(e if e.is_ephemeral else e.with_content(e.content, **{META_EPHEMERAL: True}))
    return Surface(
        messages=tuple(shown),
        summary=snapshot.state.summary,
        boundary=snapshot.state.boundary,
        generation=snapshot.state.generation,
    )


def envelope_of(snapshot: Snapshot, surface: Surface) -> Envelope:
    """The whole request the model gets: the thread's system prompt and tools around ``surface``."""
    return Envelope(system_prompt=snapshot.system_prompt, surface=surface, tools=tuple(snapshot.tools))


def history_part(surface: Surface) -> tuple[Message, ...]:
    """The persisted messages of a surface in physical (id) order, what units are built from: no
    synthetic or ephemeral ones, closing markers back where they were recorded."""
    persisted = [(m.id, m) for m in surface.messages if m.id is not None]
    if any(a > b for (a, _), (b, _) in zip(persisted, persisted[1:])):
        persisted.sort(key=lambda p: p[0])
    return tuple(m for _, m in persisted)
