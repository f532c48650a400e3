"""First run on a desktop: what the chosen Qt platform needs, checked before Qt is loaded.

Qt aborts (``qFatal``: SIGABRT, exit 134, a core dump and a screenful of plugin diagnostics) when
its platform plugin cannot load, e.g. on a stock Ubuntu without ``libxcb-cursor0``. The entry point
calls :func:`check` first: it works out the platform Qt will use (``QT_QPA_PLATFORM``, else the
session type), and returns one line naming what is missing (no display; a system library, with the
apt and dnf packages that provide it; an unknown platform) so the inspector can print it and exit 2.
:func:`guard_platform_failure` covers what the check could not foresee (an X server that refuses
the connection, a library this table does not know): while the QApplication is created it turns
Qt's fatal platform error into the same kind of line and exit 2.

Qt-free (stdlib only). The library lists are the platform plugins' ``NEEDED`` entries in the
PySide6 wheel (``readelf -d libqxcb.so libQt6XcbQpa.so.6 libQt6Gui.so.6 …``, Qt's own libraries
left out); ``tests/gui/test_platform_check.py`` reads the installed wheel and fails when a new
dependency is not listed here.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

#: exit code for "this machine cannot show the window" (as for a usage error: nothing ran)
EXIT_PLATFORM = 2

#: soname -> (Debian/Ubuntu package, Fedora package)
PACKAGES: dict[str, tuple[str, str]] = {
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libz.so.1": ("zlib1g", "zlib"),
    "libzstd.so.1": ("libzstd1", "libzstd"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor"),
}

#: what QtCore, QtGui, QtWidgets and QtDBus load whatever the platform (offscreen included)
QT_GUI: tuple[str, ...] = (
    "libGL.so.1", "libEGL.so.1", "libfontconfig.so.1", "libfreetype.so.6", "libxkbcommon.so.0", "libX11.so.6",
    "libglib-2.0.so.0", "libgthread-2.0.so.0", "libdbus-1.so.3", "libz.so.1", "libzstd.so.1",
)  # fmt: skip

#: what each platform plugin needs on top of :data:`QT_GUI`
PLATFORM_LIBRARIES: dict[str, tuple[str, ...]] = {
    "xcb": (
        "libxcb.so.1", "libX11-xcb.so.1", "libxkbcommon-x11.so.0", "libxcb-cursor.so.0", "libxcb-icccm.so.4",
        "libxcb-util.so.1", "libxcb-image.so.0", "libxcb-keysyms.so.1", "libxcb-randr.so.0", "libxcb-render-util.so.0",
        "libxcb-render.so.0", "libxcb-shape.so.0", "libxcb-shm.so.0", "libxcb-sync.so.1", "libxcb-xfixes.so.0", "libxcb-xkb.so.1",
    ),
    "wayland": ("libwayland-client.so.0", "libwayland-cursor.so.0"),
}  # fmt: skip

#: platforms that draw into memory or a framebuffer: no display server needed
HEADLESS = frozenset({"offscreen", "minimal", "minimalegl", "vnc", "linuxfb", "eglfs", "vkkhrdisplay"})

OFFSCREEN_HINT = "or render the window to a file without a display: QT_QPA_PLATFORM=offscreen compaction-inspector --screenshot out.png"


@dataclass(frozen=True, slots=True)
class Problem:
    """Why the window cannot be shown, as the one line to print."""

    line: str


# == pure parts (tested on given lists) ============================================================


def missing_libraries(required: Iterable[str], available: Iterable[str]) -> list[str]:
    """The sonames of ``required`` not in ``available``, in ``required``'s order, each once."""
    have = set(available)
    out: list[str] = []
    for name in required:
        if name not in have and name not in out:
            out.append(name)
    return out


