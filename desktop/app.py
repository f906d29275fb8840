"""The desktop app's composition root and the `personal-llm-desktop` entry point.

    personal-llm-desktop             open the window (or bring the running one to the front)
    personal-llm-desktop --capture   open the running instance's quick-capture box (bind this on Wayland)
    personal-llm-desktop --hidden    start in the tray
    personal-llm-desktop --self-test run the engine's self-test and exit with its code
    personal-llm-desktop --profile NAME   use another profile (one on a server, say: `personal-llm connect`)
    personal-llm-desktop FILE…       add these files (or folders) to memory — in the running app when there is
                                     one ("Open with" from a file manager)

The window appears first; the engine opens on the bridge's writer thread right after the first paint,
and the embedding model loads in the background after that.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEventLoop, QObject, QSocketNotifier, Qt, QTimer, Signal
from PySide6.QtWidgets import QApplication, QDialog, QInputDialog, QLineEdit, QMessageBox

from . import startup_report, theme
from .bridge import Bridge, EngineInfo, report_crashes

if TYPE_CHECKING:
    from .bridge import HealthReport
from .first_run import RecoveryKeyDialog, WhereDialog
from .hotkey import GlobalHotkey, HotkeyStatus
from .main_window import MainWindow
from .pending_deletes import UNDO_SECONDS
from .profile import named_profile, profile_home, profile_kind, saved_theme
from .quick_capture import QuickCapture
from .recovery_dialogs import OpenWithRecoveryDialog
from .single_instance import SingleInstance
from .theme import Theme
from .tray import Tray

log = logging.getLogger(__name__)

CONSOLIDATE_EVERY_MS = 6 * 3600 * 1000  # scheduled tidy-up while the app runs (first one 10 min after start)
CONSOLIDATE_FIRST_MS = 10 * 60 * 1000
HEALTH_EVERY_MS = 15_000  # the language model's server is asked again this often (and after a failed answer)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="personal-llm-desktop", description="Personal LLM desktop app")
    parser.add_argument("--capture", action="store_true", help="open the quick-capture box")
    parser.add_argument("--hidden", action="store_true", help="start in the tray, without the window")
    parser.add_argument("--self-test", action="store_true", help="run the engine self-test and exit")
    parser.add_argument("--profile", metavar="NAME", help="use the profile called NAME (`personal-llm --profile`)")
    parser.add_argument("files", nargs="*", metavar="FILE", help="files or folders to add to your memory")
    return parser.parse_args(argv)


class DesktopApp(QObject):
    """Builds and connects the pieces; owns the quit sequence."""

    quitted = Signal(int)

    def __init__(self, home: Path, *, single: SingleInstance | None = None, hidden: bool = False, embedder: Any = None, undo_seconds: float = UNDO_SECONDS,
                 use_tray: bool = True, use_hotkey: bool = True, start_background: bool = True,
                 ask_where: bool = True) -> None:
        super().__init__()
        self.home = home
        self.ask_where = ask_where  # a new profile: this computer, or a server? (first_run.WhereDialog)
        self.where_dialog: WhereDialog | None = None
        self.bridge = Bridge(home, embedder=embedder, start_background=start_background)
        self.window = MainWindow(self.bridge, undo_seconds=undo_seconds, state_file=home / "window.ini")
        self.capture = QuickCapture()
        self.tray = Tray(self) if use_tray and Tray.available() else None
        self.hotkey = GlobalHotkey(self) if use_hotkey else None
        self.single = single
        self._quitting = False
        self._passphrase_tries = 0
        self.recovery_dialog: QDialog | None = None
        self._info: EngineInfo | None = None
        self._wire()
        self._tidy_timer = QTimer(self)
        self._tidy_timer.setInterval(CONSOLIDATE_EVERY_MS)
        self._tidy_timer.timeout.connect(self._scheduled_consolidation)
        self._health_timer = QTimer(self)
        self._health_timer.setInterval(HEALTH_EVERY_MS)
        self._health_timer.timeout.connect(self.recheck_health)
        self._checking_health = False
        self._first_health_shown = False
        self._pending_files: list[str] = []
        if self.tray is not None:
            self.tray.show()
            self.window.close_to_tray = True
        startup_report.mark("tray", available=self.tray is not None)
        if hidden and self.tray is not None:
            self._open_engine()
        else:
            self.window.first_painted.connect(self._first_paint, Qt.ConnectionType.SingleShotConnection)
            self.window.show()

    # ------------------------------------------------------------------------------------------------
    def handle_arguments(self, args: list[str]) -> None:
        """Arguments from a second launch (or this one's own flags and files)."""
        ns = parse_args([a for a in args if a.startswith("--")])
        files = [str(Path(a).expanduser().resolve()) for a in args if not a.startswith("--")]
        if files:
            self.ingest_files(files)
        if ns.capture:
            self.open_capture()
        elif not ns.hidden:
            self.window.bring_to_front()

    def ingest_files(self, paths: list[str]) -> None:
        """Add files to memory (now, or as soon as the store is open), progress on the Documents page."""
        if self._info is None:
            self._pending_files += paths
            return
        self.window.ingest(paths)
        self.window.bring_to_front()

    def open_capture(self) -> None:
        self.capture.open_box()
        startup_report.mark("capture_opened")

    def quit(self, code: int = 0) -> None:
        if self._quitting:
            return
        self._quitting = True
        log.info("quitting")
        if self.single is not None:
            self.single.close()  # a new launch now starts afresh instead of talking to this one
        self.capture.hide()
        if self.window.isVisible():
            self.window.save_geometry()
        if self.recovery_dialog is not None:
            self.recovery_dialog.hide()
        self.window.hide()
        if self.tray is not None:
            self.tray.hide()
        # gone from the screen now, not after the store has closed (a model still loading holds that up)
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
        try:
            self.window.memories.save_edit()  # an edit under way is saved, never thrown away (queued before the close)
        except Exception:
            log.exception("the edit under way could not be saved at quit")
        try:
            if self.window.is_built:
                self.window.settings.save_pending()  # changed on the Settings page and not saved yet
        except Exception:
            log.exception("the settings changed on their page could not be saved at quit")
        try:
            self.window.memories.flush_deletes()
            if self.window.is_built:
                self.window.graph.flush_deletes()
        except Exception:
            log.exception("pending deletes could not be carried out at quit")
        self._tidy_timer.stop()
        self._health_timer.stop()
        if self.hotkey is not None:
            self.hotkey.stop()
        try:
            self.bridge.close()
        except Exception:
            log.exception("closing the engine failed")
        if self.tray is not None:
            self.tray.hide()
        self.quitted.emit(code)

    # ------------------------------------------------------------------------------------------------
    def _wire(self) -> None:
        b, w = self.bridge, self.window
        b.opened.connect(self._opened)
        b.open_failed.connect(self._open_failed)
        b.settings_changed.connect(self._settings_saved)  # by this app, or in settings.json by another program
        b.model_state_changed.connect(self._model_state)
        b.connection_changed.connect(w.status.set_connection)
        b.answer_failed.connect(lambda _message: self.recheck_health())
        w.quit_requested.connect(self.quit)
        w.capture_requested.connect(self.open_capture)
        w.projects_loaded.connect(self.capture.set_projects)  # read when the store opens and after each change
        w.hidden_to_tray.connect(self._hidden_to_tray)
        w.pages_built.connect(self._wire_pages)
        self.capture.capture_submitted.connect(self._capture_submitted)
        self.capture.files_dropped.connect(self._capture_files)
        if self.tray is not None:
            t = self.tray
            t.capture_requested.connect(self.open_capture)
            t.open_requested.connect(w.bring_to_front)
            t.ask_requested.connect(w.open_ask)
            t.pause_toggled.connect(b.set_paused)
            b.paused_changed.connect(t.set_paused)
            t.quit_requested.connect(self.quit)
        if self.hotkey is not None:
            self.hotkey.activated.connect(self.open_capture)
            self.hotkey.status_changed.connect(self._hotkey_status)

    def _wire_pages(self) -> None:
        self.window.settings.hotkey_changed.connect(self._start_hotkey)
        self.window.settings.sections.server.disconnected.connect(self._disconnected)
        if self.hotkey is not None:
            self.window.settings.set_hotkey_status(self.hotkey.status)

    def _first_paint(self) -> None:
        startup_report.mark("window_painted")
        QTimer.singleShot(0, self._open_engine)

    def _open_engine(self) -> None:
        self.window.build_pages()  # every screen listens before the engine reports in
        if self.ask_where and profile_kind(self.home) == "new":
            self._ask_where()
            return
        self.bridge.open()

    def _ask_where(self) -> None:
        """First run: keep the memory on this computer, or connect to a server; the store opens after."""
        dialog = WhereDialog(self.bridge, self.window)
        dialog.chosen.connect(lambda _where: self.bridge.open())
        dialog.rejected.connect(lambda: self.quit(0))
        self.where_dialog = dialog
        dialog.show()

    def _disconnected(self) -> None:
        QMessageBox.information(self.window, "Disconnected",
                                "This computer no longer uses the server. Start Personal LLM again to choose where "
                                "your memory lives.")
        self.quit(0)

    def _opened(self, info: EngineInfo) -> None:
        self._info = info
        startup_report.mark("engine_opened")
        self.window.status.set_connection(info.connection)
        self._start_hotkey(info.settings.hotkey)
        self.recheck_health(refresh=False)
        self._health_timer.start()
        self._tidy_timer.start()
        QTimer.singleShot(CONSOLIDATE_FIRST_MS, self._scheduled_consolidation)
        if info.created:
            self.window.show_first_run(info, None)
        if info.recovery_key:
            self._show_recovery_key(info.recovery_key)
        if self._pending_files:
            files, self._pending_files = self._pending_files, []
            self.ingest_files(files)

    def _show_recovery_key(self, key: str) -> None:
        """Shown once, at first run: the key opens this memory on any computer if this one's keychain is lost.
        Copy, save and print; the user confirms they kept it (until then Settings → Recovery reminds them)."""
        dialog = RecoveryKeyDialog(key, first_run=True, parent=self.window)
        dialog.confirmed.connect(lambda: self.window.settings.sections.recovery.confirm_kept())
        self.recovery_dialog = dialog
        dialog.show()

    def _scheduled_consolidation(self) -> None:
        if self._quitting or self.bridge.paused or self.bridge.busy:
            return  # paused by the user, or busy: the next tick tries again
        self.bridge.consolidate(lambda report: log.info("scheduled consolidation done"),
                                lambda message: log.info("scheduled consolidation failed"))

    def recheck_health(self, refresh: bool = True) -> None:
        """Ask the language model's server again (on a timer, after a failed answer, after saving settings)."""
        if self._quitting or self._checking_health:
            return
        self._checking_health = True
        self.bridge.health(self._health_checked, refresh=refresh)

    def _health_checked(self, health: HealthReport) -> None:
        self._checking_health = False
        self.window.status.set_llm(health.llm_ok, health.llm_detail)
        if self._info is not None and self._info.created and (self.window.first_run.isVisible()
                                                              or not self._first_health_shown):
            self._first_health_shown = True
            self.window.show_first_run(self._info, health)  # updated while shown; never back once dismissed

    def _model_state(self, state: str, detail: str) -> None:
        if state == "ready":
            startup_report.mark("model_ready")
        if self._info is not None and self._info.created and self.window.first_run.isVisible():
            self.bridge.health(self._health_checked)

    def _open_failed(self, message: str, needs_passphrase: bool) -> None:
        if needs_passphrase:
            phrase = self._ask_passphrase(retry=(self.bridge.store_exists() or self.bridge.uses_passphrase())
                                          and self._passphrase_tries > 0)
            self._passphrase_tries += 1
            if phrase:
                self.bridge.open(passphrase=phrase)
                return
            if self.bridge.store_exists():  # a forgotten passphrase: the recovery key opens it too
                self._open_with_recovery("No passphrase was given.")
                return
        elif self.bridge.open_error == "key_missing" and self.bridge.store_exists():
            self._open_with_recovery(message)
            return
        else:
            QMessageBox.critical(self.window, "Personal LLM could not open your memory", message)
        self.quit(1)

    def _open_with_recovery(self, reason: str) -> None:
        """The key is not in this computer's keychain (or the passphrase is forgotten): offer the recovery key
        instead of failing. Opening follows through the bridge (`opened`)."""
        dialog = OpenWithRecoveryDialog(self.bridge, reason, self.window)
        dialog.unlocked.connect(self.window.status.post)
        dialog.rejected.connect(lambda: self.bridge.info is None and self.quit(1))
        self.recovery_dialog = dialog
        dialog.show()

    def _ask_passphrase(self, retry: bool) -> str | None:
        """The store's passphrase; a new one is typed twice so a typo cannot lock the user out."""
        def ask(prompt: str) -> str | None:
            phrase, ok = QInputDialog.getText(self.window, "Unlock your memory", prompt, QLineEdit.EchoMode.Password)
            return phrase if ok and phrase else None

        if self.bridge.store_exists() or self.bridge.uses_passphrase():
            return ask(("That passphrase does not open your memory. Try again:\n" if retry else "")
                       + "No keychain is available on this computer, so your memory is protected by a "
                       "passphrase.\nEnter it to open your memory:")
        while True:
            first = ask("No keychain is available on this computer, so your memory will be protected by a "
                        "passphrase.\nChoose one (if you forget it, the recovery key shown next opens your memory):")
            if first is None:
                return None
            if problem := self.bridge.passphrase_problem(first):
                QMessageBox.warning(self.window, "Choose a longer passphrase", problem)
                continue
            second = ask("Type the same passphrase again:")
            if second is None:
                return None
            if first == second:
                return first
            QMessageBox.warning(self.window, "Passphrases differ", "The two passphrases differ; try again.")

    def _start_hotkey(self, shortcut: str) -> None:
        if self.hotkey is not None:
            self.hotkey.start(shortcut)
        if self.tray is not None:
            self.tray.set_hotkey_hint(shortcut if self.hotkey and self.hotkey.status.active else None)

    def _hotkey_status(self, status: HotkeyStatus) -> None:
        startup_report.mark("hotkey", state=status.state)
        if self.window.is_built:
            self.window.settings.set_hotkey_status(status)
        if self.tray is not None and self._info is not None:
            self.tray.set_hotkey_hint(self._info.settings.hotkey if status.active else None)

    def _settings_saved(self, settings: Any) -> None:
        if self._info is not None:
            from dataclasses import replace

            self._info = replace(self._info, settings=settings)
        self.bridge.health(self._health_checked)

    def _capture_submitted(self, text: str, kind: str, project: str) -> None:
        self.bridge.remember(text, kind=kind, project=project or None, embed="background",
                             done=self._captured, failed=self.capture.mark_failed)

    def _captured(self, result: Any) -> None:
        startup_report.mark("captured")
        self.capture.mark_saved(result)
        connection = self.bridge.connection
        if connection is not None and getattr(connection, "token_refused", False):
            self.window.status.post("Kept, waiting to send: the server refused this computer's token (Settings → "
                                    "Where your memory is → Use a new token).", 10)
            return
        if connection is not None and connection.reachable is False:
            self.window.status.post("Waiting to send.", 6)
            return
        self.window.status.post("Merged with a memory you already had." if result.merged else "Memory saved.")

    def _capture_files(self, paths: list[str]) -> None:
        self.window.build_pages()
        if self.window.documents.ingest(paths):
            if self.tray is None or self.window.isVisible():
                self.window.show_page("documents")
        else:
            self.capture.show_message("Adding documents isn't available in this version yet.")

    def _hidden_to_tray(self) -> None:
        if self.tray is None or self._info is None or self._info.settings.tray_notice_shown:
            return
        hotkey = self._info.settings.hotkey if self.hotkey and self.hotkey.status.active else None
        self.tray.notify("Personal LLM is still running",
                         (f"Press {hotkey} to capture a memory. " if hotkey else "")
                         + "Use the tray icon to open it again or to quit.")
        self.bridge.update_settings({"tray_notice_shown": True})


def quit_on_signals(desktop: DesktopApp) -> Any:
    """SIGTERM (a logout, a shutdown, `kill`) and SIGINT quit the app as its Quit does: the edit under way is
    saved, pending deletes are carried out and the store is closed. Python runs a signal's handler only when
    the interpreter next runs, and an idle Qt loop waits in C: the signal's wake-up byte, written to a socket
    Qt watches, wakes it. Returns what must be kept alive (None where this is not possible)."""
    try:
        read, write = socket.socketpair()
        read.setblocking(False)
        write.setblocking(False)
        signal.set_wakeup_fd(write.fileno())
    except (OSError, ValueError, AttributeError):  # not the main thread, or no socketpair
        return None
    notifier = QSocketNotifier(read.fileno(), QSocketNotifier.Type.Read)

    def drain() -> None:
        try:
            read.recv(64)
        except OSError:
            pass

    notifier.activated.connect(drain)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: QTimer.singleShot(0, desktop.quit))
    return notifier, read, write


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        from .bridge import run_self_test

        return run_self_test()
    import qasync

    QApplication.setApplicationName("Personal LLM")
    QApplication.setOrganizationName("personal-llm")
    QApplication.setDesktopFileName("personal-llm")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    home = profile_home()
    if args.profile:
        home = named_profile(home, args.profile)
        home.mkdir(parents=True, exist_ok=True)
    single = SingleInstance(home)
    files = [str(Path(f).expanduser().resolve()) for f in args.files]
    forwarded = [a for a in ("--capture", "--hidden") if getattr(args, a[2:])] + files
    if single.forward(forwarded):
        return 0
    single.listen()
    report_crashes()
    theme.set_mode(saved_theme(home))
    Theme(app)
    from .icons import app_icon

    app.setWindowIcon(app_icon())
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    finished: asyncio.Future[int] = loop.create_future()
    desktop = DesktopApp(home, single=single, hidden=args.hidden)
    single.arguments_received.connect(desktop.handle_arguments)
    desktop.quitted.connect(lambda code: finished.done() or finished.set_result(code))
    kept = quit_on_signals(desktop)
    if args.capture:
        desktop.open_capture()
    if files:
        desktop.ingest_files(files)
    with loop:
        code = loop.run_until_complete(finished)
    if kept is not None:
        signal.set_wakeup_fd(-1)
    single.close()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
