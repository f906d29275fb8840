"""The storage seam: one interface, two backends (docs/architecture.md, "Where the storage seam is").

The parts reach their rows through the row modules named here, never through a backend:

    from .store import memories as rows
    with self.ctx.mutation() as (con, touched):
        row = rows.by_uid(con, uid)

Each name is a `Rows`: a call goes to the function of that name in the backend the call's transaction
belongs to (its first argument, or its `con=`/`store=` keyword): `engine/store/sqlite/` for a desktop
profile's encrypted file, `engine/store/postgres/` for a server's database. A backend registers the types of
its transactions and stores when its connection module is imported (`register`), which it always is before
one of them exists. The types that cross the seam in both directions are the engine's own
(engine/store/types.py, engine/models.py), never a backend's.

For the type checker the interface is the SQLite backend's signatures; that the PostgreSQL backend offers the
same functions with the same parameters is checked by tests/unit/test_store_seam.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .seam import Rows, backend_of, database_errors, register

__all__ = ["ROW_MODULES", "Connection", "Rows", "Store", "backend_of", "database_errors", "register"]

# The row modules of the interface: one per part, plus the vector tables and the lexical search.
ROW_MODULES = ("audit", "consolidation", "conversations", "documents", "graph", "memories", "recall", "retrieval",
               "space", "state", "stats", "tallies", "transfer", "vectors", "watch")

if TYPE_CHECKING:  # the interface's signatures, for the type checker: the SQLite backend's (see above)
    from .sqlite import (
        audit,
        consolidation,
        conversations,
        documents,
        graph,
        memories,
        recall,
        retrieval,
        space,
        state,
        stats,
        tallies,
        transfer,
        vectors,
        watch,
    )
    from .sqlite.db import Connection, Store
else:
    audit, consolidation, conversations, documents, graph, memories, recall, retrieval, space, state, stats, \
        tallies, transfer, vectors, watch = (Rows(name) for name in ROW_MODULES)
    Connection = Any  # a backend's transaction, opaque to the parts: they hand it to the row functions
    Store = Any  # a backend's store: transactions (`write()`, `read()`, `con`), its name for people (`path`)
