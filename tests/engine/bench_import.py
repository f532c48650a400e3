"""Import benchmark (run by hand): a generated ~2 MB Claude Code session into a new database.

    .venv/bin/python -m tests.engine.bench_import [--mb 2] [--db URL] [--keep]

Prints the file size, the number of entries and messages, and the time of parse + write (the
figure in docs/import.md), then the time of a re-import (idempotent: nothing written) and of the
first timeline page. The session has the shape of a real one: user prompts, assistant responses
written as one entry per content block (thinking, text, parallel ``tool_use`` blocks sharing one
``message.id``), tool results with long outputs, usage on every response, meta entries.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

SESSION = "5b0c2d7e-1f3a-4c5d-8e9f-a0b1c2d3e4f5"
_OUTPUT = "".join(f"{i:4d}\tdef handler_{i}(request):  # returns the parsed body of the request\n" for i in range(40))


def _entry(kind: str, uid: str, parent: str | None, n: int, message: dict[str, Any], **extra: Any) -> str:
    return json.dumps({
        "parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/dev/app", "sessionId": SESSION,
        "version": "2.0.31", "gitBranch": "main", "type": kind, "uuid": uid,
        "timestamp": f"2026-11-30T{10 + n // 3600 % 10:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z", "message": message, **extra,
    })


def generate(path: Path, megabytes: float) -> int:
    """Write the session; returns the number of entries."""
    lines: list[str] = []
    parent: str | None = None
    n = 0
    size = 0
    turn = 0

    def add(line: str, uid: str) -> None:
        nonlocal parent, n, size
        lines.append(line)
        parent = uid
        n += 1
        size += len(line) + 1

    while size < megabytes * 1_000_000:
        turn += 1
        uid = uuid.uuid4().hex
        add(_entry("user", uid, parent, n, {"role": "user", "content": f"Step {turn}: look at handler_{turn} and fix its parsing."}), uid)
        if turn % 10 == 0:
            uid = uuid.uuid4().hex
            add(_entry("user", uid, parent, n, {"role": "user", "content": "<system-reminder>keep the todo list current</system-reminder>"},
                       isMeta=True), uid)
        msg_id = f"msg_{turn:05d}"
        usage = {"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000 + 40 * turn, "output_tokens": 90}
        calls = [f"toolu_{turn:05d}_{k}" for k in range(2)]
        blocks = [{"type": "thinking", "thinking": f"handler_{turn} may be missing a guard; read it and grep for callers.", "signature": "EqMB"},
                  {"type": "text", "text": "Reading the handler and its callers."},
                  {"type": "tool_use", "id": calls[0], "name": "Read", "input": {"file_path": f"/home/dev/app/h{turn}.py"}},
                  {"type": "tool_use", "id": calls[1], "name": "Grep", "input": {"pattern": f"handler_{turn}", "path": "."}}]
        for i, block in enumerate(blocks):
            uid = uuid.uuid4().hex
            add(_entry("assistant", uid, parent, n, {"id": msg_id, "type": "message", "role": "assistant", "model": "claude-opus-4-5-20251101",
                                                     "content": [block], "stop_reason": "tool_use" if i == len(blocks) - 1 else None,
                                                     "usage": usage}, requestId=f"req_{turn}"), uid)
        for call in calls:
            uid = uuid.uuid4().hex
            add(_entry("user", uid, parent, n, {"role": "user", "content": [
                {"tool_use_id": call, "type": "tool_result", "content": _OUTPUT, "is_error": call.endswith("_1") and turn % 7 == 0}]}), uid)
        uid = uuid.uuid4().hex
        add(_entry("assistant", uid, parent, n, {"id": f"{msg_id}b", "type": "message", "role": "assistant",
                                                 "model": "claude-opus-4-5-20251101",
                                                 "content": [{"type": "text", "text": f"Fixed handler_{turn}: it now checks the body."}],
                                                 "stop_reason": "end_turn", "usage": usage}), uid)
    path.write_text("\n".join(lines) + "\n")
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=2.0)
    ap.add_argument("--db", help="database URL (default: a new SQLite file)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    from engine.service import open_service

    tmp = Path(tempfile.mkdtemp(prefix="bench-import-"))
    src = tmp / f"{SESSION}.jsonl"
    entries = generate(src, args.mb)
    url = args.db or f"sqlite:///{tmp / 'bench.db'}"
    svc = open_service(url, workdir=tmp / "wd", create=True)
    try:
        t0 = time.perf_counter()
        (report,) = svc.import_file(src)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        (again,) = svc.import_file(src)
        second = time.perf_counter() - t0
        t0 = time.perf_counter()
        page = svc.messages_page(report.thread, limit=500)
        svc.visible_tokens(report.thread, page, svc.offloads(report.thread, [m.id for m in page]))
        st = svc.status(report.thread)
        open_page = time.perf_counter() - t0
    finally:
        svc.close()
    print(f"file {src.stat().st_size / 1e6:.2f} MB, {entries} entries -> {report.messages} messages, "
          f"{report.tool_calls} calls, {report.requests} requests")
    print(f"import {first:.2f} s (parse + one transaction); re-import {second:.2f} s ({again.messages} written); "
          f"first page + badges + status {open_page:.2f} s ({st.tokens} tokens)")
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
