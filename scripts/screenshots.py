"""Screenshots of every page on a real X server (Xvfb), for docs/screenshots/:

    python scripts/screenshots.py            # 800x600, 1440x900, and 1440x900 at QT_SCALE_FACTOR=2

Each run opens the app on a fresh profile with a few memories and a document (tests/gui/layout_probe.py),
visits every page and saves the whole screen, so each picture also shows whether the window fits. The
probe's report of anything cut off is printed; it should list nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.gui.xserver import XServer  # noqa: E402

RUNS = (("800x600", (800, 600), "1", "800x600"), ("1440x900", (1440, 900), "1", None),
        ("1440x900-scale2", (1440, 900), "2", None))


def main() -> int:
    out = ROOT / "docs" / "screenshots"
    bad = 0
    for tag, screen, scale, size in RUNS:
        with tempfile.TemporaryDirectory() as tmp, XServer(*screen) as x:
            env = x.env(QT_SCALE_FACTOR=scale, PYTHONPATH=str(ROOT), PERSONAL_LLM_HOME=str(Path(tmp) / "home"),
                        PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring", XDG_DATA_HOME=tmp)
            env.pop("OLLAMA_HOST", None)
            args = [sys.executable, "-m", "tests.gui.layout_probe", str(Path(tmp) / "home"), "--shots", str(out),
                    "--tag", tag] + (["--size", size] if size else [])
            proc = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                print(proc.stdout, proc.stderr, file=sys.stderr)
                return 1
            report = json.loads(proc.stdout.strip().splitlines()[-1])
            cut = {page: r["too_narrow"] for page, r in report["pages"].items() if r["too_narrow"]}
            bad += bool(cut) or not report["on_screen"]
            print(f"{tag}: window {report['window']} on screen {report['screen']} "
                  f"(fits: {report['on_screen']}); cut off: {cut or 'nothing'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
