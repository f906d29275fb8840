"""Evidence recall on LoCoMo or REALTALK (long-term conversations), through the engine's public interface.

    .venv/bin/python bench/eval_locomo.py PATH [--out results.json] [--cache-dir DIR]
        [--http [--backend postgres [--pg-data DIR] [--fill-from CACHE_DIR]] | --server URL --token T]

PATH is a LoCoMo-format JSON file (a list of samples), or a REALTALK chat file or a folder of them (one
`Chat_*.json` per chat: `session_N` turns with their own `date_time`, and `qa`). Every turn becomes one
episodic memory ("Speaker: text", plus a LoCoMo image's caption) timed at its own time (REALTALK) or its
session's date (LoCoMo), one project per conversation. Every question is asked through `Engine.recall` (scoped to
its conversation, record_access=False). Prints evidence recall@5/@10 — the fraction of the question's
gold dia_ids among the top k — overall (categories 1-4) and per category, beside BM25 alone and dense
cosine alone computed in the same run on the same turns and vectors; then the relevance floor's refusal
rates on unanswerable (category 5) vs answerable questions.

With --http it is a client of `personal-llm serve` instead (over a profile's SQLite file; `--backend postgres
[--pg-data DIR]`: `serve --database` over a PostgreSQL it starts; `--server URL --token T`: a running server): every turn is stored with
`POST /memory/remember` ({text, kind: "episodic", project, at}), every question asked with
`GET /memory/recall?q=…&k=10&project=…` (default options), all questions twice; it prints both passes
beside BM25 on the same texts. The second pass shows whether asking changed what later asks get.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "unanswerable"}
REALTALK_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "inference"}
_DIA = re.compile(r"^D(\d+):(\d+)$")
_LOOSE_DIA = re.compile(r"D\s*(\d+)\s*:\s*(\d+)")
KS = (5, 10)


def parse_session_time(s: str) -> datetime | None:
    s = " ".join((s or "").split())
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B %Y", "%d %B, %Y"):
        try:
            return datetime.strptime(s, fmt)
        except ValueError:
            continue
    return None


def evidence_ids(ev) -> list[str]:
    out = []
    for item in ev or []:
        for part in re.split(r"[;,\s]+", str(item)):
            if _DIA.match(part) and part not in out:
                out.append(part)
    return out


def realtalk_samples(path: Path) -> list[dict]:
    """REALTALK chats (a file, or a folder of `*.json` files) as LoCoMo-shaped samples: sample_id is the file's
    name, each turn keeps its own time (`at`), and an evidence id written loosely ("D 2:18", "D20:17.") is read
    as the turn it names."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    out = []
    for f in files:
        chat = json.loads(f.read_text(encoding="utf-8"))
        if not (isinstance(chat, dict) and isinstance(chat.get("qa"), list)
                and any(re.fullmatch(r"session_\d+", k) for k in chat)):
            raise ValueError(f"{f.name} is not a REALTALK chat (session_N turns and qa)")
        conv: dict = {}
        for key, turns in chat.items():
            if re.fullmatch(r"session_\d+", key) and isinstance(turns, list):
                conv[key] = [{"speaker": t.get("speaker", "?"), "text": t.get("clean_text", ""), "dia_id": t.get("dia_id"),
                              "at": t.get("date_time")} for t in turns]
                conv[key + "_date_time"] = chat.get(key + "_date_time", "")
        qa = [{**q, "evidence": [f"D{m[0]}:{m[1]}" for e in q.get("evidence") or [] for m in _LOOSE_DIA.findall(str(e))]}
              for q in chat.get("qa", [])]
        out.append({"sample_id": f.stem, "conversation": conv, "qa": qa})
    return out


def parse_turn_time(s: str | None) -> datetime | None:
    try:
        return datetime.strptime((s or "").strip(), "%d.%m.%Y, %H:%M:%S")
    except ValueError:
        return None


