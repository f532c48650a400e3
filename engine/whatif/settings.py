"""What-if settings (:data:`SETTINGS`, :data:`ALIASES`, parsing and validation) and the candidate
policy a run goes under, with its summarizer (see :mod:`engine.whatif`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from ..compaction.summarizers.extractive import ExtractiveSummarizer
from ..compaction.summarizers.factory import ENV_API_KEY
from ..compaction.summarizers.openai_compat import OpenAICompatSummarizer
from ..compaction.summarizers.protocol import Summarizer, SummarizerError
from ..core.config import Settings as UserSettings
from ..core.errors import EngineError
from ..core.policy import CompactionPolicy, PolicyError, PolicySet, ResolvedPolicy
from ..store import Store

#: at most this many values in one sweep
MAX_SWEEP = 50


# -- settings ----------------------------------------------------------------------------------


class WhatIfSettingError(EngineError, ValueError):
    """A what-if setting that is unknown or has a bad value (one line; nothing was run)."""

    code = "invalid_whatif_setting"


#: the settings a what-if accepts: name -> kind ("ratio", "tokens", "count" or "summarizer")
SETTINGS: Mapping[str, str] = {
    "threshold_ratio": "ratio",
    "threshold_tokens": "tokens",
    "retained_tail_ratio": "ratio",
    "tool_result_limit_tokens": "tokens",
    "preview_tokens": "tokens",
    "context_window": "tokens",
    "summary_max_tokens": "tokens",
    "loop_recent_tool_rounds": "count",
    "loop_max_compaction_rounds": "count",
    "summarizer": "summarizer",
}
#: the issue's short names for the policy's keys
ALIASES: Mapping[str, str] = {
    "retained_tail": "retained_tail_ratio",
    "tool_result_limit": "tool_result_limit_tokens",
    "preview_budget": "preview_tokens",
    "window": "context_window",
}
_POLICY_KEYS = frozenset(f.name for f in fields(CompactionPolicy))


def _known() -> str:
    return ", ".join(list(SETTINGS) + [f"{a} (= {k})" for a, k in ALIASES.items()])


def canonical_key(key: object) -> str:
    """The setting's name (an alias resolved); :class:`WhatIfSettingError` for an unknown one."""
    if not isinstance(key, str) or not key.strip():
        raise WhatIfSettingError(f"a setting needs a name (known: {_known()})")
    name = key.strip()
    name = ALIASES.get(name, name)
    if name not in SETTINGS:
        raise WhatIfSettingError(f"unknown what-if setting {key!r} (known: {_known()})")
    return name


def parse_value(key: str, value: Any) -> Any:
    """``value`` (text from the command line, or a number) as setting ``key`` takes it."""
    kind = SETTINGS[key]
    if kind == "summarizer":
        return _summarizer_spec(value)
    text = value.strip().replace("_", "") if isinstance(value, str) else value
    if isinstance(text, bool) or text is None or text == "":
        raise WhatIfSettingError(f"{key} needs a value, got {value!r}")
    if kind == "ratio":
        try:
            number = float(text)
        except (TypeError, ValueError):
            raise WhatIfSettingError(f"{key} must be a number in (0, 1], got {value!r}") from None
        if not (0 < number <= 1):
            raise WhatIfSettingError(f"{key} must be in (0, 1], got {value!r}")
        return number
    try:
        number = int(text) if isinstance(text, str) else text
    except ValueError:
        raise WhatIfSettingError(f"{key} must be a whole number of {'tokens' if kind == 'tokens' else 'rounds'}, got {value!r}") from None
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int):
        raise WhatIfSettingError(f"{key} must be a whole number, got {value!r}")
    low = 1 if kind == "tokens" or key == "loop_max_compaction_rounds" else 0
    if number < low:
        raise WhatIfSettingError(f"{key} must be >= {low}, got {value!r}")
    return number


