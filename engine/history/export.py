"""The export of a compaction history (Markdown or JSON) and reading a JSON export back.

Both open with the same overview (:func:`overview`: one row per compaction, tokens before / after,
dropped specifics, net money, and the totals). The Markdown then keeps the long parts (summaries,
dropped-specifics lists) in collapsible ``<details>`` sections, and writes every figure through
:mod:`engine.core.figures` (money rounded to cents); the JSON keeps full precision."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

from ..core import figures
from ..core.specifics import DroppedSpecifics
from ..core.views import CompactionCost, CompactionEntry, ThreadInfo
from .core import EXPORT_FORMAT, EXPORT_VERSION, HistorySource, InvalidExport, read_history

__all__ = [
    "cost_to_json",
    "entry_from_json",
    "entry_to_json",
    "export_history",
    "export_json",
    "export_markdown",
    "load_export",
    "Overview",
    "OverviewRow",
    "overview",
    "overview_to_json",
]


def _dropped_from_json(data: object) -> DroppedSpecifics | None:
    if data is None:
        return None
    found = DroppedSpecifics.from_json(data)
    if found is None:
        raise InvalidExport("'dropped' is not a dropped-specifics object (no 'seen' count)")
    return found


def cost_to_json(c: CompactionCost | None) -> dict[str, Any] | None:
    """A cost as the JSON object of the export (every field)."""
    if c is None:
        return None
    return {f: getattr(c, f) for f in CompactionCost.__dataclass_fields__}


def entry_to_json(e: CompactionEntry) -> dict[str, Any]:
    return {
        "index": e.index, "kind": e.kind, "trigger": e.trigger, "origin": e.origin,
        "created_at": e.created_at.isoformat() if e.created_at is not None else None,
        "tokens_before": e.tokens_before, "tokens_after": e.tokens_after, "summary": e.summary,
        "dropped": e.dropped.to_json() if e.dropped is not None else None, "cost": cost_to_json(e.cost), "note": e.note,
        "record_id": e.record_id, "written_by": e.written_by,
    }


_INT_FIELDS = ("index",)
_OPT_INT = ("tokens_before", "tokens_after")
_COST_INT = ("summarizer_prompt_tokens", "summarizer_completion_tokens")


def _opt(value: object, types: tuple[type, ...], what: str) -> Any:
    if value is None or (isinstance(value, types) and not isinstance(value, bool)):
        return value
    raise InvalidExport(f"{what}: expected {' or '.join(t.__name__ for t in types)} or null, got {type(value).__name__}")


def entry_from_json(data: object) -> CompactionEntry:
    """An entry of :func:`entry_to_json`'s shape back (``InvalidExport`` when it is not one)."""
    if not isinstance(data, Mapping):
        raise InvalidExport("an entry is not a JSON object")
    idx = data.get("index")
    if not isinstance(idx, int) or isinstance(idx, bool):
        raise InvalidExport("an entry has no integer 'index'")
    kind = data.get("kind")
    origin = data.get("origin")
    if not isinstance(kind, str) or not isinstance(origin, str):
        raise InvalidExport(f"entry {idx}: 'kind' and 'origin' must be strings")
    at = data.get("created_at")
    created = None
    if at is not None:
        if not isinstance(at, str):
            raise InvalidExport(f"entry {idx}: 'created_at' must be an ISO time or null")
        try:
            created = datetime.fromisoformat(at)
        except ValueError:
            raise InvalidExport(f"entry {idx}: 'created_at' is not an ISO time: {at!r}") from None
    cost = data.get("cost")
    cost_v: CompactionCost | None = None
    if cost is not None:
        if not isinstance(cost, Mapping):
            raise InvalidExport(f"entry {idx}: 'cost' must be an object or null")
        saved = cost.get("saved_prompt_tokens")
        following = cost.get("following_requests")
        if not isinstance(saved, int) or not isinstance(following, int):
            raise InvalidExport(f"entry {idx}: cost needs integer 'saved_prompt_tokens' and 'following_requests'")
        if cost.get("source") not in ("recorded", "meter"):
            raise InvalidExport(f"entry {idx}: cost 'source' must be 'recorded' or 'meter'")
        cost_v = CompactionCost(
            summarizer_prompt_tokens=_opt(cost.get("summarizer_prompt_tokens"), (int,), f"entry {idx} cost"),
            summarizer_completion_tokens=_opt(cost.get("summarizer_completion_tokens"), (int,), f"entry {idx} cost"),
            saved_prompt_tokens=saved, following_requests=following, source=cost["source"],
            model=_opt(cost.get("model"), (str,), f"entry {idx} cost model"),
            money=_num(cost.get("money"), idx), currency=_opt(cost.get("currency"), (str,), f"entry {idx} cost currency"),
            price_note=_opt(cost.get("price_note"), (str,), f"entry {idx} cost price_note"),
            summarizer_money=_num(cost.get("summarizer_money"), idx), saved_money=_num(cost.get("saved_money"), idx),
        )
    try:
        dropped = _dropped_from_json(data.get("dropped"))
    except InvalidExport:
        raise
    except Exception as exc:  # noqa: BLE001 - S's parser refusing the object
        raise InvalidExport(f"entry {idx}: 'dropped' cannot be read ({exc})") from None
    return CompactionEntry(
        index=idx, kind=kind, trigger=_opt(data.get("trigger"), (str,), f"entry {idx} trigger"), origin=origin,
        created_at=created, tokens_before=_opt(data.get("tokens_before"), (int,), f"entry {idx} tokens_before"),
        tokens_after=_opt(data.get("tokens_after"), (int,), f"entry {idx} tokens_after"),
        summary=_opt(data.get("summary"), (str,), f"entry {idx} summary"), dropped=dropped, cost=cost_v,
        note=_opt(data.get("note"), (str,), f"entry {idx} note"),
        record_id=_opt(data.get("record_id"), (int,), f"entry {idx} record_id"),
        written_by=_opt(data.get("written_by"), (str,), f"entry {idx} written_by"),
    )


