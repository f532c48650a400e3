"""Timeline benchmark: the real inspector window on a real SQLite thread of many messages, offscreen.

Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/gui_timeline.py [--messages 100000]``
(``run_all.py`` runs it as a subprocess). Prints one JSON line:

- ``first_paint_s``: from ``MainWindow.open_database`` (open the file, list threads, select the thread)
  until the timeline's first page is in the model and the view has painted it;
- ``loaded_s``: until the window reports the thread loaded (pressure, chart, replay, events too);
- ``scroll_s``: scrolling to the end through the whole thread, page by page as the view asks for
  more (``fetchMore``), until the last message is loaded and painted (``reached_end`` False when it
  was stopped after ``SCROLL_LIMIT_S``);
- ``page_scroll_s``: median time of one page-down step plus repaint once everything is loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from PySide6.QtCore import QCoreApplication, QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import qasync  # noqa: E402

from engine.service import open_service  # noqa: E402
from engine.summarizers.extractive import ExtractiveSummarizer  # noqa: E402
from inspector_app.main_window import MainWindow  # noqa: E402
from inspector_app.service_client import ServiceClient  # noqa: E402
from store import make_messages  # noqa: E402  (benchmarks/store.py: the realistic message mix)

KEY = "timeline-bench"
SCROLL_LIMIT_S = 240.0


def build(db: Path, n: int) -> str:
    url = f"sqlite:///{db}"
    svc = open_service(url, workdir=db.with_name("wd"), summarizer=ExtractiveSummarizer(), policies={"context_window": 128_000}, create=True)
    try:
        svc.create_thread(KEY, title=f"{n:,} messages", system_prompt="You are a support agent.")
        with svc.store.locked(KEY) as tx:
            tx.bulk_append(make_messages(n))
    finally:
        svc.close()
    return url


def opener(url: str) -> Any:
    return open_service(url, summarizer=ExtractiveSummarizer())


async def until(pred: Any, timeout: float) -> bool:
    end = time.perf_counter() + timeout
    while not pred():
        if time.perf_counter() > end:
            return False
        await asyncio.sleep(0.002)
    return True


async def measure(app: QApplication, window: MainWindow, url: str, n: int) -> dict[str, Any]:
    model, view = window.timeline_model, window.timeline
    loaded = asyncio.get_running_loop().create_future()
    window.threadLoaded.connect(lambda key: loaded.done() or loaded.set_result(key))
    t0 = time.perf_counter()
    task = asyncio.ensure_future(window.open_database(url, select=KEY))
    if not await until(lambda: model.loaded_count() > 0, 120):
        raise RuntimeError("the timeline showed no message within 120 s")
    view.viewport().repaint()
    first_paint = time.perf_counter() - t0
    if not await task:
        raise RuntimeError(f"open_database failed: {window.banner.text()}")
    await asyncio.wait_for(loaded, 120)
    loaded_s = time.perf_counter() - t0
    await window.settle()

    t1 = time.perf_counter()
    bar = view.verticalScrollBar()
    while not model.exhausted and time.perf_counter() - t1 < SCROLL_LIMIT_S:
        before = model.loaded_count()
        view.scrollToBottom()
        await until(lambda: model.loaded_count() > before or not model.loading, 30)
    view.scrollToBottom()
    view.viewport().repaint()
    scroll_s = time.perf_counter() - t1
    at_end = model.exhausted and bar.value() == bar.maximum()

    steps = []
    bar.setValue(0)
    for _ in range(50):
        t = time.perf_counter()
        bar.setValue(bar.value() + bar.pageStep())
        view.viewport().repaint()
        steps.append(time.perf_counter() - t)
    return {
        "messages": n,
        "loaded_messages": model.loaded_count(),
        "first_paint_s": first_paint,
        "first_paint_note": f"first page of {window.page_size} rows; whole thread loaded (pressure, chart, events) in {loaded_s:.2f} s",
        "loaded_s": loaded_s,
        "scroll_s": scroll_s,
        "reached_end": at_end,
        "scroll_note": (
            f"{model.loaded_count():,} messages fetched page by page while scrolling"
            + ("" if at_end else f"; STOPPED after {SCROLL_LIMIT_S:.0f} s before the end")
            + f"; then one page-down + repaint {statistics.median(steps) * 1e3:.2f} ms (median)"
        ),
        "page_scroll_s": statistics.median(steps),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp:
        url = build(Path(tmp) / "timeline.db", args.messages)
        QCoreApplication.setOrganizationName("compaction-inspector-bench")
        app = QApplication.instance() or QApplication(sys.argv[:1])
        assert isinstance(app, QApplication)
        loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(loop)
        client = ServiceClient()
        settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(client, opener=opener, settings=settings, poll_ms=3_600_000)
        window.resize(1400, 900)
        window.show()
        try:
            with loop:
                result = loop.run_until_complete(measure(app, window, url, args.messages))
        finally:
            window.poll.stop()
            client.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
