"""The timeline of one thread as plain Python (no Qt): page types, the unit → round → message tree,
the gap/segment arithmetic and :class:`Timeline`, which splices pages in and evicts them.

:mod:`inspector_app.models.timeline` is the thin ``QAbstractItemModel`` over :class:`Timeline`.
Nothing in this package imports PySide6.
"""

from .core import Silent, Timeline, TreeListener
from .pages import NEWEST, PREVIEW_CHARS, UNKNOWN, BoundaryInfo, MessageRow, PageRequest, TimelinePage, message_matches, message_preview, one_line
from .tree import (
    COL_ID,
    COL_MARKERS,
    COL_TEXT,
    COL_TOKENS,
    COLUMNS,
    MARKER_CONTINUES,
    MARKER_EPHEMERAL,
    MARKER_OPEN,
    MARKER_ORPHAN,
    MARKER_PRUNED,
    MARKER_SYNTHETIC,
    Node,
    message_markers,
)

__all__ = [
    "COLUMNS", "COL_ID", "COL_MARKERS", "COL_TEXT", "COL_TOKENS", "MARKER_CONTINUES", "MARKER_EPHEMERAL", "MARKER_OPEN",
    "MARKER_ORPHAN", "MARKER_PRUNED", "MARKER_SYNTHETIC", "NEWEST", "PREVIEW_CHARS", "UNKNOWN", "BoundaryInfo", "MessageRow",
    "Node", "PageRequest", "Silent", "Timeline", "TimelinePage", "TreeListener", "message_markers", "message_matches",
    "message_preview", "one_line",
]
