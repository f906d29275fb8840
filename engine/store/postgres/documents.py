"""Document and chunk rows of one user (the transaction's: row-level security), as engine/store/sqlite/documents.py:
written pending, flipped ready once embedded, replaced, moved, deleted. `meta` crosses the seam as JSON text."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import Connection

DOC_COLS = "uid, path, title, mime, chunk_count, size, project, created_at, updated_at, meta::text"


def by_content(con: Connection, chash: str, title: str | None = None) -> tuple | None:
    """(id, uid, status, chunk_count, meta) of the newest document without a path (a pasted text or an
    upload) with this content (and this title, when one is given)."""
    sql = "SELECT id, uid, status, chunk_count, meta::text FROM documents WHERE path IS NULL AND content_hash = %s"
    args: list[str] = [chash]
    if title is not None:
        sql += " AND title = %s"
        args.append(title)
    return con.execute(sql + " ORDER BY id DESC LIMIT 1", args).fetchone()


def by_path(con: Connection, path: str) -> tuple | None:
    """(id, uid, status, content_hash, chunk_count, meta) of the newest document at this path."""
    return con.execute(
        "SELECT id, uid, status, content_hash, chunk_count, meta::text FROM documents WHERE path = %s "
        "ORDER BY id DESC LIMIT 1", (path,),
    ).fetchone()


def pending(con: Connection) -> list[tuple]:
    """(id, uid, path, title, size, meta, chunk_count) of documents a crash left half-ingested."""
    return con.execute(
        "SELECT id, uid, path, title, size, meta::text, chunk_count FROM documents WHERE status = 'pending' "
        "ORDER BY id"
    ).fetchall()


def count_attempt(con: Connection, doc_id: int, attempts: int) -> None:
    """Record how many times ingesting a pending document has been started (meta.attempts)."""
    con.execute("UPDATE documents SET meta = meta || jsonb_build_object('attempts', %s::integer) WHERE id = %s",
                (attempts, doc_id))


def claim(con: Connection, doc_id: int, attempts: int, owner: str, previous: str | None) -> bool:
    """Take over a pending document whose owner (meta.owner) was `previous`, counting an attempt; False when
    it is no longer pending or another process took it first."""
    return bool(con.execute(
        "UPDATE documents SET meta = meta || jsonb_build_object('attempts', %s::integer, 'owner', %s::text) "
        "WHERE id = %s AND status = 'pending' AND (meta->>'owner') IS NOT DISTINCT FROM %s",
        (attempts, owner, doc_id, previous),
    ).rowcount)


def mark_given_up(con: Connection, doc_id: int, meta: str, now: float) -> None:
    """A document that will not be retried on its own: status 'failed', no chunks, meta.failed says why."""
    con.execute("UPDATE documents SET status = 'failed', chunk_count = 0, meta = %s::jsonb, updated_at = %s "
                "WHERE id = %s", (meta, now, doc_id))


_GIVEN_UP = "status = 'failed'"


def given_up(con: Connection, project: str | None = None, *, any_project: bool = True) -> list[tuple]:
    """DOC_COLS + meta of documents given up (of one project unless any_project), most recently changed first."""
    sql = f"SELECT {DOC_COLS}, meta::text FROM documents WHERE {_GIVEN_UP}"
    args: list[str | None] = []
    if not any_project:
        sql += " AND project IS NOT DISTINCT FROM %s::text"
        args.append(project)
    return con.execute(sql + " ORDER BY updated_at DESC, id DESC", args).fetchall()


def count_given_up(con: Connection) -> int:
    row = con.execute(f"SELECT count(*) FROM documents WHERE {_GIVEN_UP}").fetchone()
    return int(row[0]) if row else 0


def ready(con: Connection, project: str | None = None, *, any_project: bool = True) -> list[tuple]:
    """DOC_COLS of ready documents (of one project unless any_project), most recently changed first."""
    sql = f"SELECT {DOC_COLS} FROM documents WHERE status = 'ready'"
    args: list[str | None] = []
    if not any_project:
        sql += " AND project IS NOT DISTINCT FROM %s::text"
        args.append(project)
    return con.execute(sql + " ORDER BY updated_at DESC, id DESC", args).fetchall()


def under(con: Connection, folder: str) -> list[tuple[str, str, str, str, int, float | None, str]]:
    """(path, uid, status, content_hash, size, mtime, meta) of file documents under a folder (``folder`` is an
    absolute path without a trailing separator)."""
    prefix = os.path.join(folder, "")
    return con.execute(
        "SELECT path, uid, status, content_hash, size, mtime, meta::text FROM documents WHERE path IS NOT NULL "
        "AND starts_with(path, %s) ORDER BY path COLLATE \"C\"", (prefix,),
    ).fetchall()


def count_under(con: Connection, folder: str) -> dict[str, int]:
    """Documents under a folder by status."""
    prefix = os.path.join(folder, "")
    return {status: int(n) for status, n in con.execute(
        "SELECT status, count(*) FROM documents WHERE path IS NOT NULL AND starts_with(path, %s) GROUP BY status",
        (prefix,)).fetchall()}


def ready_by_uid(con: Connection, uid: str) -> tuple | None:
    return con.execute(f"SELECT {DOC_COLS} FROM documents WHERE uid = %s AND status = 'ready'", (uid,)).fetchone()


def passages(con: Connection, uid: str, offset: int, limit: int) -> list[tuple[str, int, str, str | None, int | None, str | None]]:
    """(uid, position, text, locator, page, heading) of a ready document's chunks, in reading order."""
    return con.execute(
        "SELECT c.uid, c.position, c.text, c.locator, c.page, c.heading FROM chunks c "
        "JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id "
        "WHERE d.uid = %s AND d.status = 'ready' ORDER BY c.position LIMIT %s OFFSET %s", (uid, limit, offset),
    ).fetchall()


