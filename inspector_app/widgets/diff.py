"""The before/after view of one compaction: the surface before and after side by side (what went
into the summary, the summary, what stayed, what was pruned to a preview), the tokens by category
on both sides, and the specifics it dropped (those the request or the retained tail still refers
to first, highlighted).

:class:`DiffView` only shows what it is given; the replay controller
(:mod:`inspector_app.panels.replay.controller`) reads ``Service.reads.compaction_history`` and
``Service.reads.compaction_diff`` off the GUI thread and calls :meth:`DiffView.set_entries` /
:meth:`DiffView.show_diff`. :class:`DiffWindow` is the same view in a window of its own (wide
enough for the two sides)."""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListView,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.core import figures
from engine.core.views import CompactionDiff, CompactionEntry

from .. import theme
from ..models.diff import MEASURED_BY, DiffSideModel, DiffTokensModel, compaction_label, diff_lines, diff_tokens, side_counts
from .dropped import DroppedList, DroppedModel, DroppedView

EMPTY_TEXT = "This thread has no compactions: nothing was summarized or pruned yet."


def _plural(n: int, word: str) -> str:
    return figures.plural(n, word)


def side_summary(counts: dict[str, int], side: str) -> str:
    """``12 messages · 8 → summary · 1 pruned → preview`` for a side's title."""
    total = sum(counts.values())
    if side == "before":
        parts = [_plural(total, "line")]
        if counts.get("summarized"):
            parts.append(f"{counts['summarized']:,} → summary")
        if counts.get("pruned"):
            parts.append(f"{counts['pruned']:,} pruned → preview")
        if counts.get("kept"):
            parts.append(f"{counts['kept']:,} kept")
    else:
        parts = [_plural(total, "line")]
        if counts.get("summary"):
            parts.append("the summary")
        kept = counts.get("kept", 0)
        if kept:
            parts.append(f"{kept:,} kept")
        previews = counts.get("pruned", 0) + counts.get("preview", 0)
        if previews:
            parts.append(_plural(previews, "preview"))
    return " · ".join(parts)


def instructions_text(diff: CompactionDiff) -> str:
    """``Instructions: …`` and, for each term they named, kept ✓ or gone ✗ (empty: none)."""
    text = getattr(diff, "instructions", None)
    if not text:
        return ""
    kept = getattr(diff, "instructions_kept", ()) or ()
    terms = " · ".join(f"{t} {'✓ kept' if ok else '✗ not kept'}" for t, ok in kept)
    return f"Instructions: {text}" + (f"\nWhat they named: {terms}" if terms else "")


