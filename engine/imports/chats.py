"""Conversation history exports read into plain records: ChatGPT's and Claude's ``conversations.json``.

Pure functions: no store. A file that is not the export it claims to be raises :class:`ExportError`
before anything is stored, naming what is wrong (never quoting the text of a message).

**ChatGPT** (Settings → Data controls → Export): a zip holding ``conversations.json``, a list of
conversations. Each has ``title``, ``create_time`` (epoch seconds), an ``id`` (``conversation_id`` in
older exports) and a ``mapping``: a tree of nodes ``{id: {message, parent, children}}``. Editing a
message or regenerating an answer makes a branch; the conversation as the user last saw it is the path
from the root to ``current_node``, which is what is read (without ``current_node``: the newest leaf).
Messages of the system and of tools, hidden ones, and ones without text are left out; attachments are
mentioned by name, pictures as "[image]".

**Claude** (Settings → Privacy → Export data): a zip (or the file itself) holding ``conversations.json``,
a list of conversations with ``uuid``, ``name``, ``created_at`` (ISO 8601) and ``chat_messages`` in
order, each with ``uuid``, ``sender`` (``human`` or ``assistant``), ``created_at``, ``text`` (or a
``content`` list of typed blocks) and ``attachments`` (with their ``extracted_content``) / ``files``.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..memory_rules import MAX_TIME, MIN_TIME

MAX_EXPORT_BYTES = 1024 * 1024 * 1024
"""conversations.json may be at most this big (1 GiB; a heavy user's ten-year export is a few hundred MB)."""
MAX_ATTACHMENT_CHARS = 20_000
"""Text of one attached file kept with its message (Claude exports carry what it extracted)."""


class ExportError(UserError):
    """The file is not a readable export of the kind named; nothing was stored."""


@dataclass(frozen=True)
class ChatMessage:
    id: str
    role: str  # user | assistant
    text: str
    at: float


@dataclass(frozen=True)
class ChatConversation:
    id: str
    title: str
    created_at: float
    updated_at: float
    messages: list[ChatMessage] = field(default_factory=list)


def load_export(path: Path, kind: str, data: bytes | None = None) -> Any:
    """The parsed ``conversations.json``: the file itself, or the member of that name in a zip. With `data`,
    the file's bytes as a client uploaded them (`path` then only names it)."""
    name = path.name
    source: Path | io.BytesIO = path if data is None else io.BytesIO(data)
    try:
        if zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as z:
                members = [i for i in z.infolist() if Path(i.filename).name == "conversations.json"]
                if not members:
                    raise ExportError(f"{name} is not a {kind} export: it holds no conversations.json")
                info = min(members, key=lambda i: i.filename.count("/"))
                if info.flag_bits & 0x1:
                    raise ExportError(f"{name} is encrypted: unpack it and import its conversations.json")
                _check_size(name, info.file_size)
                with z.open(info) as f:
                    raw = f.read(MAX_EXPORT_BYTES + 1)
                _check_size(name, len(raw))
        elif data is not None:
            _check_size(name, len(data))
            raw = data
        else:
            _check_size(name, path.stat().st_size)
            raw = path.read_bytes()
    except FileNotFoundError:
        raise ExportError(f"{name} doesn't exist (was it moved or deleted?)") from None
    except IsADirectoryError:
        raise ExportError(f"{name} is a folder: give the export's zip or its conversations.json") from None
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise ExportError(f"{name} can't be read: {getattr(e, 'strerror', None) or type(e).__name__}") from None
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ExportError(f"{name} is not a {kind} export: it is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"{name} is not a {kind} export: it is not valid JSON (line {e.lineno}, column "
                          f"{e.colno})") from None
    except RecursionError:
        raise ExportError(f"{name} is nested too deeply to read") from None


def _check_size(name: str, size: int) -> None:
    if size > MAX_EXPORT_BYTES:
        raise ExportError(f"{name}: its conversations.json is bigger than {MAX_EXPORT_BYTES // 2**20:,} MiB; not read")


def _list(data: Any, name: str, kind: str) -> list[Any]:
    if isinstance(data, dict) and isinstance(data.get("conversations"), list):
        data = data["conversations"]
    if not isinstance(data, list):
        raise ExportError(f"{name} is not a {kind} export: conversations.json should hold a list of conversations")
    return data


def _epoch(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return None
    ts: float | None = None
    if isinstance(value, int | float):
        ts = float(value)
        if ts > 1e11:  # milliseconds (a year past 5138 in seconds): some exporters write them
            ts /= 1000.0
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):
            return None
    if ts is None or not MIN_TIME <= ts <= MAX_TIME:  # no date can show it: the message keeps no time
        return None
    return ts


def _title(value: Any) -> str:
    return " ".join(str(value or "").split())[:200] or "Untitled conversation"


# --- ChatGPT ------------------------------------------------------------------------------------------


def parse_chatgpt(data: Any, name: str) -> list[ChatConversation]:
    kind = "ChatGPT"
    out = []
    for n, conv in enumerate(_list(data, name, kind), start=1):
        if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
            raise ExportError(f"{name} is not a ChatGPT export: conversation {n} has no message tree ('mapping')")
        cid = str(conv.get("id") or conv.get("conversation_id") or "")
        if not cid:
            raise ExportError(f"{name} is not a ChatGPT export: conversation {n} has no id")
        created = _epoch(conv.get("create_time"))
        mapping: dict[str, Any] = conv["mapping"]
        messages: list[ChatMessage] = []
        for node in _current_branch(mapping, conv.get("current_node"), name, n):
            msg = node.get("message") if isinstance(node, dict) else None
            if not isinstance(msg, dict):
                continue
            role = str((msg.get("author") or {}).get("role") or "")
            raw_meta = msg.get("metadata")
            meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
            if role not in ("user", "assistant") or meta.get("is_visually_hidden_from_conversation"):
                continue
            text = _chatgpt_text(msg.get("content"), meta)
            if not text:
                continue
            at = _epoch(msg.get("create_time")) or created or 0.0
            messages.append(ChatMessage(str(msg.get("id") or node.get("id") or len(messages)), role, text, at))
        created = created or (messages[0].at if messages else 0.0)
        updated = _epoch(conv.get("update_time")) or (messages[-1].at if messages else created)
        out.append(ChatConversation(cid, _title(conv.get("title")), created, updated, messages))
    return out


def _current_branch(mapping: dict[str, Any], current: Any, name: str, n: int) -> list[Any]:
    """Nodes from the root to the current node (the branch the user last saw), oldest first."""
    if current is None or current not in mapping:
        leaves = [k for k, v in mapping.items() if isinstance(v, dict) and not v.get("children")]
        if not leaves:
            return []

        def when(key: str) -> float:
            msg = mapping[key].get("message")
            return (_epoch(msg.get("create_time")) if isinstance(msg, dict) else None) or 0.0

        current = max(leaves, key=when)
    path, seen = [], set()
    key: Any = current
    while key is not None:
        if key in seen or key not in mapping:
            if key in seen:
                raise ExportError(f"{name} is not a valid ChatGPT export: the messages of conversation {n} form a loop")
            break
        seen.add(key)
        node = mapping[key]
        path.append(node)
        key = node.get("parent") if isinstance(node, dict) else None
    return path[::-1]


def _chatgpt_text(content: Any, meta: dict[str, Any]) -> str:
    if not isinstance(content, dict):
        return ""
    parts: list[str] = []
    kind = content.get("content_type")
    if kind in ("text", "multimodal_text"):
        for part in content.get("parts") or []:
            if isinstance(part, str):
                if part.strip():
                    parts.append(part.strip())
            elif isinstance(part, dict) and "image" in str(part.get("content_type", "")):
                parts.append("[image]")
    elif kind == "code" and isinstance(content.get("text"), str):
        parts.append(content["text"].strip())
    for attachment in meta.get("attachments") or []:
        if isinstance(attachment, dict) and attachment.get("name"):
            parts.append(f"[attached: {attachment['name']}]")
    text = "\n\n".join(p for p in parts if p)
    return "" if text == "[image]" else text  # a picture alone says nothing that can be recalled


# --- Claude -------------------------------------------------------------------------------------------


def parse_claude(data: Any, name: str) -> list[ChatConversation]:
    kind = "Claude"
    out = []
    for n, conv in enumerate(_list(data, name, kind), start=1):
        if not isinstance(conv, dict) or not isinstance(conv.get("chat_messages"), list):
            raise ExportError(f"{name} is not a Claude export: conversation {n} has no messages ('chat_messages')")
        cid = str(conv.get("uuid") or "")
        if not cid:
            raise ExportError(f"{name} is not a Claude export: conversation {n} has no id ('uuid')")
        created = _epoch(conv.get("created_at"))
        messages: list[ChatMessage] = []
        for m, msg in enumerate(conv["chat_messages"], start=1):
            if not isinstance(msg, dict):
                raise ExportError(f"{name} is not a Claude export: message {m} of conversation {n} is not an object")
            sender = msg.get("sender")
            role = {"human": "user", "user": "user", "assistant": "assistant"}.get(str(sender))
            if role is None:
                continue
            text = _claude_text(msg)
            if not text:
                continue
            at = _epoch(msg.get("created_at")) or created or 0.0
            messages.append(ChatMessage(str(msg.get("uuid") or m), role, text, at))
        created = created or (messages[0].at if messages else 0.0)
        updated = _epoch(conv.get("updated_at")) or (messages[-1].at if messages else created)
        out.append(ChatConversation(cid, _title(conv.get("name")), created, updated, messages))
    return out


def _claude_text(msg: dict[str, Any]) -> str:
    raw = msg.get("text")
    text: str = raw if isinstance(raw, str) else ""
    if not text.strip() and isinstance(msg.get("content"), list):
        text = "\n\n".join(b["text"] for b in msg["content"]
                           if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    parts = [text.strip()] if text.strip() else []
    for attachment in msg.get("attachments") or []:
        if not isinstance(attachment, dict):
            continue
        label = f"[attached: {attachment.get('file_name') or 'a file'}]"
        body = attachment.get("extracted_content")
        parts.append(f"{label}\n{body.strip()[:MAX_ATTACHMENT_CHARS]}" if isinstance(body, str) and body.strip()
                     else label)
    for file in msg.get("files") or []:
        if isinstance(file, dict) and file.get("file_name"):
            parts.append(f"[attached: {file['file_name']}]")
    return "\n\n".join(parts)
