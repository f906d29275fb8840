"""A profile that lives on a server (docs/server.md, "Using it from several devices"): the client of a
Personal LLM server's HTTP API, with the methods of the engine facade that the CLI (and the desktop's bridge)
use, so that a command works the same on a local profile and on a server profile.

- **The profile.** `connection.json` in the profile's folder names the server (its URL, and for a self-signed
  certificate the SHA-256 fingerprint it was pinned by, with the certificate itself in `server-cert.pem`)
  and the id of the profile's keychain entries. The token is only in the keychain (service
  `personal-llm`, account `server-token-ID`): never in a file of the profile, never in a log. Without a
  keychain, as a local store does, a passphrase protects it: connection.json then holds a random key
  wrapped by the passphrase (scrypt, AES-256-GCM: engine/recovery.py) and, sealed with that key, the token
  and the outbox's key; the passphrase is asked for when the profile is used (PERSONAL_LLM_PASSPHRASE, a
  terminal's prompt, or the app's).
- **TLS is verified**: against the system's authorities, or, for a pinned profile, against the pinned
  certificate alone (and its fingerprint checked when connecting). Plain HTTP only on loopback.
- **Writes go through the outbox** (engine/store/sqlite/outbox.py): an encrypted file of the profile whose
  key is another keychain entry (`outbox-ID`, 32 random bytes, as a desktop store's). A remember, an edit,
  a forget or a file is first kept there with an id made here, then sent, oldest first, by every command
  that reaches the server. The server treats a repeat of a client's id as the same write (engine/memories.py
  CLIENT_WRITE_KEY; an upload is keyed by its content; an edit sets the same fields again; a forget of what
  is gone is done), so a write whose answer was lost is sent again and lands once. Sending holds a lock file,
  so two commands at once send each write once, in order.
- What needs the server (recall, ask, stats, listings) says plainly that it cannot be reached.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import logging
import os
import re
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import EngineError, KeyMissing, NotFound, UserError, WrongKey
from .memory_rules import EPISODIC_DISCOUNT, IMPORTANCE_BY_SOURCE, new_uid, parse_time
from .paths import CONNECTION_FILE, write_atomic

log = logging.getLogger(__name__)

SERVER_FILE = CONNECTION_FILE
CERT_FILE = "server-cert.pem"
OUTBOX_FILE = "outbox.db"
OUTBOX_LOCK = "outbox.lock"
PROFILES_DIR = "profiles"
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 120.0  # an answer from a language model, an upload being parsed
IMPORT_TIMEOUT = 3600.0  # an import: checked, written and embedded before the server answers
SEND_TIMEOUT = 60.0
TIDY_TIMEOUT = 3600.0  # a tidy-up: the server's language model judges pairs of facts before it answers
AGENT_TIMEOUT = 900.0  # the longest wait for an agent's next step (a model thinking, a question unanswered)
BUSY_RETRIES = 3
# Which program of this device a request comes from (engine/audit.py DOORS): the server records it in the
# user's activity log as that device would ("You", "The command line"…), never as a right.
DOOR_HEADER = "X-Personal-LLM-Door"


class ServerUnreachable(UserError):
    """The server could not be reached (no network, the server down, a timeout)."""


class TokenRefused(UserError):
    """The server refused the profile's token (revoked, or its user removed)."""


class CertificateRefused(UserError):
    """The server's certificate is not trusted (not signed by a known authority, or not the pinned one)."""

    def __init__(self, message: str, fingerprint: str | None = None):
        super().__init__(message)
        self.fingerprint = fingerprint


# ---------------------------------------------------------------------------------------------------------
# profiles
# ---------------------------------------------------------------------------------------------------------
def profile_home(base: Path, name: str) -> Path:
    """The folder of the profile called `name`, under the default profile's folder `base`."""
    if not PROFILE_NAME.fullmatch(name):
        raise UserError(f"{name[:70]!r} cannot name a profile: use letters, digits, '.', '_' and '-' (up to 64).")
    return base / PROFILES_DIR / name


@dataclass(frozen=True)
class ServerProfile:
    """What `connection.json` says: the server's address, the pinned certificate's fingerprint (None: verified
    against the system's authorities) and the id of the profile's keychain entries."""

    home: Path
    url: str
    id: str
    fingerprint: str | None = None
    protected: dict[str, Any] | None = None  # no keychain: {"wrap": the key wrapped by the passphrase, "sealed": …}

    @property
    def token_account(self) -> str:
        return f"server-token-{self.id}"

    @property
    def outbox_account(self) -> str:
        return f"outbox-{self.id}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "id": self.id, "fingerprint": self.fingerprint}
        if self.protected is not None:
            out["protected"] = self.protected
        return out


def read_server_profile(home: Path) -> ServerProfile | None:
    """The server profile whose folder is `home`; None for a local profile."""
    path = home / SERVER_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        protected = raw.get("protected")
        if protected is not None and not (isinstance(protected, dict) and {"wrap", "sealed"} <= protected.keys()):
            raise ValueError("protected")
        return ServerProfile(home=home, url=str(raw["url"]), id=str(raw["id"]), fingerprint=raw.get("fingerprint"),
                             protected=protected)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path} is damaged: connect this profile again (`personal-llm connect`).") from e


def _keychain(action: str, account: str, value: str | None = None) -> str | None:
    from . import keys

    if action == "get":  # an entry that should be there (see keys._keyring_get_settled)
        return keys._keyring_get_settled(account)
    if action == "peek":
        return keys._keyring_get(account)
    if action == "set":
        assert value is not None
        keys._keyring_set(account, value)
        return None
    import keyring

    with contextlib.suppress(Exception):  # not there already: nothing to delete
        keyring.delete_password(keys.SERVICE, account)
    return None


def token_of(profile: ServerProfile) -> str:
    if profile.protected is not None:
        return _unsealed(profile)["token"]
    token = _keychain("get", profile.token_account)
    if not token:
        raise TokenRefused(f"The keychain holds no token for the server profile at {profile.home}: connect it "
                           f"again (`personal-llm connect {profile.url} --token TOKEN`).")
    return token


# profiles protected by a passphrase, unlocked by this process: (their key, the secrets it sealed); never written
_unlocked: dict[Path, tuple[bytes, dict[str, str]]] = {}


def unlock_profile(profile: ServerProfile, passphrase: str | None = None, *, interactive: bool = False) -> None:
    """A server profile protected by a passphrase (no keychain): its token and outbox key unsealed for this
    process. The passphrase as given, else PERSONAL_LLM_PASSPHRASE, else typed in a terminal (`interactive`);
    KeyMissing without one, WrongKey when it is not this profile's. Nothing for a profile in the keychain."""
    if profile.protected is None or profile.home in _unlocked:
        return
    from . import keys, recovery

    phrase = passphrase or keys._passphrase(confirm=False, interactive=interactive)
    dk = recovery.unwrap(phrase, profile.protected["wrap"], profile.id)
    found = recovery.unseal(dk, profile.protected["sealed"], profile.id) if dk is not None else None
    if dk is None or not found or "token" not in found:
        raise WrongKey(f"That passphrase does not unlock the server profile at {profile.home}. Nothing was changed.")
    _unlocked[profile.home] = (dk, found)