def row_id(con: Connection, uid: str) -> int | None:
    row = con.execute("SELECT id FROM documents WHERE uid = %s", (uid,)).fetchone()
    return None if row is None else int(row[0])


def uid_of(con: Connection, doc_id: int) -> str:
    row = con.execute("SELECT uid FROM documents WHERE id = %s", (doc_id,)).fetchone()
    if row is None:
        raise LookupError(f"no document row {doc_id}")
    return str(row[0])


def project_of(con: Connection, doc_id: int) -> str | None:
    row = con.execute("SELECT project FROM documents WHERE id = %s", (doc_id,)).fetchone()
    if row is None:
        raise LookupError(f"no document row {doc_id}")
    return row[0]


def set_project(con: Connection, doc_id: int, project: str | None) -> tuple[list[int], list[int]]:
    """Put a document, and the memories made from it (its ingest event), in a project. Returns the ids of
    its chunks and of those memories."""
    con.execute("UPDATE documents SET project = %s WHERE id = %s", (project, doc_id))
    memories = [r[0] for r in con.execute("UPDATE memories SET project = %s WHERE document_id = %s RETURNING id",
                                          (project, doc_id)).fetchall()]
    chunks = [r[0] for r in con.execute("SELECT id FROM chunks WHERE document_id = %s", (doc_id,)).fetchall()]
    return chunks, memories


def is_pending(con: Connection, doc_id: int, *, or_failed: bool = False) -> bool:
    statuses = ["pending", "failed"] if or_failed else ["pending"]
    return con.execute("SELECT 1 FROM documents WHERE id = %s AND status = ANY(%s)",
                       (doc_id, statuses)).fetchone() is not None


def progress(con: Connection, doc_id: int) -> tuple[int, int, str]:
    """(chunks, chunks without a vector, status) of a document."""
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE embedded_hash IS NULL), "
        "(SELECT status FROM documents WHERE id = %s) FROM chunks WHERE document_id = %s", (doc_id, doc_id),
    ).fetchone()
    assert row is not None  # an aggregate always has a row
    return int(row[0]), int(row[1]), row[2]


def ready_with_content(con: Connection, chash: str) -> list[tuple[int, str, str, int]]:
    """(id, uid, path, chunk_count) of ready file documents with this content."""
    return con.execute(
        "SELECT id, uid, path, chunk_count FROM documents WHERE content_hash = %s AND status = 'ready' "
        "AND path IS NOT NULL ORDER BY id", (chash,),
    ).fetchall()


def move(con: Connection, doc_id: int, path: str, mtime: float, now: float) -> None:
    """A document found at a new path; a title that was its old file name becomes the new one."""
    row = con.execute("SELECT path FROM documents WHERE id = %s", (doc_id,)).fetchone()
    if row is None:
        raise LookupError(f"no document row {doc_id}")
    old = row[0]
    con.execute("UPDATE documents SET path = %s, mtime = %s, updated_at = %s, "
                "title = CASE WHEN title = %s THEN %s ELSE title END WHERE id = %s",
                (path, mtime, now, Path(old).name if old else None, Path(path).name, doc_id))


def insert(con: Connection, *, uid: str, path: str | None, title: str, mime: str, chash: str, size: int,
           mtime: float | None, project: str | None, status: str, chunks: int, now: float, meta: str) -> int:
    row = con.execute(
        "INSERT INTO documents(uid, path, title, mime, content_hash, size, mtime, project, status, "
        "chunk_count, created_at, updated_at, meta) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::jsonb) "
        "RETURNING id",
        (uid, path, title, mime, chash, size, mtime, project, status, chunks, now, now, meta),
    ).fetchone()
    assert row is not None
    return int(row[0])


