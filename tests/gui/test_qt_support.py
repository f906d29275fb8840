"""desktop/qt_support.py: PySide6's import hook answers as before and keeps no module sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, linecache, sys
from pathlib import Path
import PySide6.QtCore
import shibokensupport.feature as feature
original = feature._mod_uses_pyside
import desktop  # applies the work-around
import desktop.app, desktop.profile, engine.store.sqlite.db, json as json_module
folder = Path(sys.argv[1])
sys.path.insert(0, str(folder))
(folder / "uses_qt.py").write_text("import PySide6.QtCore\nX = 1\n", encoding="utf-8")
(folder / "plain.py").write_text("X = 2\n", encoding="utf-8")
before = set(linecache.cache)
import plain, uses_qt
print(json.dumps({
    "patched": feature._mod_uses_pyside is not original,
    "new_in_linecache": sorted(set(linecache.cache) - before),
    "recorded": [feature.pyside_feature_dict.get("uses_qt"), feature.pyside_feature_dict.get("plain")],
    "same": [original(m) == feature._mod_uses_pyside(m) for m in
             (desktop.app, desktop.profile, engine.store.sqlite.db, json_module, plain, uses_qt, PySide6.QtCore)],
    "answers": [feature._mod_uses_pyside(m) for m in (desktop.app, engine.store.sqlite.db, uses_qt, plain, PySide6.QtCore)],
}))
"""


def test_pyside_import_hook_gives_the_same_answers_without_filling_linecache(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["patched"]
    assert r["new_in_linecache"] == []  # the hook read both new modules' sources and kept neither
    assert r["recorded"] == [0, -1]  # as PySide6 itself records them: uses PySide6, does not
    assert all(r["same"])
    assert r["answers"] == [True, False, True, False, False]


def test_emitting_a_signal_does_not_take_a_reference_from_true():
    """PySide6 6.12.0's `SignalInstance.emit()` returned `True` without a reference of its own: every signal
    the app emitted took one from `True`, and an app that emitted some ten thousand (adding 1,000 files) died
    with "Fatal Python error: bool_dealloc". pyproject.toml pins a PySide6 without that bug; this fails on one
    that has it."""
    import sys

    from PySide6.QtCore import QObject, Signal

    class Emitter(QObject):
        changed = Signal(bool)
        done = Signal()

    e = Emitter()
    e.changed.connect(lambda _value: None)
    before = sys.getrefcount(True)
    results = [e.changed.emit(False) for _ in range(500)] + [e.done.emit() for _ in range(500)]
    del results
    assert sys.getrefcount(True) >= before
