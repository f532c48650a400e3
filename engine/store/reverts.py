"""Revert and redo of a thread's last compaction of ours, and the audit log read back.

A *compaction* is what one trigger did in one go: the newest run of consecutive history rows with
the same ``(trigger, run_id)`` (a pressure step's prunes and summaries; a manual compaction's
summary rounds). Reverting it brings back the boundary and summary from before it and shows the
results its prunes replaced verbatim again; a redo (the revert of a revert) applies it again. Both
are a new generation written as one ``compaction_history`` row (kind ``manual``, trigger ``revert``
or ``redo``): nothing is deleted or rewritten, so the history of every generation stays exact. An
offload a revert undid keeps its row with ``reverted_generation`` set (migration 0005).

Everything here runs inside the write door (:class:`Locked`) of the thread, except the audit read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from ..core.errors import CompareAndSwapConflict, NotRevertible
from ..core.views import AuditEntry, RevertTarget
from .door import Locked
from .models import AuditRow, CompactionHistoryRow, CompactionStateRow, Conversation, MessageRow, SourceCompactionRow, ToolOffloadRow, utcnow
from .records import aware, to_message

#: the ``compaction_history.trigger`` of a revert row and of a redo row
REVERT_TRIGGERS = ("revert", "redo")


@dataclass(frozen=True)
class RevertPlan:
    """What a revert (or redo) of the thread's last compaction will write, read under the lock."""

    action: Literal["revert", "redo"]
    history_ids: tuple[int, ...]
    generation: int  # the state's generation now (the CAS)
    boundary_now: int | None
    boundary_hash_now: str | None
    boundary: int | None  # the boundary it restores
    boundary_hash: str | None
    summary: str | None  # the summary it restores
    #: offloads shown verbatim again (revert) or as previews again (redo): message id -> (sha256, tool, path)
    results: dict[int, tuple[str, str, str]]


def _state(tx: Locked) -> Any:
    return tx._state_row()


def plan_revert(tx: Locked) -> RevertPlan:
    """The revert (or redo) the thread's history calls for now; :class:`NotRevertible` when there
    is none (``nothing_to_revert``, or ``source_compaction`` when the thread's compactions are its
    source's)."""
    return _plan(tx.session, tx.conv, _state(tx))


def revert_target(store: Any, key: str) -> RevertTarget:
    """What a revert of thread ``key`` would do now, read without the row lock (a viewer may ask)."""
    with store._session(write=False) as s:
        conv = store._conv(s, key)
        try:
            plan = _plan(s, conv, s.get(CompactionStateRow, conv.id))
        except NotRevertible as exc:
            return RevertTarget(None, (), exc.code, exc.message)
        return RevertTarget(plan.action, plan.history_ids)


def _plan(session: Session, conv: Conversation, st: CompactionStateRow | None) -> RevertPlan:
    rows: list[CompactionHistoryRow] = list(
        session.scalars(select(CompactionHistoryRow).where(CompactionHistoryRow.conversation_id == conv.id).order_by(CompactionHistoryRow.id))
    )
    ours = [r for r in rows if r.trigger not in REVERT_TRIGGERS]
    if not ours:
        sources = session.scalar(select(func.count()).select_from(SourceCompactionRow).where(SourceCompactionRow.conversation_id == conv.id))
        if sources:
            raise NotRevertible(
                f"thread {conv.thread_key!r} has no compaction of ours: its {sources} compaction{'s' if sources != 1 else ''} "
                "were recorded by its source (shown, never applied to our surface) and cannot be reverted",
                code="source_compaction",
            )
        raise NotRevertible(f"thread {conv.thread_key!r} has no compaction to revert", code="nothing_to_revert")
    action: Literal["revert", "redo"] = "redo" if rows[-1].trigger == "revert" else "revert"
    # the compaction: the newest run of rows of one (trigger, run_id) before any revert / redo rows
    end = len(rows) - 1
    while rows[end].trigger in REVERT_TRIGGERS:
        end -= 1
    key = (rows[end].trigger, rows[end].run_id)
    start = end
    while start > 0 and rows[start - 1].trigger not in REVERT_TRIGGERS and (rows[start - 1].trigger, rows[start - 1].run_id) == key:
        start -= 1
    group = rows[start : end + 1]
    first, last = group[0], group[-1]
    # revert: the boundary and summary from before the compaction; redo: those it left
    boundary, upto = (first.boundary_before, start) if action == "revert" else (last.boundary_after, end + 1)
    earlier = [r for r in rows[:upto] if r.kind != "prune"]
    summary = earlier[-1].summary if earlier and boundary is not None else None
    pruned: list[int] = []
    for r in group:
        if r.kind == "prune" and isinstance(r.pruned_message_ids, list):
            pruned.extend(int(i) for i in r.pruned_message_ids)
    results: dict[int, tuple[str, str, str]] = {}
    if pruned:
        want_reverted = action == "redo"
        q = select(ToolOffloadRow).where(ToolOffloadRow.conversation_id == conv.id, ToolOffloadRow.message_id.in_(pruned))
        for o in session.scalars(q):
            if (o.reverted_generation is not None) == want_reverted:
                results[o.message_id] = (o.sha256, o.tool_name, o.path)
    boundary_hash = None
    if boundary is not None:
        row = session.get(MessageRow, boundary)
        msg = to_message(row) if row is not None and row.conversation_id == conv.id else None
        if msg is None:
            raise NotRevertible(f"the boundary to restore, message #{boundary}, is not in the thread", code="nothing_to_revert")
        boundary_hash = msg.content_hash()
    return RevertPlan(
        action=action,
        history_ids=tuple(r.id for r in group),
        generation=st.generation if st is not None else 0,
        boundary_now=st.boundary_message_id if st is not None else None,
        boundary_hash_now=st.boundary_hash if st is not None else None,
        boundary=boundary,
        boundary_hash=boundary_hash,
        summary=summary,
        results=dict(sorted(results.items())),
    )


