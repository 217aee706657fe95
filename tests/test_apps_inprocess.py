"""ServerApp logic + ClientApp run in one process (LoopbackGrid): fast, no engine."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import make_client_app
from flower_topics.data.prepare import load_run_data
from flower_topics.errors import UserInputError
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics
from flower_topics.federation.server_app import run_server
from tests.flower_harness import LoopbackGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-nodes": 3,
    "synthetic-topics": 6,
    "synthetic-shared-topics": 3,
    "synthetic-vocab-size": 80,
    "synthetic-docs-per-node": 40,
    "synthetic-doc-min-length": 30,
    "synthetic-doc-max-length": 40,
    "num-topics": 6,
    "num-rounds": 4,
    "lda.local-sweeps": 3,
}


def spying(app):
    """``(client, seen)``: ``client`` runs ``app`` and records in ``seen`` every training reply's content,
    what the server receives from a node in a round (tests/test_wire_audit.py checks every message), without
    the evaluation a training reply may carry (an evaluate reply's records under ``evaluate.``, which the wire
    audit checks as one)."""
    from flower_topics.evaluation.federated import split_carried

    seen = []

    def client(msg, context):
        reply = app(msg, context)
        if msg.metadata.message_type.startswith("train."):
            content, carried = split_carried(reply.content)
            assert carried is None or set(carried.keys()) in ({"update", "metrics", "sender", "config"}, {"error"})
            assert (carried is None) == (split_carried(msg.content)[1] is None)  # only when it was asked for
            seen.append(content)
        return reply

    return client, seen


def test_federated_run_writes_the_output_contract(tmp_path):
    config = {**SMALL, "output-dir": str(tmp_path / "run")}
    grid = LoopbackGrid(make_client_app(config), 3, config)
    model = run_server(grid, config)
    out = tmp_path / "run"
    saved = load_model(out / "model.npz")
    np.testing.assert_array_equal(saved.topic_word, model.topic_word)
    assert saved.metadata["method"] == "lda" and saved.metadata["rounds"] == 4
    assert saved.metadata["run_config"]["num-topics"] == 6
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert r["bytes_sent"] > 0 and r["bytes_received"] > 0 and r["replies_applied"] == 3
        assert {"perplexity", "npmi", "umass", "diversity", "tss"} <= set(r)
        assert r["privacy"]["epsilon"] is None
    assert len((out / "topics.txt").read_text().splitlines()) == 6
    assert (out / "vocabulary.txt").read_text().split() == list(saved.vocabulary)
    assert rows[0]["vocabulary_agreement"]["mode"] == "union" and rows[0]["vocabulary_agreement"]["nodes"] == 3
    assert (out / "perplexity.png").exists()


def test_global_counts_equal_total_training_tokens(tmp_path):
    """Every training token is counted exactly once in the global model."""
    config = {**SMALL, "num-rounds": 2, "output-dir": str(tmp_path / "run")}
    grid = LoopbackGrid(make_client_app(config), 3, config)
    from flower_topics.strategies.lda import ADLDA
    from flower_topics.federation.server_app import build_strategy
    from flower_topics.run.config import parse_run_config

    cfg = parse_run_config(config)
    data = load_run_data(cfg)
    strategy = build_strategy(cfg, agree_vocabulary(grid, cfg).vocabulary)
    assert isinstance(strategy, ADLDA)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=2)
    counts = result.arrays["topic-word-counts"].numpy()
    assert counts.sum() == data.train.n_tokens
    np.testing.assert_array_equal(counts.sum(axis=0), np.bincount(data.train.tokens, minlength=data.corpus.n_words))


def test_lost_replies_do_not_corrupt_the_global_counts(tmp_path):
    """Node 102's replies in rounds 2 and 3 are lost; counts stay exactly consistent."""
    config = {**SMALL, "output-dir": str(tmp_path / "run")}
    grid = LoopbackGrid(make_client_app(config), 3, config, drop=lambda r, n: n == 102 and r in (2, 3))
    from flower_topics.run.config import parse_run_config
    from flower_topics.federation.server_app import build_strategy

    cfg = parse_run_config(config)
    data = load_run_data(cfg)
    strategy = build_strategy(cfg, agree_vocabulary(grid, cfg).vocabulary)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=4)
    counts = result.arrays["topic-word-counts"].numpy()
    np.testing.assert_array_equal(counts.sum(axis=0), np.bincount(data.train.tokens, minlength=data.corpus.n_words))
    assert strategy.last_applied[102] == 4


