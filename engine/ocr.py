"""Reading text from pictures of text (OCR): scanned PDF pages and image files.

The engine is RapidOCR (PaddleOCR's detection and recognition models run by ONNX Runtime), installed
from PyPI with its models inside the package, so nothing is downloaded and nothing leaves the machine.
The model is loaded on first use (about a second) and shared by every thread of the process.

:func:`read_image` takes an RGB picture as a numpy array and returns its text in reading order: the
boxes the detector finds are grouped into lines (boxes whose vertical extents overlap), lines run top to
bottom and each line left to right. Recognised text is never logged.

What a picture may cost is limited before it is decoded (engine/limits.py: pixels per image, frames per
file, pages per document) by the callers in engine/parsers.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import UserError

log = logging.getLogger(__name__)

ENGINE_NAME = "rapidocr-onnxruntime"
DETECT_SIDE = 1600
"""Pictures are scaled to at most this many pixels on their longer side for text detection (an A4 page
rendered at 200 dpi is read at about 140 dpi); recognition reads each line found at up to MAX_SIDE."""
MAX_SIDE = 2000
"""The OCR engine reads a picture at most this many pixels on its longer side (RapidOCR's ``max_side_len``:
it reduces a larger one itself, after copying it whole), so larger pictures are reduced before they are
handed to it (engine/parsers.py)."""
MIN_CONFIDENCE = 0.5
"""Recognised boxes below this confidence are dropped (noise, specks, stamps)."""


class OcrUnavailable(UserError):
    """The OCR engine is not installed or could not be loaded."""


class OcrCancelled(Exception):
    """The ingest was cancelled while pages were being read."""


@dataclass(frozen=True)
class OcrOptions:
    """How a parse may use OCR: whether at all, whom to tell about pages read, and when to stop.

    ``progress(done, total)`` is called after each page read by OCR; ``cancel`` is checked before each.
    """

    enabled: bool = True
    progress: Callable[[int, int], None] | None = None
    cancel: threading.Event | None = None

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise OcrCancelled


_lock = threading.Lock()
_engine: Any = None


def _load() -> Any:
    global _engine
    with _lock:
        if _engine is None:
            try:
                from rapidocr_onnxruntime import RapidOCR
            except ImportError as e:  # a trimmed install
                raise OcrUnavailable(
                    f"Reading text from images needs the OCR engine ({ENGINE_NAME}), which is not installed "
                    f"(`pip install --no-deps {ENGINE_NAME}`: it runs on opencv-python-headless)."
                ) from e
            log.info("loading the OCR engine")
            try:
                # the detector's input is at most DETECT_SIDE pixels on its longer side (the package's default
                # enlarges every picture to 736 on its *shorter* side: a strip of text cost 5x as much)
                _engine = RapidOCR(det_limit_type="max", det_limit_side_len=DETECT_SIDE)
            except Exception as e:  # its models or runtime missing or damaged (a trimmed bundle)
                log.warning("the OCR engine could not be loaded: %s", type(e).__name__)
                raise OcrUnavailable(f"The OCR engine ({ENGINE_NAME}) could not be loaded ({type(e).__name__}); "
                                     "reading text from pictures is not available in this installation.") from e
        return _engine


def read_image(rgb: Any) -> str:
    """The text in an RGB image (an ``H x W x 3`` uint8 array), in reading order; '' when there is none."""
    engine = _load()
    with _lock:  # one picture at a time: the models use every core already
        result, _elapsed = engine(rgb)
    boxes = []
    for box, text, score in result or []:
        if float(score) < MIN_CONFIDENCE or not str(text).strip():
            continue
        ys = [p[1] for p in box]
        xs = [p[0] for p in box]
        boxes.append((min(ys), max(ys), min(xs), str(text).strip()))
    log.debug("OCR found %d boxes", len(boxes))
    return "\n".join(" ".join(t for _, t in line) for line in _lines(boxes))


def _lines(boxes: list[tuple[float, float, float, str]]) -> list[list[tuple[float, str]]]:
    """Group boxes (top, bottom, left, text) into lines: a box joins a line when its vertical middle lies
    within the line's extent. Lines top to bottom, boxes in a line left to right."""
    lines: list[tuple[float, float, list[tuple[float, str]]]] = []
    for top, bottom, left, text in sorted(boxes):
        middle = (top + bottom) / 2
        for i, (lt, lb, items) in enumerate(lines):
            if lt <= middle <= lb:
                items.append((left, text))
                lines[i] = (min(lt, top), max(lb, bottom), items)
                break
        else:
            lines.append((top, bottom, [(left, text)]))
    return [sorted(items) for _, _, items in sorted(lines, key=lambda line: line[0])]
