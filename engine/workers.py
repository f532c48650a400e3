"""Worker processes of this package: ``python -m <module>`` of the running interpreter with stdin
and stdout piped (:func:`start_worker`), the counting worker (:class:`CountWorker`, ``python -m
engine.core.meter``) and reading a raw array from a worker's stdout (:func:`read_array`). Used by
:mod:`engine.snapshots` for its counting and stream workers; imports nothing of the engine."""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
from array import array
from pathlib import Path
from typing import Any

__all__ = ["CountWorker", "read_array", "start_worker"]


def read_array(stream: Any, typecode: str, n: int) -> array:
    """``n`` items of ``typecode`` read straight into a new array (no intermediate bytes object)."""
    out = array(typecode, [0]) * n
    view = memoryview(out).cast("B")
    got = 0
    while got < len(view):
        k = stream.readinto(view[got:])
        if not k:
            raise RuntimeError("the stream worker's reply ended early")
        got += k
    return out


class CountWorker:
    """A worker process counting texts (``python -m engine.core.meter``): tiktoken holds the GIL while
    it encodes a short text, so threads do not overlap with reading the next page; a process does.
    Started with ``subprocess`` (not ``multiprocessing``, which would re-run the caller's main
    script in the child); pages are sent on a helper thread, so neither side blocks the other on
    a full pipe. Results come back in the order pages were sent."""

    def __init__(self) -> None:
        self.proc = start_worker("engine.core.meter")
        self._outbox: "queue.Queue[Any]" = queue.Queue()
        self._sender = threading.Thread(target=self._send, name="snapshots-count-sender", daemon=True)
        self._sender.start()

    def _send(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            while True:
                item = self._outbox.get()
                if item is None:
                    break
                pickle.dump(item, stdin, protocol=pickle.HIGHEST_PROTOCOL)
                stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def submit(self, encoding: str, texts: list[str]) -> None:
        self._outbox.put((encoding, texts))

    def result(self) -> list[int]:
        assert self.proc.stdout is not None
        try:
            return pickle.load(self.proc.stdout)
        except EOFError:
            raise RuntimeError(f"the counting worker exited ({self.proc.poll()})") from None

    def close(self) -> None:
        self._outbox.put(None)
        self._sender.join(timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_worker(module: str) -> "subprocess.Popen[bytes]":
    """``python -m <module>`` of this interpreter with this package importable, stdin and stdout piped."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
