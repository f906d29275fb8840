"""Every page of the desktop app on a profile that lives on a server, against a real server process on a real
PostgreSQL: what the server offers works as on this computer (the activity log, conflicts and a document's
passages are the account's, agents run there); what it does not (watched folders) says so on the page, never in
an error box. Captures made while the server is away are listed with the memories, marked waiting to send, and
the list reads itself again when the server is back. Settings copies the memory to a server and back to this
computer, with progress, in the background."""

from __future__ import annotations

import httpx
from PySide6.QtCore import Qt


def when_column(browser, uid: str) -> str:
    model = browser.model
    return model.data(model.index(model.row_of(uid), 3))


def test_every_page_on_a_server_profile(qtbot, profile_home, server, connected_app, capture, texts_on_server):
    srv, token = server
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}) as other:
        other.post("/memory/remember", json={"text": "The boiler was serviced by Marta in March"}).raise_for_status()
    app, errors = connected_app(profile_home, srv.url, token)
    w = app.window
    try:
        w.build_pages()
        qtbot.waitUntil(lambda: len(w.memories.visible_ids()) == 1, timeout=10_000)
        [boiler] = w.memories.visible_ids()

        # what the server does not offer says so on its page, with the reason
        w.show_page("settings")
        folders = w.settings.folders  # watched folders feed a profile on this computer: it says so
        assert folders.not_here.isVisible() and not folders.body.isVisible()
        assert "Documents" in folders.not_here.text()
        w.settings.tidy_button.click()  # tidying up runs on the server (no language model there: some steps wait)
        qtbot.waitUntil(lambda: w.settings.tidy_result.text().startswith("Done:"), timeout=30_000)
        assert "wait for a language model" in w.settings.tidy_result.text()
        w.show_page("documents")
        assert "uploaded to your server" in w.documents.drop_zone.hint.text()

        # what it offers reads the server: the graph's entities, a search, Ask's sources
        w.show_page("graph")  # read from the server: no facts yet (no language model there), said as such
        qtbot.waitUntil(lambda: "of your server" in w.graph.empty.hint.text(), timeout=10_000)
        w.show_page("memories")
        w.memories.search.setText("boiler")
        qtbot.waitUntil(lambda: len(w.memories.visible_ids()) == 1, timeout=10_000)
        w.memories.search.setText("")
        qtbot.waitUntil(lambda: len(w.memories.visible_ids()) == 1 and not w.memories._reading, timeout=10_000)
        assert errors == []

        # the server goes away: a capture is listed at once, marked waiting to send; the list read again
        # (a filter changed and back) still shows what it showed, and the capture
        srv.stop()
        capture(app, "The plumber's number is 555 0199")
        browser = w.memories
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 2, timeout=10_000)
        [waiting] = [uid for uid in browser.visible_ids() if when_column(browser, uid) == "Waiting to send"]
        assert browser.model.get(waiting).text == "The plumber's number is 555 0199"
        qtbot.waitUntil(lambda: w.status.server.text() == "● Offline · 1 waiting to send", timeout=10_000)
        qtbot.waitUntil(lambda: w.status.count.text().startswith("2 memories"), timeout=10_000)  # as listed
        browser.refresh()
        qtbot.waitUntil(lambda: not browser._reading, timeout=10_000)
        qtbot.wait(300)
        assert browser.visible_ids() == [waiting, boiler] and browser.list_stack.currentWidget() is browser.tree
        assert when_column(browser, waiting) == "Waiting to send"

        # back: the capture is sent once, and the list is read again from the server (nothing waits)
        srv.start()
        qtbot.waitUntil(lambda: w.status.server.text() == "● Server", timeout=20_000)
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 2
                        and all(when_column(browser, u) != "Waiting to send" for u in browser.visible_ids()),
                        timeout=10_000)
        assert texts_on_server() == ["The boiler was serviced by Marta in March",
                                           "The plumber's number is 555 0199"]
        assert errors == []
    finally:
        app.quit()