def turns_of(sample: dict) -> list[tuple[str, str, datetime | None]]:
    """[(dia_id, memory text, the turn's own time, else its session's)] in conversation order."""
    conv = sample["conversation"]
    sessions = sorted(
        (int(m.group(1)), k) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(conv[k], list)
    )
    out = []
    for n, key in sessions:
        at = parse_session_time(conv.get(f"session_{n}_date_time", ""))
        for turn in conv[key]:
            text = f"{turn.get('speaker', '?')}: {turn.get('text', '')}".strip()
            if turn.get("blip_caption"):
                text += f" [shared an image: {turn['blip_caption']}]"
            if turn.get("dia_id"):
                out.append((turn["dia_id"], text, parse_turn_time(turn.get("at")) or at))
    return out


def evidence_recall(ranked: list[str], uid_dias: dict[str, set[str]], gold: list[str], k: int) -> float | None:
    """The share of the question's gold turns among the memories ranked in the top k (None: no gold)."""
    if not gold:
        return None
    found = set().union(*(uid_dias.get(u, set()) for u in ranked[:k])) if ranked else set()
    return len(found & set(gold)) / len(gold)


def recall_table(results: list[dict], names: tuple[str, ...],
                 categories: dict[int, str] = CATEGORIES) -> tuple[list[str], list[tuple[str, list]], list[list]]:
    """(header, groups, rows): evidence recall per category group for each run name."""
    def mean(rows, col):
        vals = [r[col] for r in rows if r[col] is not None]
        return sum(vals) / len(vals) if vals else float("nan")

    answerable = [c for c in categories if c != 5]
    groups = [(f"answerable ({min(answerable)}-{max(answerable)})", [r for r in results if r["category"] != 5])]
    groups += [(f"{c} {categories[c]}", [r for r in results if r["category"] == c]) for c in answerable]
    if 5 in categories:
        groups += [("5 unanswerable", [r for r in results if r["category"] == 5])]
    header = ["questions", "n"] + [f"{n} R@{k}" for k in KS for n in names]
    rows = [[label, sum(1 for r in rs if r["gold"])] + [mean(rs, f"{nm}@{k}") for k in KS for nm in names]
            for label, rs in groups]
    return header, groups, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="a LoCoMo-format JSON file")
    C.add_eval_args(ap)
    C.add_http_args(ap)
    args = ap.parse_args(argv)
    C.check_http_args(ap, args)

    try:
        path = Path(args.path)
        data = None if path.is_dir() else json.loads(path.read_text(encoding="utf-8"))
        realtalk = data is None or isinstance(data, dict)
        if realtalk:
            data = realtalk_samples(path)
    except (OSError, ValueError, TypeError) as e:
        if "REALTALK" in str(e):
            ap.error(f"{args.path} is not a LoCoMo-format file (a list of samples, each with 'conversation' and 'qa') "
                     f"nor REALTALK chats: {e}")
        ap.error(f"cannot read {args.path} ({type(e).__name__}: {e})")
    args.categories = REALTALK_CATEGORIES if realtalk else CATEGORIES
    if not (isinstance(data, list) and data and all(isinstance(d, dict) and isinstance(d.get("conversation"), dict)
                                                   and isinstance(d.get("qa"), list) for d in data)):
        ap.error(f"{args.path} is not a LoCoMo-format file (a list of samples, each with 'conversation' and 'qa') "
                 "nor REALTALK chats")
    size = sum(f.stat().st_size for f in path.glob("*.json")) if path.is_dir() else path.stat().st_size
    key = ("realtalk-" if realtalk else "locomo-") + re.sub(r"\W+", "_", path.stem) + f"-{size}"
    if args.http:
        return run_http(args, data, key + "-http")
    home, ready, tmp = C.prepare_home(args.cache_dir, key)
    from engine import Engine, relevance

    try:
        eng = Engine.open(home)
        uid_dias: dict[str, set[str]] = {}
        t0 = time.perf_counter()
        if not ready:
            merged = 0
            for sample in data:
                for dia, text, at in turns_of(sample):
                    r = eng.remember(text, kind="episodic", project=sample["sample_id"], at=at, source="chat",
                                     meta={"dia_id": dia}, embed="background")
                    uid_dias.setdefault(r.id, set()).add(dia)
                    merged += r.merged
            stored = time.perf_counter() - t0
            eng.embed_pending(batch_size=64)
            print(f"stored {sum(len(v) for v in uid_dias.values())} turns as {len(uid_dias)} memories "
                  f"({merged} merged) in {stored:.1f}s, embedded in {time.perf_counter() - t0 - stored:.1f}s",
                  flush=True)
            if args.cache_dir:
                (home.parent / "merges.json").write_text(json.dumps({k: sorted(v) for k, v in uid_dias.items()}))
                C.mark_ready(home)
        else:
            uid_dias = {k: set(v) for k, v in json.loads((home.parent / "merges.json").read_text()).items()}
            print(f"reusing the cached store at {home} ({len(uid_dias)} memories)", flush=True)

        # the memories as stored, for the baselines
        mems = {}
        for sample in data:
            for m in eng.list_memories(project=sample["sample_id"], limit=1_000_000):
                mems[m.id] = m
        bm25 = C.BM25Baseline((m.project, uid, m.text) for uid, m in mems.items())
        row_uid = dict(eng.con.execute("SELECT id, uid FROM memories").fetchall())
        vec_by_project = {s["sample_id"]: C.stored_vectors(eng, s["sample_id"]) for s in data}

        questions = [(s["sample_id"], q) for s in data for q in s["qa"]]
        qvecs = eng.embedder.encode([q["question"] for _, q in questions], batch_size=64)

        kmax = max(KS)
        results = []
        lat = []
        for (sid, q), qv in zip(questions, qvecs, strict=True):
            gold = evidence_ids(q.get("evidence"))
            t1 = time.perf_counter()
            hits = eng.recall(q["question"], k=kmax, project=sid, record_access=False)
            lat.append(time.perf_counter() - t1)
            ids, mat = vec_by_project[sid]
            runs = {
                "ours": [h.id for h in hits],
                "bm25": bm25.search(q["question"], kmax, sid),
                "dense": [row_uid[i] for i in C.dense_search(qv[None, :], mat, ids, kmax)[0]],
            }
            rec = {"sample": sid, "category": q["category"], "question": q["question"], "gold": gold,
                   "top": relevance.top_relevance(hits), "answerable": relevance.answerable(hits)}
            for name, ranked in runs.items():
                for k in KS:
                    rec[f"{name}@{k}"] = evidence_recall(ranked, uid_dias, gold, k)
            results.append(rec)

        # ---- the table ------------------------------------------------------------------------------
        header, groups, rows = recall_table(results, ("ours", "bm25", "dense"), args.categories)
        print()
        print(f"{'REALTALK' if args.categories is REALTALK_CATEGORIES else 'LoCoMo'} evidence recall ({args.path}: {len(data)} conversations, {len(mems)} memories, "
              f"{len(results)} questions)")
        print(C.fmt_table(header, rows))
        print(C.latency_line("recall latency", lat))

        # ---- the relevance floor ---------------------------------------------------------------------
        pos = [r["top"] for r in results if r["category"] != 5]
        neg = [r["top"] for r in results if r["category"] == 5]
        refused_neg = sum(1 for r in results if r["category"] == 5 and not r["answerable"]) / max(1, len(neg))
        refused_pos = sum(1 for r in results if r["category"] != 5 and not r["answerable"]) / max(1, len(pos))
        t, n_ok, p_bad = C.best_threshold(pos, neg)
        print()
        print(f"relevance floor {relevance.ANSWER_FLOOR:.3f} (engine/relevance.py): refuses {refused_neg:.1%} of "
              f"unanswerable (cat 5) questions and {refused_pos:.1%} of answerable ones")
        print(f"  best separating threshold on this file: {t:.3f} (refuses {n_ok:.1%} of cat 5, "
              f"{p_bad:.1%} of answerable); mean top relevance answerable {sum(pos) / max(1, len(pos)):.3f}, "
              f"cat 5 {sum(neg) / max(1, len(neg)):.3f}")
        cut = sorted(pos)[int(len(pos) * 0.02)] if pos else 0.0
        print(f"  threshold that refuses at most 2% of answerable questions (how ANSWER_FLOOR was chosen): {cut:.3f} "
              f"(refuses {sum(1 for x in neg if x < cut) / max(1, len(neg)):.1%} of cat 5)")
        if args.out:
            summary = {label: {h: v for h, v in zip(header, row, strict=True)} for (label, _), row in zip(groups, rows,
                                                                                                         strict=True)}
            Path(args.out).write_text(json.dumps({"summary": summary, "floor": {
                "threshold": relevance.ANSWER_FLOOR, "refused_unanswerable": refused_neg,
                "refused_answerable": refused_pos, "best_threshold": t}, "questions": results}, indent=1))
        eng.close()
    finally:
        C.cleanup(tmp)
    return 0


