"""Give the C heap's free memory back to the operating system after a burst of work.

glibc keeps memory a program has freed in its arenas for the next allocation: after an ingest (parsing,
tokenizing, embedding batches, the vector mirror growing) a process that stays open held up to ~45 MB more than
it used, freed but resident, until something allocated it again. `trim()` asks glibc to return it
(`malloc_trim(0)`, every arena); elsewhere (macOS, Windows, another C library) it does nothing. Called by
the embedding runtimes after a batch (engine/minilm.py, engine/onnx_minilm.py) and by the background thread
once the store has been quiet for a pass after some writes (engine/backfill.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim  # glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def trim() -> bool:
    """Return the heap's free pages to the OS; True when this platform's C library can (glibc)."""
    fn = _malloc_trim()
    if fn is None:
        return False
    try:
        fn(0)
    except OSError:  # pragma: no cover - a C library that refuses
        log.info("malloc_trim failed")
        return False
    return True
