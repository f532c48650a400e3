"""The one formatter of the figures the app shows: pressure, tokens, counts, money, capped lists.

Every panel of the inspector, the CLI and the export format a figure through these functions, so
one quantity reads the same everywhere (``84.9%`` in the thread list, the header and the gauge;
``48,211 → 24,100`` in the picker, the title and the table). Pure: no I/O, no engine imports.

- :func:`percent` floors to a tenth (``84.96%`` reads ``84.9%``: a share never reads as having
  reached a line it has not; the 85% hint starts at ``85.0%``); from 1000% on, whole percent.
- :func:`tokens` / :func:`count`: thousands separated (``1,617``); None is ``unknown``.
- :func:`money`: rounded to cents, half up (``$4.84``; ``-$0.12``; a non-zero amount under half a
  cent is ``<$0.01``). Exports in JSON keep the full precision; only the words round.
- :func:`capped`: a list shown in part says so (``first 500 of 658``).
- :func:`plural`: ``1 compaction`` / ``2 compactions``.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

__all__ = ["UNKNOWN", "byte_size", "capped", "count", "money", "percent", "plural", "signed", "tokens", "tokens_change"]

#: what a figure nobody recorded reads as
UNKNOWN = "unknown"
_CURRENCY_SIGNS = {"USD": "$"}


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def percent(ratio: float | None) -> str:
    """A share (``tokens / threshold``) as a percentage: ``84.9%`` (floored to a tenth), ``1,234%``
    from 1000% on; ``–`` when unknown."""
    if not _number(ratio):
        return "–"
    assert ratio is not None
    tenths = math.floor(ratio * 1000 + 1e-6)  # the epsilon: 0.85 exactly is 85.0%, never 84.9%
    if tenths >= 10_000:
        return f"{tenths // 10:,}%"
    sign = "-" if tenths < 0 else ""
    return f"{sign}{abs(tenths) // 10}.{abs(tenths) % 10}%"


def count(n: int | None) -> str:
    """A whole number with thousands separators; ``unknown`` for None."""
    if n is None:
        return UNKNOWN
    if not _number(n):
        return str(n)
    return f"{int(n):,}"


def byte_size(n: int | None) -> str:
    """A file's size: ``812 B``, ``14.2 KB``, ``3.1 MB``, ``1.2 GB`` (1 KB = 1024 B, one decimal under 100);
    ``unknown`` for None."""
    if n is None or not _number(n):
        return UNKNOWN
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1024 or unit == "GB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.1f} {unit}" if abs(value) < 100 else f"{value:,.0f} {unit}"
        value /= 1024
    return UNKNOWN  # pragma: no cover (the loop returns at GB)


def tokens(n: int | None) -> str:
    """Tokens: ``1,617``; ``unknown`` for None."""
    return count(n)


def signed(n: int) -> str:
    """A change: ``+1,200`` / ``-800`` / ``0``."""
    return f"{int(n):+,}" if n else "0"


def tokens_change(before: int | None, after: int | None) -> str:
    """``97,470 → 22,599`` (the two sides of one compaction)."""
    return f"{tokens(before)} → {tokens(after)}"


def money(amount: float | None, currency: str | None = "USD") -> str:
    """An amount rounded to cents (half up): ``$4.84``, ``-$0.12``, ``<$0.01`` for a non-zero
    amount that rounds to nothing, ``unknown`` for None. A currency other than USD is written
    after the amount (``4.84 EUR``)."""
    if amount is None or not _number(amount):
        return UNKNOWN
    cents = Decimal(str(amount)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    sign = "-" if amount < 0 else ""
    cur = currency or "USD"
    mark = _CURRENCY_SIGNS.get(cur)
    if cents == 0 and amount != 0:
        body = "<" + (f"{mark}0.01" if mark else f"0.01 {cur}")
        return f"{sign}{body}"
    value = f"{abs(cents):,.2f}"
    return f"{sign}{mark}{value}" if mark else f"{sign}{value} {cur}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 compaction``, ``2 compactions``, ``1,234 specifics`` (``many``: an irregular plural)."""
    return f"{count(n)} {word if n == 1 else (many or word + 's')}"


def capped(shown: int, total: int | None) -> str:
    """How much of a list is shown: ``first 500 of 658`` when capped, else the count (``658``)."""
    if total is None or shown >= total:
        return count(shown)
    return f"first {count(shown)} of {count(total)}"
