"""A user's rows in every table of the PostgreSQL schema, written as the server writes them (in the user's
transaction, user_id left to its default)."""

from __future__ import annotations

import json

import numpy as np
import psycopg

DIM = 384


def vector(seed: int) -> str:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    v /= np.linalg.norm(v)
    return "[" + ",".join(f"{x:.6f}" for x in v) + "]"


def populate(con: psycopg.Connection, tag: str) -> dict[str, int]:
    """One of everything for the transaction's user; returns the row ids made (by name)."""
    one = lambda q, p=(): int(con.execute(q, p).fetchone()[0])  # noqa: E731
    doc = one("INSERT INTO documents(uid, path, title, mime, content_hash, created_at, updated_at, project) "
              "VALUES (%s, '/notes/trip.md', 'Trip', 'text/markdown', 'dh', 1, 1, 'travel') RETURNING id",
              (f"doc_{tag}",))
    chunk = one("INSERT INTO chunks(uid, document_id, position, text, content_hash) "
                "VALUES (%s, %s, 0, %s, 'ch') RETURNING id", (f"chk_{tag}", doc, f"The {tag} trip went to Porto."))
    conv = one("INSERT INTO conversations(uid, title, created_at, updated_at) VALUES (%s, 'Trip', 1, 1) RETURNING id",
               (f"conv_{tag}",))
    mem = one("INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, "
              "conversation_id) VALUES (%s, 'episodic', %s, 'mh', 0.5, 1, 1, %s) RETURNING id",
              (f"mem_{tag}", f"{tag} booked a train to Porto.", conv))
    fact = one("INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, "
               "document_id, source) VALUES (%s, 'fact', %s, 'fh', 0.7, 2, 2, %s, 'rollup') RETURNING id",
               (f"fact_{tag}", f"{tag} travels by train.", doc))
    con.execute("INSERT INTO derivations(derived_id, source_id) VALUES (%s, %s)", (fact, mem))
    con.execute("INSERT INTO fact_checks(a, b, pair_hash, verdict, checked_at) VALUES (%s, %s, 'p', 'consistent', 3)",
                (min(mem, fact), max(mem, fact)))
    con.execute("INSERT INTO messages(conversation_id, role, content, created_at) VALUES (%s, 'user', 'Where?', 3)",
                (conv,))
    con.execute("INSERT INTO messages(conversation_id, role, content, created_at, meta) "
                "VALUES (%s, 'assistant', 'Porto.', 4, %s)", (conv, json.dumps({"sources": [f"mem_{tag}"]})))
    a = one("INSERT INTO nodes(name, norm_name, created_at) VALUES (%s, %s, 1) RETURNING id", (tag, tag.lower()))
    b = one("INSERT INTO nodes(name, norm_name, created_at) VALUES ('Porto', 'porto', 1) RETURNING id")
    con.execute("INSERT INTO edges(src, rel, dst, memory_id, created_at) VALUES (%s, 'visited', %s, %s, 1)",
                (a, b, mem))
    con.execute("INSERT INTO edges(src, rel, dst, chunk_id, created_at) VALUES (%s, 'visited', %s, %s, 1)",
                (a, b, chunk))
    con.execute("INSERT INTO admission_rejections(reason, count) VALUES ('vague', 2)")
    con.execute("INSERT INTO rollups(scope, source_hash, fact_count, created_at, last_id) VALUES (%s, 'sh', 1, 1, %s)",
                (f"conv_{tag}", mem))
    con.execute("INSERT INTO watermarks(scope, last_id, updated_at) VALUES (%s, %s, 1)", (f"conv_{tag}", mem))
    con.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES (1, 'api', 'remember', %s, '{}')",
                (f"mem_{tag}",))
    con.execute("INSERT INTO state(key, value) VALUES ('vector_epoch', '1')")
    con.execute("INSERT INTO watched_folders(path, added_at) VALUES ('/notes', 1)")
    con.execute("INSERT INTO memory_vectors(memory_id, embedding) VALUES (%s, %s)", (mem, vector(mem)))
    con.execute("INSERT INTO memory_windows(memory_id, start, \"end\", embedding) VALUES (%s, 0, 10, %s)",
                (mem, vector(mem + 1000)))
    con.execute("INSERT INTO chunk_vectors(chunk_id, embedding) VALUES (%s, %s)", (chunk, vector(chunk + 2000)))
    return {"document": doc, "chunk": chunk, "conversation": conv, "memory": mem, "fact": fact, "node": a}


def user_tables(con: psycopg.Connection) -> list[str]:
    """Every table of the schema with a user_id column (read from the catalog, not from a list in the code)
    but `tokens`, the operator's, which the server cannot read at all."""
    return [r[0] for r in con.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped "
        "WHERE n.nspname = 'personal_llm' AND c.relkind IN ('r', 'p') AND c.relname <> 'tokens' ORDER BY 1").fetchall()]
