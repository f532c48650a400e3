"""What the inspector remembers between launches (QSettings; tests pass a temporary INI file):
the last database, the theme, the window's geometry and splitter sizes, the folder of the last
file dialog and where imported sessions go.

Also which database is which: the demo (``demo.db`` in the user's data directory, built on first
use) and "My sessions" (``sessions.db`` beside it, where imports go by default; created on first
import). Passwords are never written: a remembered URL is stored without its password.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

from .logic.choices import THEME_MODES
from .logic.urls import strip_password

KEY_DATABASE = "session/database"
KEY_THEME = "view/theme"
KEY_GEOMETRY = "window/geometry"
KEY_SPLITTER = "window/splitter"
KEY_LAST_DIR = "files/lastDirectory"
KEY_IMPORT_TARGET = "import/target"

#: where File → Import… puts sessions while the demo database is open
TARGET_SESSIONS = "sessions"  # My sessions (the default)
TARGET_HERE = "here"  # the open database (the demo)
TARGET_OTHER = "other"  # a database the user chose (its URL in ``import/targetUrl``)
KEY_IMPORT_TARGET_URL = "import/targetUrl"


def _text(settings: QSettings, key: str) -> str | None:
    value = settings.value(key)
    return value if isinstance(value, str) and value.strip() else None


# == files ======================================================================================
def start_directory(settings: QSettings, home: Path | None = None) -> str:
    """The folder a file dialog opens in: the folder of the last file chosen in any of them
    (import, export, open a SQLite file) while it still exists, else the home folder; never the
    folder the program was started from."""
    last = _text(settings, KEY_LAST_DIR)
    if last is not None and Path(last).is_dir():
        return last
    return str(home if home is not None else Path.home())


def remember_directory(settings: QSettings, chosen: str | Path) -> None:
    """Remember the folder of ``chosen`` (a file, or a folder) for the next file dialog."""
    path = Path(chosen)
    folder = path if path.is_dir() else path.parent
    if str(folder) and folder.is_dir():
        settings.setValue(KEY_LAST_DIR, str(folder.resolve()))
        settings.sync()


# == the last database ==========================================================================
def last_database(settings: QSettings) -> str | None:
    return _text(settings, KEY_DATABASE)


def remember_database(settings: QSettings, url: str) -> None:
    settings.setValue(KEY_DATABASE, strip_password(url))
    settings.sync()


# == theme and layout ===========================================================================
def remembered_theme(settings: QSettings) -> str | None:
    mode = _text(settings, KEY_THEME)
    return mode if mode in THEME_MODES else None


def remember_theme(settings: QSettings, mode: str) -> None:
    if mode in THEME_MODES:
        settings.setValue(KEY_THEME, mode)
        settings.sync()


def remembered_bytes(settings: QSettings, key: str) -> QByteArray | None:
    value = settings.value(key)
    return value if isinstance(value, QByteArray) and not value.isEmpty() else None


# == databases ==================================================================================
def database_file(url: str | None) -> Path | None:
    """The SQLite file ``url`` names (a bare path or ``sqlite:///path``), else None."""
    if not url:
        return None
    if "://" not in url:
        return Path(url)
    scheme, rest = url.split("://", 1)
    if scheme.split("+")[0] != "sqlite" or not rest.startswith("/") or rest in ("/", "/:memory:"):
        return None
    return Path(rest[1:].split("?")[0])


def same_database(a: str | None, b: str | None) -> bool:
    """``a`` and ``b`` name the same database (the same SQLite file however written, or the same URL)."""
    if not a or not b:
        return False
    fa, fb = database_file(a), database_file(b)
    if fa is not None and fb is not None:
        return fa.expanduser().resolve() == fb.expanduser().resolve()
    return strip_password(a) == strip_password(b)


def data_directory() -> Path:
    from engine.service import data_dir

    return data_dir()


def demo_database() -> str:
    """The embedded demo database (built on first use)."""
    return str(data_directory() / "demo.db")


def sessions_database() -> str:
    """My sessions: where imports go by default (``$COMPACTION_DB`` when set, as the CLI)."""
    from engine.service import sessions_database_url

    return sessions_database_url()


def is_demo(url: str | None) -> bool:
    return same_database(url, demo_database())


def database_name(url: str | None) -> str:
    """A database in words: "My sessions (~/…/sessions.db)", "the demo database", or the URL
    without its password."""
    if not url:
        return ""
    path = database_file(url)
    shown = str(path) if path is not None else strip_password(url)
    home = str(Path.home())
    shown = "~" + shown[len(home):] if shown.startswith(home + "/") else shown
    if same_database(url, sessions_database()):
        return f"My sessions ({shown})"
    return f"the demo database ({shown})" if is_demo(url) else shown


def import_target(settings: QSettings) -> tuple[str, str | None]:
    """The remembered choice of where imports go while the demo is open: ``(TARGET_*, url)``."""
    kind = _text(settings, KEY_IMPORT_TARGET) or TARGET_SESSIONS
    if kind == TARGET_OTHER:
        url = _text(settings, KEY_IMPORT_TARGET_URL)
        return (TARGET_OTHER, url) if url else (TARGET_SESSIONS, None)
    return (kind, None) if kind in (TARGET_SESSIONS, TARGET_HERE) else (TARGET_SESSIONS, None)


def remember_import_target(settings: QSettings, kind: str, url: str | None = None) -> None:
    settings.setValue(KEY_IMPORT_TARGET, kind)
    if kind == TARGET_OTHER and url:
        settings.setValue(KEY_IMPORT_TARGET_URL, strip_password(url))
    settings.sync()
