"""Open the real app on a fresh profile with a few memories and documents, visit every page and report, as
JSON on stdout, where the window sits and every widget that is narrower than its own text (a cut-off
column title, a squeezed button or label). With --shots DIR it also saves a PNG of every page.

Run in a process of its own, because the screen size and QT_SCALE_FACTOR are fixed when Qt starts:

    QT_QPA_PLATFORM=offscreen:configfile=screen.json QT_SCALE_FACTOR=2 python -m tests.gui.layout_probe HOME
    DISPLAY=:91 QT_QPA_PLATFORM=xcb python -m tests.gui.layout_probe HOME --shots docs/screenshots --tag 800x600

tests/gui/test_layout.py runs it offscreen; scripts/screenshots.py runs it on Xvfb for docs/screenshots/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

MEMORIES = (
    ("The boiler service is due every October; the engineer is Dana Whitfield", "fact", "home"),
    ("Met Priya at the Leeds meetup; she maintains the tide-prediction library", "episodic", "work"),
    ("To renew the passport: form online, photo code from the booth, old passport by post", "procedural", None),
    ("My bike lock code is in the password manager under 'Lock'", "fact", None),
    ("The quarterly report goes to the finance team on the first Monday of the quarter", "fact", "work"),
    ("Dentist appointment moved to the 14th at 09:30", "episodic", "home"),
)

NOTE = """# Garden plan

## Spring

Sow the broad beans in March along the south fence; the tomatoes go in the greenhouse in April.

## Autumn

