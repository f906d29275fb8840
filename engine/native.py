"""Calls into native code that a thread must never be cut off inside: ONNX Runtime (C++), safetensors and
tokenizers (Rust), torch.

A daemon thread still inside one when the interpreter finalizes takes the GIL back afterwards; CPython ends
it there with pthread_exit, whose forced unwinding through C++ or Rust frames aborts the process ("terminate
called without an active exception", "FATAL: exception not rethrown") or crashes it (Rust dropping Python
objects during the unwinding, without the GIL, while the interpreter collects its garbage: SIGSEGV). The app
died so when SIGTERM or Quit came while the embedding model was loading in the background.

`call()` brackets such a call (calls may nest). At exit (an atexit handler: daemon threads still run) the
calls under way finish and no new one starts: a thread about to start one waits, in Python, until the process
has ended. `stop_on(event)`: in this thread, once `event` is set, a call about to start raises Halted instead,
so that work made of many native calls (a model load: the tokenizer, the weights, the session, its check)
ends at its next step when its engine closes, instead of running on after the close.

Standard library only (the CLI imports it before anything heavy).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator
from contextlib import contextmanager

WAIT_SECONDS = 60.0  # one call is one step of a model load or one batch: seconds, even on a loaded machine


class Halted(BaseException):
    """The work of a thread whose stop was set ended between two native calls. A BaseException (as
    KeyboardInterrupt), so that no handler of failures takes it for one (a model that failed to load)."""


class NativeCalls:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._exiting = False
        self._local = threading.local()

    @contextmanager
    def call(self) -> Iterator[None]:
        local = self._local
        depth = getattr(local, "depth", 0)
        stop: threading.Event | None = getattr(local, "stop", None)
        if stop is not None and stop.is_set():
            raise Halted
        if depth == 0:
            with self._cond:
                while self._exiting:  # a daemon thread after exit: it waits here until the process ends
                    self._cond.wait()
                self._running += 1
        local.depth = depth + 1
        try:
            yield
        finally:
            local.depth = depth
            if depth == 0:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    @contextmanager
    def stop_on(self, stop: threading.Event) -> Iterator[None]:
        """In this thread, the native calls that would start once `stop` is set raise Halted."""
        before = getattr(self._local, "stop", None)
        self._local.stop = stop
        try:
            yield
        finally:
            self._local.stop = before

    def finish(self, timeout: float = WAIT_SECONDS) -> bool:
        """No new call starts; the calls under way are waited for. True when none is left."""
        with self._cond:
            self._exiting = True
            return self._cond.wait_for(lambda: self._running == 0, timeout)


calls = NativeCalls()
atexit.register(calls.finish)
call = calls.call
stop_on = calls.stop_on
