"""Exports of other tools, built by the tests in the formats those tools document."""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

T0 = datetime(2023, 5, 14, 9, 30, tzinfo=UTC).timestamp()


def _chatgpt_node(nid: str, parent: str | None, children: list[str], role: str | None, text: str | None,
                  at: float | None, **extra: Any) -> dict[str, Any]:
    message = None
    if role is not None:
        content: dict[str, Any] = {"content_type": "text", "parts": [text or ""]}
        if "parts" in extra:
            content = {"content_type": "multimodal_text", "parts": extra.pop("parts")}
        message = {"id": nid, "author": {"role": role, "name": None, "metadata": {}}, "create_time": at,
                   "update_time": None, "content": content, "status": "finished_successfully",
                   "metadata": extra.pop("metadata", {}), "recipient": "all"}
    return {"id": nid, "message": message, "parent": parent, "children": children}


def chatgpt_conversations() -> list[dict[str, Any]]:
    """Three conversations: one with an edited question (two branches; the second is current), one with
    a picture and an attachment in non-ASCII, and one that is empty."""
    branchy = {
        "title": "Sourdough starter",
        "create_time": T0,
        "update_time": T0 + 400,
        "id": "c0ffee00-0000-0000-0000-000000000001",
        "conversation_id": "c0ffee00-0000-0000-0000-000000000001",
        "current_node": "a2",
        "mapping": {
            "root": _chatgpt_node("root", None, ["sys"], None, None, None),
            "sys": _chatgpt_node("sys", "root", ["u1"], "system", "You are ChatGPT.", None,
                                 metadata={"is_visually_hidden_from_conversation": True}),
            "u1": _chatgpt_node("u1", "sys", ["a1"], "user", "How often should I feed my sourdough starter?", T0 + 10),
            "a1": _chatgpt_node("a1", "u1", ["u2a", "u2b"], "assistant",
                                "Feed it every twelve hours at room temperature.", T0 + 20),
            # the first version of the follow-up (abandoned by an edit) and its answer
            "u2a": _chatgpt_node("u2a", "a1", ["a2a"], "user", "Can I use rye flour for the zebra loaf?", T0 + 100),
            "a2a": _chatgpt_node("a2a", "u2a", [], "assistant", "Rye works for the zebra loaf.", T0 + 110),
            # the edited follow-up: the current branch
            "u2b": _chatgpt_node("u2b", "a1", ["tool", "a2"], "user", "Can I keep the starter in the fridge?",
                                 T0 + 300),
            "tool": _chatgpt_node("tool", "u2b", [], "tool", "search results", T0 + 301),
            "a2": _chatgpt_node("a2", "u2b", [], "assistant",
                                "Yes: a refrigerated starter needs feeding only once a week.", T0 + 310),
        },
    }
    later = T0 + 86400 * 30
    pictures = {
        "title": "Café in Zürich",
        "create_time": later,
        "update_time": later + 60,
        "id": "c0ffee00-0000-0000-0000-000000000002",
        "current_node": "a1",
        "mapping": {
            "root": _chatgpt_node("root", None, ["u1"], None, None, None),
            "u1": _chatgpt_node("u1", "root", ["a1"], "user", None, later + 5,
                                parts=[{"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"},
                                       "Wie heißt dieses Café am Üetliberg? 東京にもありますか"],
                                metadata={"attachments": [{"id": "file-1", "name": "speisekarte.pdf"}]}),
            "a1": _chatgpt_node("a1", "u1", [], "assistant", "Das ist das Café Gmüetlich am Üetliberg.", later + 9),
        },
    }
    empty = {"title": "New chat", "create_time": later + 500, "update_time": later + 500,
             "id": "c0ffee00-0000-0000-0000-000000000003", "current_node": "root",
             "mapping": {"root": _chatgpt_node("root", None, [], None, None, None)}}
    return [branchy, pictures, empty]


def write_chatgpt_zip(path: Path, conversations: list[dict[str, Any]] | None = None) -> Path:
    data = chatgpt_conversations() if conversations is None else conversations
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("conversations.json", json.dumps(data, ensure_ascii=False))
        z.writestr("chat.html", "<html><body>the export's own viewer</body></html>")
        z.writestr("user.json", json.dumps({"id": "user-1"}))
    return path


def claude_conversations() -> list[dict[str, Any]]:
    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")

    t = T0 + 86400 * 60
    return [
        {
            "uuid": "5e1f0000-0000-0000-0000-00000000000a",
            "name": "Kayak rental in Norway",
            "created_at": iso(t),
            "updated_at": iso(t + 120),
            "account": {"uuid": "acc"},
            "chat_messages": [
                {"uuid": "m1", "sender": "human", "created_at": iso(t + 1), "text": "",
                 "content": [{"type": "text", "text": "Where can I rent a sea kayak near Ålesund?"}],
                 "attachments": [{"file_name": "route.txt", "file_type": "txt", "file_size": 40,
                                  "extracted_content": "Day one: Brosundet to Giske island."}],
                 "files": []},
                {"uuid": "m2", "sender": "assistant", "created_at": iso(t + 30),
                 "text": "Try the harbour outfitter in Brosundet; they rent sea kayaks by the day.",
                 "content": [], "attachments": [], "files": [{"file_name": "map.png"}]},
            ],
        },
        {"uuid": "5e1f0000-0000-0000-0000-00000000000b", "name": "", "created_at": iso(t + 500),
         "updated_at": iso(t + 500), "chat_messages": []},
    ]


def write_claude_json(path: Path, conversations: list[dict[str, Any]] | None = None) -> Path:
    data = claude_conversations() if conversations is None else conversations
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def make_vault(root: Path) -> Path:
    """An Obsidian vault: three notes linking each other, front matter with tags, an attachment (a text
    file the engine reads, embedded with ![[...]]), the app's settings folder, and a file type it skips."""
    (root / ".obsidian").mkdir(parents=True)
    (root / ".obsidian" / "app.json").write_text("{}", encoding="utf-8")
    (root / "Projects").mkdir()
    (root / "attachments").mkdir()
    (root / "Garden.md").write_text(
        "---\ntitle: Garden plans\ntags: [garden, spring]\nstatus: draft\n---\n"
        "# Garden plans\n\nPlant the quince tree by the wall; see [[Projects/Greenhouse|the greenhouse]] and "
        "[[Compost#Ratio]]. Seed list in ![[seeds.txt]].\n\nA #todo for April.\n", encoding="utf-8")
    (root / "Projects" / "Greenhouse.md").write_text(
        "# Greenhouse\n\nThe greenhouse heater is set to seven degrees. Back to [[garden]].\n"
        "Not a link: `[[Nowhere]]`.\n", encoding="utf-8")
    (root / "Compost.md").write_text("## Ratio\n\nThree parts brown to one part green, for the heap.\n",
                                     encoding="utf-8")
    (root / "attachments" / "seeds.txt").write_text("Seeds: borage, calendula, nasturtium.\n", encoding="utf-8")
    (root / "board.canvas").write_text("{}", encoding="utf-8")
    return root
