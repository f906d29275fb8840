"""What a client of the HTTP API may make the server read: only folders the user allowed, no links out of
them, never the profile, the keychain file or credential folders; everything else by upload. Over real
HTTP against a running server with a real store."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.fixtures_docs import make_docx
from tests.hostile_files import MIB, base_document, bomb_body, replace_part
from tests.integration.test_api import Live, allow_folders
from tests.integration.test_api import live as _live_fixture  # noqa: F401 (a fixture, used by `api`)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Live:
    """The API served by uvicorn over a real store (test_api's `live` fixture)."""
    return request.getfixturevalue("_live_fixture")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder of this test's own, with the secrets a real one has."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa.txt").write_text("-----BEGIN OPENSSH PRIVATE KEY----- not really", encoding="utf-8")
    (home / ".docker").mkdir()
    (home / ".docker" / "config.json").write_text('{"auths": {"x": {"auth": "c2VjcmV0"}}}', encoding="utf-8")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials.txt").write_text("aws_secret_access_key = x", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    return home


def post(api: Live, *paths: str | Path):
    return api.client.post("/ingest", json={"paths": [str(p) for p in paths]})


def refused(r) -> str:
    assert r.status_code == 403, r.text
    return r.json()["detail"]


def test_nothing_is_allowed_until_the_user_allows_a_folder(api: Live, tmp_path: Path):
    note = tmp_path / "note.md"
    note.write_text("A note.", encoding="utf-8")
    detail = refused(post(api, note))
    assert "none are allowed yet" in detail and "personal-llm folders allow" in detail and "/ingest/upload" in detail
    assert api.eng.list_documents() == []


def test_an_allowed_folder_is_ingested_and_links_out_of_it_are_refused(api: Live, tmp_path: Path, home: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "boat.md").write_text("The sailing boat is moored at pier 7 in Sausalito.", encoding="utf-8")
    outside = tmp_path / "outside" / "shadow.txt"
    outside.parent.mkdir()
    outside.write_text("root:$6$hash:19000:0:99999:7:::", encoding="utf-8")
    (docs / "x.txt").symlink_to(outside)  # /etc/shadow through an innocent name
    (docs / "keys").symlink_to(home / ".ssh")  # a folder link into a secret place
    allow_folders(api.eng, docs)

    r = post(api, docs)
    assert r.status_code == 200, r.text
    by_name = {Path(x["path"]).name: x for x in r.json()}
    assert by_name["boat.md"]["status"] == "added"
    assert by_name["x.txt"]["status"] == "failed" and "outside the folders you allowed" in by_name["x.txt"]["error"]
    assert by_name["keys"]["status"] == "failed" and "~/.ssh" in by_name["keys"]["error"]
    assert "symbolic link" in refused(post(api, docs / "x.txt"))
    assert "~/.ssh" in refused(post(api, docs / "keys" / "id_rsa.txt"))
    assert "outside the folders" in refused(post(api, docs / ".." / "outside" / "shadow.txt"))
    texts = " ".join(h["text"] for h in api.client.get("/memory/recall", params={"q": "root hash shadow"}).json())
    assert "root:$6$" not in texts and "pier 7" in " ".join(
        h["text"] for h in api.client.get("/memory/recall", params={"q": "where is the boat"}).json())


def test_the_root_the_profile_the_keychain_and_credentials_are_refused_even_when_allowed(
        api: Live, tmp_path: Path, home: Path):
    allow_folders(api.eng, tmp_path)  # the profile and the keychain file api under tmp_path in the tests
    keyring_file = Path(os.environ["XDG_DATA_HOME"]) / "python_keyring" / "keyring_pass.cfg"
    assert keyring_file.exists()  # it holds the store key and the API token
    t0 = time.perf_counter()
    assert "outside the folders" in refused(post(api, "/"))
    assert time.perf_counter() - t0 < 5  # refused before any walk
    assert "profile" in refused(post(api, api.eng.home))
    assert "profile" in refused(post(api, api.eng.home / "settings.json"))
    assert "keychain" in refused(post(api, keyring_file))
    link = tmp_path / "innocent.txt"
    link.symlink_to(keyring_file)
    assert "keychain" in refused(post(api, link))
    assert "~/.ssh" in refused(post(api, home / ".ssh" / "id_rsa.txt"))
    assert "~/.docker" in refused(post(api, home / ".docker" / "config.json"))
    assert "~/.aws" in refused(post(api, home / ".aws" / "credentials.txt"))
    env = tmp_path / "project" / ".env.txt"
    env.parent.mkdir()
    env.write_text("API_KEY=secret", encoding="utf-8")
    assert "secrets" in refused(post(api, env))
    assert api.eng.list_documents() == []


def test_a_name_that_is_not_utf8_fails_alone_without_a_500(api: Live, tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("The first good file mentions herons.", encoding="utf-8")
    (docs / os.fsdecode(b"r\xe9sum\xe9.txt")).write_text("Latin-1 name.", encoding="utf-8")
    (docs / "z.md").write_text("The last good file mentions otters.", encoding="utf-8")
    allow_folders(api.eng, docs)
    for _ in range(2):  # and a re-run goes through the same way
        r = post(api, docs)
        assert r.status_code == 200, r.text
        statuses = {Path(x["path"]).name: x["status"] for x in r.json()}
        assert statuses.pop("r\\xe9sum\\xe9.txt") == "failed"
        assert set(statuses.values()) <= {"added", "unchanged"} and set(statuses) == {"a.md", "z.md"}
    assert api.eng.con.execute("SELECT count(*) FROM documents WHERE status = 'pending'").fetchone()[0] == 0


def test_the_upload_form_ingests_what_the_client_sends(api: Live, tmp_path: Path):
    path = make_docx(tmp_path / "plan.docx")
    r = api.client.post("/ingest/upload", files={"file": ("plan.docx", path.read_bytes())}, data={"project": "home"})
    assert r.status_code == 200, r.text
    [result] = r.json()
    assert result["status"] == "added" and result["path"] is None
    hits = api.client.get("/memory/recall", params={"q": "garden budget", "k": 3}).json()
    assert any("4200 euros" in h["text"] for h in hits)
    again = api.client.post("/ingest/upload", files={"file": ("other-name.docx", path.read_bytes())}).json()
    assert again[0]["status"] == "unchanged"

    bomb = replace_part(base_document(".odt", tmp_path / "b.odt"), tmp_path / "bomb.odt", None,
                        bomb_body(".odt", 40 * MIB))  # under the test server's 64 KB body limit
    r = api.client.post("/ingest/upload", files={"file": ("bomb.odt", bomb.read_bytes())})
    assert r.status_code == 200 and r.json()[0]["status"] == "failed" and "would unpack" in r.json()[0]["error"]
    r = api.client.post("/ingest/upload", files={"file": ("tool.exe", b"MZ...")})
    assert r.status_code == 400 and "aren't supported" in r.json()["detail"]
    r = api.client.post("/ingest/upload", files={"file": ("../../etc/evil.md", b"# Evil\n\nA path in a name.")})
    assert r.status_code == 200 and r.json()[0]["status"] == "added"  # only the last part of the name is used
    assert not any(p.name == "evil.md" for p in tmp_path.rglob("evil.md"))
