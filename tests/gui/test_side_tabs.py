"""The side panel's tabs come from one list (``inspector_app.logic.choices.SIDE_TABS``): their order,
titles and scroll areas, the ``--tab`` names, and the pages by name."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtWidgets import QWidget

from inspector_app.layout import PageScroll
from inspector_app.logic.choices import SIDE_TABS, TABS, tab_title
from inspector_app.main_window import MainWindow


def test_the_tabs_are_the_list_in_its_order(window: MainWindow) -> None:
    bar = window.tabs.tabBar()
    titles = [bar.tabText(i).partition(" (")[0] for i in range(window.tabs.count())]  # "Checks (1)": the count after the title
    assert titles == [tab.title for tab in SIDE_TABS]
    assert TABS == ("detail", "pressure", "replay", "events", "checks", "audit")
    scrolled = [isinstance(super(type(window.tabs), window.tabs).widget(i), PageScroll) for i in range(window.tabs.count())]
    assert scrolled == [tab.scrolled for tab in SIDE_TABS] == [True, True, True, False, False, False]
    assert window.tabs.widget(TABS.index("audit")) is window.revert_audit.panel is window.audit_panel
    assert window.tabs.widget(TABS.index("detail")) is window.detail and window.tabs.widget(TABS.index("replay")) is window.replay
    for name in TABS:
        window.show_tab(name)
        assert window.tabs.currentIndex() == TABS.index(name)
    window.set_checks_count(3)
    assert bar.tabText(TABS.index("checks")) == "Checks (3)" and tab_title("checks") == "Checks"


def test_a_page_missing_or_unknown_is_refused(window: MainWindow) -> None:
    pages: dict[str, Any] = {name: QWidget() for name in TABS if name != "audit"}
    with pytest.raises(RuntimeError, match="side tab pages"):
        window.add_side_tabs(pages)
    with pytest.raises(RuntimeError, match="side tab pages"):
        window.add_side_tabs({**pages, "audit": QWidget(), "extra": QWidget()})
