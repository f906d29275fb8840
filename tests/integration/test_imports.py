"""Importing histories from other tools into a real store: ChatGPT and Claude exports built in their
documented formats (branches, empty conversations, pictures and attachments, non-ASCII), Obsidian vaults
(front matter, tags, wikilinks, attachments), re-imports that add nothing and malformed exports that
store nothing; and the same through the CLI."""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine import Engine, UserError
from tests.backends import one
from tests.imports_fixtures import (
    T0,
    chatgpt_conversations,
    make_vault,
    write_chatgpt_zip,
    write_claude_json,
)
from tests.integration.test_api import allow_folders, live  # noqa: F401 (the served app, a fixture)
from tests.integration.test_cli import ok_json, run


def counts(eng: Engine) -> dict[str, int]:
    return {t: one(eng, f"SELECT count(*) FROM {t}") for t in ("conversations", "messages", "memories", "documents",
                                                          "chunks", "edges", "nodes")}


def test_chatgpt_export_follows_the_current_branch_and_keeps_times(eng: Engine, tmp_path: Path):
    export = write_chatgpt_zip(tmp_path / "chatgpt-export.zip")
    r = eng.import_chatgpt(export)
    assert (r.conversations, r.messages, r.empty, r.skipped) == (2, 6, 1, 0)
    # the transcript: the current branch only, system and tool messages left out, original times kept
    rows = eng.con.execute(
        "SELECT c.title, c.created_at, m.role, m.content, m.created_at FROM messages m "
        "JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id").fetchall()
    sourdough = [r for r in rows if r[0] == "Sourdough starter"]
    assert [m[2] for m in sourdough] == ["user", "assistant", "user", "assistant"]
    assert "fridge" in sourdough[2][3] and not any("zebra" in m[3] for m in rows)
    assert sourdough[0][1] == T0 and sourdough[0][4] == T0 + 10
    # recall finds a message with its conversation and its time
    hit = next(h for h in eng.recall("how often to feed a sourdough starter", k=5) if h.kind == "episodic")
    assert hit.text.startswith("In “Sourdough starter”") and "feed" in hit.text.lower()
    fridge = next(h for h in eng.recall("refrigerated starter feeding once a week", k=5) if "fridge" in h.text
                  or "refrigerated" in h.text)
    assert "“Sourdough starter”" in fridge.text
    assert fridge.at is not None and datetime.fromisoformat(fridge.at).timestamp() == pytest.approx(T0 + 310, abs=1)
    assert not [h for h in eng.recall("zebra loaf rye flour", k=10) if "zebra" in h.text]  # abandoned branch
    # pictures and attachments are mentioned, non-ASCII kept
    cafe = next(h for h in eng.recall("Café am Üetliberg", k=5) if "Üetliberg" in h.text)
    assert "“Café in Zürich”" in cafe.text
    asked = eng.con.execute("SELECT content FROM messages WHERE content LIKE '%東京%'").fetchone()[0]
    assert "[image]" in asked and "[attached: speisekarte.pdf]" in asked
    audit = [e for e in eng.audit_log(limit=50) if e.action == "import_chatgpt"]
    assert audit and audit[0].detail["messages"] == 6


def test_a_second_import_adds_nothing_and_a_continued_conversation_adds_only_what_is_new(eng: Engine,
                                                                                          tmp_path: Path):
    export = write_chatgpt_zip(tmp_path / "export.zip")
    eng.import_chatgpt(export, embed=False)
    before = counts(eng)
    again = eng.import_chatgpt(export, embed=False)
    assert (again.conversations, again.messages, again.skipped) == (0, 0, 2)
    assert counts(eng) == before
    grown = chatgpt_conversations()
    mapping = grown[0]["mapping"]
    mapping["a2"]["children"] = ["u3"]
    mapping["u3"] = {"id": "u3", "parent": "a2", "children": [], "message": {
        "id": "u3", "author": {"role": "user"}, "create_time": T0 + 900,
        "content": {"content_type": "text", "parts": ["Thanks, the starter survived the holidays."]}}}
    grown[0]["current_node"] = "u3"
    later = eng.import_chatgpt(write_chatgpt_zip(tmp_path / "later.zip", grown), embed=False)
    assert (later.conversations, later.messages, later.skipped) == (1, 1, 1)
    assert counts(eng)["conversations"] == before["conversations"]
    assert counts(eng)["messages"] == before["messages"] + 1


