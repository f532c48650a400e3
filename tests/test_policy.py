"""CompactionPolicy: §7 defaults, exact limits, validation, per-model overrides and window resolution."""

from __future__ import annotations

import math

import pytest

from engine.core.errors import EngineError
from engine.core.policy import (
    HINT_RATIO,
    CompactionPolicy,
    PolicyError,
    PolicySet,
    ResolvedPolicy,
    known_window,
)


def test_defaults_are_those_of_section_7() -> None:
    p = CompactionPolicy()
    assert (p.threshold_ratio, p.retained_tail_ratio, HINT_RATIO) == (0.8, 0.16, 0.85)
    assert (p.loop_recent_tool_rounds, p.loop_max_compaction_rounds) == (5, 5)
    assert (p.summary_max_tokens, p.summary_retries, p.max_overflow_retries, p.auto) == (8192, 1, 1, True)
    assert p.context_window is None and p.threshold_tokens is None


def test_limits_are_exact_whole_tokens() -> None:
    p = CompactionPolicy()
    assert p.threshold(128000) == 102400
    assert p.retained_tail_tokens(128000) == 20480
    assert p.hint_tokens(128000) == 87040  # 0.85 × 102400
    assert p.target_tokens(128000) == 51200  # half the threshold
    # a ratio whose float product falls just below the integer must not lose a token
    assert math.floor(0.29 * 100) == 28  # the float trap: 0.29 * 100 == 28.999999999999996
    assert CompactionPolicy(threshold_ratio=0.29).threshold(100) == 29
    assert CompactionPolicy(threshold_ratio=0.72).threshold(65536) == math.floor(65536 * 72 / 100)


def test_hint_line_84_9_percent_no_85_0_percent_yes() -> None:
    p = CompactionPolicy()
    threshold = p.threshold(128000)
    hint = p.hint_tokens(128000)
    assert math.floor(threshold * 0.849) < hint
    assert math.ceil(threshold * 0.850) >= hint
    assert threshold * 0.850 == hint  # tokens at exactly 85.0% show the hint


def test_absolute_threshold_replaces_the_ratio() -> None:
    p = CompactionPolicy(threshold_tokens=50000)
    assert p.threshold(128000) == 50000
    assert p.target_tokens(128000) == 25000
    with pytest.raises(PolicyError, match=r"threshold_tokens \(50000\) exceeds the context window \(32000\)"):
        p.threshold(32000)


def test_ratio_one_is_allowed_and_ints_become_floats() -> None:
    p = CompactionPolicy(threshold_ratio=1)
    assert p.threshold_ratio == 1.0 and isinstance(p.threshold_ratio, float)
    assert p.threshold(1000) == 1000


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("threshold_ratio", 0, "threshold_ratio must be in (0, 1], got 0"),
        ("threshold_ratio", 1.5, "threshold_ratio must be in (0, 1], got 1.5"),
        ("retained_tail_ratio", -0.1, "retained_tail_ratio must be in (0, 1], got -0.1"),
        ("retained_tail_ratio", float("nan"), "retained_tail_ratio must be in (0, 1], got nan"),
        ("threshold_ratio", True, "threshold_ratio must be a number in (0, 1], got True"),
        ("threshold_ratio", "0.8", "threshold_ratio must be a number in (0, 1], got '0.8'"),
        ("context_window", 0, "context_window must be >= 1, got 0"),
        ("summary_max_tokens", -5, "summary_max_tokens must be >= 1, got -5"),
        ("summary_max_tokens", True, "summary_max_tokens must be a whole number, got True"),
        ("loop_recent_tool_rounds", 2.5, "loop_recent_tool_rounds must be a whole number, got 2.5"),
        ("max_overflow_retries", -1, "max_overflow_retries must be >= 0, got -1"),
        ("loop_max_compaction_rounds", 0, "loop_max_compaction_rounds must be >= 1, got 0"),
        ("auto", 1, "auto must be true or false, got 1"),
        ("preview_tokens", 2000, "preview_tokens (2000) must be smaller than tool_result_limit_tokens (2000)"),
    ],
)
def test_nonsense_is_rejected_with_a_one_line_message(field: str, value: object, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        CompactionPolicy(**{field: value})
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_policy_error_is_a_typed_engine_error() -> None:
    with pytest.raises(ValueError) as info:
        CompactionPolicy(threshold_ratio=2)
    assert isinstance(info.value, EngineError) and info.value.code == "invalid_policy"


def test_zero_overflow_retries_disables_recovery_but_is_valid() -> None:
    assert CompactionPolicy(max_overflow_retries=0, loop_recent_tool_rounds=0).max_overflow_retries == 0


def test_window_must_be_a_positive_int() -> None:
    with pytest.raises(PolicyError, match="context window must be a positive whole number, got 0"):
        CompactionPolicy().threshold(0)
    with pytest.raises(PolicyError, match="got True"):
        CompactionPolicy().retained_tail_tokens(True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o", 128000),
        ("gpt-4o-mini-2024-07-18", 128000),
        ("GPT-4.1-mini", 1047576),
        ("gpt-4", 8192),
        ("gpt-4-1106-preview", 128000),  # was 8,192 through a "gpt-4" family prefix
        ("gpt-4-turbo-2024-04-09", 128000),
        ("openai/gpt-4o", 128000),
        ("claude-3-5-sonnet-latest", 200000),
        ("llama3.1:8b", 131072),
        ("llama3:8b", 8192),
        ("gpt-4.5-preview", None),  # never a prefix match: unknown rather than wrong
        ("gpt-4omni", None),
        ("gpt-9.5", None),
        ("mystery-model", None),
        (None, None),
    ],
)
def test_known_model_windows(model: str | None, window: int | None) -> None:
    assert known_window(model) == window