def _unsealed(profile: ServerProfile) -> dict[str, str]:
    if profile.home not in _unlocked:
        unlock_profile(profile)  # PERSONAL_LLM_PASSPHRASE, or KeyMissing
    return _unlocked[profile.home][1]


# ---------------------------------------------------------------------------------------------------------
# TLS
# ---------------------------------------------------------------------------------------------------------
def fingerprint_of(der: bytes) -> str:
    """A certificate's SHA-256 fingerprint as `openssl x509 -fingerprint -sha256` shows it (AB:CD:…)."""
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def normal_fingerprint(text: str) -> str:
    """A fingerprint as typed (with or without colons, any case, a `sha256` prefix) in the form shown."""
    raw = re.sub(r"[^0-9A-Fa-f]", "", text.split("=", 1)[-1])
    if len(raw) != 64:
        raise UserError("A certificate's SHA-256 fingerprint has 64 hexadecimal digits (AB:CD:… as `personal-llm "
                        "connect` shows it).")
    raw = raw.upper()
    return ":".join(raw[i:i + 2] for i in range(0, 64, 2))


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def server_certificate(url: str) -> bytes:
    """The certificate the server at `url` presents (DER), read without trusting it."""
    host, port = _host_port(url)
    try:
        pem = ssl.get_server_certificate((host, port), timeout=CONNECT_TIMEOUT)
    except (OSError, ssl.SSLError) as e:
        raise ServerUnreachable(f"The server at {url} cannot be reached ({type(e).__name__}).") from e
    return ssl.PEM_cert_to_DER_cert(pem)


def pinned_context(der: bytes) -> ssl.SSLContext:
    """TLS that trusts this one certificate and nothing else (a self-signed home server's): its name is not
    checked, the certificate itself is the proof."""
    ctx = ssl.create_default_context(cadata=ssl.DER_cert_to_PEM_cert(der))
    ctx.check_hostname = False
    ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    return ctx


def is_loopback(host: str) -> bool:
    """A name or address of this computer itself (here, not in engine/server.py: checking a URL should not
    import the server, a third of a `push`'s time)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> str:
    """The server's base URL, checked: https, or http on loopback only."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{url[:100]!r} is not a server's address: give https://HOST[:PORT].")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise UserError("A server elsewhere than this computer is reached over TLS only: give its https:// "
                        "address (tokens and memories never cross a network unencrypted).")
    return url


# ---------------------------------------------------------------------------------------------------------
# the HTTP client
# ---------------------------------------------------------------------------------------------------------
class ServerClient:
    """Requests to one server with one token: errors as the engine's (ServerUnreachable, TokenRefused,
    NotFound, UserError with the server's own message)."""

    def __init__(self, url: str, token: str, *, verify: ssl.SSLContext | bool = True, fingerprint: str | None = None,
                 door: str | None = None):
        import httpx

        self.url = url
        self.fingerprint = fingerprint
        headers = {"Authorization": f"Bearer {token}"} | ({DOOR_HEADER: door} if door else {})
        self._http = httpx.Client(base_url=url, verify=verify, headers=headers,
                                  timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT), trust_env=False)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, timeout: float | None = None, **kw: Any) -> tuple[int, Any]:
        """(status, decoded JSON answer) for 2xx and 404; raises for every other answer."""
        with self._reaching():
            if timeout:
                kw["timeout"] = timeout
            r = self._http.request(method, path, **kw)
            for _ in range(BUSY_RETRIES):  # busy for a moment (it says when to come back)
                if r.status_code != 503 or "retry-after" not in r.headers:
                    break
                time.sleep(min(float(r.headers["retry-after"] or 1), 5.0))
                r = self._http.request(method, path, **kw)
        self._check_pin(r)
        return self._answer(r)

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """A transport failure inside as the engine's error: ServerUnreachable (CertificateRefused)."""
        import httpx

        try:
            yield
        except httpx.ConnectError as e:
            raise self._unreachable(e) from e
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as e:
            raise ServerUnreachable(f"The server at {self.url} did not answer ({_reason(e)}).") from e

    @contextlib.contextmanager
    def _streamed(self, method: str, path: str, **kw: Any) -> Iterator[Any]:
        """A 2xx answer whose body is read as it arrives; errors as `request`'s, any other answer NotFound.
        Transport failures while the body is read are mapped too."""
        with self._reaching(), self._http.stream(method, path, **kw) as r:
            self._check_pin(r)
            if not 200 <= r.status_code < 300:
                r.read()
                status, body = self._answer(r)
                raise NotFound(_said(body.get("detail") if isinstance(body, dict) else None) or "Not found.")
            yield r

    def _unreachable(self, e: Exception) -> EngineError:
        if "CERTIFICATE_VERIFY_FAILED" in str(e):
            return CertificateRefused(f"The certificate of {self.url} is not the one this profile trusts: not "
                                      "connected. If the server has a new certificate, connect again.")
        return ServerUnreachable(f"The server at {self.url} cannot be reached ({_reason(e)}).")

    def download(self, path: str, write: Callable[[bytes], Any]) -> None:
        """GET `path`, its body given to `write` piece by piece as it arrives (an export: never all in memory).
        Errors as `request`'s; a 404 is NotFound."""
        with self._streamed("GET", path) as r:
            for piece in r.iter_bytes():
                write(piece)

    def lines(self, method: str, path: str, *, timeout: float | None = None, **kw: Any) -> Generator[Any, None, None]:
        """A streamed answer of JSON lines (NDJSON), each decoded as it arrives. Errors as `request`'s; a 404
        is NotFound."""
        import httpx

        with self._streamed(method, path, timeout=httpx.Timeout(timeout or READ_TIMEOUT, connect=CONNECT_TIMEOUT),
                            **kw) as r:
            for line in r.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def _answer(self, r: Any) -> tuple[int, Any]:
        try:
            body = r.json() if r.content else None
        except ValueError:
            body = None
        if 200 <= r.status_code < 300 or r.status_code == 404:
            return r.status_code, body
        detail = body.get("detail") if isinstance(body, dict) else None
        if r.status_code == 401:
            raise TokenRefused(f"The server at {self.url} refused this profile's token: it was revoked, or its user "
                               "removed. Connect again with a new token (`personal-llm connect URL --token TOKEN`).")
        if r.status_code in (400, 403, 409, 413, 422):
            raise UserError(_said(detail) or f"The server refused the request (HTTP {r.status_code}).")
        raise ServerUnreachable(f"The server at {self.url} failed (HTTP {r.status_code}); try again later.")

    def _check_pin(self, response: Any) -> None:
        """A pinned profile: the certificate of the connection is the pinned one (checked on the stream)."""
        if self.fingerprint is None:
            return
        stream = response.extensions.get("network_stream")
        ssl_object = stream.get_extra_info("ssl_object") if stream is not None else None
        der = ssl_object.getpeercert(True) if ssl_object is not None else None
        if der is not None and fingerprint_of(der) != self.fingerprint:
            raise CertificateRefused(f"The certificate of {self.url} is not the pinned one: not connected.")


