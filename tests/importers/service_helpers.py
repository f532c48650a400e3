"""Importing through the real service (SQLite file or PostgreSQL) and following a growing file, for the
tests of the formats that tail (OpenHands evaluation output, Aider, Gemini CLI)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core.messages import Message
from engine.service import Service, open_service


@contextmanager
def service(url: str, tmp_path: Path) -> Iterator[Service]:
    svc = open_service(url, workdir=tmp_path / "wd", summarizer=ExtractiveSummarizer(), create=True)
    try:
        yield svc
    finally:
        svc.close()


def stored(svc: Service, key: str) -> list[Message]:
    return [m.message for m in svc.reads.messages_page(key, limit=1000)]


def follow_while_growing(svc: Service, path: Path, chunks: list[bytes], *, delay: float = 0.25,
                         seconds: float = 60.0) -> list:
    """Follow ``path`` while another thread appends ``chunks`` to it, ``delay`` apart; returns the
    follower's reports. The writer stops the follower once the last chunk is written (the follower
    reads the file once more before it returns), so a slow machine cannot cut the follow short;
    ``seconds`` is only a safety bound."""
    stop = threading.Event()

    def grow() -> None:
        try:
            for chunk in chunks:
                time.sleep(delay)
                with path.open("ab") as fh:
                    fh.write(chunk)
        finally:
            stop.set()

    t = threading.Thread(target=grow, daemon=True)
    t.start()
    reports = svc.imports.follow_file(path, poll_seconds=0.05, stop=stop, seconds=seconds)
    t.join()
    return reports