def test_window_sources_override_then_catalogue_then_assumed() -> None:
    policies = PolicySet(
        overrides={("openai", "gpt-4o"): {"context_window": 64000, "threshold_ratio": 0.72}},
        default_window=32000,
    )
    override = policies.resolve("openai", "gpt-4o")
    assert (override.context_window, override.window_source, override.threshold) == (64000, "override", 46080)
    assert override.policy.threshold_ratio == 0.72 and override.policy.context_window == 64000
    assert override.window_detail == "configured for openai/gpt-4o" and not override.window_assumed

    known = policies.resolve("azure", "gpt-4o")  # override is per (provider, model) pair
    assert (known.context_window, known.window_source, known.policy.threshold_ratio) == (128000, "catalog", 0.8)
    assert known.window_detail and "gpt-4o" in known.window_detail and not known.window_assumed

    configured = policies.resolve("local", "my-finetune")
    assert (configured.context_window, configured.window_source, configured.window_assumed) == (32000, "assumed", True)
    assert configured.window_detail == "my-finetune is not in the catalogue: configured fallback window"
    assert configured.threshold == 25600 and configured.retained_tail_tokens == 5120
    assert configured.hint_tokens == 21760 and configured.target_tokens == 12800


def test_a_reported_window_wins_over_the_catalogue_but_not_over_an_override() -> None:
    policies = PolicySet(overrides={("openai", "gpt-4o"): {"context_window": 64000}}, default_window=128000)
    codex = policies.resolve("openai", "gpt-5.5", reported_window=258400, reported_by="codex rollout")
    assert (codex.context_window, codex.window_source, codex.window_detail) == (258400, "reported", "reported by codex rollout")
    assert codex.threshold == 206720 and codex.policy.context_window == 258400
    unknown = policies.resolve("local", "my-finetune", reported_window=16000)
    assert (unknown.context_window, unknown.window_source, unknown.window_detail) == (16000, "reported", "reported by the source")
    pinned = policies.resolve("openai", "gpt-4o", reported_window=128000)
    assert (pinned.context_window, pinned.window_source) == (64000, "override")
    with pytest.raises(PolicyError, match="context window must be a positive whole number, got 0"):
        policies.resolve("openai", "gpt-5.5", reported_window=0)


def test_an_unknown_newer_model_is_assumed_not_given_an_older_familys_window() -> None:
    policies = PolicySet(default_window=128000)
    for model in ("gpt-9.5", "claude-opus-4-99"):
        r = policies.resolve("openai", model)
        assert (r.context_window, r.window_source) == (128000, "assumed")


def test_resolved_policy_rejects_an_unknown_window_source() -> None:
    with pytest.raises(PolicyError, match="unknown window source 'known_model'"):
        ResolvedPolicy(CompactionPolicy(context_window=1000), 1000, None, None, "known_model")


def test_no_window_anywhere_is_a_clear_error() -> None:
    with pytest.raises(PolicyError, match="no context window known for local/my-finetune"):
        PolicySet().resolve("local", "my-finetune")


def test_retained_tail_is_capped_at_half_the_target() -> None:
    policies = PolicySet(overrides={("p", "m"): {"threshold_tokens": 1000}}, default_window=100000)
    small = policies.resolve("p", "m")
    assert (small.target_tokens, small.retained_tail_tokens) == (500, 250)  # not 16000: room to compact
    assert policies.resolve("q", "n").retained_tail_tokens == 16000  # the default is not capped


