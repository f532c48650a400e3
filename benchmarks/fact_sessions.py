"""Long coding-agent sessions with planted facts, for the fact-recall benchmark (``fact_recall.py``).

A session is generated as abstract events (user requests, tool rounds, answers; seeded), then
written in one of three dialects: our messages (tools ``read_file``, ``grep``, ``run_shell``,
``edit_file``), a Claude Code session JSONL and a Codex CLI rollout JSONL (the exact line shapes of
the importer fixtures under ``tests/fixtures/sessions/``; the content is generated, never copied).

Five kinds of facts are planted at known places (early ≈ 5-20 %, middle ≈ 40-60 %, late ≈ 70-90 %
of the session's messages), each with the key strings whose exact presence on the model's surface
says the fact is still visible (:data:`KINDS`, :func:`kept`):

- ``constraint``: a user constraint in a user request ("Never touch anything under
  ``services/ledger/migrations/`` …"): the object and the rule's phrase;
- ``decision``: an assistant's decision and its reason ("we go with PostgreSQL 16.2 … because it
  supports SKIP LOCKED …"): the choice with its version and the reason's key phrase;
- ``error_fix``: an error message in a failing test log (a tool output) and, one or two rounds
  later, its fix (assistant text and an edit of the fixing file): the error line and the fix's path;
- ``edit``: a file edited and how (assistant text and the edit call): the path and the function;
- ``number``: a measured figure with its units in a load-test log (a tool output):
  both numbers with their units ("412 ms", "1,200 rps").

Every key occurs only in its own fact's messages (checked at generation, :func:`generate`), and a key
matches only as a whole token (not inside a longer number or name), so a fact is visible exactly
when its own text survived.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import traces
from engine.core.messages import Message, ToolCall, assistant, tool_result, user

KINDS: tuple[str, ...] = ("constraint", "decision", "error_fix", "edit", "number")
POSITIONS: dict[str, tuple[float, float]] = {"early": (0.05, 0.2), "middle": (0.4, 0.6), "late": (0.7, 0.9)}
#: what "kept" means per kind (the same rule for every strategy): every key string on the surface
KEPT_RULE: dict[str, str] = {
    "constraint": "the constrained object (folder, file or function) and the rule's phrase",
    "decision": "the choice with its version (\"PostgreSQL 16.2\") and the reason's key phrase",
    "error_fix": "the error line as the log printed it and the path of the file the fix edited",
    "edit": "the edited file's path and the function's name",
    "number": "both figures with their units (\"412 ms\", \"1,200 rps\")",
}
SYSTEM_PROMPT = ("You are a coding agent working in a Python monorepo. Read files before editing, run the tests after each "
                 "change, respect the user's constraints, and report the files you changed.")
TOOLS: tuple[dict[str, Any], ...] = traces.TOOLS["coding"] + (
    traces._tool("edit_file", "Replace old_string by new_string in a file.", path="string", old_string="string", new_string="string"),
)
_PACKAGES = ("billing", "orders", "auth", "search", "reports", "notify")
_WORD = "A-Za-z0-9_"


def _boundary(key: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_WORD}]){re.escape(key)}(?![{_WORD}])")


def present(key: str, text: str) -> bool:
    """``key`` occurs in ``text`` as a whole token: exactly, and not inside a longer word or number
    ("412 ms" is not in "1412 ms"; "src/a.py" is in "/home/dev/shop/src/a.py")."""
    return key in text and _boundary(key).search(text) is not None


@dataclass(frozen=True)
class Fact:
    """One planted fact: its kind, where it was planted, and the keys that must all be visible."""

    fid: str
    kind: str
    position: str
    keys: tuple[str, ...]
    statement: str  # the fact as one line, for reports

    def status(self, text: str) -> str:
        """"kept" (every key on ``text``), "partial" (some) or "lost" (none)."""
        n = sum(present(k, text) for k in self.keys)
        return "kept" if n == len(self.keys) else ("partial" if n else "lost")


def kept(fact: Fact, text: str) -> bool:
    return fact.status(text) == "kept"


def complete_at(fact: Fact, messages: Sequence[Message]) -> int | None:
    """Index of the message after which every key of ``fact`` has appeared (``None``: never)."""
    missing = set(fact.keys)
    for i, m in enumerate(messages):
        text = message_text(m)
        missing = {k for k in missing if not present(k, text)}
        if not missing:
            return i
    return None


def message_text(m: Message) -> str:
    """What a message shows the model: its text and its calls' names and arguments."""
    return "\n".join([m.content, *(f"{c.name} {c.arguments}" for c in m.tool_calls)])


