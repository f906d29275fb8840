"""Recall: the hybrid search pipeline (`engine.retrieval`).

One query goes: BM25 over memories and document chunks (lexical.plan leaves out terms too common to
help) and exact vector search → the knowledge graph's linked rows → the turns around a conversation turn
as context → one calibrated similarity per candidate (ranking.hybrid_similarity) → the relevance floor →
the engine's ranking formula (similarity, importance, recency) → hits, with the passage of a long memory
that matched. docs/retrieval.md explains and measures each step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from . import ranking, timecues
from .context import Context
from .embeddings import EmbeddingUnavailable
from .errors import DiskFull, StoreReadOnly, UserError
from .graph import Graph
from .hits import KINDS, Hit, iso
from .memories import Memories
from .memory_rules import IMPORTANCE_BY_SOURCE, parse_time
from .store import Connection, retrieval
from .store import recall as rows
from .store import types as store_types
from .store.types import Filter, LexicalPlan
from .terms import asks_about_activity, focus, named_speakers, speaker, terms, voice, with_speaker

log = logging.getLogger(__name__)


# A question naming a day (or a few, at most this long) takes that day's memories closest in meaning.
DAY_WINDOW_SECONDS = 3 * 86_400


class QuestionVectors:
    """The vectors of the last questions asked, by their text: a question asked again (the app's list searched
    again after every change, a client that repeats itself, an agent's same recall) is not encoded again, which
    is half of a recall's CPU at 10k memories. Only while one embedder makes them: a new model starts afresh.
    The vectors are read-only."""

    MOST = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: object | None = None
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    def get(self, embedder: object, text: str) -> np.ndarray | None:
        with self._lock:
            vec = self._vectors.get(text) if embedder is self._owner else None
            if vec is not None:
                self._vectors.move_to_end(text)
            return vec

    def keep(self, embedder: object, text: str, made: Future[np.ndarray]) -> None:
        """`put` the vector a helper thread made, once it has (a failure keeps nothing)."""
        if not made.cancelled() and made.exception() is None:
            self.put(embedder, text, made.result())

    def put(self, embedder: object, text: str, vec: np.ndarray) -> np.ndarray:
        vec = np.array(vec, dtype=np.float32)  # its own copy, which nobody changes
        vec.setflags(write=False)
        with self._lock:
            if embedder is not self._owner:
                self._owner = embedder
                self._vectors.clear()
            self._vectors[text] = vec
            self._vectors.move_to_end(text)
            while len(self._vectors) > self.MOST:
                self._vectors.popitem(last=False)
        return vec


class Retriever:
    """Hybrid recall over memories and document chunks."""

    def __init__(self, ctx: Context, memories: Memories, graph: Graph):
        self.ctx = ctx
        self.space = ctx.space
        self.memories = memories
        self.graph = graph
        self._doc_freqs = retrieval.doc_freqs(ctx.store)  # document frequencies, cached for this open store
        self.asked = QuestionVectors()

    def recall(self, query: str, *, k: int = 10, project: str | None = None, kind: str | None = None,
               since: str | float | None = None, until: str | float | None = None,
               include_archived: bool = False, include_unscoped: bool = False, include_chunks: bool = True,
               record_access: bool = False, activity: bool | None = None,
               candidates: int | None = None) -> list[Hit]:
        """Hybrid recall: BM25 and exact vector search, combined into a calibrated similarity (with the turns
        around a conversation turn as context), then ranked by relevance first, importance and recency
        deciding only among hits of comparable relevance, and a time the question names preferred. Hits
        below the minimum relevance are dropped: a question about nothing in memory returns nothing.
        docs/retrieval.md.

        With a project, only that project's memories and documents are searched (plus memories with no
        project when include_unscoped). Works by words alone when the embedding model is unavailable.
        A recall is not a use: `record_access=True` counts the hits returned as used (for a client that
        shows them to its user as chosen; see `mark_used`). The app's own events ("Ingested X") are found
        only by questions about activity ("what did I add today?"), or with activity=True; never with False.
        """
        query = (query or "").strip()
        if not query:
            raise UserError("Recall needs a question or some words to look for.")
        if k < 1 or k > 1000:
            raise UserError("k must be between 1 and 1000.")
        if kind is not None and kind not in (*KINDS, "chunk"):
            raise UserError(f"Unknown kind '{kind}'; use one of: {', '.join(KINDS)}, chunk.")
        project = (project or "").strip() or None
        f = Filter(
            projects=None if project is None else ({project, None} if include_unscoped else {project}),
            kinds=None if kind is None else {kind},
            include_archived=include_archived,
            since=parse_time(since),
            until=parse_time(until),
            activity=asks_about_activity(query) if activity is None else activity,
        )
        from .relevance import MIN_HIT_RELEVANCE

        n = max(candidates or self._CANDIDATES, k)
        con = self.ctx.con
        with self.ctx.store.read():
            addressed = retrieval.addressed_names(con, query, f, self._doc_freqs) if kind != "chunk" else {}
        # a name one speaker calls the other: the question is about that speaker's turns, not the ones saying it
        asked = with_speaker(query, addressed)
        soon = self._query_vector_soon(con, asked)  # made on another core while the words are looked up
        qvec = self._query_vector(asked) if soon is None else None
        with self.ctx.store.read():
            bounded = (soon is not None or qvec is not None) and not self._backlog(con)
            found, plans = self._lexical(con, query, n, f, memories=kind != "chunk", chunks=include_chunks,
                                         bounded=bounded, drop=set(addressed))
            # what needs no vector is looked up while the question may still be being encoded beside: the
            # graph's candidates, and the turns around the words' candidates (those of the rest come after)
            graph = self._graph_candidates(con, query, f, project)
            cue = timecues.cue(query)  # a time named in the question may lift a hit from further down
            early: list[int] = []
            near: dict[int, dict[int, int]] = {}
            ahead: list[tuple[str, int]] = []
            cosines_ahead = None
            if soon is not None:
                early = [i for t, i in found if t == "m"]
                near = retrieval.neighbours(con, early, f) if early else {}
                # and their vectors (and those of the turns around them), for their cosines once it is made
                ahead = list(dict.fromkeys([*found, *graph, *(("m", j) for d in near.values() for j in d.values())]))
                cosines_ahead = self._cosines_later(con, ahead) if ahead else None
            if soon is not None:
                qvec = self._vector_made(soon)
                if qvec is None and bounded:  # the model failed meanwhile: by words alone, every kept term
                    found, plans = self._lexical(con, query, n, f, memories=kind != "chunk",
                                                 chunks=include_chunks, bounded=False, drop=set(addressed))
            cos: dict[tuple[str, int], float] = {}
            dense: set[tuple[str, int]] = set()
            if qvec is not None:
                dm = self.space.index["memories"].search(con, qvec, n, f) if kind != "chunk" else []
                dc = (self.space.index["chunks"].search(con, qvec, n, f)
                      if include_chunks and (kind is None or kind == "chunk") else [])
                merged = sorted([(s, "m", i) for i, s in dm] + [(s, "c", i) for i, s in dc], key=lambda x: -x[0])
                cos.update({(t, i): s for s, t, i in merged[:n]})
                dense = set(cos)
            then = self._of_the_day(con, cue, f, qvec, n) if kind != "chunk" else {}
            cos.update(then)
            keys = list(dict.fromkeys([*found, *dense, *graph, *then]))
            lex = self._lexical_ratios(con, found, plans, keys)
            # conversation context: turns next to a candidate join it (their own signals are looked up)
            mids = [i for t, i in keys if t == "m"]
            if early and mids[: len(early)] == early:  # those of the words' candidates are known: the rest's
                near.update(retrieval.neighbours(con, mids[len(early):], f))
            else:
                near = retrieval.neighbours(con, mids, f)
            nb: dict[tuple[str, int], dict[int, tuple[str, int]]] = {}
            for i, d in near.items():
                for off, j in d.items():
                    nb.setdefault(("m", i), {})[off] = ("m", j)
                    nb.setdefault(("m", j), {})[-off] = ("m", i)
            keys.extend(key for key in nb if key not in lex and key not in cos and key not in graph)
            if qvec is not None:
                missing = [key for key in keys if key not in cos]
                if cosines_ahead is not None:
                    known = cosines_ahead(qvec)
                    cos.update((key, known[key]) for key in missing if key in known)
                    looked_up = set(ahead)  # a row without a vector has none later either
                    missing = [key for key in missing if key not in looked_up]
                cos.update(self._cosines_later(con, missing)(qvec))
            # turns that ask: the turn after one answers it
            asks = {("m", i) for i in rows.asking(con, list({near[-1][1] for near in nb.values() if -1 in near}))}
            sims = ranking.hybrid_similarity(
                keys, lex, cos, neighbours=nb, graph=graph, asks=asks,
                use_lexical=bool(terms(query)), use_dense=qvec is not None,
            )
            if f.activity:  # "what did I add today?": the app's own events of that time answer it
                for rid, t in retrieval.activity_events(con, f, cue, n):
                    fit = timecues.fit(t, cue) if cue is not None and cue.window else 1.0
                    sims[("m", rid)] = max(sims.get(("m", rid), 0.0), ranking.ACTIVITY_RELEVANCE * fit)
            sims = {key: s for key, s in sims.items() if s >= MIN_HIT_RELEVANCE}
            speaker = self._speaker_factors(con, query, [i for t, i in sims if t == "m"], addressed)
            pool = sorted(sims, key=lambda key: -sims[key] * speaker.get(key[1], 1.0) if key[0] == "m" else -sims[key])
            pool = pool[: len(sims) if cue else max(3 * k, 30)]
            hits = self._hydrate(con, {key: sims[key] for key in pool}, cos, set(lex), dense, set(graph), cue,
                                 speaker)
            hits.sort(key=lambda h: (-h.score, h.id))
            hits = _distinct_passages(hits)[:k]
            self._name_passages(con, hits, qvec, query)
        if record_access:
            self.memories.mark_used([h.id for h in hits if not h.id.startswith("chk_")], how="recall")
        return hits

    def count_matches(self, query: str, *, project: str | None = None, kind: str | None = None,
                      since: str | float | None = None, include_archived: bool = False) -> int:
        """How many memories hold any of the query's words, with recall's filters: the honest size of a search
        whose list shows the best k (the meaning adds hits without the words, never many)."""
        if kind is not None and kind not in KINDS:
            raise UserError(f"Unknown kind '{kind}'; use one of: {', '.join(KINDS)}.")
        project = (project or "").strip() or None
        f = Filter(projects=None if project is None else {project}, kinds=None if kind is None else {kind},
                   include_archived=include_archived, since=parse_time(since), until=None,
                   activity=asks_about_activity(query))
        with self.ctx.store.read() as con:
            return retrieval.count_memories(con, query, f)

    _FTS = {"m": "memories_fts", "c": "chunks_fts"}

    def _lexical(self, con: Connection, query: str, n: int, f: Filter, *, memories: bool, chunks: bool,
                 bounded: bool, drop: set[str] | frozenset[str] = frozenset()
                 ) -> tuple[dict[tuple[str, int], float], dict[str, LexicalPlan]]:
        """({key: BM25 of the terms FTS5 searched}, {"m"/"c": the table's plan}). Terms very common in the
        projects searched, or costly in a large table, are left out (lexical.plan); `bounded` (there are
        vectors to find candidates by): terms past the table's posting budget are scored later, on the
        candidates only (`_lexical_ratios`). Document frequencies come from a per-process cache, so no
        per-query work scans a common term's whole posting list."""
        cache = self._doc_freqs
        found: dict[tuple[str, int], float] = {}
        plans: dict[str, LexicalPlan] = {}
        for t, wanted, search in (("m", memories, retrieval.lexical_memories), ("c", chunks, retrieval.lexical_chunks)):
            if not wanted or (t == "c" and f.kinds is not None and "chunk" not in f.kinds):
                continue
            plans[t] = plan = retrieval.plan(con, self._FTS[t], query, cache, f.projects,
                                             store_types.LEXICAL_BUDGET if bounded else None, drop if t == "m" else ())
            if plan.terms:
                found.update({(t, i): s for i, s in search(con, plan.terms, n, f, plan)})
        return found, plans

    def _lexical_ratios(self, con: Connection, found: dict[tuple[str, int], float],
                        plans: dict[str, LexicalPlan], keys: list[tuple[str, int]]) -> dict[tuple[str, int], float]:
        """{key: BM25 over the IDF sum of the terms kept in its own table}: memories and chunks on one scale.
        A plan's costly terms add their BM25 to the candidates (`keys`) that hold them."""
        scores = dict(found)
        for t, plan in plans.items():
            if plan.costly:
                ids = [i for tt, i in keys if tt == t]
                for i, s in retrieval.term_scores(con, self._FTS[t], plan.costly, ids, plan.dfs).items():
                    scores[(t, i)] = scores.get((t, i), 0.0) + s
        return {key: ranking.lexical_ratio(s, plans[key[0]].idf_sum) for key, s in scores.items()}

    # Candidates per list (BM25 memories, BM25 chunks, vectors) before context and ranking.
    _CANDIDATES = 50

    # How many of the knowledge graph's linked memories and chunks join the candidates (nearest first).
    _GRAPH_CANDIDATES = 50

    def _graph_candidates(self, con: Connection, query: str, f: Filter,
                          project: str | None) -> dict[tuple[str, int], float]:
        """{key: graph strength} for the memories and chunks the knowledge graph links to entities named in
        the query (ranking.graph_strength), filtered like every other candidate. One indexed lookup while
        the graph has no edges."""
        if not rows.graph_has_edges(con):
            return {}
        try:
            keys = self.graph.graph_keys(query, 2, project=project)
        except Exception:  # the graph is an extra signal: recall works without it
            log.warning("graph lookup failed during recall", exc_info=True)
            return {}
        return ranking.graph_strength(retrieval.passing(con, keys, f)[: self._GRAPH_CANDIDATES])

    _CATCH_UP = 512  # rows waiting for a vector that a recall embeds before it searches
    _CATCH_UP_BESIDE_BACKFILL = 64  # ... when this process embeds in the background: only what was just written
    _CATCH_UP_WAIT = 1.0  # seconds a recall waits at most for a few rows the backfill is embedding (then: words)

    def _catch_up(self) -> bool:
        """Whether a recall embeds the rows waiting for a vector first. Beside a running backfill, a backlog is
        the backfill's to embed: a search that embedded 512 of 100,000 waiting rows took 15 s, and still did
        not find the rest by meaning (it finds them by their words)."""
        if self.memories.backfill.running or getattr(self.space.embedder, "one_shot", False):
            # a one-shot process (a CLI command) embeds a few rows with the question, never a backlog's batch
            return not self._backlog(self.ctx.con)
        return True

    # who asks searches as the user types and would rather see words now than the best answer in seconds
    _WORDS_WHILE_LOADING = frozenset({"desktop"})

    def words_only_now(self) -> bool:
        """The app's model is still loading on the background thread: its search finds by words now instead of
        waiting for the load (the app's first search waited 5-20 s for it), and by meaning too once the model
        is loaded. A client of the HTTP API, MCP or the CLI asked a question: it waits for the load (seconds)
        and gets the same answer it will get later."""
        return (self.ctx.actor in self._WORDS_WHILE_LOADING and self.memories.backfill.running
                and self.space.available() and not self.space.embedder.ready)

    def _backlog(self, con: Connection) -> bool:
        """More rows wait for a vector than a recall embeds first: the vectors cannot find candidates among
        them, so FTS5 searches every kept term (a word in all of 100,000 rows waiting found nothing)."""
        return self.space.pending(con) > self._CATCH_UP_BESIDE_BACKFILL

    def _query_vector(self, query: str) -> np.ndarray | None:
        if self.words_only_now():
            return None
        if not self.space.ensure():
            return None
        try:
            # the question first: it loads the model if this process has not yet, so the rows waiting for a
            # vector (a memory stored before the model was loaded) are embedded now and found by meaning by
            # this recall, not only by the next one
            embedder = self.space.embedder
            qvec = self.asked.get(embedder, query)
            if qvec is None:
                qvec = self.asked.put(embedder, query, embedder.encode_one(query))
            if (self.ctx.store.read_only is None and rows.anything_unembedded(self.ctx.con)
                    and self._catch_up()):
                try:
                    self.space.embed_pending(limit=self._CATCH_UP, wait=self._CATCH_UP_WAIT)
                except (DiskFull, StoreReadOnly) as e:  # a recall still answers from what is embedded
                    log.info("rows waiting for vectors not embedded now: %s", type(e).__name__)
            return qvec
        except EmbeddingUnavailable:
            return None

    def _query_vector_soon(self, con: Connection, query: str) -> Future[np.ndarray] | None:
        """The question's vector being made on a helper thread (`Embedder.encode_one_soon`), or None: make it
        with `_query_vector`. Only when that would do nothing but encode it: the model loaded, and no row
        waiting for a vector that this recall would embed first."""
        embedder = self.space.embedder
        if not embedder.ready or self.words_only_now() or not self.space.ensure():
            return None
        if self.ctx.store.read_only is None and rows.anything_unembedded(con) and self._catch_up():
            return None
        done = self.asked.get(embedder, query)
        if done is not None:
            made: Future[np.ndarray] = Future()
            made.set_result(done)
            return made
        soon = embedder.encode_one_soon(query)
        if soon is not None:
            soon.add_done_callback(lambda made: self.asked.keep(embedder, query, made))
        return soon

    @staticmethod
    def _vector_made(soon: Future[np.ndarray]) -> np.ndarray | None:
        try:
            return soon.result()
        except EmbeddingUnavailable:
            return None

    def _of_the_day(self, con: Connection, cue: timecues.TimeCue | None, f: Filter,
                    qvec: np.ndarray | None, n: int) -> dict[tuple[str, int], float]:
        """{key: cosine} of the n memories closest in meaning among those of the day (or few days) the question
        names ("What did Kevin do on 23.01.2024?"): what was said then is a candidate even when its words
        and meaning alone would not have made it one."""
        if cue is None or cue.since is None or cue.until is None or qvec is None or "memories" not in self.space.index:
            return {}
        since, until = cue.since, cue.until
        if until - since > DAY_WINDOW_SECONDS:
            return {}
        ids = retrieval.in_window(con, f, since, until)
        cos = self.space.index["memories"].cosines(con, ids, qvec) if ids else {}
        return {("m", i): c for i, c in sorted(cos.items(), key=lambda kv: -kv[1])[:n]}

    def _speaker_factors(self, con: Connection, query: str, ids: list[int],
                         addressed: dict[str, tuple[str, str | None]]) -> dict[int, float]:
        """{row id: factor on its relevance for order} for conversation turns ("Name: text"). When the question
        names one of the speakers among them (by their label, or by the name the other one calls them,
        `addressed`), the others' turns keep 1 - SPEAKER_WEIGHT of it. A turn not in its speaker's first person
        keeps ranking.VOICE_FACTORS of it (less when it speaks only of "you"), while any candidate turn is in
        the first person (a conversation in another language is left as it is)."""
        if not ids:
            return {}
        texts = {rid: text for rid, text in rows.turn_texts(con, ids) if speaker(text)}
        said = {rid: str(speaker(text)) for rid, text in texts.items()}
        voices = {rid: voice(text) or "self" for rid, text in texts.items()}
        factors = ({rid: ranking.VOICE_FACTORS[v] for rid, v in voices.items()}
                   if "self" in voices.values() else {})
        speakers = set(said.values())
        named = named_speakers(query, speakers)
        for by, to in addressed.values():
            if to in speakers:
                named.add(to)
            elif by in speakers and len(speakers) == 2:
                named |= speakers - {by}
        if len(named) == 1:
            for rid, who in said.items():
                if who not in named:
                    factors[rid] = factors.get(rid, 1.0) * (1.0 - ranking.SPEAKER_WEIGHT)
        return factors

    def _hydrate(self, con: Connection, fused: dict[tuple[str, int], float], cos: dict[tuple[str, int], float],
                 lex: set, dense: set, graph: set | frozenset = frozenset(),
                 cue: timecues.TimeCue | None = None, speaker: dict[int, float] | None = None) -> list[Hit]:
        """Hits for these keys, scored by `ranking.ranked_score`; `fused` holds each key's similarity and
        `cue` is the time the question names, if any."""
        now = time.time()
        mids = [i for (t, i) in fused if t == "m"]
        cids = [i for (t, i) in fused if t == "c"]
        found: list[tuple[Hit, float | None]] = []  # (hit, its event time)
        factors: dict[str, float] = {}  # uid: the speaker and voice factor
        if mids:
            for m in rows.memory_rows(con, mids):
                key = ("m", m.id)
                factors[m.uid] = (speaker or {}).get(m.id, 1.0)
                t_ref = max(m.event_at or m.created_at, m.last_accessed_at or 0.0)
                rec = ranking.recency(t_ref, now)
                found.append((Hit(
                    id=m.uid, kind=m.kind, text=m.text, project=m.project, importance=round(m.importance, 4),
                    recency=round(rec, 4), similarity=round(fused[key], 4),
                    cosine=None if key not in cos else round(cos[key], 4), score=0.0, at=iso(m.event_at),
                    created_at=iso(m.created_at), archived=bool(m.archived), conflict_with=m.conflict_with,
                    via=[v for v, s in (("fts", lex), ("vector", dense), ("graph", graph)) if key in s] or ["context"],
                ), m.event_at or m.created_at))
        if cids:
            for r in rows.chunk_rows(con, cids):
                key = ("c", r[0])
                rec = ranking.recency(r[4], now)
                found.append((Hit(
                    id=r[1], kind="chunk", text=r[2], project=r[3], importance=IMPORTANCE_BY_SOURCE["document"],
                    recency=round(rec, 4), similarity=round(fused[key], 4),
                    cosine=None if key not in cos else round(cos[key], 4), score=0.0, created_at=iso(r[4]),
                    document_id=r[5], document_title=r[6], document_path=r[7], locator=r[8] or None,
                    via=[v for v, s in (("fts", lex), ("vector", dense), ("graph", graph)) if key in s] or ["context"],
                ), r[4]))
        top = max(fused.values(), default=0.0)
        fits: dict[str, float] = {}
        if cue is not None and cue.window:
            fits = {h.id: timecues.fit(t, cue) for h, t in found}
        elif cue is not None and cue.prefer:
            fits = timecues.order_fit({h.id: t for h, t in found}, cue)
        for h, _t in found:
            h.score = round(ranking.ranked_score(h.similarity * factors.get(h.id, 1.0), h.importance, h.recency, top,
                                                 fits.get(h.id)), 6)
        hits = [h for h, _t in found]
        self._describe_conflicts(con, hits)
        return hits

    def _name_passages(self, con: Connection, hits: list[Hit], qvec: np.ndarray | None, query: str) -> None:
        """A hit on a long memory names the passage that matched: of the window that matched better than its
        whole text, the sentences holding the question's words (or the whole window)."""
        if qvec is None or "memories" not in self.space.index:
            return
        uids = [h.id for h in hits if h.kind != "chunk"]
        if not uids:
            return
        rids = rows.windowed(con, uids)
        for h in hits:
            if h.id in rids:
                span = self.space.index["memories"].best_window(con, rids[h.id], qvec)
                h.passage = focus(h.text[span[0] : span[1]], query) if span else None

    def _cosines_later(self, con: Connection, keys: list[tuple[str, int]]
                       ) -> Callable[[np.ndarray], dict[tuple[str, int], float]]:
        """Cosines to the question for candidates the vector search did not return: their vectors are read now
        (from the float copy), the cosines computed once the question's vector is known."""
        later = [(t, self.space.index[table].cosines_later(con, ids)) for t, table in (("m", "memories"), ("c", "chunks"))
                 if table in self.space.index and (ids := [i for tt, i in keys if tt == t])]
        return lambda q: {(t, i): v for t, cosines in later for i, v in cosines(q).items()}

    def _describe_conflicts(self, con: Connection, hits: list[Hit]) -> None:
        for h in hits:
            if not h.conflict_with:
                continue
            other = rows.text_and_time(con, h.conflict_with)
            if other is None:
                continue
            mine = (h.at or h.created_at or "")[:10]
            h.conflict = (
                f'You said "{h.text}" on {mine} and "{other[0]}" on {iso(other[1])[:10]}; these disagree.'
            )


def _distinct_passages(hits: list[Hit]) -> list[Hit]:
    """One hit for each passage text of a document: its repeated boilerplate would fill the list with copies
    (the best-ranked stays). The same words in two files are two hits (each file is a source); memories are
    kept as they are (the same words are one memory already, unless in two projects or kinds)."""
    seen: set[tuple[str | None, str]] = set()
    out = []
    for h in hits:
        if h.id.startswith("chk_"):
            key = (h.document_id, " ".join(h.text.casefold().split()))
            if key in seen:
                continue
            seen.add(key)
        out.append(h)
    return out
