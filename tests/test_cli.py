"""The flower-topics command line: simulate's three modes, evaluate, and one-line errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flower_topics.cli.main import main
from flower_topics.methods import METHODS
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics

TINY = ["--dataset", "synthetic", "--set", "synthetic-nodes=2", "--set", "synthetic-topics=4", "--set", "synthetic-shared-topics=2",
        "--set", "synthetic-vocab-size=50", "--set", "synthetic-docs-per-node=25",
        "--set", "synthetic-doc-min-length=20", "--set", "synthetic-doc-max-length=30"]
#: An OCTIS folder of real text (96 Debian descriptions of the embedded corpus; tests/fixtures/make_octis.py)
OCTIS = Path(__file__).resolve().parent / "fixtures" / "octis_debian"


def _simulate(out: Path, mode: str, *extra: str) -> int:
    return main(["simulate", "--method", "lda", "--clients", "2", "--topics", "4", "--rounds", "3",
                 "--mode", mode, "--out", str(out), *TINY, *extra])


def test_centralized_and_local_modes_write_outputs_and_table(tmp_path, capsys):
    assert _simulate(tmp_path / "c", "centralized") == 0
    assert _simulate(tmp_path / "l", "local") == 0
    assert load_model(tmp_path / "c" / "model.npz").topic_word.shape == (4, 50)
    for client in ("client-0", "client-1"):
        rows = read_metrics(tmp_path / "l" / client / "metrics.jsonl")
        assert [r["round"] for r in rows] == [1, 2, 3] and rows[-1]["perplexity"] > 0
    table = (tmp_path / "l" / "results.md").read_text()
    assert "client-0" in table and "client-1" in table and "perplexity" in table
    assert (tmp_path / "c" / "results.csv").read_text().startswith("mode,model")


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_centralized_and_local_through_the_federated_code_path(tmp_path, method, monkeypatch):
    """One party holding all training documents, then each party alone: the method itself, its privacy report."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    extra = ["--set", "pctd.consistency=0"]
    if method == "dplda":  # an accounted or public vocabulary (here a public file), no federated evaluation
        vocabulary = tmp_path / "vocabulary.txt"
        vocabulary.write_text("\n".join(f"w{i:04d}" for i in range(50)) + "\n")
        extra += ["--set", f"vocabulary={vocabulary}", "--set", "federated-eval=false", "--set", "dplda.epsilon=50",
                  "--set", "dplda.sample-rate=0.5", "--set", "dplda.init=random"]
    base = ["simulate", "--method", method, "--clients", "2", "--topics", "4", "--rounds", "2", *TINY, *extra]
    assert main([*base, "--mode", "centralized", "--out", str(tmp_path / "c")]) == 0
    assert main([*base, "--mode", "local", "--out", str(tmp_path / "l")]) == 0
    central = read_metrics(tmp_path / "c" / "metrics.jsonl")
    assert [r["nodes_sampled"] for r in central] == [1, 1] and central[-1]["privacy"]["mechanism"] != (
        "none" if METHODS[method].private else "x")
    assert load_model(tmp_path / "c" / "model.npz").metadata["method"] == method
    rows = {r["model"]: r for r in csv.DictReader((tmp_path / "l" / "results.csv").open())}
    centralized = next(csv.DictReader((tmp_path / "c" / "results.csv").open()))
    assert int(rows["client-0"]["documents"]) + int(rows["client-1"]["documents"]) == int(centralized["documents"])
    assert {r["privacy_unit"] for r in rows.values()} == {central[-1]["privacy"]["unit"]}


def test_evaluate_prints_every_metric_as_json(tmp_path, capsys):
    assert _simulate(tmp_path / "c", "centralized") == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "c" / "model.npz"), "--corpus", "synthetic", "--labels"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"perplexity", "npmi", "umass", "diversity", "tss", "tss_normalized", "nmi", "purity", "macro_f1"} <= set(metrics)
    # the same numbers the run recorded for its last round
    last = read_metrics(tmp_path / "c" / "metrics.jsonl")[-1]
    assert metrics["perplexity"] == pytest.approx(last["perplexity"], rel=1e-9)
    assert metrics["tss"] == pytest.approx(last["tss"], rel=1e-9)


def test_evaluate_eval_alpha_scores_with_that_fold_in_prior(tmp_path, capsys):
    """``--eval-alpha 0.1`` (the literature's document completion) against the run's 0.01: the perplexity is
    evaluate_model's at that alpha, and not the run's."""
    from flower_topics.run.config import parse_run_config
    from flower_topics.data.node_data import simulated_share
    from flower_topics.evaluation import evaluate_model
    from flower_topics.topic_model.model_file import load_model

    assert _simulate(tmp_path / "c", "centralized") == 0
    capsys.readouterr()
    model_path = str(tmp_path / "c" / "model.npz")
    assert main(["evaluate", "--model", model_path, "--corpus", "synthetic", "--eval-alpha", "0.1"]) == 0
    scored = json.loads(capsys.readouterr().out)["perplexity"]
    model = load_model(model_path)
    config = parse_run_config({k: v for k, v in model.metadata["run_config"].items() if k != "output-dir"})
    corpus = simulated_share({**config, "partition": "iid"}, 0, 1).on_vocabulary(model.vocabulary,
                                                                               int(config["min-doc-length"]))
    expected = evaluate_model(model, corpus, seed=int(config["seed"]), alpha=0.1,
                              n_iter=int(config["eval-iterations"]))["perplexity"]
    assert scored == pytest.approx(expected, rel=1e-9)
    assert scored != pytest.approx(read_metrics(tmp_path / "c" / "metrics.jsonl")[-1]["perplexity"], rel=1e-3)


