"""A run records the corpus its parties said they trained on, never the run config's unused one.

In a deployment each party reads its own file (node config ``dataset``) and the run
config's ``dataset`` is not used; the model's metadata, the plots' labels and the console
must then not name it, and no similarity to a synthetic corpus's true topics (``tss``) may
be reported: nobody trained on that corpus. The parties say which in their answer to the
agreed vocabulary (one flag, docs/privacy.md).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.console import FLOWER_LOGGER
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics, run_label
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid

OWN_FILES = "the parties' own files (node config)"
SYNTHETIC = {"dataset": "synthetic", "synthetic-nodes": 2, "synthetic-topics": 3, "synthetic-shared-topics": 1,
             "synthetic-vocab-size": 40, "synthetic-docs-per-node": 30, "synthetic-doc-min-length": 20,
             "synthetic-doc-max-length": 30, "num-topics": 3, "num-rounds": 2, "eval-every": 1}


def _party_file(path: Path, words: list[str], seed: int) -> str:
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as fh:
        for _ in range(40):
            fh.write(json.dumps({"text": " ".join(rng.choice(words, size=15).tolist())}) + "\n")
    return str(path)


def _run(tmp_path: Path, name: str, node_configs: list[dict]) -> tuple[dict, list[dict], list[str]]:
    config = {**SYNTHETIC, "output-dir": str(tmp_path / name), "min-df": 1, "max-df": 1.0}
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    FLOWER_LOGGER.addHandler(handler)
    try:
        run_server(InProcessGrid(make_client_app(config), node_configs, config), config)
    finally:
        FLOWER_LOGGER.removeHandler(handler)
    metadata = load_model(tmp_path / name / "model.npz").metadata
    return metadata, read_metrics(tmp_path / name / "metrics.jsonl"), lines


def test_parties_with_their_own_files_are_recorded_as_such_and_get_no_synthetic_metrics(tmp_path):
    files = [_party_file(tmp_path / "a.jsonl", ["cat", "dog", "puppy", "kitten", "leash", "bone"], 1),
             _party_file(tmp_path / "b.jsonl", ["bank", "loan", "stock", "bond", "cash", "fund"], 2)]
    # the worst case: the run config even names the synthetic corpus, which nobody trains on
    metadata, rows, lines = _run(tmp_path, "own", [{"dataset": f} for f in files])
    assert metadata["run_config"]["dataset"] == OWN_FILES
    assert rows[0]["vocabulary_agreement"]["node_corpora"] == 2 and rows[0]["vocabulary_agreement"]["shares"] == 0
    assert not [r for r in rows if {"tss", "tss_normalized"} & set(r)], rows
    assert not (tmp_path / "own" / "tss_normalized.png").exists() and (tmp_path / "own" / "diversity.png").exists()
    assert "synthetic" not in run_label(tmp_path / "own") and OWN_FILES in run_label(tmp_path / "own")
    start = [line for line in lines if line.startswith("flower-topics: lda, 3 topics")]
    assert len(start) == 1 and f"on {OWN_FILES};" in start[0] and "synthetic" not in start[0], lines
    assert not [line for line in lines if "tss" in line], lines


def test_simulated_shares_of_the_synthetic_corpus_keep_its_name_and_its_true_topic_scores(tmp_path):
    metadata, rows, lines = _run(tmp_path, "shares", [{"partition-id": i, "num-partitions": 2} for i in range(2)])
    assert metadata["run_config"]["dataset"] == "synthetic"
    assert rows[0]["vocabulary_agreement"]["shares"] == 2
    assert all("tss_normalized" in r for r in rows) and (tmp_path / "shares" / "tss_normalized.png").exists()
    assert any("on synthetic;" in line for line in lines), lines


def test_a_mix_of_own_files_and_shares_is_said_and_gets_no_synthetic_metrics(tmp_path):
    own = _party_file(tmp_path / "a.jsonl", ["cat", "dog", "puppy", "kitten", "leash", "bone"], 3)
    metadata, rows, _ = _run(tmp_path, "mixed", [{"dataset": own}, {"partition-id": 1, "num-partitions": 2}])
    assert rows[0]["vocabulary_agreement"]["nodes"] == 2
    assert metadata["run_config"]["dataset"] == "mixed: 1 parties' own files (node config), 1 shares of synthetic"
    assert not [r for r in rows if {"tss", "tss_normalized"} & set(r)], rows
