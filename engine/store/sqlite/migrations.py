"""Ordered, append-only, transactional migrations guarded by `PRAGMA user_version`.

Each migration is a small named function; it runs with its version bump in one transaction. Never edit a
migration that has shipped: append a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlcipher3

from ...errors import StoreTooNew
from .db import Connection

log = logging.getLogger(__name__)


def run_script(con: Connection, sql: str) -> None:
    """Run several statements inside the caller's transaction (`executescript` would commit first)."""
    buf = ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlcipher3.complete_statement(buf):
            con.execute(buf)
            buf = ""
    if buf.strip():
        raise ValueError("incomplete SQL statement in migration")


def m001_initial(con: Connection) -> None:
    run_script(
        con,
        """
        CREATE TABLE documents(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            uid TEXT NOT NULL UNIQUE,
            path TEXT,                      -- absolute path when it came from a file; NULL for uploaded text
            title TEXT NOT NULL,
            mime TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            size INTEGER NOT NULL DEFAULT 0,
            mtime REAL,
            project TEXT,
            status TEXT NOT NULL DEFAULT 'ready' CHECK(status IN ('pending','ready')),
            chunk_count INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX documents_path ON documents(path);
        CREATE INDEX documents_hash ON documents(content_hash);

        CREATE TABLE conversations(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            uid TEXT NOT NULL UNIQUE,
            title TEXT,
            project TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}'
        );

        CREATE TABLE messages(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK(role IN ('system','user','assistant')),
            content TEXT NOT NULL,
            created_at REAL NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}'   -- sources, grounded flag
        );
        CREATE INDEX messages_conversation ON messages(conversation_id, id);

        CREATE TABLE memories(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            uid TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL CHECK(kind IN ('fact','episodic','procedural')),
            text TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            importance REAL NOT NULL CHECK(importance BETWEEN 0 AND 1),
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            event_at REAL,                  -- when it happened, if the user said so
            last_accessed_at REAL,
            access_count INTEGER NOT NULL DEFAULT 0,
            archived INTEGER NOT NULL DEFAULT 0,
            archived_at REAL,
            project TEXT,
            source TEXT NOT NULL DEFAULT 'user',   -- user | document | chat | rollup | import
            document_id INTEGER REFERENCES documents(id) ON DELETE CASCADE,
            conversation_id INTEGER REFERENCES conversations(id) ON DELETE SET NULL,
            conflict_with TEXT,             -- uid of a memory this one contradicts (both are flagged)
            processed INTEGER NOT NULL DEFAULT 0,  -- episodic roll-up done
            extracted INTEGER NOT NULL DEFAULT 0,  -- triple extraction done
            embedded_hash TEXT,             -- content_hash the stored vector was made from; NULL = pending
            meta TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX memories_project ON memories(project, kind, archived);
        CREATE INDEX memories_hash ON memories(content_hash);
        CREATE INDEX memories_pending ON memories(embedded_hash) WHERE embedded_hash IS NULL;
        CREATE INDEX memories_conversation ON memories(conversation_id, kind, processed);

        -- facts derived from other memories (episodic roll-up): forgetting every source forgets the fact
        CREATE TABLE derivations(
            derived_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            source_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            PRIMARY KEY(derived_id, source_id)
        );
        CREATE INDEX derivations_source ON derivations(source_id);

        CREATE TABLE chunks(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            uid TEXT NOT NULL UNIQUE,
            document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            text TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            locator TEXT NOT NULL DEFAULT '',
            page INTEGER,
            heading TEXT,
            token_count INTEGER NOT NULL DEFAULT 0,
            extracted INTEGER NOT NULL DEFAULT 0,
            embedded_hash TEXT,
            UNIQUE(document_id, position)
        );
        CREATE INDEX chunks_pending ON chunks(embedded_hash) WHERE embedded_hash IS NULL;

        CREATE TABLE nodes(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL,
            norm_name TEXT NOT NULL UNIQUE,
            type TEXT,
            aliases TEXT NOT NULL DEFAULT '[]',
            created_at REAL NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}'
        );

        -- every edge records what it was derived from; deleting that deletes the edge
        CREATE TABLE edges(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            src INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
            rel TEXT NOT NULL,
            dst INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
            weight REAL NOT NULL DEFAULT 1.0,
            memory_id INTEGER REFERENCES memories(id) ON DELETE CASCADE,
            chunk_id INTEGER REFERENCES chunks(id) ON DELETE CASCADE,
            created_at REAL NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}',
            CHECK(memory_id IS NOT NULL OR chunk_id IS NOT NULL)
        );
        CREATE INDEX edges_src ON edges(src);
        CREATE INDEX edges_dst ON edges(dst);
        CREATE INDEX edges_memory ON edges(memory_id);
        CREATE INDEX edges_chunk ON edges(chunk_id);

        -- rejected triple candidates, counted by reason (no text)
        CREATE TABLE admission_rejections(
            reason TEXT PRIMARY KEY,
            count INTEGER NOT NULL DEFAULT 0
        );

        -- episodic -> semantic roll-up: one row per summarised window, keyed by a hash over source ids
        CREATE TABLE rollups(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            scope TEXT NOT NULL,            -- conversation uid or project
            source_hash TEXT NOT NULL UNIQUE,
            fact_count INTEGER NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE TABLE watermarks(
            scope TEXT PRIMARY KEY,
            last_id INTEGER NOT NULL,
            updated_at REAL NOT NULL
        );

        CREATE TABLE audit(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            actor TEXT NOT NULL,            -- cli | desktop | api | mcp | engine | consolidation
            action TEXT NOT NULL,
            target TEXT,
            detail TEXT NOT NULL DEFAULT '{}'  -- ids, counts, flags; never memory text
        );
        CREATE INDEX audit_at ON audit(at);

        CREATE TABLE embedding_space(
            id INTEGER PRIMARY KEY CHECK(id = 1),
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            dimension INTEGER NOT NULL,
            version TEXT NOT NULL,
            updated_at REAL NOT NULL
        );

        -- small engine state: the vector epoch, secrets kept inside the encrypted file, etc.
        CREATE TABLE state(
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );

        CREATE VIRTUAL TABLE memories_fts USING fts5(
            text, content='memories', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER memories_fts_au AFTER UPDATE OF text ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
            INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text);
        END;

        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            text, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER chunks_fts_au AFTER UPDATE OF text ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
            INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
        END;
        """
    )


