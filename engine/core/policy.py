"""Compaction policy: the numbers that drive compaction, per (provider, model) pair.

Pure data and arithmetic, no I/O. The defaults are those of the compaction model (§7). A
:class:`PolicySet` holds the default policy, per-(provider, model) overrides and the configured
fallback window; :meth:`PolicySet.resolve` gives the :class:`ResolvedPolicy` for one model with its
effective context window and where it came from (``window_source``): the pair's configured window
("override"), a window the source reported ("reported"), the model catalogue of
:mod:`engine.core.model_windows` ("catalog"), else the configured ``context_window`` ("assumed").

Arithmetic is exact (decimal ratios through :class:`fractions.Fraction`), so 0.8 × 128000 is 102400
and never 102399 through float rounding. Token limits are whole tokens:

- threshold = ⌊threshold_ratio × window⌋ (or ``threshold_tokens``); pressure when tokens >= threshold;
- hint line = ⌈HINT_RATIO × threshold⌉; the hint shows when tokens >= hint line (display only);
- target = ⌊threshold / 2⌋: summarization aims at half the threshold, so one compaction buys as much
  headroom as it keeps (40% of the window by default) and summarizer calls stay rare; the newest
  history within the retained tail always stays verbatim. A fixed rule, not a second configurable
  ratio (benchmarks: aiming just below the hint line cost ~7× the summarizer calls of a peer);
- retained tail = ⌊retained_tail_ratio × window⌋, capped at half the target (a small absolute
  threshold cannot make compaction impossible).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from .errors import EngineError
from .model_windows import lookup_window

if TYPE_CHECKING:
    from .views import ModelRequest

#: the hint line as a fraction of the threshold; fixed, display only, never triggers anything
HINT_RATIO = 0.85


class PolicyError(EngineError, ValueError):
    """A compaction policy or policy configuration that makes no sense (one-line message)."""

    code = "invalid_policy"


@lru_cache(maxsize=256)  # twice per pressure check; Fraction(repr(x)) is not free
def _exact(ratio: float) -> Fraction:
    """The decimal the user wrote (0.8 → 4/5), not the binary float nearest to it."""
    return Fraction(repr(float(ratio)))


_RATIO_FIELDS = ("threshold_ratio", "retained_tail_ratio")
_POSITIVE_INT_FIELDS = (
    "context_window",
    "threshold_tokens",
    "loop_max_compaction_rounds",
    "summary_max_tokens",
    "tool_result_limit_tokens",
    "preview_tokens",
)
_NON_NEGATIVE_INT_FIELDS = ("loop_recent_tool_rounds", "summary_retries", "max_overflow_retries")
_OPTIONAL_FIELDS = ("context_window", "threshold_tokens")


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """The knobs of compaction (§7 defaults). ``context_window`` ``None`` means "not known here"."""

    context_window: int | None = None
    threshold_ratio: float = 0.8
    threshold_tokens: int | None = None
    retained_tail_ratio: float = 0.16
    loop_recent_tool_rounds: int = 5
    loop_max_compaction_rounds: int = 5
    summary_max_tokens: int = 8192
    summary_retries: int = 1
    max_overflow_retries: int = 1
    auto: bool = True
    tool_result_limit_tokens: int = 2000
    preview_tokens: int = 600

    def __post_init__(self) -> None:
        for name in _RATIO_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PolicyError(f"{name} must be a number in (0, 1], got {value!r}")
            if not (0 < value <= 1):  # also rejects NaN
                raise PolicyError(f"{name} must be in (0, 1], got {value!r}")
            object.__setattr__(self, name, float(value))
        for name in _POSITIVE_INT_FIELDS + _NON_NEGATIVE_INT_FIELDS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_FIELDS:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise PolicyError(f"{name} must be a whole number, got {value!r}")
            low = 1 if name in _POSITIVE_INT_FIELDS else 0
            if value < low:
                raise PolicyError(f"{name} must be >= {low}, got {value!r}")
        if not isinstance(self.auto, bool):
            raise PolicyError(f"auto must be true or false, got {self.auto!r}")
        if self.preview_tokens >= self.tool_result_limit_tokens:
            raise PolicyError(
                f"preview_tokens ({self.preview_tokens}) must be smaller than "
                f"tool_result_limit_tokens ({self.tool_result_limit_tokens})"
            )

    # -- limits for a given window ---------------------------------------------------------------
    def threshold(self, window: int) -> int:
        """The single pressure threshold in tokens; compaction triggers when tokens >= it."""
        _check_window(window)
        if self.threshold_tokens is not None:
            if self.threshold_tokens > window:
                raise PolicyError(f"threshold_tokens ({self.threshold_tokens}) exceeds the context window ({window})")
            return self.threshold_tokens
        return max(1, math.floor(_exact(self.threshold_ratio) * window))

    def hint_tokens(self, window: int) -> int:
        """The hint line: the manual-compaction hint shows when tokens >= it (never triggers)."""
        return max(1, math.ceil(_exact(HINT_RATIO) * self.threshold(window)))

    def target_tokens(self, window: int) -> int:
        """Where summarization aims: half the threshold (see the module docstring)."""
        return max(1, self.threshold(window) // 2)

    def retained_tail_tokens(self, window: int) -> int:
        """How much of the newest history summarization keeps verbatim: ⌊ratio × window⌋, but at
        most half the target, so a compaction always has room to reach its target."""
        _check_window(window)
        return min(math.floor(_exact(self.retained_tail_ratio) * window), self.target_tokens(window) // 2)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "CompactionPolicy":
        """A copy with ``overrides`` applied; unknown keys raise :class:`PolicyError`."""
        unknown = sorted(set(overrides) - _FIELD_NAMES)
        if unknown:
            raise PolicyError(f"unknown policy key(s) {', '.join(map(repr, unknown))} (known: {', '.join(sorted(_FIELD_NAMES))})")
        return replace(self, **dict(overrides))


_FIELD_NAMES: frozenset[str] = frozenset(f.name for f in fields(CompactionPolicy))


# -- the summary budget rule (docs/compaction.md, "Summary budget") ----------------------------------
#: base of the summary budget: a sixteenth of the window (8,192 at 131,072; 2,048 at 32,768; 65,536 at 1M)
SUMMARY_WINDOW_SHARE = Fraction(1, 16)
#: raised by this many tokens per distinct identifier the summary has to carry (the span's and the
#: previous summary's): an id costs ~4 (``doc-123456``) to ~11 (a URL) tokens verbatim, ~8 on average, and its
#: line's label (``- (#12) read_file: ``) is shared by the ids a message showed
SUMMARY_TOKENS_PER_IDENTIFIER = 12
#: the floor: below this a summary cannot hold a request and a few lines
SUMMARY_MIN_TOKENS = 256
#: the ceiling: a summary never takes more than 3/5 of the target, so at least 2/5 of it stays verbatim history
#: (measured: half the target kept 86.9 % of the identifiers on research-1M, 3/5 92.6 %, with the same 4 calls)
SUMMARY_MAX_SHARE = Fraction(3, 5)


def summary_total_tokens(window: int, target: int, identifiers: int = 0, room: int | None = None) -> int:
    """The summary budget rule: ``⌊window / 16⌋ + 12 × identifiers``, at most 3/5 of the ``target``
    and at most ``room`` (what keeps the envelope after the compaction at or under the target: the
    target minus everything that stays), and at least :data:`SUMMARY_MIN_TOKENS`. Pure and bounded:
    the same window, target, density and room give the same budget, whatever the trace."""
    _check_window(window)
    if identifiers < 0:
        raise PolicyError(f"identifiers must be >= 0, got {identifiers!r}")
    wanted = math.floor(SUMMARY_WINDOW_SHARE * window) + SUMMARY_TOKENS_PER_IDENTIFIER * identifiers
    budget = min(wanted, math.floor(SUMMARY_MAX_SHARE * target))
    if room is not None:
        budget = min(budget, room)
    return max(SUMMARY_MIN_TOKENS, budget)


def _check_window(window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise PolicyError(f"context window must be a positive whole number, got {window!r}")


# -- known model windows ("model policy" defaults) ---------------------------------------------------
#: where a resolved window came from, strongest first
WINDOW_SOURCES: tuple[str, ...] = ("thread", "override", "reported", "catalog", "assumed")
#: the key of a thread's policy that is not a policy number: its standing compaction instructions
THREAD_INSTRUCTIONS = "instructions"
#: where an effective value comes from (:meth:`PolicySet.origins`), strongest first
VALUE_ORIGINS: tuple[str, ...] = ("thread", "model route", "store default")


def thread_overrides(thread: Mapping[str, Any] | None) -> dict[str, Any]:
    """The policy numbers of a thread's own policy (its ``instructions`` left out), checked:
    unknown keys or bad values raise :class:`PolicyError`."""
    values = {k: v for k, v in (thread or {}).items() if k != THREAD_INSTRUCTIONS}
    CompactionPolicy().with_overrides(values)
    return values


def known_window(model: str | None, provider: str | None = None) -> int | None:
    """The catalogued prompt window of ``model`` (see :mod:`engine.core.model_windows`), else ``None``."""
    match = lookup_window(model, provider)
    return match.window if match else None


# -- resolution ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ResolvedPolicy:
    """The effective policy for one (provider, model) with its effective context window."""

    policy: CompactionPolicy
    context_window: int
    provider: str | None
    model: str | None
    #: where the window came from (:data:`WINDOW_SOURCES`): "override" (configured for this pair),
    #: "reported" (by the source or a provider error), "catalog" (:mod:`engine.core.model_windows`) or
    #: "assumed" (the model is unknown: the configured fallback window)
    window_source: str
    #: how the window was found, one line for status and the GUI (catalogue entry, reporter, ...)
    window_detail: str | None = None

    def __post_init__(self) -> None:
        _check_window(self.context_window)
        if self.window_source not in WINDOW_SOURCES:
            raise PolicyError(f"unknown window source {self.window_source!r} (known: {', '.join(WINDOW_SOURCES)})")

    @property
    def window_assumed(self) -> bool:
        """True when nothing knows this model's window: status and the GUI show it as assumed."""
        return self.window_source == "assumed"

    @property
    def threshold(self) -> int:
        return self.policy.threshold(self.context_window)

    @property
    def hint_tokens(self) -> int:
        return self.policy.hint_tokens(self.context_window)

    @property
    def target_tokens(self) -> int:
        return self.policy.target_tokens(self.context_window)

    @property
    def retained_tail_tokens(self) -> int:
        return self.policy.retained_tail_tokens(self.context_window)


