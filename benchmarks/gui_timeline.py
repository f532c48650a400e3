"""Timeline benchmark: the real inspector window on a long thread, offscreen, on SQLite and PostgreSQL.

Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/gui_timeline.py [--messages 100000]
[--small 10000] [--pg-url URL] [--end-samples 5]`` (``run_all.py`` runs it as a subprocess); issue
#16's targets at 1M: ``--messages 1000000`` (the ``--small`` default is then the 100k thread, so one
run gives the rows at 100k and 1M). Builds one thread of ``--messages`` (and one of ``--small``)
messages per backend, once per run — SQLite on a temp file, PostgreSQL in a fresh temp database
(``ANALYZE`` after the bulk insert) — then measures each in a fresh process and prints one JSON line
per backend:

- ``first_paint_s``: from ``MainWindow.open_database`` (open, list threads, select the thread) until
  the timeline's first page is in the model and the view has painted it (its own paint when it
  painted the page before the benchmark's next poll, else a repaint the benchmark forces at that
  poll: never both, which would count one paint twice), the database having been
  opened once before in the process; ``first_paint_cold_s``: the same in a fresh process (the engine
  loads its tokenizer on the first open: ~250 ms);
- ``scroll_s``: from the End key in the timeline until the newest message is current, on screen and
  painted (as for ``first_paint_s``), right after the (cold) first paint: the side panels are still
  reading the whole thread on background threads (what a user who opens a thread and presses End
  at once gets); the median
  of ``--end-samples`` jumps (``scroll_busy_samples_s``) taken while the panels still load: after
  each, the newest page is dropped again (the model back to the first page and one gap row, as a
  freshly opened thread) and End is pressed anew;
- ``scroll_idle_s``: the same once the side panels are in (``scroll_idle_samples_s``);
- ``first_paint_cpu_s``, ``scroll_cpu_s``, ``scroll_idle_cpu_s``: the GUI thread's CPU seconds of
  the warm first paint and of the End jumps (medians): on a shared machine wall time follows its
  load, these much less;
- ``rss_*``: resident memory after the jump to the end, for ``--small`` and ``--messages`` messages,
  and the peak once the side panels are in (those read the whole thread inside the engine): the
  measuring process's own high-water mark (VmHWM), not ``ru_maxrss``, which on Linux also holds the
  peak of the process that spawned it; each thread is built in a process of its own for the same
  reason (the 1M messages it makes in memory are 880 MB); ``workers_peak_rss_mb``: the largest
  ``ru_maxrss`` of the child processes the inspector process started and waited for (the engine's
  stream worker measuring a cold status), an upper bound of their own peak.
A backend that cannot run (PostgreSQL unreachable) prints ``{"backend": ..., "skipped": reason}``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import sqlalchemy as sa  # noqa: E402

from engine.compaction.summarizers.extractive import ExtractiveSummarizer  # noqa: E402
from engine.service import open_service  # noqa: E402
from store import DEFAULT_PG_URL, make_messages, temp_pg_database  # noqa: E402  (benchmarks/store.py)

KEY = "timeline-bench"
TARGET_FIRST_PAINT_S = 0.3  # issue #16: first paint < 300 ms and End < 100 ms at 1M messages
TARGET_SCROLL_S = 0.1
END_SAMPLES = 5
LAST_PAINT_CPU = [0.0]  # the GUI thread's CPU seconds of the last open_and_paint
PANELS_TIMEOUT_S = 3600  # a cold status of 1M messages on a loaded machine takes minutes


def build(url: str, workdir: Path, n: int) -> None:
    """One thread of ``n`` messages (the realistic mix of benchmarks/store.py), statistics fresh."""
    svc = open_service(url, workdir=workdir, summarizer=ExtractiveSummarizer(), policies={"context_window": 128_000}, create=True)
    try:
        svc.runs.create_thread(KEY, title=f"{n:,} messages", system_prompt="You are a support agent.")
        with svc.store.locked(KEY) as tx:
            tx.bulk_append(make_messages(n))
        if svc.store.engine.dialect.name == "postgresql":
            with svc.store.engine.begin() as conn:  # what autovacuum does shortly after an import
                conn.execute(sa.text("ANALYZE"))
    finally:
        svc.close()


def _status_mb(field: str) -> float | None:
    """One ``kB`` field of /proc/self/status in MB (None where there is no such file)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return None


def rss_mb() -> float:
    """Resident memory now (VmRSS)."""
    value = _status_mb("VmRSS")
    return float("nan") if value is None else value


