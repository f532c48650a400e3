"""Money of a compaction: list prices from the genai-prices snapshot bundled with the package."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from ..core.views import CompactionCost

__all__ = ["price_cost", "price_tokens"]


def price_tokens(model: str | None, *, input_tokens: int = 0, output_tokens: int = 0, provider: str | None = None) -> tuple[float | None, str | None]:
    """(USD, None) for the tokens at ``model``'s list price in the ``genai-prices`` data bundled
    with the installed package (never downloaded: its updater is not started), or (None, why)."""
    if not model:
        return None, "the model is not known"
    if input_tokens == 0 and output_tokens == 0:
        return 0.0, None
    try:
        from genai_prices import Usage, data_snapshot
    except ImportError:
        return None, "genai-prices is not installed"
    sign = -1 if input_tokens < 0 else 1
    usage = Usage(input_tokens=abs(input_tokens), output_tokens=max(0, output_tokens))
    snap = data_snapshot.get_snapshot()
    if snap.from_auto_update:  # someone started its updater in this process: use the bundled data
        snap = data_snapshot._bundled_snapshot()  # noqa: SLF001
    attempts = [provider, None] if provider else [None]
    for pid in attempts:
        try:
            calc = snap.calc(usage, model, pid, None, None)
        except (LookupError, ValueError):
            continue
        total = calc.total_price
        return float(Decimal(sign) * Decimal(total)), None
    return None, f"model {model!r} is not in the genai-prices data"


def price_cost(
    *,
    summarizer_prompt_tokens: int | None,
    summarizer_completion_tokens: int | None,
    saved_prompt_tokens: int,
    following_requests: int,
    source: Literal["recorded", "meter"],
    model: str | None,
    provider: str | None = None,
    summarizer_model: str | None = None,
    extractive: bool = False,
) -> CompactionCost:
    """A :class:`CompactionCost` with money: ``money`` = saved − summarizer cost (USD, positive when
    the compaction paid for itself), at uncached list input prices."""
    notes: list[str] = []
    saved_money, why = price_tokens(model, input_tokens=saved_prompt_tokens, provider=provider)
    if why:
        notes.append(f"saved tokens not priced: {why}")
    if extractive:
        summ_money: float | None = 0.0
    elif summarizer_prompt_tokens is None and summarizer_completion_tokens is None:
        summ_money = None
        notes.append("the summarizer's usage was not recorded")
    else:
        summ_money, why = price_tokens(summarizer_model or model, input_tokens=summarizer_prompt_tokens or 0,
                                       output_tokens=summarizer_completion_tokens or 0)
        if why:
            notes.append(f"summarizer not priced: {why}")
    money = saved_money - summ_money if saved_money is not None and summ_money is not None else None
    if money is not None:
        notes.append("list prices of the genai-prices snapshot bundled with the package, uncached input")
    return CompactionCost(
        summarizer_prompt_tokens=summarizer_prompt_tokens, summarizer_completion_tokens=summarizer_completion_tokens,
        saved_prompt_tokens=saved_prompt_tokens, following_requests=following_requests, source=source, model=model,
        money=money, currency="USD" if money is not None or saved_money is not None else None,
        price_note="; ".join(notes) or None, summarizer_money=summ_money, saved_money=saved_money,
    )