Plant the garlic in October, two inches deep, pointed end up.
"""


def wait(app, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not get there in time")
        app.processEvents()
        time.sleep(0.01)


def save_shot(window, widget, folder: Path, name: str) -> None:
    """A PNG of `widget`; on a real X server the whole screen, so the picture also shows it fits on it."""
    from PySide6.QtWidgets import QApplication

    folder.mkdir(parents=True, exist_ok=True)
    shot = window.screen().grabWindow(0) if QApplication.platformName() == "xcb" else widget.grab()
    shot.save(str(folder / name))


def settle(app, seconds: float = 0.3) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)


def too_narrow(root) -> list[str]:
    """Every visible widget under `root` narrower than its text (header sections, labels, buttons)."""
    from PySide6.QtWidgets import QAbstractButton, QComboBox, QLabel, QTreeWidget

    found: list[str] = []
    for tree in root.findChildren(QTreeWidget):
        if not tree.isVisibleTo(root) or not tree.isVisible():
            continue
        header = tree.header()
        fm = header.fontMetrics()
        for i in range(header.count()):
            if header.isSectionHidden(i):
                continue
            text = tree.headerItem().text(i)
            need = fm.horizontalAdvance(text) + 8
            if header.sectionSize(i) < need:
                found.append(f"column '{text}' of {tree.objectName() or type(tree.parent()).__name__}: "
                             f"{header.sectionSize(i)} px < {need} px")
        right = sum(header.sectionSize(i) for i in range(header.count()) if not header.isSectionHidden(i))
        if right > tree.viewport().width() + 1:
            found.append(f"columns of {type(tree.parent()).__name__} run off the list: {right} px > "
                         f"{tree.viewport().width()} px")
    for label in root.findChildren(QLabel):
        if not label.isVisible() or label.wordWrap() or not label.text() or "<" in label.text():
            continue
        need = label.fontMetrics().horizontalAdvance(label.text().replace("&", ""))
        if label.contentsRect().width() + 1 < need:
            found.append(f"label '{label.text()[:40]}': {label.contentsRect().width()} px < {need} px")
    for b in root.findChildren(QAbstractButton):
        if not b.isVisible() or not b.text():
            continue
        if b.width() + 1 < b.minimumSizeHint().width():
            found.append(f"button '{b.text().replace('&', '')}': {b.width()} px < {b.minimumSizeHint().width()} px")
    for combo in root.findChildren(QComboBox):
        if not combo.isVisible() or combo.isEditable() or not combo.currentText():
            continue
        need = combo.fontMetrics().horizontalAdvance(combo.currentText()) + 40
        if combo.width() < need:
            found.append(f"choice '{combo.currentText()}': {combo.width()} px < {need} px")
    return found


def sidebar_labels(window) -> list[dict]:
    """Each sidebar entry: the text it shows, its page's name, and whether the text has the room to be shown
    whole (Qt elides it, "C…", when the entry's size hint is wider than the list)."""
    from desktop.main_window import PAGES

    bar = window.sidebar
    room = bar.viewport().width()
    return [{"text": bar.item(i).text(), "page": label,
             "fits": bar.sizeHintForIndex(bar.indexFromItem(bar.item(i))).width() <= room}
            for i, (label, _key) in enumerate(PAGES)]


def inside_screen(window) -> dict:
    """Whether the window's frame and its status bar lie inside the screen itself (not only inside Qt's idea
    of the screen's free area, which can run past it)."""
    from PySide6.QtCore import QRect

    screen = window.screen().geometry()
    bar = window.status
    bar_rect = QRect(bar.mapToGlobal(bar.rect().topLeft()), bar.size())
    return {"frame": screen.contains(window.frameGeometry()), "status_bar": screen.contains(bar_rect),
            "status_bar_visible": bar.isVisible()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("home", type=Path)
    parser.add_argument("--shots", type=Path)
    parser.add_argument("--tag", default="")
    parser.add_argument("--size", help="WxH: resize the window to this (logical pixels) instead of its default")
    parser.add_argument("--platform-frame", action="store_true",
                        help="wait for a window manager's frame before measuring (a real X server with one)")
    args = parser.parse_args(argv)

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from desktop.app import DesktopApp
    from desktop.theme import Theme
    from engine.embeddings import NoEmbedder

    Theme(app)
    desktop = DesktopApp(args.home, embedder=NoEmbedder(), use_tray=False, use_hotkey=False,
                         start_background=False, ask_where=False)
    window = desktop.window
    wait(app, lambda: desktop.bridge.info is not None)
    settle(app, 0.3)
    wait(app, lambda: desktop.recovery_dialog is not None, 10)  # the recovery key, shown once at first run
    box = desktop.recovery_dialog
    settle(app, 0.3)
    recovery = {"on_screen": window.screen_area().contains(box.frameGeometry()), "too_narrow": too_narrow(box)}
    if args.shots:
        save_shot(window, box, args.shots, f"recovery-key-{args.tag}.png" if args.tag else "recovery-key.png")
    box.hide()  # a real user keeps it first; not part of the pages
    eng = desktop.bridge._engine.result()  # seed through the engine, as another program would
    for text, kind, project in MEMORIES:
        # the events have a date, as the editor shows it (When)
        eng.remember(text, kind=kind, project=project, embed="none", at="2026-03-14" if kind == "episodic" else None)
    note = args.home / "Garden plan.md"
    note.write_text(NOTE, encoding="utf-8")
    eng.ingest([note])
    wait(app, lambda: len(window.memories.visible_ids()) == len(MEMORIES), 10)
    if args.size:
        w, h = (int(v) for v in args.size.split("x"))
        window.resize(w, h)
        window.keep_on_screen()
    settle(app, 0.5)
    if args.platform_frame:  # a window manager frames and places the window after it is shown: wait for it
        wait(app, lambda: window.frameGeometry() != window.geometry(), 10)
        settle(app, 2.0)

    area = window.screen_area()
    frame = window.frameGeometry()
    report: dict = {
        "screen": [area.x(), area.y(), area.width(), area.height()],
        "window": [frame.x(), frame.y(), frame.width(), frame.height()],
        "minimum": [window.minimumWidth(), window.minimumHeight()],
        "on_screen": area.contains(frame),
        "pages": {},
        "recovery_key": recovery,
        "inside_screen": inside_screen(window),
    }
    pages = ["memories", "memory-editor", "memories-search", "ask", "documents", "activity", "settings"]
    for page in pages:
        if page == "memories-search":  # a search that a document's passage answers too
            window.show_page("memories")
            window.memories.search.setText("broad beans")
            settle(app, 0.8)
        elif page == "memory-editor":
            window.show_page("memories")
            settle(app, 0.1)
            browser = window.memories
            ids = browser.visible_ids()  # an event: its When holds a date
            browser.select(next((u for u in ids if browser.model.get(u).kind == "episodic"), ids[0]))
            browser.open_drawer()
        else:
            window.show_page(page)
        settle(app, 0.6)
        report["pages"][page] = {"too_narrow": too_narrow(window),
                                 "compact": bool(window.memories.compact)}
        if args.shots:
            save_shot(window, window, args.shots, f"{page}-{args.tag}.png" if args.tag else f"{page}.png")
        if page == "memory-editor":
            window.memories.close_drawer()
        if page == "memories-search":
            window.memories.search.setText("")
    window._conflicts_counted(12)  # the longest label: "Conflicts (12)" (after the pictures: there are none)
    settle(app, 0.2)
    report["sidebar"] = sidebar_labels(window)
    print(json.dumps(report))
    sys.stdout.flush()
    desktop.quit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
