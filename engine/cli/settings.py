"""`personal-llm config`: show or change the language model, embedding model, backup, OCR and facts settings.

`config set embedding.model NAME|PATH|ollama:NAME` saves the choice and re-embeds the store with it at once
(an Ollama model is first asked for a vector: a server that is down or lacks it changes nothing), with a
progress line (Ctrl-C leaves the rest to the background: the app, the API server or the next `config
set`); recall matches words for rows still waiting. `--later` only saves the choice."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError
from .base import Command, Handler, Session, add_json, counted, print_json

if TYPE_CHECKING:
    from ..config import Settings

CONFIG_KEYS = ("llm.provider", "llm.host", "llm.model", "llm.timeout", "backup.folder", "backup.schedule",
               "ocr.enabled", "facts.enabled", "embedding.model")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _switch(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in _TRUE + _FALSE:
        raise UserError(f"'{value}' is not a valid value for {key}: use true or false.")
    return v in _TRUE


def _value(settings: Settings, key: str) -> object:
    if key == "embedding.model":
        return settings.embedding_model
    section, field = key.split(".", 1)
    return getattr(getattr(settings, section), field)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def config(p: argparse.ArgumentParser) -> Handler:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    get = sub.add_parser("get", help="show a setting (or all of them)")
    get.add_argument("key", nargs="?", choices=CONFIG_KEYS)
    add_json(get)
    put = sub.add_parser("set", help="change a setting (llm.host, backup.folder: '' means the default; "
                                            "ocr.enabled: true or false)")
    put.add_argument("key", choices=CONFIG_KEYS)
    put.add_argument("value")
    put.add_argument("--later", action="store_true",
                     help="embedding.model: only save the choice; the background re-embeds the store later")
    add_json(put)

    def run(a: argparse.Namespace, session: Session) -> int:
        from pydantic import ValidationError

        from ..config import BackupSettings, LLMSettings
        from ..embeddings import resolve_model_choice
        from ..llm import LLMConfig, host_problem

        settings = session.load_settings()
        if a.action == "set" and a.key.startswith("backup."):
            field = a.key.removeprefix("backup.")
            value: str | None = a.value.strip() or None
            if field == "folder" and value is not None:
                value = str(Path(value).expanduser().resolve())
                if Path(value).exists() and not Path(value).is_dir():
                    raise UserError(f"{value} is a file, not a folder; snapshots need a folder. Nothing was changed.")
            try:
                settings.backup = BackupSettings.model_validate({**settings.backup.model_dump(), field: value})
            except ValidationError as e:
                reason = e.errors()[0]["msg"]
                raise UserError(f"'{a.value}' is not a valid value for {a.key}: {reason}.") from None
            session.save_settings(settings)
        elif a.action == "set" and a.key == "ocr.enabled":
            settings.ocr.enabled = _switch(a.key, a.value)
            session.save_settings(settings)
        elif a.action == "set" and a.key == "facts.enabled":
            settings.facts.enabled = _switch(a.key, a.value)
            session.save_settings(settings)
        elif a.action == "set" and a.key == "embedding.model":
            choice = resolve_model_choice(a.value)
            if choice.startswith("ollama:") and not a.later:  # a model in a server that may be down or lack it
                from ..engine import Engine

                try:
                    Engine.check_embedding_model(choice, settings)
                except UserError as e:
                    raise UserError(f"{e} Nothing was changed (add --later to save the choice anyway).") from None
            settings.embedding_model = choice
            session.save_settings(settings)
            if not a.later and settings.embedding_model != "none":  # none: words only, nothing to embed
                _reembed(session)
        elif a.action == "set":
            field = a.key.removeprefix("llm.")
            value = None if field == "host" and not a.value.strip() else a.value.strip()
            data = {**settings.llm.model_dump(), field: value}
            try:
                LLMConfig.model_validate(data)  # what the router will accept
            except ValidationError as e:
                reason = e.errors()[0]["msg"]
                raise UserError(f"'{a.value}' is not a valid value for {a.key}: {reason}.") from None
            if field == "host" and (problem := host_problem(value, settings.llm.provider)):
                raise UserError(problem)
            settings.llm = LLMSettings.model_validate(data)
            session.save_settings(settings)
        keys = [a.key] if a.key else list(CONFIG_KEYS)
        values = {k: _value(settings, k) for k in keys}
        if a.json:
            print_json(values)
            return 0
        default_host = LLMConfig.model_validate(settings.llm.model_dump()).base_url
        for k, v in values.items():
            shown = (f"(not set: {default_host})" if k == "llm.host" and v is None else
                     "(not set: backups/ in the profile, or $PERSONAL_LLM_BACKUP_DIR)" if k == "backup.folder"
                     and v is None else str(v).lower() if isinstance(v, bool) else v)
            _write(f"{k} = {shown}\n")
        return 0

    return run


def _reembed(session: Session) -> None:
    """Embed every row waiting for a vector in the chosen model's space, with a progress line on stderr."""
    import threading

    from .documents import ctrl_c_cancels

    cancel = threading.Event()
    with session.open_engine() as eng, ctrl_c_cancels(cancel):
        eng.load_embeddings()  # a model that cannot load says why (EmbeddingUnavailable)
        tty = sys.stderr.isatty()
        last = [0.0]

        def progress(done: int, total: int) -> None:
            import time

            now = time.monotonic()
            if done == total or now - last[0] > (0.2 if tty else 5.0):
                last[0] = now
                end = "\r" if tty and done < total else "\n"
                sys.stderr.write(f"re-embedding: {done:,} of {total:,}{end}")
                sys.stderr.flush()

        done = eng.embed_pending(progress=progress, cancel=cancel)  # a new space: every row waits
        left = eng.stats().pending_embeddings
    if left:
        sys.stderr.write(f"{counted(left, 'rows')} still {'waits' if left == 1 else 'wait'} for a vector; the app or the API server embeds them in the "
                         "background (recall matches their words meanwhile).\n")
    elif not done:
        sys.stderr.write("nothing to re-embed: the store already uses this model.\n")


COMMANDS = [
    Command("config", "show or change settings: config get [KEY], config set KEY VALUE", config),
]
