"""What the model sees: shown_message, the synthetic user rule, ephemeral notes last, and the
compactor measuring exactly envelope_of(build_surface(snapshot))."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings, strategies as st

from engine.compaction.compactor import Compactor
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core.messages import META_EPHEMERAL, META_PRUNED, META_SYNTHETIC, Message, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.policy import PolicySet
from engine.core.surface import SYNTHETIC_USER_TEXT, build_surface, envelope_of, history_part, shown_message, shown_messages
from engine.core.views import CompactionState, Offload, Snapshot
from engine.core.workdir import Workdir

SHA = "ab" * 32


def offload_for(message_id: int, preview: str = "[preview of a big result]") -> Offload:
    return Offload(message_id, "shell", f"/wd/shell-{SHA}.txt", SHA, preview, 5000, 12, generation=1)


def snapshot(messages: tuple[Message, ...], *, offloads: dict[int, Offload] | None = None, summary: str | None = None, boundary: int | None = None, generation: int = 0) -> Snapshot:
    return Snapshot(
        thread="t",
        conversation_id=1,
        system_prompt="You are terse.",
        tools=({"type": "function", "function": {"name": "shell", "description": "", "parameters": {"type": "object", "properties": {}}}},),
        provider="sim",
        model="m",
        state=CompactionState(conversation_id=1, boundary=boundary, summary=summary, generation=generation),
        messages=messages,
        offloads=offloads or {},
        current_request=None,
        busy_reason=None,
    )


# -- shown_message --------------------------------------------------------------------------------


def test_a_pruned_tool_result_is_shown_as_its_preview_marked_with_the_sha() -> None:
    original = tool_result("call-1", "x" * 10_000, name="shell", id=7)
    shown = shown_message(original, offload_for(7))
    assert shown.content == "[preview of a big result]" and shown.metadata[META_PRUNED] == SHA
    assert (shown.id, shown.role, shown.tool_call_id, shown.name) == (7, "tool", "call-1", "shell")
    assert original.content == "x" * 10_000 and META_PRUNED not in original.metadata  # the original is untouched


def test_a_tool_result_without_offload_and_any_other_message_are_shown_as_they_are() -> None:
    result = tool_result("call-1", "small", id=3)
    assert shown_message(result, None) is result
    for m in (user("hi", id=1), assistant("ok", id=2), Message("system", "note", id=4)):
        assert shown_message(m, offload_for(m.id or 0)) is m  # an offload only ever replaces a tool result


def test_shown_messages_looks_offloads_up_by_message_id() -> None:
    msgs = [assistant("", ToolCall("a", "shell"), id=1), tool_result("a", "big", id=2), tool_result("b", "other", id=3), Message("system", "unsaved")]
    shown = shown_messages(msgs, {2: offload_for(2), 99: offload_for(99)})
    assert [m.content for m in shown] == ["", "[preview of a big result]", "other", "unsaved"]
    assert shown[0] is msgs[0] and shown[2] is msgs[2] and shown[3] is msgs[3]


# -- build_surface --------------------------------------------------------------------------------


def test_a_synthetic_user_message_opens_a_surface_whose_first_message_is_not_from_the_user() -> None:
    kept = (assistant("Found it.", id=5), user("thanks", id=6))
    surface = build_surface(snapshot(kept, summary="The user asked for doc-42.", boundary=4, generation=3))
    first = surface.messages[0]
    assert (first.role, first.content, first.id) == ("user", SYNTHETIC_USER_TEXT, None) and first.metadata[META_SYNTHETIC] is True
    assert surface.messages[1:] == kept
    assert (surface.summary, surface.boundary, surface.generation) == ("The user asked for doc-42.", 4, 3)
    # system messages do not count as the first message; a leading user message needs no synthetic one
    assert build_surface(snapshot((Message("system", "rules", id=1), assistant("a", id=2)))).messages[0].is_synthetic
    assert not any(m.is_synthetic for m in build_surface(snapshot((Message("system", "rules", id=1), user("q", id=2), assistant("a", id=3)))).messages)
    assert build_surface(snapshot(())).messages == ()
    assert build_surface(snapshot((Message("system", "only rules", id=1),))).messages == (Message("system", "only rules", id=1),)


def test_ephemeral_notes_come_last_in_order_and_are_marked() -> None:
    kept = (user("q", id=1), assistant("a", id=2))
    notes = [Message("system", "note one"), Message("system", "note two", metadata={META_EPHEMERAL: True})]
    surface = build_surface(snapshot(kept), ephemeral=notes)
    assert [m.content for m in surface.messages] == ["q", "a", "note one", "note two"]
    assert all(m.is_ephemeral for m in surface.messages[2:]) and surface.messages[3] is notes[1]
    assert history_part(surface) == kept  # no ephemeral, no synthetic message


# -- the compactor measures exactly this surface ----------------------------------------------------

_texts = st.text(alphabet="abc xyz.,\n{}", max_size=60)


@st.composite
def _snapshots(draw: st.DrawFn) -> tuple[Snapshot, list[Message]]:
    """A thread after some boundary: user/assistant turns, tool rounds, some results pruned."""
    messages: list[Message] = []
    offloads: dict[int, Offload] = {}
    next_id = draw(st.integers(min_value=1, max_value=50))
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        shape = draw(st.sampled_from(["user", "assistant", "round", "system"]))
        if shape == "round":
            calls = [ToolCall(f"c{next_id}-{i}", draw(st.sampled_from(["shell", "query_kb"]))) for i in range(draw(st.integers(1, 3)))]
            messages.append(assistant(draw(_texts), *calls, id=next_id))
            next_id += 1
            for call in calls:
                messages.append(tool_result(call.id, draw(_texts), name=call.name, id=next_id))
                if draw(st.booleans()):
                    offloads[next_id] = Offload(next_id, call.name, f"/wd/{next_id}", SHA, draw(_texts), 900, 9, generation=1)
                next_id += 1
        else:
            messages.append(Message(shape, draw(_texts), id=next_id))  # type: ignore[arg-type]
            next_id += 1
    summarized = draw(st.booleans())
    snap = snapshot(tuple(messages), offloads=offloads, summary=draw(_texts) if summarized else None, boundary=0 if summarized else None, generation=len(offloads))
    ephemeral = [Message("system", draw(_texts)) for _ in range(draw(st.integers(0, 2)))]
    return snap, ephemeral


@settings(max_examples=150, deadline=None)
@given(_snapshots())
def test_the_compactor_measures_the_envelope_of_build_surface(case: tuple[Snapshot, list[Message]]) -> None:
    snap, ephemeral = case
    compactor = Compactor(None, summarizer=ExtractiveSummarizer(), workdir=Workdir(Path("/nonexistent")), policies=PolicySet(default_window=8000))  # type: ignore[arg-type]  # measure reads no store
    measured = compactor.measure(snap, ephemeral=ephemeral)
    expected = envelope_of(snap, build_surface(snap, ephemeral=ephemeral))
    assert measured.envelope == expected and measured.surface == expected.surface
    assert measured.tokens == default_meter("m").measure(expected).total
    # and that surface is the snapshot's messages, shown, in order
    shown = history_part(measured.surface)
    assert [m.id for m in shown] == [m.id for m in snap.messages]
    for original, seen in zip(snap.messages, shown):
        offload = snap.offloads.get(original.id) if original.id is not None else None
        assert seen == shown_message(original, offload)
    first = next((m for m in measured.surface.messages if m.role != "system"), None)
    assert first is None or first.role == "user"
    tail = measured.surface.messages[len(measured.surface.messages) - len(ephemeral) :] if ephemeral else ()
    assert [(m.content, m.is_ephemeral) for m in tail] == [(e.content, True) for e in ephemeral]


# -- closing markers (a call's recorded "no result") ------------------------------------------------


def _marker(call_id: str, message_id: int) -> Message:
    return tool_result(call_id, "[no result was recorded for this call]", id=message_id, missing_result=True)


def _call(message_id: int, *call_ids: str) -> Message:
    return assistant("", *(ToolCall(c, "shell", "{}") for c in call_ids), id=message_id)


def _wire_valid(messages: tuple[Message, ...]) -> bool:
    """What an OpenAI-compatible provider checks: every tool message directly follows (with other
    tool messages only) the assistant message whose call it answers, and every call is answered."""
    pending: set[str] = set()
    for m in messages:
        if m.role == "tool":
            if m.tool_call_id not in pending:
                return False
            pending.discard(m.tool_call_id)
        else:
            if pending:
                return False
            pending = {c.id for c in m.tool_calls}
    return not pending


def test_a_late_closing_marker_is_placed_right_after_its_calls_round() -> None:
    msgs = (
        user("Run the four checks", id=1),
        _call(2, "a", "b", "c", "d"),
        tool_result("a", "ok a", id=3),
        tool_result("c", "ok c", id=4),
        _call(5, "e"),
        tool_result("e", "ok e", id=6),
        assistant("Done, two checks never reported.", id=7),
        _marker("b", 8),
        _marker("d", 9),
    )
    surface = build_surface(snapshot(msgs))
    assert [m.id for m in surface.messages] == [1, 2, 3, 4, 8, 9, 5, 6, 7]
    assert _wire_valid(surface.messages)
    assert [m.id for m in history_part(surface)] == [1, 2, 3, 4, 5, 6, 7, 8, 9]  # units see physical order


def test_a_closing_marker_whose_call_is_behind_the_boundary_is_left_out() -> None:
    # the parallel call (ids 2-4) was compacted; its late marker (id 8) would be an orphan
    msgs = (user("next", id=5), _call(6, "f"), tool_result("f", "ok", id=7), _marker("b", 8))
    surface = build_surface(snapshot(msgs, summary="earlier work", boundary=4))
    assert [m.id for m in surface.messages] == [5, 6, 7]
    assert _wire_valid(surface.messages)
    assert [m.id for m in history_part(surface)] == [5, 6, 7]


def test_markers_in_place_and_surfaces_without_markers_are_unchanged() -> None:
    in_place = (user("go", id=1), _call(2, "a", "b"), tool_result("a", "ok", id=3), _marker("b", 4), assistant("ok", id=5))
    assert [m.id for m in build_surface(snapshot(in_place)).messages] == [1, 2, 3, 4, 5]
    plain = (user("go", id=1), _call(2, "a"), tool_result("a", "ok", id=3))
    assert build_surface(snapshot(plain)).messages == plain


def test_the_running_turns_pending_calls_stay_and_only_the_marker_moves() -> None:
    # an older call closed late, the newest assistant's call still running: nothing invented for it
    msgs = (user("go", id=1), _call(2, "a", "b"), tool_result("a", "ok", id=3), _call(4, "z"), _marker("b", 5))
    shown = build_surface(snapshot(msgs)).messages
    assert [m.id for m in shown] == [1, 2, 3, 5, 4]
    assert shown[-1].tool_calls and not any(m.tool_call_id == "z" for m in shown)