def m002_consolidation(con: Connection) -> None:
    """Decay clock, crash-safe roll-up resume, and remembered contradiction checks."""
    run_script(
        con,
        """
        -- importance decay has been applied up to this time (so decay follows elapsed time, not runs)
        ALTER TABLE memories ADD COLUMN decayed_at REAL;
        -- newest source id of a summarised window: a crash before marking resumes from here
        ALTER TABLE rollups ADD COLUMN last_id INTEGER;

        -- pairs of facts the language model (or the user) already judged; a <> b, a < b
        CREATE TABLE fact_checks(
            a INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            b INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            pair_hash TEXT NOT NULL,        -- over both content hashes: an edit makes the pair new again
            verdict TEXT NOT NULL CHECK(verdict IN ('consistent','conflict','not_conflict','resolved')),
            checked_at REAL NOT NULL,
            PRIMARY KEY(a, b),
            CHECK(a < b)
        );
        CREATE INDEX fact_checks_b ON fact_checks(b);
        """,
    )


def m003_activity_and_late_duplicates(con: Connection) -> None:
    """The app's own events ("Ingested X (N chunks)", stored with the document they record) get their own
    source, so that content questions, the memory list and the counts leave them out; they are never
    summarised or graphed. `dedup_pending` marks a fact stored before its vector existed: it is checked
    for near-duplicates when the vector arrives (Engine._merge_late_duplicates)."""
    con.execute("ALTER TABLE memories ADD COLUMN dedup_pending INTEGER NOT NULL DEFAULT 0")
    con.execute(
        "UPDATE memories SET source = 'activity', processed = 1, extracted = 1 "
        "WHERE document_id IS NOT NULL AND kind = 'episodic' AND source = 'document'"
    )


