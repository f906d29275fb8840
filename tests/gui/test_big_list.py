"""The Memories list reaches every memory at any size: 100,000 memories are read a page at a time as the
user scrolls, down to the very first one stored, with an honest count, and the window stays responsive."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QElapsedTimer, QTimer

from .conftest import make_desktop

N = 100_000


def fill(home, embedder, n: int) -> None:
    """n memories straight into the store's rows (as bench/scale.py grows a store): minutes become seconds."""
    from engine import Engine
    from engine.memory_rules import content_hash
    from engine.store.sqlite import memories as memory_rows

    with Engine.open(home, embedder=embedder) as eng:
        start = time.time() - n * 60  # one a minute, the first one oldest
        for base in range(0, n, 20_000):
            with eng.store.write() as con:
                for i in range(base, min(n, base + 20_000)):
                    text = f"Note number {i} about the allotment"
                    memory_rows.insert(con, uid=f"mem_big{i:07d}", kind="fact", text=text, chash=content_hash(text),
                                       importance=0.5, now=start + i * 60, event_at=None, project=None,
                                       source="user", meta=None, conversation_id=None, document_id=None, done=True,
                                       dedup_pending=False)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_hundred_thousand_memories_scroll_to_the_first_with_an_honest_count(qtbot, qasync_loop, profile_home,
                                                                               lexical_embedder):
    fill(profile_home, lexical_embedder, N)
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    try:
        window = app.window
        window.show_page("memories")
        browser = window.memories
        qtbot.waitUntil(lambda: browser.count.text() == f"200 of {N:,} memories", timeout=30_000)
        assert browser.visible_ids()[0] == f"mem_big{N - 1:07d}"  # newest first

        # a heartbeat on the UI thread: the longest it waited is how long the window was stuck
        beat, longest = QElapsedTimer(), [0]
        beat.start()

        def tick() -> None:
            longest[0] = max(longest[0], beat.restart())

        heart = QTimer()
        heart.setInterval(10)
        heart.timeout.connect(tick)
        heart.start()
        appended: list[float] = []  # how long adding each page's rows held the UI thread
        append = browser._append

        def timed_append(rows) -> None:
            t0 = time.perf_counter()
            append(rows)
            appended.append(time.perf_counter() - t0)

        browser._append = timed_append
        bar = browser.tree.verticalScrollBar()
        started = time.monotonic()
        while browser.tree.topLevelItemCount() < N:
            assert time.monotonic() - started < 500, browser.count.text()
            bar.setValue(bar.maximum())  # the user drags to the end of what is shown
            qtbot.wait(20)
        took = time.monotonic() - started
        heart.stop()
        bar.setValue(bar.maximum())
        qtbot.wait(50)
        last = browser.tree.topLevelItem(N - 1)
        assert last.text(0) == "Note number 0 about the allotment"  # the very first memory
        assert browser.tree.visualItemRect(last).isValid()  # scrolled into view
        assert browser.count.text() == f"{N:,} memories"
        assert len(set(browser.visible_ids())) == N
        print(f"\n100,000 memories: scrolled to the first in {took:.1f} s ({len(appended)} pages); adding a page "
              f"took at most {max(appended) * 1000:.0f} ms (median {sorted(appended)[len(appended) // 2] * 1000:.0f} "
              f"ms); the UI thread's longest wait {longest[0]} ms")
        first, last_pages = sorted(appended[:20]), sorted(appended[-20:])
        assert last_pages[10] < 3 * first[10] + 0.05  # the last pages cost what the first ones did

        # a write arriving now re-reads a bounded number of rows, not all 100,000
        engine = app.bridge._engine.result()
        t0 = time.monotonic()
        engine.remember("One more note while the list is long", embed="none")
        qtbot.waitUntil(lambda: browser.visible_ids()[:1] == [engine.list_memories(limit=1)[0].id], timeout=30_000)
        print(f"a write refreshed the long list in {time.monotonic() - t0:.1f} s")
        assert browser.count.text() == f"5,000 of {N + 1:,} memories"

        assert time.monotonic() - t0 < 15

        # searching says how many of how many
        browser.search.setText("99999")
        qtbot.waitUntil(lambda: browser.count.text() == f"1 best match of {N + 1:,} memories", timeout=60_000)
        assert browser.visible_ids() == [f"mem_big{99_999:07d}"]
    finally:
        app.quit()
