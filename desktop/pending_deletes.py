"""Deletes with an undo window: the memory disappears from view at once, and is forgotten in the store
when the window closes. Undo simply cancels the pending delete (nothing was lost, ids and history stay).
Quitting during the window carries the delete out, because that is what the user asked for.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

UNDO_SECONDS = 12.0  # long enough to notice and reach Undo on a busy machine


class PendingDeletes(QObject):
    expired = Signal(str)  # uid: forget it now
    changed = Signal()

    def __init__(self, seconds: float = UNDO_SECONDS, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.seconds = seconds
        self._timers: dict[str, QTimer] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._timers

    @property
    def uids(self) -> list[str]:
        return list(self._timers)

    def schedule(self, uid: str) -> None:
        if uid in self._timers:
            return
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.timeout.connect(lambda: self._expire(uid))
        self._timers[uid] = timer
        timer.start(int(self.seconds * 1000))
        self.changed.emit()

    def undo(self, uid: str | None = None) -> list[str]:
        """Cancel one pending delete (or the most recent one). Returns the uids restored."""
        if not self._timers:
            return []
        uid = uid or list(self._timers)[-1]
        timer = self._timers.pop(uid, None)
        if timer is None:
            return []
        timer.stop()
        timer.deleteLater()
        self.changed.emit()
        return [uid]

    def take_all(self) -> list[str]:
        """Stop every timer and hand the uids over (to forget them synchronously at quit)."""
        uids = list(self._timers)
        for timer in self._timers.values():
            timer.stop()
        self._timers.clear()
        return uids

    def _expire(self, uid: str) -> None:
        timer = self._timers.pop(uid, None)
        if timer is not None:
            timer.deleteLater()
            self.expired.emit(uid)
            self.changed.emit()