# -- abstract events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    tool: str  # read | grep | test | edit | shell
    args: dict[str, Any]
    output: str
    is_error: bool = False


@dataclass
class Event:
    kind: str  # user | round | answer
    text: str
    calls: list[Call] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)  # fids planted here


@dataclass
class Session:
    name: str
    seed: int
    events: list[Event]
    facts: list[Fact]

    def messages(self) -> list[Message]:
        """The session as our messages (generic tool names)."""
        return to_messages(self.events)


_CHOICES = (  # (name, major, alternative, reason, reason key)
    ("PostgreSQL", "16", "MySQL 8", "it supports SKIP LOCKED for the job queue", "SKIP LOCKED"),
    ("Redis", "7", "Memcached", "its streams give us consumer groups for the webhook fan-out", "consumer groups"),
    ("Kafka", "3", "RabbitMQ", "we need replayable partitions for the ledger events", "replayable partitions"),
    ("ClickHouse", "24", "TimescaleDB", "the reporting queries scan billions of rows with columnar compression", "columnar compression"),
    ("pydantic", "2", "marshmallow", "validation must run in the Rust core to stay under the request budget", "Rust core"),
    ("httpx", "0", "requests", "the client has to share one connection pool between sync and async code", "sync and async code"),
    ("Celery", "5", "RQ", "the team needs scheduled retries with exponential backoff out of the box", "exponential backoff"),
    ("NATS", "2", "ZeroMQ", "JetStream keeps at-least-once delivery across restarts", "at-least-once delivery"),
    ("Elasticsearch", "8", "Whoosh", "search needs per-tenant index aliases", "per-tenant index aliases"),
    ("SQLAlchemy", "2", "Django ORM", "the services already share its Core table metadata", "Core table metadata"),
)
_DECISION_TEMPLATES = (
    "Decision: we go with {choice} rather than {alt}, because {reason}.",
    "I'd pick {choice} over {alt} here because {reason}; I'll pin it in the lock file.",
    "Settled: {choice}. {alt} was the other option, but {reason}.",
)
_STEMS = ("pricing_rules", "invoice_totals", "session_cache", "retry_policy", "rate_limiter", "tenant_scope", "ledger_sync",
          "export_jobs", "webhook_dispatch", "token_refresh", "report_builder", "search_index", "currency_format",
          "audit_trail", "quota_guard", "batch_loader", "email_digest", "refund_flow", "schema_guard", "order_state")
_VERBS = ("apply", "normalize", "resolve", "merge", "compute", "validate", "flush", "rebuild", "reconcile", "schedule")
_NOUNS = ("discount_tiers", "currency_code", "tenant_quota", "refund_window", "retry_budget", "invoice_lines",
          "cache_keys", "webhook_batch", "tax_bands", "export_cursor", "session_token", "ledger_offsets")
_ERRORS = (
    "KeyError: '{name}'",
    "AttributeError: 'NoneType' object has no attribute '{name}'",
    "IntegrityError: UNIQUE constraint failed: {name}.external_ref",  # no double quotes: a Codex output is JSON text
    "AssertionError: expected status 201, got 409 for POST /v1/{name}",
    "ValueError: invalid literal for int() with base 10: '{name}'",
)
_NUMBERS = (  # (template, unit a, unit b)
    ("p95 latency {a} ms at {b} rps", "ms", "rps"),
    ("peak memory {a} MiB with {b} workers", "MiB", "workers"),
    ("import throughput {a} rows/s over {b} GiB", "rows/s", "GiB"),
)
_CONSTRAINTS = (  # (template, key phrase)
    ("Never touch anything under {obj}/ — the DBA team owns those files.", "Never touch"),
    ("Do not change the signature of {obj}(); other services call it.", "Do not change the signature"),
    ("Don't add dependencies to {obj} without asking me first.", "without asking me first"),
    ("Keep every timestamp written by {obj} in UTC, no local times.", "in UTC, no local times"),
    ("Leave {obj} alone: it is generated by the build, hand edits are lost.", "hand edits are lost"),
    ("Every change to {obj} needs a test first, no exceptions.", "needs a test first"),
    ("Don't log anything from {obj} that could contain card numbers.", "could contain card numbers"),
)