def peak_rss_mb() -> float:
    """This process's own peak resident memory (VmHWM, the high-water mark of its address space,
    which ``exec`` starts afresh). Not ``ru_maxrss``: on Linux ``exec`` folds the spawning
    process's peak into it (``setmax_mm_hiwater_rss`` on the old mm), so a child started by a
    parent that had built the 1M-message thread in memory (880 MB) reported that as its own peak.
    ``ru_maxrss`` only where there is no /proc (it is kB on Linux, bytes on macOS)."""
    value = _status_mb("VmHWM")
    if value is not None:
        return value
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def children_peak_rss_mb() -> float:
    """The largest ``ru_maxrss`` of this process's ended child processes (the engine's stream
    worker that measures a cold status): an upper bound of their own peak, since ``exec`` carries
    this process's peak at their start into it."""
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / scale


# -- one measurement, in a fresh process -----------------------------------------------------------


async def until(pred: Any, timeout: float) -> bool:
    end = time.perf_counter() + timeout
    while not pred():
        if time.perf_counter() > end:
            return False
        await asyncio.sleep(0.001)
    return True


class PaintWatch:
    """Whether the view's viewport has painted while ``shown()`` held (an event filter: it sees
    each paint as it starts, and the benchmark's polls run between paints, so a paint it saw has
    ended). :meth:`painted` makes sure the state is on screen: nothing more when the window painted
    it by itself, else one forced repaint (a window that waits for the next event-loop turn to
    paint is measured until that paint, not until an extra one)."""

    def __init__(self, view: Any, shown: Any) -> None:
        from PySide6.QtCore import QEvent, QObject

        paint = QEvent.Type.Paint

        class Filter(QObject):
            def eventFilter(inner, obj: Any, event: Any) -> bool:  # noqa: N802, N805 (Qt name)
                if event.type() == paint and not self.seen and shown():
                    self.seen = True
                return False

        self.view, self.seen = view, False
        self._filter = Filter()

    def __enter__(self) -> "PaintWatch":
        self.view.viewport().installEventFilter(self._filter)
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.view.viewport().removeEventFilter(self._filter)

    def painted(self) -> None:
        if not self.seen:
            self.view.viewport().repaint()


async def press_end(window: Any) -> tuple[float, bool, float]:
    """Seconds from the End key until the newest message is current, visible and painted; whether
    the view is at the bottom; the GUI thread's CPU seconds meanwhile (the machine is shared: wall
    time depends on its load, the GUI thread's own work much less)."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from inspector_app.models.timeline import MessageIdRole

    model, view = window.timeline_model, window.timeline
    t, cpu = time.perf_counter(), time.thread_time()
    view.setFocus()
    QTest.keyClick(view, Qt.Key.Key_End)

    def at_end() -> bool:
        index = view.currentIndex()
        return model.reaches_end and index.isValid() and index.data(MessageIdRole) == model.last_id() and view.viewport().rect().intersects(view.visualRect(index))

    with PaintWatch(view, at_end) as watch:
        if not await until(at_end, 60):
            return time.perf_counter() - t, False, time.thread_time() - cpu
        watch.painted()
    seconds, cpu = time.perf_counter() - t, time.thread_time() - cpu
    bar = view.verticalScrollBar()
    return seconds, bar.value() == bar.maximum(), cpu


def drop_newest(window: Any) -> bool:
    """Back to a freshly opened thread after an End jump: the first row current, the rows below the
    first gap (the newest page) dropped into one gap row again. False if there was no such gap."""
    model, view = window.timeline_model, window.timeline
    gaps = model.gaps()
    if not gaps or gaps[0].row < 1:
        return False
    view.show_start()
    model.evict_after(gaps[0].row - 1)
    return not model.reaches_end


async def end_samples(window: Any, count: int, still: Any = lambda: True) -> tuple[list[float], bool, list[float]]:
    """Up to ``count`` End jumps (:func:`press_end`), each from a freshly opened state, while
    ``still()``; the seconds of each, whether every one ended at the bottom, the GUI thread's CPU
    seconds of each."""
    samples: list[float] = []
    cpus: list[float] = []
    ok = True
    for i in range(count):
        if i and (not still() or not drop_newest(window)):
            break
        await asyncio.sleep(0.05)  # the drop's relayout and repaint are not part of the jump
        seconds, at_end, cpu = await press_end(window)
        samples.append(seconds)
        cpus.append(cpu)
        ok = ok and at_end
    return samples, ok, cpus


async def measure(url: str, n: int, samples: int = END_SAMPLES) -> dict[str, Any]:
    from PySide6.QtCore import QSettings

    from inspector_app.main_window import MainWindow
    from inspector_app.service_client import ServiceClient

    with tempfile.TemporaryDirectory(prefix="bench-timeline-ui-") as tmp:
        client = ServiceClient()
        settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(client, opener=lambda u: open_service(u, summarizer=ExtractiveSummarizer()), settings=settings, poll_ms=3_600_000)
        window.resize(1400, 900)
        window.show()
        try:
            return await _measure(window, url, n, samples)
        finally:
            window.poll.stop()
            for task in window.cancel_tasks():
                await asyncio.gather(task, return_exceptions=True)
            client.close()
            window.close()


async def open_and_paint(window: Any, url: str) -> tuple[float, asyncio.Future[Any], asyncio.Task[Any]]:
    """Seconds from ``open_database`` until the first page is painted; the side panels go on. The
    GUI thread's CPU seconds meanwhile are kept in :data:`LAST_PAINT_CPU`."""
    model, view = window.timeline_model, window.timeline
    loaded = asyncio.get_running_loop().create_future()
    window.threadLoaded.connect(lambda key: loaded.done() or loaded.set_result(key))
    start = model.loaded_count
    t0, cpu = time.perf_counter(), time.thread_time()
    shown = lambda: model.key == KEY and start() > 0  # noqa: E731
    with PaintWatch(view, shown) as watch:
        task = asyncio.ensure_future(window.open_database(url, select=KEY))
        await asyncio.sleep(0)
        if not await until(shown, 120):
            raise RuntimeError("the timeline showed no message within 120 s")
        watch.painted()
    LAST_PAINT_CPU[0] = time.thread_time() - cpu
    return time.perf_counter() - t0, loaded, task


