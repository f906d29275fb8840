"""The PostgreSQL schema: ordered, append-only migrations, each in one transaction, recorded in
`schema_version`. Never edit a migration that has shipped: append a new one.

Everything lives in the schema `personal_llm`, owned by the role `personal_llm_owner` (NOLOGIN). The
server works as `personal_llm_app` (NOLOGIN, never superuser or BYPASSRLS), which may read and write the
users' tables and nothing else. Every table holding a user's data has a `user_id` (set from the
transaction's `app.user_id` when not given) and row-level security, ENABLEd and FORCEd (the owner is held to
it too), with one policy: `user_id = current_setting('app.user_id')::bigint`, for reading and writing. A
transaction that did not set the user reads nothing and writes nothing: `current_setting` fails.

Rows refer to each other within one user: every key is (user_id, id) and every reference carries the
user_id, so no row can point at another user's row (foreign keys are checked without row security).

The meaning is the SQLite schema's (engine/migrations.py at its m012); its SQLite machinery is not copied:
no FTS5 tables (a generated `tsvector` column and a GIN index), no vec0 tables, float copies, int8 mirror
blocks or vector log (pgvector columns with HNSW indexes: `ensure_space`), no near-duplicate buckets.
The HNSW indexes are on the vectors cast to half precision (`hnsw_index`, schema version 4): half the index's
memory and a faster build; a search rescores its candidates from the stored single-precision vectors.
The audit log's `id` is each user's write sequence, given out in commit order (the change feed).
"""

from __future__ import annotations

from collections.abc import Callable

from psycopg import Connection, sql

SCHEMA = "personal_llm"
OWNER = "personal_llm_owner"
APP = "personal_llm_app"
# owns the functions that find a user's rows holding words through the full-text (GIN) indexes (m003)
WORDS = "personal_llm_words"
ROLES = (OWNER, APP, WORDS)
MIGRATION_LOCK = 0x706C6C6D  # pg_advisory_xact_lock key: one init or upgrade at a time
USER = "current_setting('app.user_id')::bigint"
# the lexical side: PostgreSQL's English configuration (Snowball's English stemmer, the Porter stemmer's
# successor that FTS5's `porter` tokenizer runs, and English stop words, which BM25 all but ignores anyway)
TEXT_SEARCH = "english"

# Tables holding users' data, in an order that deletes children before parents (remove-user --forget).
USER_TABLES = (
    "message_sources", "messages", "fact_checks", "derivations", "edges", "nodes", "memory_windows",
    "memory_vectors", "chunk_vectors", "chunks", "memories", "documents", "conversations", "admission_rejections",
    "rollups", "watermarks", "audit", "feed", "tallies", "state", "watched_folders",
)
VECTOR_TABLES = ("memory_vectors", "memory_windows", "chunk_vectors")


def _user_column() -> str:
    return f"user_id bigint NOT NULL DEFAULT {USER} REFERENCES users(id)"


def _secure(table: str) -> str:
    """Row-level security on a user table, and the app's rights on it."""
    return f"""
        ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
        ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
        CREATE POLICY {table}_own_rows ON {table} USING (user_id = {USER}) WITH CHECK (user_id = {USER});
        GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP};
    """


def _tally_trigger(table: str, key: str) -> str:
    """Counts kept by a trigger (as SQLite's `tallies`): one row per user and combination of flags."""
    new, old = key.format(r="new"), key.format(r="old")
    return f"""
        CREATE FUNCTION {table}_tally() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP IN ('UPDATE', 'DELETE') THEN
                IF TG_OP = 'DELETE' OR {old} IS DISTINCT FROM {new} THEN
                    PERFORM {SCHEMA}.tally(old.user_id, {old}, -1);
                END IF;
            END IF;
            IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND {old} IS DISTINCT FROM {new}) THEN
                PERFORM {SCHEMA}.tally(new.user_id, {new}, 1);
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER {table}_tally AFTER INSERT OR UPDATE OR DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION {table}_tally();
    """


