"""The thread list and the fleet aggregates in SQL (issue 26): keyset pages, a total, filters and
``compaction stats``, the same statements on SQLite and PostgreSQL.

- :func:`page_threads`: one page of threads matching a :class:`engine.core.views.ThreadQuery`, ordered
  by ``(sort value, id)`` (ties by id, so a page boundary is stable while threads are inserted),
  resumed after an opaque cursor; the total is one ``COUNT(*)`` of the same filter. The busy reason,
  the sources' compaction counts and fallback titles of the page come from batched queries
  (``reads.busy_reasons`` / ``imported_facts``): a few queries per page, whatever its size.
- :func:`fleet_aggregates`: every ``compaction stats`` figure as a ``GROUP BY`` / ``SUM`` /
  ``COUNT`` of the database over the threads the query matches; nothing is scanned in Python.
- :func:`record_pressure`: the write-back of a measured thread's kept tokens, threshold and window
  (``conversations.kept_*``, ``pressure_ppm``), guarded so an older measurement never overwrites a
  newer state (the thread's last message and generation must still be those measured).

The pressure filters compare ``pressure_ppm`` (kept × 1,000,000 // threshold): ``≥ 1,000,000`` is
kept ≥ threshold exactly, ``≥ 850,000`` is ``PressureStatus.hint`` (kept × 1000 ≥ threshold × 850).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    and_,
    case,
    cast,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    tuple_,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ..core.errors import EngineError
from ..core.views import (
    ACTIVE_RUN_STATUSES,
    PRESSURE_BANDS,
    THREAD_FILTERS,
    THREAD_SORTS,
    ThreadInfo,
    ThreadPage,
    ThreadQuery,
)
from .db import StoreError
from .models import (
    CompactionEventRow,
    CompactionHistoryRow,
    CompactionStateRow,
    Conversation,
    QueuedRequest,
    Run,
    SourceCompactionRow,
)
from .reads import busy_reasons, corrupt_from, imported_facts
from .rules import ReadOnlyDatabase

log = logging.getLogger(__name__)

__all__ = [
    "FleetAggregates",
    "FleetReads",
    "InvalidThreadQuery",
    "count_threads",
    "fleet_aggregates",
    "page_threads",
    "pressure_ppm",
    "record_pressure",
]

#: ``pressure_ppm`` of a thread never measured (or without a threshold): sorts below every measured one
UNKNOWN_PPM = -1
OVER_THRESHOLD_PPM = 1_000_000
HINT_PPM = 850_000
#: the buckets of dropped specifics per summary: (label, low, high or None)
DROPPED_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("0", 0, 0), ("1–2", 1, 2), ("3–5", 3, 5), ("6–10", 6, 10), ("11–25", 11, 25), ("26+", 26, None),
)


class InvalidThreadQuery(EngineError):
    code = "invalid_query"


def pressure_ppm(kept: int | None, threshold: int | None) -> int:
    """kept × 1,000,000 // threshold; :data:`UNKNOWN_PPM` when either is unknown or no threshold."""
    if kept is None or not threshold or threshold <= 0:
        return UNKNOWN_PPM
    return max(0, kept) * 1_000_000 // threshold


def check_query(query: ThreadQuery) -> None:
    if query.sort not in THREAD_SORTS:
        raise InvalidThreadQuery(f"unknown sort {query.sort!r}; one of {', '.join(THREAD_SORTS)}")
    unknown = sorted(set(query.filters) - set(THREAD_FILTERS))
    if unknown:
        raise InvalidThreadQuery(f"unknown filter {', '.join(map(repr, unknown))}; any of {', '.join(THREAD_FILTERS)}")


# -- the filter -------------------------------------------------------------------------------
def _busy() -> Any:
    C = Conversation
    running = select(Run.conversation_id).where(Run.status.in_(ACTIVE_RUN_STATUSES))
    queued = select(QueuedRequest.conversation_id).where(QueuedRequest.status == "queued")
    return or_(C.id.in_(running), C.id.in_(queued))


