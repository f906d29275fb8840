"""`personal-llm serve --database URL`: the HTTP API for the many users of a server's PostgreSQL database
(docs/server.md). The composition root of that program: it reads the server's settings, opens the database,
loads the embedding model once for every user, and answers each request as the user its token belongs to.

Each user gets an engine of their own (Engine.for_user: the same parts as a desktop profile, on the
PostgreSQL backend, every statement under row-level security for that user), made on their first request and
kept; all of them share the one embedding model, whose small encodes are batched across users
(engine/shared_embedder.py). A token is checked against the database (its SHA-256) and the answer kept for TOKEN_TTL seconds, so a
removed user's token stops working within that time. Listening anywhere but loopback needs TLS (a
certificate and its key), or `--behind-proxy` said out loud for a TLS proxy in front.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import home_dir, load_settings
from .embeddings import Embedder, NoEmbedder
from .engine import Engine
from .errors import UserError
from .remote import is_loopback
from .shared_embedder import SharedEmbedder
from .users import Database, authenticate, open_database

log = logging.getLogger(__name__)

TOKEN_TTL = 10.0  # seconds a token's user is remembered (a removed user is refused within this)
DEFAULT_PORT = 8765


def check_listening(host: str, tls_cert: str | None, tls_key: str | None, behind_proxy: bool) -> None:
    """A server elsewhere than loopback speaks TLS (or says a TLS proxy stands in front of it)."""
    if bool(tls_cert) != bool(tls_key):
        raise UserError("TLS needs both --tls-cert and --tls-key.")
    for f in (tls_cert, tls_key):
        if f and not Path(f).is_file():
            raise UserError(f"{f}: no such file (--tls-cert and --tls-key name a PEM certificate and its key).")
    if not is_loopback(host) and not tls_cert and not behind_proxy:
        raise UserError(f"Listening on {host} would send tokens and memories unencrypted: give --tls-cert and "
                        "--tls-key, or --behind-proxy when a TLS proxy in front of this server is the only way in.")


class Users:
    """The engines of a server's users, one each, made on a user's first request (see the module doc)."""

    def __init__(self, db: Database, home: Path, embedder: Embedder | NoEmbedder) -> None:
        self.db = db
        self.home = home
        self.embedder = embedder
        self._engines: dict[int, Engine] = {}
        self._tokens: dict[str, tuple[int | None, float]] = {}
        self._lock = threading.Lock()

    def engine_for(self, token: str) -> Engine | None:
        """The engine of the user this token belongs to; None for no token, a wrong one or a removed user's."""
        if not token:
            return None
        now = time.monotonic()
        hit = self._tokens.get(token)
        if hit is None or now - hit[1] > TOKEN_TTL:
            hit = (authenticate(self.db, token), now)
            with self._lock:
                if len(self._tokens) > 10_000:
                    self._tokens.clear()
                self._tokens[token] = hit
        user = hit[0]
        if user is None:
            return None
        with self._lock:
            eng = self._engines.get(user)
            if eng is None:
                eng = Engine.for_user(self.db, user, f"#{user}", home=self.home, settings=load_settings(self.home),
                                      actor="api", embedder=self.embedder)
                eng.start_background()
                self._engines[user] = eng
        return eng

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for eng in engines:
            eng.close()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def serve_database(url: str, *, host: str = "127.0.0.1", port: int | None = None, tls_cert: str | None = None,
                   tls_key: str | None = None, behind_proxy: bool = False, max_body_mb: float = 10.0,
                   announce: Callable[[str], None] | None = None) -> None:
    """Serve the HTTP API for the users of the database at `url` until interrupted."""
    import uvicorn

    from .api import UserEngine, create_app
    from .logs import setup_logging

    check_listening(host, tls_cert, tls_key, behind_proxy)
    setup_logging("server")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    home = home_dir()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings = load_settings(home)
    with open_database(url) as db:
        # one model for every user, their small encodes (queries, memories) batched together
        embedder: Embedder | NoEmbedder = (NoEmbedder() if settings.embedding_model == "none"
                                           else SharedEmbedder(settings.embedding_model))
        users = Users(db, home, embedder)
        app = create_app(UserEngine(), None, settings.api_allowed_origins, authenticate=users.engine_for,
                         max_body_bytes=int(max_body_mb * 1024 * 1024), loopback=is_loopback(host))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, DEFAULT_PORT if port is None else port))
        except OSError as e:
            sock.close()
            raise UserError(f"Cannot listen on {host} port {port}: {e.strerror}.") from e
        sock.listen(512)
        scheme = "https" if tls_cert else "http"
        shown_host = f"[{host}]" if ":" in host else host
        address = f"{scheme}://{shown_host}:{sock.getsockname()[1]}"
        log.info("serving the API for the users of %s on %s", db.where, address)
        if announce:
            announce(address)
        config = uvicorn.Config(app, access_log=False, log_level="warning", server_header=False,
                                proxy_headers=behind_proxy, timeout_graceful_shutdown=10,
                                ssl_certfile=tls_cert, ssl_keyfile=tls_key)
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            users.close()
            if isinstance(embedder, SharedEmbedder):
                embedder.close()
            sock.close()