def test_from_mapping_builds_defaults_overrides_and_window() -> None:
    policies = PolicySet.from_mapping(
        {
            "context_window": 32768,
            "default": {"threshold_ratio": 0.72, "summary_max_tokens": 4096},
            "models": [
                {"provider": "deepseek", "model": "deepseek-chat", "context_window": 65536, "auto": False},
                {"provider": "ollama", "model": "qwen2.5:7b", "loop_recent_tool_rounds": 3},
            ],
        }
    )
    ds = policies.resolve("deepseek", "deepseek-chat")
    assert (ds.context_window, ds.policy.auto, ds.policy.threshold_ratio, ds.policy.summary_max_tokens) == (65536, False, 0.72, 4096)
    qwen = policies.resolve("ollama", "qwen2.5:7b")
    assert (qwen.context_window, qwen.window_source, qwen.policy.loop_recent_tool_rounds) == (32768, "catalog", 3)
    other = policies.resolve(None, None)
    assert (other.context_window, other.policy.loop_recent_tool_rounds) == (32768, 5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"contextwindow": 1000}, "unknown configuration key(s) 'contextwindow'"),
        ({"default": {"treshold_ratio": 0.5}}, "unknown policy key(s) 'treshold_ratio'"),
        ({"default": {"context_window": 1000}}, "set the configured window with context_window, not default.context_window"),
        ({"default": [1]}, "'default' must be a mapping, got list"),
        ({"models": {"provider": "a"}}, "'models' must be a list, got dict"),
        ({"models": [{"model": "m"}]}, "models[0] needs non-empty 'provider' and 'model' names"),
        ({"models": [{"provider": "a", "model": "m", "zzz": 1}]}, "a/m: unknown policy key(s) 'zzz'"),
        ({"models": [{"provider": "a", "model": "m", "threshold_ratio": 0}]}, "a/m: threshold_ratio must be in (0, 1], got 0"),
        (
            {"models": [{"provider": "a", "model": "m"}, {"provider": "a", "model": "m"}]},
            "models[1]: a/m is configured twice",
        ),
        ({"context_window": -1}, "context window must be a positive whole number, got -1"),
        ({"context_window": True}, "context window must be a positive whole number, got True"),
        ([], "policy configuration must be a mapping, got list"),
    ],
)
def test_from_mapping_rejects_bad_configuration(data: object, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        PolicySet.from_mapping(data)  # type: ignore[arg-type]
    assert str(info.value).startswith(message)


def test_policies_are_frozen() -> None:
    p = CompactionPolicy()
    with pytest.raises(AttributeError):
        p.threshold_ratio = 0.5  # type: ignore[misc]
    policies = PolicySet(overrides={("a", "m"): {"auto": False}})
    with pytest.raises(TypeError):
        policies.overrides[("a", "m")]["auto"] = True  # type: ignore[index]


def test_a_recorded_threshold_replaces_only_an_assumed_windows() -> None:
    """``recorded_threshold``: the threshold a thread's last request recorded, when this process
    would only assume the window, the request is ours on the thread's route and the thread has no
    policy of its own; None otherwise (the policy's threshold stands)."""
    from datetime import UTC, datetime

    from engine.core.policy import recorded_threshold
    from engine.core.views import ModelRequest

    def request(threshold: int | None = 12_800, *, origin: str = "engine", model: str = "sim-model") -> ModelRequest:
        return ModelRequest(7, 1, 1, 31, "openai", model, 12_643, threshold, 12_556, 12, "ok", None, None, datetime.now(UTC),
                            origin=origin)  # type: ignore[arg-type]

    policies = PolicySet(default_window=128_000)
    assumed = policies.resolve("openai", "sim-model")
    assert assumed.window_assumed and assumed.threshold == 102_400
    assert recorded_threshold(assumed, request(), "openai", "sim-model") == 12_800
    assert recorded_threshold(assumed, request(102_400), "openai", "sim-model") is None  # the same figure: nothing to replace
    assert recorded_threshold(assumed, request(None), "openai", "sim-model") is None
    assert recorded_threshold(assumed, request(origin="imported"), "openai", "sim-model") is None
    assert recorded_threshold(assumed, request(model="other"), "openai", "sim-model") is None  # another route's threshold
    assert recorded_threshold(assumed, None, "openai", "sim-model") is None
    assert recorded_threshold(assumed, request(), "openai", "sim-model", {"threshold_ratio": 0.5}) is None  # the thread's own policy
    known = PolicySet(default_window=128_000, overrides={("openai", "sim-model"): {"context_window": 32_000}}).resolve("openai", "sim-model")
    assert recorded_threshold(known, request(), "openai", "sim-model") is None  # a window this process knows stands
