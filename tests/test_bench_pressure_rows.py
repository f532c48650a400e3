"""The pressure check row of ``benchmarks/incremental.py`` compares like with like: ours after one
appended message beside the peers timed right after the same append, ours with nothing new beside
the peers' loop of checks, and ours after +1 beside the peers' loop too; every ratio says whether
it is a win, a loss or a tie, a losing one included. No timing is measured here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]

import incremental  # noqa: E402


def result(**peers: Any) -> dict[str, Any]:
    return {"trace": "coding-10k", "window": 8192, "replay_s": 0.2, "messages_on_surface": 9, "incremental_wired": True,
            "today": {"plus_one_ms": 1.5, "unchanged_ms": 1.5}, "incremental": {"plus_one_ms": 0.05, "unchanged_ms": 0.006, "tokens": 3058},
            **peers}


def test_each_pair_is_timed_alike_and_every_ratio_says_win_or_lose() -> None:
    row = incremental.pressure_row(result(peers={"chars/4": 0.036, "langchain": 0.012}, peers_after_append={"chars/4": 0.14, "langchain": 0.05}))
    name, value, notes = row
    assert "coding-10k" in name
    assert value == "after +1 message: ours 0.05 · chars/4 0.14 · LangChain 0.05 ms; nothing new: ours 0.006 · chars/4 0.036 · LangChain 0.012 ms"
    # after +1 against after the same append: a win over chars/4, a tie with LangChain
    assert "ours ÷ chars/4 0.357× (win), ÷ LangChain 1× (tie)" in notes
    # nothing new against the peers' loop
    assert "ours ÷ chars/4 0.167× (win), ÷ LangChain 0.5× (win)" in notes
    # ours after +1 against the peers' loop: both losses are stated
    assert "÷ chars/4 1.39× (lose), ÷ LangChain 4.17× (lose)" in notes
    assert "3,058 tokens" in notes


def test_without_the_peers_the_row_says_so() -> None:
    name, value, notes = incremental.pressure_row(result(peers={"chars/4": None, "langchain": None}, peers_after_append={"chars/4": None, "langchain": None}))
    assert value == "after +1 message: ours 0.05 ms · nothing new: ours 0.006 ms" and notes.startswith("peers not installed")
    assert incremental.versus(1.0, None) == "n/a" and incremental.versus(1.0, 1.01) == "0.99× (tie)" and incremental.versus(300, 1) == "300× (lose)"


def test_the_losses_are_listed_with_their_reason_and_a_clean_run_lists_none() -> None:
    losing = result(peers={"chars/4": 0.036, "langchain": 0.012}, peers_after_append={"chars/4": 0.14, "langchain": 0.04})
    winning = result(peers={"chars/4": 0.5, "langchain": 0.3}, peers_after_append={"chars/4": 0.6, "langchain": 0.4})
    [bullet] = incremental.pressure_losses({"pressure": [losing, winning]})
    assert "timed alike, we lose on coding-10k after +1 to LangChain (1.25×)." in bullet
    assert "loses on coding-10k to chars/4 (1.39×), coding-10k to LangChain (4.17×)." in bullet
    assert "database" in bullet
    assert incremental.pressure_losses({"pressure": [winning]}) == []
