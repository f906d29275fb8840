"""The admission policy for graph triples: a pure function, tested without a database."""

from __future__ import annotations

import pytest

from engine.admission import Admission, admit, clean, entity_problem, relation_problem


@pytest.mark.parametrize("name", [
    "Alice", "Alice Smith", "Lisbon", "Acme Corp", "St. Louis", "New York", "U.S.", "US", "IT", "C#",
    "AC/DC", "iPhone", "macOS", "Dr. Maria López", "Porto 2024 marathon",
])
def test_specific_entities_are_admitted(name: str) -> None:
    assert entity_problem(name) is None


@pytest.mark.parametrize(("name", "reason"), [
    ("", "empty"), ("   ", "empty"), ('""', "empty"),
    ("x" * 81, "too_long"), ("one two three four five six seven eight nine", "too_long"),
    ("1234", "no_letters"), ("2024-05-01", "no_letters"),
    ("it", "pronoun"), ("She", "pronoun"), ("they", "pronoun"), ("someone", "pronoun"), ("I", "pronoun"),
    ("thing", "generic"), ("person", "generic"), ("the user", "generic"), ("User", "generic"),
    ("my notes", "generic"), ("the company", "generic"), ("stuff", "generic"),
    ("https://example.com/a", "url"), ("www.acme.org", "url"), ("mailto:bob@x.io", "url"),
    ("alice@example.com", "email"),
    ("example.com", "domain"), ("acme.co.uk", "domain"),
    ("/home/alice/notes.txt", "path"), ("~/Documents", "path"), ("./build", "path"), ("C:\\Users\\bob", "path"),
    ("src/engine/graph.py", "path"), ("docs/notes.md", "path"),
    ("notes.md", "file_name"), ("Q3 report.pdf", "file_name"), ("photo_2024.JPG", "file_name"),
    ("parse_config", "code_symbol"), ("__init__", "code_symbol"), ("getUserName", "code_symbol"),
    ("foo()", "code_symbol"), ("os.path.join", "code_symbol"), ("self.config.name", "code_symbol"),
    ("std::vector", "code_symbol"), ("x = 1", "code_symbol"), ("`main`", "code_symbol"),
])
def test_poor_entities_are_refused_with_a_reason(name: str, reason: str) -> None:
    assert entity_problem(name) == reason


@pytest.mark.parametrize(("relation", "reason"), [
    ("works at", None), ("is based in", None), ("sister of", None),
    ("", "relation_empty"), ("  ", "relation_empty"),
    ("is the person who at some point in time used to", "relation_too_long"),
    ("123", "relation_no_letters"), ("calls()", "relation_code"), ("->", "relation_no_letters"), ("=> owns", "relation_code"),
])
def test_relations(relation: str, reason: str | None) -> None:
    assert relation_problem(relation) == reason


def test_admit_names_the_first_refused_part() -> None:
    assert admit("Alice", "works at", "Acme") == Admission(True)
    assert admit("it", "works at", "Acme") == Admission(False, "pronoun", "subject")
    assert admit("Alice", "", "Acme") == Admission(False, "relation_empty", "relation")
    assert admit("Alice", "edited", "notes.md") == Admission(False, "file_name", "object")
    assert admit("Alice", "is", " alice. ") == Admission(False, "self_loop", "object")


def test_clean_keeps_the_name_and_drops_wrapping() -> None:
    assert clean('  "Alice   Smith". ') == "Alice Smith"
    assert clean("Ｌｉｓｂｏｎ") == "Lisbon"  # NFKC
