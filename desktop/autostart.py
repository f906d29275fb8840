"""Start at login: an XDG autostart entry on Linux, a LaunchAgent on macOS, the Run key on Windows."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

log = logging.getLogger(__name__)

NAME = "personal-llm"
PACKAGED_TEMPLATE = Path("/usr/share/personal-llm/autostart/personal-llm.desktop")


def launch_command() -> list[str]:
    """How to start this installation hidden in the tray."""
    exe = Path(sys.argv[0]).resolve()
    if exe.name.startswith("personal-llm-desktop") or getattr(sys, "frozen", False):
        return [str(exe), "--hidden"]
    return [sys.executable, "-m", "desktop.app", "--hidden"]


def _linux_path() -> Path:
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "autostart" / f"{NAME}.desktop"


def _mac_path() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / "org.personalllm.app.plist"


def is_enabled() -> bool:
    if sys.platform == "win32":
        import winreg

        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, r"Software\Microsoft\Windows\CurrentVersion\Run") as key:
                winreg.QueryValueEx(key, "Personal LLM")
            return True
        except OSError:
            return False
    return (_mac_path() if sys.platform == "darwin" else _linux_path()).exists()


def set_enabled(enabled: bool) -> None:
    """Turn start-at-login on or off for the current user. Raises OSError with a readable message."""
    cmd = launch_command()
    if sys.platform == "win32":
        import subprocess
        import winreg

        with winreg.OpenKey(winreg.HKEY_CURRENT_USER, r"Software\Microsoft\Windows\CurrentVersion\Run", 0,
                            winreg.KEY_SET_VALUE) as key:
            if enabled:
                winreg.SetValueEx(key, "Personal LLM", 0, winreg.REG_SZ, subprocess.list2cmdline(cmd))
            else:
                try:
                    winreg.DeleteValue(key, "Personal LLM")
                except FileNotFoundError:
                    pass
        return
    path = _mac_path() if sys.platform == "darwin" else _linux_path()
    if not enabled:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if sys.platform == "darwin":
        args = "".join(f"<string>{a}</string>" for a in cmd)
        path.write_text(
            '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" '
            '"http://www.apple.com/DTDs/PropertyList-1.0.dtd">\n<plist version="1.0"><dict>'
            "<key>Label</key><string>org.personalllm.app</string>"
            f"<key>ProgramArguments</key><array>{args}</array><key>RunAtLoad</key><true/></dict></plist>\n",
            encoding="utf-8",
        )
    elif PACKAGED_TEMPLATE.exists():
        path.write_text(PACKAGED_TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    else:
        path.write_text(
            "[Desktop Entry]\nType=Application\nName=Personal LLM\nComment=Your encrypted local memory\n"
            f"Exec={shlex.join(cmd)}\nIcon=personal-llm\nTerminal=false\nX-GNOME-Autostart-enabled=true\n",
            encoding="utf-8",
        )
    log.info("start at login enabled")
