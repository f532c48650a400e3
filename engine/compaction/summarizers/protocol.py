"""The summarizer protocol, its request/result types and summary validation.

Implementations (:mod:`.openai_compat`, :mod:`.extractive`) import this module; nothing here imports
them (the environment factory is :mod:`.factory`).

The engine is synchronous: a summarizer is a blocking call. Async callers run it in a thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Protocol, runtime_checkable

from ...core.errors import EngineError
from ...core.messages import Message

#: rejection reason codes returned by :func:`validate_summary`
REJECT_EMPTY = "empty"
REJECT_NOT_SMALLER = "not_smaller"
REJECT_MISSING_REQUEST = "missing_request"
REJECT_REFUSAL = "refusal"

#: no BPE token of the encodings we count with is longer than this many bytes, so a text of N bytes
#: has at least N / this many tokens: enough to refuse a huge reply without tokenizing it
MAX_TOKEN_BYTES = 128

#: a reply that opens like this is the model refusing or reporting an error, not a summary (an HTTP 200
#: with an apology and an error code was once stored as the summary)
_REFUSAL = re.compile(
    r"^\W{0,3}(i'?m sorry|i am sorry|sorry,|i apologi[sz]e|i cannot|i can'?t|i'?m unable|i am unable|i'?m not able|"
    r"as an ai\b|error\b|an error occurred|\{\s*\"error\"|request failed|unable to (summari[sz]e|process|complete))",
    re.IGNORECASE,
)


class SummarizerError(EngineError):
    """A summary could not be produced (HTTP error, timeout, malformed body, empty content, ...).

    ``code`` is stable (``http_error``, ``provider_error``, ``timeout``, ``connection_error``,
    ``malformed_response``, ``empty``, ``truncated``, ``over_budget``, ``config``); ``status`` is the
    HTTP status when there was one; ``provider_code`` is the classified provider error code
    (``CONTEXT_WINDOW_EXCEEDED``, ``RATE_LIMITED``, ... see :mod:`engine.llm.errors`) when the
    failure came from a model endpoint."""

    code = "summarizer_error"

    def __init__(
        self, message: str, code: str = "summarizer_error", *, status: int | None = None, provider_code: str | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.provider_code = provider_code


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What to summarize: the (pruned) messages being compacted, the previous rolling summary, the
    user's current request (must survive verbatim), whether the range lies in the running turn, and
    the summary budget in tokens: ``max_tokens``, plus ``identifier_tokens``
    that only an identifier index may use (the extractive summarizer's identifier lines; a language
    model writes within ``max_tokens`` and the engine appends the same identifier lines within the
    room, :func:`engine.compaction.summarizers.extractive.identifier_index`)."""

    messages: tuple[Message, ...]
    previous_summary: str | None = None
    current_request: str | None = None
    running_turn: bool = False
    max_tokens: int = 8192
    #: retries for a failed call (the policy's ``summary_retries``); ``None``: the summarizer's own
    retries: int | None = None
    #: the messages that stay verbatim after the range (the retained tail, as the model sees them):
    #: identifiers they or the current request mention are the ones a summary keeps first
    retained: tuple[Message, ...] = ()
    #: extra tokens, beyond ``max_tokens``, that identifier lines alone may take (the identifier
    #: appendix of docs/compaction.md: the compactor gives the room up to 35 % of the target, ``IDENTIFIER_ROOM_SHARE``)
    identifier_tokens: int = 0
    #: what the operator asked this compaction to keep (a manual compaction's ``--instructions`` or
    #: the thread's standing ones): a language model reads them in its prompt, the extractive
    #: summarizer keeps first what they name (:func:`instruction_terms`)
    instructions: str | None = None

    @property
    def total_tokens(self) -> int:
        """The most a summary may take: ``max_tokens`` + ``identifier_tokens``."""
        return self.max_tokens + self.identifier_tokens

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        if not isinstance(self.retained, tuple):
            object.__setattr__(self, "retained", tuple(self.retained))
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive whole number, got {self.max_tokens!r}")
        if isinstance(self.identifier_tokens, bool) or not isinstance(self.identifier_tokens, int) or self.identifier_tokens < 0:
            raise ValueError(f"identifier_tokens must be a whole number >= 0, got {self.identifier_tokens!r}")


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A produced summary. ``calls`` counts HTTP requests made (retries included; 0 when no language
    model was involved); token counts are the endpoint's reported usage, ``None`` when unreported.
    ``dropped_identifiers``: identifiers of the range a summarizer knows it left out for the budget
    (the extractive one lists them; for a language model's summary, those its appended identifier
    index had no room for)."""

    text: str
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    calls: int
    extractive: bool
    dropped_identifiers: tuple[str, ...] = ()


@runtime_checkable
class Summarizer(Protocol):
    """Turns a :class:`SummaryRequest` into a :class:`SummaryResult` or raises :class:`SummarizerError`."""

    name: str

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...


_WS = re.compile(r"\s+")


def contains_verbatim(text: str, request: str) -> bool:
    """Whether ``request`` appears in ``text`` word for word (runs of whitespace compare equal).
    A text without the request's first word (a run of non-space characters, the same in ``text``
    with its whitespace collapsed) is answered without collapsing it (a summary asks this of
    every user message in its range, twice), and so is a text holding the request as collapsed
    (its single spaces stand between non-space characters, so collapsing ``text`` keeps them: an
    extractive summary, which copies the request, is not collapsed whole to find it)."""
    needle = _needle(request)
    if not needle:
        return True
    return needle.split(" ", 1)[0] in text and (needle in text or needle in _WS.sub(" ", text))


@lru_cache(maxsize=64)
def _needle(request: str) -> str:
    """``request`` with each run of whitespace as one space, stripped."""
    return _WS.sub(" ", request).strip()


def validate_summary(
    result: SummaryResult,
    *,
    replaced_tokens: int,
    count_tokens: Callable[[str], int],
    current_request: str | None = None,
) -> str | None:
    """Why the summary must be rejected (``"empty"``, ``"not_smaller"``, ``"refusal"`` (it reads as a
    refusal or an error report), ``"missing_request"``),
    or ``None`` when it is acceptable. ``replaced_tokens`` is the size of what it would replace
    (the compacted messages plus the previous summary), counted with the same ``count_tokens``."""
    text = result.text.strip()
    if not text:
        return REJECT_EMPTY
    if len(result.text.encode("utf-8", "surrogatepass")) // MAX_TOKEN_BYTES >= replaced_tokens:
        return REJECT_NOT_SMALLER  # certainly not smaller, and never tokenized (a 10 MB reply costs nothing)
    if _REFUSAL.match(text):
        return REJECT_REFUSAL
    if count_tokens(result.text) >= replaced_tokens:
        return REJECT_NOT_SMALLER
    if current_request and not contains_verbatim(result.text, current_request):
        return REJECT_MISSING_REQUEST
    return None


_QUOTED = re.compile(r"`([^`\n]{2,200})`|\"([^\"\n]{2,200})\"|'([^'\n]{2,200})'")
_PATHLIKE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]*|[\w-]+\.[A-Za-z0-9]{1,8}|#\d+|[A-Za-z]+[_-][\w-]*\d[\w-]*)(?![\w/])")


def instruction_terms(instructions: str | None) -> tuple[str, ...]:
    """What instructions name, for a summarizer that cannot read them (the extractive one):
    quoted terms (backquoted, "x", 'x'), paths and path prefixes (``src/``, ``a/b.py``), file names
    (``notes.md``), message refs (``#12``) and ids (``call_7``, ``KB-1042``), in order, once each."""
    if not instructions:
        return ()
    found: list[str] = []
    for m in _QUOTED.finditer(instructions):
        found.append(next(g for g in m.groups() if g))
    for m in _PATHLIKE.finditer(instructions):
        found.append(m.group(1).rstrip("."))
    return tuple(dict.fromkeys(t for t in (f.strip() for f in found) if len(t) >= 2))
