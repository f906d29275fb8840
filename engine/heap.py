"""Give the C heap's free memory back to the operating system after a burst of work.

glibc keeps memory a program has freed in its arenas for the next allocation: after an ingest (parsing,
tokenizing, embedding batches, the vector mirror growing) a process that stays open held up to ~45 MB more than
it used, freed but resident, until something allocated it again. `trim()` asks glibc to return it
(`malloc_trim(0)`, every arena); elsewhere (macOS, Windows, another C library) it does nothing. Called by
the embedding runtimes after a batch (engine/minilm.py, engine/onnx_minilm.py) and by the background thread
once the store has been quiet for a pass after some writes (engine/backfill.py).

`map_large_blocks()` (a process that stays open: `Engine.start_background`) keeps large blocks out of the
arenas altogether: glibc maps a block above its threshold for itself and unmaps it when freed, but raises
that threshold to the size of each such block freed (up to 32 MB), after which an embedding batch's buffers
come from, and stay in, the arena of the thread that ran it. An open app held one arena of 59 MB (resident)
after adding 200 files, which `malloc_trim` could not give back (docs/performance.md, "Memory and size").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys

log = logging.getLogger(__name__)


M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
LARGE_BLOCK = 256 * 1024
"""Blocks of this size and more are mapped for themselves (glibc's own starting threshold is 128 KiB)."""


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]  # glibc only (musl has neither)
        libc.malloc_trim.restype = ctypes.c_int
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def map_large_blocks() -> bool:
    """Fix glibc's threshold for mapping a block by itself at LARGE_BLOCK (which also stops it from moving);
    True when this platform's C library took it (glibc)."""
    libc = _glibc()
    return libc is not None and libc.mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK) == 1


def trim() -> bool:
    """Return the heap's free pages to the OS; True when this platform's C library can (glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    try:
        libc.malloc_trim(0)
    except OSError:  # pragma: no cover - a C library that refuses
        log.info("malloc_trim failed")
        return False
    return True
