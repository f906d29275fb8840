"""The users of a server (PostgreSQL, many users; docs/server.md) and their API tokens.

A token is 256 random bits, shown once when made; the database keeps only its SHA-256, so a copy of the
database (a backup, a replica) gives nobody a token. A request's token is hashed and looked up
(`Database.token_user`), never compared as text.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from .embeddings import Embedder
from .errors import UserError
from .models import iso

try:  # the `server` extra: the desktop is installed without it
    from .store.postgres.database import Database, InitResult, UserRow, checked_url
    from .store.postgres.migrations import SCHEMA_VERSION
except ModuleNotFoundError as e:
    if not (e.name or "").startswith("psycopg"):
        raise
    raise UserError("A server's database needs PostgreSQL's driver, which this installation does not have: "
                    "install personal-llm[server] (pip install 'personal-llm[server]', or scripts/setup server)."
                    ) from None

# connections the server's pool opens at most: the API's reads and writes at once (api.SERVER_WORKERS each), its
# long requests and MCP calls, and the users' background work (PostgreSQL's default max_connections is 100)
CONNECTIONS = 48
TOKEN_PREFIX = "pllm_"  # says what a token is for when one turns up in a file or a paste


def make_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class User:
    name: str
    created_at: str
    tokens: int
    removed: bool

    def as_dict(self) -> dict:
        return {"user": self.name, "created_at": self.created_at, "tokens": self.tokens, "removed": self.removed}


def _user(row: UserRow) -> User:
    return User(row.name, iso(row.created_at) or "", row.tokens, row.removed_at is not None)


def init(url: str) -> tuple[str, InitResult]:
    """Create or upgrade the schema, with vector columns of the bundled model's dimension. Returns the
    database as it may be shown (no password) and what was done."""
    space = Embedder().space  # the bundled model's space: known without loading it
    with Database(url) as db:
        return db.where, db.init((space.provider, space.model, space.dimension, space.version))


def add(url: str, name: str) -> str:
    """A new user; returns their token (the only time it is seen)."""
    token = make_token()
    with Database(url) as db:
        db.add_user(name, token_hash(token))
    return token


def listing(url: str) -> list[User]:
    with Database(url) as db:
        return [_user(r) for r in db.users()]


def remove(url: str, name: str, *, forget: bool) -> dict[str, int]:
    """Remove a user (their tokens stop working); with `forget`, erase every row of theirs. Returns the rows
    erased by table."""
    with Database(url) as db:
        return db.remove_user(name, forget=forget)


def authenticate(db: Database, token: str) -> int | None:
    """The user a presented token belongs to (None: no such token, or the user was removed)."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    return db.token_user(token_hash(token))


def open_database(url: str) -> Database:
    """The database at `url` for serving its users: refused with a clear message when its schema is missing or
    not this version's (`personal-llm server init` makes or upgrades it). The caller closes it."""
    db = Database(checked_url(url), max_size=CONNECTIONS)
    try:
        version = db.schema_version()
        if version != SCHEMA_VERSION:
            raise UserError(f"The database {db.where} is not set up for this version of Personal LLM (schema "
                            f"{version}, this version needs {SCHEMA_VERSION}): run `personal-llm server init`.")
    except BaseException:
        db.close()
        raise
    return db
