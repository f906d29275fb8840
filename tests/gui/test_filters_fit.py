"""The Memories page's filters are never drawn over each other: in a window of the minimum size (640 wide,
the sidebar as icons) or just wider (the sidebar with labels), with the app's own look and a long project
name, each filter box ends before the next begins and keeps the width it asked for."""

from __future__ import annotations

from .conftest import engine_of


def test_the_filters_do_not_overlap_in_a_narrow_window(qtbot, themed, desktop):
    eng = engine_of(desktop)
    eng.remember("The allotment committee meets on the first Sunday.", project="allotment-committee-and-garden-club")
    window = desktop.window
    window.show()
    page = window.memories
    qtbot.waitUntil(lambda: page.project.count() > 2, timeout=10_000)
    for width in (640, 700, 720, 760):
        window.resize(width, 480)
        qtbot.wait(200)
        boxes = [page.kind, page.project, page.period, page.show_filter]
        for left, right in zip(boxes, boxes[1:], strict=False):
            assert left.geometry().right() < right.geometry().left(), (width, left.currentText(), right.currentText())
        for box in boxes:
            assert box.width() >= box.minimumWidth(), (width, box.currentText())
        assert page.count.isVisible() and page.count.width() >= page.count.sizeHint().width()
