"""Knowledge graph: triples with provenance, admission policy, traversal.

A language model reads memories and document chunks and proposes (entity, relation, entity) triples.
Each candidate passes `admission.admit` before anything is written (refusals are counted by reason),
entities are resolved to existing nodes, and every edge records the memory or chunk it came from, so
forgetting that source removes the edge (and nodes left without edges) in the same transaction.

Traversal builds a networkx `DiGraph` of the neighbourhood on demand, walking edges in both directions.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .admission import admit, clean
from .context import Context
from .errors import NotFound, UserError
from .language import LanguageModel
from .prompts import prompt, untrusted
from .store import Connection
from .store import graph as rows

if TYPE_CHECKING:
    import networkx as nx

    from .graph_models import ExtractedTriple, ExtractionReport, GraphView

# the graph's boundary models (pydantic) and the language model's client load when first used: a recall, which
# follows the graph's links, uses neither
_MODELS = ("ExtractedTriple", "TripleExtraction", "ExtractionReport", "GraphNode", "GraphEdge", "GraphView")


def __getattr__(name: str) -> Any:
    if name in _MODELS:
        from . import graph_models

        return getattr(graph_models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

log = logging.getLogger(__name__)

MAX_TRIPLES_PER_ITEM = 20
MAX_ALIAS_TOKENS = 3  # "Alice" may stand for "Alice Smith", not for "Alice Springs Regional Hospital"
CONTEXT_FACTS = 30
_POSSESSIVE = re.compile(r"['’]s\b")
_NON_WORD = re.compile(r"[\W_]+")


# -- helpers ----------------------------------------------------------------------------------------


def norm_name(name: str) -> str:
    """How entity names are compared: case, punctuation, spacing and a possessive 's don't matter."""
    text = _POSSESSIVE.sub("", unicodedata.normalize("NFKC", name).casefold())
    return " ".join(_NON_WORD.sub(" ", text).split())


def _norm_type(value: str | None) -> str | None:
    text = norm_name(value or "")
    return text if text and len(text) <= 30 and " " not in text else None


def fact_text(src: str, rel: str, dst: str) -> str:
    return f"{src} —{rel}→ {dst}"


class Graph:
    """The knowledge graph: extraction with provenance, and traversal (`engine.graph`)."""

    def __init__(self, ctx: Context, language: LanguageModel):
        self.ctx = ctx
        self.language = language

    # -- extraction ----------------------------------------------------------------------------------

    def pending_extraction(self, con: Connection | None = None) -> int:
        """Memories and chunks not read for triples yet."""
        return rows.pending_extraction(con or self.ctx.con)

    def extract_pending(self, limit: int | None = None, progress: Callable[[int, int], None] | None = None,
                        cancel: threading.Event | None = None) -> ExtractionReport:
        """Extract triples from memories and chunks not read yet (memories first, oldest first).

        Without a language model nothing changes and the report says the work waits. An item whose answer
        never fits the schema is marked read (so it cannot block the queue) and counted as failed.
        """
        from .graph_models import ExtractionReport, TripleExtraction
        from .llm import LLMBadOutput, LLMError, LLMModelMissing, LLMUnavailable, Message

        con = self.ctx.con
        report = ExtractionReport(remaining=self.pending_extraction(con))
        if report.remaining == 0 or (limit is not None and limit <= 0):
            return report
        router, why = self.language.ready()
        if router is None:
            report.waiting, report.note = True, f"Graph extraction waits for a language model. {why}"
            return report
        items = rows.unread(con, limit)
        system = Message(role="system", content=prompt("extract_triples"))
        for done, (is_chunk, rid, uid, text, chash) in enumerate(items, start=1):
            if cancel is not None and cancel.is_set():
                report.cancelled = True
                break
            try:
                answer = router.complete([system, Message(role="user", content=untrusted(text))],
                                         schema=TripleExtraction)
                triples: list[ExtractedTriple] | None = cast(TripleExtraction, answer.parsed).triples[:MAX_TRIPLES_PER_ITEM]
            except LLMBadOutput:
                triples = None
            except LLMError as e:  # server gone, model missing, refused: stop here, the rest waits
                report.waiting = isinstance(e, LLMUnavailable | LLMModelMissing)
                report.note = f"Graph extraction stopped: {e}"
                break
            self._store_triples("chunks" if is_chunk else "memories", rid, uid, chash, triples, report)
            if progress is not None:
                progress(done, len(items))
        report.remaining = self.pending_extraction(con)
        if report.edges:
            self.ctx.changes.notify("extract", graph=True)
        log.info("graph extraction: %d read, %d edges, %d refused, %d failed", report.processed, report.edges,
                 sum(report.rejected.values()), report.failed)
        return report

    def _store_triples(self, table: str, rid: int, uid: str, chash: str, triples: list[ExtractedTriple] | None,
                       report: ExtractionReport) -> None:
        """Admit, resolve and write one item's triples and mark it read, in one transaction."""
        now = time.time()
        edges = nodes = 0
        rejected: dict[str, int] = {}
        with self.ctx.store.write() as con:
            row = rows.read_state(con, table, rid)
            if row is None or row[0] != chash or row[1]:
                return  # forgotten, edited or done meanwhile: its current text is handled on its own turn
            for t in triples or ():
                verdict = admit(t.subject, t.relation, t.object)
                if not verdict.ok:
                    assert verdict.reason is not None
                    rejected[verdict.reason] = rejected.get(verdict.reason, 0) + 1
                    continue
                src, new_src = self._resolve_node(con, t.subject, t.subject_type, now)
                dst, new_dst = self._resolve_node(con, t.object, t.object_type, now)
                nodes += new_src + new_dst
                if src == dst:  # two names of one entity ("Alice" and "Alice Smith")
                    rejected["self_loop"] = rejected.get("self_loop", 0) + 1
                    continue
                rel = " ".join(clean(t.relation).casefold().split())
                edges += rows.add_edge(con, src, rel, dst, table, rid, now)
            rows.count_rejections(con, rejected)
            rows.mark_read(con, table, rid)
            self.ctx.audit.record("extract_triples", uid, {"edges": edges, "nodes": nodes, "rejected": sum(rejected.values()),
                                                "failed": triples is None}, con=con)
        report.processed += 1
        report.edges += edges
        report.nodes += nodes
        report.failed += triples is None
        for reason, n in rejected.items():
            report.rejected[reason] = report.rejected.get(reason, 0) + n

    @staticmethod
    def _resolve_node(con: Connection, name: str, type_: str | None, now: float) -> tuple[int, bool]:
        """The node this name means, created when there is none: (id, created).

        Same normalised name, else a recorded alias, else an unambiguous short form ("Alice" and "Alice
        Smith": one name a single first word of the other, at least one of them a person and neither of
        another type) which is then recorded as an alias. Only people go by a first name: "Paris" is not
        "Paris Hilton", nor "Apple" "Apple Pie".
        """
        display, norm, kind = clean(name), norm_name(name), _norm_type(type_)
        row = rows.node_named(con, norm)
        if row is None:
            aliased = [rid for rid, aliases in Graph._aliased(con) if norm in aliases]
            if len(aliased) == 1:
                row = rows.node(con, aliased[0])
        if row is None:
            tokens = norm.split()
            matches = []
            for rid, other, other_type in rows.first_word_matches(con, tokens[0]):
                short, long_ = sorted((tokens, other.split()), key=len)
                if (len(short) == 1 and 1 < len(long_) <= MAX_ALIAS_TOKENS
                        and "person" in (kind, other_type) and {kind, other_type} <= {"person", None}):
                    matches.append((rid, other_type))
            if len(matches) == 1:
                row = matches[0]
                rows.add_alias(con, row[0], display)
        if row is not None:
            if row[1] is None and kind is not None:
                rows.set_type(con, row[0], kind)
            return row[0], False
        return rows.add_node(con, display, norm, kind, now), True

    @staticmethod
    def link(con: Connection, src: str, rel: str, dst: str, chunk_id: int, now: float,
             type_: str | None = None) -> bool:
        """An edge stated by a document rather than extracted (a note's link to another note), derived
        from the chunk that holds it: it goes when the document goes. True when it is new."""
        a, _ = Graph._resolve_node(con, src, type_, now)
        b, _ = Graph._resolve_node(con, dst, type_, now)
        return a != b and rows.add_edge(con, a, rel, b, "chunks", chunk_id, now)

    @staticmethod
    def _aliased(con: Connection) -> list[tuple[int, set[str]]]:
        """Nodes with aliases: (id, normalised aliases)."""
        return [(rid, {norm_name(a) for a in aliases}) for rid, aliases in rows.aliases(con)]

    def admission_rejections(self) -> dict[str, int]:
        """How many extracted candidates the admission policy refused, by reason."""
        return rows.rejections(self.ctx.con)

    # -- traversal -----------------------------------------------------------------------------------

    def _nodes_in(self, con: Connection, text: str) -> list[int]:
        """The nodes named (by name or alias, as whole words) in a piece of text, longest names first."""
        padded = f" {norm_name(text)} "
        found = rows.nodes_named_in(con, padded)
        for rid, aliases in self._aliased(con):
            for alias in aliases:
                if alias and f" {alias} " in padded:
                    found[rid] = max(found.get(rid, 0), len(alias))
        return sorted(found, key=lambda rid: (-found[rid], rid))

    def _find_node(self, con: Connection, entity: str) -> int:
        norm = norm_name(entity)
        if not norm:
            raise UserError("Name an entity to look up in the graph.")
        found = rows.node_id(con, norm)
        if found is not None:
            return found
        named = self._nodes_in(con, entity)
        if not named:
            raise NotFound(f"Nothing in the knowledge graph is called '{entity}'.")
        return named[0]

    def _neighbourhood(self, con: Connection, seeds: list[int], hops: int,
                       project: str | None = None) -> nx.DiGraph:
        """The graph within `hops` of the seeds (edges followed both ways). Edges from archived memories,
        documents not ready, or (with `project`) other projects are left out. Each edge carries
        `facts`: {relation: [("m"|"c", row id, uid)]} and `order`: (hops, first edge id)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(seeds, hops=0)
        frontier, seen_edges = set(seeds), set()
        for depth in range(1, hops + 1):
            if not frontier:
                break
            nxt: set[int] = set()
            for eid, src, rel, dst, mid, muid, cid, cuid in sorted(rows.edges_touching(con, sorted(frontier), project)):
                if eid in seen_edges:
                    continue
                seen_edges.add(eid)
                for n in (src, dst):
                    if n not in g:
                        g.add_node(n, hops=depth)
                        nxt.add(n)
                if not g.has_edge(src, dst):
                    g.add_edge(src, dst, facts={}, order=(depth, eid))
                source = ("m", mid, muid) if mid is not None else ("c", cid, cuid)
                g.edges[src, dst]["facts"].setdefault(rel, []).append(source)
            frontier = nxt
        for rid, name, type_ in rows.names(con, list(g.nodes)):
            g.nodes[rid].update(name=name, type=type_)
        return g

    @staticmethod
    def _check_hops(hops: int) -> int:
        if hops not in (1, 2):
            raise UserError("hops must be 1 or 2.")
        return hops

    def neighbours(self, entity: str, hops: int = 1) -> GraphView:
        """An entity and what is within 1 or 2 hops of it, each fact with the ids it came from."""
        self._check_hops(hops)
        with self.ctx.store.read() as con:
            center = self._find_node(con, entity)
            g = self._neighbourhood(con, [center], hops)
        return self._view(g, [center], hops)

    def around(self, text: str, hops: int = 1, *, source: str | None = None) -> GraphView:
        """The entities a memory is about and what is within 1 or 2 hops of them: the nodes of the facts
        taken from memory `source`, and those named in `text` (its text). Empty when it names none."""
        self._check_hops(hops)
        with self.ctx.store.read() as con:
            seeds = list(dict.fromkeys([*(rows.nodes_of_source(con, source) if source else []),
                                        *self._nodes_in(con, text)]))
            if not seeds:
                from .graph_models import GraphView

                return GraphView(entity="", hops=hops, nodes=[], edges=[])
            g = self._neighbourhood(con, seeds, hops)
        return self._view(g, seeds, hops)

    def best_connected(self, limit: int = 30) -> list[tuple[str, str | None, int]]:
        """(name, type, number of facts) of the entities with the most facts, to start browsing from."""
        return rows.best_connected(self.ctx.con, limit)

    @staticmethod
    def _view(g: nx.DiGraph, seeds: list[int], hops: int) -> GraphView:
        from .graph_models import GraphEdge, GraphNode, GraphView

        nodes = sorted(g.nodes(data=True), key=lambda n: (n[1]["hops"], n[1]["name"].casefold()))
        edges = []
        for src, dst, data in sorted(g.edges(data=True), key=lambda e: e[2]["order"]):
            for rel, sources in data["facts"].items():
                edges.append(GraphEdge(src=src, rel=rel, dst=dst,
                                       text=fact_text(g.nodes[src]["name"], rel, g.nodes[dst]["name"]),
                                       sources=sorted({uid for _, _, uid in sources})))
        return GraphView(entity=", ".join(g.nodes[n]["name"] for n in seeds), hops=hops,
                         nodes=[GraphNode(id=n, name=d["name"], type=d["type"], hops=d["hops"]) for n, d in nodes],
                         edges=edges)

    def _query_graph(self, query: str, hops: int, project: str | None) -> nx.DiGraph | None:
        self._check_hops(hops)
        with self.ctx.store.read() as con:
            seeds = self._nodes_in(con, query)
            return self._neighbourhood(con, seeds, hops, project) if seeds else None

    def graph_context(self, query: str, hops: int = 2, *, project: str | None = None,
                      limit: int = CONTEXT_FACTS) -> list[str]:
        """Facts ("Alice —works at→ Acme") around the entities named in the query, nearest first."""
        g = self._query_graph(query, hops, project)
        if g is None:
            return []
        facts: list[str] = []
        for src, dst, data in sorted(g.edges(data=True), key=lambda e: e[2]["order"]):
            for rel in data["facts"]:
                facts.append(fact_text(g.nodes[src]["name"], rel, g.nodes[dst]["name"]))
        return facts[:limit]

    def graph_keys(self, query: str, hops: int = 2, *, project: str | None = None) -> list[tuple[str, int]]:
        """The memories ("m", row id) and chunks ("c", row id) behind the facts around the entities named
        in the query, nearest first: a ranked list recall can fuse with its lexical and vector lists."""
        g = self._query_graph(query, hops, project)
        if g is None:
            return []
        keys: dict[tuple[str, int], None] = {}
        for _, _, data in sorted(g.edges(data=True), key=lambda e: e[2]["order"]):
            for sources in data["facts"].values():
                for table, rid, _ in sources:
                    keys.setdefault((table, rid))
        return list(keys)

    def graph_memory_ids(self, query: str, hops: int = 2, *, project: str | None = None) -> list[int]:
        """Row ids of the memories linked through the graph to the entities named in the query."""
        return [rid for table, rid in self.graph_keys(query, hops, project=project) if table == "m"]
