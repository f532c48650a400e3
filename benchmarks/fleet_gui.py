"""GUI benchmark of the thread list at scale (issue 26): the real inspector window, offscreen, on a
store of 100,000 threads / 5,000,000 messages (SQLite; ``--pg URL`` for a PostgreSQL one).

Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/fleet_gui.py [--db URL] [--repeats 5]``.
Without ``--db`` the store is :func:`engine.store.fleet_build.build_fleet_store`'s, cached by
``benchmarks/fleet.py`` under ``/tmp/fleet-bench/`` (built when missing: a few minutes).
``run_all.py --only fleet_gui`` runs it on the SQLite and the PostgreSQL store of ``benchmarks/fleet.py``,
each in a fresh process. Measures, in ms (median of ``--repeats`` where repeated):

- ``first_page``: from the moment the database is open (``ServiceClient.open`` returned) until
  the thread list's first page is in the model and the list has painted it;
- ``search_key`` / ``search_title``: from the search firing (the filter box's 250 ms debounce
  excluded) until the matching threads are in the list and painted (``support-01400``; ``refund``);
- ``scroll_end``: from ``scrollToBottom`` on the whole list until its last row is loaded and
  painted (one page of the reversed query); ``scroll_middle``: the same for a jump to the middle
  (one page read at an offset the database skips to);
- ``find_1400``: ``reveal("support-01400")`` (what ``--thread`` and a fleet click
  do) from a fresh list until its row is selected: its row counted by the database, then the page
  around it (``find_1400_how`` says where it was);
- ``rss_before_mb`` / ``rss_after_mb``: the process's resident memory once the list is open, and
  after scrolling the whole list from top to bottom in 2,000-row jumps (every row fetched once),
  with the rows the model still holds (``held_after``): flat in the number of threads.
Targets: < 300 ms each. Prints one JSON object (each ``*_ms`` figure also under its bare name, as
``benchmarks/run_all.py``'s ``fleet_gui`` section reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def default_store() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fleet import FULL, sqlite_store  # benchmarks/fleet.py: the cached 100k store

    return sqlite_store(*FULL)


class Painted:
    """Counts paints of a widget (an event filter on its viewport)."""

    def __init__(self, widget: Any) -> None:
        from PySide6.QtCore import QEvent, QObject

        outer = self

        class Filter(QObject):
            def eventFilter(self, _obj: Any, event: Any) -> bool:  # noqa: N802
                if event.type() == QEvent.Type.Paint:
                    outer.count += 1
                return False

        self.count = 0
        self._filter = Filter()
        widget.installEventFilter(self._filter)


async def until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the window did not get there in time")
        await asyncio.sleep(0.001)


async def painted_after(paints: Painted, before: int, condition: Callable[[], bool]) -> None:
    await until(lambda: condition() and paints.count > before)


async def measure(w: Any, url: str, repeats: int) -> dict[str, Any]:
    from engine.core.views import ThreadQuery
    from inspector_app.models.threads import PAGE

    out: dict[str, Any] = {}
    pages, model, view = w.thread_pages, w.thread_model, w.thread_list
    paints = Painted(view.viewport())
    opened_at: list[float] = []
    # the threads controller holds the client's open (given at construction): the time is taken there
    client_open = w.threads._connect

    async def timed_open(opener: Any, u: str) -> None:
        await client_open(opener, u)
        opened_at.append(time.perf_counter())

    w.threads._connect = timed_open
    shown: list[float] = []
    model.modelReset.connect(lambda: shown.append(time.perf_counter()))
    firsts = []
    for _ in range(repeats):
        shown.clear()
        opened_at.clear()
        before = paints.count
        opening = asyncio.ensure_future(w.open_database(url))  # the default thread goes on opening meanwhile
        await painted_after(paints, before, lambda: bool(shown) and bool(opened_at) and model.loaded(0))
        firsts.append((time.perf_counter() - opened_at[-1]) * 1000)  # open → first page in the model and painted
        assert await opening
        await w.settle()
    out["first_page_ms"] = statistics.median(firsts)
    out["first_page_samples_ms"] = [round(x, 1) for x in firsts]
    out["threads"] = model.rowCount()

    async def search(text: str | None) -> float:
        if replace(pages.query, text=text or None) == pages.query:
            return 0.0  # the list shows this search already: the window reads nothing, so nothing to wait for
        w.thread_filter.blockSignals(True)
        w.thread_filter.setText(text or "")
        w.thread_filter.blockSignals(False)
        before, reset = paints.count, len(shown)
        t0 = time.perf_counter()
        pages._search_now()
        await painted_after(paints, before, lambda: len(shown) > reset and model.loaded(0) if model.rowCount() else len(shown) > reset)
        ms = (time.perf_counter() - t0) * 1000
        await w.settle()
        return ms

    for name, text in (("search_key", "support-01400"), ("search_title", "refund")):
        samples = []
        for _ in range(repeats):
            samples.append(await search(text))
            out[f"{name}_matches"] = model.rowCount()
            await search(None)
        out[f"{name}_ms"] = statistics.median(samples)
    total = model.rowCount()

    async def jump(row: int | None) -> float:
        pages.set_query(ThreadQuery(sort="activity"))  # a fresh list: only its first page held
        await w.settle()
        pages.set_query(pages.query.__class__(sort="key", descending=False))
        await w.settle()
        target = total - 1 if row is None else row
        before = paints.count
        t0 = time.perf_counter()
        if row is None:
            view.scrollToBottom()
        else:
            view.scrollTo(w.thread_proxy.mapFromSource(model.index(row, 0)), view.ScrollHint.PositionAtTop)
        await painted_after(paints, before, lambda: model.loaded(target))
        ms = (time.perf_counter() - t0) * 1000
        await w.settle()
        return ms

    out["scroll_end_ms"] = statistics.median([await jump(None) for _ in range(repeats)])
    out["scroll_middle_ms"] = statistics.median([await jump(total // 2) for _ in range(max(1, repeats // 2))])
    samples = []
    for _ in range(repeats):
        pages.set_query(ThreadQuery(sort="activity"))
        await w.settle()
        pages.set_query(ThreadQuery(sort="key", descending=False))
        await w.settle()
        t0 = time.perf_counter()
        assert await pages.reveal("support-01400")
        samples.append((time.perf_counter() - t0) * 1000)
        await w.settle()
    out["find_1400_ms"] = statistics.median(samples)
    out["find_1400_how"] = f"row {model.row_of('support-01400')}"
    await search(None)
    # memory: the whole list scrolled through, top to bottom
    view.scrollToTop()
    await w.settle()
    import gc

    gc.collect()
    out["rss_before_mb"] = round(rss_mb(), 1)
    out["held_before"] = model.held
    for row in range(0, total, 2_000):
        view.scrollTo(w.thread_proxy.mapFromSource(model.index(row, 0)), view.ScrollHint.PositionAtTop)
        await until(lambda row=row: model.loaded(row))
        await w.settle()
    view.scrollToBottom()
    await until(lambda: model.loaded(total - 1))
    await w.settle()
    gc.collect()
    out["rss_after_mb"] = round(rss_mb(), 1)
    out["held_after"] = model.held
    out["page"] = PAGE
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="the store (default: benchmarks/fleet.py's cached 100k SQLite store)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    url = args.db or default_store()

    import qasync
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from engine.service import open_service
    from inspector_app.main_window import MainWindow
    from inspector_app.service_client import ServiceClient

    app = QApplication.instance() or QApplication(sys.argv[:1])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    client = ServiceClient()
    settings = QSettings(str(Path("/tmp") / f"fleet-gui-bench-{os.getpid()}.ini"), QSettings.Format.IniFormat)
    w = MainWindow(client, opener=lambda u: open_service(u), settings=settings, poll_ms=3_600_000, remember=False)
    w.resize(1100, 700)
    w.show()
    try:
        with loop:
            result = loop.run_until_complete(measure(w, url, args.repeats))
    finally:
        w.poll.stop()
        client.close()
    result = {k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()}
    # each figure also under its bare name (``first_page`` …): what benchmarks/run_all.py's section reads
    result.update({k[: -len("_ms")]: v for k, v in list(result.items()) if k.endswith("_ms")})
    result["db"] = url
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