async def _measure(window: Any, url: str, n: int, samples: int = END_SAMPLES) -> dict[str, Any]:
    view = window.timeline
    rss_before = rss_mb()
    # a fresh process: the engine loads its tokenizer on the first open
    first_paint_cold, loaded, task = await open_and_paint(window, url)
    t0 = time.perf_counter()
    busy, at_end, busy_cpu = await end_samples(window, samples, still=lambda: not loaded.done())  # the side panels are still being read
    busy_all = not loaded.done()
    gc.collect()
    rss_end = rss_mb()
    loaded_after_end = window.timeline_model.loaded_count()
    if not await task:
        raise RuntimeError(f"open_database failed: {window.banner.text()}")
    await asyncio.wait_for(loaded, PANELS_TIMEOUT_S)
    loaded_s = time.perf_counter() - t0
    await window.settle()
    peak = peak_rss_mb()
    workers_peak = children_peak_rss_mb()
    # opening the thread again (what every thread switch costs), End once everything is quiet
    window.timeline_model.reset(None)
    first_paint, loaded, task = await open_and_paint(window, url)
    first_paint_cpu = LAST_PAINT_CPU[0]
    await task
    await asyncio.wait_for(loaded, PANELS_TIMEOUT_S)
    await window.settle()
    idle, at_end_idle, idle_cpu = await end_samples(window, samples)
    await window.settle()
    gc.collect()
    rss_end_idle = rss_mb()
    steps = []
    bar = view.verticalScrollBar()
    for _ in range(30):  # paging up through the newest page
        t = time.perf_counter()
        bar.setValue(max(0, bar.value() - bar.pageStep()))
        view.viewport().repaint()
        steps.append(time.perf_counter() - t)
    await window.settle()
    return {
        "messages": n,
        "first_paint_s": first_paint,
        "first_paint_cold_s": first_paint_cold,
        "first_paint_cpu_s": first_paint_cpu,
        "scroll_s": statistics.median(busy),
        "scroll_busy_samples_s": busy,
        "scroll_busy_all_while_loading": busy_all,
        "scroll_cpu_s": statistics.median(busy_cpu),
        "scroll_idle_s": statistics.median(idle),
        "scroll_idle_samples_s": idle,
        "scroll_idle_cpu_s": statistics.median(idle_cpu),
        "reached_end": at_end and at_end_idle,
        "loaded_s": loaded_s,
        "loaded_messages": loaded_after_end,
        "page_up_s": statistics.median(steps),
        "rss_start_mb": rss_before,
        "rss_end_mb": rss_end,
        "rss_end_idle_mb": rss_end_idle,
        "peak_rss_mb": peak,
        "workers_peak_rss_mb": workers_peak,
    }


def child(url: str, n: int, samples: int = END_SAMPLES) -> int:
    import qasync
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QApplication

    QCoreApplication.setOrganizationName("compaction-inspector-bench")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        result = loop.run_until_complete(measure(url, n, samples))
    print(json.dumps(result))
    return 0


