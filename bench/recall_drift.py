"""Does asking change what later asks get? A simulated year of memory and a stream of questions.

    .venv/bin/python bench/recall_drift.py [--people 60] [--questions 2000] [--reask 0.4] [--seed 7]

A store of facts about people (birthday, city, job, favourite food, phone), written over the past 12
months, and a stream of questions about them, of which a share re-asks an earlier question and the rest
ask about the people one asks about most (half of them by default). Three ways
of using the engine, each in a fresh store with the same facts:

- before: what recall did before uses were defined — every hit a recall returns counts as a use, and
  importance and recency add to the score without a gate (seed 003's formula as is; emulated here on
  the engine's own candidates: the top 50 re-sorted by `ranking.final_score`, the top 10 recorded);
- default: recall as every client gets it now (a recall is not a use);
- used top-1: a client that reports the first hit as used every time (right or wrong), through
  `Engine.mark_used` — the worst feedback loop a client can build with the opt-in.

At the start and after every block of the stream, a fixed set of probe questions is asked (as a
measurement: the probes themselves change nothing); it prints their mean reciprocal rank of the right
memory and hit@1/@10.
A ranking that drifts loses MRR checkpoint after checkpoint; one that doesn't stays flat. The data are generated
here (no download).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

FIRST = ("Alice Ben Chloe Daniel Emma Felix Grace Hugo Isla Jonas Karin Liam Maya Noah Olga Pablo Quinn Rosa Samir "
         "Tara Umar Vera Wes Xenia Yusuf Zoe Aaron Bianca Carlos Dana Elif Farid Gina Hiro Ines Jamal Kira Leon Mila "
         "Nina Omar Priya Rafael Sofia Tomas Uma Viktor Wanda Yara Zain Anika Bruno Cora Dmitri Esme Fynn Gita "
         "Hector Ivy Jorge").split()
CITIES = ("Lisbon Porto Madrid Seville Lyon Nantes Ghent Utrecht Bremen Leipzig Bologna Turin Krakow Brno Graz "
          "Tallinn Riga Bergen Aarhus Malmo Cork Galway Bristol Leeds").split()
JOBS = ("nurse architect baker welder pilot teacher plumber chemist lawyer editor farmer dentist florist "
        "carpenter translator geologist barista librarian electrician surveyor").split()
FOODS = ("ramen paella sushi lasagne tacos pho falafel risotto dumplings curry goulash pierogi moussaka "
         "bibimbap ceviche couscous").split()
MONTHS = ("January February March April May June July August September October November December").split()


def facts_and_questions(people: int, rnd: random.Random) -> tuple[list[tuple[str, str]], list[tuple[str, int]]]:
    """[(fact text, when)] and [(question, index of the fact that answers it)]."""
    facts: list[tuple[str, str]] = []
    questions: list[tuple[str, int]] = []
    now = datetime.now()
    for name in FIRST[:people]:
        rows = [
            (f"{name}'s birthday is on {rnd.randint(1, 28)} {rnd.choice(MONTHS)}.",
             [f"When is {name}'s birthday?", f"What day was {name} born?"]),
            (f"{name} lives in {rnd.choice(CITIES)} now.", [f"Where does {name} live?", f"Which city is {name} in?"]),
            (f"{name} works as a {rnd.choice(JOBS)}.", [f"What does {name} do for a living?", f"What is {name}'s job?"]),
            (f"{name}'s favourite food is {rnd.choice(FOODS)}.", [f"What food does {name} love?",
                                                                    f"What should I cook for {name}?"]),
            (f"{name}'s phone number ends in {rnd.randint(1000, 9999)}.", [f"What are the last digits of {name}'s "
                                                                             "phone number?"]),
        ]
        for text, qs in rows:
            when = now - timedelta(days=rnd.uniform(0, 365))
            facts.append((text, when.isoformat(timespec="seconds")))
            questions.extend((q, len(facts) - 1) for q in qs)
    return facts, questions


def stream(questions: list[tuple[str, int]], n: int, reask: float, popular: float,
           rnd: random.Random) -> list[tuple[str, int]]:
    """n questions: a share re-asks an earlier one; new ones come from the first `popular` share of the
    questions (people one asks about often), as in real use, where most of memory is rarely asked about."""
    pool = questions[: max(1, int(len(questions) * popular))]
    asked: list[tuple[str, int]] = []
    out = []
    for _ in range(n):
        q = rnd.choice(asked) if asked and rnd.random() < reask else rnd.choice(pool)
        asked.append(q)
        out.append(q)
    return out


def run_mode(mode: str, facts: list[tuple[str, str]], asks: list[tuple[str, int]], probes: list[tuple[str, int]],
             block: int) -> list[tuple]:
    """[(questions asked so far, MRR, hit@1, hit@10 of the probe questions)] at each checkpoint."""
    home, _ready, tmp = C.prepare_home(None, "drift")
    from engine import Engine, ranking

    rows = []
    try:
        with Engine.open(home) as eng:
            uids = [eng.remember(text, at=when, embed="background").id for text, when in facts]
            eng.embed_pending()
            lat: list[float] = []

            def ask(q: str, record: bool = True) -> list[str]:
                t0 = time.perf_counter()
                if mode == "before":
                    pool = eng.recall(q, k=50)
                    pool.sort(key=lambda h: (-ranking.final_score(h.similarity, h.importance, h.recency), h.id))
                    ids = [h.id for h in pool[:10]]
                    if record:
                        eng.mark_used(ids, how="recall")
                else:
                    ids = [h.id for h in eng.recall(q, k=10)]
                    if mode == "used top-1" and ids and record:
                        eng.mark_used(ids[:1], how="client")
                lat.append(time.perf_counter() - t0)
                return ids

            def checkpoint(asked: int) -> None:  # a measurement: the probes change nothing
                rr, h1, h10 = [], [], []
                for q, right in probes:
                    ids = ask(q, record=False)
                    rank = ids.index(uids[right]) + 1 if uids[right] in ids else None
                    rr.append(1.0 / rank if rank else 0.0)
                    h1.append(rank == 1)
                    h10.append(rank is not None)
                rows.append((asked, sum(rr) / len(rr), sum(h1) / len(h1), sum(h10) / len(h10)))

            checkpoint(0)
            for i, (q, _right) in enumerate(asks, start=1):
                ask(q)
                if i % block == 0:
                    checkpoint(i)
            print(f"  {mode}: recall median {sorted(lat)[len(lat) // 2] * 1000:.1f} ms", flush=True)
    finally:
        C.cleanup(tmp)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, default=60, help=f"how many people (at most {len(FIRST)}; 5 facts each)")
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--reask", type=float, default=0.4, help="share of questions that re-ask an earlier one")
    ap.add_argument("--popular", type=float, default=0.5,
                    help="the stream's new questions are about this share of the people (the probes: anyone)")
    ap.add_argument("--block", type=int, default=250, help="questions between two checkpoints")
    ap.add_argument("--probes", type=int, default=100, help="questions asked at every checkpoint")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    if not 1 <= args.people <= len(FIRST):
        ap.error(f"--people must be between 1 and {len(FIRST)}")
    rnd = random.Random(args.seed)
    facts, questions = facts_and_questions(args.people, rnd)
    asks = stream(questions, args.questions, args.reask, args.popular, rnd)
    probes = rnd.sample(questions, min(args.probes, len(questions)))
    print(f"{len(facts)} facts over 12 months, {len(asks)} questions ({args.reask:.0%} re-asked); the rank of the "
          f"right memory for {len(probes)} probe questions at every {args.block}", flush=True)
    modes = ("before", "default", "used top-1")
    results = {m: run_mode(m, facts, asks, probes, args.block) for m in modes}
    header = ["after questions"] + [f"{m} {x}" for m in modes for x in ("MRR", "@1", "@10")]
    table = []
    for i, row in enumerate(results[modes[0]]):
        line: list[object] = [row[0]]
        for m in modes:
            line += list(results[m][i][1:])
        table.append(line)
    print(C.fmt_table(header, table))
    for m in modes:
        first, last = results[m][0][1], results[m][-1][1]
        print(f"{m}: probe MRR at the start {first:.3f}, at the end {last:.3f} (ratio {last / first if first else 0:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
