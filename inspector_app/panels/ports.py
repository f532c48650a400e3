"""What a panel's controller needs from the window's other components, as plain Protocols (a panel
imports neither :mod:`inspector_app.controllers` nor :mod:`inspector_app.layout`: both import the
panels, and the packages would cycle)."""

from __future__ import annotations

from typing import Protocol

from ..models.timeline import Node


class Paging(Protocol):
    """The timeline's pages (:class:`inspector_app.controllers.paging.PagingController`)."""

    async def go_to(self, message_id: int) -> bool:
        """Load the page around ``message_id`` if needed and select it."""
        ...

    async def show_boundary(self) -> None:
        """Select the boundary row (loading the page around it) and show the summary card."""
        ...

    async def load_gap(self, gap: Node | None, *, backward: bool) -> None:
        """Fill ``gap`` by one page from its lower (``backward``) or upper side."""
        ...
