"""Render the agent screenshots offscreen (no display needed):

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/agent_screenshots.py [--out docs/screenshots]

Writes agent-run.png (a finished Research run: its steps, the answer and the cited source),
agent-confirm.png (the Organiser asking before it deletes a memory) and the same two at 800x600
(agent-run-800x600.png, agent-confirm-800x600.png). The profile is a throw-away one in a temp directory
(plaintext test keyring) and the language model is the scripted Ollama-protocol server of the tests, so
the pictures are reproducible; nothing of yours is touched.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"": (1280, 800), "-800x600": (800, 600)}

MEMORIES = [
    ("I moved to Lisbon on 2019-05-01, into the flat near the river.", "episodic", "home", "2019-05-01"),
    ("My sister Alice lives in Lisbon, near the river.", "fact", "family", None),
    ("The quarterly tax return is due on the fifteenth of April.", "fact", "admin", None),
    ("Old note: the wifi password at the cabin was Meadow-1 (changed since).", "fact", None, None),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="pllm-agent-shots-") as tmp:
        home = Path(tmp) / "profile"
        os.environ["PERSONAL_LLM_HOME"] = str(home)
        os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
        os.environ["XDG_DATA_HOME"] = str(Path(tmp) / "xdg")
        return shoot(home, args.out)


def shoot(home: Path, out: Path) -> int:
    import json

    from PySide6.QtCore import QEventLoop, QPoint, QTimer
    from PySide6.QtGui import QColor, QPainter
    from PySide6.QtWidgets import QApplication

    from engine.config import LLMSettings, Settings, save_settings
    from engine.embeddings import NoEmbedder
    from tests.ollama_server import OllamaTestServer, Reply

    def wait_for(predicate, timeout: float = 30.0) -> None:
        loop_ms = 20
        for _ in range(int(timeout * 1000 / loop_ms)):
            if predicate():
                return
            loop = QEventLoop()
            QTimer.singleShot(loop_ms, loop.quit)
            loop.exec()
        raise SystemExit("timed out")

    def settle(ms: int = 300) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def results(request):
        out = []
        for m in request["messages"]:
            if m["role"] == "tool":
                body = m["content"].removeprefix("<untrusted_content>\n").removesuffix("\n</untrusted_content>")
                out.append(json.loads(body) if body.startswith("{") else body)
        return out

    def researcher(request):
        seen = results(request)
        if "forget_memory" in [t["function"]["name"] for t in request.get("tools") or []]:
            if not seen:
                return Reply(text="I'll look for the old wifi note first.",
                             tool_calls=[{"name": "search_memory", "arguments": {"query": "old wifi password"}}])
            if len(seen) > 1:
                return Reply(text="I left the note in place, as you asked.")
            hit = seen[0]["results"][0]
            return Reply(tool_calls=[{"name": "forget_memory", "arguments": {"id": hit["id"]}}])
        if not seen:
            return Reply(text="Let me find when you moved.",
                         tool_calls=[{"name": "search_memory", "arguments": {"query": "moved to Lisbon"}}])
        hit = next(r for r in seen[0]["results"] if "moved" in r["text"])
        if len(seen) == 1:
            when = re.search(r"\d{4}-\d{2}-\d{2}", hit["text"]).group()
            return Reply(tool_calls=[{"name": "date_difference", "arguments": {"start": when}}])
        d = seen[1]
        span = ", ".join(f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in
                         ((d["years"], "year"), (d["months"], "month"), (d["remaining_days"], "day")) if n)
        return Reply(text=f"You moved to Lisbon on 1 May 2019 [{hit['n']}]: {span} ago ({d['days']} days).")

    app = QApplication.instance() or QApplication([])
    from desktop.app import DesktopApp
    from desktop.theme import Theme

    Theme(app)
    out.mkdir(parents=True, exist_ok=True)
    with OllamaTestServer(models=["llama3.2"], reply_fn=researcher) as server:
        home.mkdir(parents=True, exist_ok=True)
        save_settings(Settings(embedding_model="none", tray_notice_shown=True,
                               llm=LLMSettings(host=server.url, model="llama3.2")), home)
        desktop = DesktopApp(home, embedder=NoEmbedder(), use_tray=False, use_hotkey=False)
        window = desktop.window
        window.show()
        wait_for(lambda: desktop.bridge.info is not None and hasattr(window, "ask"))
        panel = window.ask
        eng = desktop.bridge._engine.result(timeout=30)  # a throw-away profile: seed it directly
        for text, kind, project, at in MEMORIES:
            eng.remember(text, kind=kind, project=project, at=at)
        window.open_ask()
        wait_for(lambda: panel.agent_picker.findData("Organiser") >= 0)
        panel.agent_toggle.setChecked(True)

        for suffix, (w, h) in SIZES.items():
            window.resize(w, h)
            panel.agent_picker.setCurrentIndex(panel.agent_picker.findData("Research"))
            panel.question.setText("How long ago did I move to Lisbon?")
            panel.ask()
            wait_for(lambda: not panel._asking)
            window.first_run.dismissed.emit()  # the welcome card has been read
            settle()
            window.grab().save(str(out / f"agent-run{suffix}.png"))

            panel.agent_picker.setCurrentIndex(panel.agent_picker.findData("Organiser"))
            panel.question.setText("Delete my old wifi note")
            panel.ask()
            wait_for(lambda: panel.dialog is not None and panel.dialog.isVisible())
            dialog = panel.dialog
            shot = window.grab()
            painter = QPainter(shot)
            picture = dialog.grab()
            x = (shot.width() - picture.width()) // 2
            y = (shot.height() - picture.height()) // 2
            painter.fillRect(shot.rect(), QColor(0, 0, 0, 110))  # the window dimmed behind the dialog
            painter.drawPixmap(QPoint(x, y), picture)
            painter.end()
            shot.save(str(out / f"agent-confirm{suffix}.png"))
            dialog.deny_button.click()
            wait_for(lambda: not panel._asking)
        desktop.quit()
    print(f"wrote agent screenshots to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
