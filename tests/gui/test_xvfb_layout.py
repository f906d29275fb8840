"""On a real X server with a window manager (openbox) and a panel that keeps the top strip (trayer), at
QT_SCALE_FACTOR=2 on a 1600x1200 screen (800x600 logical): the window, its status bar included, lies on the
screen, and every sidebar label is shown whole. Qt's free area of such a screen ran 14 pixels past its bottom
(the panel's offset left unscaled), which put the status bar off the screen."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .xserver import XServer, missing_tools

ROOT = Path(__file__).resolve().parents[2]
MISSING = missing_tools() + ([] if shutil.which("openbox") else ["openbox"])

pytestmark = [
    pytest.mark.xvfb,
    pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} (apt-get install xvfb trayer xdotool "
                                             "openbox)"),
]


@pytest.mark.parametrize("screen,scale", [((1600, 1200), "2"), ((800, 600), "1")], ids=["scale2", "800x600"])
def test_the_window_and_its_status_bar_are_on_the_screen_with_every_label_whole(tmp_path, screen, scale):
    with XServer(*screen) as x:
        x.start_window_manager()
        x.start_tray_host(reserve=True)
        env = x.env(QT_SCALE_FACTOR=scale, PYTHONPATH=str(ROOT), PYTHON_KEYRING_BACKEND=
                    "keyrings.alt.file.PlaintextKeyring", XDG_DATA_HOME=str(tmp_path / "xdg"))
        env.pop("OLLAMA_HOST", None)
        proc = subprocess.run([sys.executable, "-m", "tests.gui.layout_probe", str(tmp_path / "home"),
                               "--platform-frame"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["inside_screen"] == {"frame": True, "status_bar": True, "status_bar_visible": True}, report
    # the window's default size on this 800x600 (logical) screen has room for the labels beside the page
    assert [entry["text"] for entry in report["sidebar"]] == [
        entry["page"] + (" (12)" if entry["page"] == "Conflicts" else "") for entry in report["sidebar"]]
    assert all(entry["fits"] for entry in report["sidebar"]), report["sidebar"]
    for page, found in report["pages"].items():
        assert found["too_narrow"] == [], (page, found["too_narrow"])