def _reason(e: Exception) -> str:
    text = str(e).lower()
    for words, reason in (("refused", "connection refused"), ("timed out", "timed out"),
                          ("name or service", "unknown host"), ("nodename", "unknown host"),
                          ("reset", "connection reset")):
        if words in text:
            return reason
    return type(e).__name__


def _said(detail: Any) -> str | None:
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):  # a 422's list of problems
        first = detail[0]
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return f"The server refused the request: {where}: {first.get('msg', 'invalid')}."
    return None


@dataclass(frozen=True)
class Checked:
    url: str
    fingerprint: str | None  # the pinned certificate's (None: verified by the system's authorities)
    certificate: bytes | None
    memories: int


def check_server(url: str, token: str, *, fingerprint: str | None = None) -> Checked:
    """What `connect` checks before it keeps anything: the server answers, over TLS it trusts (a verified
    certificate, or the one pinned by `fingerprint`), and takes the token."""
    url = check_url(url)
    der: bytes | None = None
    verify: ssl.SSLContext | bool = True
    pin = normal_fingerprint(fingerprint) if fingerprint else None
    if url.startswith("https://") and pin is not None:
        der = server_certificate(url)
        if fingerprint_of(der) != pin:
            raise CertificateRefused(f"The certificate of {url} has the fingerprint {fingerprint_of(der)}, not the "
                                     f"{pin} given: not connected.", fingerprint_of(der))
        verify = pinned_context(der)
    client = ServerClient(url, token, verify=verify, fingerprint=pin)
    try:
        try:
            _, stats = client.request("GET", "/stats")
        except CertificateRefused:
            if pin is not None:
                raise
            shown = fingerprint_of(server_certificate(url))
            raise CertificateRefused(
                f"The certificate of {url} is not signed by an authority this computer trusts. Its SHA-256 "
                f"fingerprint is {shown}. If that is your server's (on the server: `openssl x509 -in CERT.pem "
                "-noout -fingerprint -sha256`), connect with --fingerprint and that value.", shown) from None
    finally:
        client.close()
    if not isinstance(stats, dict) or "memories" not in stats:
        raise UserError(f"{url} answered, but not as a Personal LLM server does.")
    return Checked(url=url, fingerprint=pin, certificate=der, memories=int(stats.get("memories", 0)))


def connect_profile(home: Path, checked: Checked, token: str, *, passphrase: str | None = None) -> ServerProfile:
    """Make `home` a server profile for what `check_server` found: the token into the keychain, the
    certificate (when pinned) and connection.json into the folder. Refused where the folder holds a local store
    (push it instead). Without a keychain, `passphrase` protects the token and the outbox's key (sealed in
    connection.json, see the module doc); connecting again keeps the outbox and its key (the passphrase
    the profile had unlocks them)."""
    from .keys import keychain_usable
    from .paths import STORE_FILE

    if (home / STORE_FILE).exists():
        raise UserError(f"The profile at {home} keeps its memory on this computer. Connect another profile "
                        "(--profile NAME), or move this one's memory to the server with `personal-llm push`.")
    old = read_server_profile(home)
    profile = ServerProfile(home=home, url=checked.url, id=old.id if old else secrets.token_hex(8),
                            fingerprint=checked.fingerprint)
    if keychain_usable() and not (old is not None and old.protected is not None):
        _keychain("set", profile.token_account, token)
    else:
        profile = _protected(profile, old, token, passphrase)
    close_outbox(home)  # opened again with this connection's key
    cert = home / CERT_FILE
    if checked.certificate is not None:
        write_atomic(cert, ssl.DER_cert_to_PEM_cert(checked.certificate))
    else:
        cert.unlink(missing_ok=True)
    write_atomic(home / SERVER_FILE, json.dumps(profile.as_dict(), indent=2))
    return profile


def _protected(profile: ServerProfile, old: ServerProfile | None, token: str,
               passphrase: str | None) -> ServerProfile:
    """`profile` with its token sealed under a key wrapped by the passphrase (no keychain). Connected again
    (a new token), the key and the outbox's key stay: unlocked by this process already, or by `passphrase`."""
    from . import recovery
    from .keys import keychain_usable, passphrase_problem

    home = profile.home
    if old is not None and old.protected is not None:
        if home not in _unlocked:
            if not passphrase:
                raise KeyMissing("Give the passphrase of this server profile to connect it again (PERSONAL_LLM_"
                                 "PASSPHRASE, or typed).")
            unlock_profile(old, passphrase)  # WrongKey: not the passphrase this profile had
        dk, found = _unlocked[home]
        wrap, outbox_key = old.protected["wrap"], found["outbox"]
    else:
        if not passphrase:
            raise KeyMissing("No keychain is available on this computer to keep the server's token (it is never "
                             "written to a file as it is): give a passphrase (PERSONAL_LLM_PASSPHRASE, or typed) "
                             "to protect it. It is asked for when the profile is used.")
        if problem := passphrase_problem(passphrase):
            raise UserError(problem + " Nothing was changed.")
        outbox_key = secrets.token_bytes(32).hex()
        if old is not None and (home / OUTBOX_FILE).exists():
            kept = _keychain("peek", old.outbox_account) if keychain_usable() else None
            if kept is None and _outbox_waiting(old):
                raise UserError("This profile's outbox is encrypted with a key kept in a keychain this computer "
                                "no longer offers: connect again where that keychain is (or `disconnect --discard` "
                                "first, dropping what waits in it).")
            outbox_key = kept or outbox_key
        dk = recovery.new_data_key()
        kdf = recovery.new_kdf("passphrase")
        wrap = recovery.wrap(recovery.derive(passphrase, kdf), dk, profile.id, kdf)
    sealed = {"token": token, "outbox": outbox_key}
    _unlocked[home] = (dk, sealed)
    return ServerProfile(home=home, url=profile.url, id=profile.id, fingerprint=profile.fingerprint,
                         protected={"wrap": wrap, "sealed": recovery.seal(dk, sealed, profile.id)})


def _outbox_waiting(profile: ServerProfile) -> bool:
    try:
        return (profile.home / OUTBOX_FILE).stat().st_size > 0
    except OSError:
        return False


