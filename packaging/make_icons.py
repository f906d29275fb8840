"""Render the app and tray icons from their SVG sources into PNGs (16…512 px), offscreen.

    .venv/bin/python packaging/make_icons.py

Run it after editing resources/icons/app.svg, tray.svg or tray-paused.svg; the PNGs are committed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QRectF, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
SOURCES = ("app", "tray", "tray-paused")


def render(svg: Path, size: int, out: Path) -> None:
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    if not image.save(str(out), "PNG"):
        raise SystemExit(f"could not write {out}")


def main() -> int:
    QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    for name in SOURCES:
        for size in SIZES:
            render(ICONS / f"{name}.svg", size, ICONS / f"{name}-{size}.png")
    print(f"wrote {len(SOURCES) * len(SIZES)} PNGs to {ICONS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
