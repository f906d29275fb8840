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


class StoreUnavailable(UserError):
    """The store's file, folder or disk is in a state the engine cannot work with (full, read-only, no
    permission, I/O error, damaged; see db.explain)."""


class StoreReadOnly(StoreUnavailable):
    """The store (or its folder, or the disk) cannot be written."""


class DiskFull(StoreUnavailable):
    """The disk holding the store has no space left."""


class StoreCorrupt(StoreUnavailable):
    """The store file is damaged (or not a store at all)."""


class Cancelled(EngineError):
    """The user cancelled a long job. Not an error to report."""
