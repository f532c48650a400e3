"""One-call writes for tests: each opens the store's write door (:meth:`Store.locked`) for one
short transaction and makes one :class:`engine.store.door.Locked` call.

The engine itself has no such wrappers (issue 24: the Store lost its use-case wrappers; the
service's facets open the door themselves). Tests that seed or poke a bare ``Store`` use these so
that a one-line setup stays one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select

from engine.core.errors import EngineError
from engine.core.events import EventKind
from engine.core.messages import Message
from engine.store import Store
from engine.store.models import ModelRequestRow


def append_message(store: Store, key: str, message: Message, *, run_id: int | None = None) -> int:
    with store.locked(key) as tx:
        return tx.append_message(message, run_id=run_id)


def append_messages(store: Store, key: str, messages: Sequence[Message], *, run_id: int | None = None) -> list[int]:
    with store.locked(key) as tx:
        return tx.append_messages(messages, run_id=run_id)


def bulk_append(store: Store, key: str, messages: Iterable[Message], *, run_id: int | None = None) -> int:
    with store.locked(key) as tx:
        return tx.bulk_append(messages, run_id=run_id)


def set_route(store: Store, key: str, *, provider: str, model: str) -> None:
    with store.locked(key) as tx:
        tx.set_route(provider=provider, model=model)


def queue_request(store: Store, key: str, content: str) -> int:
    with store.locked(key) as tx:
        return tx.queue_request(content)


def start_run(store: Store, key: str, *, request_id: int | None = None) -> int:
    with store.locked(key) as tx:
        return tx.start_run(request_id=request_id)


def finish_run(store: Store, key: str, run_id: int, *, failed: bool = False, error_code: str | None = None, error_message: str | None = None) -> None:
    with store.locked(key) as tx:
        tx.set_run_status(run_id, "failed" if failed else "completed", error_code=error_code, error_message=error_message)


def interrupt_run(store: Store, key: str, run_id: int) -> None:
    with store.locked(key) as tx:
        tx.set_run_status(run_id, "waiting_for_user")


def resume_run(store: Store, key: str, run_id: int) -> None:
    with store.locked(key) as tx:
        tx.set_run_status(run_id, "running")


def cancel_run(store: Store, key: str, run_id: int) -> int:
    with store.locked(key) as tx:
        return tx.settle_run(run_id, "cancelled")


def record_model_request(store: Store, key: str, *, provider: str, model: str, run_id: int | None = None, step: int = 0,
                         estimated_tokens: int | None = None, threshold: int | None = None) -> int:
    with store.locked(key) as tx:
        return tx.record_model_request(provider=provider, model=model, run_id=run_id, step=step, estimated_tokens=estimated_tokens, threshold=threshold)


def complete_model_request(store: Store, request_id: int, *, outcome: str, reported_prompt_tokens: int | None = None,
                           reported_completion_tokens: int | None = None, error_code: str | None = None, error_message: str | None = None) -> None:
    """Under the lock of the thread the request belongs to (``not_found`` for an unknown id)."""
    with store.engine.connect() as conn:
        conversation_id = conn.execute(select(ModelRequestRow.conversation_id).where(ModelRequestRow.id == request_id)).scalar()
    if conversation_id is None:
        raise EngineError(f"no model request {request_id}", code="not_found")
    with store.locked(int(conversation_id)) as tx:
        tx.complete_model_request(request_id, outcome=outcome, reported_prompt_tokens=reported_prompt_tokens,
                                  reported_completion_tokens=reported_completion_tokens, error_code=error_code, error_message=error_message)


def add_event(store: Store, key: str, kind: EventKind | str, data: Mapping[str, Any], *, trigger: str | None = None, run_id: int | None = None) -> int:
    with store.locked(key) as tx:
        return tx.add_event(kind, data, trigger=trigger, run_id=run_id)
