"""The desktop installed without the `server` extra (no PostgreSQL driver): the engine, the CLI and the API
work as ever and never import it; the server's commands say what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the driver cannot be imported in this process, as when it is not installed
WITHOUT_DRIVER = """
import sys
for name in ("psycopg", "psycopg_binary", "psycopg_pool"):
    sys.modules[name] = None
"""


def child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_DRIVER + code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_desktop_never_needs_the_postgresql_driver(profile_home: Path):
    p = child("""
from engine import Engine
from engine.api import create_app
from engine.embeddings import NoEmbedder
with Engine.open(embedder=NoEmbedder()) as eng:
    mid = eng.remember("The spare key is under the blue flowerpot.").id
    assert [h.id for h in eng.recall("spare key flowerpot")] == [mid]
    create_app(eng, eng.api_token(), [])
    eng.forget(mid)
loaded = sorted(m for m, mod in sys.modules.items() if mod is not None and m.startswith(("psycopg", "engine.store.postgres", "engine.users")))
print("loaded:", loaded)
""")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("loaded: []")


def test_the_server_commands_say_to_install_the_server_extra(profile_home: Path):
    for args in (["server", "users", "--database", "postgresql://admin@db.example.org/pllm"],
                 ["serve", "--database", "postgresql://admin@db.example.org/pllm"]):
        p = child(f"from engine.cli import main; sys.exit(main({args!r}))")
        assert p.returncode != 0
        assert "install personal-llm[server]" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
