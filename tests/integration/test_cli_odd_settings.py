"""Settings a user can mistype: `config set` refuses them with one line and changes nothing, and a backup
folder that cannot be used is a plain error, not a crash."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.test_cli import run


def test_a_host_that_is_no_server_address_is_refused(profile_home: Path):
    for bad in ("not a url", "ftp://models.lan", "gpu-box:99999", "host:abc"):
        p = run("config", "set", "llm.host", bad)
        assert p.returncode == 1, (bad, p.stdout, p.stderr)
        assert p.stderr.startswith("error: ") and "not a server address" in p.stderr and "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    assert json.loads(run("config", "get", "llm.host", "--json").stdout) == {"llm.host": None}
    for good in ("gpu-box.local", "10.0.0.2:8080", "https://models.example.org/v1", "[::1]:11434"):
        p = run("config", "set", "llm.host", good, "--json")
        assert p.returncode == 0, (good, p.stderr)
        assert json.loads(p.stdout) == {"llm.host": good}


def test_a_file_is_not_a_backup_folder(profile_home: Path, tmp_path: Path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    p = run("config", "set", "backup.folder", str(a_file))
    assert p.returncode == 1 and "is a file, not a folder" in p.stderr, p.stderr
    assert json.loads(run("config", "get", "backup.folder", "--json").stdout) == {"backup.folder": None}


def test_backup_now_into_a_file_says_so(profile_home: Path, tmp_path: Path):
    assert run("remember", "The spare key is under the blue pot.").returncode == 0
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    p = run("backup", "now", "--json", env={"PERSONAL_LLM_BACKUP_DIR": str(a_file)})
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith(f"error: Snapshots cannot go to {a_file}") and "internal error" not in p.stderr
    assert a_file.read_text() == "not a folder"


def test_export_onto_a_device_refuses_and_leaves_it_alone(profile_home: Path, tmp_path: Path):
    """`export /dev/null` must neither replace the device (root may rename over it) nor report success."""
    import os
    import stat

    assert run("remember", "The boiler was serviced in March.").returncode == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    p = run("export", str(fifo), "--json")
    assert p.returncode == 1 and "is not a regular file" in p.stderr, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_into_a_folder_that_cannot_be_written_names_the_folder(profile_home: Path, tmp_path: Path):
    assert run("remember", "The boiler was serviced in March.").returncode == 0
    where = "/proc/personal-llm-export.jsonl"  # no file can be made there, not even by root
    p = run("export", where, "--json")
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("error: The export cannot be written to /proc:"), p.stderr
    assert "internal error" not in p.stderr and "memory store" not in p.stderr


def test_a_wrong_passphrase_is_one_plain_line_that_points_to_the_recovery_key(profile_home: Path):
    no_keychain = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    assert run("remember", "The gate code is 2468.", env={**no_keychain, "PERSONAL_LLM_PASSPHRASE":
                                                           "tulip garage seventeen"}).returncode == 0
    p = run("stats", "--json", env={**no_keychain, "PERSONAL_LLM_PASSPHRASE": "tulip garage eighteen"})
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: This passphrase does not open this memory store")
    assert "store-" not in p.stderr and "unlock --recovery-key" in p.stderr


def test_an_empty_id_is_refused_by_name_not_looked_up(profile_home: Path):
    for args in (("get", ""), ("forget", " "), ("used", "mem_x", ""), ("update", "", "--text", "x"),
                 ("restore", ""), ("resolve", "", "--keep", "both")):
        p = run(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert "the id is empty" in p.stderr and "No memory with id" not in p.stderr, (args, p.stderr)


def test_a_mistyped_recovery_key_is_said_before_a_new_passphrase_is_asked_for(profile_home: Path):
    assert run("remember", "The bike is in the shed.").returncode == 0
    p = run("unlock", "--recovery-key", "AAAA-BBBB", env={"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"})
    assert p.returncode == 1 and "That is not a recovery key" in p.stderr, p.stderr
    assert "PERSONAL_LLM_NEW_PASSPHRASE" not in p.stderr
