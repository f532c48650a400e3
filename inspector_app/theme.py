"""Colour tokens for the light and dark themes, feeding the QSS template and the painted widgets.

Every colour in the inspector comes from a :class:`Tokens` instance; widgets that paint themselves
read :func:`current` so a theme switch repaints them consistently.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from importlib import resources as importlib_resources
from string import Template

from PySide6.QtCore import QByteArray, QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QApplication

from .logic.choices import THEME_MODES as THEME_MODES, ThemeMode as ThemeMode  # re-exported: the theme names live Qt-free


@dataclass(frozen=True, slots=True)
class Tokens:
    """The colour tokens of one theme (hex strings, usable in QSS and QColor alike)."""

    name: str
    window: str
    surface: str
    surface_alt: str
    border: str
    text: str
    text_muted: str
    text_dim: str
    accent: str
    accent_text: str
    selection: str
    selection_text: str
    ok: str
    warn: str
    danger: str
    info: str
    boundary: str
    boundary_text: str
    banner_bg: str
    banner_text: str
    badge_bg: str
    # categories of the pressure breakdown
    cat_system: str
    cat_tools: str
    cat_summary: str
    cat_user: str
    cat_assistant: str
    cat_tool_results: str


LIGHT = Tokens(
    name="light",
    window="#f4f5f7",
    surface="#ffffff",
    surface_alt="#f0f2f5",
    border="#d5d9e0",
    text="#1f2328",
    text_muted="#57606a",
    text_dim="#9aa1ab",
    accent="#2f6feb",
    accent_text="#ffffff",
    selection="#dbe7fd",
    selection_text="#1f2328",
    ok="#1a7f37",
    warn="#bf8700",
    danger="#cf222e",
    info="#0969da",
    boundary="#fff4d6",
    boundary_text="#6b4d00",
    banner_bg="#ffebe9",
    banner_text="#82071e",
    badge_bg="#e8ebef",
    cat_system="#8250df",
    cat_tools="#6e7781",
    cat_summary="#bf8700",
    cat_user="#2f6feb",
    cat_assistant="#1a7f37",
    cat_tool_results="#e16f24",
)

DARK = Tokens(
    name="dark",
    window="#16191d",
    surface="#1e2227",
    surface_alt="#252a31",
    border="#353b45",
    text="#e6e9ed",
    text_muted="#a4acb7",
    text_dim="#6b7380",
    accent="#4c8dff",
    accent_text="#ffffff",
    selection="#26416e",
    selection_text="#ffffff",
    ok="#3fb950",
    warn="#d29922",
    danger="#f85149",
    info="#58a6ff",
    boundary="#3a3120",
    boundary_text="#f2cc60",
    banner_bg="#4a1d1f",
    banner_text="#ffdcd7",
    badge_bg="#30363f",
    cat_system="#a371f7",
    cat_tools="#8b949e",
    cat_summary="#d29922",
    cat_user="#4c8dff",
    cat_assistant="#3fb950",
    cat_tool_results="#f0883e",
)

_current: Tokens = LIGHT


def current() -> Tokens:
    """The tokens of the theme applied last (light before any theme was applied)."""
    return _current


def color(name: str) -> QColor:
    """One token of the current theme as a QColor."""
    return QColor(getattr(_current, name))


def system_is_dark() -> bool:
    """Whether the platform asks for a dark colour scheme (``QStyleHints.colorScheme()``)."""
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def resolve(mode: ThemeMode) -> Tokens:
    """The tokens for ``mode``; ``system`` follows the platform colour scheme."""
    if mode == "dark" or (mode == "system" and system_is_dark()):
        return DARK
    return LIGHT


def stylesheet(tokens: Tokens) -> str:
    """The QSS template from ``resources/`` filled with ``tokens``; without it (a broken install)
    the palette alone styles the window, and the reason is logged: the app still starts."""
    try:
        template = importlib_resources.files("resources").joinpath("inspector.qss").read_text(encoding="utf-8")
        return Template(template).substitute(asdict(tokens))
    except (OSError, UnicodeDecodeError, ValueError, KeyError) as exc:
        logging.getLogger(__name__).warning("the style sheet resources/inspector.qss cannot be used (%s): the palette alone styles the window", exc)
        return ""


def card_stylesheet(tokens: Tokens) -> str:
    """The summary card's own style sheet (set on the card once per theme, never per show).

    ``[source="true"]``: the card of a compaction the source recorded, in the source's colour
    (``info``, tinted), never our boundary's; without the property the theme's summary card
    applies. The dropped-specifics warning and error stay in ``danger`` over either card's label
    colour. A widget's own sheet outranks the application's, as the per-show sheets it replaces did."""
    info = QColor(tokens.info)
    tint = f"rgba({info.red()}, {info.green()}, {info.blue()}, 30)"
    return (
        f'QFrame#summaryCard[source="true"] {{ background: {tint}; border: 1px solid {tokens.info}; }}\n'
        f'QFrame#summaryCard[source="true"] QLabel {{ color: {tokens.info}; }}\n'
        f"QFrame#summaryCard QLabel#droppedWarning {{ color: {tokens.danger}; font-weight: 600; }}\n"
        f"QFrame#summaryCard QLabel#droppedError {{ color: {tokens.danger}; }}\n"
    )


def _palette(tokens: Tokens) -> QPalette:
    pal = QPalette()
    roles = {
        QPalette.ColorRole.Window: tokens.window,
        QPalette.ColorRole.WindowText: tokens.text,
        QPalette.ColorRole.Base: tokens.surface,
        QPalette.ColorRole.AlternateBase: tokens.surface_alt,
        QPalette.ColorRole.Text: tokens.text,
        QPalette.ColorRole.Button: tokens.surface_alt,
        QPalette.ColorRole.ButtonText: tokens.text,
        QPalette.ColorRole.Highlight: tokens.selection,
        QPalette.ColorRole.HighlightedText: tokens.selection_text,
        QPalette.ColorRole.ToolTipBase: tokens.surface,
        QPalette.ColorRole.ToolTipText: tokens.text,
        QPalette.ColorRole.PlaceholderText: tokens.text_dim,
        QPalette.ColorRole.Link: tokens.accent,
    }
    for role, value in roles.items():
        pal.setColor(role, QColor(value))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(tokens.text_dim))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(tokens.text_dim))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor(tokens.text_dim))
    return pal


class ThemeManager(QObject):
    """Applies a theme to the application and follows the system scheme in ``system`` mode."""

    changed = Signal(object)  # Tokens

    def __init__(self, app: QApplication, mode: ThemeMode = "system") -> None:
        super().__init__(app)
        self._app = app
        self._mode: ThemeMode = mode
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_scheme_changed)

    @property
    def mode(self) -> ThemeMode:
        return self._mode

    def apply(self, mode: ThemeMode | None = None) -> Tokens:
        """Apply ``mode`` (or the current mode again); returns the tokens now in force."""
        global _current
        if mode is not None:
            self._mode = mode
        tokens = resolve(self._mode)
        _current = tokens
        self._app.setStyle("Fusion")
        self._app.setPalette(_palette(tokens))
        self._app.setStyleSheet(stylesheet(tokens))
        self.changed.emit(tokens)
        return tokens

    def _on_scheme_changed(self, _scheme: Qt.ColorScheme) -> None:
        if self._mode == "system":
            self.apply()


_icon_cache: dict[tuple[str, str, int], QIcon] = {}
_log = logging.getLogger(__name__)
_warned: set[str] = set()  # icon names already reported missing (once each, not per colour)

#: the icon every missing or unreadable resource falls back to
GENERIC_ICON = "generic"
#: a message row's icon by role (every role of ``engine.core.messages.ROLES``)
ROLE_ICONS: dict[str, str] = {"system": "system", "developer": "developer", "user": "user", "assistant": "assistant", "tool": "tool"}
#: a meta message's icon by its ``meta_kind`` (the importers' kinds; any other kind: ``meta``)
META_ICONS: dict[str, str] = {
    "command": "command", "shell_command": "command", "command_output": "command",
    "interrupted": "interrupted", "turn_aborted": "interrupted",
    "system_reminder": "reminder", "hook": "reminder", "task_notification": "reminder",
    "caveat": "context", "environment_context": "context", "user_instructions": "context", "skill": "context", "continuation": "summary",
    "orphan_result": "orphan",
}  # fmt: skip
META_ICON = "meta"
#: a row marker's icon (the timeline's Markers column draws these when the words do not fit);
#: "2 images" / "3 documents" use the icon of their kind
MARKER_ICONS: dict[str, str] = {
    "pruned": "pruned", "synthetic": "synthetic", "ephemeral": "ephemeral", "open round": "open", "orphan": "orphan",
    "continues": "continues", "thinking": "thinking", "image": "image", "document": "document", "error": "error",
    "meta": "meta", "no result": "noresult", "pinned": "pin",
}  # fmt: skip
#: the icons of the timeline's group rows and of the other places that name one
ROW_ICONS: tuple[str, ...] = ("turn", "round", "boundary", "summary", "context")


def role_icon(role: str, meta_kind: str | None = None) -> str:
    """The icon name of a message of ``role`` (a meta message: the icon of its kind)."""
    if meta_kind:
        return META_ICONS.get(meta_kind, META_ICON)
    return ROLE_ICONS.get(role, GENERIC_ICON)


def marker_icon(marker: str) -> str:
    """The icon name of a row marker (``2 images`` → ``image``); unknown markers: the generic icon."""
    if marker in MARKER_ICONS:
        return MARKER_ICONS[marker]
    tail = marker.rsplit(" ", 1)[-1]
    return MARKER_ICONS.get(tail.rstrip("s"), GENERIC_ICON)


def icon_names() -> set[str]:
    """Every icon name the maps above can ask for (the wheel test checks each exists)."""
    return {GENERIC_ICON, META_ICON, *ROLE_ICONS.values(), *META_ICONS.values(), *MARKER_ICONS.values(), *ROW_ICONS}


def _svg_text(name: str) -> str | None:
    """The SVG of ``resources/icons/<name>.svg``, or None when it is missing or unreadable."""
    try:
        return importlib_resources.files("resources").joinpath("icons", f"{name}.svg").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        if name not in _warned:
            _warned.add(name)
            _log.warning("icon %r is missing from resources/icons (%s); the generic icon is drawn instead", name, exc)
        return None


def icon(name: str, color_token: str = "text_muted", size: int = 16) -> QIcon:
    """An SVG icon from ``resources/icons`` drawn in one colour token of the current theme.

    Never raises (it is called inside paints and ``data()``): a missing or invalid resource draws
    the generic icon (:data:`GENERIC_ICON`), logged once; if even that is missing, an empty icon."""
    value = getattr(_current, color_token, None) or _current.text_muted
    key = (name, value, size)
    cached = _icon_cache.get(key)
    if cached is not None:
        return cached
    svg = _svg_text(name)
    renderer = QSvgRenderer(QByteArray(svg.replace("currentColor", value).encode("utf-8"))) if svg is not None else None
    if renderer is None or not renderer.isValid():
        if name == GENERIC_ICON:
            result = QIcon()
            _icon_cache[key] = result
            return result
        if svg is not None:
            _log.warning("icon %r is not a valid SVG; the generic icon is drawn instead", name)
        result = icon(GENERIC_ICON, color_token, size)
        _icon_cache[key] = result
        return result
    result = QIcon()
    for scale in (1, 2):
        pix = QPixmap(size * scale, size * scale)
        pix.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pix)
        renderer.render(painter)
        painter.end()
        pix.setDevicePixelRatio(scale)
        result.addPixmap(pix)
    _icon_cache[key] = result
    return result