def _num(value: object, idx: int) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidExport(f"entry {idx}: a money amount must be a number or null")
    return float(value)


def export_history(source: HistorySource, key: str, format: str = "md") -> str:
    """The compaction history of ``key`` as Markdown (``md``) or JSON (``json``; read back with
    :func:`load_export`). ``InvalidExport`` for another format."""
    if format not in ("md", "json"):
        raise InvalidExport(f"unknown export format {format!r}: use md or json")
    th = read_history(source, key)
    entries = th.entries()
    if format == "json":
        return export_json(key, entries)
    return export_markdown(key, entries, th.info)


def export_json(key: str, entries: Sequence[CompactionEntry]) -> str:
    data = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "thread": key, "overview": overview_to_json(overview(entries)),
            "compactions": [entry_to_json(e) for e in entries]}
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def load_export(text: str) -> list[CompactionEntry]:
    """The entries of a JSON export (:func:`export_history` ``format="json"``), equal to the ones
    exported. ``InvalidExport`` (one line) for anything else."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidExport(f"not a JSON export: {exc}") from None
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
        raise InvalidExport(f"not a compaction-history export (no \"format\": \"{EXPORT_FORMAT}\")")
    if data.get("version") != EXPORT_VERSION:
        raise InvalidExport(f"unsupported export version {data.get('version')!r} (this version reads {EXPORT_VERSION})")
    items = data.get("compactions")
    if not isinstance(items, list):
        raise InvalidExport("the export has no 'compactions' list")
    return [entry_from_json(x) for x in items]


# -- the overview -----------------------------------------------------------------------------------


def dropped_count(e: CompactionEntry) -> int | None:
    """How many specifics compaction ``e`` dropped (all of them, listed or not): the count its
    record or its diff holds; 0 for one of our prunes (a preview keeps every identifier); None when
    not known."""
    if e.dropped is not None:
        return e.dropped.dropped_count
    return 0 if e.kind == "prune" and e.origin == "engine" else None


@dataclass(frozen=True, slots=True)
class OverviewRow:
    """One compaction in the overview: the figures every panel shows for it."""

    index: int
    kind: str
    trigger: str | None
    origin: str
    tokens_before: int | None
    tokens_after: int | None
    dropped: int | None
    seen: int | None
    listed: int
    saved_prompt_tokens: int | None
    money: float | None
    currency: str | None


@dataclass(frozen=True, slots=True)
class Overview:
    """The overview of a thread's compactions (the head of both exports)."""

    rows: tuple[OverviewRow, ...]
    #: how many of each kind (``summary``, ``manual``, ``prune``)
    kinds: Mapping[str, int]
    #: the sum over the compactions whose count is known (``dropped_known`` of them)
    dropped: int
    dropped_known: int
    saved_prompt_tokens: int
    #: net money (saved − summarizer) summed over the priced compactions (``priced`` of them)
    money: float | None
    priced: int
    currency: str | None

    @property
    def compactions(self) -> int:
        return len(self.rows)