def test_activity_conflicts_and_a_documents_passages_read_the_server(qtbot, profile_home, server, connected_app,
                                                                    capture):
    """The activity log, the conflicts and a document's passages are the account's, read from the server as
    on this computer: a run of writes listed (never their text), each named by where it came from (the app's
    own capture is "You", as on this computer), a conflict kept one way, a document read inside the app with
    the passage asked for highlighted."""
    from engine.memory_rules import new_uid

    srv, token = server
    older, newer = new_uid("mem"), new_uid("mem")
    said = {"type": "memory", "kind": "fact", "importance": 0.5, "created_at": "2026-01-02T03:04:05+00:00",
            "updated_at": "2026-01-02T03:04:05+00:00"}
    later = {"created_at": "2026-02-02T03:04:05+00:00", "updated_at": "2026-02-02T03:04:05+00:00"}
    manual = "\n\n".join(["# Boiler manual", *(f"## {part}\n\n" + " ".join(
        f"{part}, step {n}: check the valve marked {n} and write down what the gauge reads." for n in range(40))
        for part in ("Radiators", "Pressure")), "## Service\n\nCall Marta at 555 0142 for the yearly service."])
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as other:
        other.post("/memory/remember", json={"text": "The spare key is under the blue pot"}).raise_for_status()
        other.post("/transfer/records", json={"records": [  # two facts found to disagree (as a push brings them)
            {**said, "uid": older, "text": "Alice lives in Lisbon.", "conflict_with": newer},
            {**said, **later, "uid": newer, "text": "Alice lives in Porto.", "conflict_with": older}]}).raise_for_status()
        [doc] = other.post("/ingest/upload", files={"file": ("boiler.md", manual.encode())}).json()
        passages = other.get(f"/documents/{doc['document_id']}/passages").json()
    assert len(passages) > 1
    service = next(p for p in passages if "yearly service" in p["text"])
    app, errors = connected_app(profile_home, srv.url, token)
    w = app.window
    w.build_pages()

    # the activity log: the account's writes, in sentences, without their text; a memory's row opens it
    w.show_page("activity")
    view = w.activity
    assert view.refresh_button.isVisible()

    def rows() -> list[list[str]]:
        return [[view.tree.topLevelItem(i).text(c) for c in range(3)] for i in range(view.tree.topLevelItemCount())]

    qtbot.waitUntil(lambda: any(r[1] == "The HTTP API remembered a fact" for r in rows()), timeout=10_000)
    capture(app, "The bins go out on Tuesday")
    qtbot.waitUntil(lambda: rows() and rows()[0][1] == "You remembered a fact", timeout=10_000)
    assert any(r[1].startswith("The HTTP API added a document") for r in rows()), rows()
    assert not any("blue pot" in cell or "Lisbon" in cell for r in rows() for cell in r)

    # the conflict, kept one way: the other is archived on the server
    w.show_page("conflicts")
    page = w.conflicts
    qtbot.waitUntil(lambda: len(page.cards) == 1, timeout=10_000)
    card = page.cards[0]
    assert card.older.uid == older and card.newer.uid == newer
    qtbot.mouseClick(card.newer.keep, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.stack.currentWidget() is page.empty, timeout=10_000)
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}) as other:
        assert other.get(f"/memory/{older}").json()["archived"] and not other.get(f"/memory/{newer}").json()["archived"]
        assert other.get("/conflicts").json() == []

    # a document read inside the app, the passage asked for highlighted
    w.show_page("documents")
    docs = w.documents
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 1, timeout=10_000)
    docs.view_document(doc["document_id"], service["id"])
    viewer = docs.viewer
    qtbot.waitUntil(lambda: viewer is not None and "Radiators, step 3" in viewer.text.toPlainText(), timeout=10_000)
    assert viewer.highlighted() == service["text"]
    assert errors == []


