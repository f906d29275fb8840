"""Reading documents in a helper process, for the processes that stay open (the app, `serve`, MCP).

The readers of PDFs, office files, e-books, web pages and pictures (pypdf, pdfium, python-docx,
python-pptx, openpyxl, odfpy, lxml, trafilatura, Pillow, the OCR engine) take ~46 MB of a process once
imported, and a process cannot unload them: an open app that had read 200 files held ~60 MB more at rest
than before (docs/performance.md, "Memory and size"). So a process that stays open reads those files in a
helper process (`Readers`, switched on by `Engine.start_background`), which exits once it has had nothing to
read for `IDLE_SECONDS`; its memory goes with it. Plain text, Markdown, CSV, JSON and code need none of them
and are read in place (`parsers.NEEDS_READER_LIBRARIES`). A short-lived process (a CLI command, a script)
reads everything in place.

The helper also keeps what a reader does to one file from the process that stays open: a reader that
crashes or is killed (a damaged PDF crashing pdfium, the machine out of memory) fails that one file, and a
cancelled ingest stops the helper at once instead of waiting for the file being read to finish.

What one file may cost the helper is bounded twice: by the limits every reader applies (engine/limits.py:
a picture's pixels and decoded bytes are checked from its header before it is decoded, also for images
inside PDFs), and by a memory limit of the helper's own (:data:`MEMORY_MIB`, ``RLIMIT_DATA`` where the
system enforces it: Linux), so a reader that asks for more fails that one file with "needs more memory
than …" while the process that stays open goes on. A helper that a file left large (over
:data:`RETIRE_MIB` resident once the memory it freed is handed back) exits after answering, and its memory
goes with it.

The channel is the helper's stdin and stdout: length-prefixed pickles, each way. The request is
(path, max_bytes, ocr_enabled); the replies are ("progress", done, total) for each page read by OCR, then
("retiring",) when the helper will exit after this file, then ("parsed", ParsedDocument) or ("failed",
error class name, message). The helper runs this module
(`python -m engine.parse_worker`, or the bundle's program with `--parse-worker`) and is never given
anything but paths: it opens no store and holds no key. It logs nothing about what it reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from .ocr import OcrOptions
from .parsers import (
    NEEDS_READER_LIBRARIES,
    TOO_LARGE,
    DocumentError,
    ParsedDocument,
    UnsupportedDocument,
    parse_file,
)

log = logging.getLogger(__name__)

IDLE_SECONDS = 30.0
"""A helper with nothing to read for this long exits (the next file starts another, ~0.5 s)."""
MAX_HELPERS = 2
"""Helpers reading at once: a second ingest (a watched folder's file during a long OCR) does not queue."""
MEMORY_MIB = 1536
"""The helper's own memory limit (its data segment and private mappings; OCR of a full page peaks near
1 GiB of them): a reader that needs more fails its file instead of the machine running short."""
MEMORY_ENV = "PERSONAL_LLM_READER_MEMORY_MIB"
RETIRE_MIB = 300
"""A helper still this large (resident) after answering, once freed memory is handed back, exits."""
RETIRE_ENV = "PERSONAL_LLM_READER_RETIRE_MIB"
WORKER_FLAG = "--parse-worker"
"""How the bundled program (packaging/pyinstaller/launch.py) is told to be a helper."""
_POLL = 0.1  # seconds between looks at the cancel event while a file is read
_HEADER = struct.Struct("<I")
_ERRORS: dict[str, type[DocumentError]] = {"DocumentError": DocumentError, "UnsupportedDocument": UnsupportedDocument}


def _send(out: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def _receive(inp: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream (the other side has gone)."""
    header = inp.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (n,) = _HEADER.unpack(header)
    data = inp.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)  # noqa: S301  the other end is this module, in a process this one started


# ---------------------------------------------------------------------------------------------------
# The helper's side
# ---------------------------------------------------------------------------------------------------


def main() -> int:
    """Read the files asked for on stdin until it closes; each reply on stdout."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a library's print() must not land in the channel
    logging.disable(logging.CRITICAL)  # library warnings may quote what they read
    _limit_memory()
    inp = sys.stdin.buffer
    _send(channel, ("ready",))  # imported and listening: a helper that dies before this could not start
    while True:
        request = _receive(inp)
        if request is None:
            return 0
        path, max_bytes, ocr_enabled = request
        progress = lambda done, total: _send(channel, ("progress", done, total))  # noqa: E731
        try:
            answer: tuple[Any, ...] = ("parsed", parse_file(Path(path), max_bytes=max_bytes,
                                                            ocr=OcrOptions(enabled=ocr_enabled, progress=progress)))
        except DocumentError as e:
            answer = ("failed", type(e).__name__, str(e))
        except MemoryError:  # outside the reader (parse_file words its own)
            answer = ("failed", "DocumentError", TOO_LARGE.format(name=Path(path).name))
        except Exception as e:  # parse_file turns a reader's errors into DocumentError; this is anything else
            answer = ("failed", "DocumentError", f"{Path(path).name} could not be read ({type(e).__name__})")
        retiring = _still_large()
        if retiring:
            _send(channel, ("retiring",))
        _send(channel, answer)
        if retiring:
            return 0


def _limit_memory() -> None:
    """Set this process's memory limit (the parent's MEMORY_ENV, else MEMORY_MIB) where the system enforces
    one that counts what allocators use (RLIMIT_DATA counts private mappings on Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    import resource

    try:
        mib = int(os.environ.get(MEMORY_ENV, MEMORY_MIB))
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        wanted = mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
    except (ValueError, OSError) as e:
        log.info("no memory limit for the reader: %s", type(e).__name__)


def _still_large() -> bool:
    """Hand freed memory back to the system (glibc keeps it otherwise); True when this process is still over
    RETIRE_MIB resident."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return False
    try:
        retire_mib = int(os.environ.get(RETIRE_ENV, RETIRE_MIB))
    except ValueError:
        retire_mib = RETIRE_MIB
    return resident_pages * os.sysconf("SC_PAGE_SIZE") > retire_mib * 1024 * 1024


# ---------------------------------------------------------------------------------------------------
# The side that stays open
# ---------------------------------------------------------------------------------------------------


def helper_command() -> list[str] | None:
    """This Python with `-m engine.parse_worker`; in the PyInstaller bundle, its own program with WORKER_FLAG.
    None when this process was started by something else (an app bundle's launcher, which would start
    the app again): files are then read in place."""
    exe = Path(sys.executable)
    if getattr(sys, "frozen", False):
        for name in ("personal-llm", "personal-llm.exe"):
            if exe.with_name(name).exists():
                return [str(exe.with_name(name)), WORKER_FLAG]
        return None
    if exe.name.lower().startswith("python"):
        return [sys.executable, "-m", "engine.parse_worker"]
    return None


_OUT_OF_MEMORY = {-6, -9, 134}
"""How a helper ends when an allocation fails in native code (abort) or the system kills it for memory."""


class HelperStopped(Exception):
    """The helper exited before it answered."""


class HelperFailedToStart(HelperStopped):
    """The helper could not be started, or exited before it was ready (a broken install)."""


class _Helper:
    """One helper process and the thread that reads its replies into a queue (so that the cancel event can be
    looked at while a file is read, on every platform)."""

    def __init__(self) -> None:
        env = dict(os.environ)
        if not getattr(sys, "frozen", False):  # `-m engine.parse_worker` finds this engine, wherever it is
            root = str(Path(__file__).resolve().parents[1])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env[MEMORY_ENV], env[RETIRE_ENV] = str(MEMORY_MIB), str(RETIRE_MIB)
        command = helper_command()
        if command is None:
            raise HelperFailedToStart("has no program to run here")
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=env,
                                         creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0))  # Windows: no console
        except OSError as e:
            raise HelperFailedToStart(f"could not start ({type(e).__name__})") from None
        self.ready = False
        self.retiring = False  # it exits after this answer
        self.replies: queue.Queue[Any] = queue.Queue()
        self.used = time.monotonic()
        threading.Thread(target=self._read, name="parse-helper-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            try:
                message = _receive(self.proc.stdout)
            except Exception:  # a torn message: the helper died mid-write
                message = None
            self.replies.put(message)
            if message is None:
                return

    def read(self, path: Path, max_bytes: int, ocr: OcrOptions) -> ParsedDocument:
        assert self.proc.stdin is not None
        try:
            _send(self.proc.stdin, (str(Path(path).absolute()), max_bytes, ocr.enabled))
        except OSError:
            raise HelperStopped("gone") from None
        while True:
            try:
                message = self.replies.get(timeout=_POLL)
            except queue.Empty:
                ocr.check_cancel()
                continue
            if message is None:
                raise HelperStopped("exited") if self.ready else HelperFailedToStart("exited before it was ready")
            if message[0] == "ready":
                self.ready = True
                continue
            if message[0] == "retiring":
                self.retiring = True
                continue
            if message[0] == "progress":
                if ocr.progress is not None:
                    ocr.progress(message[1], message[2])
                continue
            self.used = time.monotonic()
            if message[0] == "parsed":
                return message[1]  # type: ignore[no-any-return]
            raise _ERRORS.get(message[1], DocumentError)(message[2])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # the helper's loop ends at the end of its input
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Readers:
    """Reads files in place, or in helper processes once `use_helpers()` has been called."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._idle: list[_Helper] = []
        self._busy = 0
        self._helpers_on = False
        self._closed = False
        self._timer: threading.Timer | None = None
        self.started = 0  # helpers started (tests, docs/performance.md)

    def use_helpers(self, on: bool = True) -> None:
        with self._lock:
            self._helpers_on = on and not self._closed

    def parse(self, path: Path, *, max_bytes: int, ocr: OcrOptions | None = None) -> ParsedDocument:
        """parsers.parse_file, in a helper when helpers are on and the file's kind needs one. If a helper cannot
        start, files are read in place from then on (logged); if it stops while reading, the file fails."""
        ocr = ocr or OcrOptions()
        if not self._helpers_on or Path(path).suffix.lower() not in NEEDS_READER_LIBRARIES:
            return parse_file(path, max_bytes=max_bytes, ocr=ocr)
        try:
            helper = self._take()
        except HelperFailedToStart as e:
            return self._in_place_from_now(e, path, max_bytes, ocr)
        try:
            parsed = helper.read(path, max_bytes, ocr)
        except DocumentError:  # the helper's whole answer: it is ready for the next file
            self._give_back(helper)
            raise
        except HelperFailedToStart as e:
            helper.kill()
            self._give_back(None)
            return self._in_place_from_now(e, path, max_bytes, ocr)
        except HelperStopped:
            helper.kill()
            self._give_back(None)
            log.warning("the document reader process stopped while reading a %s file", Path(path).suffix.lower())
            if helper.proc.returncode in _OUT_OF_MEMORY:
                raise DocumentError(TOO_LARGE.format(name=Path(path).name)) from None
            raise DocumentError(f"{Path(path).name} could not be read: its reader stopped unexpectedly") from None
        except BaseException:  # cancelled (or interrupted) mid-file: its answer would come to the next file
            helper.kill()
            self._give_back(None)
            raise
        self._give_back(helper)
        return parsed

    def _in_place_from_now(self, e: Exception, path: Path, max_bytes: int, ocr: OcrOptions) -> ParsedDocument:
        log.warning("the document reader process %s; reading in this process from now on", e)
        with self._lock:
            self._helpers_on = False
        return parse_file(path, max_bytes=max_bytes, ocr=ocr)

    def _take(self) -> _Helper:
        with self._lock:
            while True:
                while self._idle:
                    helper = self._idle.pop()
                    if helper.alive():
                        self._busy += 1
                        return helper
                    helper.stop()
                if self._busy < MAX_HELPERS:
                    self._busy += 1
                    break
                self._lock.wait()
        try:
            helper = _Helper()
        except BaseException:
            with self._lock:
                self._busy -= 1
                self._lock.notify()
            raise
        with self._lock:
            self.started += 1
        return helper

    def _give_back(self, helper: _Helper | None) -> None:
        with self._lock:
            self._busy -= 1
            if helper is not None:
                if self._closed or helper.retiring:
                    helper.stop()
                else:
                    self._idle.append(helper)
            self._lock.notify()
            self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer is None and self._idle and not self._closed:
            self._timer = threading.Timer(IDLE_SECONDS / 2, self._stop_idle)
            self._timer.daemon = True
            self._timer.start()

    def _stop_idle(self) -> None:
        """Stop the helpers that have had nothing to read for IDLE_SECONDS (checked every half of it)."""
        now = time.monotonic()
        with self._lock:
            self._timer = None
            done = [h for h in self._idle if now - h.used >= IDLE_SECONDS]
            self._idle = [h for h in self._idle if h not in done]
            self._arm_timer()
        for h in done:
            h.stop()

    def helpers(self) -> int:
        """Helper processes alive now, reading or not."""
        with self._lock:
            return self._busy + sum(h.alive() for h in self._idle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._helpers_on = False
            idle, self._idle = self._idle, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        for h in idle:
            h.stop()


if __name__ == "__main__":
    sys.exit(main())