@pytest.mark.parametrize(("content", "message"), [
    (b"not json at all", r"is not a ChatGPT export: it is not valid JSON \(line 1, column 1\)"),
    (json.dumps({"some": "object"}).encode(), r"should hold a list of conversations"),
    (json.dumps([{"title": "x", "id": "1"}]).encode(), r"conversation 1 has no message tree \('mapping'\)"),
    (b"\xff\xfe\x00garbage", r"is not a ChatGPT export"),
])
def test_a_malformed_export_is_a_clear_error_that_stores_nothing(eng: Engine, tmp_path: Path, content: bytes,
                                                                 message: str):
    good = chatgpt_conversations()[0]
    path = tmp_path / "conversations.json"
    # a good conversation first: it must not be stored either when a later one is broken
    if content.startswith(b"[{"):
        content = json.dumps([good, *json.loads(content)]).encode()
        message = message.replace("conversation 1", "conversation 2")
    path.write_bytes(content)
    before = counts(eng)
    with pytest.raises(UserError, match=message):
        eng.import_chatgpt(path)
    assert counts(eng) == before
    with zipfile.ZipFile(tmp_path / "nothing.zip", "w") as z:
        z.writestr("readme.txt", "no conversations here")
    with pytest.raises(UserError, match="holds no conversations.json"):
        eng.import_chatgpt(tmp_path / "nothing.zip")
    with pytest.raises(UserError, match="doesn't exist"):
        eng.import_claude(tmp_path / "missing.json")
    assert counts(eng) == before


def test_claude_export_with_attachments(eng: Engine, tmp_path: Path):
    path = write_claude_json(tmp_path / "conversations.json")
    r = eng.import_claude(path)
    assert (r.conversations, r.messages, r.empty) == (1, 2, 1)
    hit = next(h for h in eng.recall("rent a sea kayak near Ålesund", k=5) if "Ålesund" in h.text)
    assert hit.text.startswith("In “Kayak rental in Norway” you said:") and hit.kind == "episodic"
    assert datetime.fromisoformat(hit.at).astimezone(UTC).year == 2023
    route = [h for h in eng.recall("Brosundet to Giske island route", k=5) if "Giske" in h.text]
    assert route and "[attached: route.txt]" in route[0].text
    assert "Claude said" in next(h.text for h in eng.recall("harbour outfitter", k=5) if "outfitter" in h.text)
    assert eng.import_claude(path).messages == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"uuid": "x", "name": "n"}]), encoding="utf-8")
    with pytest.raises(UserError, match=r"not a Claude export: conversation 1 has no messages"):
        eng.import_claude(bad)


def test_obsidian_vault_notes_tags_links_and_attachments(eng: Engine, tmp_path: Path):
    vault = make_vault(tmp_path / "Vault")
    r = eng.import_obsidian(vault, project="home")
    assert r.documents == 4 and not r.failed  # three notes and the attachment; .obsidian/ and .canvas skipped
    assert r.links == 4  # Garden → Greenhouse, Compost, seeds.txt; Greenhouse → Garden (not the one in code)
    docs = {d.title: d for d in eng.list_documents()}
    assert set(docs) == {"Garden plans", "Greenhouse", "Compost.md", "seeds.txt"}
    meta = json.loads(one(eng, "SELECT CAST(meta AS text) FROM documents WHERE title = 'Garden plans'"))
    assert meta["front_matter"]["status"] == "draft" and meta["tags"] == ["garden", "spring", "todo"]
    view = eng.neighbours("Garden", hops=1)
    names = {n.name for n in view.nodes}
    assert {"Garden", "Greenhouse", "Compost", "seeds.txt"} <= names
    assert "Nowhere" not in names
    hit = eng.recall("greenhouse heater temperature", k=3)[0]
    assert hit.document_title == "Greenhouse" and hit.project == "home"
    before = counts(eng)
    again = eng.import_obsidian(vault, project="home")
    assert (again.documents, again.unchanged, again.links) == (0, 4, 0)
    assert counts(eng) == before
    # forgetting a note's document takes its links along
    eng.forget(docs["Garden plans"].id)
    assert counts(eng)["edges"] == before["edges"] - 3
    with pytest.raises(UserError, match="is not a folder"):
        eng.import_obsidian(vault / "Garden.md")


