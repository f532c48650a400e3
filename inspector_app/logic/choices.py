"""Names the command line and the window share (the themes; the side tabs, the one list the window
builds them from). Qt-free: the entry point parses its arguments
(and checks the platform) before it loads Qt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ThemeMode = Literal["light", "dark", "system"]
THEME_MODES: tuple[str, ...] = ("light", "dark", "system")


@dataclass(frozen=True)
class SideTab:
    """One tab of the side panel: its name (``--tab NAME``, ``show_tab(NAME)``), its title, and
    whether its page sits in a vertical scroll area (a short window scrolls it instead of clipping)."""

    name: str
    title: str
    scrolled: bool = False


#: the side panel's tabs, in order: the one list the window builds its tabs from
#: (:meth:`inspector_app.layout.InspectorLayout.add_side_tabs`) and the command line's ``--tab`` reads
SIDE_TABS: tuple[SideTab, ...] = (
    SideTab("detail", "Detail", scrolled=True),
    SideTab("pressure", "Pressure", scrolled=True),
    SideTab("replay", "Replay", scrolled=True),
    SideTab("events", "Events"),
    SideTab("checks", "Checks"),
    SideTab("audit", "Audit"),
)
#: the side tabs' names, in order
TABS: tuple[str, ...] = tuple(tab.name for tab in SIDE_TABS)


def tab_title(name: str) -> str:
    """The title of the side tab ``name`` (without a count)."""
    return SIDE_TABS[TABS.index(name)].title