MEMORY_TALLY_KEY = ("'m:' || {r}.kind || ':' || {r}.archived::int || ':' || ({r}.source = 'activity')::int || ':' "
                    "|| {r}.extracted::int || ':' || {r}.processed::int || ':' || ({r}.embedded_hash IS NULL)::int")
CHUNK_TALLY_KEY = "'c:' || {r}.extracted::int || ':' || ({r}.embedded_hash IS NULL)::int"
DOCUMENT_TALLY_KEY = "'d:' || {r}.status"


def m001_initial(con: Connection) -> None:
    user = _user_column()
    tsv = f"tsv tsvector GENERATED ALWAYS AS (to_tsvector('{TEXT_SEARCH}', text)) STORED"
    script = f"""
        CREATE TABLE users(
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name text NOT NULL UNIQUE,
            created_at double precision NOT NULL,
            removed_at double precision            -- set by remove-user (without --forget): no more tokens
        );
        -- API tokens: only their SHA-256 is kept; the token is shown once, when made
        CREATE TABLE tokens(
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            hash bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
            created_at double precision NOT NULL
        );
        CREATE INDEX tokens_user ON tokens(user_id);

        -- the server's embedding space (one model embeds for every user): ensure_space keeps the vector
        -- columns and their indexes of its dimension
        CREATE TABLE embedding_space(
            id integer PRIMARY KEY CHECK (id = 1),
            provider text NOT NULL,
            model text NOT NULL,
            dimension integer NOT NULL CHECK (dimension > 0),
            version text NOT NULL,
            updated_at double precision NOT NULL
        );
        GRANT SELECT ON embedding_space TO {APP};

        CREATE TABLE documents(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            uid text NOT NULL,
            path text,
            title text NOT NULL,
            mime text NOT NULL,
            content_hash text NOT NULL,
            size bigint NOT NULL DEFAULT 0,
            mtime double precision,
            project text,
            status text NOT NULL DEFAULT 'ready' CHECK (status IN ('pending', 'ready', 'failed')),
            chunk_count integer NOT NULL DEFAULT 0,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            meta jsonb NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, uid)
        );
        CREATE INDEX documents_path ON documents(user_id, path);
        CREATE INDEX documents_hash ON documents(user_id, content_hash);
        CREATE INDEX documents_status ON documents(user_id, status);

        CREATE TABLE conversations(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            uid text NOT NULL,
            title text,
            project text,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            meta jsonb NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, uid)
        );

        CREATE TABLE messages(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            conversation_id bigint NOT NULL,
            role text NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content text NOT NULL,
            created_at double precision NOT NULL,
            meta jsonb NOT NULL DEFAULT '{{}}',   -- sources, grounded flag
            PRIMARY KEY (user_id, id),
            FOREIGN KEY (user_id, conversation_id) REFERENCES conversations(user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX messages_conversation ON messages(user_id, conversation_id, id);

        CREATE TABLE memories(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            uid text NOT NULL,
            kind text NOT NULL CHECK (kind IN ('fact', 'episodic', 'procedural')),
            text text NOT NULL,
            content_hash text NOT NULL,
            importance double precision NOT NULL CHECK (importance BETWEEN 0 AND 1),
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            event_at double precision,             -- when it happened, if the user said so
            last_accessed_at double precision,
            access_count integer NOT NULL DEFAULT 0,
            archived boolean NOT NULL DEFAULT false,
            archived_at double precision,
            project text,
            source text NOT NULL DEFAULT 'user',   -- user | document | chat | rollup | import | activity
            document_id bigint,
            conversation_id bigint,
            conflict_with text,                    -- uid of a memory this one contradicts (both are flagged)
            processed boolean NOT NULL DEFAULT false,  -- episodic roll-up done
            extracted boolean NOT NULL DEFAULT false,  -- triple extraction done
            embedded_hash text,                    -- content_hash the stored vector was made from; NULL: pending
            meta jsonb NOT NULL DEFAULT '{{}}',
            decayed_at double precision,           -- importance decay applied up to this time
            dedup_pending boolean NOT NULL DEFAULT false,  -- near-duplicate check waits for the vector
            {tsv},
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, uid),
            FOREIGN KEY (user_id, document_id) REFERENCES documents(user_id, id) ON DELETE CASCADE,
            FOREIGN KEY (user_id, conversation_id) REFERENCES conversations(user_id, id)
                ON DELETE SET NULL (conversation_id)
        );
        CREATE INDEX memories_project ON memories(user_id, project, kind, archived);
        CREATE INDEX memories_hash ON memories(user_id, content_hash);
        CREATE INDEX memories_pending ON memories(user_id, id) WHERE embedded_hash IS NULL;
        CREATE INDEX memories_when ON memories(user_id, coalesce(event_at, created_at), id);
        CREATE INDEX memories_conflicts ON memories(user_id, conflict_with) WHERE conflict_with IS NOT NULL;
        CREATE INDEX memories_document ON memories(user_id, document_id) WHERE document_id IS NOT NULL;
        CREATE INDEX memories_conversation ON memories(user_id, conversation_id) WHERE conversation_id IS NOT NULL;
        CREATE INDEX memories_rollup ON memories(user_id, conversation_id, project)
            WHERE kind = 'episodic' AND NOT processed AND NOT archived;
        CREATE INDEX memories_words ON memories USING gin(tsv);

        -- facts derived from other memories (episodic roll-up): forgetting every source forgets the fact
        CREATE TABLE derivations(
            {user},
            derived_id bigint NOT NULL,
            source_id bigint NOT NULL,
            PRIMARY KEY (user_id, derived_id, source_id),
            FOREIGN KEY (user_id, derived_id) REFERENCES memories(user_id, id) ON DELETE CASCADE,
            FOREIGN KEY (user_id, source_id) REFERENCES memories(user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX derivations_source ON derivations(user_id, source_id);

        CREATE TABLE chunks(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            uid text NOT NULL,
            document_id bigint NOT NULL,
            position integer NOT NULL,
            text text NOT NULL,
            content_hash text NOT NULL,
            locator text NOT NULL DEFAULT '',
            page integer,
            heading text,
            token_count integer NOT NULL DEFAULT 0,
            extracted boolean NOT NULL DEFAULT false,
            embedded_hash text,
            {tsv},
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, uid),
            UNIQUE (user_id, document_id, position),
            FOREIGN KEY (user_id, document_id) REFERENCES documents(user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX chunks_pending ON chunks(user_id, id) WHERE embedded_hash IS NULL;
        CREATE INDEX chunks_words ON chunks USING gin(tsv);

        CREATE TABLE nodes(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            name text NOT NULL,
            norm_name text NOT NULL,
            type text,
            aliases jsonb NOT NULL DEFAULT '[]',
            created_at double precision NOT NULL,
            meta jsonb NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, norm_name)
        );

        -- every edge records what it was derived from; deleting that deletes the edge
        CREATE TABLE edges(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            src bigint NOT NULL,
            rel text NOT NULL,
            dst bigint NOT NULL,
            weight double precision NOT NULL DEFAULT 1.0,
            memory_id bigint,
            chunk_id bigint,
            created_at double precision NOT NULL,
            meta jsonb NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (user_id, id),
            CHECK (memory_id IS NOT NULL OR chunk_id IS NOT NULL),
            FOREIGN KEY (user_id, src) REFERENCES nodes(user_id, id) ON DELETE CASCADE,
            FOREIGN KEY (user_id, dst) REFERENCES nodes(user_id, id) ON DELETE CASCADE,
            FOREIGN KEY (user_id, memory_id) REFERENCES memories(user_id, id) ON DELETE CASCADE,
            FOREIGN KEY (user_id, chunk_id) REFERENCES chunks(user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX edges_src_rel ON edges(user_id, src, rel);
        CREATE INDEX edges_dst ON edges(user_id, dst);
        CREATE INDEX edges_memory ON edges(user_id, memory_id) WHERE memory_id IS NOT NULL;
        CREATE INDEX edges_chunk ON edges(user_id, chunk_id) WHERE chunk_id IS NOT NULL;

        -- rejected triple candidates, counted by reason (no text)
        CREATE TABLE admission_rejections(
            {user},
            reason text NOT NULL,
            count bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (user_id, reason)
        );

        -- episodic -> semantic roll-up: one row per summarised window, keyed by a hash over source ids
        CREATE TABLE rollups(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            scope text NOT NULL,                   -- conversation uid or project
            source_hash text NOT NULL,
            fact_count integer NOT NULL,
            created_at double precision NOT NULL,
            last_id bigint,                        -- newest source id of the window (a crash resumes from it)
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, source_hash)
        );
        CREATE TABLE watermarks(
            {user},
            scope text NOT NULL,
            last_id bigint NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (user_id, scope)
        );

        -- pairs of facts the language model (or the user) already judged; a < b
        CREATE TABLE fact_checks(
            {user},
            a bigint NOT NULL,
            b bigint NOT NULL,
            pair_hash text NOT NULL,               -- over both content hashes: an edit makes the pair new again
            verdict text NOT NULL CHECK (verdict IN ('consistent', 'conflict', 'not_conflict', 'resolved')),
            checked_at double precision NOT NULL,
            PRIMARY KEY (user_id, a, b),
            CHECK (a < b),
            FOREIGN KEY (user_id, a) REFERENCES memories(user_id, id) ON DELETE CASCADE,
            FOREIGN KEY (user_id, b) REFERENCES memories(user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX fact_checks_b ON fact_checks(user_id, b);

        -- the change feed: each user's last write sequence; a write's audit row takes the next one while
        -- holding this row, so a user's sequence numbers are committed in order and a reader that asks for
        -- the rows after the last one it saw misses none
        CREATE TABLE feed(
            {user},
            last_id bigint NOT NULL,
            PRIMARY KEY (user_id)
        );

        -- one row per write: ids and counts, never memory text; `id` is the user's write sequence
        CREATE TABLE audit(
            {user},
            id bigint NOT NULL,
            at double precision NOT NULL,
            actor text NOT NULL,                   -- cli | desktop | api | mcp | engine | consolidation
            action text NOT NULL,
            target text,
            detail jsonb NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (user_id, id)
        );
        CREATE INDEX audit_at ON audit(user_id, at);
        CREATE FUNCTION audit_sequence() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {SCHEMA}.feed AS f (user_id, last_id) VALUES (new.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET last_id = f.last_id + 1
                RETURNING last_id INTO new.id;
            RETURN new;
        END $$;
        CREATE TRIGGER audit_sequence BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION audit_sequence();

        -- small engine state (a user's settings kept on the server, etc.)
        CREATE TABLE state(
            {user},
            key text NOT NULL,
            value text NOT NULL,
            PRIMARY KEY (user_id, key)
        );

        -- which memories and chunks (by uid) each stored answer cites: forgetting one deletes the answers
        CREATE TABLE message_sources(
            {user},
            uid text NOT NULL,
            message_id bigint NOT NULL,
            PRIMARY KEY (user_id, uid, message_id),
            FOREIGN KEY (user_id, message_id) REFERENCES messages(user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX message_sources_message ON message_sources(user_id, message_id);
        CREATE FUNCTION message_sources_keep() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' THEN
                DELETE FROM {SCHEMA}.message_sources WHERE user_id = old.user_id AND message_id = old.id;
            END IF;
            IF new.role = 'assistant' AND jsonb_typeof(new.meta -> 'sources') = 'array' THEN
                INSERT INTO {SCHEMA}.message_sources(user_id, uid, message_id)
                    SELECT new.user_id, s #>> '{{}}', new.id FROM jsonb_array_elements(new.meta -> 'sources') s
                    WHERE jsonb_typeof(s) = 'string'
                    ON CONFLICT DO NOTHING;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER message_sources_keep AFTER INSERT OR UPDATE OF meta ON messages
            FOR EACH ROW EXECUTE FUNCTION message_sources_keep();

        -- counts kept by triggers (memories by flags, chunks, documents by status, nodes, edges)
        CREATE TABLE tallies(
            {user},
            name text NOT NULL,
            n bigint NOT NULL,
            PRIMARY KEY (user_id, name)
        );
        CREATE FUNCTION tally(who bigint, what text, delta integer) RETURNS void LANGUAGE sql AS $$
            INSERT INTO {SCHEMA}.tallies AS t (user_id, name, n) VALUES (who, what, delta)
                ON CONFLICT (user_id, name) DO UPDATE SET n = t.n + excluded.n
        $$;

        CREATE TABLE watched_folders(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            path text NOT NULL,                    -- resolved absolute path
            project text,
            include jsonb NOT NULL DEFAULT '[]',   -- glob patterns; empty: every supported file
            exclude jsonb NOT NULL DEFAULT '[]',
            paused boolean NOT NULL DEFAULT false,
            available boolean NOT NULL DEFAULT true,  -- false: the folder was missing at the last look
            queued integer NOT NULL DEFAULT 0,     -- files found to read and not read yet
            skipped integer NOT NULL DEFAULT 0,    -- files left out at the last scan
            errors jsonb NOT NULL DEFAULT '[]',    -- [path, reason] from the last scan and events
            added_at double precision NOT NULL,
            scan_started_at double precision,
            scanned_at double precision,           -- NULL or older than scan_started_at: a scan did not finish
            PRIMARY KEY (user_id, id),
            UNIQUE (user_id, path)
        );

        -- vectors: the column's type gets the space's dimension (ensure_space); a derived index, rebuilt
        -- from the rows when the embedding space changes
        CREATE TABLE memory_vectors(
            {user},
            memory_id bigint NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (user_id, memory_id),
            FOREIGN KEY (user_id, memory_id) REFERENCES memories(user_id, id) ON DELETE CASCADE
        );
        -- passages of a memory longer than the model's window (text[start:end]), each with its vector
        CREATE TABLE memory_windows(
            {user},
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            memory_id bigint NOT NULL,
            start integer NOT NULL,
            "end" integer NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (user_id, id),
            FOREIGN KEY (user_id, memory_id) REFERENCES memories(user_id, id) ON DELETE CASCADE
        );
        CREATE INDEX memory_windows_owner ON memory_windows(user_id, memory_id);
        CREATE TABLE chunk_vectors(
            {user},
            chunk_id bigint NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (user_id, chunk_id),
            FOREIGN KEY (user_id, chunk_id) REFERENCES chunks(user_id, id) ON DELETE CASCADE
        );
    """
    script += _tally_trigger("memories", MEMORY_TALLY_KEY)
    script += _tally_trigger("chunks", CHUNK_TALLY_KEY)
    script += _tally_trigger("documents", DOCUMENT_TALLY_KEY)
    script += _tally_trigger("nodes", "'nodes'")
    script += _tally_trigger("edges", "'edges'")
    script += "".join(_secure(t) for t in USER_TABLES)
    script += f"""
        -- the server finds a token's user without any right on users or tokens
        CREATE FUNCTION token_user(token_hash bytea) RETURNS bigint
            LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
            SELECT t.user_id FROM {SCHEMA}.tokens t JOIN {SCHEMA}.users u ON u.id = t.user_id
            WHERE t.hash = token_hash AND u.removed_at IS NULL
        $$;
        REVOKE ALL ON FUNCTION token_user(bytea) FROM PUBLIC;
        GRANT EXECUTE ON FUNCTION token_user(bytea) TO {APP};
        GRANT USAGE ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {APP};
    """
    con.execute(script)