def test_cli_import_sources_and_restore(tmp_path: Path):
    export = write_chatgpt_zip(tmp_path / "export.zip")
    first = ok_json("import", "chatgpt", str(export), "--project", "kitchen")
    assert first["messages"] == 6 and first["conversations"] == 2
    p = run("import", "chatgpt", str(export))
    assert p.returncode == 0 and "Imported 0 messages in 0 conversations; 2 already present; 1 empty." in p.stdout
    bad = tmp_path / "conversations.json"
    bad.write_text("[1, 2]", encoding="utf-8")
    p = run("import", "claude", str(bad))
    assert p.returncode != 0 and "not a Claude export" in p.stderr and "Traceback" not in p.stderr
    p = run("import", "evernote", str(bad))
    assert p.returncode != 0 and "Unknown source 'evernote'" in p.stderr
    vault = make_vault(tmp_path / "Vault")
    assert ok_json("import", "obsidian", str(vault))["links"] == 4
    # `import FILE` still merges an export of this app
    ok_json("export", str(tmp_path / "all.jsonl"))
    restored = ok_json("import", str(tmp_path / "all.jsonl"))
    assert sum(restored["added"].values()) == 0 and sum(restored["skipped"].values()) > 0


@pytest.mark.sqlite_only("a server reads no paths of its own (docs/server.md)")
def test_http_import_route(live, tmp_path: Path):  # noqa: F811 (the fixture imported above)
    export = write_chatgpt_zip(tmp_path / "export.zip")
    outside = live.client.post("/import/chatgpt", json={"path": str(export)})
    assert outside.status_code == 403  # not under a folder the API may read
    allow_folders(live.eng, tmp_path)
    r = live.client.post("/import/chatgpt", json={"path": str(export), "project": "kitchen"})
    assert r.status_code == 200, r.text
    assert (r.json()["conversations"], r.json()["messages"]) == (2, 6)
    assert live.client.post("/import/chatgpt", json={"path": str(export)}).json()["skipped"] == 2
    bad = tmp_path / "conversations.json"
    bad.write_text("{", encoding="utf-8")
    r = live.client.post("/import/claude", json={"path": str(bad)})
    assert r.status_code == 400 and "not a Claude export" in r.text
    vault = make_vault(tmp_path / "Vault")
    r = live.client.post("/import/obsidian", json={"path": str(vault)})
    assert r.status_code == 200 and r.json()["links"] == 4
    assert live.client.post("/import/evernote", json={"path": str(vault)}).status_code == 422


def test_times_no_date_can_show_are_not_stored_and_never_break_a_listing(eng: Engine, tmp_path: Path):
    def conversation(cid: str, text: str, t: float) -> dict:
        message = {"id": "a", "author": {"role": "user"}, "content": {"content_type": "text", "parts": [text]},
                   "create_time": t}
        return {"title": cid, "id": cid, "create_time": t,
                "mapping": {"a": {"id": "a", "parent": None, "children": [], "message": message}}}

    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conversation("ms", "about otters", 1_700_000_000_000),  # milliseconds
                                conversation("far", "about badgers", -5e15)]), encoding="utf-8")
    eng.import_chatgpt(path)
    at = {m.text.rsplit(" ", 1)[-1]: m.at for m in eng.list_memories(limit=10)}
    assert at == {"otters": datetime.fromtimestamp(1_700_000_000, UTC).isoformat(timespec="seconds"),
                  "badgers": None}
    assert eng.recall("otters") and eng.export(tmp_path / "out.jsonl")
    for bad in (1e20, float("nan"), "9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+05:00"):
        with pytest.raises(UserError, match="date or time|between the years"):
            eng.remember("A note with an impossible time.", kind="episodic", at=bad)
    lines = tmp_path / "bad.jsonl"
    lines.write_text(json.dumps({"text": "x", "at": 1e20}) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="between the years"):
        eng.import_(lines)
