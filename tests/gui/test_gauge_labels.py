"""The gauge's line labels (85% hint, threshold, window): placed Qt-free by ``label_boxes``."""

from __future__ import annotations

from inspector_app.panels.pressure.widget import LABEL_ROW, label_boxes


def advance(text: str) -> float:
    return 6.0 * len(text)  # a fixed-width stand-in for the font's metrics


def overlap(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + LABEL_ROW and b[1] < a[1] + LABEL_ROW


def test_labels_sit_beside_their_lines_on_one_row_when_there_is_room() -> None:
    boxes = label_boxes([(200, "85% hint", True), (260, "threshold", False)], advance, 0, 400, 50)
    assert boxes == [(200 - 3 - 48, 50, 48), (263, 50, 54)]


def test_a_window_line_near_the_edge_puts_its_label_left_of_it_and_never_over_another() -> None:
    """The cannot-compact state: hint, threshold and window lines close together at the right end
    (the label used to run off the widget, then over the threshold label)."""
    marks = [(300, "85% hint", True), (345, "threshold", False), (420, "window", False)]
    boxes = label_boxes(marks, advance, 0, 440, 50)
    assert all(0 <= x and x + w <= 440 for x, _, w in boxes)  # inside the widget
    assert not any(overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    window = boxes[2]
    assert window[0] + window[2] <= 420 and window[1] == 50 + LABEL_ROW  # left of its line, one row lower


def test_a_label_that_fits_nowhere_still_gets_a_place() -> None:
    boxes = label_boxes([(5, "threshold", False)], advance, 0, 20, 0)
    assert len(boxes) == 1 and boxes[0][1] == 0