_OLD_STATUS = "CHECK(status IN ('pending','ready'))"
_NEW_STATUS = "CHECK(status IN ('pending','ready','failed'))"


def m004_watched_folders_and_failed_documents(con: Connection) -> None:
    """Watched folders (engine/watch.py), and a real `failed` status for documents that could not be
    ingested and are not retried on their own (they were `pending` with meta.failed).

    The status CHECK is widened in place (SQLite's documented way for a change that leaves every stored
    row valid: edit the table's definition in sqlite_schema and bump schema_version); rebuilding the
    table would cascade-delete its chunks through the foreign keys."""
    (sql,) = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'documents'").fetchone()
    if _NEW_STATUS not in sql:
        if _OLD_STATUS not in sql:
            raise RuntimeError("documents table has an unexpected definition; not migrated")
        version = con.execute("PRAGMA schema_version").fetchone()[0]
        con.execute("PRAGMA writable_schema = ON")
        try:
            con.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'documents'",
                        (sql.replace(_OLD_STATUS, _NEW_STATUS),))
            con.execute(f"PRAGMA schema_version = {int(version) + 1}")
        finally:
            con.execute("PRAGMA writable_schema = OFF")
    con.execute("UPDATE documents SET status = 'failed' "
                "WHERE status = 'pending' AND json_extract(meta, '$.failed') IS NOT NULL")
    run_script(
        con,
        """
        CREATE TABLE watched_folders(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            path TEXT NOT NULL UNIQUE,      -- resolved absolute path
            project TEXT,
            include TEXT NOT NULL DEFAULT '[]',   -- JSON list of glob patterns; empty: every supported file
            exclude TEXT NOT NULL DEFAULT '[]',
            paused INTEGER NOT NULL DEFAULT 0,
            available INTEGER NOT NULL DEFAULT 1, -- 0: the folder was missing at the last look (unplugged)
            queued INTEGER NOT NULL DEFAULT 0,    -- files the watcher found to read and has not read yet
            skipped INTEGER NOT NULL DEFAULT 0,   -- files left out at the last scan (too big, unreadable name)
            errors TEXT NOT NULL DEFAULT '[]',    -- JSON list of [path, reason] from the last scan and events
            added_at REAL NOT NULL,
            scan_started_at REAL,
            scanned_at REAL                       -- NULL or older than scan_started_at: a scan did not finish
        );
        """,
    )


# One row per combination of the flags the counts of `stats` are made of (a memory's kind, archived, whether it
# is the app's own event, extracted, rolled up, waiting for its vector); kept by triggers, so counting costs the
# same at any size.
_MEMORY_TALLY_KEY = ("'m:' || {r}.kind || ':' || {r}.archived || ':' || ({r}.source = 'activity') || ':' || "
                     "{r}.extracted || ':' || {r}.processed || ':' || ({r}.embedded_hash IS NULL)")
_CHUNK_TALLY_KEY = "'c:' || {r}.extracted || ':' || ({r}.embedded_hash IS NULL)"


def _tally_triggers(table: str, key: str, columns: str) -> str:
    new, old = key.format(r="new"), key.format(r="old")
    plus = f"INSERT INTO tallies(name, n) VALUES ({new}, 1) ON CONFLICT(name) DO UPDATE SET n = n + 1;"
    minus = f"UPDATE tallies SET n = n - 1 WHERE name = {old};"
    return f"""
        CREATE TRIGGER {table}_tally_ai AFTER INSERT ON {table} BEGIN {plus} END;
        CREATE TRIGGER {table}_tally_ad AFTER DELETE ON {table} BEGIN {minus} END;
        CREATE TRIGGER {table}_tally_au AFTER UPDATE OF {columns} ON {table} WHEN {old} IS NOT {new}
        BEGIN {minus} {plus} END;
    """


