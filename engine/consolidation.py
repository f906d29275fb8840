"""Consolidation: decay, archive, contradictions, episodic roll-up.

- Decay follows elapsed time, not the number of runs: a memory unused for `decay_after_days` loses
  importance by a fixed factor per further idle day, counted from where the last run stopped
  (`memories.decayed_at`), so running twice at the same moment changes nothing.
- Archive, never delete: unused memories below `archive_floor` after `archive_after_days` leave default
  recall and can be restored. Only `forget` (the user's explicit request) deletes.
- Contradictions: candidate pairs of facts (same subject and relation in the graph, or close in meaning,
  same project) are judged by the language model; a contradiction flags both (`conflict_with`) and the
  user resolves it. Every judged pair is remembered (`fact_checks`) so it is not asked again.
- Roll-up: a window of unprocessed episodic memories in one scope (a conversation, else a project) is
  summarised into facts. Facts, their `derivations` and the `rollups` row (keyed by a hash over the
  window's source ids) are written in one transaction; only then are the sources marked processed and
  the scope's watermark advanced. A crash in between is resumed from the `rollups` row, never repeated.
  An empty answer ("SUMMARY: NONE") is a valid outcome that still advances the watermark.
  Editing or forgetting an event deletes the facts summarised from it at once (they may repeat its old
  words) and puts their other events back in the queue, to be summarised again. A window is hashed over
  its events' ids and contents, so a window whose events were edited is summarised again.
- Facts from conversations (`extract_facts`, run in the background by engine/extraction.py as turns are
  stored): the same queue, windows and transactions as the roll-up, from a single waiting turn on, but
  each fact names the turns it comes from, and only those are its `derivations`: forgetting one of them
  (or the conversation) forgets the fact in the same transaction. A fact naming no turn of the window is
  derived from all of them.

Without a language model, decay and archive run and the rest waits (the report says so).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import cast

from pydantic import BaseModel, Field

from .context import Context
from .errors import NotFound, UserError
from .graph import ExtractionReport, Graph
from .language import LanguageModel
from .llm import LLMBadOutput, LLMError, LLMRouter, Message
from .memories import Memories
from .models import Memory, iso
from .prompts import prompt, untrusted
from .store import Connection, vectors
from .store import consolidation as rows
from .store import memories as memory_rows
from .store.types import Filter, Tallies, to_memory

log = logging.getLogger(__name__)

DAY = 86_400.0
DECAY_PER_30_DAYS = 0.8  # importance kept per 30 idle days past decay_after_days
ROLLUP_MIN_BATCH = 8  # unprocessed episodic memories a scope needs before it is rolled up
ROLLUP_MAX_BATCH = 30  # events per summarised window
MAX_ROLLUP_FACTS = 10
MAX_FACT_CHARS = 500
MAX_PAIR_CHECKS = 50  # language-model comparisons per run; the rest wait for the next run
SIMILAR_FACTS = 5  # nearest facts considered for each fact
CONFLICT_COSINE = 0.6  # how close in meaning two facts must be to be compared
_SUMMARY_NONE = re.compile(r"^\W*summary\s*:\s*none\W*$", re.IGNORECASE)


class ContradictionVerdict(BaseModel):
    contradicts: bool


class RollupFacts(BaseModel):
    facts: list[str] = Field(default_factory=list)


class TurnFact(BaseModel):
    fact: str
    turns: list[int] = Field(default_factory=list)


class TurnFacts(BaseModel):
    facts: list[TurnFact] = Field(default_factory=list)


FACTS_MAX_BATCH = 20  # turns per extraction request


class RollupReport(BaseModel):
    windows: int = Field(default=0, description="Windows summarised now")
    facts: int = Field(default=0, description="Facts written (or merged into existing ones)")
    sources: int = Field(default=0, description="Episodic memories marked processed")
    empty: int = Field(default=0, description="Windows with nothing durable (SUMMARY: NONE)")
    resumed: int = Field(default=0, description="Windows finished after an interrupted run")
    note: str | None = None


class ConsolidationReport(BaseModel):
    decayed: int = Field(default=0, description="Memories whose importance decayed")
    archived: list[str] = Field(default_factory=list, description="Ids archived now")
    rollup: RollupReport = Field(default_factory=RollupReport)
    extraction: ExtractionReport = Field(default_factory=ExtractionReport)
    pairs_checked: int = Field(default=0, description="Pairs of facts compared by the language model")
    facts_searched: int = Field(default=0, description="Facts new or changed since the last complete "
                                "contradiction check, whose nearest facts were looked for")
    conflicts: list[tuple[str, str]] = Field(default_factory=list, description="Pairs flagged now")
    waiting: list[str] = Field(default_factory=list, description="Steps that wait for a language model")
    notes: list[str] = Field(default_factory=list)
    cancelled: bool = False


class ConflictPair(BaseModel):
    """Two facts that disagree: `a` is the older statement."""

    a: Memory
    b: Memory


class Resolution(BaseModel):
    kept: list[str]
    archived: list[str]


def _pair_hash(hash_a: str, hash_b: str) -> str:
    return hashlib.sha256(f"{hash_a}:{hash_b}".encode()).hexdigest()


def _window_hash(scope: str, rows: list[tuple[int, str]]) -> str:
    """A window is its events as they read: an edited event makes it a new window, summarised again."""
    return hashlib.sha256(f"{scope}|{','.join(f'{i}:{h}' for i, h in rows)}".encode()).hexdigest()


class Consolidation:
    """Decay, archive, roll-up and contradictions; the user's side of conflicts (`engine.consolidation`)."""

    def __init__(self, ctx: Context, memories: Memories, graph: Graph, language: LanguageModel):
        self.ctx = ctx
        self.space = ctx.space
        self.memories = memories
        self.graph = graph
        self.language = language

    def notes(self, counts: Tallies) -> list[str]:
        """For stats: what waits for a language model (empty when one answers or nothing waits)."""
        extract = counts.pending_extraction()
        rollup, facts = counts.waiting()
        if not (extract or rollup or facts > 1):
            return []
        router, why = self.language.ready()
        if router is not None:
            return []
        return [
            f"Graph extraction ({extract} waiting), contradiction checks and episodic roll-up ({rollup} "
            f"waiting) wait for a language model. {why}"
        ]

    def consolidate(self, now: float | datetime | None = None, progress: Callable[[int, int], None] | None = None,
                    cancel: threading.Event | None = None) -> ConsolidationReport:
        """Decay, archive, roll up, extract triples, check contradictions; audited; see the module doc."""
        now_ts = time.time() if now is None else now.timestamp() if isinstance(now, datetime) else float(now)
        report = ConsolidationReport()
        steps = 4

        def step(done: int) -> bool:
            if progress is not None:
                progress(done, steps)
            report.cancelled = cancel is not None and cancel.is_set()
            return not report.cancelled

        report.decayed, report.archived = self._decay_and_archive(now_ts)
        if step(1):
            router, why = self.language.ready()
            if router is None:
                report.waiting = ["roll-up", "graph extraction", "contradiction checks"]
                report.extraction = ExtractionReport(remaining=self.graph.pending_extraction(self.ctx.con), waiting=True)
                report.notes.append(f"Roll-up, graph extraction and contradiction checks wait for a language "
                                    f"model. {why}")
            else:
                report.rollup = self._rollup(router, now_ts, cancel)
                if step(2):
                    report.extraction = self.graph.extract_pending(cancel=cancel)
                    if step(3):
                        self._check_contradictions(router, report, now_ts, cancel)
                        step(4)
            report.notes += [n for n in (report.rollup.note, report.extraction.note) if n]
        with self.ctx.store.write() as con:
            self.ctx.audit.record("consolidate", None, {
                "decayed": report.decayed, "archived": len(report.archived), "rollup_facts": report.rollup.facts,
                "rollup_sources": report.rollup.sources, "edges": report.extraction.edges,
                "pairs_checked": report.pairs_checked, "conflicts": len(report.conflicts),
                "waiting": bool(report.waiting), "cancelled": report.cancelled,
            }, con=con, actor="consolidation")
        self.ctx.changes.notify("consolidate", graph=bool(report.extraction.edges))
        log.info("consolidation: %d decayed, %d archived, %d facts rolled up, %d conflicts", report.decayed,
                 len(report.archived), report.rollup.facts, len(report.conflicts))
        return report

    # -- decay and archive ---------------------------------------------------------------------------

    def _decay_and_archive(self, now: float) -> tuple[int, list[str]]:
        decay_after = self.ctx.settings.decay_after_days * DAY
        rate = DECAY_PER_30_DAYS ** (1 / 30)
        with self.ctx.mutation() as (con, touched):
            updates = []
            for rid, importance, used, decayed_at in rows.idle_since(con, now - decay_after):
                start = max(used + decay_after, decayed_at or 0.0)
                if now > start:
                    updates.append((importance * rate ** ((now - start) / DAY), now, rid))
            rows.set_decayed(con, updates)
            stale = rows.below_floor(con, self.ctx.settings.archive_floor,
                                     now - self.ctx.settings.archive_after_days * DAY)
            rows.archive(con, [rid for rid, _ in stale], now)
            touched.memories.update(rid for rid, _ in stale)
            if updates:
                self.ctx.audit.record("decay", None, {"count": len(updates), "after_days": self.ctx.settings.decay_after_days},
                           con=con, actor="consolidation")
            if stale:
                self.ctx.audit.record("archive", None, {"count": len(stale), "ids": [uid for _, uid in stale],
                                             "floor": self.ctx.settings.archive_floor}, con=con, actor="consolidation")
        archived = [uid for _, uid in stale]
        if archived:
            self.ctx.changes.notify("archive", memories=archived)
        return len(updates), archived

    def restore(self, uid: str) -> Memory:
        """Bring an archived memory back into recall; it counts as used now (decay starts over)."""
        now = time.time()
        with self.ctx.mutation() as (con, touched):
            row = self.memories.row_by_uid(con, uid)
            if not row[11]:
                raise UserError(f"{uid} is not archived.")
            rows.unarchive(con, row[0], now)
            touched.memories.add(row[0])
            self.ctx.audit.record("restore", uid, {}, con=con)
            mem = to_memory(self.memories.row_by_uid(con, uid))
        self.ctx.changes.notify("restore", memories=[uid])
        return mem

    # -- contradictions ------------------------------------------------------------------------------

    def _contradiction_candidates(self, con: Connection,
                                  report: ConsolidationReport) -> tuple[list[tuple[int, int]], bool]:
        """Unflagged fact pairs in one project worth comparing: same subject and relation with another
        object in the graph first, then pairs close in meaning (closest first). Only the facts new or changed
        since the last complete check are searched around (the others' neighbours were, and their pairs
        judged): a search per fact of the store at every run cost a whole search of the store per fact.
        Also returns whether every one of them was searched around (False without the model or a vector)."""
        facts = rows.unflagged_facts(con)
        mark = rows.searched_mark(con)
        fresh = sorted(rid for rid, (_, updated) in facts.items()
                       if mark is None or rid > mark[0] or updated >= mark[1])
        report.facts_searched = len(fresh)
        pairs: dict[tuple[int, int], None] = {}
        for a, b in rows.same_subject_and_relation(con):
            if a in facts and b in facts and facts[a][0] == facts[b][0]:
                pairs.setdefault((a, b))
        covered = not fresh
        if self.space.ensure() and fresh:
            close: dict[tuple[int, int], float] = {}
            index = self.space.index["memories"]
            # the float copy, read by key (vec0 answers `rowid IN (…)` by reading every vector it holds)
            queries = vectors.read_vectors(con, "memories", fresh)
            covered = len(queries) == len(fresh)
            for rid, query in sorted(queries.items()):
                f = Filter(projects={facts[rid][0]}, kinds={"fact"})
                for other, cos in index.search(con, query, SIMILAR_FACTS + 1, f, windows=False):
                    if other != rid and other in facts and cos >= CONFLICT_COSINE:
                        key = (min(rid, other), max(rid, other))
                        close[key] = max(close.get(key, 0.0), cos)
            for key in sorted(close, key=lambda k: (-close[k], k)):
                pairs.setdefault(key)
        return list(pairs), covered

    def _check_contradictions(self, router: LLMRouter, report: ConsolidationReport, now: float,
                              cancel: threading.Event | None) -> None:
        if self.space.available():
            self.space.embed_pending(cancel=cancel)  # facts rolled up just now get their vectors
        con = self.ctx.con
        system = Message(role="system", content=prompt("contradiction"))
        started = time.time()  # a fact edited from here on is searched around again next time
        top = rows.highest_memory_id(con)
        candidates, complete = self._contradiction_candidates(con, report)
        # complete: every fact searched around and every candidate judged, so the next run searches around
        # new and changed facts only
        for a, b in candidates:
            if report.pairs_checked >= MAX_PAIR_CHECKS or (cancel is not None and cancel.is_set()):
                complete = False
                break
            pair = rows.statements(con, a, b)
            if len(pair) != 2:
                continue
            pair_hash = _pair_hash(pair[0][3], pair[1][3])
            if rows.judged(con, a, b) == pair_hash:
                continue
            statements = "\n".join(f"Statement {label} (recorded {iso(r[4])[:10]}): {r[2]}"
                                   for label, r in zip("AB", pair, strict=True))
            try:
                verdict = cast(ContradictionVerdict, router.complete(
                    [system, Message(role="user", content=untrusted(statements))], schema=ContradictionVerdict).parsed)
            except LLMBadOutput:  # asked again next time
                complete = False
                continue
            except LLMError as e:
                report.notes.append(f"Contradiction checks stopped: {e}")
                complete = False
                break
            report.pairs_checked += 1
            if self._record_verdict(pair, pair_hash, verdict.contradicts, now):
                report.conflicts.append((pair[0][1], pair[1][1]))
        if complete:
            with self.ctx.store.write() as w:
                rows.set_searched_mark(w, top, started)

    def _record_verdict(self, pair: list[tuple], pair_hash: str, contradicts: bool, now: float) -> bool:
        """Store the judgement; flag both facts when they contradict. True when flagged now."""
        (a, a_uid, *_), (b, b_uid, *_) = pair
        with self.ctx.store.write() as con:
            if not rows.still_as_judged(con, a, b, pair[0][3], pair[1][3]):
                return False  # changed meanwhile (edited, archived, flagged by another pair): judge again later
            rows.remember_check(con, a, b, pair_hash, "conflict" if contradicts else "consistent", now)
            if not contradicts:
                return False
            rows.flag(con, a, a_uid, b, b_uid)
            self.ctx.audit.record("conflict_flagged", a_uid, {"with": b_uid}, con=con, actor="consolidation")
        self.ctx.changes.notify("conflict", memories=[a_uid, b_uid])
        return True

    def conflicts(self) -> list[ConflictPair]:
        """Pairs of facts flagged as contradicting each other, for the user to resolve."""
        pairs: list[ConflictPair] = []
        seen: set[str] = set()
        for row, other in rows.flagged(self.ctx.con):
            if other is None or row[1] in seen:
                continue
            seen.update((row[1], other[1]))
            pairs.append(ConflictPair(a=to_memory(row), b=to_memory(other)))
        return pairs

    def resolve(self, uid: str, keep: str) -> Resolution:
        """Resolve a flagged pair: keep one (the other is archived, not deleted) or `both` (not a
        conflict; the pair is remembered so it is not flagged again)."""
        keep = (keep or "").strip()
        now = time.time()
        with self.ctx.mutation() as (con, touched):
            row = self.memories.row_by_uid(con, uid)
            if row[13] is None:
                raise UserError(f"{uid} is not flagged as contradicting another memory.")
            try:
                other = self.memories.row_by_uid(con, row[13])
            except NotFound:
                raise UserError(f"The memory {uid} contradicted is gone; nothing to resolve.") from None
            if keep not in ("both", row[1], other[1]):
                raise UserError(f"Choose what to keep: {row[1]}, {other[1]} or both.")
            rows.unflag(con, row[0], other[0], now)
            dropped = [] if keep == "both" else [other if keep == row[1] else row]
            rows.archive(con, [d[0] for d in dropped], now)
            touched.memories.update(d[0] for d in dropped)
            rows.remember_check(con, row[0], other[0], _pair_hash(*(r[15] for r in sorted((row, other)))),
                                 "not_conflict" if keep == "both" else "resolved", now)
            result = Resolution(kept=[r[1] for r in (row, other) if r not in dropped], archived=[d[1] for d in dropped])
            self.ctx.audit.record("resolve_conflict", uid, {"with": other[1], "keep": keep, "archived": result.archived}, con=con)
        self.ctx.changes.notify("resolve", memories=[row[1], other[1]])
        return result

    # -- episodic roll-up ----------------------------------------------------------------------------

    def _rollup_scopes(self, con: Connection) -> dict[str, tuple[int | None, str | None]]:
        """Scopes with unprocessed episodic memories: scope key -> (conversation row id, project)."""
        scopes: dict[str, tuple[int | None, str | None]] = {}
        for conv_id, conv_uid, conv_project, project in rows.rollup_scopes(con):
            if conv_id is not None:
                scopes.setdefault(f"conversation:{conv_uid}", (conv_id, conv_project if conv_project else project))
            else:
                scopes.setdefault(f"project:{project or ''}", (None, project))
        return scopes

    def extract_facts(self, cancel: threading.Event | None = None, now: float | None = None) -> RollupReport:
        """Facts from the conversation turns waiting, each derived from the turns it names (see the module
        doc). Without a language model that answers, nothing happens (the report's note says why)."""
        router, why = self.language.ready()
        if router is None:
            return RollupReport(note=f"Facts from conversations wait for a language model. {why}")
        return self._rollup(router, time.time() if now is None else now, cancel, min_batch=1,
                            max_batch=FACTS_MAX_BATCH, by_turn=True)

    def _rollup(self, router: LLMRouter, now: float, cancel: threading.Event | None,
                min_batch: int = ROLLUP_MIN_BATCH, max_batch: int = ROLLUP_MAX_BATCH,
                by_turn: bool = False) -> RollupReport:
        report = RollupReport()
        con = self.ctx.con
        system = Message(role="system", content=prompt("facts" if by_turn else "rollup"))
        what = "Facts from conversations" if by_turn else "Roll-up"
        for scope, (conv_id, project) in self._rollup_scopes(con).items():
            mark = rows.watermark(con, scope)
            interrupted = rows.interrupted(con, scope, mark)
            if interrupted is not None:  # written before a crash, never marked: finish it, don't redo it
                ids = rows.pending_between(con, conv_id, project, mark, interrupted)
                self._mark_rolled_up(scope, ids, interrupted, now)
                report.resumed += 1
                report.sources += len(ids)
            while not (cancel is not None and cancel.is_set()):
                window = rows.pending_window(con, conv_id, project, max_batch)
                ids = [r[0] for r in window]
                if len(ids) < min_batch:
                    break
                source_hash = _window_hash(scope, window)
                if not rows.window_done(con, source_hash):
                    try:
                        facts = (self._turn_facts if by_turn else self._summarise)(router, system, ids)
                    except LLMBadOutput:
                        report.note = (f"{what}: the language model's answer did not fit; it is tried again next "
                                       "time.")
                        break
                    except LLMError as e:
                        report.note = f"{what} stopped: {e}"
                        return report
                    report.facts += self._write_rollup(scope, conv_id, project, ids, source_hash, facts, now,
                                                       "extract_facts" if by_turn else "rollup")
                    report.windows += 1
                    report.empty += not facts
                self._mark_rolled_up(scope, ids, ids[-1], now)
                report.sources += len(ids)
        return report

    def _summarise(self, router: LLMRouter, system: Message, ids: list[int]) -> list[tuple[str, list[int]]]:
        events = "\n".join(f"{i}. [{iso(at)[:16].replace('T', ' ')}] {text}"
                           for i, (text, at) in enumerate(rows.events(self.ctx.con, ids), 1))
        answer = router.complete([system, Message(role="user", content=untrusted(events))], schema=RollupFacts)
        facts: dict[str, None] = {}
        for fact in cast(RollupFacts, answer.parsed).facts:
            fact = " ".join(fact.split())
            if fact and not _SUMMARY_NONE.match(fact) and len(fact) <= MAX_FACT_CHARS:
                facts.setdefault(fact)
        return [(fact, ids) for fact in list(facts)[:MAX_ROLLUP_FACTS]]

    def _turn_facts(self, router: LLMRouter, system: Message, ids: list[int]) -> list[tuple[str, list[int]]]:
        """Facts the model reads in these turns, each with the ids of the turns it names (all of them when it
        names none of these)."""
        turns = rows.turns(self.ctx.con, ids)
        listing = "\n".join(f"{n}. [{iso(at)[:16].replace('T', ' ')}] {text}"
                            for n, (_rid, text, at) in enumerate(turns, 1))
        answer = router.complete([system, Message(role="user", content=untrusted(listing))], schema=TurnFacts)
        facts: dict[str, set[int]] = {}
        for item in cast(TurnFacts, answer.parsed).facts:
            fact = " ".join(item.fact.split())
            if not fact or _SUMMARY_NONE.match(fact) or len(fact) > MAX_FACT_CHARS:
                continue
            named = {turns[n - 1][0] for n in item.turns if 1 <= n <= len(turns)}
            facts.setdefault(fact, set()).update(named or ids)
        return [(fact, sorted(sources)) for fact, sources in list(facts.items())[:MAX_ROLLUP_FACTS]]

    def _write_rollup(self, scope: str, conv_id: int | None, project: str | None, ids: list[int],
                      source_hash: str, facts: list[tuple[str, list[int]]], now: float, action: str = "rollup") -> int:
        """Facts, their derivations and the rollups row: one transaction. Returns the facts written."""
        written: list[str] = []
        with self.ctx.mutation() as (con, _):
            for text, sources in facts:
                result = self.memories.remember(text, kind="fact", project=project, source="rollup",
                                       conversation_id=conv_id, embed="background")
                rid, source = memory_rows.row_of(con, result.id)
                if result.merged and source != "rollup":
                    continue  # already known on its own: not derived from these events alone
                rows.derive(con, rid, sources)
                written.append(result.id)
            rows.add_rollup(con, scope, source_hash, len(written), now, ids[-1])
            self.ctx.audit.record(action, None, {"scope": scope.split(":", 1)[0], "sources": len(ids), "facts": written},
                       con=con, actor="consolidation")
        return len(written)

    def _mark_rolled_up(self, scope: str, ids: list[int], last_id: int, now: float) -> None:
        """After the facts are written: mark the window's sources processed and advance the watermark."""
        with self.ctx.store.write() as con:
            rows.mark_rolled_up(con, scope, ids, last_id, now)
