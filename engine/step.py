"""One model step on a thread: the one driver the harness, the adapters and what-if run on.

(Filled in below.)"""

from __future__ import annotations

from .surface import SYNTHETIC_USER_TEXT

__all__ = ["SYNTHETIC_USER_TEXT"]