def run_http(args, data: list[dict], key: str) -> int:
    """The evaluation as a client of the HTTP API sees it (see the module's docstring)."""
    with C.http_target(args, key) as (api, ready, saved):
        t0 = time.perf_counter()
        uid_dias: dict[str, set[str]] = {}
        texts: dict[str, str] = {}
        projects: dict[str, str] = {}
        if ready and saved is not None:
            uid_dias = {k: set(v) for k, v in json.loads((saved / "merges.json").read_text()).items()}
            texts = json.loads((saved / "texts.json").read_text())
            projects = json.loads((saved / "projects.json").read_text())
            print(f"reusing the stored data ({len(uid_dias)} memories)", flush=True)
        else:
            n = 0
            for sample in data:
                for dia, text, at in turns_of(sample):
                    r = api.remember(text, kind="episodic", project=sample["sample_id"],
                                     at=at.isoformat() if at else None)
                    uid_dias.setdefault(r["id"], set()).add(dia)
                    texts[r["id"]] = r["memory"]["text"]
                    projects[r["id"]] = sample["sample_id"]
                    n += 1
            print(f"stored {n} turns as {len(uid_dias)} memories through the API in "
                  f"{time.perf_counter() - t0:.1f}s ({n / (time.perf_counter() - t0):.1f} turns/s)", flush=True)
            if saved is not None:
                (saved / "merges.json").write_text(json.dumps({k: sorted(v) for k, v in uid_dias.items()}))
                (saved / "texts.json").write_text(json.dumps(texts))
                (saved / "projects.json").write_text(json.dumps(projects))
        api.settle()
        bm25 = C.BM25Baseline((projects[uid], uid, text) for uid, text in texts.items())
        questions = [(s["sample_id"], q) for s in data for q in s["qa"]]
        kmax = max(KS)
        results = [{"sample": sid, "category": q["category"], "question": q["question"],
                    "gold": evidence_ids(q.get("evidence"))} for sid, q in questions]
        lat: list[float] = []
        for pass_no in (1, 2):
            for rec, (sid, q) in zip(results, questions, strict=True):
                t1 = time.perf_counter()
                hits = api.recall(q["question"], k=kmax, project=sid)
                lat.append(time.perf_counter() - t1)
                ranked = {f"pass{pass_no}": [h["id"] for h in hits]}
                if pass_no == 1:
                    ranked["bm25"] = bm25.search(q["question"], kmax, sid)
                for name, ids in ranked.items():
                    for k in KS:
                        rec[f"{name}@{k}"] = evidence_recall(ids, uid_dias, rec["gold"], k)
        header, groups, rows = recall_table(results, ("pass1", "pass2", "bm25"), args.categories)
        print()
        print(f"{'REALTALK' if args.categories is REALTALK_CATEGORIES else 'LoCoMo'} evidence recall through the HTTP API "
              f"({C.target_name(args)}; {args.path}: {len(data)} conversations, {len(results)} questions, each asked twice)")
        print(C.fmt_table(header, rows))
        print(C.latency_line("recall over HTTP", lat))
        if args.out:
            summary = {label: dict(zip(header, row, strict=True)) for (label, _), row in zip(groups, rows, strict=True)}
            Path(args.out).write_text(json.dumps({"summary": summary, "questions": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
