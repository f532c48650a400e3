"""A summary smaller than what it replaces can still make the request larger (its framing, and a long
current request the summary must carry verbatim while the retained tail keeps it too). Found on the
Kilo Code fixture compacted by hand at half its size: "completed", 418 -> 467 tokens. Such a summary
is rejected (``not_smaller``, the sizes in the event) and the thread is left as it was."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.core.errors import CannotCompact
from engine.service import open_service

KILO = next((Path(__file__).resolve().parents[1] / "fixtures" / "sessions" / "kilo").rglob("api_conversation_history.json"))


def test_a_compaction_that_would_grow_the_request_is_rejected_and_changes_nothing(tmp_path: Path) -> None:
    svc = open_service(f"sqlite:///{tmp_path / 'k.db'}", workdir=tmp_path / "wd", policies={"context_window": 128_000}, create=True)
    try:
        (rep,) = svc.imports.import_file(KILO)
        svc.runs.close_dangling_calls(rep.thread)
        before = svc.steps.measure(rep.thread).tokens
        window = max(1024, math.ceil(before / 1.6))  # the threshold at about half the session
        svc.steering.set_policy({"context_window": window, "default": {"summary_max_tokens": 512}})
        state = svc.reads.compaction_state(rep.thread)
        with pytest.raises(CannotCompact) as caught:
            svc.compaction.compact(rep.thread)
        assert caught.value.code == "summary_rejected" and caught.value.reason == "not_smaller"
        assert svc.reads.compaction_state(rep.thread) == state and svc.steps.measure(rep.thread).tokens == before
        (event,) = [e for e in svc.reads.events(rep.thread, kinds=["summary_rejected"])]
        assert event.data["reason"] == "not_smaller" and "not fewer than the" in event.data["error_message"]
    finally:
        svc.close()
