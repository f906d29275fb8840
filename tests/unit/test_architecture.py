"""The house rules of docs/architecture.md, checked by reading the code (every import, also those inside
functions and under TYPE_CHECKING).

Each rule is a row of RULES: which modules it applies to and what it finds wrong in one of them. The
rules run over the real tree (test_the_tree_keeps_the_rule) and, so that a rule that finds nothing is
known to work, over a small module written to break it (test_the_rule_catches_a_violation).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FACE = "engine"  # engine/__init__.py: the package face
FACADE = "engine.engine"
ENTRY_POINTS = ("engine.cli", "engine.api", "engine.mcp", "engine.selftest", "engine.server")  # and their submodules
STORAGE = ("engine.store",)  # the seam: the interface and its backends
BACKENDS = ("engine.store.sqlite", "engine.store.postgres")
# A store as a whole names its backend: the desktop profile's one encrypted file (open, unlock, keys,
# erasure, backups, segment merges) and the facade that opens it; a server's database, its schema and its
# users (engine/users.py); a server profile's encrypted outbox file (engine/remote.py). Every other module reaches rows through the interface (engine/store/__init__.py).
WHOLE_STORE = ("engine.engine", "engine.unlock", "engine.erasure", "engine.backup", "engine.keyops",
               "engine.fts_merge", "engine.users", "engine.remote")
KEY_PRAGMA = "engine.keys"  # builds the `PRAGMA key` that db.connect runs
STORE_ATTRIBUTES = {"con", "store"}
QT = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "qasync")
SQL = re.compile(r"\b(SELECT .* FROM|INSERT (OR \w+ )?INTO|UPDATE \w+ SET|DELETE FROM|CREATE (TABLE|INDEX)|PRAGMA)\b")


@dataclass(frozen=True)
class Module:
    name: str
    tree: ast.Module
    imports: tuple[str, ...]  # absolute names of the modules it imports (a package's submodules resolved)


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parse(name: str, source: str, *, package: bool = False, known: frozenset[str] = frozenset()) -> Module:
    """A module and what it imports. Relative imports are resolved against `name`; `from x import y` counts
    as importing x.y when that is a module (in `known`)."""
    tree = ast.parse(source)
    base = name.split(".") if package else name.split(".")[:-1]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            found += subs
            if len(subs) < len(node.names):
                found.append(target)
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.append(node.args[0].value)
    return Module(name, tree, tuple(dict.fromkeys(found)))


def _called(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


@cache
def tree_modules() -> dict[str, Module]:
    paths = sorted([*(ROOT / "engine").rglob("*.py"), *(ROOT / "desktop").rglob("*.py")])
    known = frozenset(module_name(p) for p in paths)
    return {module_name(p): parse(module_name(p), p.read_text(encoding="utf-8"), package=p.name == "__init__.py",
                                  known=known) for p in paths}


# -- the rules ----------------------------------------------------------------------------------------------

def _is_engine(m: Module) -> bool:
    return _within(m.name, "engine")


def _is_entry_point(m: Module) -> bool:
    return _within(m.name, ENTRY_POINTS)


def _qt_or_desktop(m: Module) -> list[str]:
    return [f"imports {i}" for i in m.imports if i.split(".")[0] in (*QT, "desktop")]


def _facade(m: Module) -> list[str]:
    return [f"imports {i} (the facade)" for i in m.imports if i in (FACE, FACADE)]


def _storage(m: Module) -> list[str]:
    return [f"imports {i} (storage)" for i in m.imports if _within(i, STORAGE)]


def _backend(m: Module) -> list[str]:
    return [f"imports {i} (a backend)" for i in m.imports if _within(i, BACKENDS)]


def _store_attributes(m: Module) -> list[str]:
    """`x.con.execute(…)`, `x.store.write()`: a connection or the store used (a field named so is not)."""
    return [f"line {n.lineno} uses .{n.value.attr}" for n in ast.walk(m.tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr in STORE_ATTRIBUTES]


def _sql(m: Module) -> list[str]:
    return [f"line {n.lineno} holds SQL" for n in ast.walk(m.tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and SQL.search(n.value)]


def _any_engine(m: Module) -> list[str]:
    return [f"imports {i}" for i in m.imports if i.split(".")[0] == "engine"]


def _beyond_the_face(m: Module) -> list[str]:
    return [f"imports {i}" for i in m.imports
            if i.split(".")[0] == "engine" and i != FACE and not _within(i, ENTRY_POINTS)]


def _importlib(m: Module) -> list[str]:
    found = [f"imports {i}" for i in m.imports if i.split(".")[0] == "importlib"]
    return found + [f"line {n.lineno} calls {_called(n)}" for n in ast.walk(m.tree)
                    if isinstance(n, ast.Call) and _called(n) in ("import_module", "__import__")]


@dataclass(frozen=True)
class Rule:
    name: str
    applies: Callable[[Module], bool]
    violations: Callable[[Module], list[str]]
    breaker: tuple[str, str]  # (module name, source) that breaks the rule


RULES = [
    Rule("the engine imports no Qt and no desktop module", _is_engine, _qt_or_desktop,
         ("engine.ranking", "def f():\n    from PySide6.QtCore import QObject\n")),
    Rule("only the package face and the entry points import the facade",
         lambda m: _is_engine(m) and m.name not in (FACE, FACADE) and not _is_entry_point(m), _facade,
         ("engine.graph", "def f():\n    from .engine import Engine\n")),
    Rule("entry points import no storage module (db, vectors, migrations)", _is_entry_point, _storage,
         ("engine.mcp", "from .store.sqlite.migrations import SCHEMA_VERSION\n")),
    Rule("the parts reach storage through the interface, never a backend",
         lambda m: _is_engine(m) and not _within(m.name, STORAGE) and m.name not in WHOLE_STORE, _backend,
         ("engine.memories", "from .store.sqlite import memories as rows\n")),
    Rule("entry points touch no connection or store (.con, .store)", _is_entry_point, _store_attributes,
         ("engine.selftest", "def f(eng):\n    return eng.con.execute('PRAGMA user_version')\n")),
    Rule("only the storage modules speak SQL",
         lambda m: _is_engine(m) and not _within(m.name, STORAGE) and m.name != KEY_PRAGMA, _sql,
         ("engine.memories", "def f(con):\n    con.execute('DELETE FROM memories WHERE id = ?', (1,))\n")),
    Rule("entry points and the desktop speak no SQL",
         lambda m: _is_entry_point(m) or _within(m.name, "desktop"), _sql,
         ("engine.api", "Q = 'SELECT uid FROM memories'\n")),
    Rule("only desktop/bridge.py imports the engine",
         lambda m: _within(m.name, "desktop") and m.name != "desktop.bridge", _any_engine,
         ("desktop.app", "def f():\n    import importlib\n    return importlib.import_module('engine.selftest')\n")),
    Rule("the bridge imports only the package face and the entry points",
         lambda m: m.name == "desktop.bridge", _beyond_the_face,
         ("desktop.bridge", "def f():\n    from engine.llm import LLMRouter\n")),
    Rule("the CLI imports its commands statically (no importlib)", lambda m: _within(m.name, "engine.cli"),
         _importlib, ("engine.cli.root", "def load():\n    import importlib\n    importlib.import_module('x')\n")),
]


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_the_tree_keeps_the_rule(rule: Rule) -> None:
    modules = [m for m in tree_modules().values() if rule.applies(m)]
    assert modules, "the rule applies to no module: the table is out of date"
    offenders = {m.name: v for m in modules if (v := rule.violations(m))}
    assert offenders == {}


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_the_rule_catches_a_violation(rule: Rule) -> None:
    name, source = rule.breaker
    m = parse(name, source, known=frozenset(tree_modules()))
    assert rule.applies(m) and rule.violations(m)


# -- no import cycle ----------------------------------------------------------------------------------------

def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def engine_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Which engine module imports which (the package face leads nowhere but the face)."""
    return {m.name: {i for i in m.imports if i in modules and _within(i, "engine") and i != m.name}
            for m in modules.values() if _within(m.name, "engine")}


def test_no_import_cycle_among_engine_modules() -> None:
    assert cycles(engine_graph(tree_modules())) == []


def test_a_cycle_is_found() -> None:
    graph = {"engine.a": {"engine.b"}, "engine.b": {"engine.c"}, "engine.c": {"engine.a"}, "engine.d": {"engine.a"}}
    assert cycles(graph) == [["engine.a", "engine.b", "engine.c"]]
