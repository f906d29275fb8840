"""Asking the profile's running API server (`personal-llm serve`, or the app's API) instead of opening the store.

A CLI process that opens the store for a recall also loads the embedding model (and imports the engine):
most of a second. Where a server of this profile runs, it has both loaded; the CLI finds it by the server
file in the profile (engine/runtime.py), asks it on 127.0.0.1 with the profile's API token, and prints what
it answers exactly as it prints its own results. Standard library only, plus the keychain read.

`ask` answers None whenever the server cannot be asked or did not answer with a result (no server file, a
stale one, a passphrase store whose token is inside the store, a refused token, a request the server
rejects as invalid, a timeout): the command then runs in process, which also gives the same error a bad
argument gets either way. A refusal the engine itself wrote (HTTP 400: its message) is that error.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from .. import runtime
from ..errors import UserError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 1.0  # loopback: a server that does not accept within this is not worth waiting for
ANSWER_TIMEOUT = 60.0  # a recall on a big store that has not loaded its mirrors yet can take a second or two


def _token(home: Path) -> str | None:
    """The profile's API token from the keychain, or None (a passphrase store keeps it inside the store)."""
    from ..keys import keychain_token, read_profile

    try:
        profile = read_profile(home)
        return keychain_token(profile, home, create=False) if profile is not None else None
    except UserError as e:  # a damaged profile, a locked keychain: the command in process says it properly
        log.info("the API token could not be read (%s)", type(e).__name__)
        return None


def ask(home: Path, path: str, params: dict[str, Any]) -> Any | None:
    """GET `path` with `params` from the profile's running server: the decoded JSON answer, or None (see the
    module doc). Raises UserError with the engine's own message when the server refused the request (400)."""
    server = runtime.find(home)
    if server is None:
        return None
    token = _token(home)
    if token is None:
        return None
    import http.client
    import socket
    from urllib.parse import urlencode

    query = urlencode({k: v for k, v in params.items() if v is not None and v is not False}, doseq=True)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=CONNECT_TIMEOUT)
    try:
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(ANSWER_TIMEOUT)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request("GET", f"{path}?{query}", headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
        response = conn.getresponse()
        status, body = response.status, response.read()
    except (OSError, http.client.HTTPException) as e:
        log.info("the server named in the server file did not answer (%s); running in process", type(e).__name__)
        return None
    finally:
        conn.close()
    if status == 200:
        try:
            return json.loads(body)
        except ValueError:
            log.warning("the server sent an answer that is not JSON; running in process")
            return None
    if status == 400:
        try:
            detail = json.loads(body).get("detail")
        except (ValueError, AttributeError):
            detail = None
        if isinstance(detail, str) and detail:
            raise UserError(detail)
    if status == 401:
        log.warning("the server of this profile refused its API token; running in process")
    else:
        log.info("the server answered HTTP %d; running in process", status)
    return None
