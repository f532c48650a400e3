"""``compaction-inspector``: the desktop inspector's entry point (QApplication + qasync loop).

Before Qt is loaded, :func:`inspector_app.platform_check.check` makes sure the platform Qt will use
can work here (a display, the system libraries its plugin needs); if not, one line says what is
missing and how to install it, and the exit code is 2. ``--screenshot`` renders offscreen;
``--import FILE`` (import first, the result dialog shown), ``--sessions-panel`` (File → Sessions on
this machine… drawn over the window) and ``--compact`` (a manual compaction
of the selected thread) prepare what it shows; ``--request N``, ``--compaction N`` and
``--replay-view`` open the replay tab on a request, on a compaction's before/after or on a page,
and ``--diff-window`` shows that before/after in its own window (drawn over the main one).

``compaction-inspector SESSION_FILE`` imports that file into the user's sessions database (or
``--db``) and opens its thread. Without ``--db`` (nor ``$COMPACTION_DB``) the database of the last session opens; on a first launch, the welcome page
(open a database, import a session, open the demo). Without ``--theme``, the theme last chosen.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

os.environ.setdefault("QT_API", "pyside6")  # qasync would pick PyQt first if one were importable

from . import platform_check
from .logic.choices import TABS, THEME_MODES

#: the replay tab's pages (``inspector_app.panels.replay.widget.PAGES``; named here so parsing needs no Qt)
REPLAY_PAGES: tuple[str, ...] = ("requests", "recoveries", "diff")

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

    from .main_window import MainWindow


def window_size(text: str) -> tuple[int, int]:
    """``1100x700`` → (1100, 700): the window's size for ``--size``."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 1100x700, not {text!r}") from None
    if not (320 <= width <= 16384 and 240 <= height <= 16384):
        raise argparse.ArgumentTypeError(f"{text}: width 320 to 16384, height 240 to 16384")
    return width, height


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compaction-inspector", description="Inspect how conversations were compacted.")
    parser.add_argument("--db", metavar="URL", help="SQLite file or database URL (default: $COMPACTION_DB, else the database of the last session; on a first launch, a welcome page)")
    parser.add_argument("--thread", metavar="KEY", help="select this thread")
    parser.add_argument("--screenshot", metavar="PATH", type=Path, help="render the window to a PNG once loaded (offscreen), then exit")
    parser.add_argument("--size", metavar="WxH", type=window_size, default=None,
                        help="the window's size, e.g. 1100x700 (default: the last session's, or 1440x880; for --screenshot)")
    parser.add_argument("--theme", choices=THEME_MODES, default=None, help="colour theme (default: the one last chosen, else follow the system)")
    parser.add_argument("--tab", choices=TABS, default=None, help="the side tab to show (default: detail, or replay with the options below)")
    parser.add_argument("--message", metavar="ID", type=int, help="select this message in the timeline")
    parser.add_argument("--replay-step", metavar="N", type=int, help="show step N (from 1) of the first replay episode")
    parser.add_argument("--replay-view", choices=REPLAY_PAGES, help="the page of the replay tab: every request, the recoveries, or before/after")
    parser.add_argument("--request", metavar="N", type=int, help="replay request N (from 1) of the selected thread")
    parser.add_argument("--compaction", metavar="N", type=int, help="show the before/after of compaction N (from 1) of the selected thread")
    parser.add_argument("--diff-window", action="store_true", help="show the before/after in a window of its own (with --compaction, or the latest)")
    parser.add_argument("--import", dest="import_files", metavar="FILE", action="append", type=Path, default=[],
                        help="import this transcript into the database first and show the result (repeatable)")
    parser.add_argument("--compact", action="store_true", help="compact the selected thread by hand once loaded (as Compact now does)")
    parser.add_argument("--summary-card", action="store_true", help="show the summary card of the selected thread once loaded (as the Summary card button does)")
    parser.add_argument("--preferences", choices=("open", "test"), default=None,
                        help="open Edit → Preferences… once loaded (test: and press Test connection); with --screenshot, the picture shows it")
    parser.add_argument("--compact-dialog", action="store_true",
                        help="open Compact now's confirmation with its instructions and reason fields (issue 23; --instructions / --reason fill them)")
    parser.add_argument("--instructions", metavar="TEXT", default="", help="with --compact-dialog: the instructions typed")
    parser.add_argument("--reason", metavar="TEXT", default="", help="with --compact-dialog: the reason typed")
    parser.add_argument("--sessions-panel", action="store_true", help="open File → Sessions on this machine… once loaded")
    parser.add_argument("--fleet", action="store_true", help="open Compaction → Fleet overview… once loaded (with --screenshot, the picture is that window)")
    parser.add_argument("--read-only", action="store_true", help="open the database read-only (SQLite mode=ro): every write action disabled")
    parser.add_argument("--revert", action="store_true", help="revert the selected thread's last compaction once loaded (as the summary card's Revert does)")
    parser.add_argument("session_file", nargs="?", metavar="SESSION_FILE", type=Path, default=None,
                        help="a session file (or folder) to import into your sessions database (or --db) and open")
    return parser.parse_args(argv)


