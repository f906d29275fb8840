"""The tray icon and its menu: Quick capture, Open, Ask…, Pause background work, Quit."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from . import icons, theme


class Tray(QObject):
    capture_requested = Signal()
    open_requested = Signal()
    ask_requested = Signal()
    pause_toggled = Signal(bool)
    quit_requested = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.menu = QMenu()
        color = theme.text_color()
        self.capture_action = self._add("Quick capture", "capture", self.capture_requested.emit, color)
        self.open_action = self._add("Open Personal LLM", "open", self.open_requested.emit, color)
        self.ask_action = self._add("Ask…", "ask", self.ask_requested.emit, color)
        self.menu.addSeparator()
        self.pause_action = QAction(icons.line_icon("pause", color), "Pause background work", self.menu)
        self.pause_action.setCheckable(True)
        self.pause_action.toggled.connect(self.pause_toggled.emit)
        self.menu.addAction(self.pause_action)
        self.menu.addSeparator()
        self.quit_action = self._add("Quit Personal LLM", "quit", self.quit_requested.emit, color)
        self.icon = QSystemTrayIcon(icons.tray_icon(), self)
        self.icon.setToolTip("Personal LLM")
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)

    @staticmethod
    def available() -> bool:
        return QSystemTrayIcon.isSystemTrayAvailable()

    def show(self) -> None:
        self.icon.show()

    def hide(self) -> None:
        self.icon.hide()

    def set_hotkey_hint(self, shortcut: str | None) -> None:
        self.capture_action.setText(f"Quick capture\t{shortcut}" if shortcut else "Quick capture")

    def set_paused(self, paused: bool) -> None:
        if self.pause_action.isChecked() != paused:
            self.pause_action.blockSignals(True)
            self.pause_action.setChecked(paused)
            self.pause_action.blockSignals(False)
        self.pause_action.setText("Resume background work" if paused else "Pause background work")
        self.icon.setIcon(icons.tray_icon(paused))
        self.icon.setToolTip("Personal LLM — background work paused" if paused else "Personal LLM")

    def notify(self, title: str, message: str) -> None:
        self.icon.showMessage(title, message, icons.app_icon(), 8000)

    def _add(self, text: str, icon: str, slot, color) -> QAction:
        action = QAction(icons.line_icon(icon, color), text, self.menu)
        action.triggered.connect(lambda _checked=False: slot())
        self.menu.addAction(action)
        return action

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.open_requested.emit()
