"""``cline``: Cline, Roo Code and Kilo Code task folders (``…/globalStorage/<extension>/tasks/<task id>/``).

A task folder holds (all rewritten whole by the extension as the task goes on):

- ``api_conversation_history.json``: what is sent to the model. A list of Anthropic-style messages
  ``{role, content: str | [blocks], ts?}`` (Cline, Kilo, Roo before its v2), or Roo's versioned
  envelope ``{version: 2, messages: [...]}`` of AI SDK messages (roles ``user`` / ``assistant`` /
  ``tool``; parts ``text``, ``image``, ``file``, ``reasoning``, ``tool-call {toolCallId, toolName,
  input}``, ``tool-result {toolCallId, toolName, output}``; standalone ``{type: "reasoning",
  encrypted_content}`` items);
- ``ui_messages.json``: what the panel showed, ``[{ts, type: say | ask, say?, ask?, text?, partial?,
  conversationHistoryIndex?, conversationHistoryDeletedRange?, contextCondense?, contextTruncation?}]``;
- ``task_metadata.json`` (Cline, Kilo): ``{model_usage [{ts, model_id, model_provider_id, mode}],
  files_in_context, environment_history}``;
- ``history_item.json`` (Roo): the task's history entry ``{id, number, ts, task, workspace, mode,
  parentTaskId?, tokensIn, tokensOut, totalCost, …}``: a subtask (``new_task``) names its parent task,
  so its thread is keyed under the parent's.

Tool calls come three ways: Cline's classic XML tool tags in the assistant's text
(``<read_file><path>a.py</path></read_file>``), answered by user **text** blocks ``[read_file for
'a.py'] Result:`` followed by the result block; native ``tool_use`` blocks answered either by such
text blocks or by ``tool_result`` blocks; Roo v2 ``tool-call`` / ``tool-result`` parts. Text results
pair with the open calls of the assistant message before them, by name, then in order.

Mapping: every api message is a message (a user message split into its tool results and the rest);
synthetic user turns (``[TASK RESUMPTION]…``, ``[ERROR] You did not use a tool…``) are ``meta``;
``<task>…</task>`` gives the title. Each ``say: api_req_started`` ui record whose ``text`` is JSON
``{tokensIn, tokensOut, cacheWrites, cacheReads, cost, apiProtocol?}`` is a usage record on the
assistant message that answered it (by ``conversationHistoryIndex``, else by time); prompt = tokensIn
+ cacheReads + cacheWrites (``apiProtocol: "openai"``: tokensIn already counts the cache).

The tools' own compactions (recorded compactions, never messages):

- **Roo / Kilo condense**: an api message with ``isSummary`` (assistant in older versions; a user
  message ``## Conversation Summary …`` appended after all it replaced in the "fresh start" condense of
  Kilo and newer Roo; its text is the summary;
  ``condenseId`` names it and the messages it replaced carry ``condenseParent`` = that id, kept in the
  file since the non-destructive condense; an older destructive condense removed them from the file).
  The ``say: condense_context`` ui record with ``contextCondense {cost, prevContextTokens,
  newContextTokens, summary, condenseId?}`` gives tokens before / after and cost.
- **Roo sliding-window truncation**: a marker message (``isTruncationMarker``, ``truncationId``) hiding
  the messages with ``truncationParent``; ``say: sliding_window_truncation`` with ``contextTruncation``.
- **Cline**: its truncation keeps the file whole and records ``conversationHistoryDeletedRange
  [start, end]`` (inclusive api indexes) on the ui records; each time that range grows the messages
  it newly covers were dropped. When a ``summarize_task`` (auto-compact) or ``condense`` (``/smol``,
  manual) call just before wrote a summary (its ``context``), that is the compaction's summary;
  otherwise it is a plain truncation (summary: a note that Cline keeps none).

Source keys: ``<ts>`` of the api message (``i<index>`` without one), a split result ``<ts>:<call
id>``; the session id is the task folder's name. ``extra["tool"]`` is ``cline``, ``roo`` or ``kilo``
(from the extension folder, else from Roo's markers). The files are only read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from ._common import NameSet, SessionBuilder, Source, as_int, as_json_text, as_list, image_from_url, iso_from_ms, str_or_none
from .anthropic import ToolResultBlock, convert_blocks
from .jsonl import json_error_text
from .model import (
    DocumentPart,
    ImagePart,
    ImportedMessage,
    ImportedSession,
    ImportedToolCall,
    ImportFormatError,
    Part,
    ReasoningPart,
    TextPart,
    UsageRecord,
)

FORMAT = "cline"

API_FILE = "api_conversation_history.json"
UI_FILE = "ui_messages.json"
META_FILE = "task_metadata.json"
ITEM_FILE = "history_item.json"  # Roo: the task's history entry (task, workspace, parentTaskId, totals)
TASK_FILES = (API_FILE, UI_FILE, META_FILE, ITEM_FILE)

_EXTENSIONS = {"saoudrizwan.claude-dev": "cline", "rooveterinaryinc.roo-cline": "roo", "kilocode.kilo-code": "kilo"}
_EDITORS = ("Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf")

#: where the extensions keep their task folders: VS Code's (and forks') global storage per OS, the
#: remote server's, and the Cline CLI's ``~/.cline/data``
DEFAULT_LOCATIONS: list[str] = [
    *(f"{base}/{editor}/User/globalStorage/{ext}/tasks/*"
      for ext in _EXTENSIONS
      for base in (".config", "Library/Application Support", "AppData/Roaming")
      for editor in _EDITORS),
    *(f".vscode-server/data/User/globalStorage/{ext}/tasks/*" for ext in _EXTENSIONS),
    ".cline/data/tasks/*",
]

_RESULT_HEAD = re.compile(r"^\[([A-Za-z_][\w\-]*)(?:[ :][^\]\n]*)?\] Result:\s*", re.S)
_TASK = re.compile(r"<task>\s*(.*?)\s*</task>", re.S)
_CWD = re.compile(r"# Current (?:Working|Workspace) Directory \(([^)\n]+)\)")
#: Cline / Roo / Kilo tool names written as XML tags in classic (non-native) tool use
XML_TOOLS = NameSet({
    "read_file", "write_to_file", "replace_in_file", "apply_diff", "insert_content", "search_and_replace",
    "execute_command", "search_files", "list_files", "list_code_definition_names", "codebase_search",
    "browser_action", "use_mcp_tool", "access_mcp_resource", "ask_followup_question", "attempt_completion",
    "plan_mode_respond", "act_mode_respond", "new_task", "switch_mode", "fetch_instructions", "update_todo_list",
    "load_mcp_documentation", "web_fetch", "web_search", "condense", "summarize_task", "new_rule", "report_bug",
    "focus_chain", "edit_file", "run_slash_command", "generate_image",
})
_XML_CALL = re.compile(r"<(" + "|".join(sorted(XML_TOOLS, key=len, reverse=True)) + r")>(.*?)</\1>", re.S)
_XML_PARAM = re.compile(r"<([A-Za-z_][\w\-]*)>(.*?)</\1>", re.S)
SUMMARY_TOOLS = {"summarize_task": "auto", "condense": "manual"}
_META_PREFIXES = (("[TASK RESUMPTION]", "resumption"), ("<environment_details>", "environment_details"), ("[ERROR] You did not use a tool", "tool_use_reminder"),
                  ("[ERROR]", "error_notice"))
TRUNCATION_NOTE = ("(the tool dropped these messages to fit the context window; it keeps no summary of them, "
                   "only a notice that earlier history was removed)")
_UI_SKIPPED = NameSet({"api_req_started", "condense_context", "sliding_window_truncation"})


# -- detection -----------------------------------------------------------------------------------
def task_folder(path: Path) -> Path | None:
    """The task folder ``path`` is (or is a file of), judged from its files; ``None`` if it is not one."""
    folder = path if path.is_dir() else path.parent
    if path.is_file() and path.name not in TASK_FILES:
        return None
    if (folder / API_FILE).is_file() or (folder / UI_FILE).is_file():
        return folder
    return None


def _is_api_message(m: object) -> bool:
    return isinstance(m, Mapping) and m.get("role") in ("user", "assistant", "tool") and "content" in m


def looks_like(data: object) -> bool:
    """An ``api_conversation_history.json`` (entries carry ``ts`` or Roo's markers, or Roo's v2
    envelope) or a ``ui_messages.json`` (``{ts, type: say | ask}`` records)."""
    if isinstance(data, Mapping):
        return data.get("version") == 2 and isinstance(data.get("messages"), list) and all(
            _is_api_message(m) or (isinstance(m, Mapping) and m.get("type") == "reasoning") for m in data["messages"][:20])
    if not isinstance(data, list) or not data:
        return False
    head = [m for m in data[:20]]
    if all(isinstance(m, Mapping) and isinstance(m.get("ts"), (int, float)) and m.get("type") in ("say", "ask") for m in head):
        return True
    return all(_is_api_message(m) for m in head) and any(
        isinstance(m.get("ts"), (int, float)) or "isSummary" in m or "condenseParent" in m for m in head)


def looks_like_path(path: Path) -> bool:
    folder = task_folder(path)
    if folder is None:
        return False
    target = folder / API_FILE if (folder / API_FILE).is_file() else folder / UI_FILE
    try:
        return looks_like(json.loads(target.read_text(encoding="utf-8", errors="replace")))
    except (OSError, ValueError):
        return False


# -- parsing -------------------------------------------------------------------------------------
def _tool_of(folder: Path | None, api: list, ui: list) -> str:
    if folder is not None:
        for part in folder.parts:
            if part in _EXTENSIONS:
                return _EXTENSIONS[part]
    if any(isinstance(m, Mapping) and (m.get("isSummary") or m.get("condenseParent") or m.get("isTruncationMarker"))
           for m in api) or any(isinstance(r, Mapping) and r.get("say") in ("condense_context", "sliding_window_truncation")
                                for r in ui):
        return "roo"
    return "cline"


def _load(b: SessionBuilder, path: Path, expect: type) -> Any:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as exc:
        b.warn(f"{path.name}: not JSON ({json_error_text(exc, line=True)}); not read")
        return None
    except OSError as exc:
        b.warn(f"{path.name}: cannot read ({exc.strerror or exc})")
        return None
    if not isinstance(data, expect) and not (path.name == API_FILE and isinstance(data, Mapping)):
        b.warn(f"{path.name}: not a {expect.__name__}; not read")
        return None
    return data


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    folder: Path | None = None
    if source.path is not None:
        folder = task_folder(source.path)
        if folder is None:
            raise ImportFormatError(f"{source.name}: not a Cline / Roo Code / Kilo Code task folder "
                                    f"(no {API_FILE} or {UI_FILE})")
        source = Source(str(folder), path=folder)  # the session is the folder, whichever file was named
    b = SessionBuilder(FORMAT, source)
    if folder is not None:
        api_raw = _load(b, folder / API_FILE, list)
        ui = _load(b, folder / UI_FILE, list) or []
        meta = _load(b, folder / META_FILE, dict) or {}
        item = _load(b, folder / ITEM_FILE, dict) or {}
    else:  # text handed over: one api history or ui messages document
        data = source.load_json(FORMAT)
        item = {}
        api_raw, ui, meta = (data, [], {}) if not (isinstance(data, list) and data and isinstance(data[0], Mapping)
                                                     and data[0].get("type") in ("say", "ask")) else (None, data, {})
    if api_raw is None and not ui:
        raise ImportFormatError(f"{source.name}: no readable {API_FILE} or {UI_FILE}")
    if isinstance(api_raw, Mapping):
        api = [m for m in as_list(api_raw.get("messages"))]
        b.extra["history_version"] = api_raw.get("version")
    else:
        api = list(api_raw or [])
    ui = [r for r in ui if isinstance(r, Mapping)]
    tool = _tool_of(folder, api, ui)
    reader = _Reader(b, api, ui, meta)
    reader.read()
    sid = folder.name if folder is not None else "task"
    extra = {"tool": tool, **{k: v for k, v in reader.facts.items() if v is not None}}
    for k in ("mode", "totalCost", "tokensIn", "tokensOut", "number"):
        if item.get(k) is not None:
            extra[k] = item[k]
    return [b.build(final=final, source_session_id=sid, title=reader.title or str_or_none(item.get("task")),
                    model=reader.model, cwd=reader.cwd or str_or_none(item.get("workspace")),
                    parent_session_id=str_or_none(item.get("parentTaskId")), extra=extra)]


class _Reader:
    def __init__(self, b: SessionBuilder, api: list, ui: list[Mapping[str, Any]], meta: Mapping[str, Any]) -> None:
        self.b, self.api, self.ui, self.meta = b, api, ui, meta
        self.first_of: dict[int, int] = {}  # api index → builder index of its first message
        self.assistant_at: dict[int, int] = {}  # api index → builder index of its assistant message
        self.pending: list[ImportedToolCall] = []
        self._all_calls: list[ImportedToolCall] = []
        self.summary_calls: list[tuple[int, str, str]] = []  # (api index, trigger, context)
        self.title: str | None = None
        self.model: str | None = None
        self.cwd: str | None = None
        self.facts: dict[str, Any] = {}
        self.summaries: dict[str, tuple[int, str, Mapping[str, Any]]] = {}  # condenseId → (api index, summary, msg)
        self.markers: dict[str, tuple[int, str]] = {}  # truncationId → (api index, marker text)

    # the api history ------------------------------------------------------------------------
    def read(self) -> None:
        models = [u for u in as_list(self.meta.get("model_usage")) if isinstance(u, Mapping)]
        if models:
            self.model = str_or_none(models[-1].get("model_id"))
        for i, m in enumerate(self.api):
            if not isinstance(m, Mapping):
                self.b.warn(f"{API_FILE}: entry {i} is not a message; skipped")
                continue
            if m.get("type") == "reasoning" and "role" not in m:
                self.b.skipped["reasoning_item"] += 1  # an encrypted reasoning item between messages
                continue
            if m.get("isSummary"):
                self._summary(i, m)
                continue
            if m.get("isTruncationMarker"):
                self.markers[str(m.get("truncationId") or f"t{i}")] = (i, self._plain(m.get("content")))
                continue
            role = m.get("role")
            if role == "assistant":
                self._assistant(i, m)
            elif role == "user":
                self._user(i, m)
            elif role == "tool":
                self._tool_message(i, m)
            else:
                self.b.unknown[f"role:{role}"] += 1
        self._usage()
        self._roo_compactions()
        self._cline_truncations()

    def _key(self, i: int, m: Mapping[str, Any]) -> str:
        ts = m.get("ts")
        return str(int(ts)) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else f"i{i}"

    @staticmethod
    def _plain(content: object) -> str:
        if isinstance(content, str):
            return content
        return "\n\n".join(str(p.get("text")) for p in as_list(content)
                           if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str))

    def _summary(self, i: int, m: Mapping[str, Any]) -> None:
        cid = str(m.get("condenseId") or f"summary@{self._key(i, m)}")
        self.summaries[cid] = (i, self._plain(m.get("content")), m)

    def _parts_and_calls(self, content: object) -> tuple[list[Part], list[ImportedToolCall], list[ToolResultBlock]]:
        """Anthropic blocks or AI SDK parts → parts, calls, results."""
        parts: list[Part] = []
        calls: list[ImportedToolCall] = []
        results: list[ToolResultBlock] = []
        if isinstance(content, list) and any(isinstance(p, Mapping) and p.get("type") in ("tool-call", "tool-result", "reasoning", "file")
                                             for p in content):
            for n, p in enumerate(content):
                if not isinstance(p, Mapping):
                    continue
                t = p.get("type")
                if t == "text" and isinstance(p.get("text"), str):
                    parts.append(TextPart(p["text"]))
                elif t == "reasoning":
                    parts.append(ReasoningPart(str(p.get("text") or ""), encrypted=bool(p.get("encrypted_content"))))
                elif t == "tool-call" or t == "tool_use":
                    cid = p.get("toolCallId") or p.get("id")
                    calls.append(ImportedToolCall(id=str(cid or f"call_{n}"), name=str(p.get("toolName") or p.get("name") or "?"),
                                                  arguments=as_json_text(p.get("input") if p.get("input") is not None else {}),
                                                  synthetic_id=not cid))
                elif t == "tool-result" or t == "tool_result":
                    text, err = _sdk_output(p.get("output") if t == "tool-result" else p.get("content"))
                    results.append(ToolResultBlock(str(p.get("toolCallId") or p.get("tool_use_id") or ""),
                                                   [TextPart(text)] if text else [], err or bool(p.get("is_error")), n))
                elif t == "image":
                    img = p.get("image")
                    parts.append(image_from_url(img if isinstance(img, str) else None, str_or_none(p.get("mediaType"))))
                elif t == "file":
                    parts.append(DocumentPart(media_type=str_or_none(p.get("mediaType")), byte_size=None,
                                              title=str_or_none(p.get("filename"))))
                else:
                    self.b.unknown[f"part:{t}"] += 1
            return parts, calls, results
        conv = convert_blocks(content)
        for u in conv.unknown:
            self.b.unknown[u] += 1
        for item in conv.items:
            if isinstance(item, ImportedToolCall):
                calls.append(item)
            elif isinstance(item, ToolResultBlock):
                results.append(item)
            elif isinstance(item, (ReasoningPart, TextPart, ImagePart, DocumentPart)):
                parts.append(item)
        return parts, calls, results

    def _assistant(self, i: int, m: Mapping[str, Any]) -> None:
        key = self._key(i, m)
        parts, calls, _ = self._parts_and_calls(m.get("content"))
        if not calls:  # classic: XML tool tags in the text
            kept: list[Part] = []
            for p in parts:
                if isinstance(p, TextPart) and _XML_CALL.search(p.text):
                    for match in _XML_CALL.finditer(p.text):
                        params = {k: v.strip("\n") for k, v in _XML_PARAM.findall(match.group(2))}
                        calls.append(ImportedToolCall(id=f"{key}#{len(calls)}", name=match.group(1),
                                                      arguments=json.dumps(params, ensure_ascii=False), synthetic_id=True))
                    rest = _XML_CALL.sub("", p.text).strip()
                    if rest:
                        kept.append(TextPart(rest))
                else:
                    kept.append(p)
            parts = kept
        for c in calls:
            if c.name in SUMMARY_TOOLS:
                try:
                    ctx = json.loads(c.arguments).get("context")
                except (ValueError, AttributeError):
                    ctx = None
                if isinstance(ctx, str) and ctx.strip():
                    self.summary_calls.append((i, SUMMARY_TOOLS[c.name], ctx.strip()))
        model = None
        info = m.get("modelInfo")
        if isinstance(info, Mapping):
            model = str_or_none(info.get("modelId"))
        idx = self.b.add(ImportedMessage(role="assistant", parts=tuple(parts), tool_calls=tuple(calls), source_key=key,
                                         timestamp=iso_from_ms(m.get("ts")), model=model or None,
                                         details={"condensed_by": m["condenseParent"]} if m.get("condenseParent") else {}))
        self.first_of[i] = idx
        self.assistant_at[i] = idx
        self.pending = list(calls)
        self._all_calls.extend(calls)

    def _take_call(self, name: str | None, wanted_id: str | None = None) -> ImportedToolCall | None:
        """The open call a result answers: by id, else by name, else the first open one (Cline writes
        the placeholder id ``cline`` when it lost the provider's)."""
        for match in (lambda c: bool(wanted_id) and c.id == wanted_id, lambda c: bool(name) and c.name == name):
            for c in self.pending:
                if match(c):
                    self.pending.remove(c)
                    return c
        if self.pending and (wanted_id is None or not any(c.id == wanted_id for c in self._all_calls)):
            return self.pending.pop(0)
        return None

    def _user(self, i: int, m: Mapping[str, Any]) -> None:
        key = self._key(i, m)
        ts = iso_from_ms(m.get("ts"))
        details = {"condensed_by": m["condenseParent"]} if m.get("condenseParent") else {}
        if m.get("truncationParent"):
            details = {**details, "truncated_by": m["truncationParent"]}
        content = m.get("content")
        parts, _, results = self._parts_and_calls(content)
        start = len(self.b.messages)
        for r in results:
            call = self._take_call(None, r.tool_use_id or None)
            cid = call.id if call else (r.tool_use_id or f"{key}:r{r.index}")
            extra = {"source_tool_use_id": r.tool_use_id} if call and r.tool_use_id and r.tool_use_id != call.id else {}
            self.b.add(ImportedMessage(role="tool", parts=tuple(r.parts), tool_call_id=cid,
                                       tool_name=call.name if call else None, is_error=r.is_error,
                                       source_key=f"{key}:{r.tool_use_id or cid}" if not extra else f"{key}:{cid}",
                                       timestamp=ts, details={**details, **extra}))
        # text results: "[name for '…'] Result:" then the result block(s)
        rest: list[Part] = []
        n = 0
        j = 0
        while j < len(parts):
            p = parts[j]
            if not isinstance(p, TextPart) or (head := _RESULT_HEAD.match(p.text)) is None:
                rest.append(p)
                j += 1
                continue
            name = head.group(1)
            body: list[Part] = []
            inline = p.text[head.end():]
            if inline.strip():
                body.append(TextPart(inline))
            j += 1
            following = parts[j] if j < len(parts) else None
            if not body and isinstance(following, TextPart) and not _RESULT_HEAD.match(following.text):
                body.append(following)
                j += 1
            while j < len(parts) and isinstance(parts[j], (ImagePart, DocumentPart)):
                body.append(parts[j])
                j += 1
            call = self._take_call(name)
            cid = call.id if call else f"{key}:t{n}"
            text = "\n".join(x.text for x in body if isinstance(x, TextPart))
            err = text.lstrip().startswith(("The user denied this operation", "[ERROR]", "Error:", "Error executing"))
            self.b.add(ImportedMessage(role="tool", parts=tuple(body), tool_call_id=cid,
                                       tool_name=call.name if call else name, is_error=err,
                                       source_key=f"{key}:{cid}" if call else f"{key}:t{n}", timestamp=ts,
                                       details={**details, "result_header": head.group(0).strip()}))
            n += 1
        if rest:
            text = "\n\n".join(x.text for x in rest if isinstance(x, TextPart)).lstrip()
            if self.cwd is None and (cwd := _CWD.search(text)):
                self.cwd = cwd.group(1).strip()
            meta_kind = next((kind for prefix, kind in _META_PREFIXES if text.startswith(prefix)), None)
            if self.title is None and meta_kind is None:
                found = _TASK.search(text)
                if found:
                    self.title = " ".join(found.group(1).split())[:200] or None
            self.b.add(ImportedMessage(role="user", parts=tuple(rest), source_key=key, timestamp=ts,
                                       meta=meta_kind is not None, meta_kind=meta_kind, details=details))
        if len(self.b.messages) > start:
            self.first_of[i] = start
        self.pending = []

    def _tool_message(self, i: int, m: Mapping[str, Any]) -> None:
        """A Roo v2 ``tool`` message: its ``tool-result`` parts."""
        key = self._key(i, m)
        _, _, results = self._parts_and_calls(m.get("content"))
        start = len(self.b.messages)
        for r in results:
            call = self._take_call(None, r.tool_use_id or None)
            self.b.add(ImportedMessage(role="tool", parts=tuple(r.parts), tool_call_id=r.tool_use_id or (call.id if call else f"{key}:r{r.index}"),
                                       tool_name=call.name if call else None, is_error=r.is_error,
                                       source_key=f"{key}:{r.tool_use_id or r.index}", timestamp=iso_from_ms(m.get("ts"))))
        if len(self.b.messages) > start:
            self.first_of.setdefault(i, start)

    # usage ------------------------------------------------------------------------------------
    def _position_after(self, api_index: int | None, ts: object) -> int | None:
        """The builder index of the assistant message answering a request made at ``api_index`` /
        ``ts``."""
        if api_index is not None:
            for i in sorted(self.assistant_at):
                if i > api_index:
                    return self.assistant_at[i]
            return None
        if isinstance(ts, (int, float)):
            for i in sorted(self.assistant_at):
                at = self.api[i].get("ts") if isinstance(self.api[i], Mapping) else None
                if isinstance(at, (int, float)) and at >= ts:
                    return self.assistant_at[i]
        return None

    def _usage(self) -> None:
        used: set[int] = set()
        models = sorted(((u["ts"], str_or_none(u.get("model_id"))) for u in as_list(self.meta.get("model_usage"))
                         if isinstance(u, Mapping) and isinstance(u.get("ts"), (int, float))), key=lambda x: x[0])
        for r in self.ui:
            if r.get("say") != "api_req_started" or not isinstance(r.get("text"), str):
                continue
            try:
                info = json.loads(r["text"])
            except ValueError:
                self.b.warn(f"{UI_FILE}: api_req_started at ts {r.get('ts')} holds no JSON; its usage is not read")
                continue
            if not isinstance(info, Mapping):
                continue
            tin, tout = as_int(info.get("tokensIn")), as_int(info.get("tokensOut"))
            if tin is None and tout is None:
                continue  # cancelled before any usage
            reads, writes = as_int(info.get("cacheReads")) or 0, as_int(info.get("cacheWrites")) or 0
            if not (tin or tout or reads or writes):
                self.b.skipped["empty_request"] += 1  # cancelled or failed before the provider counted anything
                continue
            prompt = (tin or 0) if info.get("apiProtocol") == "openai" else (tin or 0) + reads + writes
            pos = self._position_after(as_int(r.get("conversationHistoryIndex")), r.get("ts"))
            if pos is None or pos in used:
                self.b.skipped["usage_without_reply"] += 1
                continue
            used.add(pos)
            model = None
            mi = r.get("modelInfo")
            if isinstance(mi, Mapping):
                model = str_or_none(mi.get("modelId"))
            if model is None and models:
                earlier = [mid for t, mid in models if t <= r.get("ts", 0) and mid]
                model = earlier[-1] if earlier else None
            self.b.usage(UsageRecord(position=pos, prompt_tokens=prompt, completion_tokens=tout,
                                     cache_read_tokens=reads or None, cache_creation_tokens=writes or None,
                                     model=model or self.model, timestamp=iso_from_ms(r.get("ts"))))
            self.facts["cost"] = round(float(self.facts.get("cost") or 0) + float(info.get("cost") or 0), 6)

    def _prompt_before(self, ts: object) -> int | None:
        """The context the last request before ``ts`` reported (its prompt + output)."""
        best = None
        for r in self.ui:
            if r.get("say") != "api_req_started" or not isinstance(r.get("text"), str):
                continue
            if isinstance(ts, (int, float)) and isinstance(r.get("ts"), (int, float)) and r["ts"] >= ts:
                break
            try:
                info = json.loads(r["text"])
            except ValueError:
                continue
            if isinstance(info, Mapping) and as_int(info.get("tokensIn")) is not None:
                reads, writes = as_int(info.get("cacheReads")) or 0, as_int(info.get("cacheWrites")) or 0
                best = (as_int(info.get("tokensIn")) or 0) + (as_int(info.get("tokensOut")) or 0) + (
                    0 if info.get("apiProtocol") == "openai" else reads + writes)
        return best

    # compactions ------------------------------------------------------------------------------
    def _span(self, api_indexes: list[int]) -> tuple[int, int, tuple[str, ...]]:
        idx = sorted(self.first_of[i] for i in api_indexes if i in self.first_of)
        if not idx:
            return 0, 0, ()
        end = max(self.first_of.get(i, 0) for i in api_indexes if i in self.first_of)
        # the last replaced api message may have been split into several messages: span them all
        nxt = [self.first_of[i] for i in self.first_of if self.first_of[i] > end]
        end_excl = min(nxt) if nxt else len(self.b.messages)
        keys = tuple(self.b.messages[k].source_key for k in range(idx[0], end_excl))
        return idx[0], end_excl, keys

    def _insert_at(self, api_index: int) -> int:
        later = [self.first_of[i] for i in self.first_of if i > api_index]
        return min(later) if later else len(self.b.messages)

    def _roo_compactions(self) -> None:
        condenses = [r for r in self.ui if r.get("say") == "condense_context" and isinstance(r.get("contextCondense"), Mapping)]
        by_id = {str(r["contextCondense"].get("condenseId")): r for r in condenses if r["contextCondense"].get("condenseId")}
        loose = [r for r in condenses if not r["contextCondense"].get("condenseId")]
        for cid, (i, summary, m) in sorted(self.summaries.items(), key=lambda kv: kv[1][0]):
            rec = by_id.get(cid) or (loose.pop(0) if loose else None)
            cc = rec["contextCondense"] if rec is not None else {}
            replaced = [j for j, x in enumerate(self.api) if isinstance(x, Mapping) and x.get("condenseParent") == cid]
            start, end, keys = self._span(replaced)
            pos = self._insert_at(i)
            if not replaced:
                start = end = pos
            details: dict[str, Any] = {"replaced_messages": len(replaced)}
            if not replaced:
                details["note"] = "the condensed messages were removed from the file (destructive condense)"
            for k in ("newContextTokens", "cost"):
                if cc.get(k) is not None:
                    details[k] = cc[k]
            self.b.compaction(position=pos, replaced_start=start, replaced_end=end, trigger=None,
                              tokens_before=as_int(cc.get("prevContextTokens")), summary=summary or str_or_none(cc.get("summary")),
                              source_id=f"condense:{cid}", timestamp=iso_from_ms(rec.get("ts") if rec is not None else m.get("ts")),
                              forgotten_ids=keys, details=details)
        truncs = {str(r["contextTruncation"].get("truncationId")): r for r in self.ui
                  if r.get("say") == "sliding_window_truncation" and isinstance(r.get("contextTruncation"), Mapping)}
        for tid, (i, text) in sorted(self.markers.items(), key=lambda kv: kv[1][0]):
            rec = truncs.get(tid)
            ct = rec["contextTruncation"] if rec is not None else {}
            replaced = [j for j, x in enumerate(self.api) if isinstance(x, Mapping) and x.get("truncationParent") == tid]
            start, end, keys = self._span(replaced)
            pos = self._insert_at(i)
            if not replaced:
                start = end = pos
            self.b.compaction(position=pos, replaced_start=start, replaced_end=end, trigger="auto",
                              tokens_before=as_int(ct.get("prevContextTokens")), summary=text or TRUNCATION_NOTE,
                              source_id=f"truncation:{tid}", timestamp=iso_from_ms(rec.get("ts") if rec else None),
                              forgotten_ids=keys,
                              details={"strategy": "sliding window truncation", "replaced_messages": len(replaced),
                                       **({"newContextTokens": ct["newContextTokens"]} if ct.get("newContextTokens") is not None else {})})

    def _cline_truncations(self) -> None:
        prev_end = 0
        calls = list(self.summary_calls)
        for r in self.ui:
            rng = r.get("conversationHistoryDeletedRange")
            if not (isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in rng)):
                continue
            start, end = rng
            if end <= prev_end:
                continue
            newly = [j for j in range(max(start, prev_end + 1), end + 1) if j < len(self.api)]
            prev_end = end
            if not newly:
                continue
            at = as_int(r.get("conversationHistoryIndex"))
            if at is None:
                ts = r.get("ts")
                at = max((j for j, x in enumerate(self.api) if isinstance(x, Mapping) and isinstance(x.get("ts"), (int, float))
                          and isinstance(ts, (int, float)) and x["ts"] <= ts), default=end)
            at = max(at, end)
            summary_call = None
            while calls and calls[0][0] <= at:
                summary_call = calls.pop(0)
            s, e, keys = self._span(newly)
            pos = self._insert_at(at)
            trigger, summary = ("auto", TRUNCATION_NOTE) if summary_call is None else (summary_call[1], summary_call[2])
            self.b.compaction(position=pos, replaced_start=s, replaced_end=e, trigger=trigger,
                              tokens_before=self._prompt_before(r.get("ts")), summary=summary,
                              source_id=f"deleted-range:{start}-{end}", timestamp=iso_from_ms(r.get("ts")), forgotten_ids=keys,
                              details={"strategy": "summarize_task" if summary_call and summary_call[1] == "auto" else
                                       "condense" if summary_call else "truncation",
                                       "deleted_range": [start, end], "replaced_messages": len(newly)})


def _sdk_output(output: object) -> tuple[str, bool]:
    """An AI SDK tool-result ``output`` (``{type: text | json | error-text | content, value}``) or an
    Anthropic ``tool_result`` content → (text, is_error)."""
    if isinstance(output, str):
        return output, output.lstrip().startswith("[ERROR]")
    if isinstance(output, Mapping):
        kind = output.get("type")
        value = output.get("value")
        if kind in ("error-text", "error-json"):
            return (value if isinstance(value, str) else as_json_text(value)), True
        if kind == "content":
            return "\n".join(str(v.get("text")) for v in as_list(value) if isinstance(v, Mapping) and v.get("text")), False
        if isinstance(value, str):
            return value, value.lstrip().startswith("[ERROR]")
        return as_json_text(value if value is not None else dict(output)), False
    if isinstance(output, list):
        return "\n".join(str(v.get("text")) for v in output if isinstance(v, Mapping) and isinstance(v.get("text"), str)), False
    return "", False


__all__ = ["FORMAT", "DEFAULT_LOCATIONS", "looks_like", "looks_like_path", "task_folder", "parse"]
