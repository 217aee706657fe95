"""``infer``, ``report`` and ``export`` take the corpora training takes: ``embedded`` and ``synthetic``."""

from __future__ import annotations

import csv
import json

import numpy as np

from flower_topics.cli.main import main
from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.data.prepare import load_run_data
from flower_topics.topic_model.model_file import load_model
from tests.test_cli import TINY


def _rows(path):
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _train(out, *dataset):
    assert main(["simulate", "--method", "lda", "--clients", "2", "--topics", "4", "--rounds", "1",
                 "--mode", "centralized", "--out", str(out), *dataset]) == 0


def test_infer_report_and_export_take_the_embedded_corpus(tmp_path, capsys):
    run = tmp_path / "run"
    _train(run)  # the default corpus: embedded
    assert main(["infer", "--model", str(run / "model.npz"), "--corpus", "embedded", "--out",
                 str(tmp_path / "named.csv")]) == 0
    assert main(["infer", "--model", str(run / "model.npz"), "--corpus", str(EMBEDDED_PATH), "--out",
                 str(tmp_path / "file.csv")]) == 0
    named = _rows(tmp_path / "named.csv")
    ids = [json.loads(line)["id"] for line in EMBEDDED_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [r["id"] for r in named] == ids  # every document of the shipped file, by its package id
    assert named == _rows(tmp_path / "file.csv")
    assert main(["export", str(run), "--format", "gensim", "--out", str(tmp_path / "gensim"),
                 "--corpus", "embedded"]) == 0
    assert (tmp_path / "gensim" / "dictionary.txt").read_text().splitlines()[0] == str(len(ids))  # gensim's num_docs
    assert main(["report", str(run), "--corpus", "embedded"]) == 0
    tokens = sum(int(r["n_words"]) for r in named)
    assert f"expected share of the {tokens} in-vocabulary tokens of embedded" in (run / "report.html").read_text()


def test_infer_and_export_take_the_synthetic_corpus_of_the_models_run(tmp_path, capsys):
    run = tmp_path / "run"
    _train(run, *TINY)
    model = load_model(run / "model.npz")
    assert main(["infer", "--model", str(run / "model.npz"), "--corpus", "synthetic", "--out",
                 str(tmp_path / "theta.csv")]) == 0
    rows = _rows(tmp_path / "theta.csv")
    # TINY: 2 nodes x 25 documents of 20 to 30 tokens, every token in the model's vocabulary (the generator's)
    assert len(rows) == 50 and [r["id"] for r in rows] == [str(i) for i in range(50)]
    corpus = load_run_data(model.metadata["run_config"]).corpus
    np.testing.assert_array_equal([int(r["n_words"]) for r in rows], corpus.doc_lengths)
    assert all(20 <= int(r["n_words"]) <= 30 and r["n_oov"] == "0" for r in rows)
    assert main(["export", str(run), "--format", "gensim", "--out", str(tmp_path / "gensim"),
                 "--corpus", "synthetic"]) == 0
    assert (tmp_path / "gensim" / "dictionary.txt").read_text().splitlines()[0] == "50"
    capsys.readouterr()
    # a model trained on another corpus: 'synthetic' would be a corpus unrelated to it, refused in one line
    other = tmp_path / "embedded-run"
    _train(other)
    assert main(["infer", "--model", str(other / "model.npz"), "--corpus", "synthetic", "--out", "x.csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trained on 'embedded'" in err
