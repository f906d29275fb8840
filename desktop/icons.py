"""The app's icons: the brand icon (PNG sizes rendered from SVG) and line icons tinted to the palette."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from PySide6.QtCore import QByteArray, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QIcon, QImage, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

ICON_DIR = Path(__file__).resolve().parent.parent / "resources" / "icons"
BRAND_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


@cache
def app_icon() -> QIcon:
    return _brand("app")


def tray_icon(paused: bool = False) -> QIcon:
    return _brand("tray-paused" if paused else "tray")


@cache
def _brand(name: str) -> QIcon:
    icon = QIcon()
    for size in BRAND_SIZES:
        png = ICON_DIR / f"{name}-{size}.png"
        if png.exists():
            icon.addFile(str(png), QSize(size, size))
    if icon.isNull():
        icon.addFile(str(ICON_DIR / f"{name}.svg"))
    return icon


def line_icon(name: str, color: QColor | str, size: int = 24) -> QIcon:
    """A stroke icon from resources/icons/<name>.svg drawn in `color` (its `currentColor`)."""
    return _line_icon(name, QColor(color).name(), size)


@cache
def _line_icon(name: str, color: str, size: int) -> QIcon:
    path = ICON_DIR / f"{name}.svg"
    if not path.exists():
        return QIcon()
    svg = path.read_text(encoding="utf-8").replace("currentColor", color)
    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    icon = QIcon()
    for scale in (1, 2):
        px = size * scale
        image = QImage(px, px, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter, QRectF(0, 0, px, px))
        painter.end()
        pixmap = QPixmap.fromImage(image)
        pixmap.setDevicePixelRatio(scale)
        icon.addPixmap(pixmap)
    return icon
