"""Admission policy for knowledge-graph triples: a pure function that runs before anything is written.

Extractors (language models) are untrusted callers. `admit` turns away what would make a poor graph
node: pronouns, generic nouns ("thing", "the user"), file names, paths, URLs and domains, e-mail
addresses, code symbols (`snake_case`, `camelCase`, `foo()`, `a.b.c`), strings without letters, and
empty or overlong names or relations. Each refusal carries a short reason key; the graph counts them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MAX_ENTITY_CHARS = 80
MAX_ENTITY_WORDS = 8
MAX_RELATION_CHARS = 60
MAX_RELATION_WORDS = 6

PRONOUNS = frozenset(
    """
    i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its
    itself we us our ours ourselves they them their theirs themselves this that these those who whom whose
    which what someone somebody anyone anybody everyone everybody noone nobody something anything
    everything nothing one oneself
    """.split()
)

GENERIC_NOUNS = frozenset(
    """
    thing things stuff person people persons user users human humans man men woman women guy guys individual
    someone somebody item items object objects entity entities element elements system systems data
    information info file files document documents doc docs folder directory page pages text message
    messages chat conversation note notes memory memories place places location time times date day days
    way ways part parts type types kind kinds example examples problem problems issue issues idea ideas
    question questions answer answers topic topics subject subjects concept concepts name names value values
    result results task tasks work job company organization organisation group team project projects
    app apps application applications tool tools software program code function method class variable
    assistant ai bot chatbot model models service website site link url email address number amount
    something anything everything nothing other others self unknown none null n/a na
    """.split()
)

# Leading words that do not change what a generic noun refers to ("the user", "my notes").
DETERMINERS = frozenset("the a an my your our their his her its this that these those some any".split())

FILE_EXTENSIONS = frozenset(
    """
    txt md markdown rst pdf doc docx odt rtf epub xls xlsx ods csv tsv ppt pptx odp json yaml yml toml ini
    cfg conf xml html htm css js mjs ts tsx jsx py pyc ipynb rb php java kt go rs c h cpp hpp cs swift sh
    bash zsh ps1 bat exe dll so dylib app dmg deb rpm zip tar gz tgz bz2 xz 7z rar iso img png jpg jpeg
    gif bmp svg webp ico tif tiff heic mp3 wav flac ogg m4a mp4 mov avi mkv webm log db sqlite lock env
    """.split()
)

TOP_LEVEL_DOMAINS = frozenset(
    """
    com org net edu gov mil int io ai dev app co uk de fr es it nl be ch at pt br us ca au nz jp cn in ru
    se no dk fi pl cz ie eu info biz me tv xyz site online tech cloud blog shop page
    """.split()
)

_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|www\.|mailto:)", re.IGNORECASE)
_EMAIL = re.compile(r"^[^\s@]+@[^\s@]+\.[^\s@]+$")
_DOTTED = re.compile(r"^[\w-]+(?:\.[\w-]+)+$")
_FILE = re.compile(r"^[\w .,()+~-]*[\w)]\.([A-Za-z0-9]{1,8})$")
_PATH_START = re.compile(r"^(?:~|\.{1,2})?[/\\]|^[A-Za-z]:[/\\]")
_CALL = re.compile(r"^[A-Za-z_][\w.:]*\(.*\)$")
_CAMEL = re.compile(r"^[a-z][a-z0-9]+(?:[A-Z][a-z0-9]+)+$")
_CODE_CHARS = re.compile(r"[`{}\[\]<>=;|]|::|->|=>")
_EDGE_PUNCT = "\"'`“”‘’«».,;:!?()[]{}<>* \t\n"


@dataclass(frozen=True)
class Admission:
    """The verdict on one candidate triple. `reason` (when refused) is a key such as "pronoun"."""

    ok: bool
    reason: str | None = None
    field: str | None = None  # "subject", "relation" or "object": which part was refused


def clean(text: str) -> str:
    """The name as it would be stored: NFKC, single spaces, no surrounding quotes or punctuation."""
    text = " ".join(unicodedata.normalize("NFKC", text or "").split())
    return text.strip(_EDGE_PUNCT)


def entity_problem(name: str) -> str | None:
    """Why `name` cannot be a graph entity, or None when it can."""
    raw = " ".join((name or "").split())
    text = clean(raw)
    if not text:
        return "empty"
    if len(text) > MAX_ENTITY_CHARS or len(text.split()) > MAX_ENTITY_WORDS:
        return "too_long"
    if not any(ch.isalpha() for ch in text):
        return "no_letters"
    lowered = text.casefold()
    if lowered in PRONOUNS and not (text.isupper() and len(text) > 1):  # "US", "IT" are names
        return "pronoun"
    words = lowered.split()
    while len(words) > 1 and words[0] in DETERMINERS:
        words = words[1:]
    if " ".join(words) in GENERIC_NOUNS or lowered in GENERIC_NOUNS:
        return "generic"
    if _URL.match(raw) or _URL.match(text):
        return "url"
    if _EMAIL.match(text):
        return "email"
    slashes = text.count("/") + text.count("\\")
    last_part = text.replace("\\", "/").rsplit("/", 1)[-1]
    if _PATH_START.match(raw) or (slashes and " " not in text and (slashes >= 2 or _FILE.match(last_part))):
        return "path"
    if _CALL.match(raw) or _CODE_CHARS.search(raw):
        return "code_symbol"
    file = _FILE.match(text)
    if file and file.group(1).lower() in FILE_EXTENSIONS:
        return "file_name"
    if _DOTTED.match(text) and not all(len(label) == 1 and label.isupper() for label in text.split(".")):  # U.S.
        return "domain" if text.rsplit(".", 1)[-1].lower() in TOP_LEVEL_DOMAINS else "code_symbol"
    if " " not in text and ("_" in text or _CAMEL.match(text)):
        return "code_symbol"
    return None


def relation_problem(relation: str) -> str | None:
    """Why `relation` cannot label an edge, or None when it can."""
    raw = " ".join((relation or "").split())
    text = clean(raw)
    if not text:
        return "relation_empty"
    if len(text) > MAX_RELATION_CHARS or len(text.split()) > MAX_RELATION_WORDS:
        return "relation_too_long"
    if not any(ch.isalpha() for ch in text):
        return "relation_no_letters"
    if _URL.match(text) or _CODE_CHARS.search(raw) or _CALL.match(raw):
        return "relation_code"
    return None


def admit(subject: str, relation: str, obj: str) -> Admission:
    """Admit or refuse one (subject, relation, object) candidate, with the first reason found."""
    for part, problem in (
        ("subject", entity_problem(subject)),
        ("relation", relation_problem(relation)),
        ("object", entity_problem(obj)),
    ):
        if problem is not None:
            return Admission(False, problem, part)
    if clean(subject).casefold() == clean(obj).casefold():
        return Admission(False, "self_loop", "object")
    return Admission(True)
