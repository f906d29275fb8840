"""`engine.selftest`: the installation check that the bundled apps run with --self-test, here in-process."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import keyring
import pytest
from keyrings.alt.file import PlaintextKeyring

from engine import selftest


@pytest.fixture
def temp_keyring(tmp_path, monkeypatch):
    """A file keyring in tmp_path: the self-test may write its temporary entry there, and nowhere else."""
    kr = PlaintextKeyring()
    kr.file_path = str(tmp_path / "keyring" / "keyring_pass.cfg")
    old = keyring.get_keyring()
    keyring.set_keyring(kr)
    monkeypatch.setenv("PERSONAL_LLM_HOME", str(tmp_path / "users-own-profile"))
    monkeypatch.setenv("PERSONAL_LLM_PASSPHRASE", "the user's own passphrase")
    yield kr
    keyring.set_keyring(old)


def _leftover_temp_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("personal-llm-selftest-*")}


def _entries(kr: PlaintextKeyring) -> list[str]:
    """The (escaped) account names stored in the file keyring, all services."""
    import configparser

    cp = configparser.RawConfigParser()
    cp.read(kr.file_path)
    return [opt for sec in cp.sections() for opt in cp.options(sec)]


def test_lexical_self_test_with_passphrase_passes_and_cleans_up(temp_keyring, capsys):
    before = _leftover_temp_dirs()
    assert selftest.main(["--lexical-only", "--no-keychain"]) == 0
    out = capsys.readouterr().out
    for name in ("runtime", "store", "sqlite-vec", "lexical recall", "encrypted", "cleanup"):
        assert f"PASS  {name}" in out
    assert "random passphrase" in out
    assert "FAIL" not in out and "OK: 7/7" not in out and "OK: 6/6 checks passed" in out
    # the caller's environment is restored, nothing is left behind, the keychain was not used
    assert os.environ["PERSONAL_LLM_PASSPHRASE"] == "the user's own passphrase"
    assert os.environ["PERSONAL_LLM_HOME"].endswith("users-own-profile")
    assert not Path(os.environ["PERSONAL_LLM_HOME"]).exists()
    assert _leftover_temp_dirs() <= before
    assert _entries(temp_keyring) == []


def test_keychain_entry_is_temporary(temp_keyring, capsys):
    temp_keyring.set_password("personal-llm", "store-users-real-store", "ab" * 32)
    assert selftest.main(["--lexical-only", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    store = next(c for c in report["checks"] if c["name"] == "store")
    assert "keychain (temporary entry)" in store["detail"]
    cleanup = next(c for c in report["checks"] if c["name"] == "cleanup")
    assert "keychain entry store-" in cleanup["detail"]
    # only the user's own entry remains, untouched
    assert _entries(temp_keyring) == ["store_2dusers_2dreal_2dstore"]
    assert temp_keyring.get_password("personal-llm", "store-users-real-store") == "ab" * 32


def test_a_failing_check_fails_the_run(temp_keyring, capsys, monkeypatch):
    # "key_source" is in profile.json, in plaintext by design: the encryption check must catch it.
    monkeypatch.setattr(selftest, "SECRET_WORDS", ("key_source",))
    assert selftest.main(["--lexical-only", "--no-keychain"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  encrypted" in out and "plaintext found: profile.json" in out
    assert "PASS  cleanup" in out and "FAILED: 5/6" in out


def test_cli_command(temp_keyring, capsys):
    from engine import cli

    assert "self-test" in cli.COMMANDS
    assert cli.main(["self-test", "--lexical-only", "--no-keychain", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


@pytest.mark.slow
def test_full_self_test_with_the_bundled_model(temp_keyring, capsys):
    assert selftest.main([]) == 0
    out = capsys.readouterr().out
    assert "PASS  semantic recall" in out and "paraphrase found the fact" in out
    assert "OK: 7/7 checks passed" in out
    assert _entries(temp_keyring) == []
