"""The message model holds what real transcripts carry: reasoning, attachments, is_error, meta kinds,
source keys, the developer role; the content hash covers them (and is unchanged for a message
without them); the OpenAI wire format keeps images; the store round-trips every field and refuses
a second message with the same source key in one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.core.errors import EngineError
from engine.core.messages import Attachment, InvalidMessage, Message, Reasoning, ToolCall, assistant, tool_result
from engine.service import Service
from tests import door_ops

from .conftest import ServiceFactory

#: the content hash of these messages as computed before the new fields existed (docs/schema.md)
OLD_HASHES = {
    "user": ("hi", "c35c3605aeeb79c11ee0c441a633611fdb6d92bfcaaeaf034e41df60b2db5d82"),
}


def test_hash_of_a_plain_message_is_unchanged_and_covers_the_new_fields() -> None:
    text, digest = OLD_HASHES["user"]
    plain = Message("user", text)
    assert plain.content_hash() == digest
    variants = [
        Message("user", text, attachments=(Attachment("image", media_type="image/png", byte_size=10),)),
        Message("user", text, meta_kind="command"),
        Message("user", text, is_error=True),
        Message("user", text, reasoning=(Reasoning("hm"),)),
        Message("user", text, reasoning=(Reasoning("hm", signature="s"),)),
    ]
    hashes = {m.content_hash() for m in variants}
    assert len(hashes) == len(variants) and digest not in hashes
    assert Message("user", text, source_key="k1").content_hash() == digest  # where it came from is not what it is


def test_invalid_new_fields_are_refused() -> None:
    with pytest.raises(InvalidMessage):
        Attachment("video")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        Attachment("image", url="data:image/png;base64,AAAA")  # never the bytes
    with pytest.raises(InvalidMessage):
        Attachment("image", width=-1)
    with pytest.raises(InvalidMessage):
        Message("user", "x", meta_kind="")
    with pytest.raises(InvalidMessage):
        Message("user", "x", source_key="")
    with pytest.raises(InvalidMessage):
        Message("user", "x", reasoning=("not a block",))  # type: ignore[arg-type]
    assert Message("developer", "rules").role == "developer"


def test_openai_wire_format_keeps_images() -> None:
    data = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 400}},
            {"type": "image_url", "image_url": {"url": "https://example.org/cat.png", "detail": "low"}},
        ],
    }
    m = Message.from_openai(data)
    assert m.content == "what is this?"
    inline, remote = m.attachments
    assert (inline.source, inline.media_type, inline.byte_size, inline.url) == ("base64", "image/png", 300, None)
    assert (remote.source, remote.url) == ("url", "https://example.org/cat.png")
    out = m.to_openai()
    assert out["content"][0] == {"type": "text", "text": "what is this?"}
    assert "image/png" in out["content"][1]["text"]  # the bytes were not kept: said so
    assert out["content"][2] == {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}
    assert Message.from_openai(out).attachments[-1] == remote
    assert Message("user", "plain").to_openai() == {"role": "user", "content": "plain"}


def test_with_content_keeps_every_field() -> None:
    m = tool_result("c1", "full text", name="read")
    m = Message("tool", "full", tool_call_id="c1", name="read", is_error=True, source_key="k",
                attachments=(Attachment("image", width=1, height=1),))
    shown = m.with_content("preview", pruned="abc")
    assert (shown.content, shown.is_error, shown.source_key, shown.attachments, shown.metadata["pruned"]) == (
        "preview", True, "k", m.attachments, "abc")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def svc(request: pytest.FixtureRequest) -> Iterator[Service]:
    factory: ServiceFactory = request.getfixturevalue("make_service" if request.param == "sqlite" else "make_pg_service")
    yield factory()


def test_store_round_trips_every_field(svc: Service, new_key) -> None:
    key = new_key("fields")
    svc.runs.create_thread(key)
    written = [
        Message("developer", "house rules", source_key="d"),
        Message("user", "<command-name>/x</command-name>", meta_kind="command", source_key="u1"),
        Message("user", "look", attachments=(Attachment("image", media_type="image/webp", byte_size=99, width=640, height=480),
                                              Attachment("document", media_type="application/pdf", byte_size=5, source="file",
                                                         url="file-123", title="spec.pdf")), source_key="u2"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "run"),), source_key="a1",
                reasoning=(Reasoning("think", signature="sig"), Reasoning("", summary="s", encrypted="blob", redacted=True))),
        Message("tool", "boom", tool_call_id="c1", name="run", is_error=True, source_key="t1"),
    ]
    svc.runs.append_messages(key, written)
    back = [s.message for s in svc.reads.messages_page(key)]
    strip = [Message(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name,
                     reasoning=m.reasoning, attachments=m.attachments, is_error=m.is_error, meta_kind=m.meta_kind,
                     source_key=m.source_key) for m in back]
    assert strip == written
    assert [m.content_hash() for m in back] == [m.content_hash() for m in written]


def test_a_source_key_is_unique_within_a_thread(svc: Service, new_key) -> None:
    a, b = new_key("a"), new_key("b")
    for k in (a, b):
        svc.runs.create_thread(k)
        svc.runs.append_message(k, Message("user", "hi", source_key="same"))  # another thread may reuse it
    with pytest.raises(EngineError) as err:
        svc.runs.append_message(a, Message("user", "again", source_key="same"))
    assert err.value.code == "duplicate_source_key"
    with pytest.raises(EngineError):
        door_ops.bulk_append(svc.store, a, [Message("user", "new", source_key="fresh"), Message("user", "again", source_key="same")])
    assert svc.reads.thread(a).message_count == 1 and [s.message.source_key for s in svc.reads.messages_page(a)] == ["same"]
    svc.runs.append_message(a, assistant("keys are optional"))