def test_existing_outputs_are_never_overwritten(tmp_path):
    config = {**SMALL, "num-rounds": 1, "output-dir": str(tmp_path / "run")}
    run_server(LoopbackGrid(make_client_app(config), 3, config), config)
    before = (tmp_path / "run" / "model.npz").read_bytes()
    with pytest.raises(UserInputError, match="already holds a run's outputs"):
        run_server(LoopbackGrid(make_client_app(config), 3, config), config)
    assert (tmp_path / "run" / "model.npz").read_bytes() == before


def test_raw_text_corpus_through_the_run_config(tmp_path):
    """A JSONL corpus of raw text: preprocessing keys flow from the run config to server and clients,
    the fixed-seed split is written, label partitioning gives each client its own label."""
    import json

    rng = np.random.default_rng(0)
    vocab = {"pets": ["cat", "dog", "puppy", "kitten", "leash"], "money": ["bank", "loan", "stock", "bond", "cash"]}
    path = tmp_path / "corpus.jsonl"
    with path.open("w") as fh:
        for i in range(60):
            label = "pets" if i % 2 else "money"
            words = rng.choice(vocab[label], size=12).tolist() + ["the", "and"]  # stopwords, dropped
            fh.write(json.dumps({"text": " ".join(words).title() + ".", "label": label}) + "\n")
        fh.write(json.dumps({"text": "The and of.", "label": "pets"}) + "\n")  # empty after preprocessing
    config = {"dataset": str(path), "num-topics": 2, "num-rounds": 3, "lda.local-sweeps": 5, "min-df": 1, "max-df": 1.0,
              "partition": "label", "output-dir": str(tmp_path / "run")}
    run_server(LoopbackGrid(make_client_app(config), 2, config), config)
    saved = load_model(tmp_path / "run" / "model.npz")
    assert sorted(saved.vocabulary) == sorted(vocab["pets"] + vocab["money"])  # lowercased, no stopwords
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[-1]["n_eval_tokens"] > 0  # the held-out documents of both parties were scored
    top = saved.top_words(5)
    assert {frozenset(t) for t in top} == {frozenset(vocab["pets"]), frozenset(vocab["money"])}


def test_fedlda_run_learns_and_reports_privacy_every_round(tmp_path):
    config = {**SMALL, "method": "fedlda", "fedlda.mechanism": "rrp", "fedlda.gamma": "inf", "num-rounds": 12,
              "eval-every": 4, "output-dir": str(tmp_path / "run")}
    spy, seen = spying(make_client_app(config))
    run_server(LoopbackGrid(spy, 3, config), config)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["round"] for r in rows] == list(range(1, 13))
    for r in rows:
        p = r["privacy"]
        assert p["mechanism"] == "rrp" and p["eta"] == pytest.approx(0.0524, abs=1e-4) and p["unit"] == "document"
        assert p["epsilon"] == pytest.approx(r["round"] * p["tuples_per_document"] * 7.5)
        assert r["replies_applied"] == 3
    scored = [r for r in rows if "tss_normalized" in r]
    assert scored[-1]["tss_normalized"] > scored[0]["tss_normalized"]  # it learns the planted topics
    assert scored[-1]["tss_normalized"] > 0.6
    for content in seen:  # nothing but the perturbed tuples and two counts leaves a node
        assert list(content.array_records) == ["update"] and list(content["update"].keys()) == ["tuples"]
        assert set(content["metrics"].keys()) == {"num-documents", "max-tuples-per-document"}
        assert dict(content["sender"]) == {"method": "fedlda"}