def _summarizer_spec(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WhatIfSettingError(f"summarizer must be 'extractive' or 'openai:<base_url>#<model>', got {value!r}")
    spec = value.strip()
    if spec == "extractive":
        return spec
    if spec.startswith("openai:"):
        rest = spec[len("openai:"):]
        url, sep, model = rest.rpartition("#")
        if not sep or not url or not model.strip():
            raise WhatIfSettingError(f"summarizer {spec!r}: name the model after '#': openai:<base_url>#<model>")
        if not url.startswith(("http://", "https://")):
            raise WhatIfSettingError(f"summarizer {spec!r}: the base URL must start with http:// or https://")
        return f"openai:{url}#{model.strip()}"
    raise WhatIfSettingError(f"summarizer must be 'extractive' or 'openai:<base_url>#<model>', got {value!r}")


def parse_settings(settings: Mapping[str, Any] | Iterable[str]) -> dict[str, Any]:
    """Settings by canonical name with parsed values, from a mapping or ``key=value`` texts.
    A key given twice (also as alias and name) is an error."""
    pairs: list[tuple[Any, Any]]
    if isinstance(settings, Mapping):
        pairs = list(settings.items())
    else:
        pairs = []
        for item in settings:
            if not isinstance(item, str) or "=" not in item:
                raise WhatIfSettingError(f"a setting is key=value, got {item!r}")
            k, _, v = item.partition("=")
            pairs.append((k, v))
    out: dict[str, Any] = {}
    for k, v in pairs:
        name = canonical_key(k)
        if name in out:
            raise WhatIfSettingError(f"{name} is set twice")
        out[name] = parse_value(name, v)
    return out


def parse_sweep(spec: str) -> tuple[str, tuple[Any, ...]]:
    """``key=start:stop:step`` (stop included when reached) or ``key=a,b,c``: the key and its values."""
    if not isinstance(spec, str) or "=" not in spec:
        raise WhatIfSettingError(f"a sweep is key=start:stop:step or key=a,b,c, got {spec!r}")
    k, _, rest = spec.partition("=")
    key = canonical_key(k)
    rest = rest.strip()
    if ":" in rest and SETTINGS[key] != "summarizer":
        parts = rest.split(":")
        if len(parts) != 3:
            raise WhatIfSettingError(f"sweep {spec!r}: a range is start:stop:step")
        try:
            start, stop, step = (Decimal(p.strip().replace("_", "")) for p in parts)
        except InvalidOperation:
            raise WhatIfSettingError(f"sweep {spec!r}: start, stop and step must be numbers") from None
        if step <= 0 or stop < start:
            raise WhatIfSettingError(f"sweep {spec!r}: the step must be > 0 and stop >= start")
        count = int((stop - start) / step) + 1
        if count > MAX_SWEEP:
            raise WhatIfSettingError(f"sweep {spec!r} has {count} values; at most {MAX_SWEEP}")
        raw = [str(start + i * step) for i in range(count)]
    else:
        raw = [p for p in (x.strip() for x in _split_list(rest, key)) if p]
        if not raw:
            raise WhatIfSettingError(f"sweep {spec!r} names no values")
        if len(raw) > MAX_SWEEP:
            raise WhatIfSettingError(f"sweep {spec!r} has {len(raw)} values; at most {MAX_SWEEP}")
    values = tuple(parse_value(key, v) for v in raw)
    return key, values


def _split_list(text: str, key: str) -> list[str]:
    # a summarizer spec holds ':' and may hold ',' in a URL only rarely: split on ',' anyway
    return text.split(",")


def validate_values(parameter: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    """A sweep's parameter and values given as data (the GUI): canonical name, parsed values."""
    key = canonical_key(parameter)
    if not values:
        raise WhatIfSettingError(f"a sweep over {key} needs at least one value")
    if len(values) > MAX_SWEEP:
        raise WhatIfSettingError(f"a sweep has at most {MAX_SWEEP} values, got {len(values)}")
    return key, tuple(parse_value(key, v) for v in values)


class WhatIfSummarizerFailed(EngineError):
    """The candidate's summarizer failed (an endpoint that cannot be reached, refuses, times out):
    the what-if stops, as its figures would not say what that summarizer does. Nothing is kept."""

    code = "whatif_summarizer_failed"

# -- the candidate policy ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Thread:
    """What the what-if needs of the source thread (read once)."""

    key: str
    provider: str | None
    model: str | None
    reported_window: int | None
    source_format: str | None
    message_count: int


def _source_thread(source: Store, key: str) -> _Thread:
    info = source.thread(key)  # ThreadNotFound for a missing thread
    return _Thread(key, info.provider, info.model, info.reported_context_window, info.source_format, info.message_count)


def _resolve_source(policies: PolicySet, t: _Thread) -> ResolvedPolicy:
    return policies.resolve(t.provider, t.model, reported_window=t.reported_window, reported_by=t.source_format if t.reported_window else None)


def _policy_settings(policy: ResolvedPolicy) -> dict[str, Any]:
    p = policy.policy
    return {
        "threshold_ratio": p.threshold_ratio,
        "threshold_tokens": p.threshold_tokens,
        "retained_tail_ratio": p.retained_tail_ratio,
        "tool_result_limit_tokens": p.tool_result_limit_tokens,
        "preview_tokens": p.preview_tokens,
        "context_window": policy.context_window,
        "summary_max_tokens": p.summary_max_tokens,
        "loop_recent_tool_rounds": p.loop_recent_tool_rounds,
        "loop_max_compaction_rounds": p.loop_max_compaction_rounds,
    }


def candidate_policy(policies: PolicySet, t: _Thread, settings: Mapping[str, Any]) -> tuple[ResolvedPolicy, str]:
    """The policy the candidate runs under (the source's policy for the thread's route, with
    ``settings`` applied) and its summarizer spec. A combination that makes no policy (a preview
    as large as the limit, a threshold above the window …) raises :class:`WhatIfSettingError`."""
    base = _resolve_source(policies, t)
    overrides = {k: v for k, v in settings.items() if k in _POLICY_KEYS and k != "context_window"}
    window = settings.get("context_window", base.context_window)
    if "threshold_ratio" in settings and "threshold_tokens" not in settings:
        overrides["threshold_tokens"] = None  # a ratio asked for wins over an absolute threshold in force
    try:
        policy = base.policy.with_overrides(overrides)
        resolved = replace(base, policy=replace(policy, context_window=window), context_window=window, window_source="override",
                           window_detail="what-if setting" if "context_window" in settings else base.window_detail)
        _ = resolved.threshold, resolved.target_tokens, resolved.retained_tail_tokens  # raise PolicyError when unusable
    except PolicyError as exc:
        raise WhatIfSettingError(f"these settings make no policy: {exc.message}") from None
    return resolved, settings.get("summarizer") or default_summarizer_spec()


def default_summarizer_spec() -> str:
    """The summarizer a what-if uses when its settings name none: the user's configured one
    (``summarizer.*`` of :mod:`engine.core.config`, environment overriding), else ``extractive``."""
    try:
        s = UserSettings().summarizer()
    except EngineError:
        return "extractive"
    if s.kind == "openai" and s.base_url and s.model:
        return f"openai:{s.base_url}#{s.model}"
    return "extractive"


def make_summarizer(spec: str) -> Summarizer:
    """The summarizer a spec names (see :func:`_summarizer_spec`)."""
    if spec == "extractive":
        return ExtractiveSummarizer()
    url, _, model = spec[len("openai:"):].rpartition("#")
    try:
        configured = UserSettings().summarizer()
    except EngineError:
        configured = None
    # the configured key (environment, else the OS keyring) when the spec names the configured endpoint
    same = configured is not None and configured.base_url.rstrip("/") == url.rstrip("/")
    api_key = (configured.api_key if same and configured is not None else None) or os.environ.get(ENV_API_KEY) or None
    try:
        return OpenAICompatSummarizer(url, model, api_key=api_key, timeout=configured.timeout if same and configured is not None else 60.0)
    except SummarizerError as exc:
        raise WhatIfSettingError(f"summarizer {spec!r}: {exc.message}") from None

