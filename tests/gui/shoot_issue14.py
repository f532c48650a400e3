"""Screenshots of issue #14 for docs/screenshots, from the real service on a real database:

* ``dropped-specifics.png``: the summary card of a manual compaction whose summary dropped things
  the retained tail still refers to (the warning, and the list expanded);
* ``whatif.png``: Compaction → What if… after a comparison (threshold 0.6 against what was recorded)
  and after a sweep of the threshold, one above the other.

``python -m tests.gui.shoot_issue14 OUT_DIR [--db URL --thread KEY]``: without ``--db`` it builds the
demo database in a temporary directory and adds the incident thread below (appended through
``Service`` like any platform, compacted by hand with the engine's extractive summarizer). The
tests use the same thread through the :func:`incident` fixture (both backends)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")

INCIDENT = "incident-api-rollout"


def add_incident(svc: Any) -> None:
    """A deploy incident: long tool output early (paths, commands, errors, numbers with units, a
    commit), a short retained tail that refers back to some of it by short forms."""
    from engine.core.messages import ToolCall, assistant, tool_result, user

    svc.runs.create_thread(INCIDENT, title="API rollout stuck at 3/8 pods", provider="sim", model="sim-12k")
    svc.runs.configure(INCIDENT, system_prompt="You are the on-call SRE assistant. Quote commands, paths and error messages exactly.")
    log = "\n".join(f"2026-11-30T09:{m:02d}:1{m % 10}Z api-7d9f{m:02d} readiness probe failed: GET /healthz returned 503 after 30 s" for m in range(40))
    events = "\n".join(f"Warning  BackOff  pod/api-7d9f{m:02d}  Back-off restarting failed container (OOMKilled, limit 512 MiB)" for m in range(30))
    msgs = [
        user("The rollout of release v2.14.3 is stuck: 3 of 8 pods are ready. Runbook: https://wiki.example.com/runbooks/api-rollback"),
        assistant("Checking the rollout.", ToolCall("r1", "bash", json.dumps({"command": "kubectl rollout status deploy/api -n prod --timeout=120s"}))),
        tool_result("r1", 'error: deployment "api" exceeded its progress deadline\n'
                           "last CI run of v2.14.3: FAILED tests/test_pool.py::test_pool_sizing - AssertionError: 16 workers need 768 MiB\n"
                           "image ghcr.io/example/api@sha256:4f1c2a9e7b3d5f60a8c2e4b6d8f0a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5\n" + log, name="bash"),
        *[m for i in range(6) for m in (
            assistant(f"Describing pod api-7d9f0{i}.", ToolCall(f"d{i}", "bash", json.dumps({"command": f"kubectl describe pod api-7d9f0{i} -n prod"}))),
            tool_result(f"d{i}", f"Name: api-7d9f0{i}\nNode: node-pool-b-{i}\nLast State: Terminated (OOMKilled, exit code 137)\nLimits: memory 512Mi\n"
                                 f"Mounts: /etc/api/limits.yaml from configmap api-limits-v{i % 2 + 7} (ro)\n"
                                 + "\n".join(f"  env WORKER_{k}=on" for k in range(40)), name="bash"),
        )],
        assistant("All six pods were OOMKilled (exit code 137) at the 512Mi limit."),
        user("What do the cluster events say, and what changed in the release?"),
        assistant("Looking at the events.", ToolCall("r2", "bash", json.dumps({"command": "kubectl get events -n prod --field-selector involvedObject.kind=Pod"}))),
        tool_result("r2", events, name="bash"),
        assistant("Pods are OOMKilled at the 512 MiB limit. Checking what changed in the release.",
                  ToolCall("r3", "bash", json.dumps({"command": "git log --oneline -5 -- charts/api/values-prod.yaml"}))),
        tool_result("r3", "9c41e07d2b5f8a31c6e0d4f7a2b9e8c1d3f5a7b9 charts: raise worker pool to 16 threads (memory per worker 48 MiB)\n"
                           "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d charts: bump api image to v2.14.3", name="bash"),
        assistant("Commit 9c41e07 doubled the worker pool; 16 × 48 MiB no longer fits in 512 MiB. Decision: roll back the chart, keep the image."),
        user("Are the nodes themselves short of memory?"),
        assistant("", ToolCall("r5", "bash", json.dumps({"command": "kubectl top nodes"}))),
        tool_result("r5", "NAME            CPU(cores)   MEMORY(bytes)   MEMORY%\n" + "\n".join(f"node-pool-b-{i}   {300 + i * 7}m   {2100 + i * 13}Mi   {41 + i}%" for i in range(24)), name="bash"),
        assistant("No: every node is below 70 % memory. The limit is per pod."),
        user("Agreed. Before rolling back, check the config file the workers read."),
        assistant("", ToolCall("r4", "read_file", json.dumps({"path": "/srv/api/config/workers.toml"}))),
        tool_result("r4", "[pool]\nthreads = 16\nmax_memory = \"768MiB\"\n# see services/api/worker_pool.py for the sizing rule\n" + "\n".join(f"# tuning note {i}: keep queue depth under {i * 10} jobs" for i in range(60)), name="read_file"),
        assistant("", ToolCall("r6", "bash", json.dumps({"command": "grep -n max_memory services/api/worker_pool.py"}))),
        tool_result("r6", "88:    max_memory = parse_size(cfg.pool.max_memory)  # per pod, not per worker", name="bash"),
        assistant("/srv/api/config/workers.toml still says threads = 16 and max_memory 768MiB, above the 512 MiB pod limit."),
        user("OK. Roll back to the commit before 9c41e07, lower threads in workers.toml, keep image 4f1c2a9e, and tell me if test_pool_sizing still fails with the AssertionError."),
    ]  # fmt: skip
    svc.runs.append_messages(INCIDENT, msgs)
    result = svc.compaction.compact(INCIDENT)
    if result.status != "completed":
        raise SystemExit(f"the incident thread was not compacted: {result.status} {result.reason}")


@dataclass(frozen=True)
class Incident:
    """A database holding the incident thread (compacted by hand), on one backend."""

    url: str
    workdir: Path

    def open(self) -> Any:
        """The real service as the inspector opens it (the offline summarizer, the stored policy)."""
        from engine.compaction.summarizers.extractive import ExtractiveSummarizer
        from engine.service import open_service

        return open_service(self.url, workdir=self.workdir, summarizer=ExtractiveSummarizer(), policies=None)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def incident(request: pytest.FixtureRequest, tmp_path: Path) -> Incident:
    """The incident thread in a fresh database of each backend (the demo's 12k-window policy),
    written on a plain thread (never inside a test's qasync loop)."""
    from engine.apps.demo import DEMO_POLICY
    from engine.store import migrate

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'incident.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    made = Incident(url, tmp_path / "incident-workdir")

    def write() -> None:
        migrate(url)
        svc = made.open()
        try:
            svc.steering.set_policy(DEMO_POLICY)
            add_incident(svc)
        finally:
            svc.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(write).result(timeout=60)
    return made


def build(tmp: Path) -> tuple[str, Path]:
    from engine.apps.demo import build_demo
    from engine.service import open_service

    url = f"sqlite:///{tmp / 'demo.db'}"
    build_demo(url, workdir=tmp / "workdir")
    svc = open_service(url, workdir=tmp / "workdir")
    try:
        add_incident(svc)
    finally:
        svc.close()
    return url, tmp / "workdir"


async def _settle(app: Any, window: Any) -> None:
    await window.settle()
    for _ in range(5):
        app.processEvents()
        await asyncio.sleep(0.02)


async def _shoot(app: Any, window: Any, url: str, out: Path, thread: str, whatif_thread: str) -> None:
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QColor, QPainter, QPixmap

    assert await window.open_database(url, select=thread), window.banner.text()
    await _settle(app, window)
    await window.show_boundary()
    await _settle(app, window)
    window.detail.dropped_toggle.setChecked(True)
    await _settle(app, window)
    window.grab().save(str(out / "dropped-specifics.png"), "PNG")

    await window.select_thread(whatif_thread)
    await _settle(app, window)
    dialog = window.open_whatif()
    dialog.checks["threshold_ratio"].setChecked(True)
    dialog.spins["threshold_ratio"].setValue(0.6)
    assert await dialog.run() == "done", dialog.error.text()
    await _settle(app, window)
    compare = dialog.grab()
    dialog.sweep_mode.setChecked(True)
    dialog.sweep_param.setCurrentIndex(dialog.sweep_param.findData("threshold_ratio"))
    dialog.sweep_from.setValue(0.5)
    dialog.sweep_to.setValue(0.95)
    dialog.sweep_step.setValue(0.05)
    assert await dialog.run() == "done", dialog.error.text()
    await _settle(app, window)
    sweep = dialog.grab()
    gap = 12
    picture = QPixmap(max(compare.width(), sweep.width()) + 2 * gap, compare.height() + sweep.height() + 3 * gap)
    picture.fill(QColor(window.palette().window().color()).darker(115))
    painter = QPainter(picture)
    painter.drawPixmap(QPoint(gap, gap), compare)  # the comparison above, the sweep below
    painter.drawPixmap(QPoint(gap, 2 * gap + compare.height()), sweep)
    painter.end()
    picture.save(str(out / "whatif.png"), "PNG")
    dialog.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--db", help="an existing database (default: a fresh demo plus the incident thread)")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--thread", default=INCIDENT, help="the thread of the summary card")
    parser.add_argument("--whatif-thread", default="research-retrieval-latency", help="the thread of the what-if")
    parser.add_argument("--theme", default="light")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="shoot14-"))
    if args.db is None:
        url, workdir = build(tmp)
    else:
        url, workdir = args.db, args.workdir or tmp / "workdir"

    import qasync
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from engine.service import open_service
    from inspector_app import theme
    from inspector_app.main_window import MainWindow
    from inspector_app.service_client import ServiceClient

    app = QApplication.instance() or QApplication(sys.argv[:1])
    theme.ThemeManager(app, args.theme).apply()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    client = ServiceClient()
    settings = QSettings(str(tmp / "inspector.ini"), QSettings.Format.IniFormat)  # never the user's recent list
    window = MainWindow(client, opener=lambda u: open_service(u, workdir=workdir), settings=settings, poll_ms=3_600_000)
    window.resize(1440, 880)
    window.show()
    try:
        with loop:
            loop.run_until_complete(_shoot(app, window, url, args.out, args.thread, args.whatif_thread))
    finally:
        window.poll.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
