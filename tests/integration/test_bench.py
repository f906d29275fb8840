"""The evaluation harnesses run end to end on any data in their format (tiny sets built here, not the
public ones) and refuse unreadable input with one clear line instead of a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DOCS = {
    "d1": ("Volcanoes", "Basaltic lava flows from shield volcanoes in Hawaii cool into pahoehoe rock."),
    "d2": ("Bees", "Honey bees communicate the direction of flowers with a waggle dance."),
    "d3": ("Tides", "The gravitational pull of the moon raises ocean tides twice a day."),
    "d4": ("Coffee", "Caffeine blocks adenosine receptors in the brain and delays sleepiness."),
    "d5": ("Glaciers", "Alpine glaciers retreat as summer temperatures rise."),
}
QUERIES = {"q1": "How do honey bees tell each other where flowers are?",
           "q2": "What makes ocean tides happen?",
           "q3": "Why does coffee keep people awake?"}
QRELS = {"q1": "d2", "q2": "d3", "q3": "d4"}


def run_bench(script: str, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(tmp / "home"))
    env.pop("PERSONAL_LLM_HOME", None)
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          env=env, cwd=tmp, timeout=600)


def beir_set(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n"
                                               for d, (t, x) in DOCS.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": x}) + "\n" for q, x in QUERIES.items()))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                             + "".join(f"{q}\t{d}\t1\n" for q, d in QRELS.items())
                                             + "q1\td5\t0\n")  # a zero judgement is not relevant
    return root


def test_eval_beir_prints_its_table_and_writes_its_results(tmp_path: Path):
    data = beir_set(tmp_path / "tiny")
    out = tmp_path / "beir.json"
    proc = run_bench("eval_beir.py", str(data), "--out", str(out), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "5 documents, 3 test queries" in proc.stdout and "ours nDCG@10" in proc.stdout
    result = json.loads(out.read_text())
    assert [q["qid"] for q in result["queries"]] == ["q1", "q2", "q3"]
    assert result["summary"]["ours nDCG@10"] == 1.0  # each question has one obvious answer
    assert result["summary"]["bm25 R@10"] == 1.0 and result["summary"]["dense R@10"] == 1.0


@pytest.mark.timeout(900)  # the server loads the model
def test_eval_beir_through_the_api_waits_for_the_background_embedder(tmp_path: Path):
    """Long texts are stored without a vector and embedded by the server in the background: the run asks its
    questions once all have one, polling the server's stats now and then (it used to ask a recall in a
    tight loop, a line printed for each)."""
    data = beir_set(tmp_path / "tiny")
    long_docs = [{"_id": d, "title": t, "text": " ".join([x] * 16)} for d, (t, x) in DOCS.items()]
    assert all(len(d["text"]) > 700 for d in long_docs)  # longer than a remember embeds at once
    (data / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in long_docs))
    out = tmp_path / "beir.json"
    proc = run_bench("eval_beir.py", str(data), "--http", "--out", str(out), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "every memory has its vector" in proc.stdout
    assert proc.stdout.count("waiting for their vectors") <= 2, proc.stdout
    summary = json.loads(out.read_text())["summary"]
    assert summary["pass1 nDCG@10"] == summary["pass2 nDCG@10"] == 1.0


@pytest.mark.timeout(900)  # the server loads the model
def test_backlog_drain_times_the_servers_background_embedder_against_the_model(tmp_path: Path):
    data = beir_set(tmp_path / "tiny")
    long_docs = [{"_id": d, "title": t, "text": " ".join([x] * 16)} for d, (t, x) in DOCS.items()]
    (data / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in long_docs))
    proc = run_bench("backlog_drain.py", str(data), "--n", "4", "--backend", "sqlite", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stored 4 in" in proc.stdout and "embedded/raw" in proc.stdout and "recall during drain" in proc.stdout


def test_eval_locomo_scores_evidence_and_the_floor(tmp_path: Path):
    turns = [("Ana", "I adopted a grey cat called Pixel last week."), ("Ben", "Lovely! I am training for a marathon."),
             ("Ana", "My sister moved to Lisbon for a new job."), ("Ben", "I ran twenty kilometres on Sunday.")]
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": s, "dia_id": f"D1:{i + 1}", "text": t} for i, (s, t) in enumerate(turns[:2])],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [{"speaker": s, "dia_id": f"D2:{i + 1}", "text": t} for i, (s, t) in enumerate(turns[2:])],
        },
        "qa": [
            {"question": "What is the name of Ana's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "Where did Ana's sister move?", "answer": "Lisbon", "evidence": ["D2:1"], "category": 4},
            {"question": "What is Ben training for?", "answer": "a marathon", "evidence": ["D1:2; D2:2"],
             "category": 1},
            {"question": "Which opera did Ana sing in?", "adversarial_answer": "none", "evidence": [], "category": 5},
        ],
    }
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps([sample]))
    out = tmp_path / "locomo.json"
    proc = run_bench("eval_locomo.py", str(path), "--out", str(out), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 conversations, 4 memories, 4 questions" in proc.stdout and "relevance floor" in proc.stdout
    result = json.loads(out.read_text())
    by_q = {q["question"]: q for q in result["questions"]}
    assert by_q["What is Ben training for?"]["gold"] == ["D1:2", "D2:2"]  # "a; b" evidence is split
    assert by_q["What is the name of Ana's cat?"]["ours@5"] == 1.0
    assert result["summary"]["answerable (1-4)"]["n"] == 3


def test_unreadable_data_gets_one_clear_line(tmp_path: Path):
    not_json = tmp_path / "notes.json"
    not_json.write_text("this is not json")
    wrong_shape = tmp_path / "wrong.json"
    wrong_shape.write_text(json.dumps({"conversation": {}}))
    for script, arg, words in (("eval_locomo.py", str(not_json), "cannot read"),
                               ("eval_locomo.py", str(wrong_shape), "not a LoCoMo-format file"),
                               ("eval_locomo.py", str(tmp_path / "missing.json"), "cannot read"),
                               ("eval_beir.py", str(tmp_path), "not a readable BEIR data set")):
        proc = run_bench(script, arg, tmp=tmp_path)
        assert proc.returncode == 2, (script, arg, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr
    data = beir_set(tmp_path / "tiny")
    proc = run_bench("eval_beir.py", str(data), "--split", "train", tmp=tmp_path)
    assert proc.returncode == 2 and "qrels/train.tsv" in proc.stderr and "Traceback" not in proc.stderr


def test_recall_latency_benchmark_runs_and_checks_exactness(tmp_path: Path):
    proc = run_bench("recall_latency.py", "--sizes", "300", "--queries", "5", "--vectors", "random", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.strip().startswith("300 |"))
    assert "100%" in row  # the engine's vector search returned exactly the brute-force top k


def test_ingest_throughput_benchmark_runs(tmp_path: Path):
    proc = run_bench("ingest_throughput.py", "--files", "3", "--mb", "0.03", "--batch-sizes", "16",
                     "--sweep-chunks", "16", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ratio ingest / raw runtime:" in proc.stdout and "ratio ingest / s-t:" in proc.stdout
    assert "chunks/s" in proc.stdout


def test_lexical_budget_bench_says_what_store_it_needs(tmp_path: Path):
    proc = run_bench("lexical_budget.py", str(tmp_path / "nothing"), tmp=tmp_path)
    assert proc.returncode == 2 and "no store kept by bench/scale.py" in proc.stderr and "Traceback" not in proc.stderr
    kept = tmp_path / "kept"
    proc = run_bench("scale.py", "--sizes", "1000", "--dir", str(kept), "--keep", "--fill-only", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_bench("lexical_budget.py", str(kept), tmp=tmp_path)  # 500 memories: no word is costly to rank
    assert proc.returncode == 1 and "too few common words" in proc.stdout, proc.stderr[-3000:]


_DISTINCT_VECTORS = """
import os, sys
from pathlib import Path
base = Path(sys.argv[1])
os.environ.update(PERSONAL_LLM_HOME=str(base / "profile"), XDG_DATA_HOME=str(base / "xdg-data"),
                  PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
from engine import Engine
eng = Engine.open(base / "profile", actor="sdk")
for table in ("memories", "chunks"):
    print(table, *eng.store.con.execute(
        f"SELECT count(*), count(DISTINCT embedding) FROM vec_{table}_f32").fetchone())
eng.close()
"""


def test_scale_bench_grows_a_kept_store_with_new_vectors(tmp_path: Path):
    """A kept store grown by a later run gets vectors of its own, not the first rows' again (equal vectors tie,
    and a tie at the 10th place put the bench's recall@10 against exact below 1)."""
    kept = tmp_path / "kept"
    for size in ("600", "1200"):
        proc = run_bench("scale.py", "--sizes", size, "--dir", str(kept), "--keep", "--fill-only", tmp=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    proc = subprocess.run([sys.executable, "-c", _DISTINCT_VECTORS, str(kept)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()}
    assert counts == {"memories": ["600", "600"], "chunks": ["600", "600"]}, counts


def test_forget_windows_bench_times_both_triggers_and_checks_what_each_forget_took(tmp_path: Path):
    proc = run_bench("forget_windows.py", "--memories", "300", "--windows", "3", "--forgets", "6", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "300 memories, 900 window vectors" in proc.stdout
    assert "median of 3 each" in proc.stdout and "with the old trigger" in proc.stdout
    proc = run_bench("forget_windows.py", "--forgets", "1", tmp=tmp_path)
    assert proc.returncode == 2 and "--forgets >= 2" in proc.stderr and "Traceback" not in proc.stderr


def test_scale_bench_times_each_flat_operation_in_turn_with_a_baseline_store(tmp_path: Path):
    proc = run_bench("scale.py", "--sizes", "300", "600", "--ops", "4", "--queries", "4", "--reopens", "1",
                     tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "kept open beside the measured one and timed in turn with it" in out
    table = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    for op in ("remember (words)", "stats", "forget (an old memory)", "change feed (after another's write)"):
        assert op in table and table[op].count("x)") == 2, table.get(op)
    assert "recall / floor (median)" in table and "recall@10 vs exact" in table
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("memory.db"))  # nothing kept


def test_eval_locomo_reads_realtalk_chats(tmp_path: Path):
    """A REALTALK chat: turns timed each at their own time, categories 1-3, evidence ids written loosely."""
    chat = {
        "name": {"speaker_1": "Ana", "speaker_2": "Ben"},
        "session_1": [
            {"clean_text": "My cat Miso turned three today!", "speaker": "Ana", "date_time": "29.12.2023, 22:42:04",
             "dia_id": "D1:1", "img_file": [], "img_url": []},
            {"clean_text": "Happy birthday Miso! I'm training for a marathon.", "speaker": "Ben",
             "date_time": "29.12.2023, 22:45:00", "dia_id": "D1:2", "img_file": [], "img_url": []},
        ],
        "session_1_date_time": "29.12.2023, 22:42:04",
        "qa": [{"question": "What is the name of Ana's cat?", "answer": "Miso", "evidence": ["D 1:1."], "category": 1},
               {"question": "What is Ben training for?", "answer": "a marathon", "evidence": ["D1:2"], "category": 3}],
    }
    folder = tmp_path / "realtalk"
    folder.mkdir()
    (folder / "Chat_1_Ana_Ben.json").write_text(json.dumps(chat))
    out = tmp_path / "r.json"
    proc = run_bench("eval_locomo.py", str(folder), "--out", str(out), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REALTALK evidence recall" in proc.stdout and "3 inference" in proc.stdout
    by_q = {q["question"]: q for q in json.loads(out.read_text())["questions"]}
    assert by_q["What is the name of Ana's cat?"]["gold"] == ["D1:1"]
    assert by_q["What is the name of Ana's cat?"]["ours@5"] == 1.0


@pytest.mark.timeout(1800)  # two servers loading the model, on a loaded machine
def test_eval_beir_through_the_api_of_a_postgresql_server(tmp_path: Path, request):
    """--backend postgres starts PostgreSQL in --pg-data, sets it up and serves it (`server init`, `add-user`,
    `serve --database`); a second run asks the data the first one stored there."""
    data = beir_set(tmp_path / "tiny")
    # not under pytest's folders: as root the server runs as nobody, and those are private to root
    pg = Path(tempfile.mkdtemp(prefix="pllm-bench-pg-"))
    pg.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(pg, ignore_errors=True))
    for n in (1, 2):
        out = tmp_path / f"pg{n}.json"
        proc = run_bench("eval_beir.py", str(data), "--backend", "postgres", "--pg-data", str(pg), "--out", str(out),
                         tmp=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "through the HTTP API (PostgreSQL + pgvector): 5 documents, 3 test queries" in proc.stdout
        assert ("reusing the stored data (5 memories)" in proc.stdout) == (n == 2)
        on_postgres = json.loads(out.read_text())["summary"]
        assert on_postgres["pass1 nDCG@10"] == on_postgres["pass2 nDCG@10"] == 1.0
    assert not list(pg.glob("data/postmaster.pid"))  # stopped
    proc = run_bench("eval_beir.py", str(data), "--token", "pllm_x", tmp=tmp_path)
    assert proc.returncode == 2 and "--token is for --server" in proc.stderr