class DiffView(QWidget):
    """Compaction picker, tokens by category, the two surfaces, the summary and the dropped list."""

    #: the user picked compaction ``n`` (1-based ordinal of the thread's compaction list)
    compactionChosen = Signal(int)
    #: the user asked for the view in a window of its own
    popOutRequested = Signal()

    def __init__(self, parent: QWidget | None = None, *, pop_out: bool = True) -> None:
        super().__init__(parent)
        self.setObjectName("diffView")
        self._entries: list[CompactionEntry] = []
        self._diff: CompactionDiff | None = None
        self._thread: str | None = None
        self.before_model = DiffSideModel(self)
        self.after_model = DiffSideModel(self)
        self.tokens_model = DiffTokensModel(self)
        self.dropped_model = DroppedModel(self)

        self.picker = QComboBox()
        self.picker.setObjectName("diffPicker")
        self.picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.picker.setMinimumContentsLength(16)
        self.previous_button = QPushButton(theme.icon("back"), "")
        self.previous_button.setObjectName("diffPrevious")
        self.previous_button.setToolTip("The compaction before this one")
        self.next_button = QPushButton(theme.icon("forward"), "")
        self.next_button.setObjectName("diffNext")
        self.next_button.setToolTip("The compaction after this one")
        self.pop_button = QPushButton("Open in a window")
        self.pop_button.setObjectName("diffPopOut")
        self.pop_button.setVisible(pop_out)

        self.title = QLabel()
        self.title.setObjectName("sectionTitle")
        self.title.setWordWrap(True)
        self.status = QLabel(EMPTY_TEXT)
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

        self.tokens = QTableView()
        self.tokens.setObjectName("diffTokens")
        self.tokens.setModel(self.tokens_model)
        self.tokens.verticalHeader().hide()
        self.tokens.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.tokens.setShowGrid(False)
        self.tokens.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.tokens.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.tokens.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tokens.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fit_tokens()

        self.before_title = QLabel("Before")
        self.before_title.setObjectName("sectionTitle")
        self.after_title = QLabel("After")
        self.after_title.setObjectName("sectionTitle")
        self.before_view = self._list("diffBefore", self.before_model)
        self.after_view = self._list("diffAfter", self.after_model)
        sides = QSplitter(Qt.Orientation.Horizontal)
        sides.setObjectName("diffSides")
        sides.setChildrenCollapsible(False)
        for title, view in ((self.before_title, self.before_view), (self.after_title, self.after_view)):
            box = QWidget()
            bl = QVBoxLayout(box)
            bl.setContentsMargins(0, 0, 0, 0)
            title.setWordWrap(True)
            title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            bl.addWidget(title)
            bl.addWidget(view, 1)
            sides.addWidget(box)
        self.sides = sides

        self.summary = QPlainTextEdit()
        self.summary.setObjectName("diffSummary")
        self.summary.setReadOnly(True)
        self.summary.setPlaceholderText("No summary: this compaction only pruned tool results to previews.")
        self.summary.setMinimumHeight(self.fontMetrics().height() * 4)
        summary_title = QLabel("Summary the model sees instead")
        summary_title.setObjectName("muted")

        self.dropped_title = QLabel()
        self.dropped_title.setObjectName("muted")
        self.dropped_title.setWordWrap(True)
        self.dropped_title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.dropped_warning = QLabel()
        self.dropped_warning.setObjectName("errorText")
        self.dropped_warning.setWordWrap(True)
        self.dropped_warning.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.dropped_warning.hide()
        self.dropped_view = DroppedList(self.dropped_model, "diffDropped")

        nav = QHBoxLayout()
        nav.addWidget(self.previous_button)
        nav.addWidget(self.picker, 1)
        nav.addWidget(self.next_button)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.pop_button, 0, Qt.AlignmentFlag.AlignTop)

        summary_box = QWidget()
        sl = QVBoxLayout(summary_box)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(summary_title)
        sl.addWidget(self.summary, 1)
        dropped_box = QWidget()
        dl = QVBoxLayout(dropped_box)
        dl.setContentsMargins(0, 0, 0, 0)
        dl.addWidget(self.dropped_title)
        dl.addWidget(self.dropped_warning)
        dl.addWidget(self.dropped_view, 1)
        #: the summary and the dropped list: side by side when the view is wide, else stacked
        # not ``self.lower``: that would hide QWidget.lower() (the stacking order)
        self.lower_split = lower = QSplitter(Qt.Orientation.Vertical)
        lower.setObjectName("diffLower")
        lower.setChildrenCollapsible(False)
        lower.addWidget(summary_box)
        lower.addWidget(dropped_box)
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)
        split.addWidget(sides)
        split.addWidget(lower)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        self.body = QWidget()
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        #: the instructions the compaction followed and whether what they named survived (issue 23)
        self.instructions = QLabel()
        self.instructions.setObjectName("diffInstructions")
        self.instructions.setWordWrap(True)
        self.instructions.setTextFormat(Qt.TextFormat.PlainText)
        self.instructions.hide()
        body.addWidget(self.instructions)
        body.addWidget(self.tokens)
        body.addWidget(split, 1)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addLayout(nav)
        layout.addLayout(head)
        layout.addWidget(self.status)
        layout.addWidget(self.body, 1)

        self.picker.activated.connect(lambda row: self.compactionChosen.emit(row + 1))
        self.previous_button.clicked.connect(lambda: self._step(-1))
        self.next_button.clicked.connect(lambda: self._step(+1))
        self.pop_button.clicked.connect(self.popOutRequested.emit)
        self.clear()

    #: from this width on, the summary and the dropped list sit side by side
    WIDE = 900

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        wide = self.width() >= self.WIDE
        orientation = Qt.Orientation.Horizontal if wide else Qt.Orientation.Vertical
        if self.lower_split.orientation() != orientation:
            self.lower_split.setOrientation(orientation)

    def _fit_tokens(self) -> None:
        """The tokens table as tall as its rows (six categories): no scroll bar, nothing cut."""
        rows = max(self.tokens_model.rowCount(), 6)
        header = self.tokens.horizontalHeader().sizeHint().height()
        self.tokens.setFixedHeight(header + rows * self.tokens.verticalHeader().defaultSectionSize() + 2 * self.tokens.frameWidth() + 2)

    @staticmethod
    def _list(name: str, model: DiffSideModel) -> QListView:
        view = QListView()
        view.setObjectName(name)
        view.setModel(model)
        view.setUniformItemSizes(True)
        view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        view.setTextElideMode(Qt.TextElideMode.ElideRight)
        view.setResizeMode(QListView.ResizeMode.Adjust)
        return view

    # -- what the controller calls -------------------------------------------------------------
    def clear(self, text: str = EMPTY_TEXT) -> None:
        """Nothing to show (another thread, or one without compactions): ``text`` says why."""
        self._entries = []
        self._diff = None
        self.picker.clear()
        self._show(None)
        self.status.setObjectName("muted")
        self.status.setText(text)
        self.status.show()
        self._update_nav()

    def set_entries(self, entries: Sequence[CompactionEntry]) -> None:
        """The thread's compactions for the picker (nothing selected until :meth:`show_diff`)."""
        self._entries = list(entries)
        self.picker.blockSignals(True)
        self.picker.clear()
        for e in self._entries:
            self.picker.addItem(theme.icon("summary" if e.kind != "prune" else "tool"), compaction_label(e, len(self._entries)))
        self.picker.blockSignals(False)
        if not self._entries:
            self.clear()
        self._update_nav()

    def entries(self) -> list[CompactionEntry]:
        return list(self._entries)

    def show_loading(self, index: int | None) -> None:
        if index is not None and 1 <= index <= self.picker.count():
            self.picker.setCurrentIndex(index - 1)
        self.status.setObjectName("muted")
        self.status.setText("Rebuilding the surfaces before and after …")
        self.status.show()
        self._update_nav()

    def show_error(self, reason: str) -> None:
        self._show(None)
        self.status.setObjectName("errorText")
        self.status.setText(f"The before/after view cannot be rebuilt: {reason}")
        self.status.show()
        self.status.style().polish(self.status)

    def show_diff(self, diff: CompactionDiff, thread: str | None = None) -> None:
        """Show ``diff`` (of ``thread``, named in the title when given)."""
        self._thread = thread
        if 1 <= diff.index <= self.picker.count():
            self.picker.setCurrentIndex(diff.index - 1)
        self.status.hide()
        self._show(diff)
        self._update_nav()

    def current_diff(self) -> CompactionDiff | None:
        return self._diff

    def current_index(self) -> int | None:
        """The 1-based ordinal of the compaction shown (or being read), None when empty."""
        if self._diff is not None:
            return self._diff.index
        return self.picker.currentIndex() + 1 if self.picker.currentIndex() >= 0 else None

    # -- inside --------------------------------------------------------------------------------
    def _step(self, delta: int) -> None:
        current = self.current_index()
        if current is None:
            return
        target = current + delta
        if 1 <= target <= len(self._entries):
            self.compactionChosen.emit(target)

    def _update_nav(self) -> None:
        current = self.current_index()
        self.previous_button.setEnabled(current is not None and current > 1)
        self.next_button.setEnabled(current is not None and current < len(self._entries))
        self.picker.setEnabled(bool(self._entries))

    def _show(self, diff: CompactionDiff | None) -> None:
        self._diff = diff
        self.body.setVisible(diff is not None)
        self.tokens_model.set_diff(diff)
        self._fit_tokens()
        if diff is None:
            self.title.setText("")
            self.title.hide()
            self.before_model.set_lines(())
            self.after_model.set_lines(())
            self.summary.setPlainText("")
            self.dropped_model.set_items(())
            self.dropped_title.setText("")
            self.dropped_warning.hide()
            return
        before, after = diff_lines(diff)
        self.before_model.set_lines(before)
        self.after_model.set_lines(after)
        self.before_title.setText(f"Before · {side_summary(side_counts(before), 'before')}")
        self.after_title.setText(f"After · {side_summary(side_counts(after), 'after')}")
        total_before, total_after = diff_tokens(diff)
        tokens = f" · {figures.tokens_change(total_before, total_after)} tokens" if total_before is not None and total_after is not None else ""
        generation = f" · generation {diff.generation_before} → {diff.generation_after}" if diff.generation_before is not None and diff.generation_after is not None else ""
        origin = "" if diff.origin == "engine" else f" · recorded by {diff.origin}"
        origin += f" · written by {diff.written_by}" if getattr(diff, "written_by", None) else ""  # issue #28: who wrote the summary
        of = f" of {self._thread}" if self._thread else ""
        self.title.setText(f"Compaction {diff.index}{of}: {diff.kind}{f' ({diff.trigger})' if diff.trigger else ''}{tokens}{generation}{origin}")
        measured = f"Tokens before / after: {MEASURED_BY[diff.measured_by]}" if diff.measured_by in MEASURED_BY else ""
        self.title.setToolTip("\n".join(x for x in (measured, diff.note or "") if x))
        self.title.show()
        self.summary.setPlainText(diff.summary or "")
        self.instructions.setText(instructions_text(diff))
        self.instructions.setVisible(bool(self.instructions.text()))
        view = DroppedView.from_specifics(diff.dropped)
        self.dropped_model.set_items(view.items)
        # a prune's dropped specifics are what its previews leave out: the full texts are in the Workdir
        pruned = " — left out of the previews; the full texts stay in the Workdir" if diff.kind == "prune" and diff.origin == "engine" and view.count else ""
        self.dropped_title.setText(view.headline() + pruned + (f" — {view.error()}" if view.error() else ""))
        warning = view.warning()
        self.dropped_warning.setText(warning or "")
        self.dropped_warning.setVisible(bool(warning))
        self.dropped_view.setVisible(bool(view.items))
        if diff.note:
            self.status.setObjectName("muted")
            self.status.setText(diff.note)
            self.status.show()


class DiffWindow(QDialog):
    """The before/after view in a window of its own (the side pane is narrow for two surfaces)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("diffWindow")
        self.setWindowTitle("Before / after compaction")
        self.view = DiffView(self, pop_out=False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.resize(1180, 760)