def _compacted_since(since: datetime) -> Any:
    """A compaction of ours since ``since``, or one the source recorded whose ISO-8601 timestamp
    (compared as text, to the second) is since then."""
    C = Conversation
    ours = select(CompactionHistoryRow.conversation_id).where(CompactionHistoryRow.created_at >= since)
    iso = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    theirs = select(SourceCompactionRow.conversation_id).where(
        SourceCompactionRow.source_timestamp.like("____-__-__T%"), SourceCompactionRow.source_timestamp >= iso)
    return or_(C.id.in_(ours), C.id.in_(theirs))


#: the text a search looks in: key, title, source format and model, one per line (PostgreSQL indexes
#: this very expression with pg_trgm when the extension is there: migration 0006)
def search_text() -> Any:
    C = Conversation
    nl: Any = func.chr(literal_column("10"))  # inline (not parameters): the very expression the index holds
    empty: Any = literal_column("''")
    return C.thread_key + nl + C.title + nl + func.coalesce(C.source_format, empty) + nl + func.coalesce(C.model, empty)


def _search(needle: str, sqlite: bool) -> Any:
    """A literal, case-insensitive substring of key, title, source format or model (``%`` and ``_``
    escaped). SQLite's LIKE ignores ASCII case (as its lower() does: ASCII only); PostgreSQL ILIKE
    (served by the trigram index)."""
    if "\n" in needle:  # never across two fields
        C = Conversation
        return or_(*(col.icontains(needle, autoescape=True) for col in (C.thread_key, C.title, C.source_format, C.model)))
    if sqlite:
        C = Conversation
        return (C.thread_key + "\n" + C.title + "\n" + func.coalesce(C.source_format, "") + "\n"
                + func.coalesce(C.model, "")).contains(needle, autoescape=True)
    return search_text().icontains(needle, autoescape=True)


def conditions(query: ThreadQuery, now: datetime | None = None, *, sqlite: bool = False) -> list[Any]:
    """The WHERE conditions of ``query`` on :class:`Conversation` (ANDed)."""
    check_query(query)
    C = Conversation
    out: list[Any] = []
    if query.text:
        out.append(_search(query.text, sqlite))
    if query.source_format is not None:
        out.append(C.source_format.is_(None) if query.source_format == "live" else C.source_format == query.source_format)
    filters = set(query.filters)
    if "busy" in filters:
        out.append(_busy())
    if "over_threshold" in filters:
        out.append(C.pressure_ppm >= OVER_THRESHOLD_PPM)
    if "over_hint" in filters:
        out.append(C.pressure_ppm >= HINT_PPM)
    if "rejected_summary" in filters:
        out.append(C.id.in_(select(CompactionEventRow.conversation_id).where(CompactionEventRow.kind == "summary_rejected")))
    if "compacted_last_day" in filters:
        out.append(_compacted_since((now or datetime.now(UTC)) - timedelta(days=1)))
    return out


# -- sort and cursor --------------------------------------------------------------------------
def sort_column(sort: str) -> Any:
    C = Conversation
    return {"activity": C.updated_at, "pressure": C.pressure_ppm, "compactions": C.compactions, "messages": C.message_count,
            "title": C.title, "key": C.thread_key}[sort]