def build_in_child(url: str, workdir: Path, n: int) -> None:
    """:func:`build` in a process of its own: the ``n`` messages it makes in memory (880 MB at 1M)
    are then never resident in this one while the measurements run beside it."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--build", url, str(workdir), "--messages", str(n)],
                          capture_output=True, text=True, timeout=2 * PANELS_TIMEOUT_S)
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-2:])
        raise RuntimeError(f"building {n:,} messages failed (exit {proc.returncode}): {tail}")


def run_child(url: str, n: int, samples: int = END_SAMPLES) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", url, "--messages", str(n), "--end-samples", str(samples)],
        capture_output=True, text=True, timeout=2 * PANELS_TIMEOUT_S, env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_API": "pyside6"},
    )
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
    if proc.returncode != 0 or line is None:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise RuntimeError(f"measurement of {n:,} messages failed (exit {proc.returncode}): {tail}")
    return json.loads(line)


# -- per backend -----------------------------------------------------------------------------------


def backend_result(backend: str, big: dict[str, Any], small: dict[str, Any]) -> dict[str, Any]:
    growth = big["rss_end_mb"] - small["rss_end_mb"]
    peak_growth = big["peak_rss_mb"] - small["peak_rss_mb"]
    ok = big["first_paint_s"] < TARGET_FIRST_PAINT_S and big["scroll_idle_s"] < TARGET_SCROLL_S and big["scroll_s"] < TARGET_SCROLL_S and big["reached_end"]
    return {
        "backend": backend,
        **big,
        "first_paint_ms": big["first_paint_s"] * 1e3,
        "first_paint_cold_ms": big["first_paint_cold_s"] * 1e3,
        "scroll_end_ms": big["scroll_idle_s"] * 1e3,
        "scroll_end_busy_ms": big["scroll_s"] * 1e3,
        "small_messages": small["messages"],
        "small_first_paint_ms": small["first_paint_s"] * 1e3,
        "small_scroll_end_ms": small["scroll_idle_s"] * 1e3,
        "small_scroll_end_busy_ms": small["scroll_s"] * 1e3,
        "small_first_paint_cold_ms": small["first_paint_cold_s"] * 1e3,
        "small_loaded_s": small["loaded_s"],
        "rss_growth_mb": growth,
        "peak_rss_growth_mb": peak_growth,
        "targets_met": ok,
        "first_paint_note": (
            f"{backend}: first page of 500 rows; {big['first_paint_cold_s'] * 1e3:.0f} ms in a fresh process (tokenizer load); "
            f"{small['first_paint_s'] * 1e3:.0f} ms at {small['messages']:,} messages; GUI-thread CPU {big['first_paint_cpu_s'] * 1e3:.0f} ms; "
            f"the side panels (status measures the whole thread) took {big['loaded_s']:.1f} s more in the background"
        ),
        "scroll_note": (
            f"{backend}: End reads only the newest page ({big['loaded_messages']:,} messages in the model, the rest one gap row); "
            f"{big['scroll_s'] * 1e3:.0f} ms while the side panels still read the thread (median of {len(big['scroll_busy_samples_s'])}); "
            f"GUI-thread CPU {big['scroll_idle_cpu_s'] * 1e3:.0f} ms idle, {big['scroll_cpu_s'] * 1e3:.0f} ms busy; "
            f"at {small['messages']:,}: {small['scroll_idle_s'] * 1e3:.0f} ms idle, {small['scroll_s'] * 1e3:.0f} ms while the panels load; page-up + repaint {big['page_up_s'] * 1e3:.1f} ms; "
            f"RSS after the jump {small['rss_end_mb']:.0f} MB at {small['messages']:,} messages vs {big['rss_end_mb']:.0f} MB at "
            f"{big['messages']:,} ({growth:+.0f} MB); peak once the side panels are in {peak_growth:+.0f} MB "
            f"({small['peak_rss_mb']:.0f} vs {big['peak_rss_mb']:.0f} MB, the inspector process's own; its worker processes at most "
            f"{big.get('workers_peak_rss_mb', float('nan')):.0f} MB at {big['messages']:,})"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--small", type=int, help="the thread size memory is compared with (default: a tenth)")
    ap.add_argument("--pg-url", default=os.environ.get("COMPACTION_TEST_PG_URL") or DEFAULT_PG_URL)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--end-samples", type=int, default=END_SAMPLES, help="End jumps per state (median)")
    ap.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--build", nargs=2, metavar=("URL", "WORKDIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build:
        build(args.build[0], Path(args.build[1]), args.messages)
        return 0
    if args.child:
        return child(args.child, args.messages, args.end_samples)
    sizes = (args.small or max(1_000, args.messages // 10), args.messages)
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp, ExitStack() as stack:
            runs: list[dict[str, Any]] = []
            try:
                for n in sizes:
                    if backend == "sqlite":
                        url = f"sqlite:///{Path(tmp) / f'timeline-{n}.db'}"
                    else:
                        url = stack.enter_context(temp_pg_database(args.pg_url))
                    build_in_child(url, Path(tmp) / f"wd-{n}", n)
                    runs.append(run_child(url, n, args.end_samples))
            except sa.exc.OperationalError as exc:
                print(json.dumps({"backend": backend, "skipped": f"not reachable: {str(exc.orig).splitlines()[0]}"}))
                continue
            print(json.dumps(backend_result(backend, runs[1], runs[0])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
