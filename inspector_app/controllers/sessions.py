"""File → Sessions on this machine…, Follow all, and opening a session file from the command line.

The panel (:class:`~inspector_app.widgets.sessions.SessionsDialog`) lists what
``Service.imports.discover_sessions`` finds (each tool's default folders and the folders the user added,
remembered in the settings under ``sessions/folders``), compared with the open database; with no
database open, ``engine.service.discover`` lists them unmarked. Everything runs off the GUI thread
(the service client's workers). Import selected goes through the import controller (on the demo it
asks where, as File → Import… does), its progress in the panel. Follow all starts
``Service.imports.follow_sessions`` on the open database (on the demo or with nothing open: My sessions,
opened first): a watcher thread of its own that imports new and growing sessions as they change;
its reports come back to the GUI thread through a queued signal, and the thread list and the panel
are read again. Opening another database moves the follower to it; closing the window stops it.

``compaction-inspector SESSION_FILE`` imports the file into the user's sessions database (or
``--db``) and opens its thread (:meth:`SessionsController.open_file`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from ..logic.state import error_text
from ..logic.tasks import TaskSet
from ..logic.window import Window
from ..preferences import database_name, is_demo, same_database, sessions_database, start_directory
from ..service_api import ImportsAPI
from ..service_client import FacetClient
from ..widgets.sessions import SessionsDialog

#: the folders the user added to the panel (a list of paths)
KEY_FOLDERS = "sessions/folders"


def remembered_folders(settings: QSettings) -> list[str]:
    value = settings.value(KEY_FOLDERS)
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [str(v) for v in items if str(v).strip()]


def list_on_disk(folders: list[str], home: str | None) -> list[Any]:
    """What discovery finds with no database to compare with (runs on a worker)."""
    from engine.service import discover

    return discover(folders, home=home)


class _Bridge(QObject):
    """Carries the follower's callbacks (its own thread) to the GUI thread (queued)."""

    reports = Signal(object)
    failed = Signal(str, str)


