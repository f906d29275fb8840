"""Take the README screenshots on a private Xvfb display with a real tray host (trayer):

    .venv/bin/python packaging/screenshots.py [--out docs/screenshots]

Writes main-window.png (a profile with some memories), capture.png (the quick-capture box opened with the
real global hotkey) and tray-menu.png (the tray icon's menu). Needs: Xvfb, trayer, xdotool, imagemagick.
The profile is a throw-away one in a temp directory (plaintext test keyring); nothing of yours is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1280, 800
TRAY_WIDTH, TRAY_HEIGHT = 120, 28

MEMORIES = [
    ("My sister Alice lives in Lisbon, near the river.", "fact", "family", None),
    ("Bob prefers tea over coffee, no sugar.", "fact", "family", None),
    ("Dentist appointment with Dr. Reyes, cleaning and check-up.", "episodic", None, "2026-11-24T09:30"),
    ("To renew the passport: book online, bring the old passport and two photos.", "procedural", "admin", None),
    ("The quarterly tax return is due on the fifteenth of April.", "fact", "admin", None),
    ("Team offsite in Porto moved to the second week of March.", "episodic", "work", "2026-11-20T15:00"),
    ("Deploys go out on Tuesdays after the 11:00 stand-up.", "procedural", "work", None),
    ("The guest wifi at the cabin is called Meadow.", "fact", None, None),
]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def events(report: Path) -> set[str]:
    if not report.exists():
        return set()
    return {json.loads(line)["event"] for line in report.read_text(encoding="utf-8").splitlines()}


def seed(home: Path) -> None:
    from engine import Engine
    from engine.config import Settings, save_settings
    from engine.embeddings import NoEmbedder

    home.mkdir(parents=True, exist_ok=True)
    # the first-run card is not what these pictures are about; a model-less profile starts fast
    save_settings(Settings(embedding_model="none", tray_notice_shown=True), home)
    with Engine.open(home, actor="desktop", embedder=NoEmbedder()) as eng:
        for text, kind, project, at in MEMORIES:
            eng.remember(text, kind=kind, project=project, at=at, embed="background")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    missing = [t for t in ("Xvfb", "trayer", "xdotool", "import") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"missing tools: {', '.join(missing)} (apt-get install xvfb trayer xdotool imagemagick)")
    args.out.mkdir(parents=True, exist_ok=True)
    display = next(f":{n}" for n in range(120, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="pllm-shots-") as tmp:
        home, report = Path(tmp) / "profile", Path(tmp) / "events.jsonl"
        env = dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb", XDG_SESSION_TYPE="x11",
                   PERSONAL_LLM_HOME=str(home), PERSONAL_LLM_STARTUP_REPORT=str(report),
                   PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
        env.pop("WAYLAND_DISPLAY", None)
        os.environ.update(PERSONAL_LLM_HOME=str(home), PYTHON_KEYRING_BACKEND=env["PYTHON_KEYRING_BACKEND"])
        seed(home)

        def run(*cmd: str) -> str:
            return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=True).stdout

        try:
            procs.append(subprocess.Popen(["Xvfb", display, "-screen", "0", f"{WIDTH}x{HEIGHT}x24", "-nolisten",
                                           "tcp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_for(lambda: Path(f"/tmp/.X11-unix/X{display[1:]}").exists(), 10, "Xvfb")
            run("xsetroot", "-solid", "#3B4252") if shutil.which("xsetroot") else None
            procs.append(subprocess.Popen(
                ["trayer", "--edge", "top", "--align", "right", "--widthtype", "pixel", "--width", str(TRAY_WIDTH),
                 "--height", str(TRAY_HEIGHT), "--transparent", "false", "--tint", "0x2E3440",
                 "--SetDockType", "true"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.0)
            app = subprocess.Popen([sys.executable, "-c", "import sys; from desktop.app import main; sys.exit(main())"],
                                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(app)
            wait_for(lambda: {"engine_opened", "hotkey"} <= events(report), 60, "the app")
            time.sleep(1.5)  # lists fill in, fonts settle

            # main window, placed and captured on its own
            window = run("xdotool", "search", "--sync", "--onlyvisible", "--name", "^Personal LLM$").split()[0]
            run("xdotool", "windowmove", "--sync", window, "60", "50")
            run("xdotool", "windowsize", "--sync", window, "1100", "680")
            time.sleep(0.8)
            run("xdotool", "mousemove", "--sync", "420", "246", "click", "1")  # open one memory in the editor
            time.sleep(0.6)
            run("xdotool", "mousemove", "--sync", "700", "760")
            run("import", "-window", window, str(args.out / "main-window.png"))

            # the capture box, opened with the real hotkey, a fact half typed
            run("xdotool", "key", "--clearmodifiers", "ctrl+shift+space")
            box = run("xdotool", "search", "--sync", "--onlyvisible", "--name", "Quick capture").split()[0]
            time.sleep(0.4)
            run("xdotool", "type", "--delay", "15", "The plumber comes Thursday at 8")
            time.sleep(0.4)
            run("import", "-window", box, str(args.out / "capture.png"))
            run("xdotool", "key", "Escape")

            # the tray menu: right-click our icon inside trayer (the app's only small window)
            def windows() -> list[tuple[str, int, int, int, int]]:
                out = []
                for wid in run("xdotool", "search", "--onlyvisible", "--pid", str(app.pid)).split():
                    geo = dict(line.split("=", 1) for line in run("xdotool", "getwindowgeometry", "--shell",
                                                                     wid).split())
                    out.append((wid, int(geo["X"]), int(geo["Y"]), int(geo["WIDTH"]), int(geo["HEIGHT"])))
                return out

            icon = next(((x, y, w, h) for _wid, x, y, w, h in windows() if w <= 48 and h <= 48), None)
            ix, iy = (icon[0] + icon[2] // 2, icon[1] + icon[3] // 2) if icon else (WIDTH - 12, TRAY_HEIGHT // 2)
            run("xdotool", "mousemove", "--sync", str(ix), str(iy), "click", "3")
            time.sleep(0.8)
            menu_ids = [w[0] for w in windows()]
            menu_geo = next(((x, y, w, h) for _wid, x, y, w, h in windows() if 120 < w < 420 and 80 < h < 420), None)
            if menu_geo is None:
                run("import", "-window", "root", str(Path(tmp).parent / "pllm-shots-failed.png"))
                raise SystemExit(f"the tray menu did not open (screen: {Path(tmp).parent / 'pllm-shots-failed.png'}, "
                                 f"windows: {menu_ids})")
            x, y, w, h = menu_geo
            left, top = max(0, x - 40), 0
            right, bottom = min(WIDTH, x + w + 40), min(HEIGHT, y + h + 24)
            run("import", "-window", "root", "-crop", f"{right - left}x{bottom - top}+{left}+{top}", "+repage",
                str(args.out / "tray-menu.png"))
            run("xdotool", "key", "Escape")
        finally:
            for proc in reversed(procs):
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    for name in ("main-window.png", "capture.png", "tray-menu.png"):
        print(args.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
