"""What the area mixins (ingest, graph, consolidation) use of the engine they are mixed into.

`Engine` is assembled from one mixin per area (`engine.engine.Engine`). A mixin's methods reach the
engine's store, settings and helpers through `self`; `EngineParts` declares those for the type checker,
which then also checks that `Engine`'s real definitions match. At run time the class is empty.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from . import vectors
    from .config import Settings
    from .db import Connection, Store
    from .embeddings import Embedder, Windows
    from .engine import Changes, Engine, _Touched
    from .graph import ExtractionReport
    from .llm import LLMRouter
    from .models import Memory, RememberResult


class EngineParts:
    if TYPE_CHECKING:
        store: Store
        settings: Settings
        embedder: Embedder
        _index: dict[str, vectors.VectorIndex]
        _MEMORY_COLS: str

        @property
        def con(self) -> Connection: ...

        @property
        def llm(self) -> LLMRouter: ...

        def audit(self, action: str, target: str | None, detail: dict[str, Any] | None = None,
                  con: Connection | None = None, actor: str | None = None) -> None: ...

        def mutation(self) -> Engine._Mutation: ...

        def _emit(self, changes: Changes) -> None: ...

        def _notify(self, action: str, *, memories: Iterable[str] = (), graph: bool = False) -> None: ...

        def _row_by_uid(self, con: Connection, uid: str) -> tuple: ...

        @staticmethod
        def _memory(row: tuple) -> Memory: ...

        def remember(self, text: str, *, kind: str = "fact", project: str | None = None,
                     importance: float | None = None, at: str | float | datetime | None = None,
                     source: str = "user", meta: dict[str, Any] | None = None, embed: str = "auto",
                     conversation_id: int | None = None, document_id: int | None = None) -> RememberResult: ...

        def embeddings_available(self) -> bool: ...

        def _ensure_space(self) -> bool: ...

        def embed_pending(self, *, limit: int | None = None, batch_size: int = 64,
                          progress: Callable[[int, int], None] | None = None,
                          cancel: threading.Event | None = None) -> int: ...

        def _store_vectors(self, table: str, rows: list[tuple[int, str]], vecs: np.ndarray,
                           windows: list[Windows | None] | None = None) -> None: ...

        def delete_document_rows(self, con: Connection, doc_id: int, touched: _Touched, *,
                                 keep_document: bool = False) -> dict[str, int]: ...

        def extract_pending(self, limit: int | None = None, progress: Callable[[int, int], None] | None = None,
                            cancel: threading.Event | None = None) -> ExtractionReport: ...

        @staticmethod
        def _pending_extraction(con: Connection) -> int: ...

        def _llm_ready(self) -> tuple[LLMRouter | None, str]: ...
