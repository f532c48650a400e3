"""Steering: pins, the thread's own policy and instructions, the store-wide policy, the audit log and access (each write one audit row).

Reached as ``svc.steering`` (:class:`engine.service.Service`); shares one :class:`ServiceCore` with the other facets."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..core.policy import THREAD_INSTRUCTIONS, PolicyError, ResolvedPolicy, thread_overrides
from ..core.views import (  # issue 23
    AuditEntry,
    PinChange,
    PinInfo,
    ThreadPolicyView,
)
from ..locations import (
    POLICY_SETTING,
    load_policies,
)
from ..store import (
    access as _access,
    reverts as _reverts,
)
from .core import ServiceCore


class SteeringFacet:
    """Steering: pins, the thread's own policy and instructions, the store-wide policy, the audit log and access (each write one audit row)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def operator(self) -> str:
        """Who acts on this store (PostgreSQL ``current_user``, the OS user on SQLite)."""
        return self._core.store.operator()

    def pins(self, key: str) -> list[PinInfo]:
        """The pinned messages of thread ``key`` (a pinned round: one entry per message)."""
        return self._core.store.pins(key)

    def pin(self, key: str, message_id: int, *, reason: str | None = None, display_name: str | None = None, unpin: bool = False) -> PinChange:
        """Pin (or ``unpin``) a message of thread ``key`` with its whole tool round: it is never
        pruned or summarized and stays verbatim in its place (docs/contract.md, Pins). One audit
        row (``pin`` / ``unpin``) in the same transaction when something changed."""
        action = "unpin" if unpin else "pin"
        who = self._core.store.operator()
        with self._core.store.locked(key) as tx:
            before = tx.pinned_ids()
            covered = tx.pin_round(message_id)
            changed = tx.unpin(message_id) if unpin else tx.pin(message_id, operator=who, reason=reason)
            audit_id = None
            if changed:
                audit_id = tx.record_audit(action, operator=who, display_name=self._core.display_name(display_name), reason=reason,
                                           before={"message_id": int(message_id), "pinned": before},
                                           after={"message_id": int(message_id), "pinned": tx.pinned_ids(), "changed": changed})
            version = tx.state().pins_version
        self._core.snapshots.invalidate(key)
        return PinChange(key, int(message_id), action, tuple(covered), tuple(changed), version, audit_id)  # type: ignore[arg-type]

    def unpin(self, key: str, message_id: int, *, reason: str | None = None, display_name: str | None = None) -> PinChange:
        return self.pin(key, message_id, reason=reason, display_name=display_name, unpin=True)

    def thread_policy(self, key: str) -> ThreadPolicyView:
        """Thread ``key``'s effective policy, each value with where it comes from (the thread, its
        model route, the store default), its window and standing instructions."""
        with self._core.store.reading(key) as reader:
            head = reader.head(with_busy=False, with_offloads=False, with_request=False)
        own = dict(head.thread_policy or {})
        reported = head.reported_context_window
        try:
            r: ResolvedPolicy | None = self._core.policies.resolve(head.provider, head.model, reported_window=reported,
                                                             reported_by=head.source_format if reported else None, thread=own)
        except PolicyError:
            r = None
        policy = r.policy if r is not None else self._core.policies.default.with_overrides(thread_overrides(own))
        values = {f: getattr(policy, f) for f in sorted(self._core.policies.origins(head.provider, head.model, own))}
        origins = dict(self._core.policies.origins(head.provider, head.model, own))
        if r is not None:
            values["context_window"] = r.context_window
            origins["context_window"] = {"thread": "thread", "override": "model route"}.get(r.window_source, r.window_source)
        instructions = own.get(THREAD_INSTRUCTIONS)
        return ThreadPolicyView(key, head.provider, head.model, values, origins, r.context_window if r else None, r.window_source if r else None,
                                r.threshold if r else None, r.target_tokens if r else None, r.retained_tail_tokens if r else None,
                                {k: v for k, v in own.items() if k != THREAD_INSTRUCTIONS}, instructions if isinstance(instructions, str) else None)

    def set_thread_policy(self, key: str, values: Mapping[str, Any] | None = None, *, unset: Sequence[str] = (),
                          reason: str | None = None, display_name: str | None = None) -> ThreadPolicyView:
        """Set (``values``) or remove (``unset``) policy values for thread ``key`` only
        (``threshold_ratio``, ``threshold_tokens``, ``context_window``, ``retained_tail_ratio``, any
        policy key; ``instructions``: the standing compaction instructions, "" or None removes
        them). Refused (``invalid_policy``, nothing written) when the result cannot be used. One
        audit row (``policy``, or ``instructions`` when only they changed)."""
        who = self._core.store.operator()
        with self._core.store.locked(key) as tx:
            old = tx.thread_policy()
            new = dict(old)
            for k in unset:
                new.pop(k, None)
            for k, v in (values or {}).items():
                if v is None or (k == THREAD_INSTRUCTIONS and isinstance(v, str) and not v.strip()):
                    new.pop(k, None)
                else:
                    new[k] = v
            if THREAD_INSTRUCTIONS in new and not isinstance(new[THREAD_INSTRUCTIONS], str):
                raise PolicyError("instructions must be text")
            own = thread_overrides(new)  # unknown keys, bad values: PolicyError
            conv = tx.thread()
            reported = conv.reported_context_window
            r = self._core.policies.resolve(conv.provider, conv.model, reported_window=reported, reported_by=conv.source_format if reported else None, thread=own)
            _ = r.threshold, r.target_tokens, r.retained_tail_tokens  # raise PolicyError if unusable
            if new != old:
                tx.set_thread_policy(new, operator=who)
                only_text = {k for k in set(old) | set(new) if old.get(k) != new.get(k)} == {THREAD_INSTRUCTIONS}
                tx.record_audit("instructions" if only_text else "policy", operator=who, display_name=self._core.display_name(display_name),
                                reason=reason, before=old, after=new)
        self._core.snapshots.invalidate(key)
        return self.thread_policy(key)

    def set_instructions(self, key: str, instructions: str | None, *, reason: str | None = None, display_name: str | None = None) -> ThreadPolicyView:
        """The thread's standing compaction instructions (None or "" removes them): every later
        compaction of the thread, automatic or manual, follows them unless given its own."""
        return self.set_thread_policy(key, {THREAD_INSTRUCTIONS: instructions}, reason=reason, display_name=display_name)

    def set_policy(self, data: Mapping[str, Any]) -> None:
        """Validate and store the store-wide policy (shared by every agent and inspector).

        Every (provider, model) it names, and the default, must resolve: a policy that cannot be
        used (e.g. a retained tail larger than the target) is refused before anything is stored."""
        policies = load_policies(self._core.store, data)
        for provider, model in [(None, None), *policies.overrides]:
            r = policies.resolve(provider, model)
            _ = r.threshold, r.target_tokens, r.retained_tail_tokens  # raise PolicyError if unusable
        self._core.store.put_setting(POLICY_SETTING, dict(data))
        self._core.policies = policies

    def audit(
        self, *, thread: str | None = None, operator: str | None = None, actions: Sequence[str] | None = None, after_id: int | None = None, limit: int = 200
    ) -> list[AuditEntry]:
        """The audit log oldest first, ``limit`` rows after ``after_id`` (keyset), filtered by
        thread key, operator (role / OS user or display name) and actions."""
        return _reverts.read_audit(self._core.store, thread=thread, operator=operator, actions=actions, after_id=after_id, limit=limit)

    def audit_operators(self) -> list[str]:
        """The operators the audit log names (the Audit list's filter)."""
        return _reverts.audit_operators(self._core.store)

    def access(self) -> dict[str, Any]:
        """Whether this store can be written: ``{"writable": bool, "reason": None | "role" |
        "forced" | "file" | "schema", "words": str | None, "operator": str}``."""
        self._core.store.check_role()
        reason = self._core.store.read_only_reason if self._core.store.read_only else (None if self._core.store.writable else "schema")
        words = None if reason is None else (_access.read_only_words(reason) if reason != "schema" else "read-only: the schema is newer than this program")
        return {"writable": reason is None, "reason": reason, "words": words, "operator": self._core.store.operator()}


__all__ = ["SteeringFacet"]