def overview(entries: Sequence[CompactionEntry]) -> Overview:
    """The overview of ``entries`` (:meth:`ThreadHistory.entries`)."""
    rows = []
    kinds: dict[str, int] = {}
    for e in entries:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
        c = e.cost
        rows.append(OverviewRow(
            index=e.index, kind=e.kind, trigger=e.trigger, origin=e.origin, tokens_before=e.tokens_before,
            tokens_after=e.tokens_after, dropped=dropped_count(e), seen=e.dropped.seen if e.dropped is not None else None,
            listed=len(e.dropped.dropped) if e.dropped is not None else 0,
            saved_prompt_tokens=c.saved_prompt_tokens if c is not None else None,
            money=c.money if c is not None else None, currency=c.currency if c is not None else None,
        ))
    known = [r.dropped for r in rows if r.dropped is not None]
    priced = [r for r in rows if r.money is not None]
    currencies = {r.currency for r in priced}
    return Overview(
        rows=tuple(rows), kinds=kinds, dropped=sum(known), dropped_known=len(known),
        saved_prompt_tokens=sum(r.saved_prompt_tokens or 0 for r in rows),
        money=sum(r.money for r in priced if r.money is not None) if priced and len(currencies) == 1 else None,
        priced=len(priced), currency=currencies.pop() if len(currencies) == 1 else None,
    )


def overview_to_json(o: Overview) -> dict[str, Any]:
    """The overview as the JSON export's ``overview`` object (full precision)."""
    return {
        "compactions": o.compactions, "kinds": dict(o.kinds), "dropped_specifics": o.dropped,
        "dropped_known": o.dropped_known, "saved_prompt_tokens": o.saved_prompt_tokens, "money": o.money,
        "priced": o.priced, "currency": o.currency,
        "rows": [{f: getattr(r, f) for f in OverviewRow.__dataclass_fields__} for r in o.rows],
    }


# -- Markdown ------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _dropped_cell(r: OverviewRow) -> str:
    if r.dropped is None:
        return "not known"
    return f"{figures.count(r.dropped)} of {figures.count(r.seen)}" if r.seen is not None else figures.count(r.dropped)


