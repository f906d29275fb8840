"""What the app counts as a use: a memory opened in the editor for a moment, or copied; never a search
result list. And a quick capture merges with a near-duplicate stored from the command line."""

from __future__ import annotations

import subprocess
import sys

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from .conftest import engine_of, wait_idle
from .test_capture_and_browse import capture


def access(eng, uid: str) -> int:
    return eng.get(uid).access_count


def test_searching_is_not_a_use_opening_and_copying_are(qtbot, desktop):
    capture(qtbot, desktop, "The wifi password at the cabin is hunter2")
    capture(qtbot, desktop, "Bob prefers tea over coffee")
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: len(browser.visible_ids()) == 2, timeout=10_000)
    eng = engine_of(desktop)
    ids = browser.visible_ids()
    for _ in range(3):  # search as you type: results shown, nothing used
        browser.search.clear()
        qtbot.keyClicks(browser.search, "cabin wifi")
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 1, timeout=10_000)
    wait_idle(qtbot, desktop)
    assert [access(eng, i) for i in ids] == [0, 0]
    wifi = browser.visible_ids()[0]
    # passing over a row with the keyboard is not opening it ...
    browser.tree.setCurrentIndex(browser.model.index(0, 0))
    browser.tree.clearSelection()
    qtbot.wait(1700)
    wait_idle(qtbot, desktop)
    assert access(eng, wifi) == 0
    # ... staying on it is
    browser.tree.setCurrentIndex(browser.model.index(0, 0))
    qtbot.waitUntil(lambda: access(eng, wifi) == 1, timeout=5000)
    browser.tree.setFocus()
    qtbot.keyClick(browser.tree, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.clipboard().text() == "The wifi password at the cabin is hunter2"
    qtbot.waitUntil(lambda: access(eng, wifi) == 2, timeout=5000)
    assert [a.action for a in eng.audit_log()].count("use") == 2


def test_a_capture_and_a_cli_remember_of_near_duplicate_text_are_one_memory(qtbot, semantic_app):
    app = semantic_app
    capture(qtbot, app, "My passport is in the top drawer of the desk.")
    out = subprocess.run([sys.executable, "-m", "engine.cli", "remember", "--json",
                          "My passport is in the top drawer of my desk."], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    eng = engine_of(app)
    assert len(eng.list_memories()) == 1
    capture(qtbot, app, "my passport is in the top drawer of the desk")  # and again from the app
    wait_idle(qtbot, app)
    assert len(eng.list_memories()) == 1