def rewrite(con: Connection, doc_id: int, *, title: str, mime: str, chash: str, size: int, mtime: float | None,
            status: str, chunks: int, now: float, meta: str) -> None:
    con.execute(
        "UPDATE documents SET title = %s, mime = %s, content_hash = %s, size = %s, mtime = %s, status = %s, "
        "chunk_count = %s, updated_at = %s, meta = %s::jsonb WHERE id = %s",
        (title, mime, chash, size, mtime, status, chunks, now, meta, doc_id),
    )


def make_ready(con: Connection, doc_id: int, now: float) -> list[int] | None:
    """Flip a pending document to ready; its chunk ids, or None when it was not pending."""
    if not con.execute("UPDATE documents SET status = 'ready', meta = meta - 'action' - 'attempts', "
                       "updated_at = %s WHERE id = %s AND status = 'pending'", (now, doc_id)).rowcount:
        return None
    return [r[0] for r in con.execute("SELECT id FROM chunks WHERE document_id = %s", (doc_id,)).fetchall()]


def kept_vectors(con: Connection, doc_id: int) -> dict[str, np.ndarray]:
    """Current vectors of a document's chunks by text hash, to keep across a replace."""
    return {
        h: np.asarray(v, dtype=np.float32)
        for h, v in con.execute(
            "SELECT c.content_hash, v.embedding::real[] FROM chunks c "
            "JOIN chunk_vectors v ON v.user_id = c.user_id AND v.chunk_id = c.id "
            "WHERE c.document_id = %s AND c.embedded_hash = c.content_hash", (doc_id,),
        ).fetchall()
    }


def insert_chunks(con: Connection, doc_id: int, rows: list[tuple[Any, ...]]) -> list[int]:
    """Chunk rows (uid, document id, position, text, content hash, locator, page, heading, token count);
    returns the document's chunk ids in position order."""
    if rows:
        columns = list(zip(*rows, strict=True))
        con.execute(
            "INSERT INTO chunks(uid, document_id, position, text, content_hash, locator, page, heading, token_count) "
            "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::integer[], %s::text[], %s::text[], %s::text[], "
            "%s::integer[], %s::text[], %s::integer[])", [list(c) for c in columns],
        )
    return [r[0] for r in con.execute(
        "SELECT id FROM chunks WHERE document_id = %s ORDER BY position", (doc_id,)).fetchall()]


def unembedded_chunks(con: Connection, doc_ids: list[int], limit: int) -> list[tuple[int, str, str, int]]:
    """(id, text, content hash, document id) of these documents' chunks without a vector, in order."""
    return con.execute(
        "SELECT id, text, content_hash, document_id FROM chunks WHERE embedded_hash IS NULL AND "
        "document_id = ANY(%s::bigint[]) ORDER BY id LIMIT %s", (list(doc_ids), limit),
    ).fetchall()


def delete_contents(con: Connection, doc_id: int, *, keep_document: bool) -> tuple[list[tuple[int, str]], int, set[int]]:
    """Delete a document's chunks (their vectors and edges go by cascade, their words with the row), and the
    document unless keep_document. Returns the chunks' (id, uid), the number of edges that went and the
    nodes at their ends (the ones the delete may leave without an edge)."""
    ends = con.execute(
        "SELECT e.src, e.dst FROM chunks c JOIN edges e ON e.user_id = c.user_id AND e.chunk_id = c.id "
        "WHERE c.document_id = %s", (doc_id,)
    ).fetchall()
    chunk_rows = [(int(r[0]), str(r[1])) for r in con.execute(
        "DELETE FROM chunks WHERE document_id = %s RETURNING id, uid", (doc_id,)).fetchall()]
    chunk_rows.sort()
    if not keep_document:
        con.execute("DELETE FROM documents WHERE id = %s", (doc_id,))
    return chunk_rows, len(ends), {n for pair in ends for n in pair}


def derived_memories(con: Connection, doc_id: int) -> list[int]:
    """Memories made from a document (the ingest event, facts extracted from it)."""
    return [r[0] for r in con.execute("SELECT id FROM memories WHERE document_id = %s", (doc_id,)).fetchall()]


def chunk_by_uid(con: Connection, uid: str) -> tuple | None:
    """(chunk uid, text, locator, page, heading, document uid, title, path) of a chunk of a ready document."""
    return con.execute(
        "SELECT c.uid, c.text, c.locator, c.page, c.heading, d.uid, d.title, d.path FROM chunks c "
        "JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id "
        "WHERE c.uid = %s AND d.status = 'ready'", (uid,)).fetchone()


def chunk_texts(con: Connection, doc_id: int) -> list[tuple[int, str]]:
    """(chunk id, text) of a document's chunks in reading order."""
    return con.execute("SELECT id, text FROM chunks WHERE document_id = %s ORDER BY position",
                       (doc_id,)).fetchall()