def m005_flat_costs(con: Connection) -> None:
    """What keeps the hot statements' cost independent of the store's size: an index for the memory list's
    order (newest first), for contradiction flags, for the citations of stored answers (forgetting a memory
    scrubs the answers that cite it), for the memories made from a document (and its
    cascade), tallies kept by triggers for the counts of `stats`, and the log of which rows each write
    touched (another process's vector mirror catches up with it instead of reloading)."""
    run_script(
        con,
        """
        CREATE INDEX memories_when ON memories(coalesce(event_at, created_at), id);
        CREATE INDEX memories_conflicts ON memories(conflict_with) WHERE conflict_with IS NOT NULL;
        CREATE INDEX documents_status ON documents(status);
        CREATE INDEX memories_document ON memories(document_id);

        -- which memories and chunks (by uid) each stored answer cites; kept from messages.meta by triggers
        CREATE TABLE message_sources(
            uid TEXT NOT NULL,
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            PRIMARY KEY(uid, message_id)
        ) WITHOUT ROWID;
        CREATE INDEX message_sources_message ON message_sources(message_id);
        INSERT OR IGNORE INTO message_sources(uid, message_id)
            SELECT j.value, m.id FROM messages m, json_each(m.meta, '$.sources') j
            WHERE m.role = 'assistant' AND json_valid(m.meta) AND json_type(m.meta, '$.sources') = 'array'
              AND j.type = 'text';
        CREATE TRIGGER messages_sources_ai AFTER INSERT ON messages
        WHEN new.role = 'assistant' AND json_valid(new.meta) AND json_type(new.meta, '$.sources') = 'array'
        BEGIN
            INSERT OR IGNORE INTO message_sources(uid, message_id)
                SELECT value, new.id FROM json_each(new.meta, '$.sources') WHERE type = 'text';
        END;
        CREATE TRIGGER messages_sources_au AFTER UPDATE OF meta ON messages BEGIN
            DELETE FROM message_sources WHERE message_id = old.id;
            INSERT OR IGNORE INTO message_sources(uid, message_id)
                SELECT value, new.id FROM json_each(CASE WHEN new.role = 'assistant' AND json_valid(new.meta)
                    AND json_type(new.meta, '$.sources') = 'array' THEN json_extract(new.meta, '$.sources')
                    ELSE '[]' END) WHERE type = 'text';
        END;

        CREATE TABLE tallies(name TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;

        -- which rows each write (vector epoch) touched: another process's vector mirror catches up with them
        CREATE TABLE vector_log(epoch INTEGER NOT NULL, tbl INTEGER NOT NULL, rid INTEGER NOT NULL);
        CREATE INDEX vector_log_epoch ON vector_log(epoch, tbl);
        """
        + _tally_triggers("memories", _MEMORY_TALLY_KEY, "kind, archived, source, extracted, processed, embedded_hash")
        + _tally_triggers("chunks", _CHUNK_TALLY_KEY, "extracted, embedded_hash")
        + """
        CREATE TRIGGER nodes_tally_ai AFTER INSERT ON nodes BEGIN
            INSERT INTO tallies(name, n) VALUES ('nodes', 1) ON CONFLICT(name) DO UPDATE SET n = n + 1; END;
        CREATE TRIGGER nodes_tally_ad AFTER DELETE ON nodes BEGIN UPDATE tallies SET n = n - 1 WHERE name = 'nodes'; END;
        CREATE TRIGGER edges_tally_ai AFTER INSERT ON edges BEGIN
            INSERT INTO tallies(name, n) VALUES ('edges', 1) ON CONFLICT(name) DO UPDATE SET n = n + 1; END;
        CREATE TRIGGER edges_tally_ad AFTER DELETE ON edges BEGIN UPDATE tallies SET n = n - 1 WHERE name = 'edges'; END;
        """
        + f"""
        INSERT INTO tallies(name, n) SELECT {_MEMORY_TALLY_KEY.format(r="memories")}, count(*) FROM memories GROUP BY 1;
        INSERT INTO tallies(name, n) SELECT {_CHUNK_TALLY_KEY.format(r="chunks")}, count(*) FROM chunks GROUP BY 1;
        INSERT INTO tallies(name, n) SELECT 'nodes', count(*) FROM nodes;
        INSERT INTO tallies(name, n) SELECT 'edges', count(*) FROM edges;
        """,
    )


