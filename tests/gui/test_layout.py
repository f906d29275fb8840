"""The window at 800×600, and at QT_SCALE_FACTOR=2 on a 1440×900 and on an 800×600 screen (400×300: the
pages scroll): it fits on the screen, so does the first run's recovery key dialog, the memory list keeps
its width (the editor becomes a drawer), and no column title, label, button or choice is cut.
Each size runs the real app in a process of its own (the screen and the scale are fixed when Qt starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QByteArray, QRect
from PySide6.QtWidgets import QApplication

from desktop.theme import Theme

ROOT = Path(__file__).resolve().parents[2]


def probe(tmp_path: Path, screen: tuple[int, int], scale: float, size: str | None = None) -> dict:
    config = tmp_path / "screen.json"
    config.write_text(json.dumps({"screens": [{"name": "probe", "x": 0, "y": 0, "width": screen[0],
                                               "height": screen[1], "logicalDpi": 96, "logicalBaseDpi": 96,
                                               "dpr": 1}]}))
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={config}", QT_SCALE_FACTOR=str(scale),
               PYTHONPATH=str(ROOT), PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring",
               XDG_DATA_HOME=str(tmp_path / "xdg"))
    env.pop("OLLAMA_HOST", None)
    args = [sys.executable, "-m", "tests.gui.layout_probe", str(tmp_path / "home")] + (["--size", size] if size else [])
    proc = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("screen,scale,size", [((800, 600), 1, "800x600"), ((1440, 900), 2, None),
                                               ((800, 600), 2, None)],
                         ids=["800x600", "1440x900-scale2", "800x600-scale2"])
def test_every_page_fits_with_nothing_cut(tmp_path, screen, scale, size):
    report = probe(tmp_path, screen, scale, size)
    logical = [screen[0] // scale, screen[1] // scale]
    assert report["screen"][2:] == logical
    assert report["on_screen"], report  # the whole window, frame included, is on the screen
    assert report["minimum"][0] <= logical[0] and report["minimum"][1] <= logical[1]
    assert report["recovery_key"] == {"on_screen": True, "too_narrow": []}, report["recovery_key"]
    for page, found in report["pages"].items():
        assert found["too_narrow"] == [], (page, found["too_narrow"])
        assert found["compact"] is True  # narrow: the list has the width, the editor is a drawer


def test_the_window_remembers_its_place_and_comes_back_on_screen(qtbot, qasync_loop, tmp_path):
    from desktop.bridge import Bridge
    from desktop.main_window import MainWindow

    state = tmp_path / "window.ini"
    first = MainWindow(Bridge(tmp_path / "home"), state_file=state)
    qtbot.addWidget(first)
    area = first.screen_area()
    first.setGeometry(QRect(area.x() + 20, area.y() + 30, 700, 480))
    first.save_geometry()
    second = MainWindow(Bridge(tmp_path / "home"), state_file=state)
    qtbot.addWidget(second)
    assert (second.width(), second.height()) == (700, 480) and second.x() == area.x() + 20
    # saved on a screen that is gone (or larger): it comes back whole on this one
    first.setGeometry(QRect(area.right() + 400, area.bottom() + 300, area.width() + 300, 480))
    first.save_geometry()
    third = MainWindow(Bridge(tmp_path / "home"), state_file=state)
    qtbot.addWidget(third)
    assert area.contains(third.frameGeometry()), (third.frameGeometry(), area)
    assert isinstance(third._state.value("window/geometry"), QByteArray)
    # a window already on the screen is not moved: on X a move made before the window manager has told the
    # frame takes the window's own corner for the frame's, and the window crept down a title bar per start
    moves = []
    second.move = lambda *at: moves.append(at)  # type: ignore[method-assign]
    second.keep_on_screen()
    assert moves == []
    third.setGeometry(QRect(area.right() - 100, area.y() + 10, 500, 400))  # half off the screen: brought back
    third.move = lambda *at: moves.append(at)  # type: ignore[method-assign]
    third.keep_on_screen()
    assert moves and moves[0][0] <= area.right() - 500


def test_the_editor_moves_into_a_drawer_when_narrow(qtbot, desktop):
    from .conftest import engine_of

    uid = engine_of(desktop).remember("The spare key is under the blue pot", embed="none").id
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: browser.visible_ids() == [uid], timeout=5000)
    desktop.window.resize(1400, 800)
    qtbot.waitUntil(lambda: not browser.compact, timeout=2000)
    assert browser.editor.parent() is browser.splitter
    desktop.window.resize(780, 560)
    qtbot.waitUntil(lambda: browser.compact, timeout=2000)
    browser.select(uid)
    browser.open_drawer()
    assert browser.drawer.isVisible() and browser.editor.isVisible()
    assert browser.tree.width() > browser.width() * 0.8  # the list keeps the width
    header = browser.tree.horizontalHeader()
    assert header.sectionSize(0) >= header.fontMetrics().horizontalAdvance("Memory") + 8


def test_every_sidebar_label_is_shown_whole_or_the_sidebar_shows_icons(qtbot, desktop):
    """The sidebar is as wide as its longest label, a count included ("Conflicts (12)" was cut to "C…"); the
    default window on an 800x600 screen (or 1600x1200 at scale 2) keeps the labels; a narrower one shows
    icons, whose tooltips name the page."""
    from desktop.main_window import PAGES

    window = desktop.window
    bar = window.sidebar
    window._conflicts_counted(12)
    for width, height in ((736, 526), (800, 600), (900, 600), (1200, 760)):
        window.resize(width, height)
        qtbot.waitUntil(lambda w=width: window.width() == w, timeout=2000)
        shown = [bar.item(i).text() for i in range(bar.count())]
        assert shown == [label + (" (12)" if key == "conflicts" else "") for label, key in PAGES], (width, shown)
        for i in range(bar.count()):
            need = bar.sizeHintForIndex(bar.indexFromItem(bar.item(i))).width()
            assert need <= bar.viewport().width(), (width, shown[i], need, bar.viewport().width())
        assert window.pages.width() >= window.PAGE_MINIMUM.width()
    window.resize(640, 420)
    qtbot.waitUntil(lambda: window.width() == 640, timeout=2000)
    assert [bar.item(i).text() for i in range(bar.count())] == [""] * len(PAGES)
    assert bar.item(4).toolTip() == "Conflicts (12) (Ctrl+5)"
    window._conflicts_counted(0)
    assert bar.item(4).text() == "" and bar.item(4).toolTip() == "Conflicts (Ctrl+5)"


def test_a_page_taller_than_a_small_window_scrolls_instead_of_being_squeezed(qtbot, desktop):
    """At 720x450 (a 1440x900 screen at scale 2) the Graph page was squeezed below its minimum height, and
    its drawing lay over its list of facts: every page now gets at least the height it needs, and the page
    area scrolls when the window has less."""
    from desktop.main_window import PAGES

    window = desktop.window
    window.build_pages()
    for width, height in ((662, 420), (640, 300)):
        window.resize(width, height)
        qtbot.waitUntil(lambda w=width: window.width() == w, timeout=2000)
        for _label, key in PAGES:
            window.show_page(key)
            page = window.pages.currentWidget()
            qtbot.wait(30)
            assert page.height() >= page.minimumSizeHint().height(), (key, width, height, page.height(), page.minimumSizeHint(), window._holder.minimumHeight(), window._holder.height())
        window.show_page("graph")
        qtbot.wait(50)
        canvas, facts = window.graph.canvas, window.graph.facts
        assert canvas.height() >= canvas.minimumHeight() and facts.height() >= facts.minimumHeight()


def test_the_status_bar_shows_every_part_whole_in_a_narrow_window(qtbot, desktop):
    """Paused, in a window 640 wide (800x600 at a scale of 1.25, or a tiled window), the status bar's parts
    ran off its end ("Answers ready" and the search model's state were not shown at all): they take their
    short forms, and the counter goes (the Memories page shows it) when even those do not fit."""
    window, status = desktop.window, desktop.window.status
    # the window keeps itself on the screen while a window manager may still be placing it (its first
    # seconds): on a loaded machine those could still run, and shrink the wide window to the screen (a look
    # due at their very end, too: that one once shrank it after the resize below)
    qtbot.waitUntil(lambda: not window.settling, timeout=10_000)
    Theme(QApplication.instance())  # the app's style sheet (10 pt text, padded labels), as every start applies it
    wide = 1400  # room for every whole text in the app's style (they need ~1,250 pixels)
    window.resize(wide, 700)
    qtbot.waitUntil(lambda: window.width() == wide, timeout=2000)
    desktop.bridge.set_paused(True)
    qtbot.waitUntil(lambda: status.paused.isVisible() and bool(status.llm.text()), timeout=10_000)
    status.set_count("1,208 memories · 14 documents · 2 to resolve")  # as a used profile's reads
    # whole texts in a wide window, once the parts that come and go (work under way, the model's
    # state while it loads on a busy machine) have settled
    def whole() -> None:
        status.fit()
        assert status.paused.text() == "Paused: nothing runs in the background", (
            window.width(), [(status.full_text(w), w.sizeHint().width()) for w in (
                status.paused, status.resume, status.server, status.work, status.count, status.llm, status.model)
                if not w.isHidden()])
    qtbot.waitUntil(whole, timeout=20_000)
    for width in (640, 900, wide):
        window.resize(width, 500)
        qtbot.waitUntil(lambda w=width: window.width() == w, timeout=2000)
        qtbot.wait(50)
        parts = [w for w in (status.paused, status.resume, status.count, status.llm, status.model) if w.isVisible()]
        assert status.llm in parts and status.model in parts and status.resume in parts
        for part in parts:
            at = part.mapTo(window, part.rect().topLeft())  # inside the window, not only inside the bar
            assert part.width() + 2 >= part.sizeHint().width() and at.x() + part.width() <= window.width(), (
                width, part.text(), part.width(), part.sizeHint().width(), at.x(), status.width())
    assert status.paused.text() == "Paused: nothing runs in the background"  # whole again when wide
    window.resize(640, 500)
    qtbot.waitUntil(lambda: status.paused.text() == "Paused", timeout=2000)
    assert status.paused.toolTip() == "Paused: nothing runs in the background"
