"""No keychain: the app asks for a passphrase (twice when choosing one), and a wrong one is asked again."""

from __future__ import annotations

import keyring.core
import pytest
from PySide6.QtWidgets import QInputDialog, QMessageBox

from tests.gui.conftest import make_desktop


@pytest.fixture
def no_keychain(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.delenv("PERSONAL_LLM_PASSPHRASE", raising=False)
    keyring.core._keyring_backend = None
    yield
    keyring.core._keyring_backend = None


def answers(monkeypatch: pytest.MonkeyPatch, *replies: str) -> list[str]:
    """Answer the passphrase dialogs in order; returns the prompts that were shown."""
    queue, prompts = list(replies), []

    def get_text(parent, title, label, echo):
        prompts.append(label)
        return (queue.pop(0), True) if queue else ("", False)

    monkeypatch.setattr(QInputDialog, "getText", staticmethod(get_text))
    monkeypatch.setattr(QMessageBox, "warning", staticmethod(lambda *a, **k: None))
    return prompts


def test_a_new_passphrase_is_typed_twice_then_reopens_and_a_wrong_one_is_asked_again(
        qtbot, qasync_loop, profile_home, lexical_embedder, no_keychain, monkeypatch):
    from engine.keys import read_profile

    prompts = answers(monkeypatch, "first try", "typo", "correct horse", "correct horse")
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    assert len(prompts) == 4 and "Choose one" in prompts[0] and "again" in prompts[3]
    assert read_profile(profile_home).key_source == "passphrase"
    app.quit()

    prompts = answers(monkeypatch, "wrong", "correct horse")
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    assert len(prompts) == 2 and "does not open" in prompts[1]
    assert app.bridge.info is not None
    app.quit()
