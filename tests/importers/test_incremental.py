"""Idempotency keys, reading a file that is still being written, the resumable JSONL reader, and the
parse time of a 2 MB Claude Code session."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from engine.importers import ImportFormatError, JsonlFollower, iter_new_entries, parse

from .helpers import FIXTURES
from .test_detect import CASES

CC = FIXTURES / "claude-code" / "project" / "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10.jsonl"
CODEX = CASES[3][0]
SID = "7c1f0e52-3b9a-4d21-9e55-0a6b2f4c8d10"


def _cc(uuid, parent, type_, content, **kw):
    msg = {"role": type_, "content": content}
    if type_ == "assistant":
        msg.update(id=kw.pop("mid"), model="claude-opus-4-5-20251101",
                   usage={"input_tokens": 5, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0,
                          "output_tokens": 20})
    return json.dumps({"parentUuid": parent, "isSidechain": False, "sessionId": SID, "type": type_, "uuid": uuid,
                       "timestamp": "2026-11-30T15:00:00.000Z", "cwd": "/home/dev/parser", "message": msg, **kw}) + "\n"


@pytest.mark.parametrize(("path", "fmt"), CASES, ids=[f"{f}:{p.name}" for p, f in CASES])
def test_source_keys_are_unique_and_stable(path, fmt):
    first = parse(path)
    again = parse(path)
    assert first == again  # parsing is deterministic
    for s in first:
        keys = [m.source_key for m in s.messages]
        assert len(keys) == len(set(keys)), keys


def test_claude_code_append_keeps_old_keys_and_adds_new_ones(tmp_path):
    path = tmp_path / CC.name
    shutil.copy(CC, path)
    (old, *_) = parse(path, final=False)
    with path.open("a") as fh:
        fh.write(_cc("n1", "u23", "user", "Also add a regression test."))
        fh.write(_cc("n2", "n1", "assistant", [{"type": "text", "text": "Adding it."}], mid="msg_N1"))
        fh.write(_cc("n3", "n2", "assistant", [{"type": "tool_use", "id": "toolu_N1", "name": "Write",
                                                 "input": {"file_path": "t.py"}}], mid="msg_N1"))
    (new, *_) = parse(path, final=False)
    old_keys = [m.source_key for m in old.messages]
    new_keys = [m.source_key for m in new.messages]
    assert new_keys == old_keys + ["n1", "n2"]
    assert new.messages[-1].call_ids == ("toolu_N1",)  # still open: no missing_result while being written
    assert old.stable_messages == len(old.messages) - 1  # its last message is an assistant message
    assert new.stable_messages == len(new.messages) - 1 and new.messages[len(old.messages) - 1] == old.messages[-1]
    assert [u.response_id for u in new.usage][-1] == "msg_N1"
    with path.open("a") as fh:
        fh.write(_cc("n4", "n3", "user", [{"type": "tool_result", "tool_use_id": "toolu_N1", "content": "written"}]))
    (done, *_) = parse(path)
    assert [m.source_key for m in done.messages] == new_keys + ["n4:toolu_N1"]
    assert done.messages[-1].tool_name == "Write" and done.messages[-1].repair is None
    assert done.stable_messages == len(done.messages)


def test_codex_append_keeps_old_keys_and_adds_new_ones(tmp_path):
    path = tmp_path / CODEX.name
    shutil.copy(CODEX, path)
    (old,) = parse(path)
    with path.open("a") as fh:
        for payload in ({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
                        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sure."}]}):
            fh.write(json.dumps({"timestamp": "2026-11-30T11:00:00Z", "type": "response_item", "payload": payload}) + "\n")
    (new,) = parse(path)
    assert [m.source_key for m in new.messages] == [m.source_key for m in old.messages] + ["L31", "L32"]
    assert new.messages[:len(old.messages)] == old.messages


def test_a_half_written_last_line(tmp_path):
    path = tmp_path / "s.jsonl"
    full = _cc("a", None, "user", "run it") + _cc("b", "a", "assistant", [
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}], mid="msg_1")
    half = _cc("c", "b", "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}])[:40]
    path.write_text(full + half)
    (live,) = parse(path, final=False)
    assert [m.source_key for m in live.messages] == ["a", "b"] and live.warnings == ()
    (ended,) = parse(path)  # a finished file: the cut line is a warning and the open call is repaired
    assert [m.repair for m in ended.messages] == [None, None, "missing_result"]
    assert [(w.line, w.reason.split(":")[0]) for w in ended.warnings] == [(3, "malformed JSON")]


def test_iter_new_entries_never_returns_a_partial_line(tmp_path):
    path = tmp_path / "grow.jsonl"
    path.write_bytes(b'{"n": 1}\n\n{"n": 2}\n{"n": ')
    entries, offset = iter_new_entries(path, 0)
    assert [(e.line, e.value) for e in entries] == [(1, {"n": 1}), (3, {"n": 2})]
    assert offset == len(b'{"n": 1}\n\n{"n": 2}\n') and entries[1].offset == len(b'{"n": 1}\n\n')
    assert iter_new_entries(path, offset) == ([], offset)  # nothing new is complete yet
    with path.open("ab") as fh:
        fh.write(b'3}\nnot json\n{"n": 4')
    more, offset2 = iter_new_entries(path, offset, start_line=4)
    assert [(e.line, e.value, e.error is None) for e in more] == [(4, {"n": 3}, True), (5, None, False)]
    assert more[1].error.startswith("malformed JSON")
    with path.open("ab") as fh:
        fh.write(b"}\n")
    last, offset3 = iter_new_entries(path, offset2, start_line=6)
    assert [(e.line, e.value) for e in last] == [(6, {"n": 4})] and offset3 == path.stat().st_size


def test_follower_numbers_lines_across_reads_and_restarts_on_rewrite(tmp_path):
    path = tmp_path / "grow.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2')
    f = JsonlFollower(path)
    assert [(e.line, e.value) for e in f.read_new()] == [(1, {"a": 1})]
    with path.open("ab") as fh:
        fh.write(b'}\n\n{"a": 3}\n')
    assert [(e.line, e.value) for e in f.read_new()] == [(2, {"a": 2}), (4, {"a": 3})]
    assert f.read_new() == []
    path.write_bytes(b'{"b": 1}\n')  # rewritten, shorter
    assert [(e.line, e.value) for e in f.read_new()] == [(1, {"b": 1})]


def test_a_2mb_claude_code_session_parses_quickly(tmp_path):
    path = tmp_path / "big.jsonl"
    parent = None
    lines = []
    size = 0
    i = 0
    while size < 2_000_000:
        u, a1, a2, r1, r2 = (f"{i}-{k}" for k in "uabrs")
        batch = [
            _cc(u, parent, "user", f"step {i}: please look at module {i} " + "context " * 40),
            _cc(a1, u, "assistant", [{"type": "thinking", "thinking": "plan " * 30, "signature": "s"}], mid=f"m{i}"),
            _cc(a2, a1, "assistant", [{"type": "tool_use", "id": f"t{i}a", "name": "Read", "input": {"file_path": f"m{i}.py"}},
                                      ], mid=f"m{i}"),
            _cc(r1, a2, "user", [{"type": "tool_result", "tool_use_id": f"t{i}a", "content": "line of code\n" * 60}]),
            _cc(r2, r1, "assistant", [{"type": "text", "text": "done " * 20}], mid=f"n{i}"),
        ]
        lines.extend(batch)
        size += sum(len(x) for x in batch)
        parent = r2
        i += 1
    path.write_text("".join(lines))
    start = time.perf_counter()
    (s, *_) = parse(path)
    elapsed = time.perf_counter() - start
    print(f"\n2 MB Claude Code session: {path.stat().st_size / 1e6:.2f} MB, {len(lines)} lines, "
          f"{len(s.messages)} messages, parsed in {elapsed:.3f} s")
    assert len(s.messages) == 4 * i and len(s.usage) == 2 * i and s.warnings == ()
    assert elapsed < 10  # generous: the target is well under a second or two


@pytest.mark.parametrize("source", [CC, CODEX], ids=["claude-code", "codex"])
def test_a_follower_writing_stable_messages_ends_with_the_full_import(tmp_path, source):
    """Replay the file as it is being written (cut at every line end and in the middle of lines), and
    write what each re-parse calls stable and new. The result is the full import, in order; only a
    message of a branch the user later rewound (Claude Code) stays written as an extra."""
    data = source.read_bytes()
    path = tmp_path / source.name
    cuts = sorted({i + 1 for i, ch in enumerate(data) if ch == 0x0A} | set(range(7, len(data), 911)))
    written: list[str] = []
    for cut in cuts:
        path.write_bytes(data[:cut])
        try:
            s = parse(path, format=fmt_of(source), final=False)[0]
        except ImportFormatError:  # an almost empty prefix is not yet the format
            continue
        for m in s.messages[:s.stable_messages]:
            if m.source_key not in written:
                written.append(m.source_key)
    final = [m.source_key for m in parse(source)[0].messages]
    written += [k for k in final if k not in written]
    assert [k for k in written if k in final] == final
    # u19 was stable before the user rewound past it; u19x (its answer) was still the open tail then
    assert [k for k in written if k not in final] == (["u19"] if source == CC else [])


def fmt_of(path):
    return "claude-code" if path == CC else "codex"