async def _run(app: QApplication, window: MainWindow, args: argparse.Namespace) -> int:
    from .widgets.connect import to_url

    url = to_url(args.db) if args.db is not None else None  # --db "" is an error, not the demo
    if url is None and os.environ.get("COMPACTION_DB"):  # as the compaction command
        url = to_url(os.environ["COMPACTION_DB"])
    if args.session_file is not None:  # opening a file is enough: into My sessions (or --db), its thread opened
        opened = await window.sessions.open_file(str(args.session_file), into=url)
    else:
        opened = await window.start(url, select=args.thread)  # else the last database, else the welcome
    await window.settle()
    if opened and args.import_files:
        await window.import_files([str(p) for p in args.import_files])
        await window.settle()
    if opened and args.compact and window.state.thread is not None:
        await window.compact(window.state.thread.key)
        await window.settle()
    if opened and args.revert and window.state.thread is not None:
        await window.revert_audit.revert(window.state.thread.key, "shown by --revert")
        await window.settle()
    if opened and args.message is not None:
        await window.select_message(args.message)
    if opened and args.summary_card and window.state.thread is not None:
        await window.paging.show_boundary()
        await window.settle()
    if args.preferences is not None:
        dialog = window.prefs.open()
        await window.settle()  # the settings are read on a worker
        if args.preferences == "test":
            await dialog.test()
    replay = args.replay_view is not None or args.request is not None or args.compaction is not None or args.diff_window
    if args.replay_step is not None:
        window.replay.model.go(args.replay_step - 1)
        if args.replay_view is None and not replay:
            args.replay_view, replay = "recoveries", True
    window.show_tab(args.tab or ("replay" if replay else "detail"))
    if args.sessions_panel:
        window.sessions.show()
        await window.settle()
    if opened and args.compact_dialog and window.state.thread is not None:  # issue 23: the dialog, filled in
        window.compaction.ask()
        for field, text in ((window.confirm.instructions, args.instructions), (window.confirm.reason, args.reason)):
            field.setText(text)
            field.setCursorPosition(0)
    if opened and replay:
        await _show_replay(window, args)
    if opened and args.fleet:  # issue 26: the fleet view, its figures computed
        window.fleet.show()
        await window.settle()
    if args.screenshot is not None:
        await window.settle()  # what showing the tab started (the replay's requests) has landed
        await asyncio.sleep(0.05)  # Qt lays out and paints in the loop (processEvents inside a task re-enters it)
        if not _grab(window).save(str(args.screenshot), "PNG"):
            print(f"compaction-inspector: cannot write {args.screenshot}", file=sys.stderr)
            return 1
        if not opened and window.banner.isVisible():
            print(f"compaction-inspector: {window.banner.label.text()}", file=sys.stderr)
            return 1
        return 0
    closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    app.lastWindowClosed.connect(lambda: None if closed.done() else closed.set_result(None))
    await closed
    return 0


async def _show_replay(window: MainWindow, args: argparse.Namespace) -> None:
    """The replay tab on the page, request or compaction the options name (read, then settled)."""
    replay = window.replay_control
    if args.request is not None:
        replay.go_to_request(args.request - 1)
    elif args.compaction is not None or args.replay_view == "diff" or args.diff_window:
        replay.show_compaction(args.compaction)
    else:
        window.replay.show_page(args.replay_view)
    await window.settle()
    if args.diff_window:
        replay.pop_out()
        await window.settle()


