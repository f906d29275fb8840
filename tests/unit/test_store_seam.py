"""The storage seam (engine/store/__init__.py): a part's call reaches the backend its transaction belongs to,
every row function a part calls is in the interface, and each backend offers the same functions with the
same parameters."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from engine import store
from engine.store import ROW_MODULES

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = sorted(p.name for p in (ROOT / "engine" / "store").iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def _public_functions(module_name: str) -> dict[str, inspect.Signature]:
    module = importlib.import_module(module_name)
    return {name: inspect.signature(f) for name, f in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(f) or inspect.isclass(f))
            and getattr(f, "__module__", None) == module.__name__}


def _interface_uses() -> list[tuple[str, str, bool]]:
    """(row module, attribute, called) of every use a part makes of the interface (`rows.by_uid(…)`)."""
    found: list[tuple[str, str, bool]] = []
    for path in (ROOT / "engine").rglob("*.py"):
        if "store" in path.relative_to(ROOT / "engine").parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {a.asname or a.name: a.name for n in ast.walk(tree)
                   if isinstance(n, ast.ImportFrom) and n.level and n.module == "store"
                   for a in n.names if a.name in ROW_MODULES}
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        found += [(aliases[n.value.id], n.attr, id(n) in called) for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                  and not isinstance(getattr(n, "ctx", None), ast.Store)]
    return found


def test_a_part_reads_no_constant_through_the_interface() -> None:
    """A value read through the interface would be a dispatching function, not the backend's value: what a
    part uses of it are functions (called, or handed on to be called) and, in annotations, types."""
    uses = _interface_uses()
    assert any(called for _, _, called in uses) and any(not called for _, _, called in uses)
    assert sorted({f"{m}.{a}" for m, a, called in uses if not called and a.isupper()}) == []


def test_a_constant_is_not_read_through_the_interface() -> None:
    with pytest.raises(AttributeError, match="functions only"):
        store.retrieval.WINDOW_READ  # noqa: B018


def _calls_through_the_interface() -> set[tuple[str, str]]:
    """(row module, function) of every call a part makes through the interface (`rows.by_uid(…)`)."""
    found: set[tuple[str, str]] = set()
    for path in (ROOT / "engine").rglob("*.py"):
        if "store" in path.relative_to(ROOT / "engine").parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {a.asname or a.name: a.name for n in ast.walk(tree)
                   if isinstance(n, ast.ImportFrom) and n.level and n.module == "store"
                   for a in n.names if a.name in ROW_MODULES}
        found |= {(aliases[n.func.value.id], n.func.attr) for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and isinstance(n.func.value, ast.Name) and n.func.value.id in aliases}
    return found


def test_a_call_reaches_the_backend_its_transaction_belongs_to(profile_home: Path) -> None:
    from engine import Engine
    from engine.embeddings import NoEmbedder

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        uid = eng.remember("The spare key is under the blue flower pot.").id
        with eng.store.read() as con:
            row = store.memories.by_uid(con, uid)
    assert store.backend_of(con) == "engine.store.sqlite"
    assert (row.uid, row.text, row.kind) == (uid, "The spare key is under the blue flower pot.", "fact")
    assert store.types.to_memory(row).id == uid


def test_a_call_without_a_transaction_of_a_backend_is_refused() -> None:
    with pytest.raises(TypeError, match="not a transaction or store of a backend"):
        store.memories.by_uid(object(), "m_1")


def test_every_row_function_a_part_calls_is_in_the_interface() -> None:
    calls = _calls_through_the_interface()
    assert len(calls) > 100  # the scan sees the parts' calls
    sqlite = {name: set(_public_functions(f"engine.store.sqlite.{name}")) for name in ROW_MODULES}
    missing = sorted(f"{module}.{fn}" for module, fn in calls if fn not in sqlite[module])
    assert missing == []


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "sqlite"] or [None])
def test_a_second_backend_offers_the_same_functions(backend: str | None) -> None:
    """For every row module a second backend has, each function the parts call exists there with the SQLite
    backend's parameters (names, kinds and order)."""
    if backend is None:
        pytest.skip("only the SQLite backend is present")
    calls = _calls_through_the_interface()
    differ = []
    for name in ROW_MODULES:
        if not (ROOT / "engine" / "store" / backend / f"{name}.py").exists():
            continue
        theirs = _public_functions(f"engine.store.{backend}.{name}")
        ours = _public_functions(f"engine.store.sqlite.{name}")
        for module, fn in sorted(calls):
            if module != name:
                continue
            if fn not in theirs:
                differ.append(f"{name}.{fn}: missing")
            elif [(p.name, p.kind) for p in theirs[fn].parameters.values()] != \
                    [(p.name, p.kind) for p in ours[fn].parameters.values()]:
                differ.append(f"{name}.{fn}: {theirs[fn]} != {ours[fn]}")
    assert differ == []
