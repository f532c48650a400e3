"""benchmarks/gui_timeline.py measures the memory of the process that measures, not of the one that
built the thread (issue #16: "peak once the side panels are in +688 MB" on SQLite at 1M messages was
the benchmark parent's own build, 880 MB for 1M messages in memory vs 192 MB for 100k, carried into
each measuring child's ``ru_maxrss`` by ``exec``; the child's own peak grows by ~20 MB).

- a child started by a process whose peak is large reports its own peak, not its parent's;
- ``--build`` builds the thread in a process of its own (the parent never holds the messages).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
BIG_MB = 256

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's /proc")


def _vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_peak_rss_is_the_measuring_process_own_not_its_parents() -> None:
    big = b"\x01" * (BIG_MB << 20)  # this process's peak is now at least BIG_MB (the pages are written)
    del big
    parent_peak = _vm_hwm_mb()
    assert parent_peak >= BIG_MB
    code = (
        "import resource, sys; sys.path[:0] = [sys.argv[1]]; import gui_timeline; "
        "print(gui_timeline.peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_API": "pyside6"}
    out = subprocess.run([sys.executable, "-c", code, str(BENCH)], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env, check=True)
    child_peak, child_maxrss = map(float, out.stdout.split())
    # the child imports the engine (well under BIG_MB); its ru_maxrss holds the parent's peak on Linux
    assert child_peak < parent_peak - BIG_MB / 2, (child_peak, parent_peak)
    if child_maxrss >= parent_peak - 1:  # the trap the benchmark used to fall into
        assert child_peak < child_maxrss - BIG_MB / 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 >= BIG_MB  # sanity: the parent's own


def test_build_mode_writes_the_thread_in_its_own_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_API": "pyside6"}
    subprocess.run([sys.executable, str(BENCH / "gui_timeline.py"), "--build", url, str(tmp_path / "wd"), "--messages", "40"],
                   cwd=ROOT, capture_output=True, text=True, timeout=120, env=env, check=True)
    from engine.service import open_service

    svc = open_service(url, workdir=tmp_path / "wd")
    try:
        assert svc.reads.message_count("timeline-bench") == 40
        assert len(svc.reads.messages_page("timeline-bench", limit=100)) == 40
    finally:
        svc.close()