def test_evaluate_a_real_octis_corpus(tmp_path, capsys):
    from flower_topics.topic_model.model_file import TopicModel, save_model

    vocab = tuple((OCTIS / "vocabulary.txt").read_text(encoding="utf-8").split())
    uniform = TopicModel(np.full((3, len(vocab)), 1.0 / len(vocab)), vocab, metadata={})
    save_model(tmp_path / "m.npz", uniform)
    assert main(["evaluate", "--model", str(tmp_path / "m.npz"), "--corpus", str(OCTIS)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["perplexity"] == pytest.approx(len(vocab), rel=1e-9)  # a uniform model's perplexity is V


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--dataset", "/no/such/corpus"], "does not exist"),
        (["--set", "alpha=-1"], "'alpha' = '-1' must be > 0"),
        (["--set", "bogus=1"], "unknown run-config key(s) bogus"),
        (["--set", "num-topics=3"], "duplicates a dedicated option"),
        (["--partition", "sizes", "--set", "partition-sizes=0.5,0.6"], "sum"),
        (["--method", "nope"], "unknown method 'nope'; registered: lda, fedlda, pctd"),
        (["--engine", "inprocess"], "--engine chooses where a federated run's SuperNodes run"),
    ],
)
def test_simulate_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, argv, fragment):
    out = tmp_path / "run"
    assert _simulate(out, "centralized", *argv) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (out / "model.npz").exists()


def test_evaluate_missing_model_is_one_line(tmp_path, capsys):
    assert main(["evaluate", "--model", str(tmp_path / "none.npz"), "--corpus", "synthetic"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_console_script_exit_status(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "flower_topics.cli.main", "simulate", "--method", "lda", "--clients", "2",
                           "--topics", "0", "--rounds", "1", "--mode", "centralized", "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["flower-topics: error: run-config 'num-topics' = 0 must be >= 1 "
                                                "(number of topics K)"]


def test_evaluate_scores_an_export_with_only_topic_word_and_vocabulary(tmp_path, capsys):
    """A tomotopy or gensim export: float32 rows, no metadata; the documented defaults apply."""
    vocab = (OCTIS / "vocabulary.txt").read_text(encoding="utf-8").split()
    rng = np.random.default_rng(0)
    phi = rng.dirichlet(np.full(len(vocab), 0.1), size=4).astype(np.float32)
    np.savez(tmp_path / "export.npz", topic_word=phi, vocabulary=np.array(vocab))
    assert main(["evaluate", "--model", str(tmp_path / "export.npz"), "--corpus", str(OCTIS)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["coverage"] == 1.0 and metrics["perplexity"] > 0 and -1 <= metrics["npmi"] <= 1


def test_evaluate_refuses_a_corpus_the_model_barely_covers(tmp_path, capsys):
    np.savez(tmp_path / "other.npz", topic_word=np.full((2, 3), 1 / 3), vocabulary=np.array(["film", "zzz", "qqq"]))
    assert main(["evaluate", "--model", str(tmp_path / "other.npz"), "--corpus", str(OCTIS)]) == 2
    err = capsys.readouterr().err
    tokens = [line.split("\t")[0].split() for line in (OCTIS / "corpus.tsv").read_text(encoding="utf-8").splitlines()]
    films, total = sum(doc.count("film") for doc in tokens), sum(map(len, tokens))
    assert 0 < films < 0.001 * total  # "film" is a word of the corpus, a rare one
    assert f"the model's vocabulary covers 0.0% of the corpus' tokens ({films} of {total})" in err
    assert "--min-coverage" in err


def test_evaluate_takes_the_reading_options_a_corpus_needs(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    rows = [{"body": "Cats and dogs. Cats chase dogs", "kind": "pets"}, {"body": "Stocks and bonds. Bonds pay", "kind": "money"}]
    path.write_text("\n".join(json.dumps(r) for r in rows * 20) + "\n")
    np.savez(tmp_path / "m.npz", topic_word=np.full((2, 5), 0.2),
             vocabulary=np.array(["cats", "dogs", "chase", "stocks", "bonds"]))
    assert main(["evaluate", "--model", str(tmp_path / "m.npz"), "--corpus", str(path)]) == 2  # no 'text' column
    assert "text" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(tmp_path / "m.npz"), "--corpus", str(path), "--text-column", "body",
                 "--label-column", "kind", "--labels"]) == 0
    assert json.loads(capsys.readouterr().out)["coverage"] > 0.8


def test_vocabulary_writes_the_words_in_most_documents_and_never_overwrites(tmp_path, capsys):
    corpus = tmp_path / "public.jsonl"
    docs = ["apple banana cherry", "apple banana", "apple durian", "banana apple cherry", "elder"]
    corpus.write_text("\n".join(json.dumps({"text": d}) for d in docs) + "\n")
    out = tmp_path / "vocab.txt"
    assert main(["vocabulary", "--corpus", str(corpus), "--out", str(out), "--max-words", "2", "--min-df", "1",
                 "--max-df", "1.0"]) == 0
    assert sorted(out.read_text().split()) == ["apple", "banana"]  # in 4 documents each; cherry in 2
    assert main(["vocabulary", "--corpus", str(corpus), "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