def disconnect_profile(profile: ServerProfile, *, drop_outbox: bool = False) -> int:
    """Forget the server of this profile: its token leaves the keychain and connection.json the folder. The
    outbox's writes are not lost silently: with some waiting, refused unless `drop_outbox`. Returns the
    writes dropped."""
    waiting = 0
    if (profile.home / OUTBOX_FILE).exists():
        with Outbox(profile) as box:
            waiting = sum(box.count())
    if waiting and not drop_outbox:
        raise UserError(f"{waiting} write{'s' if waiting != 1 else ''} of this profile still wait to be sent "
                        "(`personal-llm outbox`): send them first (any command that reaches the server does), or "
                        "disconnect with --discard to drop them.")
    close_outbox(profile.home)
    _unlocked.pop(profile.home, None)
    for name in (SERVER_FILE, CERT_FILE, OUTBOX_FILE, OUTBOX_FILE + "-wal", OUTBOX_FILE + "-shm", OUTBOX_LOCK):
        (profile.home / name).unlink(missing_ok=True)
    if profile.protected is None:
        _keychain("delete", profile.token_account)
        _keychain("delete", profile.outbox_account)
    return waiting


def client_for(profile: ServerProfile, door: str | None = None) -> ServerClient:
    """The client of the profile's server, its requests saying they come from `door` (DOOR_HEADER)."""
    verify: ssl.SSLContext | bool = True
    if profile.fingerprint:
        try:
            der = ssl.PEM_cert_to_DER_cert((profile.home / CERT_FILE).read_text(encoding="ascii"))
        except (OSError, ValueError) as e:
            raise UserError(f"The pinned certificate of this profile ({profile.home / CERT_FILE}) is missing: "
                            "connect again with --fingerprint.") from e
        verify = pinned_context(der)
    return ServerClient(profile.url, token_of(profile), verify=verify, fingerprint=profile.fingerprint, door=door)


# ---------------------------------------------------------------------------------------------------------
# the outbox
# ---------------------------------------------------------------------------------------------------------
class _OpenOutbox:
    """A profile's outbox file as this process has it open: one connection, used by one thread at a time."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.file: Any = None  # OutboxFile, open
        self.inode: tuple[int, int] | None = None  # (device, inode) of the file it opened


_open_outboxes: dict[Path, _OpenOutbox] = {}
_open_outboxes_lock = threading.Lock()


class Outbox:
    """The profile's encrypted outbox file, opened with its key from the keychain (made on first use).

    It is opened once per process and profile and kept open: `with Outbox(profile) as box` lends the open
    file to this thread alone for the block (a lock), so a capture does not read the keychain and open the
    file again for each step (keep, send, read the answer, count). A file replaced meanwhile by another
    program (`disconnect`, then `connect` again) is opened again."""

    def __init__(self, profile: ServerProfile):
        self.profile = profile
        self.path = profile.home / OUTBOX_FILE
        with _open_outboxes_lock:
            self._open = _open_outboxes.setdefault(self.path, _OpenOutbox())

    def _inode(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino) if st.st_size > 0 else None

    def _connect(self) -> Any:
        from .keys import pragma_for
        from .store.sqlite.outbox import OutboxFile

        opened = self._open
        if opened.file is not None:
            if opened.inode is not None and self._inode() == opened.inode:
                return opened.file
            opened.file.close()  # removed or replaced by another program: the file there now is the outbox
            opened.file = opened.inode = None
        made = self._inode() is not None
        if self.profile.protected is not None:
            key: str | None = _unsealed(self.profile)["outbox"]
        else:
            key = _keychain("get" if made else "peek", self.profile.outbox_account)
        if key is None:
            if made:
                raise UserError(f"The key of this profile's outbox ({self.path}) is not in the keychain, so the "
                                "writes waiting in it cannot be read.")
            key = secrets.token_bytes(32).hex()
            _keychain("set", self.profile.outbox_account, key)
        opened.file = OutboxFile(self.path, pragma_for(bytes.fromhex(key)))
        opened.inode = self._inode()
        return opened.file

    def __enter__(self) -> Any:
        self._open.lock.acquire()
        try:
            return self._connect()
        except BaseException:
            self._open.lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self._open.lock.release()


def close_outbox(home: Path) -> None:
    """Close this process's connection to the outbox of the profile at `home` (before its files go)."""
    with _open_outboxes_lock:
        opened = _open_outboxes.pop(home / OUTBOX_FILE, None)
    if opened is not None:
        with opened.lock:
            if opened.file is not None:
                opened.file.close()
                opened.file = None


