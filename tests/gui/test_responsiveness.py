"""The UI thread never waits for the engine: slow engine calls run on the bridge's threads."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QTimer

from .conftest import engine_of


def count_ticks(qtbot, seconds: float, until) -> int:
    ticks = [0]
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    timer.start()
    started = time.monotonic()
    qtbot.waitUntil(until, timeout=int(seconds * 1000) + 10_000)
    elapsed = time.monotonic() - started
    timer.stop()
    return ticks[0], elapsed


def test_a_slow_search_does_not_block_the_ui(qtbot, desktop, monkeypatch):
    eng = engine_of(desktop)
    eng.remember("The spare key is under the blue pot")
    real_recall = eng.recall
    calls: list[str] = []
    answered: list[bool] = []

    def slow_recall(query, **kwargs):
        calls.append(threading.current_thread().name)
        time.sleep(1.5)
        hits = real_recall(query, **kwargs)
        answered.append(True)
        return hits

    monkeypatch.setattr(eng, "recall", slow_recall)
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: len(browser.visible_ids()) == 1)  # the list shows the memory before the search
    qtbot.keyClicks(browser.search, "spare key")
    # done when the slow search has answered and the list shows its result (the listing above already showed
    # the same memory, so the list alone cannot tell)
    ticks, elapsed = count_ticks(qtbot, 1.5, lambda: bool(answered) and len(browser.visible_ids()) == 1)
    assert elapsed >= 1.4
    assert ticks >= 0.5 * elapsed / 0.010, f"the UI thread stalled: {ticks} ticks in {elapsed:.2f}s"
    assert calls and all(name != threading.main_thread().name for name in calls)


def test_the_window_shows_before_the_store_opens(qtbot, qasync_loop, profile_home, lexical_embedder, monkeypatch):
    from engine import Engine

    real_open = Engine.open.__func__
    opened_on: list[str] = []

    def slow_open(cls, *args, **kwargs):
        opened_on.append(threading.current_thread().name)
        time.sleep(1.5)
        return real_open(cls, *args, **kwargs)

    monkeypatch.setattr(Engine, "open", classmethod(slow_open))
    from desktop.app import DesktopApp

    app = DesktopApp(profile_home, embedder=lexical_embedder, use_tray=False, use_hotkey=False, ask_where=False)
    qtbot.addWidget(app.window)
    assert app.window.isVisible()  # shown before the engine exists
    ticks, elapsed = count_ticks(qtbot, 1.5, lambda: app.bridge.info is not None)
    assert ticks >= 0.5 * elapsed / 0.010
    assert opened_on and opened_on[0] != threading.main_thread().name
    app.quit()


def test_a_slow_write_does_not_block_the_capture_box(qtbot, desktop, monkeypatch):
    eng = engine_of(desktop)
    real = eng.remember

    def slow_remember(*args, **kwargs):
        time.sleep(1.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(eng, "remember", slow_remember)
    box = desktop.capture
    box.open_box()
    qtbot.keyClicks(box.input, "slow but sure")
    box.submit()
    assert box.status.text() == "Saving…"
    ticks, elapsed = count_ticks(qtbot, 1.2, lambda: box.status.text() == "Saved ✓")
    assert ticks >= 0.5 * elapsed / 0.010