class SessionsController:
    """Owns the panel (:attr:`dialog`, None when closed) and the follower (:attr:`follower`)."""

    def __init__(
        self,
        ui: Any,
        client: FacetClient,
        tasks: TaskSet,
        *,
        settings: QSettings,
        importer: Any,
        window: Window,
        report: Callable[[BaseException, str], None],
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self._settings = settings
        self._importer = importer
        self.window = window
        self._report = report
        #: the home directory searched (None: the user's; tests and screenshots use $HOME)
        self.home: str | None = None
        self.dialog: SessionsDialog | None = None
        self.folder_dialog: QFileDialog | None = None
        self.follower: Any = None
        #: the database the follower writes into
        self.following_into: str | None = None
        #: what Follow all has written since it started: thread → messages
        self.followed: dict[str, int] = {}
        self.last_listed: list[Any] = []
        self._bridge = _Bridge()
        self._bridge.reports.connect(self._followed, Qt.ConnectionType.QueuedConnection)
        self._bridge.failed.connect(self._follow_failed, Qt.ConnectionType.QueuedConnection)
        self._relist = QTimer()
        self._relist.setSingleShot(True)
        self._relist.setInterval(400)
        self._relist.timeout.connect(lambda: self.tasks.spawn(self.refresh(), "list the sessions on this machine"))
        from PySide6.QtGui import QAction

        self.action = QAction("Sessions on this machine…", ui)
        self.action.setObjectName("sessionsOnThisMachine")
        self.action.setToolTip("The sessions Claude Code, Codex and the other supported tools keep here: import them, or follow them all")
        self.action.setStatusTip(self.action.toolTip())
        self.action.triggered.connect(self.show)

    # -- the panel
    @property
    def folders(self) -> list[str]:
        return remembered_folders(self._settings)

    def show(self) -> SessionsDialog:
        """Open the panel (or raise it) and list the sessions."""
        if self.dialog is None:
            dialog = SessionsDialog(self.ui if isinstance(self.ui, QWidget) else None)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            dialog.importRequested.connect(self.import_selected)
            dialog.followToggled.connect(lambda on: self.tasks.spawn(self.set_following(on), "follow all"))
            dialog.addFolderRequested.connect(self.ask_folder)
            dialog.removeFolderRequested.connect(lambda f: self.tasks.spawn(self.remove_folder(f), "remove a folder"))
            dialog.refreshRequested.connect(lambda: self.tasks.spawn(self.refresh(), "list the sessions on this machine"))
            dialog.openThread.connect(lambda key: self.tasks.spawn(self.window.reload_threads(key), "open thread"))
            dialog.finished.connect(lambda _r: setattr(self, "dialog", None))
            self.dialog = dialog
            self._show_following()
        self.dialog.show()
        self.dialog.raise_()
        self.tasks.spawn(self.refresh(), "list the sessions on this machine")
        return self.dialog

    async def refresh(self) -> list[Any]:
        """List the sessions (off the GUI thread) and show them in the panel."""
        folders = self.folders
        if self.client.connected:
            found = await self.client.call(ImportsAPI.discover_sessions, folders, home=self.home)
        else:
            found = await self.client.run(list_on_disk, folders, self.home)
        self.last_listed = found
        if self.dialog is not None:
            self.dialog.set_sessions(found, database=database_name(self.window.database) if self.window.database else "", folders=folders)
        return found

    def import_selected(self, paths: list[str]) -> None:
        """Import the chosen sessions through the import controller (its result dialog at the end),
        the progress in the panel; the list is read again once they are in."""
        if not paths:
            return

        def progress(done: int, total: int, name: str) -> None:
            if self.dialog is not None:
                self.dialog.set_progress(done, total, name)
            if done >= total:
                self.tasks.spawn(self.refresh(), "list the sessions on this machine")

        self._importer.start(paths, progress=progress)

    def ask_folder(self) -> QFileDialog:
        """Add folder…: a folder of the user's own, searched by content and remembered."""
        dialog = QFileDialog(self.dialog or self.ui, "Add a folder of sessions", start_directory(self._settings))
        dialog.setObjectName("sessionsFolderDialog")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(lambda path: self.tasks.spawn(self.add_folder(path), "add a folder"))
        dialog.finished.connect(lambda _r: setattr(self, "folder_dialog", None))
        self.folder_dialog = dialog
        dialog.open()
        return dialog

    async def add_folder(self, path: str) -> list[Any]:
        """Remember ``path`` as a folder to look in (and to follow), then list again."""
        folder = str(Path(path).expanduser().absolute())
        folders = self.folders
        if folder not in folders:
            self._settings.setValue(KEY_FOLDERS, [*folders, folder])
            self._settings.sync()
        if self.follower is not None:  # the follower watches it too
            await self._restart_follower()
        return await self.refresh()

    async def remove_folder(self, path: str) -> list[Any]:
        """Stop looking in (and following) a folder the user added, then list again."""
        folders = [f for f in self.folders if f != path]
        self._settings.setValue(KEY_FOLDERS, folders)
        self._settings.sync()
        if self.follower is not None:
            await self._restart_follower()
        return await self.refresh()

    # -- follow all
    async def set_following(self, on: bool) -> bool:
        """Start or stop following all; True when following afterwards."""
        if not on:
            await self.stop_following()
            self._show_following("Follow all is off")
            return False
        if self.follower is not None:
            return True
        current = self.window.database
        if current is None or is_demo(current):  # never into the demo: My sessions, opened in the window
            target = sessions_database()
            if not await self.window.open_database(target, create=True):
                self._show_following("Follow all is off: My sessions could not be opened (the banner says why)")
                return False
        return await self._start_follower()

    async def _start_follower(self) -> bool:
        bridge = self._bridge
        try:
            self.follower = await self.client.call(
                ImportsAPI.follow_sessions, self.folders, home=self.home,
                on_reports=bridge.reports.emit, on_error=lambda path, exc: bridge.failed.emit(path, error_text(exc)),
            )
        except Exception as exc:  # noqa: BLE001 - shown in the banner; the toggle goes back off
            self.follower = None
            self._report(exc, "follow all")
            self._show_following("Follow all is off: it could not start")
            return False
        self.following_into = self.window.database
        watched = ", ".join(_short(p) for p in self.follower.watched) or "no tool's folder exists yet"
        self._show_following(f"Following: {watched}")
        return True

    async def stop_following(self) -> None:
        follower, self.follower = self.follower, None
        self.following_into = None
        if follower is not None:
            await self.client.run(follower.stop)

    async def _restart_follower(self) -> None:
        await self.stop_following()
        await self._start_follower()

    async def database_changed(self) -> None:
        """Another database was opened: the follower (if on) writes into it from now on."""
        if self.follower is not None and not same_database(self.following_into, self.window.database):
            if is_demo(self.window.database):
                await self.stop_following()
                self._show_following("Follow all stopped: the demo database is open")
            else:
                await self._restart_follower()
        if self.dialog is not None:
            await self.refresh()

    def shutdown(self) -> None:
        """The window closes: stop the follower (waits for its thread on the GUI thread, two seconds at most)."""
        follower, self.follower = self.follower, None
        if follower is not None:
            follower.stop(2.0)

    def _followed(self, reports: Any) -> None:
        for r in reports:
            self.followed[r.thread] = self.followed.get(r.thread, 0) + r.messages
        names = ", ".join(f"{r.thread} (+{r.messages})" for r in reports[:3]) + (" …" if len(reports) > 3 else "")
        text = f"Follow all imported {names}"
        self.ui.statusBar().showMessage(text, 8000)
        self._show_following(text)
        self.tasks.spawn(self.window.reload_threads(self.window.current_key() or reports[0].thread), "read the thread list again")
        if self.dialog is not None:
            self._relist.start()

    def _follow_failed(self, path: str, text: str) -> None:
        self._show_following(f"Follow all could not read {Path(path).name or 'a session'} (tried again on its next change): {text}")

    def _show_following(self, text: str = "") -> None:
        if self.dialog is not None:
            self.dialog.set_following(self.follower is not None, text)
        self.action.setText("Sessions on this machine… (following)" if self.follower is not None else "Sessions on this machine…")

    # -- compaction-inspector SESSION_FILE
    async def open_file(self, path: str, *, into: str | None = None) -> bool:
        """Import ``path`` into ``into`` (default: the user's sessions database, created on first
        use), open that database and the imported thread. False when the database could not be
        opened; an import failure is in the banner (the database stays open)."""
        target = into if into else await self.client.run(_sessions_database_url)
        if not same_database(target, self.window.database) and not await self.window.open_database(target, create=True):
            return False
        try:
            reports = await self.client.call(ImportsAPI.import_file, path)
        except Exception as exc:  # noqa: BLE001 - shown in the banner
            self._report(exc, f"import {Path(path).name}")
            return True
        if reports:
            await self.window.reload_threads(reports[0].thread)
            n = sum(r.messages for r in reports)
            self.ui.statusBar().showMessage(f"Imported {Path(path).name}: {n:,} new message{'s' if n != 1 else ''} into {database_name(target)}")
        return True


def _sessions_database_url() -> str:
    from engine.service import sessions_database_url

    return sessions_database_url()


def _short(p: Any) -> str:
    home = os.path.expanduser("~")
    s = str(p)
    return "~" + s[len(home):] if home and s.startswith(home + os.sep) else s