def _grab(window: MainWindow) -> Any:
    """The window as a picture, with an open import result dialog drawn over it where it shows;
    the before/after window alone when it was opened (``--diff-window``)."""
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QColor, QPainter
    from PySide6.QtWidgets import QDialog

    diff = window.replay_control.window
    if diff is not None and diff.isVisible():  # the before/after window: the picture is that window
        return diff.grab()
    fleet = window.fleet.window
    if fleet is not None and fleet.isVisible():  # --fleet: the fleet view
        return fleet.grab()
    picture = window.grab()
    dialog: QDialog | None = window.importer.dialog
    if dialog is None or not dialog.isVisible():
        dialog = window.sessions.dialog
    if (dialog is None or not dialog.isVisible()) and window.prefs.dialog is not None:
        dialog = window.prefs.dialog  # Edit → Preferences… (--preferences)
    if dialog is not None and dialog.isVisible():
        shot = dialog.grab()
        painter = QPainter(picture)
        at = QPoint((picture.width() - shot.width()) // 2, (picture.height() - shot.height()) // 2)
        painter.fillRect(picture.rect(), QColor(0, 0, 0, 70))  # the window dimmed behind its dialog
        painter.drawPixmap(at, shot)
        painter.end()
    return picture


def main(argv: Sequence[str] | None = None, *, opener: Callable[[str], Any] | None = None) -> int:
    """Run the inspector; ``opener(url)`` replaces ``engine.service.open_service`` (tests, embedding)."""
    args = parse_args(argv)
    if args.read_only:  # every store this process opens is read-only (engine.service.open_service)
        os.environ["COMPACTION_READ_ONLY"] = "1"
    if args.screenshot is not None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    problem = platform_check.check()
    if problem is not None:
        print(problem.line, file=sys.stderr)
        return platform_check.EXIT_PLATFORM
    try:
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:  # a Qt library the check does not list
        print(platform_check.import_failure_line(exc), file=sys.stderr)
        return platform_check.EXIT_PLATFORM
    return _start(QApplication, args, opener)


def initial_theme(args: argparse.Namespace, settings: Any) -> str:
    """``--theme``, else the theme chosen in the last session, else follow the system."""
    from .preferences import remembered_theme

    if args.screenshot is not None:  # a picture that does not depend on the user's settings
        return args.theme or "system"
    return args.theme or remembered_theme(settings) or "system"


def _poll_ms() -> int:
    """The poll interval of the settings (Preferences, ``inspector.poll_interval``), 3 s when unreadable."""
    from engine.core.config import SettingError, Settings

    try:
        return max(500, int(round(float(Settings().value("inspector.poll_interval")) * 1000)))
    except SettingError:
        return 3000


def _start(qapplication: type[QApplication], args: argparse.Namespace, opener: Callable[[str], Any] | None) -> int:
    import qasync
    from PySide6.QtCore import QCoreApplication, QSettings

    from . import theme
    from .main_window import MainWindow
    from .service_client import ServiceClient

    QCoreApplication.setOrganizationName("compaction-inspector")
    QCoreApplication.setApplicationName("Compaction Inspector")
    app = qapplication.instance()
    if app is None:
        with platform_check.guard_platform_failure():  # Qt's fatal platform error: one line, exit 2
            app = qapplication(sys.argv[:1])
    assert isinstance(app, qapplication)
    app.setQuitOnLastWindowClosed(False)
    settings = QSettings()
    themes = theme.ThemeManager(app, initial_theme(args, settings))  # type: ignore[arg-type]
    themes.apply()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    client = ServiceClient()
    # a --screenshot run neither reads nor writes the window's geometry (its picture is reproducible)
    window = MainWindow(client, opener=opener, settings=settings, theme_manager=themes, remember=args.screenshot is None,
                        poll_ms=_poll_ms())
    if args.size is not None:  # before the first show: the splitter takes its proportions from it
        window.resize(*args.size)  # (the fleet view opens at the window's size)
    window.show()
    try:
        with loop:
            return loop.run_until_complete(_run(app, window, args))
    finally:
        window.poll.stop()
        client.close()


if __name__ == "__main__":
    sys.exit(main())
