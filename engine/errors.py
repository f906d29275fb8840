"""The engine's exceptions. One root; user-facing errors carry a message written for people."""


class EngineError(Exception):
    """Root of every error the engine raises on purpose. str(e) is written for people."""


class UserError(EngineError):
    """Something the user can fix (bad input, missing key, unreachable service)."""


class NotFound(UserError):
    """The id names nothing in this store (or something already forgotten)."""


class KeyMissing(UserError):
    """The store exists but its key is not available."""


class WrongKey(UserError):
    """The key does not open this store."""


class StoreTooNew(UserError):
    """The store was written by a newer version of Personal LLM."""


class StoreLocked(UserError):
    """Another process holds the write lock for too long."""


class Cancelled(EngineError):
    """The user cancelled a long job. Not an error to report."""


class StoreUnavailable(UserError):
    """The disk or the operating system refused the store (full, read-only, no permission, I/O error)."""


class StoreDamaged(UserError):
    """The store file is corrupt (or not a store at all)."""
