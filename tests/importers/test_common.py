"""Shared helpers: image headers, base64 sizes, data URLs and the repair pass on its own."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest

from engine.importers import MISSING_RESULT, ImagePart, ImportedMessage, ImportedToolCall, ImportFormatError, TextPart, parse
from engine.importers._common import base64_size, image_from_url, image_size, repair
from engine.importers.jsonl import iter_lines, json_error_text


def _png(w: int, h: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))


def _jpeg(w: int, h: int, exif: int = 0) -> bytes:
    app1 = b"\xff\xe1" + struct.pack(">H", 2 + exif) + b"E" * exif if exif else b""
    sof = b"\xff\xc2" + struct.pack(">HBHHB", 17, 8, h, w, 3) + bytes(9)
    return b"\xff\xd8" + app1 + sof + b"\xff\xd9"


@pytest.mark.parametrize(("data", "size"), [
    (_png(1920, 1080), (1920, 1080)),
    (_jpeg(800, 600), (800, 600)),
    (_jpeg(4000, 3000, exif=30_000), (4000, 3000)),  # SOF after a long EXIF segment (progressive)
    (b"GIF89a" + struct.pack("<HH", 7, 9) + bytes(20), (7, 9)),
    (b"RIFF" + bytes(4) + b"WEBPVP8X" + bytes(8) + (99).to_bytes(3, "little") + (49).to_bytes(3, "little"), (100, 50)),
    (b"RIFF" + bytes(4) + b"WEBPVP8 " + bytes(10) + struct.pack("<HH", 320, 240), (320, 240)),
    (b"not an image at all", None),
    (b"\x89PNG\r\n\x1a\n", None),  # cut short
])
def test_image_size_from_headers(data, size):
    assert image_size(data) == size


def test_data_urls_and_base64_sizes():
    data = base64.b64encode(_png(3, 2) + bytes(100)).decode()
    assert base64_size(data) == 133 and base64_size("") == 0 and base64_size(None) is None
    assert image_from_url(f"data:image/png;base64,{data}") == ImagePart("image/png", 133, "base64", width=3, height=2)
    assert image_from_url("https://x.example/a.webp?size=2") == ImagePart("image/webp", None, "url",
                                                                          url="https://x.example/a.webp?size=2")
    assert image_from_url("data:image/svg+xml,<svg/>") == ImagePart("image/svg+xml", 6, "base64")
    assert image_from_url(None) == ImagePart(None, None, "url")


def _m(role, key, **kw):
    return ImportedMessage(role=role, parts=(TextPart(key),), source_key=key, **kw)


def test_repair_marks_every_pairing_problem_and_maps_positions():
    a = _m("assistant", "a", tool_calls=(ImportedToolCall("c1", "read"), ImportedToolCall("c2", "grep")))
    msgs = [_m("user", "u"), a, _m("tool", "r1", tool_call_id="c1"), _m("tool", "rx", tool_call_id="zz"),
            _m("user", "u2"), _m("tool", "late", tool_call_id="c2"), _m("tool", "again", tool_call_id="c1")]
    out, index_map = repair(msgs)
    assert [(m.source_key, m.tool_name, m.repair) for m in out] == [
        ("u", None, None), ("a", None, None), ("r1", "read", None), ("rx", None, "orphan"),
        ("a#missing:c2", "grep", MISSING_RESULT), ("u2", None, None),
        ("late", "grep", "duplicate_result"), ("again", "read", "duplicate_result")]
    assert index_map == [0, 1, 2, 3, 5, 6, 7]


def test_repair_leaves_a_trailing_call_open_while_the_file_grows():
    a = _m("assistant", "a", tool_calls=(ImportedToolCall("c1", "read"),))
    out, _ = repair([_m("user", "u"), a], final=False)
    assert [m.source_key for m in out] == ["u", "a"]
    out, _ = repair([_m("user", "u"), a], final=True)
    assert [m.repair for m in out] == [None, None, MISSING_RESULT]


def test_a_number_past_the_digit_limit_is_a_json_error_not_a_crash():
    # json.loads raises a plain ValueError (no msg / lineno / colno) for an integer literal longer than
    # Python's digit limit: a whole-document source is then "not JSON", a JSONL line a malformed line
    huge = "1" * 5000
    with pytest.raises(ImportFormatError, match="not JSON: Exceeds the limit"):
        parse('[{"role": "user", "content": "hi", "n": ' + huge + "}]", format="openai-chat")
    (entry,) = iter_lines(b'{"n": ' + huge.encode() + b"}\n")
    assert entry.value is None and entry.error is not None and entry.error.startswith("malformed JSON: Exceeds the limit")


def test_json_error_text_names_the_position_of_malformed_json():
    try:
        json.loads('{"a": 1,\n "b": }')
    except ValueError as exc:
        assert json_error_text(exc) == "Expecting value"
        assert json_error_text(exc, line=True) == "Expecting value at line 2"
        assert json_error_text(exc, column=True) == "Expecting value (column 7)"
    else:
        pytest.fail("malformed JSON parsed")