def m002_extraction_queue(con: Connection) -> None:
    """The triple-extraction queue (graph.unread: what is not read yet, oldest first) gets partial indexes that
    hold only what waits, so reading it costs what waits, not every row of the user."""
    con.execute("""
        CREATE INDEX memories_unread ON memories(user_id, id) WHERE NOT extracted AND NOT archived;
        CREATE INDEX chunks_unread ON chunks(user_id, id) WHERE NOT extracted;
    """)


# The word search's functions (m003): {table: function}
WORD_FUNCTIONS = {"memories": "memories_with_words", "chunks": "chunks_with_words"}


def m003_words_through_the_index(con: Connection) -> None:
    """The user's rows holding a query's words, found through the GIN index.

    Under row-level security PostgreSQL checks the policy's condition before any that is not LEAKPROOF, and
    `@@` is not: a search by words read every row of the user, filtered by the tsquery (the GIN index unused).
    Each function below runs as the role `personal_llm_words` (SECURITY DEFINER), whose own policy lets it
    see every row, so its statement may use the GIN index; the statement itself keeps to the transaction's
    user (`user_id = current_setting('app.user_id')`, the policy's own condition: no user set, an error), and
    returns row ids only, which the caller's statement reads under its own policy as before. The role may
    read three columns (id, user_id, tsv) of two tables and nothing else and cannot log in; its only member
    is the role that runs `server init` (a policy applies to a role's members too), never the app role, so
    only these functions act as it for the server."""
    con.execute(f"""
        GRANT USAGE, CREATE ON SCHEMA {SCHEMA} TO {WORDS};
        GRANT SELECT (id, user_id, tsv) ON memories, chunks TO {WORDS};
        CREATE POLICY memories_words ON memories FOR SELECT TO {WORDS} USING (true);
        CREATE POLICY chunks_words ON chunks FOR SELECT TO {WORDS} USING (true);
    """)
    con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(WORDS)))
    for table, function in WORD_FUNCTIONS.items():
        con.execute(f"""
            CREATE FUNCTION {SCHEMA}.{function}(q tsquery) RETURNS SETOF bigint
                LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
                SELECT t.id FROM {SCHEMA}.{table} t WHERE t.user_id = {USER} AND t.tsv @@ q
            $$;
            REVOKE ALL ON FUNCTION {SCHEMA}.{function}(tsquery) FROM PUBLIC;
            GRANT EXECUTE ON FUNCTION {SCHEMA}.{function}(tsquery) TO {APP};
        """)
    con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER)))
    con.execute(f"REVOKE CREATE ON SCHEMA {SCHEMA} FROM {WORDS}")