def parse_ldconfig(text: str, *, wide: bool = True) -> set[str]:
    """Sonames in ``ldconfig -p`` output; ``wide``: only 64-bit entries (``(libc6,x86-64)``), not
    the 32-bit ones a multiarch system also lists."""
    names: set[str] = set()
    for match in re.finditer(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>", text, re.MULTILINE):
        if not wide or "64" in match.group(2):
            names.add(match.group(1))
    return names


def install_hint(missing: Sequence[str]) -> str:
    """``sudo apt install … (Debian/Ubuntu) or sudo dnf install … (Fedora)`` for ``missing`` sonames."""
    apt: list[str] = []
    dnf: list[str] = []
    for name in missing:
        deb, rpm = PACKAGES.get(name, (None, None))
        if deb is not None and deb not in apt:
            apt.append(deb)
        if rpm is not None and rpm not in dnf:
            dnf.append(rpm)
    if not apt:
        return "install the packages that provide them"
    return f"sudo apt install {' '.join(apt)} (Debian/Ubuntu) or sudo dnf install {' '.join(dnf)} (Fedora)"


def platform_candidates(env: Mapping[str, str]) -> list[str]:
    """The platforms Qt will try, in order: ``QT_QPA_PLATFORM`` (``a;b`` lists fallbacks, ``:``
    starts plugin options), else ``wayland`` then ``xcb`` in a Wayland session, else ``xcb``."""
    value = env.get("QT_QPA_PLATFORM", "").strip()
    if value:
        return [part.split(":", 1)[0].strip() for part in value.split(";") if part.strip()]
    if env.get("XDG_SESSION_TYPE") == "wayland" and env.get("WAYLAND_DISPLAY"):
        return ["wayland", "xcb"]
    return ["xcb"]


def display_problem(platform: str, env: Mapping[str, str], *, wayland_socket: bool = False) -> Problem | None:
    """``platform`` needs a display server the environment does not name."""
    if platform == "xcb" and not env.get("DISPLAY"):
        if env.get("WAYLAND_DISPLAY"):
            return Problem(
                "compaction-inspector: no X display: DISPLAY is not set (QT_QPA_PLATFORM=xcb needs an X server; "
                f"this is a Wayland session: run it with QT_QPA_PLATFORM=wayland), {OFFSCREEN_HINT}"
            )
        return Problem(
            "compaction-inspector: no display: DISPLAY is not set, so there is no X server to open the window on; "
            f"run it in a desktop session (or over ssh -X), {OFFSCREEN_HINT}"
        )
    if platform == "wayland" and not (env.get("WAYLAND_DISPLAY") or wayland_socket):
        return Problem(f"compaction-inspector: no Wayland display: WAYLAND_DISPLAY is not set; run it in a Wayland session, {OFFSCREEN_HINT}")
    return None


def library_problem(platform: str, missing: Sequence[str]) -> Problem | None:
    """The one line for libraries ``platform`` needs and the system lacks."""
    if not missing:
        return None
    names = ", ".join(missing)
    what = f"the Qt {platform} platform" if platform in PLATFORM_LIBRARIES else "Qt"
    return Problem(f"compaction-inspector: {what} needs system libraries that are not installed ({names}): {install_hint(missing)}")


def required_libraries(platform: str) -> tuple[str, ...]:
    return QT_GUI + PLATFORM_LIBRARIES.get(platform, ())


def diagnose(
    env: Mapping[str, str],
    available: Callable[[Sequence[str]], set[str]],
    *,
    plugins: Sequence[str] | None = None,
    wayland_socket: bool = False,
) -> Problem | None:
    """What stops every candidate platform (the first one's problem), or None if one can work.

    ``available(names)`` says which sonames load; ``plugins`` are the platform plugins installed
    (None: do not check)."""
    first: Problem | None = None
    for platform in platform_candidates(env):
        problem = _platform_problem(platform, env, available, plugins, wayland_socket)
        if problem is None:
            return None
        first = first or problem
    return first


def _platform_problem(
    platform: str, env: Mapping[str, str], available: Callable[[Sequence[str]], set[str]], plugins: Sequence[str] | None, wayland_socket: bool
) -> Problem | None:
    if plugins is not None and platform not in plugins:
        return Problem(f"compaction-inspector: there is no Qt platform {platform!r} (QT_QPA_PLATFORM); the installed ones are: {', '.join(sorted(plugins))}")
    if platform not in HEADLESS:
        problem = display_problem(platform, env, wayland_socket=wayland_socket)
        if problem is not None:
            return problem
    required = required_libraries(platform)
    return library_problem(platform, missing_libraries(required, available(required)))


# == the machine ================================================================================


def _ldconfig_cache() -> set[str]:
    tool = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    if tool is None:
        return set()
    try:
        out = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return parse_ldconfig(out, wide=struct.calcsize("P") == 8)


def loadable(names: Sequence[str]) -> set[str]:
    """Which of ``names`` the dynamic loader finds: the ``ldconfig`` cache first, then (for what is
    not in it, e.g. a library on ``LD_LIBRARY_PATH``) by loading it."""
    found = _ldconfig_cache() & set(names)
    for name in names:
        if name in found:
            continue
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        found.add(name)
    return found


def installed_plugins() -> list[str] | None:
    """Platform plugins in the PySide6 wheel (None if they are looked up elsewhere or not found)."""
    if os.environ.get("QT_PLUGIN_PATH") or os.environ.get("QT_QPA_PLATFORM_PLUGIN_PATH"):
        return None
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "Qt" / "plugins" / "platforms"
    names = [m.group(1) for p in folder.glob("libq*.so") if (m := re.fullmatch(r"libq(\w+)\.so", p.name))]
    return names or None


def _wayland_socket(env: Mapping[str, str]) -> bool:
    runtime = env.get("XDG_RUNTIME_DIR")
    if not runtime:
        return False
    return os.path.exists(os.path.join(runtime, "wayland-0"))


def check(env: Mapping[str, str] | None = None) -> Problem | None:
    """The problem that would make Qt abort on this machine (Linux only), or None."""
    if not sys.platform.startswith("linux"):
        return None
    env = os.environ if env is None else env
    return diagnose(env, loadable, plugins=installed_plugins(), wayland_socket=_wayland_socket(env))


# == when Qt fails anyway ========================================================================

_PLUGIN_NAME = re.compile(r'platform plugin "([^"]+)"')
_MISSING_SO = re.compile(r"(lib[\w.+-]+\.so(?:\.\d+)*): cannot open shared object file")


def failure_line(messages: Sequence[str], env: Mapping[str, str], available: Callable[[Sequence[str]], set[str]] = loadable) -> str:
    """The one line for Qt's fatal platform error, from what Qt said while it failed."""
    text = "\n".join(messages)
    named = _PLUGIN_NAME.search(text)
    platform = named.group(1) if named else (platform_candidates(env) or ["xcb"])[0]
    reported = _MISSING_SO.findall(text)
    required = required_libraries(platform)
    problem = library_problem(platform, missing_libraries(reported + list(required), available(required) - set(reported)))
    if problem is not None:
        return problem.line
    if re.search(r'Could not find the Qt platform plugin "', text):
        offered = re.search(r"Available platform plugins are: ([^\n]*?)\.?\s*$", text, re.MULTILINE)
        where = f"; the installed ones are: {offered.group(1)}" if offered else ""
        return f"compaction-inspector: there is no Qt platform {platform!r} (QT_QPA_PLATFORM){where}"
    display = re.search(r"could not connect to display ?(\S*)", text)
    if display:
        name = display.group(1) or env.get("DISPLAY", "")
        return f"compaction-inspector: cannot connect to the X display {name!r} (is the X server running, and may this user use it?), {OFFSCREEN_HINT}"
    first = next((m.strip().splitlines()[0] for m in messages if m.strip()), "no platform plugin could be initialized")
    first = re.sub(r"^[\w.]+: ", "", first)  # without Qt's logging category
    return f"compaction-inspector: the Qt platform plugin {platform!r} could not be loaded ({first}); QT_DEBUG_PLUGINS=1 shows why, {OFFSCREEN_HINT}"


class guard_platform_failure:  # noqa: N801 (a context manager, named like contextlib's)
    """While the QApplication is created: Qt's fatal platform error becomes :func:`failure_line`
    and exit 2 instead of an abort (the plugin loader's diagnostics are not printed then); the
    messages Qt prints meanwhile are passed on once the QApplication exists."""

    def __init__(self, env: Mapping[str, str] | None = None, *, on_fatal: Callable[[int], object] = os._exit) -> None:
        self._env = os.environ if env is None else env
        self._on_fatal = on_fatal
        self._held: list[str] = []
        self._previous: object = None

    def __enter__(self) -> "guard_platform_failure":
        from PySide6.QtCore import qInstallMessageHandler

        self._previous = qInstallMessageHandler(self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        from PySide6.QtCore import qInstallMessageHandler

        qInstallMessageHandler(self._previous)  # type: ignore[arg-type]
        for message in self._held:
            print(message, file=sys.stderr)
        self._held.clear()

    def _handle(self, mode: object, context: object, message: str) -> None:
        from PySide6.QtCore import QtMsgType

        if mode == QtMsgType.QtFatalMsg:
            print(failure_line(self._held + [message], self._env), file=sys.stderr, flush=True)
            self._on_fatal(EXIT_PLATFORM)
            return
        category = getattr(context, "category", None) or ""
        self._held.append(f"{category}: {message}" if category and category != "default" else message)


def import_failure_line(exc: ImportError) -> str:
    """The one line for Qt's libraries failing to load (``import PySide6.QtWidgets``)."""
    missing = _MISSING_SO.findall(str(exc))
    problem = library_problem("Qt", missing)
    return problem.line if problem is not None else f"compaction-inspector: Qt cannot be loaded: {exc}"
