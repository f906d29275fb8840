"""Screenshots of the desktop app on a profile that lives on a server, on a real X server (Xvfb with openbox and a
tray host), for docs/screenshots/:

    python scripts/server_screenshots.py      # an 800x600 screen, and 1440x900 at QT_SCALE_FACTOR=2

A real PostgreSQL (tests/pg_server.py) and a real `personal-llm serve --database` process. Each run shows the first
run's two choices, Settings on the server profile (address and whether the server answers), the account's Activity,
Conflicts and a document's passages read from the server, and a capture made while the server is stopped ("waiting
to send"). The whole screen is saved, so each picture also shows whether the window and its dialogs fit.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS = (("800x600", (800, 600), "1"), ("scale2", (1440, 900), "2"))


def main() -> int:
    import subprocess

    from engine import users
    from engine.store.postgres.database import Database
    from tests.gui.xserver import XServer
    from tests.pg_server import LocalServer, bundled_space

    out = ROOT / "docs" / "screenshots"
    pg = LocalServer().start()
    try:
        with pg.admin() as con:
            con.execute("CREATE DATABASE shots")
        pg_url = pg.url("shots")
        with Database(pg_url) as db:
            db.init(bundled_space())
        for tag, screen, scale in RUNS:
            token = users.add(pg_url, f"alice-{tag}")  # an account of each run's own
            with tempfile.TemporaryDirectory() as tmp, XServer(*screen) as x:
                x.start_window_manager()
                x.start_tray_host(reserve=True)
                env = x.env(QT_SCALE_FACTOR=scale, PYTHONPATH=str(ROOT), PERSONAL_LLM_HOME=str(Path(tmp) / "home"),
                            PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring", XDG_DATA_HOME=tmp)
                env.pop("OLLAMA_HOST", None)
                proc = subprocess.run([sys.executable, __file__, "--child", str(Path(tmp) / "home"), pg_url, token,
                                       str(out), tag], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
                print(proc.stdout.strip())
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    return 1
    finally:
        pg.stop()
    return 0


def child(home: Path, pg_url: str, token: str, out: Path, tag: str) -> int:
    import asyncio

    import qasync
    from PySide6.QtWidgets import QApplication

    from desktop.app import DesktopApp
    from engine.embeddings import NoEmbedder
    from tests.postgres.serving import Server

    qapp = QApplication([])
    asyncio.set_event_loop(qasync.QEventLoop(qapp))

    def wait(seconds: float, until=None) -> None:  # noqa: ANN001
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            qapp.processEvents()
            if until is not None and until():
                return
            time.sleep(0.02)
        if until is not None:
            raise TimeoutError(f"{tag}: waited {seconds} s in vain")

    def shot(name: str) -> None:
        wait(0.8)
        qapp.primaryScreen().grabWindow(0).save(str(out / f"{name}-{tag}.png"))
        print(f"{name}-{tag}.png")

    server = Server(pg_url, home.parent / "server-home").start()
    app = DesktopApp(home, embedder=NoEmbedder(), use_tray=True, use_hotkey=False)
    try:
        wait(30, lambda: app.where_dialog is not None and app.where_dialog.isVisible())
        shot("first-run-this-computer")
        dialog = app.where_dialog
        dialog.server.setChecked(True)
        dialog.address.setText(server.url)
        dialog.token.setText(token)
        shot("first-run-server")
        dialog.go.click()
        wait(60, lambda: app.bridge.info is not None)
        for text in ("The boiler's service code is 4471", "Swimming lessons are on Tuesdays at six"):
            app.bridge.remember(text, failed=lambda message: print("remember failed:", message, file=sys.stderr))
        wait(20, lambda: len(app.window.memories.visible_ids()) == 2)
        window = app.window
        window.show_page("settings")
        box = window.settings.sections.server
        wait(20, lambda: box.health.text().startswith("● Connected") and "memories" in box.health.text())
        shot("settings-server")
        seed(server.url, token)
        window.show_page("activity")
        wait(20, lambda: window.activity.tree.topLevelItemCount() > 0)
        shot("activity-server")
        window.show_page("conflicts")
        wait(20, lambda: len(window.conflicts.cards) == 1)
        shot("conflicts-server")
        window.show_page("documents")
        docs = window.documents
        wait(30, lambda: docs.list.topLevelItemCount() == 1)
        docs.view_document(docs.list.topLevelItem(0).data(0, 256))
        wait(20, lambda: docs.viewer is not None and "Radiators" in docs.viewer.text.toPlainText())
        shot("document-server")
        docs.viewer.close()
        server.stop()
        app.capture.open_box()
        app.capture.input.setText("The plumber's number is 555 0199")
        app.capture.submit()
        wait(20, lambda: window.status.server.text() == "● Offline · 1 waiting to send")
        app.capture.hide()
        window.show_page("memories")
        try:
            wait(10, lambda: len(window.memories.visible_ids()) == 5)
        except TimeoutError:
            print("listed:", [window.memories.model.get(u).text for u in window.memories.visible_ids()],
                  window.status.count.text(), file=sys.stderr)
            raise
        shot("waiting-to-send")
    finally:
        app.quit()
        server.stop()
    return 0


def seed(url: str, token: str) -> None:
    """What another device of the account wrote: two facts that disagree (as a push brings them) and a manual."""
    import httpx

    from engine.memory_rules import new_uid

    older, newer = new_uid("mem"), new_uid("mem")
    said = {"type": "memory", "kind": "fact", "importance": 0.5, "created_at": "2026-01-02T03:04:05+00:00",
            "updated_at": "2026-01-02T03:04:05+00:00"}
    manual = "\n\n".join(["# Boiler manual", *(f"## {part}\n\n" + " ".join(
        f"{part}, step {n}: check the valve marked {n} and write down what the gauge reads." for n in range(30))
        for part in ("Radiators", "Pressure"))])
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as other:
        other.post("/transfer/records", json={"records": [
            {**said, "uid": older, "text": "The boiler is serviced every March.", "conflict_with": newer},
            {**said, "uid": newer, "text": "The boiler is serviced every October.",
             "created_at": "2026-02-02T03:04:05+00:00", "conflict_with": older}]}).raise_for_status()
        other.post("/ingest/upload", files={"file": ("boiler-manual.md", manual.encode())}).raise_for_status()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        raise SystemExit(child(Path(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5]), sys.argv[6]))
    raise SystemExit(main())
