"""The CLI contract, run as a user would: the installed `personal-llm` command in a fresh profile."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CLI = shutil.which("personal-llm", path=str(Path(sys.executable).parent)) or "personal-llm"


def run(*args: str, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, input=input, timeout=300,
                          env={**os.environ, **(env or {})})


def ok_json(*args: str):
    p = run(*args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_contract_in_a_fresh_profile(profile_home: Path):
    assert not profile_home.exists()
    a = ok_json("remember", "My sister Alice lives in Lisbon.", "--project", "family")
    assert a["id"].startswith("mem_") and a["project"] == "family"
    b = ok_json("remember", "Dentist appointment moved to Friday.", "--kind", "episodic", "--at", "2026-11-20T09:00")
    assert b["kind"] == "episodic" and b["at"].startswith("2026-11-20")
    hits = ok_json("recall", "Which city is my sibling based in?", "-k", "1")
    assert hits[0]["id"] == a["id"]
    assert {"id", "kind", "text", "score"} <= hits[0].keys()
    assert ok_json("recall", "sibling city", "--project", "work") == []
    assert len(ok_json("recall", "sibling dentist", "--k", "1")) == 1  # --k is -k (not taken for --kind)
    stats = ok_json("stats")
    assert stats["memories"] == 2 and stats["by_kind"]["episodic"] == 1
    assert stats["embedding_model"] == "all-MiniLM-L6-v2" and "documents" in stats and "chunks" in stats
    assert {"nodes", "edges"} <= stats.keys()
    gone = ok_json("forget", a["id"])
    assert gone["id"] == a["id"]
    assert all(h["id"] != a["id"] for h in ok_json("recall", "Alice Lisbon sister"))


def test_human_output_is_a_table_not_a_dump(profile_home: Path):
    assert run("remember", "The garage code is 4321.").returncode == 0
    p = run("recall", "garage code")
    assert p.returncode == 0 and "garage code" in p.stdout and "{" not in p.stdout
    assert "memories" in run("stats").stdout
    # on an 80-column terminal the text keeps the room (the project goes under it), the log reads as words
    assert run("remember", "The bike lock code is 0451.", "--project", "errands").returncode == 0
    listing = run("list", env={"COLUMNS": "80"}).stdout
    assert "The bike lock code is 0451." in listing and "project: errands" in listing, listing
    audit = run("audit", env={"COLUMNS": "80"}).stdout
    assert "remember" in audit and "kind fact" in audit and "{" not in audit, audit


def test_an_empty_listing_says_why_instead_of_that_nothing_is_stored(profile_home: Path):
    """A --project with a typo or another case ("Work" for "work") listed nothing as "No memories yet.", as if
    everything had been lost; it says there is no such project, and which there are."""
    assert run("list").stdout.strip() == "No memories yet."
    assert run("remember", "The quarterly report is due on Friday.", "--project", "work").returncode == 0
    wrong = run("list", "--project", "Work", env={"COLUMNS": "200"})
    assert wrong.returncode == 0
    assert wrong.stdout.strip() == "No memories match. There is no project 'Work'; the projects are: work."
    assert run("list", "--archived").stdout.strip() == "No memories match."  # a filter, not an empty store
    docs = run("documents", "--project", "Work", env={"COLUMNS": "200"}).stdout.strip()
    assert docs == "No documents match. There is no project 'Work'; the projects are: work."
    missed = run("recall", "quarterly report", "--project", "[Work]", env={"COLUMNS": "200"}).stdout.strip()
    assert missed == "Nothing in memory matches that. There is no project '[Work]'; the projects are: work."
    assert "quarterly report" in run("list", "--project", "work").stdout


def test_text_that_looks_like_markup_is_shown_literally(profile_home: Path):
    text = "Template note: close with [/bold] and colour with [red]x[/red]."
    mid = ok_json("remember", text, "--project", "[dev]")["id"]
    for args in (("recall", "template note colour"), ("list",), ("get", mid)):
        p = run(*args, env={"COLUMNS": "400"})
        assert p.returncode == 0, p.stderr
        assert "[/bold]" in p.stdout and "[red]x[/red]" in p.stdout and "[dev]" in p.stdout


def test_terminal_control_sequences_in_a_memory_are_shown_not_obeyed(profile_home: Path):
    text = "Build \x1b[31mfailed\x1b[0m again \x1b]0;PWNED\x07 see \x1b]0;TITLE log\x00 today."
    made = run("remember", "-", "--project", "ops", "--json", input=text)  # an argument cannot hold a NUL
    assert made.returncode == 0, made.stderr
    refused = run("remember", "Build fixed.", "--project", "ops\x1b[2J")  # a project name is a label: refused
    assert refused.returncode == 1 and "control characters" in refused.stderr and "\x1b" not in refused.stderr
    mid = json.loads(made.stdout)["id"]
    # stored as given (--json is for programs), but for the NUL: never content, and a server cannot store it
    assert ok_json("get", mid)["text"] == text.replace("\x00", "")
    for args in (("recall", "build failed again"), ("list",), ("get", mid)):
        p = run(*args, env={"COLUMNS": "400"})
        assert p.returncode == 0, p.stderr
        assert "\x1b" not in p.stdout and "\x07" not in p.stdout and "\x00" not in p.stdout, (args, p.stdout)
        assert "failed" in p.stdout and "again" in p.stdout


def test_errors_are_clear_with_nonzero_exit_and_no_traceback(profile_home: Path):
    for args in (("forget", "mem_doesnotexist"), ("remember", ""), ("remember", "x", "--at", "someday"),
                 ("recall", "x", "-k", "0"), ("remember", "\u200b\u202e"), ("list", "-n", "0"), ("list", "-n", "-1"),
                 *(("serve", "--port", "0", f"--max-body-mb={v}") for v in ("-5", "nan", "inf", "0"))):
        p = run(*args)
        assert p.returncode != 0, args
        assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr, p.stderr
    p = run("remember", "x", "--kind", "dream")
    assert p.returncode == 2 and "invalid choice" in p.stderr
    bare = run()  # the command alone lists the commands, not "the following arguments are required"
    assert bare.returncode == 2 and "required" not in bare.stderr
    assert "remember" in bare.stderr and "recall" in bare.stderr and "Traceback" not in bare.stderr


def test_an_edit_is_embedded_before_the_command_ends(profile_home: Path):
    made = ok_json("remember", "Placeholder note about nothing much.")
    run("remember", "My dermatologist is Dr. Silva on Elm Street.")
    p = run("update", made["id"], "--text", "My cardiologist is Dr. Okonkwo at St. Mary's hospital.")
    assert p.returncode == 0, p.stderr
    assert ok_json("get", made["id"])["embedded"] is True
    assert ok_json("stats")["pending_embeddings"] == 0
    hits = ok_json("recall", "heart doctor", "-k", "1")
    assert hits and hits[0]["id"] == made["id"] and "vector" in hits[0]["via"]
    p = run("update", made["id"])
    assert p.returncode != 0 and "Nothing to change" in p.stderr
    # the new text as a plain argument, as `remember` takes it
    assert run("update", made["id"], "My cardiologist is Dr. Okonkwo in Leeds.").returncode == 0
    assert ok_json("get", made["id"])["text"] == "My cardiologist is Dr. Okonkwo in Leeds."
    p = run("update", made["id"], "One text", "--text", "Another text")
    assert p.returncode != 0 and "not both" in p.stderr and "Traceback" not in p.stderr
    assert ok_json("get", made["id"])["text"] == "My cardiologist is Dr. Okonkwo in Leeds."


def test_arguments_a_script_gets_wrong_are_refused_or_read(profile_home: Path, tmp_path: Path):
    (tmp_path / "secret.txt").write_text("Not meant to be ingested.", encoding="utf-8")
    p = subprocess.run([CLI, "ingest", ""], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode != 0 and "empty path" in p.stderr and "Traceback" not in p.stderr
    assert ok_json("stats")["documents"] == 0
    # bytes that are not UTF-8 (a Latin-1 terminal, a file name) are read, not a crash
    p = run("remember", os.fsdecode(b"caf\xe9 with Bob"))
    assert p.returncode == 0, p.stderr
    p = subprocess.run([CLI, "remember", "-"], input=b"\xff\xfetea with Ann", capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    texts = {m["text"] for m in ok_json("list")}
    assert texts == {"caf\ufffd with Bob", "\ufffd\ufffdtea with Ann"}
    hits = ok_json("recall", os.fsdecode(b"caf\xe9"), "-k", "1")
    assert hits and hits[0]["text"] == "caf\ufffd with Bob"
    for v in ("nan", "inf", "-1"):
        p = run("ingest", str(tmp_path), f"--max-mb={v}")
        assert p.returncode != 0 and "--max-mb must be" in p.stderr, p.stderr


def test_an_id_recall_printed_can_be_read_with_get(profile_home: Path, tmp_path: Path):
    note = tmp_path / "boat.md"
    note.write_text("# Boat\n\nThe boat's engine oil is changed every 100 hours.\n", encoding="utf-8")
    assert run("ingest", str(note)).returncode == 0
    hit = ok_json("recall", "when is the engine oil changed?", "-k", "1")[0]
    assert hit["id"].startswith("chk_")
    passage = ok_json("get", hit["id"])
    assert "100 hours" in passage["text"] and passage["document_path"] == str(note)
    p = run("get", hit["id"])
    assert p.returncode == 0 and "100 hours" in p.stdout and passage["document_id"] in p.stdout
    doc = ok_json("get", passage["document_id"])
    assert doc["path"] == str(note) and doc["chunks"] == 1
    p = run("forget", hit["id"])
    assert p.returncode != 0 and "forget doc_" in p.stderr
    assert ok_json("stats")["chunks"] == 1  # nothing was forgotten


def test_missing_key_is_a_clear_refusal(profile_home: Path):
    assert run("remember", "keep me").returncode == 0
    import keyring

    from engine.keys import SERVICE, read_profile

    keyring.delete_password(SERVICE, read_profile(profile_home).key_account)
    p = run("stats")
    assert p.returncode == 1 and "not in the keychain" in p.stderr and "Traceback" not in p.stderr


def test_every_command_is_documented_in_the_readme():
    from engine.cli import COMMANDS, build_parser

    build_parser()
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    contract = {"remember", "recall", "ingest", "ask", "forget", "stats", "consolidate", "serve", "mcp",
                "export", "import"}
    assert contract <= set(COMMANDS)
    missing = [c for c in COMMANDS if f"personal-llm {c}" not in readme]
    assert not missing, f"commands missing from README.md: {missing}"


def test_extract_and_consolidate_fail_plainly_when_no_language_model_answers(profile_home: Path):
    assert run("config", "set", "llm.host", "http://127.0.0.1:9").returncode == 0  # nothing listens there
    empty = run("extract")
    assert empty.returncode == 0, empty.stderr  # nothing waits for a model: nothing failed
    assert run("remember", "Alice moved to Lisbon in May.").returncode == 0
    assert run("remember", "Dinner with Bob on Friday.", "--kind", "episodic").returncode == 0
    for args in (("extract",), ("consolidate",), ("extract", "--json")):
        p = run(*args)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        assert p.stderr.startswith("error: ") and "language model" in p.stderr and "Traceback" not in p.stderr
        if "--json" not in args:  # the reason once, on stderr; what was done on stdout
            assert "language model" not in p.stdout
    assert json.loads(run("extract", "--json").stdout)["waiting"] is True
    assert "Decayed" in run("consolidate").stdout