def _encode(query: ThreadQuery, value: Any, cid: int) -> str:
    if isinstance(value, datetime):
        value = {"t": value.isoformat()}
    raw = json.dumps([query.sort, query.descending, value, cid], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(query: ThreadQuery, cursor: str) -> tuple[Any, int]:
    try:
        sort, descending, value, cid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(value, dict):
            value = datetime.fromisoformat(value["t"])
        if not isinstance(cid, int):
            raise TypeError(cid)
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidThreadQuery(f"not a thread-list cursor: {cursor!r}") from exc
    if sort != query.sort or descending != query.descending:
        raise InvalidThreadQuery(f"the cursor is of a list sorted by {sort} ({'descending' if descending else 'ascending'}), "
                                 f"not by {query.sort} ({'descending' if query.descending else 'ascending'})")
    return value, cid


def _sqlite(s: Session) -> bool:
    return s.get_bind().dialect.name == "sqlite"


def count_threads(s: Session, query: ThreadQuery, now: datetime | None = None) -> int:
    check_query(query)
    conds = conditions(query, now, sqlite=_sqlite(s))
    q = select(func.count()).select_from(Conversation)
    return int(s.execute(q.where(and_(*conds)) if conds else q).scalar_one())


@dataclass(frozen=True, slots=True)
class PageRows:
    threads: list[ThreadInfo]
    total: int
    after: str | None


def thread_position(s: Session, query: ThreadQuery, key: str, now: datetime | None = None) -> int | None:
    """How many threads come before thread ``key`` in the list of ``query`` (its row), or None when
    the query does not match it: a count over the sort index, however far down the thread is."""
    check_query(query)
    C = Conversation
    sqlite = _sqlite(s)
    col = sort_column(query.sort)
    raw = sqlite and query.sort == "activity"  # as page_threads: SQLite's timestamp text, compared as text
    value_of = type_coerce(col, String()) if raw else col
    conds = conditions(query, now, sqlite=sqlite)
    found = s.execute(select(C.id, value_of.label("v")).where(C.thread_key == key, *conds)).first()
    if found is None:
        return None
    bound = tuple_(literal(found.v, String() if raw else col.type), literal(found.id, BigInteger()))
    here = tuple_(value_of, C.id)
    before = here > bound if query.descending else here < bound
    return int(s.execute(select(func.count()).select_from(C).where(before, *conds)).scalar_one())


def page_threads(s: Session, query: ThreadQuery, after: str | None, limit: int, build: Any, safe: Any,
                 now: datetime | None = None, *, offset: int = 0) -> PageRows:
    """One page: ``build(conversation, state, busy, source_compactions, fallback_title)`` makes each
    :class:`ThreadInfo` (the store's own builder, which also sets the kept figures); ``safe(id, key,
    load)`` is ``load()`` or a placeholder whose ``error`` says why the thread cannot be read (the
    page goes on past one broken row, as ``Store.list_threads`` does)."""
    if limit < 1:
        raise InvalidThreadQuery(f"limit must be at least 1, not {limit}")
    if offset < 0:
        raise InvalidThreadQuery(f"offset must be 0 or more, not {offset}")
    check_query(query)
    C = Conversation
    sqlite = _sqlite(s)
    col = sort_column(query.sort)
    conds = conditions(query, now, sqlite=sqlite)
    # a text search on SQLite (first page): the total in the same scan (a window count) instead of a
    # second one; PostgreSQL answers both from the trigram index, faster apart (measured)
    windowed = bool(query.text) and after is None and sqlite
    # first the ids and sort values alone (a narrow sort), then the rows of the page
    # SQLite keeps a timestamp as text: read (and bind back) the text, so one unreadable value is
    # one broken thread below, not a failed page
    raw = sqlite and query.sort == "activity"
    columns: list[Any] = [C.id, (type_coerce(col, String()) if raw else col).label("sort_value")]
    if windowed:
        columns.append(func.count().over().label("total"))
    q = select(*columns).select_from(C)
    if query.text and sqlite:
        # a substring matches anywhere: scan the table once and sort the matches, rather than walk
        # the sort index and visit every row in its order (measured 700 ms -> 200 ms at 100k threads)
        q = q.with_hint(C, "NOT INDEXED", dialect_name="sqlite")
    if conds:
        q = q.where(and_(*conds))
    if after is not None:
        value, cid = _decode(query, after)
        bound = tuple_(literal(value, String() if raw else col.type), literal(cid, BigInteger()))
        key = tuple_(type_coerce(col, String()) if raw else col, C.id)
        q = q.where(key < bound if query.descending else key > bound)
    order = (col.desc(), C.id.desc()) if query.descending else (col.asc(), C.id.asc())
    # ``offset``: rows skipped after the cursor (a jump into the list: the sort index walked by
    # the database, not pages read by the caller)
    keys = s.execute(q.order_by(*order).limit(limit + 1).offset(offset or None)).all()
    more = len(keys) > limit
    total = int(keys[0].total) if windowed and keys else 0 if windowed else None
    keys = keys[:limit]
    ids = [k.id for k in keys]
    try:
        loaded: dict[int, Any] | None = {c.id: (c, st) for c, st in s.execute(
            select(C, CompactionStateRow).outerjoin(CompactionStateRow, CompactionStateRow.conversation_id == C.id).where(C.id.in_(ids)))}
    except (ValueError, DBAPIError) as exc:  # a row SQLAlchemy cannot even load: the page's threads one at a time
        if isinstance(exc, ValueError) and corrupt_from(exc) is None:
            raise
        s.rollback()
        loaded = None
    busy = busy_reasons(s, ids)
    facts, titles = imported_facts(s, ids)
    if loaded is not None:
        rows_of = loaded
        threads = [safe(i, rows_of[i][0].thread_key, lambda i=i: build(*rows_of[i], busy.get(i), facts.get(i, 0), titles.get(i)))
                   for i in ids if i in rows_of]
    else:
        names: dict[int, str] = {i: k for i, k in s.execute(select(C.id, C.thread_key).where(C.id.in_(ids)))}

        def one(i: int) -> ThreadInfo:
            with s.begin_nested():
                return build(s.get(C, i), s.get(CompactionStateRow, i), busy.get(i), facts.get(i, 0), titles.get(i))

        threads = [safe(i, names[i], lambda i=i: one(i)) for i in ids if i in names]
    cursor = _encode(query, keys[-1].sort_value, keys[-1].id) if more and keys else None
    return PageRows(threads, total if total is not None else count_threads(s, query, now), cursor)


# -- the write-back of a measurement ----------------------------------------------------------
def record_pressure(s: Session, conversation_id: int, *, kept: int, threshold: int | None, window: int | None,
                    last_message_id: int | None, generation: int) -> bool:
    """Store a measurement of the thread (``PressureStatus``: tokens, threshold, context window)
    if the thread still is as measured: its last message and generation unchanged (a later
    append or compaction wins). True when the row was written (or already held these figures)."""
    C = Conversation
    threshold = threshold if threshold and threshold > 0 else None
    window = window if window and window > 0 else None
    ppm = pressure_ppm(kept, threshold)
    current_gen = (select(func.coalesce(func.max(CompactionStateRow.generation), 0))
                   .where(CompactionStateRow.conversation_id == conversation_id).scalar_subquery())
    stmt = (update(C).where(C.id == conversation_id, C.last_message_id.is_not_distinct_from(last_message_id), current_gen == generation)
            .where(or_(C.kept_tokens.is_distinct_from(kept), C.kept_threshold.is_distinct_from(threshold),
                       C.kept_window.is_distinct_from(window), C.pressure_ppm != ppm))
            .values(kept_tokens=kept, kept_threshold=threshold, kept_window=window, pressure_ppm=ppm)
            .execution_options(synchronize_session=False))
    if getattr(s.execute(stmt), "rowcount", 0):  # a CursorResult (an UPDATE)
        return True
    held = s.execute(select(C.kept_tokens, C.kept_threshold, C.kept_window).where(
        C.id == conversation_id, C.last_message_id.is_not_distinct_from(last_message_id), current_gen == generation)).first()
    return held is not None and tuple(held) == (kept, threshold, window)


def add_kept(session: Session, conversation_id: int, rows: Sequence[Mapping[str, Any]]) -> None:
    """The door's share: new message ``rows`` (with their ``tokens``) appended to a thread add their
    counts to its kept tokens (a thread never measured stays unknown); a row without a count makes
    the figure unknown until the next measurement. One UPDATE, computed by the database from the
    row as it is (the door holds the row lock), so concurrent appends never lose a count."""
    if not rows:
        return
    counts = [r.get("tokens") for r in rows]
    C = Conversation
    stmt = update(C).where(C.id == conversation_id).execution_options(synchronize_session=False)
    if any(n is None for n in counts):
        session.execute(stmt.where(C.kept_tokens.is_not(None)).values(kept_tokens=None, pressure_ppm=UNKNOWN_PPM))
        return
    added = sum(int(n) for n in counts if n is not None)
    if not added:
        return
    kept = C.kept_tokens + added
    session.execute(stmt.where(C.kept_tokens.is_not(None)).values(
        kept_tokens=kept,
        pressure_ppm=case((C.kept_threshold > 0, cast(kept, BigInteger) * 1_000_000 // C.kept_threshold), else_=UNKNOWN_PPM)))


# -- aggregates (compaction stats) ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FleetAggregates:
    threads: int
    busy: int
    bands: dict[str, int]
    per_day: list[tuple[str, str, str, int]]
    compactions: int
    dropped_buckets: list[int]
    worst: list[tuple[int, str, str, int, int, int]]
    #: (summarizer model or None, extractive, calls, prompt tokens, completion tokens)
    summarizers: list[tuple[str | None, bool, int, int, int]]
    tokens_saved: int


def _day(s: Session, column: Any) -> Any:
    if s.get_bind().dialect.name == "sqlite":
        return func.substr(column, 1, 10)
    return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")


def _band() -> Any:
    p = Conversation.pressure_ppm
    return case((p < 0, "unknown"), (p < 500_000, "below_50"), (p < HINT_PPM, "50_85"), (p < OVER_THRESHOLD_PPM, "85_100"), else_="over_100")


def fleet_aggregates(s: Session, query: ThreadQuery, *, since: datetime, worst: int = 10, now: datetime | None = None) -> FleetAggregates:
    """Every figure of ``compaction stats`` over the threads ``query`` matches, each one grouped
    query of the database (compactions per day: those since ``since``)."""
    check_query(query)
    conds = conditions(query, now, sqlite=_sqlite(s))
    C = Conversation
    matched = select(C.id).where(and_(*conds)) if conds else None

    def scoped(col: Any) -> Any:
        return col.in_(matched) if matched is not None else literal(True)

    bands = {b: 0 for b in PRESSURE_BANDS}
    band = _band()
    q = select(band, func.count()).select_from(C)
    for name, n in s.execute((q.where(and_(*conds)) if conds else q).group_by(band)):
        bands[name] = int(n)
    threads = sum(bands.values())
    busy = count_threads(s, replace(query, filters=frozenset(query.filters) | {"busy"}), now)

    H, S, E = CompactionHistoryRow, SourceCompactionRow, CompactionEventRow
    per_day: list[tuple[str, str, str, int]] = []
    day = _day(s, H.created_at)
    for d, kind, n in s.execute(select(day, H.kind, func.count()).where(scoped(H.conversation_id), H.created_at >= since)
                                .group_by(day, H.kind)):
        per_day.append((str(d), kind, "engine", int(n)))
    iso = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    sday = func.substr(S.source_timestamp, 1, 10)
    for d, kind, source, n in s.execute(
            select(sday, S.kind, S.source, func.count()).where(scoped(S.conversation_id), S.source_timestamp.like("____-__-__T%"),
                                                               S.source_timestamp >= iso).group_by(sday, S.kind, S.source)):
        per_day.append((str(d), kind, source, int(n)))
    per_day.sort()
    ours = s.execute(select(func.count()).select_from(H).where(scoped(H.conversation_id))).scalar_one()
    theirs = s.execute(select(func.count()).select_from(S).where(scoped(S.conversation_id))).scalar_one()

    # the summary events' JSON is read once (a CTE the three aggregates share: PostgreSQL keeps a
    # CTE used more than once materialized, so does SQLite), not once per aggregate
    events: tuple[Any, ...] = (E.kind.in_(("summary", "summary_rejected")), scoped(E.conversation_id))
    cid: Any
    kind_col: Any
    if _sqlite(s):
        data: Any = E.data
        table: Any = E
        cid, kind_col = E.conversation_id, E.kind
    else:  # PostgreSQL: parse each json document once (as jsonb), then read its fields
        raw = select(E.conversation_id.label("cid"), E.kind.label("kind"), cast(E.data, JSONB).label("j")).where(*events).cte("raw_events")
        raw = raw.prefix_with("MATERIALIZED")
        data, table, cid, kind_col = raw.c.j, raw, raw.c.cid, raw.c.kind
        events = ()
    ev = (select(cid.label("cid"), kind_col.label("kind"), data["dropped_specifics"].as_integer().label("dropped"),
                 data[("usage", "model")].as_string().label("model"),
                 case((data[("usage", "extractive")].as_boolean(), 1), else_=0).label("extractive"),
                 func.coalesce(data["calls"].as_integer(), 1).label("calls"),
                 func.coalesce(data[("usage", "prompt_tokens")].as_integer(), 0).label("prompt"),
                 func.coalesce(data[("usage", "completion_tokens")].as_integer(), 0).label("completion"))
          .select_from(table).where(*events).cte("summary_events"))
    d = ev.c.dropped
    bucket = case(*((d <= high, i) for i, (_l, _low, high) in enumerate(DROPPED_BUCKETS) if high is not None), else_=len(DROPPED_BUCKETS) - 1)
    none_text, none_int = cast(literal(None), String()), cast(literal(None), BigInteger())

    def part(name: str, label: Any, flag: Any, *numbers: Any) -> list[Any]:
        cols = [literal(name, String()).label("part"), cast(label, String()).label("label"), cast(flag, BigInteger()).label("flag")]
        padded = [*numbers, *[none_int] * (4 - len(numbers))]
        return cols + [cast(n, BigInteger()).label(f"n{i}") for i, n in enumerate(padded)]

    total = func.sum(d)
    top = (select(ev.c.cid, total.label("dropped"), func.count().label("n"), func.max(d).label("worst"))
           .where(ev.c.kind == "summary", d > 0).group_by(ev.c.cid).order_by(total.desc(), ev.c.cid).limit(worst).subquery("top"))
    parts = union_all(
        select(*part("bucket", none_text, bucket, func.count())).where(ev.c.kind == "summary", d >= 0).group_by(bucket),
        select(*part("worst", none_text, top.c.cid, top.c.dropped, top.c.n, top.c.worst)),
        select(*part("summarizer", ev.c.model, ev.c.extractive, func.sum(ev.c.calls), func.sum(ev.c.prompt), func.sum(ev.c.completion)))
        .group_by(ev.c.model, ev.c.extractive),
    )
    buckets = [0] * len(DROPPED_BUCKETS)
    top_rows: list[tuple[int, int, int, int]] = []
    summarizers: list[tuple[str | None, bool, int, int, int]] = []
    for name, label, flag, n0, n1, n2, _n3 in s.execute(parts):
        if name == "bucket":
            buckets[int(flag)] = int(n0)
        elif name == "worst":
            top_rows.append((int(flag), int(n0), int(n1), int(n2)))
        else:
            summarizers.append((label, bool(flag), int(n0 or 0), int(n1 or 0), int(n2 or 0)))
    names = {cid: (key, title) for cid, key, title in s.execute(select(C.id, C.thread_key, C.title).where(C.id.in_([r[0] for r in top_rows])))} if top_rows else {}
    top_rows.sort(key=lambda r: (-r[1], r[0]))
    worst_rows = [(cid, names[cid][0], names[cid][1] or "", dropped, n, w) for cid, dropped, n, w in top_rows if cid in names]

    saved = s.execute(select(func.coalesce(func.sum(H.tokens_before - H.tokens_after), 0))
                      .where(scoped(H.conversation_id), H.tokens_before.is_not(None), H.tokens_after.is_not(None))).scalar_one()
    return FleetAggregates(threads=threads, busy=busy, bands=bands, per_day=per_day, compactions=int(ours) + int(theirs),
                           dropped_buckets=buckets, worst=worst_rows, summarizers=summarizers, tokens_saved=int(saved or 0))


class FleetReads:
    """The thread list and fleet reads of one :class:`engine.store.Store` (kept out of the Store
    class, which holds every per-thread use case): each method is one transaction."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def page(self, query: ThreadQuery, *, after: str | None = None, offset: int = 0, limit: int = 200) -> ThreadPage:
        """One keyset page of the threads ``query`` matches, with their total (one consistent read)."""
        st = self.store
        with st._session(write=False, consistent=True) as s:
            rows = page_threads(s, query, after, limit, st._thread_info, st._safe_thread_info, offset=offset)
            return ThreadPage(tuple(rows.threads), rows.total, rows.after)

    def position(self, query: ThreadQuery, key: str) -> int | None:
        with self.store._session(write=False) as s:
            return thread_position(s, query, key)

    def count(self, query: ThreadQuery) -> int:
        with self.store._session(write=False) as s:
            return count_threads(s, query)

    def aggregates(self, query: ThreadQuery, *, since: datetime, worst: int = 10) -> FleetAggregates:
        with self.store._session(write=False, consistent=True) as s:
            return fleet_aggregates(s, query, since=since, worst=worst)

    def record_pressure(self, conversation_id: int, *, kept: int, threshold: int | None, window: int | None,
                        last_message_id: int | None, generation: int) -> bool:
        """Write back a thread's measured pressure (:func:`record_pressure`); False when the thread
        changed since, or the store is read-only, or another writer holds the database or the row
        (never waits for it: the figure is left for the next measurement)."""
        st = self.store
        if st.read_only or not st.check_role():
            return False
        try:
            with st._session(write=True, nowait=True) as s:
                if not st.is_sqlite:
                    s.execute(text("SET LOCAL lock_timeout = '200ms'"))
                return record_pressure(s, conversation_id, kept=kept, threshold=threshold, window=window,
                                       last_message_id=last_message_id, generation=generation)
        except (StoreError, ReadOnlyDatabase) as exc:
            log.debug("pressure of thread %s not stored: %s", conversation_id, exc)
            return False

    def record_pressures(self, figures: Sequence[tuple[int, int, int | None, int | None, int | None, int]], *,
                         wait: bool = False) -> list[bool] | None:
        """:meth:`record_pressure` of many threads in one transaction: ``figures`` is (conversation
        id, kept, threshold, window, last message id, generation) each, each row guarded as there.
        Per thread, whether its row holds these figures now; None when nothing could be written
        (read-only, or another writer holds the database: ``wait`` waits for it as any write does,
        else not at all)."""
        st = self.store
        if not figures or st.read_only or not st.check_role():
            return None
        try:
            with st._session(write=True, nowait=not wait) as s:
                if not st.is_sqlite and not wait:
                    s.execute(text("SET LOCAL lock_timeout = '200ms'"))
                return [record_pressure(s, cid, kept=kept, threshold=threshold, window=window, last_message_id=last, generation=gen)
                        for cid, kept, threshold, window, last, gen in figures]
        except (StoreError, ReadOnlyDatabase) as exc:
            log.debug("pressure of %d threads not stored: %s", len(figures), exc)
            return None