def m006_vector_mirror_blocks(con: Connection) -> None:
    """The int8 vector mirror kept inside the store, in blocks of row ids (engine/store/sqlite/vectors.py), so that a big
    store's first search reads a quarter of the float32 bytes in large blobs instead of every vector row by
    row. A block whose vector rows change or go is erased at once by triggers (kept with the vector tables)."""
    run_script(
        con,
        """
        CREATE TABLE vector_mirror(
            tbl INTEGER NOT NULL,     -- 0: memories, 1: chunks
            block INTEGER NOT NULL,   -- the rows with ids block * 1024 ... block * 1024 + 1023
            epoch INTEGER NOT NULL,   -- the vector epoch the block was written at
            rows INTEGER NOT NULL,
            projects TEXT,            -- JSON list of the block's project names (meta codes them)
            meta BLOB,                -- ids, scales, error bounds, times, projects, kinds, archived; NULL: erased
            codes BLOB,               -- rows x dimension int8 codes; NULL: erased
            PRIMARY KEY(tbl, block)
        );
        """,
    )


def m007_document_tallies(con: Connection) -> None:
    """Documents counted by status in `tallies` ('d:ready', 'd:failed', 'd:pending'), kept by triggers like
    the other counts of `stats`: counting them from the status index grew with the documents (0.09 ms of the
    0.20 ms of `stats` with 5,000 documents)."""
    key = "'d:' || {r}.status"
    run_script(
        con,
        _tally_triggers("documents", key, "status")
        + f"INSERT INTO tallies(name, n) SELECT {key.format(r='documents')}, count(*) FROM documents GROUP BY 1;",
    )


def m008_short_hash_key(con: Connection) -> None:
    """memories_hash on the first 10 hex digits of the content hash instead of all 64 (store/sqlite/memories.py,
    BY_HASH): ~25 bytes an entry instead of ~80, so a million memories' index is ~6k pages fewer to keep in
    the caches, and the leaf a new memory's entry goes into (anywhere in it) is more often one of them.
    Building it reads the table once: ~2 s for 500k memories."""
    run_script(
        con,
        """
        DROP INDEX IF EXISTS memories_hash;
        CREATE INDEX memories_hash ON memories(substr(content_hash, 1, 10));
        """,
    )


def m009_vector_mirror_indexes(con: Connection) -> None:
    """What a process's first search asks of the stored mirror blocks before it reads them (how many there
    are, how many are erased, how many rows they hold) from two small indexes instead of each block's row:
    every block's row sits on a page of its own, so at a million items those questions read ~2,000 pages
    that were not in the cache, ~0.3 s a table (engine/store/sqlite/vectors.py, `_streamed`)."""
    run_script(
        con,
        """
        CREATE INDEX IF NOT EXISTS vector_mirror_erased ON vector_mirror(tbl, block) WHERE codes IS NULL;
        CREATE INDEX IF NOT EXISTS vector_mirror_rows ON vector_mirror(tbl, rows);
        """,
    )


