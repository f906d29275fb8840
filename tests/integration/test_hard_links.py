"""A hard link inside an allowed or watched folder to a protected file (the keychain file, a private key in
~/.ssh, the profile's own files) is refused at every door that reads a path for another program: the HTTP
API's ingest and imports, watched folders and the agents' read_file. A resolved path cannot show a hard
link (both names are the file), so the policy compares (st_dev, st_ino) with the protected places' files.
Real store, real server over HTTP, real links on the test's file system."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import Engine
from tests.integration.test_agent import call, llm_eng, results, server  # noqa: F401 (fixtures)
from tests.integration.test_api import Live, allow_folders
from tests.integration.test_api import live as _live_fixture  # noqa: F401 (a fixture, used by `api`)
from tests.ollama_server import Reply

PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAA quokka\n"


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Live:
    return request.getfixturevalue("_live_fixture")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(PRIVATE_KEY, encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    return home


def protected(eng: Engine, home: Path) -> dict[str, Path]:
    """The protected files a link is made to, by the label the refusal names: the keychain file (it
    holds the data key and the API token, base64), a private key, and the profile's profile.json."""
    eng.api_token()  # the token is in the keychain file too
    keyring_file = Path(os.environ["XDG_DATA_HOME"]) / "python_keyring" / "keyring_pass.cfg"
    assert keyring_file.is_file()
    return {"the keychain file": keyring_file, "~/.ssh": home / ".ssh" / "id_rsa",
            "your Personal LLM profile": eng.home / "profile.json"}


def link_all(folder: Path, files: dict[str, Path]) -> dict[str, Path]:
    """Hard links to each protected file under innocent names in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for i, (label, target) in enumerate(files.items()):
        link = folder / f"notes-{i}.txt"
        os.link(target, link)
        assert os.path.samefile(link, target) and os.stat(link).st_nlink >= 2
        out[label] = link
    return out


def secrets_of(files: dict[str, Path]) -> list[str]:
    """Words of each protected file a recall could return: its longest line."""
    return [max(f.read_text(encoding="utf-8").splitlines(), key=len).strip() for f in files.values()]


def leaked(eng: Engine, files: dict[str, Path]) -> list[str]:
    stored = [p.text for d in eng.list_documents() for p in eng.document_passages(d.id)]
    stored += [m.text for m in eng.list_memories()]
    return [s for s in secrets_of(files) if any(s[:40] in t for t in stored)]


def test_the_api_refuses_hard_links_to_protected_files(api: Live, tmp_path: Path, home: Path):
    files = protected(api.eng, home)
    docs = tmp_path / "docs"
    links = link_all(docs, files)
    (docs / "boat.md").write_text("The sailing boat is moored at pier 7 in Sausalito.", encoding="utf-8")
    ordinary = tmp_path / "elsewhere" / "plan.txt"  # a hard link to an ordinary file stays readable
    ordinary.parent.mkdir()
    ordinary.write_text("The garden plan puts the beans by the south fence.", encoding="utf-8")
    os.link(ordinary, docs / "plan.txt")
    allow_folders(api.eng, docs)

    for label, link in links.items():  # named in the request: 403
        r = api.client.post("/ingest", json={"paths": [str(link)]})
        assert r.status_code == 403, r.text
        assert r.json()["detail"] == f"{link} is a hard link to a file in {label}, which the API never reads"
    r = api.client.post("/ingest", json={"paths": [str(docs)]})  # met in a walk: failed, the walk goes on
    assert r.status_code == 200, r.text
    by_name = {Path(x["path"]).name: x for x in r.json()}
    for label, link in links.items():
        assert by_name[link.name]["status"] == "failed" and f"hard link to a file in {label}" in by_name[link.name]["error"]
    assert by_name["boat.md"]["status"] == "added" and by_name["plan.txt"]["status"] == "added"
    hits = api.client.get("/memory/recall", params={"q": "private key keychain token store", "k": 20}).json()
    assert not any(s[:40] in h["text"] for h in hits for s in secrets_of(files))
    assert leaked(api.eng, files) == []

    # a key made after the index of the protected places was built (by the walk above) is seen at once
    new_key = home / ".ssh" / "id_ed25519"
    new_key.write_text(PRIVATE_KEY.replace("quokka", "wombat"), encoding="utf-8")
    os.link(new_key, docs / "later.txt")
    r = api.client.post("/ingest", json={"paths": [str(docs / "later.txt")]})
    assert r.status_code == 403 and "hard link to a file in ~/.ssh" in r.json()["detail"], r.text

    # imports: a ChatGPT export named in the request, an Obsidian vault walked
    export = tmp_path / "docs" / "conversations.json"
    os.link(files["the keychain file"], export)
    r = api.client.post("/import/chatgpt", json={"path": str(export)})
    assert r.status_code == 403 and "hard link to a file in the keychain file" in r.json()["detail"], r.text
    vault = docs / "vault"
    link_all(vault, files)
    os.rename(vault / "notes-1.txt", vault / "deploy.md")
    (vault / "Boats.md").write_text("# Boats\n\nThe dinghy needs new oarlocks.", encoding="utf-8")
    r = api.client.post("/import/obsidian", json={"path": str(vault)})
    assert r.status_code == 200, r.text
    assert leaked(api.eng, files) == []
    assert any("oarlocks" in p.text for d in api.eng.list_documents() for p in api.eng.document_passages(d.id))


@pytest.mark.sqlite_only("the keychain file and the profile are the desktop's")
def test_a_watched_folder_skips_hard_links_to_protected_files(eng: Engine, tmp_path: Path, home: Path):
    files = protected(eng, home)
    folder = tmp_path / "watched"
    links = link_all(folder, files)
    good = folder / "good.md"
    good.write_text("The greenhouse key hangs behind the calendar.", encoding="utf-8")
    eng.watch_add(folder)
    [report] = eng.watch_scan()
    assert {d.path for d in eng.list_documents()} == {str(good)}
    assert report.added == 1 and report.failed == len(links)
    [status] = eng.watch_status().folders
    errors = {Path(e.path).name: e.error for e in status.errors}
    for label, link in links.items():
        assert f"is a hard link to a file in {label}, which is never indexed; skipped" in errors[link.name]
    assert leaked(eng, files) == []


@pytest.mark.sqlite_only("the keychain file and the profile are the desktop's")
def test_an_agent_cannot_read_a_hard_link_to_a_protected_file(llm_eng, server, tmp_path: Path,  # noqa: F811
                                                                home: Path):
    files = protected(llm_eng, home)
    allowed = tmp_path / "notes"
    links = link_all(allowed, files)
    (allowed / "todo.txt").write_text("Buy stamps\n", encoding="utf-8")
    llm_eng.settings.ingest.allowed_folders = [str(allowed)]
    server.script(*[call("read_file", path=str(link)) for link in links.values()],
                  call("read_file", path=str(allowed / "todo.txt")), Reply(text="ok"))
    llm_eng.agent_run("What is on my todo list?")
    *refused, todo = results(server.chat_requests[-1])
    assert todo["text"] == "Buy stamps\n"
    for link, answer in zip(links.values(), refused, strict=True):
        assert answer == (f"tool read_file refused: {link.name} is a hard link to a file in a place that holds "
                          "secrets, which agents never read")
    body = " ".join(m["content"] for r in server.chat_requests for m in r["messages"] if m.get("content"))
    assert not any(s[:40] in body for s in secrets_of(files))