def test_an_agent_runs_on_the_server_and_asks_here_before_a_sensitive_step(qtbot, profile_home, pg_url, tmp_path,
                                                                          connected_app):
    """Agents on a server profile: the server's agents are listed, a run's steps show as they happen, a
    sensitive step asks in the app's dialog (not allowed: not run; allowed: run on the server), and Stop ends a
    run while it asks."""
    from engine import users
    from engine.config import LLMSettings, Settings, save_settings
    from tests.ollama_server import OllamaTestServer, Reply
    from tests.postgres.serving import Server

    def call(name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"name": name, "arguments": arguments}])

    token = users.add(pg_url, "alice")
    home = tmp_path / "server-home"
    home.mkdir()
    with OllamaTestServer(models=["llama3.2"]) as llm:
        save_settings(Settings(llm=LLMSettings(host=llm.url, model="llama3.2")), home)
        srv = Server(pg_url, home).start()
        try:
            with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}) as other:
                kept, doomed = (other.post("/memory/remember", json={"text": t}).json()["id"]
                                for t in ("Keep this note", "An old note to delete"))
            app, errors = connected_app(profile_home, srv.url, token)
            panel = app.window.ask
            app.window.open_ask()
            qtbot.waitUntil(lambda: panel.agent_toggle.isEnabled() and panel.agent_picker.findData("Organiser") >= 0,
                            timeout=10_000)
            panel.agent_toggle.setChecked(True)
            panel.agent_picker.setCurrentIndex(panel.agent_picker.findData("Organiser"))

            def run(task: str) -> object:
                panel.question.clear()
                qtbot.keyClicks(panel.question, task)
                panel.ask_button.click()
                qtbot.waitUntil(lambda: panel.dialog is not None and panel.dialog.isVisible(), timeout=30_000)
                return panel.dialog

            def on_server(uid: str) -> int:
                with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}) as other:
                    return other.get(f"/memory/{uid}").status_code

            llm.script(call("forget_memory", id=kept), Reply(text="I left it."))
            dialog = run("Delete the note")
            assert "Organiser" in dialog.title.text() and "forget_memory" in dialog.title.text()
            assert dialog.arguments.toPlainText() == f'id: "{kept}"'
            steps = [panel.steps.item(i).text() for i in range(panel.steps.count())]
            assert any(s.startswith("→ forget_memory(") for s in steps), steps
            with qtbot.waitSignal(app.bridge.agent_finished, timeout=30_000):
                dialog.deny_button.click()
            assert panel.answer.toPlainText() == "I left it." and on_server(kept) == 200

            llm.script(call("forget_memory", id=doomed), Reply(text="Deleted the old note."))
            dialog = run("Delete the old note")
            with qtbot.waitSignal(app.bridge.agent_finished, timeout=30_000):
                dialog.allow_button.click()
            assert panel.answer.toPlainText() == "Deleted the old note." and on_server(doomed) == 404

            llm.script(call("forget_memory", id=kept), Reply(text="Deleted."))
            run("Delete the note after all")
            with qtbot.waitSignal(app.bridge.agent_cancelled, timeout=30_000):
                panel.stop_button.click()
            assert on_server(kept) == 200
            assert errors == []
        finally:
            srv.stop()


def test_a_revoked_token_says_so_keeps_the_capture_and_a_new_token_sends_it(
        qtbot, profile_home, server, pg_url, connected_app, capture, texts_on_server):
    from engine import users

    srv, token = server
    app, errors = connected_app(profile_home, srv.url, token)
    w = app.window
    try:
        w.build_pages()
        status = w.status
        qtbot.waitUntil(lambda: status.server.text() == "● Server", timeout=10_000)
        users.remove(pg_url, "alice", forget=False)  # revoked: the server refuses it within its 10 s
        qtbot.waitUntil(lambda: status.server.text().startswith("● Token refused"), timeout=30_000)
        capture(app, "The spare key is under the blue pot")  # kept, not failed
        qtbot.waitUntil(lambda: status.server.text() == "● Token refused · 1 waiting to send", timeout=10_000)
        assert "refused this profile's token" in status.server.toolTip()
        assert "Use a new token" in status.currentMessage()
        w.show_page("settings")
        box = w.settings.sections.server
        qtbot.waitUntil(lambda: box.renew.isVisible(), timeout=10_000)
        assert box.health.text().startswith("● Token refused.") and "1 waiting to send" in box.health.text()
        assert texts_on_server() == []

        # a wrong token is refused with the reason, and the capture still waits
        box.renew_token("pllm_not-a-token")
        qtbot.waitUntil(lambda: "refused this profile's token" in box.feedback.text, timeout=15_000)
        # the new token (another account here: a user's second token has no command yet) takes it, once
        new = users.add(pg_url, "alice-laptop")
        box.renew_token(new)
        qtbot.waitUntil(lambda: status.server.text() == "● Server", timeout=20_000)
        assert not box.renew.isVisible()
        qtbot.waitUntil(lambda: texts_on_server() == ["The spare key is under the blue pot"], timeout=10_000)
        assert new not in "".join(p.read_text(errors="replace") for p in profile_home.rglob("*.json"))
        assert errors == []
    finally:
        app.quit()