def m010_mirror_forget_in_place(con: Connection) -> None:
    """A vector that goes is forgotten inside its stored mirror block (its codes zeroed, the row flagged
    gone: engine/store/sqlite/mirror_layout.py) instead of erasing the whole block, which wrote ~17 pages a forget. The
    delete triggers now call two SQL functions that engine/store/sqlite/db.py registers on every connection; a version
    from before them could not forget a memory in such a store, so the schema version says it is newer.
    The triggers keep their block size (engine/store/sqlite/vectors.py replaces triggers of another size)."""
    erase = "SET projects = NULL, meta = NULL, codes = NULL"
    forget = "SET meta = mirror_forget_meta(meta, old.id), codes = mirror_forget_codes(codes, meta, old.id)"
    for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN "
                                 "('memories_f32_mirror_d', 'chunks_f32_mirror_d')").fetchall():
        if erase in sql:
            con.execute(f"DROP TRIGGER {name}")
            con.execute(sql.replace(erase, forget))


def m011_partial_indexes(con: Connection) -> None:
    """Index only the memories a lookup can ask for. `memories_document` and `memories_conversation` held
    every memory, most of them with no document or conversation (NULL): forgetting an old memory at 1M
    rewrote a leaf of each somewhere in the middle of those NULLs (two of the ~32 pages it wrote) for
    nothing. They now hold the memories that have one (`document_id = ?`, `conversation_id = ?` and the
    foreign keys' cascades imply it). The roll-up's queue (unprocessed episodic events, by conversation
    and project) gets an index of its own that holds only what waits; it had walked
    `memories_conversation` whole to find its scopes."""
    run_script(
        con,
        """
        DROP INDEX IF EXISTS memories_document;
        CREATE INDEX memories_document ON memories(document_id) WHERE document_id IS NOT NULL;
        DROP INDEX IF EXISTS memories_conversation;
        CREATE INDEX memories_conversation ON memories(conversation_id) WHERE conversation_id IS NOT NULL;
        CREATE INDEX IF NOT EXISTS memories_rollup ON memories(conversation_id, project)
            WHERE kind = 'episodic' AND processed = 0 AND archived = 0;
        """,
    )


def m012_edges_by_relation(con: Connection) -> None:
    """Edges by subject and relation. The contradiction check pairs the facts whose edges share both (and
    not the object); with an index on the subject alone, each edge read every edge of its subject, and a
    subject most facts are about (the user) made that quadratic in its edges: 8,000 edges, three in four of
    them the user's, took 3.9 s against 0.6 s. It also serves every lookup by subject alone, so it replaces
    that index (one index leaf less to write per edge)."""
    run_script(
        con,
        """
        CREATE INDEX IF NOT EXISTS edges_src_rel ON edges(src, rel);
        DROP INDEX IF EXISTS edges_src;
        """,
    )


MIGRATIONS: list[Callable[[Connection], None]] = [
    m001_initial,
    m002_consolidation,
    m003_activity_and_late_duplicates,
    m004_watched_folders_and_failed_documents,
    m005_flat_costs,
    m006_vector_mirror_blocks,
    m007_document_tallies,
    m008_short_hash_key,
    m009_vector_mirror_indexes,
    m010_mirror_forget_in_place,
    m011_partial_indexes,
    m012_edges_by_relation,
]
SCHEMA_VERSION = len(MIGRATIONS)


def is_current(con: Connection) -> bool:
    """True when the store is at SCHEMA_VERSION (a store opened read-only is used only then)."""
    return bool(con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION)


def migrate(con: Connection) -> int:
    """Bring the store up to SCHEMA_VERSION; refuse one made by a newer version. Returns migrations applied."""
    current = con.execute("PRAGMA user_version").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise StoreTooNew(
            f"This memory store was written by a newer version of Personal LLM (schema {current}, this "
            f"version knows {SCHEMA_VERSION}). Update the app; the store was left untouched."
        )
    applied = 0
    for version in range(current + 1, SCHEMA_VERSION + 1):
        step = MIGRATIONS[version - 1]
        con.execute("BEGIN IMMEDIATE")
        try:
            if con.execute("PRAGMA user_version").fetchone()[0] >= version:  # another process got there first
                con.execute("COMMIT")
                continue
            step(con)
            con.execute(f"PRAGMA user_version = {version}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        log.info("applied migration %s", step.__name__)
        applied += 1
    return applied
