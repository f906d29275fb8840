"""settings.json as a short command reads it (engine/settings_file.py): the shape it checks agrees with the
settings' models, settings that fit are the models' settings once built, and a file that does not fit is read
by the models at once (the same error, the same conversions). And the engine's plain `Hit` and the boundary
model the HTTP API and MCP describe it with have the same fields and give the same JSON."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import BaseModel

from engine import config
from engine.errors import UserError
from engine.hits import Hit
from engine.models import Hit as HitModel
from engine.settings_file import DEFAULTS, SHAPE, SettingsPreview, fits, read_settings


def shape_of(annotation: Any) -> Any:
    """What engine/settings_file.py should say of a field with this annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {name: shape_of(f.annotation) for name, f in annotation.model_fields.items()}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return args
    if origin in (types.UnionType, typing.Union) and set(args) == {str, type(None)}:
        return "str?"
    if origin is list and args == (str,):
        return "[str]"
    if origin is list:
        return "[]"  # a list of sections (agents, MCP servers): left to the models
    return {str: "str", int: "int", float: "float", bool: "bool"}[annotation]


def test_the_shape_names_every_setting_as_the_models_declare_it():
    assert shape_of(config.Settings) == SHAPE
    defaults = config.Settings()
    assert {name: getattr(defaults, name) for name in DEFAULTS} == DEFAULTS


def write(home: Path, data: Any) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


FITTING = [
    {},
    {"embedding_model": "none", "vector_cache": False, "theme": "dark", "max_file_mb": 5,
     "llm": {"provider": "openai", "host": "http://localhost:1234", "model": "qwen", "api_key": "sk-x", "timeout": 30},
     "backup": {"folder": None, "schedule": "weekly"}, "ingest": {"allowed_folders": ["/tmp/a"]},
     "agents": {"agents": [], "mcp_servers": []}, "something_old": [1, 2]},
    json.loads(config.Settings().model_dump_json()),  # what the app saves
]


@pytest.mark.parametrize("data", FITTING)
def test_settings_that_fit_are_read_without_the_models_and_are_theirs_once_built(profile_home: Path, data):
    write(profile_home, data)
    read = read_settings(profile_home)
    assert isinstance(read, SettingsPreview)
    built = config.load_settings(profile_home)
    assert read.full() == built
    assert (read.embedding_model, read.vector_cache) == (built.embedding_model, built.vector_cache)
    assert read.llm == built.llm


def test_without_a_settings_file_the_defaults():
    preview = read_settings(Path("/nonexistent/profile"))
    assert isinstance(preview, SettingsPreview) and preview.full() == config.Settings()


@pytest.mark.parametrize("data", [
    {"max_steps": 1, "agents": {"agents": [{"name": "Gardener", "tools": ["today"]}]}},  # an agent: the models'
    {"api_port": "8766"},  # a number as text: the models convert it
    {"vector_cache": 1},
    {"max_file_mb": True},
    {"llm": {"provider": "OLLAMA"}},
    {"embedding_model": "\ud800"},  # a lone surrogate (a JSON escape): the models judge it
])
def test_settings_that_do_not_fit_are_read_by_the_models_at_once(profile_home: Path, data):
    write(profile_home, data)
    assert not fits(data, SHAPE)

    def outcome(read: Any) -> Any:
        try:
            return read(profile_home)
        except UserError as e:
            return f"error: {e}"

    got = outcome(read_settings)
    assert not isinstance(got, SettingsPreview)
    assert got == outcome(config.load_settings)


@pytest.mark.parametrize("text", ['{"theme": "purple"}', '{"llm": {"timeout": "soon"}}', "[1, 2]", "{not json",
                                  '{"hotkey": null}'])
def test_a_broken_settings_file_is_the_same_error(profile_home: Path, text):
    write(profile_home, text)
    with pytest.raises(UserError) as expected:
        config.load_settings(profile_home)
    with pytest.raises(UserError) as got:
        read_settings(profile_home)
    assert str(got.value) == str(expected.value)
    assert "is not valid" in str(got.value)


def test_the_hit_and_its_json_model_have_the_same_fields_and_json():
    assert [f.name for f in dataclasses.fields(Hit)] == list(HitModel.model_fields)
    least = Hit(id="x", kind="fact", text="t", score=0, similarity=0, importance=0, recency=0)
    assert least.model_dump() == HitModel(**least.model_dump()).model_dump()  # the same defaults
    hit = Hit(id="mem_1", kind="chunk", text="Text ⚠", score=np.float64(0.5), similarity=0.25, cosine=np.float32(0.5),
              importance=1, recency=0.125, document_id="doc_1", locator="page 2", via=["fts", "vector"])
    assert type(hit.score) is float and type(hit.cosine) is float and type(hit.importance) is float
    as_model = HitModel.model_validate(hit)  # what the API and MCP send
    assert json.dumps(hit.model_dump(mode="json")) == json.dumps(as_model.model_dump(mode="json"))
    assert Hit.of({**as_model.model_dump(mode="json"), "added_later": 1}) == hit
