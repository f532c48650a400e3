"""A store of many threads, written by bulk SQL that respects the schema: the fleet bench and the
fleet view's screenshot (issue 26).

    build_fleet_store(url: str, *, threads: int = 100_000, messages: int = 5_000_000, seed: int = 26,
                      progress: Callable[[str], None] | None = None) -> FleetSpec

``url`` is a SQLite path / URL or a PostgreSQL URL of an *empty or missing* database (migrated
here to head). The store holds ``threads`` conversations and ``messages`` messages in all
(user / assistant turns, each with its token count), and around them what the fleet view
aggregates: busy threads (running runs, queued requests), our compactions (history rows and summary
events with dropped specifics and summarizer usage) over the last 30 days, rejected summaries,
imported threads (Claude Code, Codex, OpenHands) with the compactions their source recorded, and
the kept-token figures of a measurement (90 % of the threads; the rest were never measured).

Every token figure is the engine's own: a message's ``tokens`` is what the meter of the thread's
model (:func:`engine.core.meter.default_meter`) counts for it, kept under that meter's ``count_key``; a
measured thread's ``kept_tokens`` is the same meter's envelope (reply priming, system prompt and the
messages) and its threshold the default policy's for its window. The turns are short support
messages, so each thread carries a context window its source reported
(``reported_context_window``), sized to put its pressure in the mix of bands the bench filters on
(10 % to 120 % of the threshold). Opening a thread (``Service.compaction.status``) finds the very figures
stored: the list does not change under the user. Keys are
``support-00001`` … (imported ones ``claude-code-00002`` …); thread ``support-01400`` (written live)
exists whenever ``threads`` ≥ 1,400. The same seed
gives the same store. SQLite gets executemany through the DB-API, PostgreSQL COPY; 100k threads / 5M
messages take 1–3 minutes on SQLite (149 s on the shared 2-core machine), about one on PostgreSQL.

:func:`fleet_store_spec` reads back what a store was built with (None: not a built fleet store, or
one an older version of this builder made), so a bench reuses a cached build.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, select, text

from ..core.messages import Envelope, Message, Surface
from ..core.meter import TokenMeter, default_meter
from ..core.policy import CompactionPolicy
from .db import migrate, normalize_url
from .fleet import pressure_ppm
from .models import Setting

__all__ = ["FleetSpec", "build_fleet_store", "fleet_store_spec"]

SPEC_SETTING = "fleet_bench"
#: what the builder writes changed (2: the engine's token counts and a reported window per thread):
#: a store of another version is built again
BUILD_VERSION = 2
IMPORTED = (("claude-code", "claude-sonnet-4-5"), ("codex", "gpt-5-codex"), ("openhands", "claude-sonnet-4"))
LIVE_MODELS = ("claude-sonnet-4-5", "gpt-4.1", "gpt-4o-mini", "claude-haiku-4-5")
TOPICS = ("refund for order", "login fails after reset", "invoice missing VAT", "API rate limit", "export to CSV broken",
          "shipping address change", "webhook retries", "SSO with Okta", "database migration stuck", "mobile app crash")
CJK_TOPICS = ("退款申请", "登录失败", "发票缺少税号", "配送地址变更")
SUMMARIZER = "claude-haiku-4-5"
SYSTEM_PROMPT = "You are a support agent."
#: a thread's turns (``{t}``: its topic): its n-th user / assistant message is the n-th line, cycled
USER_LINES = ("Hi, I need help: {t}.", "It still happens after I tried that. Anything else I can do about {t}?",
              "Here is what the screen says: error 500, request id 7f3a9c. I am on the latest version of the app.",
              "Thanks. One more thing: can you check whether this also affects my second account?", "ok",
              "That worked for the first case but not for the second, which is the one that matters for {t}.")
ASSISTANT_LINES = ("Sorry to hear that. Let me look into {t} for you.",
                   "I checked your account: the last change was applied on Monday. Could you sign out and back in?",
                   "Thanks for the details. This is a known issue with {t}; the fix ships this week. Meanwhile the web "
                   "dashboard is not affected.",
                   "Done. Anything else?",
                   "I have escalated {t} to the team that owns it, with your request id; you will get an email within a day.")


@dataclass(frozen=True, slots=True)
class FleetSpec:
    threads: int
    messages: int
    seed: int
    busy: int
    compactions: int
    imported: int
    version: int = 1


def _sqlite_time(dt: datetime) -> str:
    """How SQLAlchemy stores a DateTime on SQLite (naive UTC, microseconds always written)."""
    return dt.astimezone(UTC).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")


class _Writer:
    """Bulk rows into one table: SQLite executemany, PostgreSQL COPY (both in one transaction)."""

    def __init__(self, dbapi: Any, sqlite: bool) -> None:
        self.dbapi, self.sqlite = dbapi, sqlite

    def write(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], batch: int = 50_000) -> int:
        n = 0
        cur = self.dbapi.cursor()
        if self.sqlite:
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
            buf: list[Sequence[Any]] = []
            for row in rows:
                buf.append([_sqlite_time(v) if isinstance(v, datetime) else json.dumps(v) if isinstance(v, (dict, list)) else v for v in row])
                if len(buf) >= batch:
                    cur.executemany(sql, buf)
                    n += len(buf)
                    buf = []
            if buf:
                cur.executemany(sql, buf)
                n += len(buf)
            return n
        with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([json.dumps(v) if isinstance(v, (dict, list)) else v for v in row])
                n += 1
        return n


class _Turns:
    """The lines of one (topic, model encoding) and their counts by the engine's meter, counted once."""

    def __init__(self, topic: str, meter: TokenMeter) -> None:
        self.user = [line.format(t=topic) for line in USER_LINES]
        self.assistant = [line.format(t=topic) for line in ASSISTANT_LINES]
        self.user_tokens = meter.count_messages([Message("user", t) for t in self.user])
        self.assistant_tokens = meter.count_messages([Message("assistant", t) for t in self.assistant])
        self.count_key = meter.count_key
        #: the envelope without messages: reply priming, tools (none), the system prompt
        self.fixed = meter.measure(Envelope(SYSTEM_PROMPT, Surface(messages=()))).total

    def kept(self, n: int) -> int:
        """The envelope's tokens with the thread's ``n`` messages (what ``Service.compaction.status`` measures)."""
        users, assistants = (n + 1) // 2, n // 2
        return (self.fixed + sum(self.user_tokens[j % len(self.user)] for j in range(users))
                + sum(self.assistant_tokens[j % len(self.assistant)] for j in range(assistants)))

    def message(self, j: int) -> tuple[str, str, int]:
        """(role, content, tokens) of the thread's ``j``-th message (0: the first user turn)."""
        if j % 2 == 0:
            k = (j // 2) % len(self.user)
            return "user", self.user[k], self.user_tokens[k]
        k = (j // 2) % len(self.assistant)
        return "assistant", self.assistant[k], self.assistant_tokens[k]


def _window_for(kept: int, ratio: float, policy: CompactionPolicy) -> tuple[int, int]:
    """(window, threshold) under ``policy`` that put ``kept`` tokens at about ``ratio`` of the threshold."""
    window = max(16, round(kept / (ratio * policy.threshold_ratio)))
    return window, policy.threshold(window)


def _split(total: int, parts: int, rng: random.Random) -> list[int]:
    """``total`` messages over ``parts`` threads: 2 to ~2×mean each, summing exactly to ``total``."""
    mean = max(2, total // max(1, parts))
    sizes = [max(2, int(rng.triangular(2, 2 * mean, mean))) for _ in range(parts)]
    diff = total - sum(sizes)
    i = 0
    while diff != 0 and parts:
        step = 1 if diff > 0 else -1
        if step > 0 or sizes[i % parts] > 2:
            sizes[i % parts] += step
            diff -= step
        i += 1
    return sizes


def build_fleet_store(url: str, *, threads: int = 100_000, messages: int = 5_000_000, seed: int = 26,
                      progress: Callable[[str], None] | None = None) -> FleetSpec:
    """Build the store (see the module docstring); returns what it holds."""
    say = progress or (lambda _m: None)
    migrate(url)
    engine = create_engine(normalize_url(url))
    sqlite = engine.dialect.name == "sqlite"
    rng = random.Random(seed)
    now = datetime.now(UTC).replace(microsecond=0)
    sizes = _split(messages, threads, rng)
    policy = CompactionPolicy()  # a built store has no policy settings: the defaults apply
    turns: dict[tuple[str, str], _Turns] = {}
    busy = compactions = imported = 0
    try:
        with engine.begin() as conn:
            if conn.execute(text("SELECT count(*) FROM conversations")).scalar_one():
                raise ValueError(f"{url}: not empty; a fleet store is built into an empty database")
            w = _Writer(conn.connection.driver_connection, sqlite)
            convs: list[tuple[Any, ...]] = []
            states: list[tuple[Any, ...]] = []
            history: list[tuple[Any, ...]] = []
            events: list[tuple[Any, ...]] = []
            runs: list[tuple[Any, ...]] = []
            queued: list[tuple[Any, ...]] = []
            sources: list[tuple[Any, ...]] = []
            plans: list[tuple[int, int, _Turns, datetime]] = []  # (cid, messages, its turns, first time)
            next_mid = 1
            for i in range(threads):
                cid = i + 1
                n = sizes[i]
                r = rng.random()
                fmt, model = IMPORTED[int(r * 10) % 3] if r < 0.3 and i + 1 != 1400 else (None, LIVE_MODELS[i % len(LIVE_MODELS)])
                key = (f"{fmt}-{i + 1:05d}" if fmt else f"support-{i + 1:05d}")
                topic = CJK_TOPICS[(i // 20) % len(CJK_TOPICS)] if i % 20 == 7 else TOPICS[i % len(TOPICS)]
                title = f"{topic} #{i + 1}"
                updated = now - timedelta(seconds=rng.randint(0, 60 * 86400))
                created = updated - timedelta(seconds=rng.randint(60, 86400 * 5))
                ratio = rng.choice((0.1, 0.3, 0.45, 0.6, 0.7, 0.8, 0.88, 0.95, 1.02, 1.2)) * rng.uniform(0.9, 1.1)
                meter = default_meter(model)
                lines = turns.get((topic, meter.count_key))
                if lines is None:
                    lines = turns[(topic, meter.count_key)] = _Turns(topic, meter)
                kt = lines.kept(n)
                window, threshold = _window_for(kt, ratio, policy)
                measured = rng.random() < 0.9
                plans.append((cid, n, lines, created))
                last_mid = next_mid + n - 1
                next_mid += n
                convs.append((cid, key, title, "support-bot" if not fmt else None, "anthropic" if "claude" in model else "openai", model,
                              SYSTEM_PROMPT, [], n, last_mid, created, updated, fmt,
                              f"/home/u/sessions/{key}.jsonl" if fmt else None, key if fmt else None, window,
                              kt if measured else None, threshold if measured else None, window if measured else None,
                              pressure_ppm(kt, threshold) if measured else -1, 0))
                ncomp = rng.choice((0, 0, 0, 0, 1, 1, 2, 3, 5)) if rng.random() < 0.35 else 0
                for c in range(ncomp):
                    at = now - timedelta(seconds=rng.randint(0, 30 * 86400))
                    kind = rng.choice(("summary", "summary", "prune", "manual"))
                    before = int(threshold * rng.uniform(0.95, 1.1))
                    after = int(before * rng.uniform(0.25, 0.6))
                    history.append((cid, kind, "manual" if kind == "manual" else "pressure", c, c + 1, before, after, at))
                    if kind != "prune":
                        dropped = rng.choice((0, 0, 1, 2, 3, 4, 6, 8, 12, 20, 35))
                        p, o = rng.randint(8_000, 60_000), rng.randint(400, 2_000)
                        events.append((cid, "summary", "manual" if kind == "manual" else "pressure",
                                       {"tokens_before": before, "tokens_after": after, "dropped_specifics": dropped, "calls": 1,
                                        "summarizer": "model", "usage": {"http_requests": 1, "prompt_tokens": p, "completion_tokens": o,
                                                                         "model": SUMMARIZER, "extractive": False}}, at))
                    compactions += 1
                if rng.random() < 0.02:
                    at = now - timedelta(seconds=rng.randint(0, 10 * 86400))
                    events.append((cid, "summary_rejected", "pressure", {"reason": "not_smaller", "calls": 1,
                                   "usage": {"prompt_tokens": 9_000, "completion_tokens": 900, "model": SUMMARIZER}}, at))
                states.append((cid, ncomp, ncomp, 0, updated))
                nsrc = rng.randint(1, 3) if fmt and rng.random() < 0.25 else 0
                convs[-1] = (*convs[-1][:-1], ncomp + nsrc)  # conversations.compactions: ours and the source's
                if nsrc:
                    for c in range(nsrc):
                        at = now - timedelta(seconds=rng.randint(0, 30 * 86400))
                        sources.append((cid, fmt, "summary" if c % 2 == 0 else "prune", "auto", int(threshold * 0.9),
                                        f"{key}:compaction:{c}", at.strftime("%Y-%m-%dT%H:%M:%S.000Z"), at))
                if fmt:
                    imported += 1
                if rng.random() < 0.015:
                    runs.append((cid, rng.choice(("running", "waiting_for_user")), updated))
                    busy += 1
                elif rng.random() < 0.005:
                    queued.append((cid, "next question", "queued", updated))
                    busy += 1
            say(f"{threads:,} threads")
            w.write("conversations", ("id", "thread_key", "title", "agent", "provider", "model", "system_prompt", "tools", "message_count",
                                      "last_message_id", "created_at", "updated_at", "source_format", "source_file", "source_session_id",
                                      "reported_context_window", "kept_tokens", "kept_threshold", "kept_window", "pressure_ppm", "compactions"), convs)
            w.write("compaction_state", ("conversation_id", "generation", "compact_count", "summary_tokens", "updated_at"),
                    [(c, g, n, 0, u) for c, g, n, _z, u in states])
            w.write("compaction_history", ("conversation_id", "kind", "trigger", "generation_before", "generation_after", "tokens_before",
                                           "tokens_after", "created_at"), history)
            w.write("compaction_events", ("conversation_id", "kind", "trigger", "data", "created_at"), events)
            w.write("runs", ("conversation_id", "status", "created_at"), runs)
            w.write("queued_requests", ("conversation_id", "content", "status", "created_at"), queued)
            w.write("source_compactions", ("conversation_id", "source", "kind", "trigger", "tokens_before", "source_id", "source_timestamp",
                                           "created_at"), sources)
            done = w.write("messages", ("id", "conversation_id", "role", "content", "created_at", "is_error", "tokens", "tokens_key"),
                           _message_rows(plans, say))
            w.write("settings", ("key", "value", "updated_at"),
                    [(SPEC_SETTING, asdict(FleetSpec(threads, done, seed, busy, compactions, imported, BUILD_VERSION)), now)])
            if not sqlite:
                conn.execute(text("SELECT setval(pg_get_serial_sequence('conversations', 'id'), :n)"), {"n": threads})
                conn.execute(text("SELECT setval(pg_get_serial_sequence('messages', 'id'), :n)"), {"n": max(1, done)})
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    finally:
        engine.dispose()
    spec = FleetSpec(threads, messages, seed, busy, compactions, imported, BUILD_VERSION)
    say(f"built: {spec}")
    return spec


def _message_rows(plans: Sequence[tuple[int, int, _Turns, datetime]], say: Callable[[str], None]) -> Iterator[tuple[Any, ...]]:
    mid = 0
    for k, (cid, n, lines, first) in enumerate(plans):
        for j in range(n):
            mid += 1
            role, content, tokens = lines.message(j)
            yield (mid, cid, role, content, first + timedelta(seconds=j), False, tokens, lines.count_key)
        if k and k % 20_000 == 0:
            say(f"messages of {k:,} threads")


def fleet_store_spec(url: str) -> FleetSpec | None:
    """What :func:`build_fleet_store` wrote into ``url``; None when it is not such a store (or unreachable),
    or an older builder's."""
    try:
        engine = create_engine(normalize_url(url))
    except Exception:  # noqa: BLE001 - a bad URL is "not built"
        return None
    try:
        with engine.connect() as conn:
            value = conn.execute(select(Setting.value).where(Setting.key == SPEC_SETTING)).scalar()
    except Exception:  # noqa: BLE001 - a missing file or schema is "not built"
        return None
    finally:
        engine.dispose()
    try:
        spec = FleetSpec(**value) if isinstance(value, dict) else None
    except TypeError:  # another builder's fields
        return None
    return spec if spec is not None and spec.version == BUILD_VERSION else None