def recorded_threshold(policy: ResolvedPolicy | None, last: ModelRequest | None, provider: str | None, model: str | None,
                       thread_policy: Any = None) -> int | None:
    """The threshold to measure a thread against instead of ``policy``'s, or None (``policy``'s).

    When this process knows no window for the thread's model (``policy.window_assumed``: its own
    configured fallback, a guess) and the thread has no policy of its own, the threshold its last
    completed model request recorded, sent by our engine on the same route, is evidence of the
    policy the agent that wrote the thread ran under (an adapter given ``policies=`` another
    process cannot see): that threshold is the one its next step compacts at, the one its own
    measurements stored for the thread list and the one the pressure chart draws. Only when it
    differs from the assumed one (the same figure keeps the assumed window as it was)."""
    if policy is None or not policy.window_assumed or thread_overrides(thread_policy) or last is None:
        return None
    if last.origin != "engine" or not last.threshold or last.threshold <= 0 or (last.provider, last.model) != (provider, model):
        return None
    return None if last.threshold == policy.threshold else last.threshold


_MAPPING_KEYS = frozenset({"default", "models", "context_window"})
_MODEL_ENTRY_KEYS = frozenset({"provider", "model"})


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The default policy, per-(provider, model) overrides and the configured fallback window."""

    default: CompactionPolicy = CompactionPolicy()
    overrides: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    default_window: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.default, CompactionPolicy):
            raise PolicyError(f"default must be a CompactionPolicy, got {type(self.default).__name__}")
        if self.default.context_window is not None:
            raise PolicyError("set the configured window with context_window, not default.context_window")
        if self.default_window is not None:
            _check_window(self.default_window)
        frozen: dict[tuple[str, str], Mapping[str, Any]] = {}
        for key, values in self.overrides.items():
            if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) and k for k in key)):
                raise PolicyError(f"override key must be a (provider, model) pair of names, got {key!r}")
            if not isinstance(values, Mapping):
                raise PolicyError(f"override for {key[0]}/{key[1]} must be a mapping, got {type(values).__name__}")
            try:
                self.default.with_overrides(values)  # validate eagerly
            except PolicyError as exc:
                raise PolicyError(f"{key[0]}/{key[1]}: {exc}") from None
            frozen[key] = MappingProxyType(dict(values))
        object.__setattr__(self, "overrides", MappingProxyType(frozen))

    def resolve(
        self,
        provider: str | None,
        model: str | None,
        *,
        reported_window: int | None = None,
        reported_by: str | None = None,
        thread: Mapping[str, Any] | None = None,
    ) -> ResolvedPolicy:
        """The effective policy and window for a (provider, model) pair; ``thread``: the thread's
        own policy (``Snapshot.thread_policy``), applied over the pair's, its ``context_window``
        first of all windows ("thread").

        Window, first known wins: the pair's configured ``context_window`` ("override"), a window
        the source reported (``reported_window``: e.g. a Codex rollout's ``model_context_window``
        or a provider error's "maximum context length"; ``reported_by`` names the reporter),
        the model catalogue ("catalog"), the configured fallback ``context_window`` ("assumed").
        """
        override = self.overrides.get((provider, model), {}) if provider and model else {}
        policy = self.default.with_overrides(override)
        detail: str | None = None
        own = thread_overrides(thread) if thread else {}
        if own:
            policy = policy.with_overrides(own)
        if own.get("context_window") is not None:
            window, source = own["context_window"], "thread"
            detail = "set for this thread"
        elif policy.context_window is not None:
            window, source = policy.context_window, "override"
            detail = f"configured for {provider}/{model}"
        elif reported_window is not None:
            _check_window(reported_window)
            window, source = reported_window, "reported"
            detail = f"reported by {reported_by}" if reported_by else "reported by the source"
        elif (match := lookup_window(model, provider)) is not None:
            window, source, detail = match.window, "catalog", match.detail
        elif self.default_window is not None:
            window, source = self.default_window, "assumed"
            detail = f"{model or 'the model'} is not in the catalogue: configured fallback window"
        else:
            raise PolicyError(f"no context window known for {provider}/{model}: set context_window in the configuration")
        return ResolvedPolicy(replace(policy, context_window=window), window, provider, model, source, detail)

    def origins(self, provider: str | None, model: str | None, thread: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Where each policy value for this thread comes from (:data:`VALUE_ORIGINS`): set for the
        thread, for its model route (provider, model), or the store's default (the ``policy``
        setting, else the built-in defaults). ``context_window`` is described by
        ``ResolvedPolicy.window_source``."""
        override = self.overrides.get((provider, model), {}) if provider and model else {}
        own = thread_overrides(thread) if thread else {}
        return {name: "thread" if name in own else "model route" if name in override else "store default" for name in sorted(_FIELD_NAMES)}

    def resolve_known(
        self,
        provider: str | None,
        model: str | None,
        *,
        reported_window: int | None = None,
        reported_by: str | None = None,
        thread: Mapping[str, Any] | None = None,
    ) -> ResolvedPolicy | None:
        """:meth:`resolve`, but None where it would only *assume* a window (the configured fallback
        ``context_window``). For an imported session: the fallback is this database's guess for
        its own threads, never a fact about another tool's session, so its window is unknown
        (``PressureStatus.state == "window_unknown"``) rather than a toy window's alarm."""
        try:
            resolved = self.resolve(provider, model, reported_window=reported_window, reported_by=reported_by, thread=thread)
        except PolicyError:
            if self.default_window is None:
                return None  # no fallback configured either: nothing knows this window
            raise
        return None if resolved.window_assumed else resolved

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "PolicySet":
        """Build from JSON/TOML-like data: ``{"context_window": int, "default": {...},
        "models": [{"provider": ..., "model": ..., <policy keys>}]}``; all keys optional."""
        if not isinstance(data, Mapping):
            raise PolicyError(f"policy configuration must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - _MAPPING_KEYS)
        if unknown:
            raise PolicyError(f"unknown configuration key(s) {', '.join(map(repr, unknown))} (known: {', '.join(sorted(_MAPPING_KEYS))})")
        default_values = data.get("default") or {}
        if not isinstance(default_values, Mapping):
            raise PolicyError(f"'default' must be a mapping, got {type(default_values).__name__}")
        default = CompactionPolicy().with_overrides(default_values)
        entries = data.get("models") or []
        if not isinstance(entries, (list, tuple)):
            raise PolicyError(f"'models' must be a list, got {type(entries).__name__}")
        overrides: dict[tuple[str, str], Mapping[str, Any]] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise PolicyError(f"models[{i}] must be a mapping, got {type(entry).__name__}")
            provider, model = entry.get("provider"), entry.get("model")
            if not (isinstance(provider, str) and provider and isinstance(model, str) and model):
                raise PolicyError(f"models[{i}] needs non-empty 'provider' and 'model' names")
            if (provider, model) in overrides:
                raise PolicyError(f"models[{i}]: {provider}/{model} is configured twice")
            overrides[(provider, model)] = {k: v for k, v in entry.items() if k not in _MODEL_ENTRY_KEYS}
        return cls(default=default, overrides=overrides, default_window=data.get("context_window"))