def apply_revert(tx: Locked, plan: RevertPlan, *, summary_tokens: int, tokens_before: int | None, measure: Callable[[], int] | None = None) -> tuple[int, int | None]:
    """Write ``plan`` as a new generation (compare-and-swap against what it read): the boundary,
    hash and summary it restores, the offloads it undoes (revert) or applies again (redo), then
    one history row carrying the envelope's size after (``measure()``, called once the state is
    changed in this transaction). Insert-only on the history: an operator role needs no UPDATE
    there. Returns (the new generation, the tokens after)."""
    st = _state(tx)
    if st.generation != plan.generation or st.boundary_message_id != plan.boundary_now or (st.boundary_hash or None) != (plan.boundary_hash_now or None):
        raise CompareAndSwapConflict(f"the thread changed since the revert was planned (generation {plan.generation} -> {st.generation}); nothing written")
    before, boundary_before = st.generation, st.boundary_message_id
    after = before + 1
    ids = list(plan.results)
    if ids:
        q = update(ToolOffloadRow).where(ToolOffloadRow.conversation_id == tx.conv.id, ToolOffloadRow.message_id.in_(ids))
        q = q.values(reverted_generation=after if plan.action == "revert" else None)
        tx.session.execute(q)
    st.boundary_message_id = plan.boundary
    st.boundary_hash = plan.boundary_hash
    st.summary = plan.summary
    st.summary_tokens = summary_tokens if plan.summary is not None else 0
    st.generation = after
    st.compact_count += 1
    tx.conv.compactions += 1  # the thread list's compactions sort (migration 0006)
    st.updated_at = utcnow()
    tx.conv.updated_at = utcnow()
    tx.session.flush()
    tokens_after = measure() if measure is not None else None
    tx.session.add(
        CompactionHistoryRow(
            conversation_id=tx.conv.id,
            run_id=None,
            kind="manual",
            trigger=plan.action,
            generation_before=before,
            generation_after=after,
            boundary_before=boundary_before,
            boundary_after=plan.boundary,
            summary=plan.summary,
            pruned_message_ids=ids or None,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
        )
    )
    tx.session.flush()
    return after, tokens_after


# -- the audit log read back ---------------------------------------------------------------------


def _entry(row: AuditRow) -> AuditEntry:
    return AuditEntry(
        id=row.id,
        thread=row.thread_key,
        action=row.action,
        operator=row.operator,
        display_name=row.display_name,
        reason=row.reason,
        at=aware(row.at),
        before=row.before if isinstance(row.before, dict) else None,
        after=row.after if isinstance(row.after, dict) else None,
    )


def read_audit(
    store: Any,
    *,
    thread: str | None = None,
    operator: str | None = None,
    actions: Sequence[str] | None = None,
    after_id: int | None = None,
    limit: int = 200,
) -> list[AuditEntry]:
    """Audit rows oldest first, keyset-paged by id (``after_id``), filtered by thread key, operator
    (the role / OS user or the display name) and action."""
    with store._session(write=False) as s:
        q = select(AuditRow)
        if thread is not None:
            q = q.where(AuditRow.thread_key == thread)
        if operator is not None:
            q = q.where((AuditRow.operator == operator) | (AuditRow.display_name == operator))
        if actions:
            q = q.where(AuditRow.action.in_(list(actions)))
        if after_id is not None:
            q = q.where(AuditRow.id > after_id)
        return [_entry(r) for r in s.scalars(q.order_by(AuditRow.id).limit(max(1, min(limit, 10_000))))]


def audit_operators(store: Any) -> list[str]:
    """The distinct operators of the audit log (the inspector's filter choices)."""
    with store._session(write=False) as s:
        return sorted(str(x) for x in s.scalars(select(AuditRow.operator).distinct()))


__all__ = ["REVERT_TRIGGERS", "RevertPlan", "apply_revert", "audit_operators", "plan_revert", "read_audit", "revert_target"]
