"""The detail pane: one message in full (with its reasoning, attachments, error and meta marks), a
pruned result beside its verified original, the summary card of the boundary, or the card of a
compaction the source recorded.

Both cards say which *specifics* (identifiers, paths, URLs, commands, quantities, errors,
decisions) the compaction dropped: a count, a warning when the current request or the retained
tail still refers to one of them, and the full list on demand. For our boundary they come from the
``summary`` event's data (``specifics_seen``, ``dropped_specifics``, ``dropped_referenced``,
``dropped``, ``dropped_truncated``: docs/events.md), for a source's compaction from
``Service.reads.compaction_diff(...).dropped``. :class:`DroppedView` reads either without Qt; a field that
is missing says "not recorded", one that cannot be read says so in place."""

from __future__ import annotations

import json
from typing import Any, Callable

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.core import figures
from engine.core.messages import Message
from engine.core.views import Offload, SourceCompaction, StoredMessage

from ... import theme
from ...logic.timeline.pages import attachment_line, source_name
from ...models.timeline import BoundaryInfo, message_markers
from ...widgets.dropped import DroppedList, DroppedModel, DroppedView

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

    #: the card of a source's compaction is shown: its dropped specifics are to be read
    #: (answer with :meth:`set_source_dropped`)
    sourceCardShown = Signal(object)
    #: our boundary's card is shown (the BoundaryInfo): Revert's state is to be read (issue 23)
    boundaryCardShown = Signal(object)
    #: Revert (or Redo) was pressed on the summary card: the reason typed beside it
    revertRequested = Signal(str)

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
        self.copy_button = QPushButton("Copy")
        self.copy_button.setObjectName("copySummary")
        self.copy_button.setToolTip("Copy the summary text to the clipboard")
        self.copy_button.clicked.connect(self.copy_summary)
        top = QHBoxLayout()
        top.addWidget(self.card_title, 1)
        top.addWidget(self.copy_button, 0, Qt.AlignmentFlag.AlignTop)
        self.dropped_label = QLabel()
        self.dropped_label.setObjectName("droppedCount")
        self.dropped_label.setWordWrap(True)
        self.dropped_warning_icon = QLabel()
        self.dropped_warning = QLabel()
        self.dropped_warning.setObjectName("droppedWarning")
        self.dropped_warning.setWordWrap(True)
        self.dropped_error = QLabel()
        self.dropped_error.setObjectName("droppedError")
        self.dropped_error.setWordWrap(True)
        self.dropped_toggle = QToolButton()
        self.dropped_toggle.setObjectName("droppedToggle")
        self.dropped_toggle.setCheckable(True)
        self.dropped_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.dropped_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.dropped_toggle.toggled.connect(self._toggle_dropped)
        self.dropped_model = DroppedModel(self)
        self.dropped_view = DroppedList(self.dropped_model, "droppedList")
        self.dropped_view.hide()
        warn_row = QHBoxLayout()
        warn_row.setContentsMargins(0, 0, 0, 0)
        warn_row.addWidget(self.dropped_warning_icon, 0, Qt.AlignmentFlag.AlignTop)
        warn_row.addWidget(self.dropped_warning, 1)
        self._warn_box = QWidget()
        self._warn_box.setLayout(warn_row)
        self.card_text = _text_view("summaryText")
        self.card_split = QSplitter(Qt.Orientation.Vertical)
        self.card_split.addWidget(self.dropped_view)
        self.card_split.addWidget(self.card_text)
        self.card_split.setChildrenCollapsible(False)
        card_layout.addLayout(top)
        # issue 23: revert the last compaction (of a revert: redo it), with the reason for the audit log
        self.revert_reason = QLineEdit()
        self.revert_reason.setObjectName("revertReason")
        self.revert_reason.setPlaceholderText("Reason (optional, recorded in the audit log)")
        self.revert_button = QPushButton("Revert")
        self.revert_button.setObjectName("revertCompaction")
        self.revert_button.setEnabled(False)
        self.revert_button.setToolTip("Reading whether the last compaction can be reverted…")
        self.revert_button.clicked.connect(lambda: self.revertRequested.emit(self.revert_reason.text().strip()))
        revert_row = QHBoxLayout()
        revert_row.addWidget(self.revert_reason, 1)
        revert_row.addWidget(self.revert_button, 0)
        card_layout.addLayout(revert_row)
        #: who wrote the summary (the model and its endpoint's host, or the extractive summarizer)
        self.written_label = QLabel()
        self.written_label.setObjectName("summaryWrittenBy")
        self.written_label.setWordWrap(True)
        self.written_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.written_label.hide()
        card_layout.addWidget(self.written_label)
        card_layout.addWidget(self.dropped_label)
        card_layout.addWidget(self._warn_box)
        card_layout.addWidget(self.dropped_error)
        card_layout.addWidget(self.dropped_toggle, 0, Qt.AlignmentFlag.AlignLeft)
        card_layout.addWidget(self.card_split, 1)
        for label in (self.dropped_label, self.dropped_warning, self.dropped_error):
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.card.setProperty("source", False)
        #: the theme whose :func:`theme.card_stylesheet` the card carries (set once per theme)
        self._card_tokens: theme.Tokens | None = None
        self._style_card()
        self.dropped: DroppedView = DroppedView.not_recorded()
        #: what the card shows: ("boundary", BoundaryInfo) / ("source", SourceCompaction) / None
        self.card_subject: tuple[str, Any] | None = None
        #: ``boundary_dropped(info)``: the dropped specifics of our boundary (the window sets it)
        self.boundary_dropped: Callable[[BoundaryInfo], DroppedView] | None = None
        self._show_dropped(self.dropped)

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
        self.card_subject = None

    def show_text(self, title: str, text: str) -> None:
        """A unit or round: a title and a plain description."""
        self._offload = None
        self.card_subject = None
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
        self.card_subject = None
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
            f"{figures.tokens(info.summary_tokens)} tokens · generation {info.generation} · {info.compact_count} {'summary' if info.compact_count == 1 else 'summaries'} · {why} · {when}",
        ]
        if info.tokens_before is not None and info.tokens_after is not None:
            lines.append(f"envelope {info.tokens_before:,} → {info.tokens_after:,} tokens")
        self.card_title.setText("\n".join(lines))
        self.card_text.setPlainText(info.summary or "(no summary text recorded)")
        self._set_card_source(False)  # our boundary: the theme's summary card
        self.card_subject = ("boundary", info)
        self._show_dropped(self._read_boundary_dropped(info))
        self.stack.setCurrentWidget(self.card)
        self.revert_button.setEnabled(False)
        self.revert_button.setToolTip("Reading whether the last compaction can be reverted…")
        self.boundaryCardShown.emit(info)

    def _read_boundary_dropped(self, info: BoundaryInfo) -> DroppedView:
        if self.boundary_dropped is None:
            return DroppedView.not_recorded()
        try:
            return self.boundary_dropped(info)
        except Exception as exc:  # noqa: BLE001 - a data shape nobody planned for is shown in place, not raised into Qt
            return DroppedView.failed(f"the summary event cannot be read ({exc})")

    def refresh_dropped(self) -> None:
        """Re-read our boundary's dropped specifics (the thread's events have arrived or changed)."""
        if self.card_subject is not None and self.card_subject[0] == "boundary":
            self._show_dropped(self._read_boundary_dropped(self.card_subject[1]))

    def set_source_dropped(self, sc: SourceCompaction, dropped: DroppedView) -> None:
        """The dropped specifics of a source's compaction, once read; ignored when the card shows
        something else by now."""
        if self.card_subject == ("source", sc):
            self._show_dropped(dropped)

    def _show_dropped(self, dropped: DroppedView) -> None:
        self.dropped = dropped
        who = [f"Written by {dropped.written_by}"] if dropped.written_by else []
        if dropped.operator:
            who.append(f"compacted by {dropped.operator}")
        self.written_label.setText(" · ".join(who))
        self.written_label.setVisible(bool(who))
        if list(dropped.items) != self.dropped_model.items():  # the same list (the toggle): no reset, no re-measure
            self.dropped_model.set_items(dropped.items)
        self.dropped_label.setText(dropped.headline())
        warning = dropped.warning()
        self._warn_box.setVisible(bool(warning))
        self.dropped_warning.setText(warning or "")
        self.dropped_warning_icon.setPixmap(theme.icon("warning", "danger").pixmap(16, 16))
        error = dropped.error()
        self.dropped_error.setVisible(bool(error))
        self.dropped_error.setText(f"Cannot read: {error}" if error else "")
        shown = len(dropped.items)
        self.dropped_toggle.setVisible(shown > 0)
        more = f" (of {dropped.count:,}: the recorded list is capped)" if dropped.truncated else ""
        self.dropped_toggle.setText(f"{'Hide' if self.dropped_toggle.isChecked() else 'Show'} the {shown:,} dropped specific{'s' if shown != 1 else ''}{more}")
        self.dropped_view.setVisible(shown > 0 and self.dropped_toggle.isChecked())

    def _toggle_dropped(self, on: bool) -> None:
        self.dropped_toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self._show_dropped(self.dropped)
        if on:
            self.card_split.setSizes([max(120, min(260, 24 * (len(self.dropped.items) + 1))), 300])

    def summary_text(self) -> str:
        """The text the card's Copy button copies: the summary as shown."""
        return self.card_text.toPlainText()

    def copy_summary(self) -> None:
        QGuiApplication.clipboard().setText(self.summary_text())

    def show_source_compaction(self, sc: SourceCompaction) -> None:
        """The card of a compaction the source recorded: who, trigger, tokens before, what it
        replaced and kept, and its summary text."""
        self._offload = None
        who = source_name(sc.source)
        self.header.setText(f"Recorded by {who}")
        failed = bool((sc.details or {}).get("failed"))
        what = ("failed compaction (no summary was produced; the API ignores it)" if failed else "compaction (summary)"
                if sc.kind == "summary" else "microcompaction (pruned tool results)")
        lines = [
            f"A {what} that {who} recorded itself, not one of ours: the messages stay in the thread and our engine can compact them to compare.",
            " · ".join(filter(None, (
                f"tokens before {sc.tokens_before:,}" if sc.tokens_before is not None else "tokens before: not recorded",
                f"trigger {sc.trigger}" if sc.trigger else "trigger: not recorded",
                sc.source_timestamp and f"at {sc.source_timestamp[:19]}",  # to the second, as a message's source time
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
        text = sc.summary if sc.summary is not None else (
            "(the compaction failed: the source recorded no summary)" if failed else "(the source kept this summary only encrypted)")
        kept = "\n".join(f"[{k.get('role', '?')}] {k.get('text', '')}" for k in sc.kept)
        self.card_text.setPlainText(text + (f"\n\n── kept ──\n{kept}" if kept else ""))
        self._set_card_source(True)  # the source's colour, never our boundary's
        self.card_subject = ("source", sc)
        self.revert_button.setText("Revert")
        self.revert_button.setEnabled(False)
        self.revert_button.setToolTip(f"A compaction {who} recorded itself is its history, not ours: it cannot be reverted")
        self._show_dropped(DroppedView.reading())
        self.sourceCardShown.emit(sc)
        self.stack.setCurrentWidget(self.card)

    # -- the card's style ----------------------------------------------------------------------
    def _style_card(self) -> None:
        """The card's own style sheet for the current theme; nothing when it already has it (a
        new sheet re-polishes the whole card, its dropped list included)."""
        tokens = theme.current()
        if tokens != self._card_tokens:
            self._card_tokens = tokens
            self.card.setStyleSheet(theme.card_stylesheet(tokens))

    def _set_card_source(self, source: bool) -> None:
        """Which card it is (``source``: the source's compaction); re-polishes the card and its
        labels (what the ``[source="true"]`` rules reach) only when that changes."""
        self._style_card()
        if self.card.property("source") == source:
            return
        self.card.setProperty("source", source)
        for widget in (self.card, *self.card.findChildren(QLabel)):
            self._restyle(widget)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._style_card()  # the theme changed: its colours (once per theme)
        super().changeEvent(event)

    @property
    def showing_pruned(self) -> bool:
        return self.stack.currentWidget() is self._pruned_page

    @staticmethod
    def _restyle(widget: QWidget) -> None:
        widget.style().unpolish(widget)
        widget.style().polish(widget)