def _overview_markdown(o: Overview) -> list[str]:
    kinds = ", ".join(figures.plural(n, k, "summaries" if k == "summary" else None) for k, n in sorted(o.kinds.items()))
    head = [figures.plural(o.compactions, "compaction") + (f" ({kinds})" if kinds else "")]
    dropped = figures.plural(o.dropped, "specific") + " dropped"
    if o.dropped_known < o.compactions:
        dropped += f" (known for {o.dropped_known} of {o.compactions})"
    head.append(dropped)
    if o.money is not None:
        head.append(f"net {figures.money(o.money, o.currency)}"
                    + (f" ({o.priced} of {o.compactions} priced)" if o.priced < o.compactions else ""))
    else:
        head.append("money not known")
    out = ["## Overview", "", " · ".join(head), "",
           "| # | Kind | Trigger | Origin | Tokens before | Tokens after | Dropped specifics | Net money |",
           "|--:|---|---|---|--:|--:|--:|--:|"]
    for r in o.rows:
        out.append(f"| {r.index} | {_cell(r.kind)} | {_cell(r.trigger or '–')} | {_cell(r.origin)} | {figures.tokens(r.tokens_before)} "
                   f"| {figures.tokens(r.tokens_after)} | {_dropped_cell(r)} | {figures.money(r.money, r.currency)} |")
    if o.rows:
        out.append(f"| **total** | | | | | | **{figures.count(o.dropped)}** | **{figures.money(o.money, o.currency)}** |")
    out += ["", "Net money: what the compaction saved on the requests that followed it, less its summarizer call, at list "
            "prices (rounded to cents here; the JSON export keeps full precision).", ""]
    return out


def export_markdown(key: str, entries: Sequence[CompactionEntry], info: ThreadInfo | None = None) -> str:
    out = [f"# Compaction history of `{key}`", ""]
    if info is not None:
        route = " / ".join(x for x in (info.provider, info.model) if x) or "unknown route"
        out += [f"{figures.plural(info.message_count, 'message')} · generation {info.generation} · {route}"
                + (f" · imported from {info.source_format}" if info.source_format else ""), ""]
    if not entries:
        out += ["No compactions.", ""]
        return "\n".join(out)
    out += _overview_markdown(overview(entries))
    out += ["## Compactions", ""]
    for e in entries:
        when = e.created_at.isoformat() if e.created_at else "time unknown"
        out += [f"### {e.index}. {e.kind} ({e.trigger or 'no trigger'}, {e.origin}) — {when}", ""]
        out += [f"- Tokens: {figures.tokens_change(e.tokens_before, e.tokens_after)}"]
        if e.written_by:
            out += [f"- Written by: {e.written_by}"]
        if e.cost is not None:
            c = e.cost
            summ = ("unknown" if c.summarizer_prompt_tokens is None and c.summarizer_completion_tokens is None
                    else f"{figures.tokens(c.summarizer_prompt_tokens or 0)} prompt + {figures.tokens(c.summarizer_completion_tokens or 0)} completion")
            out += [f"- Summarizer: {summ} tokens",
                    f"- Saved: {figures.tokens(c.saved_prompt_tokens)} prompt tokens over "
                    f"{figures.plural(c.following_requests, 'following request')} ({c.source})",
                    f"- Money ({c.model or 'model unknown'}): net {figures.money(c.money, c.currency)}"
                    f" (saved {figures.money(c.saved_money, c.currency)}, summarizer {figures.money(c.summarizer_money, c.currency)})"]
            if c.price_note:
                out += [f"  - {c.price_note}"]
        d = e.dropped
        long: list[str] = []
        if d is not None:
            items = list(d.dropped)
            count = dropped_count(e) or 0
            refd = d.referenced_count if d.referenced_count is not None else sum(1 for x in items if x.referenced)
            out += [f"- Dropped specifics: {figures.count(count)} of {figures.count(d.seen)} seen"
                    + (f", {figures.count(refd)} referenced by the current request or the retained tail (warning)" if refd else "")]
            if items:
                long += [f"<details><summary>Dropped specifics ({figures.capped(len(items), count)})</summary>", ""]
                long += [f"- {x.kind}: `{x.value}`" + (" — referenced" if x.referenced else "") for x in items]
                long += ["", "</details>", ""]
        elif e.kind == "prune":
            out += ["- Dropped specifics: none (a prune keeps every identifier in its preview)"]
        else:
            out += ["- Dropped specifics: not known"]
        if e.note:
            out += [f"- Note: {e.note}"]
        out.append("")
        out += long
        if e.summary:
            fence = "````" if "```" in e.summary else "```"
            out += ["<details><summary>Summary</summary>", "", fence + "text", e.summary, fence, "", "</details>", ""]
    return "\n".join(out)