def m004_half_precision_hnsw(con: Connection) -> None:
    """The HNSW indexes on the vectors cast to `halfvec` (`hnsw_index`): half the memory (1.1 instead of 2.0 KB
    a vector of 384), built ~1.5x faster (pgvector computes halfvec distances with F16C and FMA where its
    single-precision ones are not vectorised), and the search's exact rescoring keeps recall@10 (bench/scale.py).
    A column that has no dimension yet gets its index from ensure_space."""
    for table in VECTOR_TABLES:
        con.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(f"{table}_hnsw")))
        dimension = _dimension(con, table)
        if dimension is not None:
            con.execute(hnsw_index(table, dimension))


MIGRATIONS: list[Callable[[Connection], None]] = [
    m001_initial,
    m002_extraction_queue,
    m003_words_through_the_index,
    m004_half_precision_hnsw,
]
SCHEMA_VERSION = len(MIGRATIONS)


def vector_schema(con: Connection) -> str | None:
    """The schema pgvector is installed in (None: not installed in this database)."""
    row = con.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                      "WHERE e.extname = 'vector'").fetchone()
    return None if row is None else str(row[0])


def search_path(con: Connection) -> sql.Composed:
    """`SET LOCAL search_path` to the schema and pgvector's."""
    names = [SCHEMA, *(s for s in [vector_schema(con)] if s and s != SCHEMA)]
    return sql.SQL("SET LOCAL search_path = {}").format(sql.SQL(", ").join(map(sql.Identifier, names)))


