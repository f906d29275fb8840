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


LARGE_BLOCKS = r"""
import os, sys
from engine import heap
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
if sys.argv[1] == "fixed":
    assert heap.map_large_blocks()
first = b"\x01" * (8 << 20)  # mapped for itself; freeing it lifts glibc's moving threshold to 8 MB
del first
before = resident()
blocks, pins = [], []
for i in range(40):  # 80 MB of 2 MB blocks, each followed by a small block that stays (as a batch leaves them)
    blocks.append(b"\x01" * (2 << 20))  # written: resident
    pins.append(bytes(100_000) + i.to_bytes(4, "little"))  # too big for the holes the imports left
del blocks
print((resident() - before) >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/self/statm"),
                    reason="glibc's mallopt and /proc are Linux's")
def test_large_blocks_go_back_when_freed_once_mapped_for_themselves():
    """Freed 2 MB blocks among small ones that stay: glibc's moving threshold kept them in the heap, resident
    (no trim has run); with map_large_blocks they were unmapped as they were freed."""
    import subprocess

    kept = {}
    for arm in ("moving", "fixed"):
        p = subprocess.run([sys.executable, "-c", LARGE_BLOCKS, arm], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        kept[arm] = int(p.stdout.strip())
    assert kept["moving"] >= 60 and kept["fixed"] <= 8, kept