@contextlib.contextmanager
def sending_lock(home: Path) -> Iterator[None]:
    """One sender at a time for a profile (across processes): writes leave in order, each once."""
    fd = os.open(home / OUTBOX_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@dataclass
class Sent:
    delivered: int = 0
    gone: int = 0  # an edit or a forget of something the server no longer has
    refused: int = 0
    waiting: int = 0  # still waiting: the server cannot be reached


def _iso(at: Any) -> str | None:
    ts = parse_time(at)
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _request_of(item: Any) -> tuple[str, str, dict[str, Any]]:
    """The request that delivers a write of the outbox, saying which program made it (its door)."""
    p = item.payload
    kw: dict[str, Any] = {"headers": {DOOR_HEADER: item.door}} if item.door else {}
    if item.op == "remember":
        made = datetime.fromtimestamp(item.made_at, UTC).isoformat()
        return "POST", "/memory/remember", {**kw, "json": {**p, "id": item.uid, "created_at": made}}
    if item.op == "update":
        return "PATCH", f"/memory/{item.target}", {**kw, "json": p}
    if item.op == "forget":
        return "DELETE", f"/memory/{item.target}", kw
    if item.op == "upload":
        form = {"project": p["project"]} if p.get("project") else {}
        return "POST", "/ingest/upload", {**kw, "files": {"file": (p["filename"], item.data)}, "data": form}
    raise AssertionError(item.op)


def send_waiting(profile: ServerProfile, client: ServerClient,
                 progress: Callable[[int, int], None] | None = None) -> Sent:
    """Send what waits in the outbox, oldest first, until it is empty or the server cannot be reached (then
    the rest waits). A refused token stops it too (TokenRefused, the outbox kept)."""
    sent = Sent()
    if not (profile.home / OUTBOX_FILE).exists():
        return sent
    box = Outbox(profile)  # held for each step only: the app reads its count while a write is on its way
    with sending_lock(profile.home):
        with box as f:
            total = f.count()[0]
        after = 0
        while True:
            with box as f:
                item = f.next(after)
                if item is None:
                    break
                f.tried(item.seq)
            method, path, kw = _request_of(item)
            try:
                status, answer = client.request(method, path, timeout=SEND_TIMEOUT, **kw)
            except (ServerUnreachable, TokenRefused, CertificateRefused):
                with box as f:
                    sent.waiting = f.count()[0]
                if sent.waiting:
                    log.info("the outbox keeps %d writes: the server cannot take them now", sent.waiting)
                raise
            except UserError as e:  # the server refuses this write for good: kept, and no longer in the way
                with box as f:
                    f.refuse(item.seq, str(e))
                sent.refused += 1
                after = item.seq
                continue
            now_id = answer.get("id") if item.op == "remember" and isinstance(answer, dict) else None
            with box as f:
                f.answered(item, status, answer, now_id)
            if status == 404:
                sent.gone += 1
            else:
                sent.delivered += 1
            if progress:
                progress(sent.delivered + sent.gone, total)
        with box as f:
            sent.waiting = f.count()[0]
    log.info("outbox: %d delivered, %d already gone, %d refused", sent.delivered, sent.gone, sent.refused)
    return sent


def listing(profile: ServerProfile) -> list[dict[str, Any]]:
    """What waits in the outbox, for `personal-llm outbox` (the text of each write included: this is the
    user's own terminal)."""
    if not (profile.home / OUTBOX_FILE).exists():
        return []
    with Outbox(profile) as box:
        out = []
        for w in box.waiting(with_data=False):
            out.append({"id": w.uid, "op": w.op, "target": w.target, "made_at": datetime.fromtimestamp(
                w.made_at, UTC).isoformat(timespec="seconds"), "attempts": w.attempts, "refused": w.refused,
                **{k: v for k, v in w.payload.items() if k in ("text", "kind", "project", "filename")}})
        return out


# ---------------------------------------------------------------------------------------------------------
# the engine's methods, on a server
# ---------------------------------------------------------------------------------------------------------
class RemoteEngine:
    """The engine facade's methods that the CLI uses, answered by the profile's server. Writes go through the
    outbox (see the module doc): when the server cannot be reached they wait, and `waiting` holds their ids;
    reads say plainly that the server is needed."""

    profile = None  # no desktop profile: paths on this device are uploaded, never named to the server

    def __init__(self, server: ServerProfile, *, door: str = "cli", passphrase: str | None = None,
                 interactive: bool = False):
        unlock_profile(server, passphrase, interactive=interactive)  # a profile protected by a passphrase
        self.door = door  # the program this is (engine/audit.py DOORS): the server's log names it
        self.server = server
        self.home = server.home
        self.notices: list[str] = []
        self.recovery_key: str | None = None
        self.waiting: set[str] = set()
        self.client = client_for(server, door)
        self._sent = False

    # ---- plumbing ----------------------------------------------------------------------------------------
    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemoteEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_outbox(self, progress: Callable[[int, int], None] | None = None) -> Sent:
        return send_waiting(self.server, self.client, progress)

    def _flush_first(self) -> None:
        """Any request that reaches the server sends the outbox first (once per engine)."""
        if not self._sent:
            self._sent = True
            self.send_outbox()

    def _read(self, what: str, method: str, path: str, **kw: Any) -> Any:
        try:
            self._flush_first()
            status, body = self.client.request(method, path, **kw)
        except ServerUnreachable as e:
            raise ServerUnreachable(f"{what} needs the server, and {str(e)[0].lower()}{str(e)[1:]}"
                                    + self._waiting_note()) from e
        if status == 404:
            raise NotFound(_said(body.get("detail") if isinstance(body, dict) else None) or "Not found.")
        return body

    def _waiting_note(self) -> str:
        with contextlib.suppress(EngineError, OSError):
            if (self.home / OUTBOX_FILE).exists():
                with Outbox(self.server) as box:
                    n = box.count()[0]
                if n:
                    return f" {n} write{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} in the outbox."
        return ""

    def _write(self, op: str, uid: str, target: str | None, payload: dict[str, Any],
               data: bytes | None = None) -> tuple[int, Any] | None:
        """Keep the write in the outbox, then send the outbox: the server's (status, answer) to it, or None
        when it waits."""
        with Outbox(self.server) as box:
            box.add(op, uid, target, payload, data, door=self.door)
        try:
            self._sent = True
            self.send_outbox()
        except ServerUnreachable as e:
            self.waiting.add(uid)
            self.notices.append(f"{e} Kept in the outbox, to be sent when the server is back.{self._waiting_note()}")
            return None
        except TokenRefused as e:
            self.waiting.add(uid)
            raise TokenRefused(f"{e} The write is kept in the outbox.") from e
        with Outbox(self.server) as box:
            answer = box.answer(uid)
            if answer is None:  # refused by the server (kept in the outbox, marked)
                refused = [w.refused for w in box.waiting(with_data=False) if w.uid == uid]
                raise UserError(refused[0] if refused and refused[0] else "The server refused this write.")
        return answer

    # ---- memories ----------------------------------------------------------------------------------------
    def remember(self, text: str, *, kind: str = "fact", project: str | None = None,
                 importance: float | None = None, at: Any = None, **_: Any) -> Any:
        from .memory_rules import check_kind, check_project, check_text
        from .models import Memory, RememberResult

        payload: dict[str, Any] = {"text": check_text(text), "kind": check_kind(kind),
                                   "project": check_project(project), "importance": importance, "at": _iso(at)}
        if importance is not None and not 0.0 <= importance <= 1.0:
            raise UserError("Importance must be between 0 and 1.")
        uid = new_uid("mem")
        answer = self._write("remember", uid, None, payload)
        if answer is not None:
            return RememberResult.model_validate(answer[1])
        now = datetime.now(UTC).isoformat(timespec="seconds")
        memory = Memory(id=uid, kind=payload["kind"], text=payload["text"], project=payload["project"],
                        importance=importance if importance is not None else (
                            IMPORTANCE_BY_SOURCE["user"] - (EPISODIC_DISCOUNT if kind == "episodic" else 0.0)),
                        created_at=now, updated_at=now,
                        at=payload["at"])
        return RememberResult(id=uid, merged=False, memory=memory)

    def update(self, uid: str, *, text: str | None = None, kind: str | None = None, project: Any = ...,
               importance: float | None = None, at: Any = ..., archived: bool | None = None, **_: Any) -> Any:
        """The memory as the server has it after the edit, or None when the edit waits in the outbox."""
        from .models import Memory

        changes: dict[str, Any] = {k: v for k, v in (("text", text), ("kind", kind), ("importance", importance),
                                                     ("archived", archived)) if v is not None}
        if project is not ...:
            changes["project"] = project or None
        if at is not ...:
            changes["at"] = _iso(at)
        answer = self._write("update", new_uid("upd"), uid, changes)
        if answer is None:
            return None
        if answer[0] == 404:
            raise NotFound(f"No memory with id {uid}.")
        return Memory.model_validate(answer[1])

    def forget(self, uid: str) -> Any:
        """What the server removed, or None when the forget waits in the outbox."""
        from .models import ForgetResult

        answer = self._write("forget", new_uid("fgt"), uid, {})
        if answer is None:
            return None
        if answer[0] == 404:
            raise NotFound(f"There is no memory or document with id {uid}.")
        return ForgetResult.model_validate(answer[1])

    def get(self, uid: str) -> Any:
        from .models import Memory

        return Memory.model_validate(self._read("Showing a memory", "GET", f"/memory/{uid}"))

    def memory_page(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
                    activity: bool | None = False, limit: int = 50, after: str | None = None, **_: Any) -> Any:
        from .models import MemoryPage

        params = {k: v for k, v in (("kind", kind), ("project", project), ("archived", bool(archived)),
                                    ("activity", bool(activity)), ("limit", limit), ("after", after))
                  if v is not None}
        return MemoryPage.model_validate(self._read("Listing memories", "GET", "/memories", params=params))

    def list_memories(self, *, limit: int = 100, **kw: Any) -> list[Any]:
        return list(self.memory_page(limit=limit, **kw).memories)

    def recall(self, query: str, *, k: int = 10, project: str | None = None, kind: str | None = None,
               since: Any = None, until: Any = None, include_archived: bool = False, include_unscoped: bool = False,
               **_: Any) -> list[Any]:
        from .hits import Hit

        params = {k_: v for k_, v in (("q", query), ("k", k), ("project", project), ("kind", kind),
                                      ("since", _iso(since)), ("until", _iso(until)),
                                      ("archived", include_archived or None), ("unscoped", include_unscoped or None))
                  if v is not None}
        return [Hit.of(h) for h in self._read("Recall", "GET", "/memory/recall", params=params)]  # as the engine's

    def ask(self, question: str, *, project: str | None = None, verify: bool = False,
            conversation_id: str | None = None, on_token: Callable[[str], None] | None = None, **_: Any) -> Any:
        from .ask import AskResult

        body: dict[str, Any] = {"question": question, "project": project, "verify": verify}
        if conversation_id:
            body["conversation_id"] = conversation_id
        result = AskResult.model_validate(self._read("Ask", "POST", "/ask", json=body))
        if on_token is not None and result.answer:
            on_token(result.answer)  # the server answers whole: shown as one piece
        return result

    def stats(self) -> Any:
        from .models import Stats

        stats = Stats.model_validate(self._read("Stats", "GET", "/stats"))
        waiting = self._waiting_note()
        if waiting:
            stats.notes.append(waiting.strip())
        return stats

    # ---- documents ---------------------------------------------------------------------------------------
    def ingest(self, paths: Sequence[str | Path], *, project: str | None = None, **_: Any) -> list[Any]:
        """Each file's bytes uploaded (a folder: the files in it); a file that waits in the outbox is
        reported `waiting`."""
        from .ingest import IngestResult

        files: list[Path] = []
        for p in (Path(x).expanduser() for x in paths):
            if p.is_dir():
                files += sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
            elif p.is_file():
                files.append(p)
            else:
                raise UserError(f"There is no file or folder at {p}.")
        out = []
        for f in files:
            answer = self._write("upload", new_uid("upl"), None, {"filename": f.name, "project": project},
                                 f.read_bytes())
            if answer is None:
                out.append(IngestResult(path=str(f), status="waiting"))
            else:
                out += [IngestResult.model_validate({**r, "path": str(f)}) for r in answer[1]]
        return out

    def resume_pending_documents(self, **_: Any) -> list[Any]:
        return []  # the server finishes its own

    def list_documents(self, project: str | None = None, *, failed: bool = False) -> list[Any]:
        from .ingest import Document

        params = {k: v for k, v in (("project", project), ("failed", failed or None)) if v is not None}
        return [Document.model_validate(d) for d in self._read("Listing documents", "GET", "/documents",
                                                                params=params)]

    def get_document(self, uid: str) -> Any:
        from .ingest import Document

        return Document.model_validate(self._read("Showing a document", "GET", f"/documents/{uid}"))

    def document_passages(self, uid: str, limit: int = 2000) -> list[Any]:
        from .ingest import Passage

        return [Passage.model_validate(p) for p in self._read("A document's passages", "GET",
                                                               f"/documents/{uid}/passages", params={"limit": limit})]

    def get_passage(self, uid: str) -> Any:
        from .ingest import Passage

        return Passage.model_validate(self._read("A passage", "GET", f"/passage/{uid}"))

    # ---- the activity log and conflicts ------------------------------------------------------------------
    def audit_runs(self, *, limit: int = 200) -> list[Any]:
        """The account's log of changes, in runs (ids and counts, never text), newest first."""
        from .models import AuditRun

        return [AuditRun.model_validate(r) for r in self._read("The activity log", "GET", "/activity",
                                                                params={"limit": limit})]

    def conflicts(self) -> list[Any]:
        from .consolidation import ConflictPair

        return [ConflictPair.model_validate(p) for p in self._read("Conflicts", "GET", "/conflicts")]

    def consolidate(self, **_: Any) -> Any:
        """Tidy up the account now, on the server (`POST /consolidate`) with its language model: facts that
        contradict each other are flagged there (`conflicts` lists them), as a local profile's tidy-up does."""
        from .consolidation import ConsolidationReport

        return ConsolidationReport.model_validate(self._read("Tidying up", "POST", "/consolidate",
                                                             timeout=TIDY_TIMEOUT))

    def resolve(self, uid: str, keep: str) -> Any:
        """Keep one of two facts that disagree (the other is archived) or both: on the server, now (it is not
        kept in the outbox: which facts disagree is the server's to say)."""
        from .consolidation import Resolution

        return Resolution.model_validate(self._read("Resolving a conflict", "POST", f"/conflicts/{uid}/resolve",
                                                    json={"keep": keep}))

    # ---- agents: they run on the server, their questions are answered here ----------------------------------
    def list_agents(self) -> list[Any]:
        from .agent import AgentInfo

        return [AgentInfo.model_validate(a) for a in self._read("Agents", "GET", "/agents")]

    def agent_info(self, name: str | None = None) -> Any:
        """One of the server's agents (its default, Research, without a name)."""
        wanted = (name or "Research").strip().casefold()
        agents = self.list_agents()
        for info in agents:
            if info.name.casefold() == wanted:
                return info
        raise NotFound(f"There is no agent called '{name}' on the server. The agents are: "
                       f"{', '.join(a.name for a in agents)}.")

    def agent_run(self, task: str, *, agent: str | None = None, project: str | None = None,
                  on_step: Callable[[Any], None] | None = None, confirm: Callable[[Any], bool] | None = None,
                  cancel: threading.Event | None = None, **_: Any) -> Any:
        """An agent's run on the server (`POST /agent/run`): each step handed to `on_step` as it arrives, a
        question about a tool answered by `confirm` here and sent back (without `confirm`: not allowed), and
        `cancel` sent as a stop (Cancelled once the server has stopped it). Its tools read the account, never
        a file of the server's disk."""
        from .agent import AgentRun

        run_id: list[str] = []
        ended = threading.Event()

        def stop_when_cancelled() -> None:
            assert cancel is not None
            while not ended.wait(0.1):
                if cancel.is_set() and run_id:
                    with contextlib.suppress(EngineError):
                        self.client.request("POST", f"/agent/run/{run_id[0]}/stop", timeout=SEND_TIMEOUT)
                    return

        self._flush_first()
        if cancel is not None:
            threading.Thread(target=stop_when_cancelled, name="agent-stop", daemon=True).start()
        try:
            events = self.client.lines("POST", "/agent/run", json={"task": task, "agent": agent, "project": project},
                                       timeout=AGENT_TIMEOUT)
            with contextlib.closing(events):
                for event in events:
                    self._agent_event(event, run_id, on_step, confirm)
                    if event["event"] == "done":
                        return AgentRun.model_validate(event["result"])
        except ServerUnreachable as e:
            raise ServerUnreachable(f"An agent runs on the server, and {str(e)[0].lower()}{str(e)[1:]}") from e
        finally:
            ended.set()
        raise ServerUnreachable("The server ended the agent's run before its answer; try again.")

    def _agent_event(self, event: dict[str, Any], run_id: list[str], on_step: Callable[[Any], None] | None,
                     confirm: Callable[[Any], bool] | None) -> None:
        """One line of an agent's run as the server streams it (docs/api.md, Agents)."""
        from .agent import AgentStep, ConfirmRequest
        from .errors import Cancelled

        kind = event.get("event")
        fields = {k: v for k, v in event.items() if k != "event"}
        if kind == "start":
            run_id.append(str(event["run_id"]))
        elif kind == "step" and on_step is not None:
            on_step(AgentStep.model_validate(fields))
        elif kind == "confirm":
            request = ConfirmRequest.model_validate(fields)
            approve = bool(confirm(request)) if confirm is not None else False
            self.client.request("POST", f"/agent/run/{request.run_id}/confirm", timeout=SEND_TIMEOUT,
                                json={"call_id": request.call_id, "approve": approve})
        elif kind == "stopped":
            raise Cancelled()
        elif kind == "error":
            raise UserError(str(event.get("detail") or "The agent failed on the server."))

    # ---- the graph ---------------------------------------------------------------------------------------
    def neighbours(self, entity: str, hops: int = 1) -> Any:
        from .graph import GraphView

        return GraphView.model_validate(self._read("The graph", "GET", "/graph/neighbours",
                                                   params={"entity": entity, "hops": hops}))

    # ---- export and import ---------------------------------------------------------------------------------
    def export(self, path: str | Path, *, encrypt_passphrase: str | None = None, **_: Any) -> Any:
        """The account's export (`GET /export`) written to `path` on this device as `Engine.export` writes
        one: atomically, private, encrypted here when there is a passphrase (it never leaves the device)."""
        from .transfer import ExportResult, write_export_file

        def produce(write: Callable[[bytes], Any]) -> dict[str, int]:
            received = _Received(write)
            try:
                self._flush_first()
                self.client.download("/export", received.feed)
            except ServerUnreachable as e:
                raise ServerUnreachable(f"Export needs the server, and {str(e)[0].lower()}{str(e)[1:]}"
                                        + self._waiting_note()) from e
            return received.counts()

        written, size, counts = write_export_file(path, self.home, produce, encrypt_passphrase)
        return ExportResult(path=str(written), encrypted=encrypt_passphrase is not None, bytes=size, counts=counts)

    def import_(self, path: str | Path, *, passphrase: str | None = None, **_: Any) -> Any:
        """Merge an export (or JSON Lines of memories) into the account (`POST /import`): the file is read and
        decrypted on this device, sent over the profile's connection, checked whole by the server and written
        in one transaction there (or not at all)."""
        from .transfer import ImportResult, read_export_file

        source = Path(path).expanduser().absolute()
        text, encrypted = read_export_file(source, passphrase)
        body = self._read("Import", "POST", "/import", timeout=IMPORT_TIMEOUT,
                          files={"file": (source.name, text.encode("utf-8"), "application/x-ndjson")})
        return ImportResult.model_validate({**body, "path": str(source), "encrypted": encrypted})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UserError(f"This profile keeps its memory on a server ({self.server.url}); this command works on a "
                        "local profile only, or through the server's own tools.")


class _Received:
    """An export arriving from the server: passed on as it comes, its records counted against its header's
    counts, so an export cut short is refused (and its partial file removed), never kept as if whole."""

    def __init__(self, write: Callable[[bytes], Any]) -> None:
        self._write = write
        self._head = b""
        self._header: dict[str, Any] | None = None
        self._lines = 0
        self._last = b"\n"

    def feed(self, piece: bytes) -> None:
        if self._header is None:
            self._head += piece
            end = self._head.find(b"\n")
            if end < 0:
                if len(self._head) > 1 << 20:
                    raise UserError("The server's export does not start with its header.")
                return
            try:
                header = json.loads(self._head[:end])
            except ValueError:
                header = None
            if not isinstance(header, dict) or header.get("type") != "header":
                raise UserError("The server's export does not start with its header.")
            self._header, piece, self._head = header, self._head, b""
        if piece:
            self._lines += piece.count(b"\n")
            self._last = piece[-1:]
            self._write(piece)

    def counts(self) -> dict[str, int]:
        counts = {str(k): int(v) for k, v in ((self._header or {}).get("counts") or {}).items()}
        if self._header is None or self._last != b"\n" or self._lines != 1 + sum(counts.values()):
            raise ServerUnreachable("The export from the server was cut short; nothing was written. Try again.")
        return counts


def open_remote(home: Path, *, interactive: bool = True) -> RemoteEngine | None:
    """The engine of the server profile at `home` (its passphrase typed in a terminal when it has one and
    PERSONAL_LLM_PASSPHRASE is not set); None for a local profile."""
    server = read_server_profile(home)
    return None if server is None else RemoteEngine(server, interactive=interactive)


# ---------------------------------------------------------------------------------------------------------
# moving a store in and out
# ---------------------------------------------------------------------------------------------------------
TRANSFER_BATCH = 500  # records in one request of a push or a pull (the server takes up to its max_records)


@dataclass
class Moved:
    """What a push or a pull moved: `memories` sent (or taken), `added` of them stored anew where they went
    (a memory there already, by its id or its content, is not stored twice), `archived` of those sent that
    were archived; `added_by_type` and `skipped_by_type` for every type of record (documents, chunks,
    conversations, messages, memories, derivations, fact checks, nodes, edges), `vectors` stored as they
    came (not embedded again)."""

    memories: int = 0
    added: int = 0
    archived: int = 0
    records: int = 0
    vectors: int = 0
    added_by_type: dict[str, int] = field(default_factory=dict)
    skipped_by_type: dict[str, int] = field(default_factory=dict)
    sent: int = 0  # of `records`, those that travelled (a push leaves out what the server said it holds)
    sent_bytes: int = 0  # the requests' bodies that carried them

    def count(self, report: Any) -> None:
        for mine, theirs in ((self.added_by_type, report.added), (self.skipped_by_type, report.skipped)):
            for kind, n in theirs.items():
                mine[kind] = mine.get(kind, 0) + int(n)
        self.added = self.added_by_type.get("memory", 0)
        self.vectors += int(report.vectors)

    def as_dict(self) -> dict[str, Any]:
        return {"memories": self.memories, "added": self.added, "archived": self.archived, "records": self.records,
                "vectors": self.vectors, "added_by_type": self.added_by_type, "skipped_by_type": self.skipped_by_type,
                "sent": self.sent, "sent_bytes": self.sent_bytes}


@dataclass(frozen=True)
class TransferInfo:
    space: list[Any] | None
    max_records: int
    counts: dict[str, int]


def transfer_info(client: ServerClient) -> TransferInfo:
    """What the server's account takes and holds (GET /transfer)."""
    status, body = client.request("GET", "/transfer")
    if status == 404 or not isinstance(body, dict):
        raise UserError(f"The server at {client.url} cannot take or give a whole store (it is an older version): "
                        "update it first.")
    return TransferInfo(space=body.get("space"), max_records=int(body.get("max_records") or 1),
                        counts={k: int(v) for k, v in (body.get("counts") or {}).items()})


def _same_space(a: Sequence[Any] | None, b: Sequence[Any] | None) -> bool:
    return a is not None and b is not None and [str(x) for x in a] == [str(x) for x in b]


def _model(space: Sequence[Any] | None) -> str:
    return "no embedding model" if not space else f"{space[1]} ({space[2]} dimensions)"


def push_store(eng: Any, client: ServerClient, progress: Callable[[int, int], None] | None = None, *,
               batch: int | None = None) -> Moved:
    """Send everything the local engine `eng` holds to the server's account, in batches: memories (each with
    its own id, kind, text, project, importance, event time, the time it was stored, archived or not),
    documents with their passages, conversations with their turns, facts derived from others, the graph
    with each fact's provenance (the memory or passage it came from), and the vectors of memories and
    passages, which the server stores as they are (its embedding space must be this store's: refused
    otherwise, before anything is sent). The ids make it idempotent and resumable: a record sent before (a
    push run again, or one cut short) is mapped to what the server holds, stored nothing twice; a batch is
    one transaction there."""
    info = transfer_info(client)
    mine = eng.transfer.vector_space()
    if mine is not None and not _same_space(mine, info.space):
        raise UserError(f"The server's vectors are made by {_model(info.space)}, this store's by {_model(mine)}: "
                        "they cannot travel, and nothing was sent. Push to a server that uses the same embedding "
                        "model (its settings, then `personal-llm server init`).")
    from .transfer import MergeReport

    total = sum(eng.transfer.outgoing_counts().values())
    moved = Moved()
    batch_size = max(1, min(batch or TRANSFER_BATCH, info.max_records))

    def seen(records: list[dict[str, Any]]) -> None:
        memories = [r for r in records if r["type"] == "memory"]
        moved.memories += len(memories)
        moved.archived += sum(1 for r in memories if r.get("archived"))
        moved.records += len(records)

    def unknown(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records of a batch the server does not hold yet; those it holds are counted as there already
        and reported as progress when none is left to send."""
        going = _not_held(client, records)
        going_ids = {id(r) for r in going}
        held = [r for r in records if id(r) not in going_ids]
        for r in held:
            moved.skipped_by_type[r["type"]] = moved.skipped_by_type.get(r["type"], 0) + 1
        seen(held)
        if progress and held and not going:
            progress(moved.records, total)
        return going

    for records in eng.transfer.outgoing(max_records=batch_size, vectors=mine is not None, keep=unknown):
        body = json.dumps({"space": mine, "records": records}, ensure_ascii=False).encode("utf-8")
        status, answer = client.request("POST", "/transfer/records", content=body,
                                        headers={"Content-Type": "application/json"}, timeout=READ_TIMEOUT)
        if status != 200 or not isinstance(answer, dict):
            raise UserError(f"The server did not take the records (HTTP {status}).")
        moved.count(MergeReport.model_validate(answer))
        moved.sent += len(records)
        moved.sent_bytes += len(body)
        seen(records)
        if progress:
            progress(moved.records, total)
    return moved


def _not_held(client: ServerClient, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of these outgoing records, those the server's account does not hold (`POST /transfer/known`): a memory,
    document, passage, conversation or entity it has by its key, and a conversation's turns it has, stay
    here. Derived facts, fact checks and graph facts always go (the server skips those it has). All of them
    with a server too old to be asked."""
    from .records import KNOWN_KEYS, turn_key

    keys: dict[str, list[str]] = {}
    for r in records:
        if r["type"] in KNOWN_KEYS:
            keys.setdefault(r["type"], []).append(str(r[KNOWN_KEYS[r["type"]]]))
        elif r["type"] == "message":
            keys.setdefault("conversation", []).append(str(r["conversation"]))
    if not keys:
        return records
    status, body = client.request("POST", "/transfer/known", json={"keys": keys}, timeout=READ_TIMEOUT)
    if status == 404 or not isinstance(body, dict):
        return records
    known = {kind: set(found) for kind, found in (body.get("known") or {}).items()}
    turns = {uid: set(said) for uid, said in (body.get("turns") or {}).items()}

    def held(r: dict[str, Any]) -> bool:
        if r["type"] == "message":
            at = parse_time(r.get("created_at"))
            return at is not None and turn_key(r["role"], r["content"], at) in turns.get(r["conversation"], ())
        return r["type"] in KNOWN_KEYS and str(r[KNOWN_KEYS[r["type"]]]) in known.get(r["type"], ())

    return [r for r in records if not held(r)]


def pull_into(remote: RemoteEngine, eng: Any, progress: Callable[[int, int], None] | None = None) -> Moved:
    """Copy everything the server profile's account holds into the local engine `eng` (a local encrypted
    store), as a push sends it, a page at a time: idempotent, as a push is. The vectors come along when this
    store embeds with the server's model; otherwise they are made here."""
    remote.send_outbox()  # what this profile wrote and did not send yet comes too
    client = remote.client
    info = transfer_info(client)
    eng.space.ensure()
    take_vectors = _same_space(eng.transfer.vector_space(), info.space)
    total = sum(info.counts.values())
    moved = Moved()
    after: str | None = None
    limit = max(1, min(TRANSFER_BATCH, info.max_records))
    while True:
        params: dict[str, Any] = {"limit": limit, "vectors": take_vectors}
        if after:
            params["after"] = after
        status, page = client.request("GET", "/transfer/records", params=params, timeout=READ_TIMEOUT)
        if status != 200 or not isinstance(page, dict):
            raise UserError(f"The server did not give its records (HTTP {status}).")
        records = page.get("records") or []
        if records:
            moved.count(eng.transfer.merge(records, space=info.space if take_vectors else None, action="pull"))
            memories = [r for r in records if r.get("type") == "memory"]
            moved.memories += len(memories)
            moved.archived += sum(1 for r in memories if r.get("archived"))
            moved.records += len(records)
            if progress:
                progress(moved.records, max(total, moved.records))
        after = page.get("next")
        if not after:
            return moved
