"""Helpers for ``QTreeWidget``: its top-level items as a list (Qt types ``topLevelItem(i)`` as
optional; within ``range(topLevelItemCount())`` it is never None)."""

from __future__ import annotations

from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem


def top_level_items(tree: QTreeWidget) -> list[QTreeWidgetItem]:
    """The top-level items of ``tree``, in the order shown."""
    items = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    return [item for item in items if item is not None]