def bootstrap(con: Connection) -> None:
    """What the migrations stand on, made by the role that runs `init` (idempotent, one transaction):
    pgvector, the roles (the runner becomes a member of each, to act as them), the schema and
    `schema_version`."""
    con.execute("CREATE EXTENSION IF NOT EXISTS vector")
    for role in ROLES:
        if con.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            con.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE").format(
                sql.Identifier(role)))
        con.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(role)))
    con.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {} AUTHORIZATION {}").format(
        sql.Identifier(SCHEMA), sql.Identifier(OWNER)))
    con.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(SCHEMA), sql.Identifier(APP)))
    con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER)))
    con.execute(search_path(con))
    con.execute("CREATE TABLE IF NOT EXISTS schema_version(version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at double precision NOT NULL)")
    con.execute("RESET ROLE")


def current_version(con: Connection) -> int:
    row = con.execute(sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_version").format(
        sql.Identifier(SCHEMA))).fetchone()
    return int(row[0]) if row else 0


def applied(con: Connection) -> int | None:
    """The schema version of this database (None: never initialised)."""
    row = con.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.schema_version",)).fetchone()
    if row is None or row[0] is None:
        return None
    return current_version(con)


class SchemaTooNew(Exception):
    """The database was brought to a schema version this code does not know."""

    def __init__(self, found: int) -> None:
        super().__init__(found)
        self.found = found


