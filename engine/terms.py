"""The words of a question or a text, as recall and both storage backends see them: the meaningful terms of a
query (no SQL here: each backend turns them into its own full-text query), questions about the app's own
activity, and the sentence of a passage that answers a query best."""

from __future__ import annotations

import re

WORD = re.compile(r"\w+", re.UNICODE)  # a word of a query or a memory (engine.memories.content_words)

# Question and function words: matching them says nothing about relevance.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her
    here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
    now of off on once only or other our ours ourselves out over own same she should so some such than that
    the their theirs them themselves then there these they this those through to too under until up very was
    we were what when where which while who whom why will with would you your yours yourself yourselves
    did does tell know remember ever anything something thing things much many kind sort yes
    """.split()
)


def terms(query: str) -> list[str]:
    """The query's meaningful words, lowercased, in order, without duplicates."""
    words = [w.lower() for w in WORD.findall(query)]
    kept = [w for w in words if w not in STOPWORDS and not (len(w) == 1 and not w.isdigit())]
    out: list[str] = []
    for w in kept or words:
        if w not in out:
            out.append(w)
    return out


# A conversation turn stored as "Name: text": who said it (a label of one to three words, no digits).
_SPEAKER = re.compile(r"^\s*([^\W\d_][^\W\d_'’.-]*(?:[ '’.-][^\W\d_]+){0,2}):\s", re.UNICODE)


def speaker(text: str) -> str | None:
    """Who said a turn stored as "Name: text", lowercased; None for any other text."""
    m = _SPEAKER.match(text or "")
    return m.group(1).lower() if m else None


# Who a conversation turn speaks of: its speaker ("I", "my", "we"; "Im", "ive" as typed in chats; "I'm" is read
# as "I" "m") or only the person it speaks to ("you", "your"; "u", "ur").
FIRST_PERSON = frozenset("i me my mine myself we our ours ourselves im ive".split())
SECOND_PERSON = frozenset("you your yours yourself yourselves u ur ya".split())


def voice(text: str) -> str | None:
    """For a turn "Name: text": "self" when it speaks of its speaker (a first-person word), "you" when only of
    the person spoken to, "none" when of neither; None for any other text."""
    if speaker(text) is None:
        return None
    words = {w.lower() for w in WORD.findall(text.split(":", 1)[1])}
    if words & FIRST_PERSON:
        return "self"
    return "you" if words & SECOND_PERSON else "none"


def _bigrams(word: str) -> set[str]:
    return {word[i : i + 2] for i in range(len(word) - 1)}


def named_speakers(query: str, speakers: set[str]) -> set[str]:
    """The speakers (lowercased labels) the question names: a word equal to a label's first word, or a name
    written otherwise ("Mohammed" for "Muhhamed": capitalised, same initial, at least 4 letters, half its
    letter pairs shared)."""
    out = set()
    for w in WORD.findall(query):
        low = w.lower()
        for who in speakers:
            first = who.split()[0]
            if low == first or low == who:
                out.add(who)
            elif (w[0].isupper() and len(low) >= 4 and len(first) >= 4 and low[0] == first[0]
                  and 4 * len(_bigrams(low) & _bigrams(first)) >= len(_bigrams(low)) + len(_bigrams(first))):
                out.add(who)
    return out


def with_speaker(query: str, addressed: dict[str, tuple[str, str | None]]) -> str:
    """The question with each name one speaker calls the other replaced by that speaker's own label."""
    for name, (_by, to) in addressed.items():
        if to:
            query = re.sub(rf"\b{re.escape(name)}\b", to.title(), query, flags=re.I)
    return query


# A question about what the user did with the app ("What did I add today?", "Which files did I import last
# week?"): only such questions are answered from the app's own events ("Ingested X (N chunks)").
_ACTIVITY_VERBS = re.compile(
    r"\b(add|added|adding|ingest\w*|import|imported|importing|upload\w*|dropped|indexed|scanned)\b", re.I)
_ACTIVITY_NOUNS = re.compile(r"\b(files?|documents?|pdfs?|uploads?|imports?)\b", re.I)
_ACTIVITY_TIME = re.compile(r"\b(today|yesterday|this (week|month|morning)|last (week|month|night)|recent\w*|lately"
                            r"|ago|latest|new)\b", re.I)


def asks_about_activity(query: str) -> bool:
    """Is this a question about what was added to memory (not about what the memories say)?"""
    return bool(_ACTIVITY_VERBS.search(query)) or bool(_ACTIVITY_NOUNS.search(query) and _ACTIVITY_TIME.search(query))


_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])\s+")


def _same_word(word: str, term: str) -> bool:
    """A word of the text stands for a query term: equal, or one an inflection of the other (passport(s))."""
    if word == term:
        return True
    short, long_ = sorted((word, term), key=len)
    return len(short) >= 4 and long_.startswith(short) and len(long_) - len(short) <= 3


def focus(passage: str, query: str, max_chars: int = 320) -> str:
    """The sentence(s) of a passage that hold the most of the query's words (its most informative part),
    or the passage itself when none does: what to show a person of a long memory's matching window."""
    ts = terms(query)
    sentences = [x for x in _SENTENCE_END.split(passage.strip()) if x]
    if not ts or len(sentences) < 2:
        return passage
    def score(sentence: str) -> int:
        words = {w.lower() for w in WORD.findall(sentence)}
        return sum(any(_same_word(w, t) for w in words) for t in ts)
    scores = [score(x) for x in sentences]
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    if scores[best] == 0:
        return passage
    out = sentences[best]
    nxt = best + 1
    while nxt < len(sentences) and len(out) + 1 + len(sentences[nxt]) <= max_chars and len(out) < 30:
        out += " " + sentences[nxt]  # a short sentence reads better with the one after it
        nxt += 1
    return out
