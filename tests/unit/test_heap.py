"""engine/heap.py: after a burst of work the C heap's freed memory goes back to the OS."""

from __future__ import annotations

import os
import sys

import pytest

from engine import heap


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/self/statm"),
                    reason="glibc's malloc_trim and /proc are Linux's")
def test_trim_returns_freed_heap_the_process_would_otherwise_keep():
    # 120 MB of 4 KB blocks from malloc's heap (under its mmap threshold), then all but the last freed: the
    # last keeps the heap's top in place, so glibc's own trimming on free cannot give the rest back
    blocks = [bytes(4000) + i.to_bytes(4, "little") for i in range(30_000)]
    keep = blocks[-1]
    del blocks
    before = _resident_bytes()
    assert heap.trim()
    after = _resident_bytes()
    assert before - after > 60 * 2**20, (before, after)
    assert keep  # held until here
