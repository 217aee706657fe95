"""The prevalence example of docs/topics-in-use.md, on the dated synthetic corpus, as written (fewer rounds, in this
process): the topic the generator makes rise rises in the written prevalence.csv, and the one it makes fall falls."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np

from flower_topics.cli.main import _parser, main
from flower_topics.data.synthetic import FALLING_TOPIC, RISING_TOPIC, make_synthetic_corpus
from flower_topics.data.prepare import synthetic_config
from flower_topics.run.config import parse_assignments, parse_run_config
from flower_topics.run.prevalence_outputs import read_prevalence
from flower_topics.topic_model.model_file import load_model

PAGE = Path(__file__).resolve().parents[1] / "docs" / "topics-in-use.md"


def _documented_command() -> list[str]:
    """The page's ``flower-topics simulate`` command on the dated synthetic corpus, as arguments."""
    lines = [line for block in re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
             for line in block.replace("\\\n", " ").splitlines() if "synthetic-dates" in line]
    assert len(lines) == 1, lines
    argv = shlex.split(lines[0])
    assert argv[:2] == ["flower-topics", "simulate"]
    return argv[1:]


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    position = argv.index(flag)
    return [*argv[:position + 1], value, *argv[position + 2:]]


def test_the_documented_prevalence_example_shows_the_planted_trends(tmp_path):
    argv = _documented_command()
    out = tmp_path / "run"
    assert main([*_with(_with(argv, "--rounds", "10"), "--out", str(out)), "--engine", "inprocess"]) == 0

    # the generator's corpus of that command, regenerated: its true topics and each document's true shares
    args = _parser().parse_args(argv)
    assert args.dataset == "synthetic"
    config = parse_run_config({**parse_assignments(args.set), "dataset": args.dataset, "seed": args.seed})
    truth = make_synthetic_corpus(synthetic_config(config), seed=int(config["seed"]))
    table, _ = read_prevalence(out / "prevalence.csv")
    years = tuple(sorted({date[:4] for date in truth.corpus.dates}))
    assert table.periods == years  # yearly, every document dated
    assert table.documents.sum() == truth.corpus.n_docs

    # learned topics are matched to the generator's by their topic-word vectors (cosine), not by number
    model = load_model(out / "model.npz")
    columns = [truth.corpus.word_index[word] for word in model.vocabulary]
    true_words = truth.topic_word[:, columns]
    cosine = (model.topic_word / np.linalg.norm(model.topic_word, axis=1, keepdims=True)) @ (
        true_words / np.linalg.norm(true_words, axis=1, keepdims=True)).T
    matched = cosine.argmax(axis=1)
    shares = table.shares()
    document_years = np.array([date[:4] for date in truth.corpus.dates])
    for planted, direction in ((RISING_TOPIC, 1), (FALLING_TOPIC, -1)):
        assert cosine[:, planted].max() > 0.9, f"generator topic {planted} was not learned"
        learned = shares[matched == planted].sum(axis=0)  # a topic learned twice counts with both halves
        assert np.all(direction * np.diff(learned) > 0), (planted, learned)
        true_share = np.array([truth.doc_topic[document_years == year, planted].mean() for year in years])
        np.testing.assert_allclose(learned, true_share, atol=0.05)
