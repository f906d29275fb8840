"""How a call to a row module of the interface (engine/store/__init__.py) finds its backend: the types of
transactions and stores each backend registers, and `Rows`, the dispatching stand-in for one row module."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

_backends: dict[type, str] = {}  # a transaction's or store's type -> its backend's package
_errors: tuple[type[Exception], ...] = ()  # every registered backend's database errors
_lock = threading.Lock()


def register(package: str, *kinds: type, errors: tuple[type[Exception], ...] = ()) -> None:
    """Calls whose transaction (or store) is one of `kinds` go to the backend `package` (e.g.
    engine.store.sqlite); `errors` are the exceptions its driver raises (see `database_errors`)."""
    global _errors
    with _lock:
        for kind in kinds:
            _backends[kind] = package
        _errors = tuple(dict.fromkeys(_errors + errors))


def database_errors() -> tuple[type[Exception], ...]:
    """The drivers' own errors, for the few places that outlive a store (a thread still running when it
    closed): `except database_errors():`."""
    return _errors


def backend_of(handle: object) -> str | None:
    """The package of the backend `handle` (a transaction or a store) belongs to, or None."""
    for kind in type(handle).__mro__:
        package = _backends.get(kind)
        if package is not None:
            return package
    return None


class Rows:
    """One row module of the interface, whichever backend a call's transaction belongs to."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._modules: dict[type, ModuleType] = {}  # a transaction's type -> its backend's module

    def _module(self, handle: object) -> ModuleType:
        kind = type(handle)
        module = self._modules.get(kind)
        if module is None:
            package = backend_of(handle)
            if package is None:
                raise TypeError(f"store.{self._name}: {kind.__name__} is not a transaction or store of a backend")
            module = self._modules[kind] = importlib.import_module(f"{package}.{self._name}")
        return module

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        if attr.startswith("_"):
            raise AttributeError(attr)
        if attr.isupper():  # a constant: a backend's own, or the engine's (engine/store/types.py)
            raise AttributeError(f"store.{self._name}.{attr}: the interface has functions only; a value both "
                                 "backends share belongs in engine/store/types.py")
        modules, module_of = self._modules, self._module

        def call(*args: Any, **kwargs: Any) -> Any:
            module = modules.get(type(args[0])) if args else None
            if module is None:  # a first call with this type, or the handle passed by keyword
                handle = args[0] if args and backend_of(args[0]) else kwargs.get("con", kwargs.get("store"))
                module = module_of(handle if handle is not None or not args else args[0])
            return getattr(module, attr)(*args, **kwargs)

        call.__name__ = call.__qualname__ = f"{self._name}.{attr}"
        setattr(self, attr, call)  # found as a plain attribute from now on
        return call
