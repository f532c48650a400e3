"""The theme menu (system, light, dark) and repainting what draws itself from the theme tokens."""

from __future__ import annotations

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QToolButton

from .. import theme
from ..layout import InspectorLayout


class ThemeController:
    """Adds the *Theme* button to the toolbar; follows :attr:`theme.ThemeManager.changed`."""

    def __init__(self, ui: InspectorLayout, manager: theme.ThemeManager | None) -> None:
        self.ui = ui
        self.manager = manager
        self.actions = QActionGroup(ui)
        menu = QMenu(ui)
        for mode in theme.THEME_MODES:
            action = QAction(f"{mode.capitalize()} theme", ui, checkable=True)
            action.setData(mode)
            action.setChecked(self.mode == mode)
            action.triggered.connect(lambda _checked=False, m=mode: self.set_theme(m))
            self.actions.addAction(action)
            menu.addAction(action)
        self.button = QToolButton()
        self.button.setObjectName("themeButton")
        self.button.setText("Theme")
        self.button.setMenu(menu)
        self.button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        ui.toolbar.addWidget(self.button)
        # the same choices in View → Theme: reachable however narrow the window (the toolbar may hide its end)
        self.view_menu = QMenu("&View", ui)
        self.view_menu.setObjectName("viewMenu")
        theme_menu = self.view_menu.addMenu("&Theme")
        theme_menu.addActions(self.actions.actions())
        bar = ui.menuBar()
        after = bar.actions()
        at = next((i + 1 for i, a in enumerate(after) if a is ui.compaction_menu.menuAction()), len(after))
        if at < len(after):
            bar.insertMenu(after[at], self.view_menu)
        else:
            bar.addMenu(self.view_menu)
        if manager is not None:
            manager.changed.connect(self._on_changed)

    @property
    def mode(self) -> str:
        return self.manager.mode if self.manager is not None else "system"

    def set_theme(self, mode: str) -> None:
        if self.manager is not None:
            self.manager.apply(mode)  # type: ignore[arg-type]

    def _on_changed(self, _tokens: theme.Tokens) -> None:
        """Repaint what draws itself from the tokens (icons, painted widgets, item colours)."""
        ui = self.ui
        ui.banner.refresh_icons()
        ui.connect_action.setIcon(theme.icon("database"))
        ui.refresh_action.setIcon(theme.icon("refresh"))
        for action in self.actions.actions():
            action.setChecked(action.data() == self.mode)
        for widget in (ui.timeline.viewport(), ui.thread_list.viewport(), ui.gauge, ui.chart):
            widget.update()
