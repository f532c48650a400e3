"""The detail pane: one message in full (with its reasoning, attachments, error and meta marks), a
pruned result beside its verified original, the summary card of the boundary, or the card of a
compaction the source recorded."""

from __future__ import annotations

import json

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFrame, QLabel, QPlainTextEdit, QSizePolicy, QSplitter, QStackedWidget, QVBoxLayout, QWidget
from PySide6.QtCore import Qt

from engine.messages import Message
from engine.views import Offload, SourceCompaction, StoredMessage

from .. import theme
from ..models.timeline import BoundaryInfo, message_markers
from ..timeline.pages import attachment_line, source_name

PREVIEW_TITLE = "What the model sees (preview)"
ORIGINAL_TITLE = "Original from the Workdir"


def pretty(text: str) -> str:
    """JSON text pretty-printed; anything else unchanged."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def message_body(m: Message) -> str:
    """The full text of a message: what kind of message it is when it is not plain (a meta message,
    an error result), its reasoning blocks (marked as such), content (pretty JSON when it is
    JSON), its attachments (kind, media type, size: never the bytes) and each tool call."""
    parts: list[str] = []
    if m.meta_kind:
        parts.append(f"[meta: {m.meta_kind}] not a request: the source recorded this in the user's or system's name")
    if m.is_error:
        parts.append("[error] the tool reported a failure")
    for i, r in enumerate(m.reasoning, 1):
        head = f"── thinking {i}/{len(m.reasoning)}" + (" (redacted by the provider)" if r.redacted else "") + (" · encrypted blob kept" if r.encrypted else "")
        body = r.text or r.summary or ("(withheld)" if r.redacted or r.encrypted else "(empty)")
        if r.summary and r.text:
            body += f"\n(summary) {r.summary}"
        parts.append(f"{head}\n{body}\n──")
    if m.content:
        parts.append(pretty(m.content))
    for a in m.attachments:
        parts.append(attachment_line(a) + " (the bytes are not stored; their token cost is counted)")
    for call in m.tool_calls:
        parsed = call.parsed_arguments()
        args = json.dumps(parsed, indent=2, ensure_ascii=False) if parsed is not None else call.arguments + "\n(malformed JSON arguments)"
        parts.append(f"→ {call.name}  [{call.id}]\n{args}")
    return "\n\n".join(parts) or "(empty)"


def _text_view(object_name: str) -> QPlainTextEdit:
    view = QPlainTextEdit()
    view.setObjectName(object_name)
    view.setReadOnly(True)
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    return view


class DetailPane(QWidget):
    """Shows the selected timeline row in full."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("detailPane")
        self.header = QLabel("Select a message in the timeline")
        self.header.setObjectName("sectionTitle")
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.body = _text_view("detailBody")

        self.preview = _text_view("previewText")
        self.original = _text_view("originalText")
        self.original_status = QLabel()
        self.original_status.setWordWrap(True)
        self.original_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        pruned = QWidget()
        lay = QVBoxLayout(pruned)
        lay.setContentsMargins(0, 0, 0, 0)
        split = QSplitter(Qt.Orientation.Vertical)
        self.preview_title = QLabel(PREVIEW_TITLE)
        self.original_title = QLabel(ORIGINAL_TITLE)
        for label, view in ((self.preview_title, self.preview), (self.original_title, self.original)):
            box = QWidget()
            bl = QVBoxLayout(box)
            bl.setContentsMargins(0, 4, 0, 0)
            label.setObjectName("sectionTitle")
            bl.addWidget(label)
            if view is self.original:
                bl.addWidget(self.original_status)
            bl.addWidget(view)
            split.addWidget(box)
        lay.addWidget(split)

        self.card = QFrame()
        self.card.setObjectName("summaryCard")
        card_layout = QVBoxLayout(self.card)
        self.card_title = QLabel()
        self.card_title.setObjectName("sectionTitle")
        self.card_title.setWordWrap(True)
        self.card_text = _text_view("summaryText")
        card_layout.addWidget(self.card_title)
        card_layout.addWidget(self.card_text)

        self.stack = QStackedWidget()
        for w in (self.body, pruned, self.card):
            self.stack.addWidget(w)
        self._pruned_page = pruned

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.header)
        layout.addWidget(self.stack, 1)
        self._offload: Offload | None = None
        self._sizes: tuple[int | None, int | None] = (None, None)
        for label in (self.header, self.original_status, self.card_title):
            # long paths and hashes must wrap or clip, never widen the window
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    # -- content -------------------------------------------------------------------------------
    def clear(self) -> None:
        self.header.setText("Select a message in the timeline")
        self.body.setPlainText("")
        self.stack.setCurrentWidget(self.body)
        self._offload = None

    def show_text(self, title: str, text: str) -> None:
        """A unit or round: a title and a plain description."""
        self._offload = None
        self.header.setText(title)
        self.body.setPlainText(text)
        self.stack.setCurrentWidget(self.body)

    def show_message(self, stored: StoredMessage, offload: Offload | None = None, *, tokens: int | None = None, original_tokens: int | None = None) -> None:
        """A message in full; a pruned tool result shows the preview and waits for the original.

        ``tokens`` is what the model sees of the message, ``original_tokens`` its full size when pruned."""
        m = stored.message
        bits = [m.role, f"#{stored.id}"]
        if m.name:
            bits.append(m.name)
        if m.tool_call_id:
            bits.append(f"answers {m.tool_call_id}")
        stamp = m.metadata.get("source_timestamp")
        if isinstance(stamp, str):
            bits.append(f"source {stamp[:19]}")
        bits.append(stored.created_at.strftime("%Y-%m-%d %H:%M:%S"))
        bits.extend(message_markers(stored))
        if tokens is not None:
            bits.append(f"{original_tokens:,} → {tokens:,} tokens" if original_tokens is not None else f"{tokens:,} tokens")
        self.header.setText(" · ".join(bits))
        self._offload = offload
        self._sizes = (original_tokens, tokens)
        if offload is None:
            self.body.setPlainText(message_body(m))
            self.stack.setCurrentWidget(self.body)
            return
        self.preview.setPlainText(offload.preview)
        self.preview_title.setText(f"{PREVIEW_TITLE} · {tokens if tokens is not None else offload.preview_tokens:,} tokens")
        self.original_title.setText(f"{ORIGINAL_TITLE} · {original_tokens if original_tokens is not None else offload.original_tokens:,} tokens")
        self.original.setPlainText("")
        self.original_status.setObjectName("muted")
        self.original_status.setText("Reading the original from the Workdir …")
        self._restyle(self.original_status)
        self.stack.setCurrentWidget(self._pruned_page)

    def show_original(self, offload: Offload, text: str) -> None:
        """The original, read through the service with its SHA-256 verified."""
        if offload != self._offload:
            return
        self.original.setPlainText(pretty(text))
        self.original_status.setObjectName("okText")
        full, seen = self._sizes
        full = offload.original_tokens if full is None else full
        seen = offload.preview_tokens if seen is None else seen
        self.original_status.setText(f"✓ SHA-256 verified ({offload.sha256[:16]}…) · the model sees {seen:,} of {full:,} tokens")
        self.original_status.setToolTip(f"SHA-256 {offload.sha256}\n{offload.path}")
        self._restyle(self.original_status)

    def show_original_error(self, offload: Offload, message: str) -> None:
        """The original could not be read or did not verify: say so, show nothing unverified."""
        if offload != self._offload:
            return
        self.original.setPlainText("")
        self.original_status.setObjectName("errorText")
        self.original_status.setText(f"Original not available: {message}")
        self._restyle(self.original_status)

    def show_boundary(self, info: BoundaryInfo) -> None:
        """The summary card: text, tokens, generation, when and why."""
        self._offload = None
        self.header.setText("Compaction boundary")
        why = " / ".join(filter(None, (info.kind, info.trigger))) or "unknown"
        when = info.updated_at.strftime("%Y-%m-%d %H:%M:%S") if info.updated_at else "unknown"
        lines = [
            f"History up to #{info.boundary} is represented only by this summary.",
            f"{info.summary_tokens:,} tokens · generation {info.generation} · {info.compact_count} {'summary' if info.compact_count == 1 else 'summaries'} · {why} · {when}",
        ]
        if info.tokens_before is not None and info.tokens_after is not None:
            lines.append(f"envelope {info.tokens_before:,} → {info.tokens_after:,} tokens")
        self.card_title.setText("\n".join(lines))
        self.card_text.setPlainText(info.summary or "(no summary text recorded)")
        self.card.setProperty("source", False)
        self.card.setStyleSheet("")  # our boundary: the theme's summary card
        self.stack.setCurrentWidget(self.card)

    def show_source_compaction(self, sc: SourceCompaction) -> None:
        """The card of a compaction the source recorded: who, trigger, tokens before, what it
        replaced and kept, and its summary text."""
        self._offload = None
        who = source_name(sc.source)
        self.header.setText(f"Recorded by {who}")
        what = "compaction (summary)" if sc.kind == "summary" else "microcompaction (pruned tool results)"
        lines = [
            f"A {what} that {who} recorded itself, not one of ours: the messages stay in the thread and our engine can compact them to compare.",
            " · ".join(filter(None, (
                f"tokens before {sc.tokens_before:,}" if sc.tokens_before is not None else "tokens before: not recorded",
                f"trigger {sc.trigger}" if sc.trigger else "trigger: not recorded",
                sc.source_timestamp and f"at {sc.source_timestamp}",
            ))),
        ]  # fmt: skip
        where = f"after #{sc.after_message_id}" if sc.after_message_id is not None else "before the first imported message"
        if sc.replaced_first_id is not None:
            where += f"; replaced #{sc.replaced_first_id}–#{sc.replaced_last_id}"
        lines.append(where)
        if sc.kept:
            lines.append(f"kept {len(sc.kept)} item(s) beside the summary")
        if sc.forgotten:
            lines.append(f"forgot {len(sc.forgotten)} item(s)")
        self.card_title.setText("\n".join(lines))
        text = sc.summary if sc.summary is not None else "(the source kept this summary only encrypted)"
        kept = "\n".join(f"[{k.get('role', '?')}] {k.get('text', '')}" for k in sc.kept)
        self.card_text.setPlainText(text + (f"\n\n── kept ──\n{kept}" if kept else ""))
        self.card.setProperty("source", True)
        info, tint = theme.color("info"), theme.color("info")
        tint.setAlpha(30)  # the source's colour, never our boundary's
        self.card.setStyleSheet(
            f"QFrame#summaryCard {{ background: rgba({tint.red()}, {tint.green()}, {tint.blue()}, {tint.alpha()}); border: 1px solid {info.name()}; }}"
            f"QFrame#summaryCard QLabel {{ color: {info.name()}; }}"
        )
        self.stack.setCurrentWidget(self.card)

    @property
    def showing_pruned(self) -> bool:
        return self.stack.currentWidget() is self._pruned_page

    @staticmethod
    def _restyle(widget: QWidget) -> None:
        widget.style().unpolish(widget)
        widget.style().polish(widget)