def migrate(con: Connection) -> int:
    """Bring the database up to SCHEMA_VERSION (`con` in autocommit; its role may create the extension, the
    roles and the schema the first time). Each migration runs as the owner role in a transaction of its
    own, recorded with it; concurrent runs wait for each other. Returns the migrations applied."""
    with con.transaction():
        con.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        bootstrap(con)
        found = current_version(con)
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(found)
    done = 0
    for version in range(found + 1, SCHEMA_VERSION + 1):
        step = MIGRATIONS[version - 1]
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if current_version(con) >= version:  # another run got there first
                continue
            con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER)))
            con.execute(search_path(con))
            step(con)
            con.execute("INSERT INTO schema_version(version, name, applied_at) VALUES (%s, %s, extract(epoch FROM now()))",
                        (version, step.__name__))
        done += 1
    return done


Space = tuple[str, str, int, str]  # provider, model, dimension, version (as engine/storage/space.py)


def hnsw_index(table: str, dimension: int) -> sql.Composed:
    """The HNSW (cosine) index of a vector table: on its vectors cast to half precision, the expression a search
    orders by (vectors.VectorIndex)."""
    return sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ((embedding::halfvec({})) halfvec_cosine_ops)").format(
        sql.Identifier(f"{table}_hnsw"), sql.Identifier(table), sql.Literal(int(dimension)))


