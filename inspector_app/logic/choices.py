"""Names the command line and the window share. Qt-free: the entry point parses its arguments
(and checks the platform) before it loads Qt."""

from __future__ import annotations

from typing import Literal

ThemeMode = Literal["light", "dark", "system"]
THEME_MODES: tuple[str, ...] = ("light", "dark", "system")
#: the side tabs, in order
TABS: tuple[str, ...] = ("detail", "pressure", "replay", "events", "checks", "audit")