def test_fedlda_with_a_public_pad_length_sends_no_size_and_accounts_the_public_l(tmp_path):
    config = {**SMALL, "method": "fedlda", "fedlda.pad-length": 40, "num-rounds": 3, "eval-every": 3,
              "output-dir": str(tmp_path / "run")}
    spy, seen = spying(make_client_app(config))
    run_server(LoopbackGrid(spy, 3, config), config)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[-1]["privacy"]["tuples_per_document"] == 28  # floor(0.7 x 40), known to the server
    assert rows[-1]["replies_applied"] == 3
    for content in seen:
        assert list(content["update"].keys()) == ["tuples"] and len(content["update"]["tuples"].numpy()) % 28 == 0
        assert not content["metrics"].keys()


def test_pctd_run_learns_reports_privacy_and_sends_only_the_statistic(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the word embeddings' cache
    config = {**SMALL, "method": "pctd", "pctd.sigma": 0.1, "pctd.consistency": 0.3, "num-rounds": 15, "eval-every": 1,
              "output-dir": str(tmp_path / "run")}
    spy, seen = spying(make_client_app(config))
    run_server(LoopbackGrid(spy, 3, config), config)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["round"] for r in rows] == list(range(1, 16))
    for r in rows:
        p = r["privacy"]
        assert p["mechanism"] == "gaussian" and p["rounds"] == r["round"] and p["delta"] == 1e-5 and p["unit"] == "token"
        assert r["replies_applied"] == 3
    assert rows[-1]["privacy"]["epsilon"] > rows[0]["privacy"]["epsilon"] > 0
    scored = [r for r in rows if "tss_normalized" in r]
    # from round 1: by round 5 the noisy EM is near its level, where fresh noise can lift a later round above it
    assert scored[0]["round"] == 1 and scored[-1]["perplexity"] < scored[0]["perplexity"]
    assert scored[-1]["tss_normalized"] > 0.6  # the planted topics are found
    for content in seen:  # p(z|d) and counts stay on the node: only M_t leaves it
        assert list(content.array_records) == ["update"] and list(content["update"].keys()) == ["topic-word-statistic"]
        assert set(content["metrics"].keys()) == set()
    saved = load_model(tmp_path / "run" / "model.npz")
    assert saved.metadata["method"] == "pctd" and saved.metadata["privacy"]["rounds"] == 15


def test_pctd_strategy_plugs_into_a_plain_strategy_start(tmp_path):
    """A user's own ServerApp: PCTD built by hand, Flower's Strategy.start, our ClientApp."""
    from flower_topics.strategies.pctd import PCTD
    from flower_topics.wire.pctd import PCTDSettings

    config = {**SMALL, "method": "lda"}  # the run config's method does not matter: the messages say pctd
    grid = LoopbackGrid(make_client_app(config), 3, config)
    vocab = agree_vocabulary(grid, config).vocabulary
    strategy = PCTD(vocab, PCTDSettings(n_topics=6, sigma=0.0), pseudo_count=0.01, seed=3)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=3)
    phi = strategy.topic_word(result.arrays)
    assert phi.shape == (6, len(vocab)) and np.all(phi > 0)
    np.testing.assert_allclose(phi.sum(axis=1), 1.0)
    assert strategy.privacy_report().mechanism == "none"
    assert [strategy.traffic[r].replies_applied for r in (1, 2, 3)] == [3, 3, 3]


def test_two_runs_in_one_process_with_other_synthetic_seeds_train_on_their_own_documents(tmp_path):
    """The party's document cache is keyed by every option that decides the documents: a second
    in-process run over the generator with another seed must not reuse the first run's documents."""
    from flower_topics.federation.client_app import agreed_documents, data_config

    seen = []
    for seed in (1, 2):
        config = {**SMALL, "seed": seed, "num-rounds": 1, "eval-every": 1, "output-dir": str(tmp_path / f"run{seed}")}
        grid = LoopbackGrid(make_client_app(config), 2, config)
        run_server(grid, config)
        seen.append(agreed_documents(grid.contexts[101], data_config(config)).training)
    first, second = seen
    assert first.n_tokens != second.n_tokens or not np.array_equal(first.tokens, second.tokens)