class _Gen:
    """One generation run: the RNG, the filler pools, unique names, call ids."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"fact-recall:{seed}")
        self.english = traces._english()
        self.code = traces._code()
        self.used: set[str] = set()
        self.serial = 0

    def prose(self, chars: int) -> str:
        text = self.rng.choice(self.english)
        start = self.rng.randrange(max(1, len(text) - chars)) if len(text) > chars else 0
        return " ".join(text[start : start + chars].split())

    def unique(self, make: Any) -> str:
        for _ in range(1000):
            v = make()
            if v not in self.used:
                self.used.add(v)
                return v
        raise RuntimeError("ran out of unique names for planted facts; enlarge the pools")

    def filler_path(self) -> str:
        return f"src/{self.rng.choice(_PACKAGES)}/module_{self.rng.randrange(60):03d}.py"

    def fact_path(self) -> str:
        return self.unique(lambda: f"src/{self.rng.choice(_PACKAGES)}/{self.rng.choice(_STEMS)}.py")

    def func(self) -> str:
        return self.unique(lambda: f"{self.rng.choice(_VERBS)}_{self.rng.choice(_NOUNS)}")

    # -- filler calls ------------------------------------------------------------------------------
    def read(self, path: str | None = None) -> Call:
        lines = "".join(self.rng.choice(self.code) for _ in range(self.rng.randint(2, 6))).splitlines()
        return Call("read", {"path": path or self.filler_path()}, "\n".join(lines))

    def grep(self) -> Call:
        pattern = self.rng.choice(("retry_limit", "MAX_BATCH", "timeout_ms", "parse_header", "tenant_id"))
        hits = [f"{self.filler_path()}:{self.rng.randrange(1, 900)}:    {pattern} = {self.prose(50)}" for _ in range(self.rng.randint(4, 25))]
        return Call("grep", {"pattern": pattern, "path": "src/"}, "\n".join(hits))

    def test_log(self, failure: list[str] | None = None) -> tuple[str, list[str]]:
        test = f"tests/test_{self.rng.randrange(60):03d}.py"
        lines = ["============================= test session starts =============================="]
        for i in range(self.rng.randint(15, 90)):
            lines.append(f"{test}::test_case_{i} PASSED in {self.rng.randrange(2000)}ms")
        if failure:
            at = self.rng.randrange(1, len(lines))
            lines[at:at] = failure
        lines.append(f"======= {'1 failed, ' if failure else ''}{len(lines)} passed in {self.rng.randrange(2, 90)}.{self.rng.randrange(10)}s =======")
        return "\n".join(lines), [test]

    def test(self) -> Call:
        text, (test,) = self.test_log()
        return Call("test", {"command": f"python -m pytest -q {test}"}, text)

    def filler_round(self) -> Event:
        calls = []
        for _ in range(self.rng.choice((1, 1, 1, 2, 3))):
            r = self.rng.random()
            calls.append(self.read() if r < 0.45 else self.grep() if r < 0.7 else self.test())
        return Event("round", self.prose(self.rng.randint(60, 220)), calls)

    # -- planted facts -------------------------------------------------------------------------------
    def constraint(self, fid: str, position: str, taken: set[str]) -> tuple[Fact, str]:
        template, phrase = self.rng.choice([c for c in _CONSTRAINTS if c[1] not in taken])
        taken.add(phrase)
        if "under" in template:
            obj = self.unique(lambda: f"services/{self.rng.choice(_PACKAGES)}/{self.rng.choice(('migrations', 'fixtures', 'vendor', 'generated'))}")
        elif "signature" in template:
            obj = self.func()
        elif "dependencies" in template:
            obj = self.unique(lambda: f"services/{self.rng.choice(_PACKAGES)}/pyproject.toml")
        else:
            obj = self.fact_path()
        text = template.format(obj=obj)
        key = f"{obj}/" if "under" in template else (f"{obj}()" if "signature" in template else obj)
        return Fact(fid, "constraint", position, (key, phrase), text), text

    def decision(self, fid: str, position: str, taken: set[str]) -> tuple[Fact, str]:
        name, major, alt, reason, reason_key = self.rng.choice([c for c in _CHOICES if c[0] not in taken])
        taken.add(name)
        choice = self.unique(lambda: f"{name} {major}.{self.rng.randint(1, 19)}" + (f".{self.rng.randint(1, 9)}" if self.rng.random() < 0.5 else ""))
        text = self.rng.choice(_DECISION_TEMPLATES).format(choice=choice, alt=alt, reason=reason)
        return Fact(fid, "decision", position, (choice, reason_key), text), text

    def error(self, fid: str, position: str) -> tuple[Fact, Call, tuple[str, str]]:
        name = self.unique(lambda: f"{self.rng.choice(_VERBS)}_{self.rng.choice(_NOUNS)}_{self.rng.randint(2, 99)}")
        line = self.rng.choice(_ERRORS).format(name=name)
        fix_path, fix_func = self.fact_path(), self.func()
        failure = ["=================================== FAILURES ===================================",
                   f"_____________________________ test_{name} _____________________________",
                   "Traceback (most recent call last):",
                   f'  File "{self.filler_path()}", line {self.rng.randrange(10, 900)}, in handle',
                   f"    result = self._process(batch, retries={self.rng.randrange(5)})",
                   f"E   {line}"]  # fmt: skip
        text, (test,) = self.test_log(failure)
        fact = Fact(fid, "error_fix", position, (line, fix_path), f"{line} — fixed in {fix_path}")
        return fact, Call("test", {"command": f"python -m pytest -q {test}"}, text, is_error=True), (fix_path, fix_func)

    def fix_round(self, fid: str, fix: tuple[str, str], error_type: str) -> Event:
        path, func = fix
        text = f"Found the cause of the {error_type}: `{func}` in {path} does not handle it; fixing it there."
        old = f"def {func}(self, batch):\n    return self._apply(batch)"
        new = f"def {func}(self, batch):\n    if not batch:\n        return []\n    return self._apply(batch)"
        return Event("round", text, [self.read(path), Call("edit", {"path": path, "old_string": old, "new_string": new}, f"Edited {path}.")], [fid])

    def edit(self, fid: str, position: str) -> tuple[Fact, Event]:
        path, func = self.fact_path(), self.func()
        how = self.rng.choice(("round half-even instead of truncating", "return early when the list is empty",
                               "read the limit from settings instead of the constant", "log the tenant before raising"))
        text = f"Editing {path}: in `{func}()` I {how}."
        old = f"def {func}(items, settings):\n    total = sum(items)"
        new = f"def {func}(items, settings):\n    # {how}\n    total = sum(items)"
        event = Event("round", text, [Call("edit", {"path": path, "old_string": old, "new_string": new}, f"Edited {path}.")], [fid])
        return Fact(fid, "edit", position, (path, func), f"{path}: {func}() — {how}"), event

    def number(self, fid: str, position: str) -> tuple[Fact, Event]:
        template, ua, ub = self.rng.choice(_NUMBERS)
        a = self.unique(lambda: f"{self.rng.randint(101, 999)}" if ua != "rows/s" else f"{self.rng.randint(11, 99)},{self.rng.randint(100, 999)}")
        b = self.unique(lambda: f"{self.rng.randint(1, 9)},{self.rng.randint(100, 999)}" if ub == "rps" else f"{self.rng.randint(2, 64)}")
        line = template.format(a=a, b=b)
        scenario = self.unique(lambda: f"{self.rng.choice(_NOUNS)}_{self.rng.randint(2, 99)}")
        log = [f"running scenario loadtest/{scenario}.js for 300 s", *(f"  stage {i}: ramping to {self.rng.randint(10, 90)}0 virtual users" for i in range(self.rng.randint(3, 8))),
               f"summary: {line}", *(f"  check {self.prose(30)} ... ok" for _ in range(self.rng.randint(5, 25)))]  # fmt: skip
        event = Event("round", f"Running the load test for {scenario} before changing anything.",
                      [Call("shell", {"command": f"k6 run loadtest/{scenario}.js"}, "\n".join(log))], [fid])
        return Fact(fid, "number", position, (f"{a} {ua}", f"{b} {ub}"), line), event


def generate(messages: int, *, seed: int = 7, per_slot: int | None = None, name: str | None = None) -> Session:
    """A session of about ``messages`` messages with ``per_slot`` facts of every kind at every
    position (default: 1 below 400 messages, 2 from 400)."""
    g = _Gen(seed)
    per = per_slot or (1 if messages < 400 else 2)
    slots: list[tuple[float, str, str]] = []  # (message fraction, kind, position)
    for kind in KINDS:
        for position, (lo, hi) in POSITIONS.items():
            for _ in range(per):
                slots.append((g.rng.uniform(lo, hi), kind, position))
    slots.sort()
    events: list[Event] = []
    facts: list[Fact] = []
    taken: set[str] = set()
    pending_fix: list[tuple[int, str, tuple[str, str], str]] = []  # (rounds to wait, fid, fix, error type)
    pending: list[tuple[str, str]] = []  # (kind, position) due
    count = 0

    def add(e: Event) -> None:
        nonlocal count
        events.append(e)
        count += 1 + len(e.calls)

    def fid() -> str:
        return f"f{len(facts) + 1:02d}"

    def next_round() -> Event:
        for i, (wait, f_id, fix, etype) in enumerate(pending_fix):
            if wait <= 0:
                del pending_fix[i]
                return g.fix_round(f_id, fix, etype)
        for i, (kind, position) in enumerate(pending):
            if kind in ("edit", "number", "error_fix", "decision"):
                del pending[i]
                f = fid()
                if kind == "edit":
                    fact, e = g.edit(f, position)
                elif kind == "number":
                    fact, e = g.number(f, position)
                elif kind == "decision":
                    fact, text = g.decision(f, position, taken)
                    e = g.filler_round()
                    e.text = f"{text} {e.text}"
                    e.facts.append(f)
                else:
                    fact, call, fix = g.error(f, position)
                    e = Event("round", "Running the tests again.", [call], [f])
                    pending_fix.append((g.rng.randint(1, 2), f, fix, fact.keys[0].split(":")[0]))
                facts.append(fact)
                return e
        return g.filler_round()

    turn = 0
    while count < messages - 4 or pending or pending_fix:
        turn += 1
        while slots and slots[0][0] * messages <= count:
            _, kind, position = slots.pop(0)
            pending.append((kind, position))
        request = f"Step {turn}: {g.prose(g.rng.randint(80, 300))}"
        planted: list[str] = []
        for i, (kind, position) in enumerate(pending):
            if kind == "constraint":
                del pending[i]
                f = fid()
                fact, text = g.constraint(f, position, taken)
                facts.append(fact)
                request += f" {text}"
                planted.append(f)
                break
        add(Event("user", request, facts=planted))
        for _ in range(g.rng.randint(2, 6)):
            add(next_round())
            pending_fix[:] = [(w - 1, *rest) for w, *rest in pending_fix]  # type: ignore[misc]
            while slots and slots[0][0] * messages <= count:
                _, kind, position = slots.pop(0)
                pending.append((kind, position))
        if pending_fix and all(w <= 0 for w, *_ in pending_fix):
            add(next_round())
        add(Event("answer", f"{g.prose(g.rng.randint(200, 600))}\n\n```python\n{g.rng.choice(g.code)}```\n"))
    # the everyday shape: the long task is finished, a new request follows and its first round runs
    add(Event("user", "Now write the release note for this branch: what changed and why."))
    add(Event("round", "Collecting the commits of this branch.", [Call("shell", {"command": "git log --oneline main..HEAD"},
              "\n".join(f"{g.rng.getrandbits(28):07x} {g.prose(50)}" for _ in range(12)))]))
    session = Session(name or f"generated-{messages}", seed, events, facts)
    check_unique(session)
    return session


def check_unique(session: Session) -> None:
    """Every key of every fact occurs only in the messages that fact was planted in (else a filler
    text or another fact could show it and "kept" would mean nothing)."""
    owner: dict[int, set[str]] = {}
    msgs: list[Message] = []
    for e in session.events:
        start = len(msgs)
        msgs += to_messages([e], call_base=len(msgs))
        for i in range(start, len(msgs)):
            owner[i] = set(e.facts)
    for fact in session.facts:
        where = [i for i, m in enumerate(msgs) if any(present(k, message_text(m)) for k in fact.keys)]
        stray = [i for i in where if fact.fid not in owner[i]]
        if stray:
            raise AssertionError(f"{session.name}: a key of {fact.fid} ({fact.kind}) also occurs in message #{stray[0]}: {msgs[stray[0]].content[:200]!r}")
        if complete_at(fact, msgs) is None:
            raise AssertionError(f"{session.name}: fact {fact.fid} ({fact.kind}) is not complete in the session")


# -- dialects ---------------------------------------------------------------------------------------

_GENERIC = {"read": "read_file", "grep": "grep", "test": "run_shell", "shell": "run_shell", "edit": "edit_file"}


def to_messages(events: Iterable[Event], *, call_base: int = 0) -> list[Message]:
    out: list[Message] = []
    n = call_base
    for e in events:
        if e.kind == "user":
            out.append(user(e.text))
        elif e.kind == "answer":
            out.append(assistant(e.text))
        else:
            calls = []
            for c in e.calls:
                n += 1
                calls.append(ToolCall(f"call_{n:06d}", _GENERIC[c.tool], json.dumps(c.args, ensure_ascii=False)))
            out.append(assistant(e.text, *calls))
            out += [tool_result(tc.id, c.output, name=tc.name) for tc, c in zip(calls, e.calls)]
    return out


CWD = "/home/dev/shop"


def _numbered(text: str) -> str:
    return "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(text.splitlines()))


def to_claude_code(session: Session) -> str:
    """The session as a Claude Code session JSONL (``~/.claude/projects/<project>/<session>.jsonl``)."""
    rng = random.Random(f"cc:{session.seed}")
    sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    lines: list[str] = []
    state: dict[str, Any] = {"parent": None, "clock": 0}
    model = "claude-opus-4-5-20251101"

    def stamp() -> str:
        state["clock"] += rng.randint(1, 20)
        s = state["clock"]
        return f"2026-11-30T{9 + s // 3600 % 12:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{rng.randrange(1000):03d}Z"

    def entry(kind: str, message: dict[str, Any], **extra: Any) -> None:
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        e = {"parentUuid": state["parent"], "isSidechain": False, "userType": "external", "cwd": CWD, "sessionId": sid,
             "version": "2.0.31", "gitBranch": "fix-ledger", "type": kind, "uuid": uid, "timestamp": stamp(), "message": message, **extra}  # fmt: skip
        lines.append(json.dumps(e, ensure_ascii=False))
        state["parent"] = uid

    def usage() -> dict[str, Any]:
        return {"input_tokens": rng.randint(3, 40), "cache_creation_input_tokens": rng.randint(100, 3000),
                "cache_read_input_tokens": rng.randint(10_000, 90_000), "output_tokens": rng.randint(20, 600), "service_tier": "standard"}  # fmt: skip

    lines.append(json.dumps({"type": "file-history-snapshot", "messageId": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                             "snapshot": {"trackedFileBackups": {}, "timestamp": stamp()}, "isSnapshotUpdate": False}))
    entry("user", {"role": "user", "content": "Caveat: The messages below were generated by the user while running local commands. DO NOT respond to these messages or otherwise consider them in your response unless the user explicitly asks you to."}, isMeta=True)
    n = 0
    for e in session.events:
        if e.kind == "user":
            entry("user", {"role": "user", "content": e.text})
            continue
        msg_id, req = f"msg_01{rng.getrandbits(64):016x}", f"req_011C{rng.getrandbits(64):016x}"
        u = usage()
        blocks: list[dict[str, Any]] = []
        if e.kind == "round" and rng.random() < 0.4:
            blocks.append({"type": "thinking", "thinking": "Checking the next file before changing anything.", "signature": f"Eq{rng.getrandbits(96):x}"})
        blocks.append({"type": "text", "text": e.text})
        results = []
        for c in e.calls:
            n += 1
            cid = f"toolu_01{n:06d}{rng.getrandbits(40):010x}"
            p = f"{CWD}/{c.args['path']}" if "path" in c.args and c.tool in ("read", "edit") else None
            if c.tool == "read":
                name, args, content = "Read", {"file_path": p}, _numbered(c.output)
                detail: dict[str, Any] = {"type": "text", "file": {"filePath": p, "content": c.output[:200], "numLines": c.output.count("\n") + 1, "startLine": 1}}
            elif c.tool == "grep":
                name, args, content = "Grep", {"pattern": c.args["pattern"], "path": CWD, "output_mode": "content", "-n": True}, c.output
                detail = {"mode": "content", "numFiles": c.output.count("\n") + 1, "content": c.output}
            elif c.tool == "edit":
                name, args = "Edit", {"file_path": p, "old_string": c.args["old_string"], "new_string": c.args["new_string"]}
                content = f"The file {p} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{_numbered(c.args['new_string'])}"
                detail = {"filePath": p, "oldString": c.args["old_string"], "newString": c.args["new_string"], "userModified": False}
            else:
                name, args, content = "Bash", {"command": c.args["command"], "description": "Run " + c.args["command"].split()[0]}, c.output
                detail = {"stdout": c.output, "stderr": "", "interrupted": False, "isImage": False}
            blocks.append({"type": "tool_use", "id": cid, "name": name, "input": args})
            results.append((cid, content, detail, c.is_error))
        for i, block in enumerate(blocks):
            last = i == len(blocks) - 1
            entry("assistant", {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [block],
                                "stop_reason": ("tool_use" if results else "end_turn") if last else None, "stop_sequence": None, "usage": u}, requestId=req)
        for cid, content, detail, err in results:
            block = {"tool_use_id": cid, "type": "tool_result", "content": content}
            if err:
                block["is_error"] = True
            entry("user", {"role": "user", "content": [block]}, toolUseResult=detail)
    return "\n".join(lines) + "\n"


def to_codex(session: Session) -> str:
    """The session as a Codex CLI rollout (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``)."""
    rng = random.Random(f"codex:{session.seed}")
    lines: list[str] = []
    clock = [0]

    def put(kind: str, payload: dict[str, Any]) -> None:
        clock[0] += rng.randint(1, 9)
        s = clock[0]
        ts = f"2026-11-30T{10 + s // 3600 % 12:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{rng.randrange(1000):03d}Z"
        lines.append(json.dumps({"timestamp": ts, "type": kind, "payload": payload}, ensure_ascii=False))

    total = [0]

    def tokens() -> None:
        last = rng.randint(2000, 9000)
        total[0] += last
        usage = {"input_tokens": last, "cached_input_tokens": last // 2, "output_tokens": rng.randint(20, 500), "reasoning_output_tokens": 0, "total_tokens": last}
        put("event_msg", {"type": "token_count", "info": {"total_token_usage": {**usage, "input_tokens": total[0]}, "last_token_usage": usage, "model_context_window": 272000}})

    sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    put("session_meta", {"id": sid, "timestamp": "2026-11-30T10:00:00.000Z", "cwd": CWD, "originator": "codex_cli_rs", "cli_version": "0.63.0",
                         "instructions": SYSTEM_PROMPT, "source": "cli", "model_provider": "openai"})
    put("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"<environment_context>\n  <cwd>{CWD}</cwd>\n  <shell>bash</shell>\n</environment_context>"}]})
    put("turn_context", {"cwd": CWD, "approval_policy": "on-request", "sandbox_policy": {"mode": "workspace-write"}, "model": "gpt-5.1-codex", "effort": "medium", "summary": "auto"})
    n = 0
    for e in session.events:
        if e.kind == "user":
            put("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": e.text}]})
            put("event_msg", {"type": "user_message", "message": e.text, "images": []})
            continue
        put("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": e.text}]})
        outs = []
        for c in e.calls:
            n += 1
            cid = f"call_{rng.getrandbits(64):016x}{n}"
            if c.tool == "edit":
                patch = ("*** Begin Patch\n*** Update File: " + c.args["path"] + "\n@@\n" + "".join(f"-{x}\n" for x in c.args["old_string"].splitlines())
                         + "".join(f"+{x}\n" for x in c.args["new_string"].splitlines()) + "*** End Patch\n")
                put("response_item", {"type": "custom_tool_call", "status": "completed", "call_id": cid, "name": "apply_patch", "input": patch})
                outs.append(("custom_tool_call_output", cid, f"Success. Updated the following files:\nM {c.args['path']}\n"))
                continue
            if c.tool == "read":
                cmd = f"sed -n '1,400p' {c.args['path']}"
            elif c.tool == "grep":
                cmd = f"rg -n {c.args['pattern']} src"
            else:
                cmd = c.args["command"]
            put("response_item", {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", cmd], "workdir": CWD}), "call_id": cid})
            out = json.dumps({"output": c.output + "\n", "metadata": {"exit_code": 1 if c.is_error else 0, "duration_seconds": round(rng.random() * 3, 1)}}, ensure_ascii=False)
            outs.append(("function_call_output", cid, out))
        tokens()
        for kind, cid, out in outs:
            put("response_item", {"type": kind, "call_id": cid, "output": out})
    return "\n".join(lines) + "\n"
