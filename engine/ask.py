"""Ask: grounded answers with numbered citations from memory (`engine.answers`, see Answers.ask).

One question goes: recall (memories and document chunks) → the relevance floor → a prompt with the
passages numbered, and the knowledge graph's facts around the question, inside `<untrusted_content>`
tags → the model's answer, streamed → an optional verification call → the exchange stored in
`conversations`/`messages` (never in memories) → audit.

What a caller gets back, by case:

- Nothing relevant in memory (`relevance.answerable` is False): "I don't have that in memory.",
  `grounded` False, no sources. The model is not asked, so it cannot guess.
- No usable model (provider "none", server not running, model not installed): the best passages with
  their [n] markers as the answer, `llm_available` False and a `notice` saying why and how to fix it.
  This is not an error: the passages are the answer memory can give.
- The model was reached but failed (server errors that outlast the retries, a broken stream, an empty
  answer): `AskFailed`, an `LLMError` carrying the sources and any partial text, so callers can still
  show the passages. Nothing is stored.
- Verification could not be done (unreadable output twice, server error): the answer stands and
  `verification.checked` is False with the reason in `verification.detail`.

`on_token` receives the answer in pieces; joined they always equal `AskResult.answer` (an answer that
is not streamed by a model arrives as one piece).

Privacy: the question, prompts and answers are never logged or audited (ids and counts only); the
transcript lives only in the encrypted store.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import cast

from pydantic import BaseModel, Field

from .context import Context
from .errors import Cancelled, DiskFull, StoreReadOnly, UserError
from .graph import Graph
from .hits import Hit
from .language import LanguageModel
from .llm import LLMError, LLMModelMissing, LLMUnavailable, Message
from .memories import Memories
from .prompts import prompt, untrusted
from .recall import Retriever
from .relevance import answerable
from .store import conversations

log = logging.getLogger(__name__)

NOT_IN_MEMORY = "I don't have that in memory."
NO_LLM_NOTICE = "The language model is not available — here are the best passages from memory."
EMPTY_ANSWER = "The language model returned an empty answer. Try again, or choose another model in settings."
HISTORY_MESSAGES = 6  # a continued conversation's last three exchanges go into the prompt
PROMPT_SOURCE_CHARS = 4_000  # a long memory or chunk is cut in the prompt (the Source keeps it whole)
PASSAGES_SHOWN = 3  # without a model, the answer quotes this many of the best passages
PASSAGE_CHARS = 500
TITLE_CHARS = 80

# the model's own "not in memory" answer (rule 3 of the answer prompt)
_REFUSAL = re.compile(r"^\W*i (?:do not|don't|don’t) have (?:that|this|it) in (?:my |your )?memory", re.IGNORECASE)


# -- data ------------------------------------------------------------------------------------------


class Source(BaseModel):
    """One passage given to the model. `n` is its citation number: "[n]" in the answer means this."""

    n: int
    id: str
    kind: str  # fact | episodic | procedural | chunk
    text: str
    score: float
    similarity: float
    at: str | None = Field(default=None, description="When it happened or was recorded (ISO)")
    document_id: str | None = None
    document_title: str | None = None
    document_path: str | None = None
    locator: str | None = None
    conflict: str | None = Field(default=None, description="A sentence for people when this fact is contested")
    passage: str | None = Field(default=None, description="For a long memory: the part that matched best")

    @classmethod
    def from_hit(cls, n: int, hit: Hit) -> Source:
        return cls(
            n=n, id=hit.id, kind=hit.kind, text=hit.text, score=hit.score, similarity=hit.similarity,
            at=hit.at or hit.created_at, document_id=hit.document_id, document_title=hit.document_title,
            document_path=hit.document_path, locator=hit.locator, conflict=hit.conflict, passage=hit.passage,
        )


class Verdict(BaseModel):
    """What the verification call must return (the model's JSON)."""

    supported: bool
    unsupported_claims: list[str] = Field(default_factory=list)


class Verification(BaseModel):
    """The verification pass. `checked` False: it could not be done (`detail` says why) — not a pass."""

    checked: bool
    supported: bool = Field(description="Every claim is backed by the sources (False when not checked)")
    unsupported_claims: list[str] = Field(default_factory=list)
    detail: str | None = None


class AskResult(BaseModel):
    answer: str
    sources: list[Source] = Field(description="The passages given to the model, numbered as cited")
    grounded: bool = Field(description="False when memory does not hold the answer")
    llm_available: bool
    model: str | None = Field(default=None, description="The model that wrote the answer, if one did")
    conversation_id: str
    verification: Verification | None = Field(
        default=None, description="Only when asked for and a model wrote an answer from memory")
    notice: str | None = Field(default=None, description="For people: why the answer is limited, and the fix")


class AskFailed(LLMError):
    """The model was reached but gave no usable answer. Carries what can still be shown."""

    def __init__(self, message: str, sources: list[Source], partial: str = "") -> None:
        super().__init__(message)
        self.sources = sources
        self.partial = partial


# -- prompts ---------------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _origin(s: Source) -> str:
    """Where a source comes from, for the prompt: its kind or document, and its date."""
    if s.kind == "chunk":
        doc = f'document "{s.document_title}"' if s.document_title else "document"
        where = f"{doc}, {s.locator}" if s.locator else doc
    else:
        where = s.kind
    return f"{where}, {s.at[:10]}" if s.at else where


def _source_text(s: Source) -> str:
    """The source as the model reads it: cut to PROMPT_SOURCE_CHARS, keeping the passage that matched."""
    head = _clip(s.text, PROMPT_SOURCE_CHARS)
    if not s.passage or len(s.text) <= PROMPT_SOURCE_CHARS or s.passage in head:
        return head
    return _clip(s.text, max(200, PROMPT_SOURCE_CHARS - len(s.passage) - 8)) + "\n[…]\n" + s.passage


def sources_block(sources: Sequence[Source], graph_facts: Sequence[str] = ()) -> str:
    """The numbered passages (and graph facts), all inside one untrusted block."""
    parts = []
    for s in sources:
        entry = f"[{s.n}] ({_origin(s)})\n{_source_text(s)}"
        if s.conflict:
            entry += f"\nCONFLICT: {s.conflict}"
        parts.append(entry)
    if graph_facts:
        parts.append("Facts from the knowledge graph (context; cite the sources):\n"
                     + "\n".join(f"- {fact}" for fact in graph_facts))
    return untrusted("\n\n".join(parts))


def answer_messages(question: str, sources: Sequence[Source], graph_facts: Sequence[str],
                    history: Sequence[Message]) -> list[Message]:
    return [
        Message(role="system", content=prompt("answer")),
        *history,
        Message(role="user", content=f"Sources from my memory:\n{sources_block(sources, graph_facts)}\n\n"
                                     f"Question: {question}"),
    ]


def verify_messages(question: str, answer: str, sources: Sequence[Source]) -> list[Message]:
    return [
        Message(role="system", content=prompt("verify")),
        Message(role="user", content=f"Sources:\n{sources_block(sources)}\n\nQuestion: {question}\n\n"
                                     f"Answer to check:\n{untrusted(answer)}"),
    ]


def passages_answer(sources: Sequence[Source]) -> str:
    """The answer without a model: the best passages, each with its [n] marker."""
    lines = []
    for s in sources[:PASSAGES_SHOWN]:
        where = f" ({_origin(s)})" if s.kind == "chunk" else ""
        text = f"…{' '.join(s.passage.split())}…" if s.passage else ' '.join(s.text.split())
        lines.append(f"[{s.n}] {_clip(text, PASSAGE_CHARS)}{where}")
        if s.conflict:
            lines.append(f"    Conflict: {s.conflict}")
    return "\n".join(lines)


# -- the engine's methods --------------------------------------------------------------------------


class Answers:
    """Grounded answers from memory, and the transcript of each conversation (`engine.answers`)."""

    def __init__(self, ctx: Context, memories: Memories, retrieval: Retriever, graph: Graph,
                 language: LanguageModel):
        self.ctx = ctx
        self.memories = memories
        self.retrieval = retrieval
        self.graph = graph
        self.language = language

    def ask(self, question: str, *, project: str | None = None, k: int = 8,
            on_token: Callable[[str], None] | None = None, verify: bool = False,
            conversation_id: str | None = None, cancel: threading.Event | None = None) -> AskResult:
        """Answer from memory with numbered citations; see the module's docstring for every outcome.

        `conversation_id` continues a conversation (its last turns go into the prompt); without it a new
        one starts. `cancel` is checked before the model is asked and between streamed pieces; a
        cancelled question raises `Cancelled` and stores nothing.
        """
        question = (question or "").strip()
        if not question:
            raise UserError("Ask needs a question.")
        asked_at = time.time()
        conversation = self._conversation_pk(conversation_id) if conversation_id else None
        uid = conversation_id or f"cnv_{secrets.token_hex(6)}"
        history = self._history(conversation) if conversation is not None else []
        # a follow-up ("and her husband?") is looked up together with the question before it
        previous = next((m.content for m in reversed(history) if m.role == "user"), "")
        query = f"{previous}\n{question}" if previous else question
        hits = self.retrieval.recall(query, k=k, project=project)
        emit = on_token or (lambda _piece: None)
        _check(cancel)
        if not answerable(hits):
            emit(NOT_IN_MEMORY)
            result = AskResult(answer=NOT_IN_MEMORY, sources=[], grounded=False,
                               llm_available=self.language.router.available(), conversation_id=uid)
        else:
            sources = [Source.from_hit(n, h) for n, h in enumerate(hits, start=1)]
            result = self._answer(question, project, sources, history, uid, emit, verify, cancel)
        try:  # a full or read-only disk: answered all the same, neither kept nor counted as a use
            self._save_exchange(conversation, uid, project, question, asked_at, result, verify, len(history))
            if result.model is not None and result.grounded:  # a source the answer cites is used; one it doesn't, isn't
                self.memories.mark_used([s.id for s in result.sources if s.n in cited(result.answer)], how="cited")
        except (DiskFull, StoreReadOnly) as e:
            log.info("ask: the exchange was not kept (%s)", type(e).__name__)
        log.info("ask: %d sources, grounded=%s, model=%s, %.2fs", len(result.sources), result.grounded,
                 result.model is not None, time.time() - asked_at)
        return result

    # -- steps -------------------------------------------------------------------------------------

    def _answer(self, question: str, project: str | None, sources: list[Source], history: list[Message],
                uid: str, emit: Callable[[str], None], verify: bool, cancel: threading.Event | None) -> AskResult:
        health = self.language.router.health()
        if not health.ok:
            return self._passages_only(sources, health.detail, uid, emit)
        graph_facts = self.graph.graph_context(question, hops=2, project=project)  # "Alice —lives in→ Lisbon"
        messages = answer_messages(question, sources, graph_facts, history)
        try:
            answer = self._stream_answer(messages, sources, emit, cancel)
        except (LLMUnavailable, LLMModelMissing) as gone:  # went away since the health check
            return self._passages_only(sources, str(gone), uid, emit)
        grounded = _REFUSAL.match(answer) is None
        return AskResult(
            answer=answer, sources=sources, grounded=grounded, llm_available=True, model=self.language.router.config.model,
            conversation_id=uid, verification=self._verify(question, answer, sources) if verify and grounded else None,
        )

    def _stream_answer(self, messages: list[Message], sources: list[Source],
                       emit: Callable[[str], None], cancel: threading.Event | None) -> str:
        """The model's whole answer, handed to `emit` piece by piece. Raises LLMUnavailable or
        LLMModelMissing only before the first piece (the caller falls back), else AskFailed."""
        pieces: list[str] = []
        stream = self.language.router.stream(messages)
        try:
            for piece in stream:
                _check(cancel)
                pieces.append(piece)
                emit(piece)
        except LLMError as e:
            if pieces or not isinstance(e, LLMUnavailable | LLMModelMissing):
                raise AskFailed(str(e), sources, "".join(pieces)) from e
            raise
        finally:
            stream.close()
        answer = "".join(pieces)
        if not answer.strip():
            raise AskFailed(EMPTY_ANSWER, sources, answer)
        return answer

    def _passages_only(self, sources: list[Source], reason: str, uid: str,
                       emit: Callable[[str], None]) -> AskResult:
        answer = passages_answer(sources)
        emit(answer)
        return AskResult(answer=answer, sources=sources, grounded=True, llm_available=False,
                         conversation_id=uid, notice=f"{NO_LLM_NOTICE} {reason}")

    def _verify(self, question: str, answer: str, sources: list[Source]) -> Verification:
        try:
            done = self.language.router.complete(verify_messages(question, answer, sources), schema=Verdict)
        except LLMError as e:
            log.warning("ask: verification not done (%s)", type(e).__name__)
            return Verification(checked=False, supported=False, detail=f"The answer could not be checked: {e}")
        verdict = cast(Verdict, done.parsed)
        return Verification(checked=True, supported=verdict.supported and not verdict.unsupported_claims,
                            unsupported_claims=verdict.unsupported_claims)

    # -- the transcript ----------------------------------------------------------------------------

    def _conversation_pk(self, uid: str) -> int:
        return conversations.row_id(self.ctx.con, uid)

    def _history(self, conversation: int) -> list[Message]:
        return [Message(role=role, content=content)  # type: ignore[arg-type]  # roles are stored as written
                for role, content in conversations.last_messages(self.ctx.con, conversation, HISTORY_MESSAGES)]

    def _save_exchange(self, conversation: int | None, uid: str, project: str | None, question: str,
                       asked_at: float, result: AskResult, verify: bool, history: int) -> None:
        now = time.time()
        meta = {"sources": [s.id for s in result.sources], "grounded": result.grounded,
                "llm_available": result.llm_available, "model": result.model}
        with self.ctx.store.write() as con:
            if conversation is None:
                conversation = conversations.start(con, uid, _clip(" ".join(question.split()), TITLE_CHARS),
                                                   (project or "").strip() or None, asked_at, now)
            conversations.add_exchange(con, conversation, question, asked_at, result.answer, now, meta)
            self.ctx.audit.record("ask", uid, {"sources": meta["sources"], "grounded": result.grounded,
                                    "llm": result.model is not None, "verify": verify, "history": history}, con=con)


_CITATION = re.compile(r"\[(\d+(?:\s*[,;–-]\s*\d+)*)\]")


def cited(answer: str) -> set[int]:
    """The source numbers an answer cites: [2], [1, 3], [1-3] and [2][4] all count; a number that only
    appears in the text (a year, an amount) does not."""
    out: set[int] = set()
    for m in _CITATION.finditer(answer):
        parts = re.split(r"\s*([,;–-])\s*", m.group(1))
        nums, seps = [int(x) for x in parts[0::2]], parts[1::2]
        out.update(nums)
        for a, sep, b in zip(nums, seps, nums[1:], strict=False):
            if sep in "–-" and 0 < b - a <= 20:
                out.update(range(a, b + 1))
    return out


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("The question was cancelled.")
