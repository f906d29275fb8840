"""A real X server for tests: Xvfb on a free display number, optionally with a tray host (trayer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TOOLS = ("Xvfb", "trayer", "xdotool")


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


class XServer:
    """Xvfb on a display number it picks itself (-displayfd), so servers started at once never collide."""

    def __init__(self, width: int = 1280, height: int = 800) -> None:
        self.number = -1
        self.display = ""
        self.size = (width, height)
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> XServer:
        read, write = os.pipe()
        try:
            self.procs.append(subprocess.Popen(
                ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{self.size[0]}x{self.size[1]}x24",
                 "-nolisten", "tcp"], pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            os.close(write)
            write = -1
            number = b""
            deadline = time.monotonic() + 10
            while not number.endswith(b"\n"):
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    raise RuntimeError("Xvfb did not start")
                chunk = os.read(read, 16)
                if not chunk:
                    raise RuntimeError("Xvfb did not start")
                number += chunk
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)
        self.number = int(number.strip())
        self.display = f":{self.number}"
        return self

    def start_tray_host(self, *, reserve: bool = False) -> None:
        """trayer at the top right; `reserve`: it keeps its strip of the screen from windows (a panel's strut,
        so the screen's free area starts below it)."""
        self.procs.append(subprocess.Popen(
            ["trayer", "--edge", "top", "--align", "right", "--widthtype", "pixel", "--width", "120",
             "--height", "28", "--transparent", "false", "--tint", "0x303030", "--SetDockType", "true",
             "--SetPartialStrut", "true" if reserve else "false"],
            env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.8)

    def start_window_manager(self) -> None:
        """openbox: it frames windows (a title bar) and places them itself, as a user's desktop does."""
        self.procs.append(subprocess.Popen(["openbox"], env=self.env(), stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))
        time.sleep(0.8)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("WAYLAND_DISPLAY", None)
        env.update(DISPLAY=self.display, QT_QPA_PLATFORM="xcb", XDG_SESSION_TYPE="x11", **extra)
        return env

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env=self.env(), capture_output=True, text=True, timeout=30, check=check)

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()


def launch_app(x: XServer, home: Path, report: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from desktop.app import main; sys.exit(main(sys.argv[1:]))", *args],
        env=x.env(PERSONAL_LLM_HOME=str(home), PERSONAL_LLM_STARTUP_REPORT=str(report),
                  PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring", **env),
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_event(report: Path, event: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if report.exists():
            for line in report.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                if record["event"] == event:
                    return record
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the app exited ({proc.returncode}) before '{event}':\n{proc.stdout.read()}")
        time.sleep(0.05)
    raise TimeoutError(f"no '{event}' within {timeout}s")
