"""A what-if hands the scratch meter the counts the source kept (engine.whatif.runs._remember_counts,
through ``TokenMeter.remember`` when the meter has it): the counts handed over are the meter's own,
and the run's figures are the same with and without them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.core.messages import Message
from engine.core.meter import TokenMeter
from engine.service import Service, open_service
from engine.whatif import run_sweep, run_whatif

from .conftest import POLICY
from .test_whatif import record, session


@pytest.fixture
def source(tmp_path: Path, new_key: Any) -> Any:
    svc = open_service(f"sqlite:///{tmp_path / 'src.db'}", workdir=tmp_path / "wd", policies=dict(POLICY), create=True)
    key = record(svc, new_key("src"), session())
    yield svc, key
    svc.close()


_REMEMBER = TokenMeter.remember


def test_kept_counts_are_the_meters_own_and_change_no_figure(source: tuple[Service, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc, key = source
    monkeypatch.delattr(TokenMeter, "remember", raising=False)
    plain = run_whatif(svc.store, key, {"threshold_ratio": "0.5"}, policies=svc.policies, scratch_root=str(tmp_path))
    plain_sweep = run_sweep(svc.store, key, "threshold_ratio", [0.6, 0.9], policies=svc.policies, scratch_root=str(tmp_path))
    handed: list[tuple[Message, int]] = []

    def remember(self: TokenMeter, messages: list[Message], counts: list[int]) -> None:
        handed.extend(zip(messages, counts))
        _REMEMBER(self, messages, counts)

    monkeypatch.setattr(TokenMeter, "remember", remember, raising=False)
    seeded = run_whatif(svc.store, key, {"threshold_ratio": "0.5"}, policies=svc.policies, scratch_root=str(tmp_path))
    seeded_sweep = run_sweep(svc.store, key, "threshold_ratio", [0.6, 0.9], policies=svc.policies, scratch_root=str(tmp_path))
    assert handed, "the source keeps counts: they were handed over"
    fresh = TokenMeter("cl100k_base")  # the meter of the source route's model "m" (cl100k, approximate)
    for m, n in handed:
        assert fresh.count_message(m) == n
    assert seeded.candidate.to_json(points=True) | {"duration_ms": 0} == plain.candidate.to_json(points=True) | {"duration_ms": 0}
    strip = [r.to_json(points=True) | {"duration_ms": 0} for r in seeded_sweep.runs]
    assert strip == [r.to_json(points=True) | {"duration_ms": 0} for r in plain_sweep.runs]
