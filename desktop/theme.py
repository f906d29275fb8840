"""Appearance: light, dark, or following the OS scheme (Qt 6.5+ `styleHints().colorScheme()`), one accent.

The palette is set explicitly for both schemes so the app looks the same on every desktop (Fusion style),
and it is re-applied whenever the OS switches between light and dark (in "system" mode) or the user picks
a mode in Settings (`set_mode`).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from .icons import ICON_DIR

ACCENT = "#6366F1"
MODES = (("Same as the system", "system"), ("Light", "light"), ("Dark", "dark"))
_mode = "system"
_themes: list[Theme] = []


def is_dark() -> bool:
    if _mode != "system":
        return _mode == "dark"
    hints = QGuiApplication.styleHints()
    return hints.colorScheme() == Qt.ColorScheme.Dark


def mode() -> str:
    return _mode


def set_mode(value: str) -> None:
    """system | light | dark; re-applies the palette now."""
    global _mode
    _mode = value if value in {m for _label, m in MODES} else "system"
    if not _themes:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            Theme(app)
        return
    for t in list(_themes):
        t.apply()


def palette(dark: bool) -> QPalette:
    p = QPalette()
    if dark:
        base, window, text, mid, muted = "#1E1F24", "#25262C", "#E8E9ED", "#3A3B43", "#9DA0AA"
        button = "#2E2F36"
    else:
        base, window, text, mid, muted = "#FFFFFF", "#F5F5F7", "#1D1D1F", "#D7D8DD", "#6E6E76"
        button = "#FFFFFF"
    roles = {
        QPalette.ColorRole.Window: window,
        QPalette.ColorRole.WindowText: text,
        QPalette.ColorRole.Base: base,
        QPalette.ColorRole.AlternateBase: window,
        QPalette.ColorRole.Text: text,
        QPalette.ColorRole.Button: button,
        QPalette.ColorRole.ButtonText: text,
        QPalette.ColorRole.ToolTipBase: base,
        QPalette.ColorRole.ToolTipText: text,
        QPalette.ColorRole.PlaceholderText: muted,
        QPalette.ColorRole.Mid: mid,
        QPalette.ColorRole.Midlight: mid,
        QPalette.ColorRole.Highlight: ACCENT,
        QPalette.ColorRole.HighlightedText: "#FFFFFF",
        QPalette.ColorRole.Link: "#8B8DF8" if dark else "#4F46E5",
        QPalette.ColorRole.BrightText: "#FF6B6B",
    }
    for role, color in roles.items():
        p.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(muted))
    return p


def muted_color() -> QColor:
    return QColor("#9DA0AA" if is_dark() else "#6E6E76")


def text_color() -> QColor:
    return QApplication.palette().color(QPalette.ColorRole.Text)


STYLE = """
QWidget { font-size: 10pt; }
#Sidebar { background: palette(window); border: none; border-right: 1px solid palette(mid); outline: 0; }
#Sidebar::item { padding: 8px 10px; margin: 2px 6px; border-radius: 6px; }
#Sidebar::item:selected { background: palette(highlight); color: palette(highlighted-text); border: none; }
#Sidebar::item:hover:!selected { background: rgba(99,102,241,0.10); }
#PageTitle { font-size: 15pt; font-weight: 600; }
#Muted, QLabel[muted="true"] { color: palette(placeholder-text); }
#EmptyState { color: palette(placeholder-text); font-size: 11pt; }
#Card { background: palette(base); border: 1px solid palette(mid); border-radius: 10px; }
#Drawer { background: palette(window); border: 1px solid palette(mid); border-radius: 8px; }
#Banner { border-radius: 8px; padding: 8px 12px; }
#Banner[tone="info"] { background: rgba(99,102,241,0.14); }
#Banner[tone="warn"] { background: rgba(245,158,11,0.18); }
#Banner[tone="error"] { background: rgba(239,68,68,0.16); }
#Banner[tone="ok"] { background: rgba(16,185,129,0.16); }
#DropZone { border: 2px dashed palette(mid); border-radius: 12px; background: palette(base); }
#DropZone[active="true"] { border-color: palette(highlight); background: rgba(99,102,241,0.08); }
#CapturePanel { background: palette(base); border: 1px solid palette(highlight); }
#CaptureInput { border: none; font-size: 15pt; padding: 6px 2px; background: transparent; }
QLineEdit, QPlainTextEdit, QTextBrowser, QComboBox, QKeySequenceEdit {
    border: 1px solid palette(mid); border-radius: 6px; padding: 4px 6px; background: palette(base);
}
QComboBox { padding-right: 22px; }
QComboBox::drop-down { subcontrol-origin: padding; subcontrol-position: center right; width: 20px; border: none; }
QComboBox::down-arrow { image: url(@CHEVRON@); width: 12px; height: 12px; }
/* the list opens below the box, and its items (the current one too) are drawn by these rules: with the
   box's own rules alone, Fusion drew the current item over the box as an empty white field */
QComboBox { combobox-popup: 0; }
QComboBox QAbstractItemView { border: 1px solid palette(mid); border-radius: 0; background: palette(base);
    color: palette(text); outline: 0; padding: 2px; }
QComboBox QAbstractItemView::item { padding: 4px 8px; min-height: 18px; }
QComboBox QAbstractItemView::item:selected { background: palette(highlight); color: palette(highlighted-text); }
QLineEdit:focus, QPlainTextEdit:focus, QComboBox:focus { border-color: palette(highlight); }
QPushButton { border: 1px solid palette(mid); border-radius: 6px; padding: 5px 14px; background: palette(button); }
QPushButton:hover { border-color: palette(highlight); }
QPushButton[primary="true"] { background: palette(highlight); color: palette(highlighted-text); border: none; }
QPushButton[danger="true"] { color: #DC2626; }
QPushButton[primary="true"]:disabled { background: palette(button); color: palette(placeholder-text);
    border: 1px solid palette(mid); }
QPushButton[danger="true"]:disabled { color: palette(placeholder-text); }
QTreeView { outline: 0; }
QTreeView, QListView { border: 1px solid palette(mid); border-radius: 8px; background: palette(base); }
QTreeView::item { padding: 5px 2px; }
QHeaderView::section { background: palette(window); border: none; border-bottom: 1px solid palette(mid);
    padding: 5px 6px; font-weight: 600; }
QStatusBar { border-top: 1px solid palette(mid); }
QStatusBar QLabel { padding: 0 8px; }
QProgressBar { border: 1px solid palette(mid); border-radius: 5px; text-align: center; height: 14px; }
QProgressBar::chunk { background: palette(highlight); border-radius: 4px; }
"""


class Theme(QObject):
    """Applies the palette and style sheet now and again whenever the OS scheme changes."""

    scheme_changed = Signal(bool)  # dark

    def __init__(self, app: QApplication) -> None:
        super().__init__(app)
        self._app = app
        app.setStyle("Fusion")
        _themes[:] = [self]
        self.apply()
        QGuiApplication.styleHints().colorSchemeChanged.connect(lambda _scheme: self.apply())

    def apply(self) -> None:
        dark = is_dark()
        self._app.setPalette(palette(dark))
        chevron = (ICON_DIR / f"chevron-down-{'dark' if dark else 'light'}.svg").as_posix()
        self._app.setStyleSheet(STYLE.replace("@CHEVRON@", chevron))
        self.scheme_changed.emit(dark)
