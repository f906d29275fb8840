"""Screenshots of the Graph and Conflicts pages, the Settings sections and the recovery, export and document
dialogs,
at 800×600, at 1440×900 and at QT_SCALE_FACTOR=2 on a 1440×900 screen (a 720×450 window, 1440×900 pixels):

    .venv/bin/python packaging/screenshots_pages.py [--out docs/screenshots] [--platform offscreen|xvfb]

Each scale runs in its own process (Qt reads the scale factor once). The profile is a throw-away one in a
temp directory (plaintext test keyring); its knowledge graph and contradictions come from the scripted
language-model server of tests/ollama_server.py, through the real `ollama` client.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES = {1: ((800, 600), (1440, 900)), 2: ((720, 450),)}

MEMORIES = [
    ("Alice works at Acme as a product designer.", None, [("Alice", "works at", "Acme", "person", "organization")]),
    ("Acme is based in Berlin, near the river.", None, [("Acme", "is based in", "Berlin", "organization", "place")]),
    ("Alice plays chess with Bob on Thursdays.", None, [("Alice", "plays chess with", "Bob", "person", "person")]),
    ("Bob is Alice's brother.", None, [("Bob", "is brother of", "Alice", "person", "person")]),
    ("Bob lives in Lisbon.", 40, [("Bob", "lives in", "Lisbon", "person", "place")]),
    ("Bob moved to Porto last spring.", 6, [("Bob", "lives in", "Porto", "person", "place")]),
    ("Acme makes espresso machines.", None, [("Acme", "makes", "espresso machines", "organization", None)]),
    ("The dentist is Dr. Reyes, on Rua Augusta.", None, [("Dr. Reyes", "works on", "Rua Augusta", "person", "place")]),
]


def reply(request: dict[str, Any]) -> Any:
    from tests.ollama_server import Reply

    title = request["format"]["title"]
    prompt = request["messages"][-1]["content"]
    if title == "TripleExtraction":
        keys = ("subject", "relation", "object", "subject_type", "object_type")
        found = [dict(zip(keys, t, strict=True)) for text, _days, ts in MEMORIES if text in prompt for t in ts]
        return Reply(json={"triples": found})
    if title == "ContradictionVerdict":
        return Reply(json={"contradicts": "Lisbon" in prompt and "Porto" in prompt})
    return Reply(json={"facts": []})


def pump(app: Any, desktop: Any, seconds: float = 0.4) -> None:
    deadline = time.monotonic() + 30
    while desktop.bridge.busy and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def shoot(scale: int, out: Path) -> list[Path]:
    from PySide6.QtWidgets import QApplication

    sys.path.insert(0, str(ROOT))
    from desktop import theme
    from desktop.app import DesktopApp
    from engine import Engine
    from engine.embeddings import NoEmbedder
    from tests.ollama_server import OllamaTestServer

    app = QApplication.instance() or QApplication([])
    theme.Theme(app)  # type: ignore[arg-type]
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="pllm-pages-") as tmp, \
            OllamaTestServer(models=["llama3.2"], reply_fn=reply) as server:
        home = Path(tmp) / "profile"
        os.environ.update(PERSONAL_LLM_HOME=str(home), XDG_DATA_HOME=str(Path(tmp) / "xdg"),
                          PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring",
                          PERSONAL_LLM_BACKUP_DIR=str(Path(tmp) / "Backups"))
        now = datetime.now(UTC)
        with Engine.open(home, embedder=NoEmbedder()) as eng:
            settings = eng.settings.model_copy(deep=True)
            settings.embedding_model = "none"
            settings.tray_notice_shown = True
            settings.llm.host = server.url
            with socket.socket() as probe:  # the HTTP API, turned on below, on a free port
                probe.bind(("127.0.0.1", 0))
                settings.api_port = probe.getsockname()[1]
            eng.apply_settings(settings)
            first_key = eng.recovery_key
            for text, days, _ in MEMORIES:
                eng.remember(text, at=(now - timedelta(days=days)) if days else None)
            eng.extract_pending()
            eng.consolidate()
            eng.backup_now()
        desktop = DesktopApp(home, embedder=NoEmbedder(), use_tray=False, use_hotkey=False)
        deadline = time.monotonic() + 30
        while desktop.bridge.info is None and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.01)
        w = desktop.window
        w.build_pages()
        notes = Path(tmp) / "Notes from the allotment and the garden" / "Seed catalogues and sowing plans"
        notes.mkdir(parents=True)
        (notes / "beans.md").write_text("Sow the broad beans in March along the south fence.", encoding="utf-8")
        w.settings.folders.add_folder(str(notes), "garden")
        pump(app, desktop, 1.0)

        def grab(widget: Any, name: str) -> None:
            path = out / f"{name}.png"
            widget.grab().save(str(path))
            written.append(path)

        for width, height in SIZES[scale]:
            suffix = "scale2" if scale == 2 else f"{width}x{height}"
            w.resize(width, height)
            w.show()
            # Graph: 2 hops around Alice, one fact chosen
            w.show_page("graph")
            w.graph.hops.setCurrentIndex(1)
            w.graph.show_entity("Alice")
            pump(app, desktop)
            w.graph.select_fact(next(f.index for f in w.graph._facts if f.rel == "works at"))
            pump(app, desktop, 0.6)
            grab(w, f"graph-{suffix}")
            # Conflicts
            w.show_page("conflicts")
            w.conflicts.refresh()
            pump(app, desktop, 0.6)
            grab(w, f"conflicts-{suffix}")
            # Settings, scrolled to the new sections
            w.show_page("settings")
            pump(app, desktop, 0.6)
            sections = w.settings.sections
            scroll = w.settings.layout().itemAt(0).widget()
            if not sections.api.enabled.isChecked():  # the API on, as its banner then says where it runs
                sections.api.enabled.setChecked(True)
                deadline = time.monotonic() + 30
                while "Running at" not in sections.api.state.text and time.monotonic() < deadline:
                    pump(app, desktop, 0.2)
            desktop.bridge.set_paused(True)  # the status bar's pause sign, in the first of these
            for box, name in ((w.settings.key_warning.parentWidget(), "settings-data-folders"),
                              (sections.appearance, "settings-recovery-backups"), (sections.transfer, "settings-api")):
                scroll.ensureWidgetVisible(box, 0, 0)
                scroll.verticalScrollBar().setValue(box.mapTo(scroll.widget(), box.rect().topLeft()).y() - 8)
                pump(app, desktop, 0.3)
                grab(w, f"{name}-{suffix}")
                desktop.bridge.set_paused(False)
            # Dialogs, at their own size over the window
            dialog = desktop.recovery_dialog
            if dialog is None:
                from desktop.first_run import RecoveryKeyDialog

                dialog = RecoveryKeyDialog(first_key or "ABCD-EFGH-IJKL-MNOP-QRST-UVWX-YZ23-4567", parent=w)
                desktop.recovery_dialog = dialog
            dialog.show()
            pump(app, desktop, 0.3)
            grab(dialog, f"dialog-recovery-key-{suffix}")
            dialog.hide()
            from desktop.recovery_dialogs import OpenWithRecoveryDialog

            unlock = OpenWithRecoveryDialog(desktop.bridge, "The key for this store is not in the keychain (service "
                                            "'personal-llm', account 'store-…'). Open it with your recovery key, "
                                            "or restore that keychain entry; the store was left untouched.", w)
            unlock.show()
            pump(app, desktop, 0.3)
            grab(unlock, f"dialog-open-with-recovery-{suffix}")
            unlock.hide()
            export = sections.transfer.open_export()
            export.path.setText(str(Path(tmp) / "personal-llm-export.jsonl"))
            export.passphrase.setText("a passphrase")
            export.again.setText("a passphrase")
            export.run()
            pump(app, desktop, 0.6)
            grab(export, f"dialog-export-{suffix}")
            export.close()
            # the document reader (a watched folder's note), titled with the document
            w.show_page("documents")
            pump(app, desktop, 0.6)
            if w.documents.list.topLevelItemCount():
                w.documents.view_document(w.documents.list.topLevelItem(0).data(0, 256))
                pump(app, desktop, 0.6)
                grab(w.documents.viewer, f"dialog-document-{suffix}")
                w.documents.viewer.hide()
            if scale == 1 and width == 1440:
                theme.set_mode("dark")
                w.show_page("graph")
                pump(app, desktop, 0.6)
                grab(w, "graph-dark-1440x900")
                theme.set_mode("system")
        desktop.quit()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--platform", choices=["offscreen", "xvfb"], default="offscreen")
    parser.add_argument("--scale", type=int, choices=[1, 2], help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.scale:
        for path in shoot(args.scale, args.out):
            print(path)
        return 0
    for scale in (1, 2):
        env = dict(os.environ, QT_SCALE_FACTOR=str(scale), PYTHONPATH=str(ROOT))
        if args.platform == "offscreen":
            env["QT_QPA_PLATFORM"] = "offscreen"
            subprocess.run([sys.executable, __file__, "--out", str(args.out), "--scale", str(scale)], env=env,
                           check=True, cwd=ROOT)
        else:
            sys.path.insert(0, str(ROOT))
            from tests.gui.xserver import XServer

            with XServer(1440, 900) as x:
                subprocess.run([sys.executable, __file__, "--out", str(args.out), "--scale", str(scale)],
                               env=x.env(**{k: env[k] for k in ("QT_SCALE_FACTOR", "PYTHONPATH")}), check=True,
                               cwd=ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
