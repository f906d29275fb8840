"""The engine never imports Qt or the desktop app (proven by reading the code and by importing it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "qasync", "desktop")


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            names.append(str(node.args[0].value))
    return names


def test_no_engine_module_imports_qt_or_desktop():
    offenders = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for name in imported_modules(path):
            if name.split(".")[0] in FORBIDDEN:
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_importing_the_engine_loads_no_qt():
    modules = sorted(p.stem for p in (ROOT / "engine").glob("*.py") if p.stem != "__init__")
    imports = ", ".join(["engine"] + [f"engine.{m}" for m in modules])
    code = (f"import sys; import {imports}; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{FORBIDDEN!r}); assert not bad, bad; print(len(sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_only_the_bridge_calls_the_engine():
    """Screens get data through desktop.bridge; they import no engine module at run time."""
    allowed = {"bridge.py"}
    offenders = []
    for path in sorted((ROOT / "desktop").glob("*.py")):
        if path.name in allowed:
            continue
        for name in imported_modules(path):
            if name.split(".")[0] == "engine":
                offenders.append(f"{path.name} imports {name}")
    assert offenders == []