def _dimension(con: Connection, table: str) -> int | None:
    """The dimension of a vector table's column (None: not given one yet)."""
    row = con.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'embedding'",
                      (f"{SCHEMA}.{table}",)).fetchone()
    return None if row is None or row[0] is None or int(row[0]) <= 0 else int(row[0])


def ensure_space(con: Connection, space: Space) -> bool:
    """Make the vector columns of the server's embedding space, with an HNSW (cosine) index each (`hnsw_index`). Another
    space than the recorded one starts over: every vector goes (TRUNCATE, all users), every memory and
    chunk waits for a new one, the columns take the new dimension. True when the space changed."""
    dimension = int(space[2])
    with con.transaction():
        con.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER)))
        con.execute(search_path(con))
        row = con.execute("SELECT provider, model, dimension, version FROM embedding_space").fetchone()
        changed = row is None or tuple(row) != tuple(space)
        if row is not None and changed:
            con.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(map(sql.Identifier, VECTOR_TABLES))))
            for (user_id,) in con.execute("SELECT id FROM users").fetchall():
                con.execute("SELECT set_config('app.user_id', %s, true)", (str(user_id),))
                con.execute("UPDATE memories SET embedded_hash = NULL WHERE embedded_hash IS NOT NULL")
                con.execute("UPDATE chunks SET embedded_hash = NULL WHERE embedded_hash IS NOT NULL")
        for table in VECTOR_TABLES:
            if _dimension(con, table) != dimension:
                con.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(f"{table}_hnsw")))
                con.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector({})").format(
                    sql.Identifier(table), sql.Literal(dimension)))
            con.execute(hnsw_index(table, dimension))
        con.execute(
            "INSERT INTO embedding_space(id, provider, model, dimension, version, updated_at) "
            "VALUES (1, %s, %s, %s, %s, extract(epoch FROM now())) ON CONFLICT (id) DO UPDATE SET "
            "provider = excluded.provider, model = excluded.model, dimension = excluded.dimension, "
            "version = excluded.version, updated_at = excluded.updated_at", space)
    return changed
