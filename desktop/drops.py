"""What a drag carries: local files/folders (to ingest) or plain text (to remember)."""

from __future__ import annotations

from PySide6.QtCore import QMimeData


def local_paths(mime: QMimeData) -> list[str]:
    if not mime.hasUrls():
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile() and url.toLocalFile()]


def dropped_text(mime: QMimeData) -> str:
    if mime.hasUrls():
        return ""
    return mime.text().strip() if mime.hasText() else ""