def test_without_a_keychain_a_passphrase_protects_the_servers_token(
        qtbot, profile_home, new_app, server, monkeypatch, capture, texts_on_server):
    import keyring.core
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QInputDialog, QScrollArea

    from engine import remote

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.delenv("PERSONAL_LLM_PASSPHRASE", raising=False)
    keyring.core._keyring_backend = None
    srv, token = server
    app = new_app(profile_home)
    try:
        qtbot.waitUntil(lambda: app.where_dialog is not None and app.where_dialog.isVisible(), timeout=10_000)
        dialog = app.where_dialog
        # no keychain: said once, under the question, for either choice (a local store's passphrase is asked
        # for next; a server profile's seals its token and its outbox's key)
        note = dialog.passphrase_note
        assert note.isVisible() and not dialog.server_form.isAncestorOf(note)
        assert note.mapTo(dialog, QPoint(0, note.height())).y() <= dialog.local.mapTo(dialog, QPoint(0, 0)).y()
        assert "No keychain" in note.text() and "your encrypted memory" in note.text()
        assert "your token and the captures waiting to be sent" in note.text()
        # every field in view, in a dialog that an 800x600 screen holds (the screenshots show it there too)
        assert dialog.findChild(QScrollArea).verticalScrollBar().maximum() == 0
        assert dialog.width() <= 800 - 24 and dialog.height() <= 600 - 48
        dialog.server.setChecked(True)
        assert dialog.passphrase.isVisible() and dialog.again.isVisible() and note.isVisible()
        qtbot.keyClicks(dialog.address, srv.url)
        qtbot.keyClicks(dialog.token, token)
        qtbot.keyClicks(dialog.passphrase, "short")
        qtbot.mouseClick(dialog.go, Qt.MouseButton.LeftButton)
        assert "at least 8 characters" in dialog.problem.label.text()
        qtbot.waitUntil(lambda: not dialog.problem.visibleRegion().isEmpty())  # said where it is seen: the dialog
        assert dialog.findChild(QScrollArea).verticalScrollBar().maximum() == 0  # grew to hold it
        dialog.passphrase.setText("correct horse battery")
        dialog.again.setText("correct horse battery")
        qtbot.mouseClick(dialog.go, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=30_000)
        capture(app, "The gate code is 1984")
        srv.stop()
        capture(app, "The alarm code is 2468")  # into the outbox, encrypted with the sealed key
        qtbot.waitUntil(lambda: app.window.status.server.text() == "● Offline · 1 waiting to send", timeout=10_000)
    finally:
        app.quit()
    files = [p for p in profile_home.rglob("*") if p.is_file()]
    assert not any(token.encode() in p.read_bytes() or b"2468" in p.read_bytes() for p in files)
    assert "protected" in (profile_home / "connection.json").read_text()

    # a new start (a new process: nothing unlocked) asks for the passphrase; a wrong one is asked again
    remote._unlocked.clear()
    remote.close_outbox(profile_home)
    prompts: list[str] = []
    replies = ["wrong passphrase", "correct horse battery"]

    def get_text(parent, title, label, echo):
        prompts.append(label)
        return (replies.pop(0), True) if replies else ("", False)

    monkeypatch.setattr(QInputDialog, "getText", staticmethod(get_text))
    srv.start()
    app = new_app(profile_home)
    try:
        qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=30_000)
        assert len(prompts) == 2 and "Enter it" in prompts[0] and "does not open" in prompts[1]
        qtbot.waitUntil(lambda: app.window.status.server.text() == "● Server", timeout=20_000)
        qtbot.waitUntil(lambda: texts_on_server() == ["The gate code is 1984", "The alarm code is 2468"],
                        timeout=10_000)

        # copied to this computer: a passphrase protects the copy, by the first run's rules
        app.window.show_page("settings")
        dialog = app.window.settings.sections.server.open_move()
        assert dialog.passphrase.isVisible() and dialog.again.isVisible()
        assert "No keychain" in dialog.passphrase_note.text()
        dialog.name.setText("laptop")
        dialog.run()
        assert dialog.result.text == "An empty passphrase cannot protect the store." and not dialog.running
        dialog.passphrase.setText("short")
        dialog.run()
        assert "at least 8 characters" in dialog.result.text and not dialog.running
        dialog.passphrase.setText("blue pot under the stairs")
        dialog.again.setText("blue pot under the stair")
        dialog.run()
        assert dialog.result.text == "The two passphrases differ; type the same one twice." and not dialog.running
        dialog.again.setText("blue pot under the stairs")
        dialog.run()
        qtbot.waitUntil(lambda: not dialog.running, timeout=120_000)
        assert "2 of them memories: 2 memories new in the profile laptop" in dialog.result.text, dialog.result.text
        dialog.reject()
        # a copy into it again needs its passphrase: another one is refused, saying so, and nothing is copied
        again = app.window.settings.sections.server.open_move()
        again.name.setText("laptop")
        again.passphrase.setText("correct horse battery")
        again.again.setText("correct horse battery")
        again.run()
        qtbot.waitUntil(lambda: not again.running, timeout=60_000)
        assert again.result.property("tone") == "error" and "passphrase" in again.result.text.lower(), again.result.text
    finally:
        app.quit()
        keyring.core._keyring_backend = None
    from engine import Engine

    copy_home = profile_home / "profiles" / "laptop"
    assert not any(b"2468" in p.read_bytes() for p in copy_home.rglob("*") if p.is_file())
    with Engine.open(copy_home, passphrase="blue pot under the stairs", interactive=False) as eng:
        assert sorted(m.text for m in eng.list_memories()) == ["The alarm code is 2468", "The gate code is 1984"]


def test_settings_copies_a_local_memory_to_the_server_and_back_with_progress_and_a_stop(
        qtbot, qasync_loop, profile_home, tmp_path, lexical_embedder, server, monkeypatch, connected_app,
        texts_on_server):
    from engine import Remembered
    from tests.gui.conftest import engine_of, make_desktop

    srv, token = server
    app = make_desktop(qtbot, profile_home, lexical_embedder)  # a local profile
    try:
        engine_of(app).remember_many([Remembered(f"Local note number {i} about the garden") for i in range(1200)])
        app.window.show_page("settings")
        box = app.window.settings.sections.server
        assert box.move_button.text() == "Copy to a server…"
        dialog = box.open_move()
        dialog.address.setText(srv.url)
        dialog.token.setText(token)
        seen: list[tuple[int, int]] = []
        dialog.bridge_progress = dialog._progressed

        def progressed(done: int, total: int) -> None:
            seen.append((done, total))
            dialog.bridge_progress(done, total)
            if len(seen) == 1:
                dialog.stop_copy()  # the user stops it after the first batch

        monkeypatch.setattr(dialog, "_progressed", progressed)
        dialog.run()
        assert dialog.running and not dialog.start.isEnabled()
        qtbot.waitUntil(lambda: not dialog.running, timeout=120_000)
        assert seen[0][0] == 500 and dialog.result.text.startswith("Stopped: ")
        sent = len(texts_on_server())  # the batch on its way when Stop was pressed is stored whole
        assert sent in (500, 1000) and f"{sent:,} items were copied" in dialog.result.text
        monkeypatch.setattr(dialog, "_progressed", dialog.bridge_progress)
        dialog.run()  # again: the rest, nothing twice
        qtbot.waitUntil(lambda: not dialog.running, timeout=120_000)
        assert f"1,200 of them memories: {1200 - sent:,} memories new on the server" in dialog.result.text
        assert len(texts_on_server()) == 1200 and dialog.progress.value() == dialog.progress.maximum()
    finally:
        app.quit()

    # and back: a server profile copies its account into a profile kept on this computer
    device = tmp_path / "device"
    back, errors = connected_app(device, srv.url, token)
    try:
        back.window.build_pages()
        back.window.show_page("settings")
        box = back.window.settings.sections.server
        assert box.move_button.text() == "Copy to this computer…"
        dialog = box.open_move()
        dialog.name.setText("copy")
        dialog.run()
        qtbot.waitUntil(lambda: not dialog.running, timeout=120_000)
        assert "1,200 of them memories: 1,200 memories new in the profile copy" in dialog.result.text, dialog.result.text
        assert dialog.key_dialog.isVisible()  # the new profile's recovery key, shown once
        assert (profile_home / "profiles" / "copy" / "memory.db").exists()
        assert errors == []
    finally:
        back.quit()
