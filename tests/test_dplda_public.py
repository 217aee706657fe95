"""dplda's public head start (``dplda.public-corpus``): the start is a non-private LDA of the public text over
the agreed vocabulary, reproducible from the run config, refused in one line when unusable, named by the privacy
report as costing nothing, and invisible to the parties beyond the lambda they already receive."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import ConfigRecord

from flower_topics.errors import UserInputError
from flower_topics.run.config import parse_run_config
from flower_topics.wire.dplda import LAMBDA_KEY

VOCABULARY = ("apple", "banana", "cherry", "damson", "elder", "fig")


def _jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


def _pairs(tmp_path, n_docs=20):
    """Documents of only {apple, banana} and of only {cherry, damson}, plus a word outside the vocabulary."""
    texts = ["apple banana apple banana banana apple zebra" if i % 2 else "cherry damson damson cherry cherry damson zebra" for i in range(n_docs)]
    return _jsonl(tmp_path / "public.jsonl", texts)


def _config(tmp_path, public, **extra):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCABULARY) + "\n")
    return parse_run_config({"method": "dplda", "vocabulary": str(vocab), "federated-eval": False,
                             "num-topics": 2, "stopwords": "none", "dplda.public-corpus": public, **extra})


def _strategy(config):
    from flower_topics.strategies.dplda import DPLDA
    from tests.flower_harness import as_server

    as_server()
    return DPLDA.from_config(config, VOCABULARY)


def _initial_lambda(strategy):
    from flower_topics.strategies.dplda import RAW_KEY

    return strategy.initial_arrays()[RAW_KEY].numpy()


def test_the_start_comes_from_the_public_corpus_and_concentrates_on_its_word_pairs(tmp_path):
    from flower_topics.models.svi import START_MASS

    lam = _initial_lambda(_strategy(_config(tmp_path, _pairs(tmp_path))))
    assert lam.shape == (2, len(VOCABULARY))
    share = lam / lam.sum(axis=1, keepdims=True)
    pair_ab, pair_cd = share[:, :2].sum(axis=1), share[:, 2:4].sum(axis=1)
    assert min(pair_ab.max(), pair_cd.max()) > 0.95  # one topic is {apple, banana}, the other {cherry, damson}
    assert np.argmax(pair_ab) != np.argmax(pair_cd)
    # with dplda.public-weight set, each topic holds that many pseudo-counts (plus 1e-3 a cell)
    weighted = _initial_lambda(_strategy(_config(tmp_path, _pairs(tmp_path), **{"dplda.public-weight": START_MASS})))
    np.testing.assert_allclose(weighted.sum(axis=1), START_MASS + 1e-3 * len(VOCABULARY))


def test_public_weight_sets_each_topics_pseudo_counts(tmp_path):
    lam = _initial_lambda(_strategy(_config(tmp_path, _pairs(tmp_path), **{"dplda.public-weight": 5e4})))
    np.testing.assert_allclose(lam.sum(axis=1), 5e4 + 1e-3 * len(VOCABULARY))


def test_the_same_seed_gives_the_same_start_and_another_seed_may_not(tmp_path):
    rng = np.random.default_rng(0)  # documents without structure: where the sampler ends depends on its seed
    public = _jsonl(tmp_path / "mixed.jsonl", [" ".join(rng.choice(VOCABULARY, 8)) for _ in range(40)])
    first = _initial_lambda(_strategy(_config(tmp_path, public, seed=3)))
    again = _initial_lambda(_strategy(_config(tmp_path, public, seed=3)))
    other = _initial_lambda(_strategy(_config(tmp_path, public, seed=4)))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_the_refusals_are_one_line_before_round_1(tmp_path):
    with pytest.raises(UserInputError, match="does not exist") as missing:
        _config(tmp_path, str(tmp_path / "nowhere.jsonl"))
    no_word = _strategy(_config(tmp_path, _jsonl(tmp_path / "other.jsonl", ["zebra yak"] * 10)))
    with pytest.raises(UserInputError, match="shares no word with the agreed vocabulary") as unshared:
        no_word.initial_arrays()
    # 2 topics need 2 documents and 20 tokens over the vocabulary: 3 documents of 6 vocabulary words are 18
    small = _strategy(_config(tmp_path, _pairs(tmp_path, n_docs=3)))
    with pytest.raises(UserInputError, match="too small to train 2 topics: 3 documents and 18 tokens") as tiny:
        small.initial_arrays()
    one_doc = _strategy(_config(tmp_path, _jsonl(tmp_path / "one.jsonl", ["apple banana cherry damson " * 10])))
    with pytest.raises(UserInputError, match="1 documents and 40 tokens"):
        one_doc.initial_arrays()
    assert all("\n" not in str(e.value) for e in (missing, unshared, tiny))
    _initial_lambda(_strategy(_config(tmp_path, _pairs(tmp_path, n_docs=4))))  # 4 documents, 24 tokens: enough


def test_a_party_receives_what_it_received_before_only_the_lambda_values_differ(tmp_path):
    from tests.flower_harness import FixedNodesGrid

    with_public = _strategy(_config(tmp_path, _pairs(tmp_path)))
    without = _strategy(_config(tmp_path, ""))
    sent = {}
    for name, strategy in (("public", with_public), ("none", without)):
        messages = list(strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), FixedNodesGrid([7])))
        sent[name] = messages[0].content
    assert list(sent["public"]["arrays"].keys()) == list(sent["none"]["arrays"].keys()) == [LAMBDA_KEY]
    assert dict(sent["public"]["config"]) == dict(sent["none"]["config"])  # no path, no word of the public text
    assert not any("public" in str(key) or "public" in str(value) for key, value in sent["public"]["config"].items())
    assert with_public.reply_spec() == without.reply_spec()  # what a party may send is unchanged
    assert not np.array_equal(sent["public"]["arrays"][LAMBDA_KEY].numpy(), sent["none"]["arrays"][LAMBDA_KEY].numpy())


def test_the_privacy_report_names_the_public_corpus_and_says_it_costs_nothing(tmp_path):
    public = _pairs(tmp_path)
    report = _strategy(_config(tmp_path, public)).privacy_report()
    assert public in report.details["initial_topics"] and "costs no privacy" in report.details["initial_topics"]
    plain = _strategy(_config(tmp_path, "")).privacy_report()
    assert "public corpus" not in plain.details["initial_topics"]
    assert report.epsilon == plain.epsilon  # the start spends nothing


def test_a_tiny_inprocess_run_with_a_public_corpus_names_it_in_the_model_metadata(tmp_path):
    from flower_topics.data.prepare import load_run_data
    from flower_topics.simulations.runner import simulate
    from flower_topics.topic_model.model_file import load_model

    corpus = load_run_data(parse_run_config({"dataset": "embedded"})).corpus
    public = _jsonl(tmp_path / "public.jsonl", [" ".join(corpus.words(d)) for d in range(60)])
    run = {"method": "dplda", "dataset": "embedded", "num-topics": 5, "num-rounds": 2, "vocabulary": "private",
           "vocabulary-epsilon": 2.0, "dplda.epsilon": 6.0, "federated-eval": False, "dplda.public-corpus": public}
    simulate(run, mode="federated", num_clients=3, out_dir=tmp_path / "run", engine="inprocess")
    report = load_model(tmp_path / "run" / "model.npz").metadata["privacy"]
    assert public in report["initial_topics"] and "costs no privacy" in report["initial_topics"]
    assert report["epsilon"] <= 6.0 + 1e-9


def test_an_unusable_public_corpus_is_refused_after_the_agreement_before_any_training_message(tmp_path):
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server
    from flower_topics.simulations.inprocess import InProcessGrid
    from tests.test_method_contract import TINY

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"w{i:04d}" for i in range(40)) + "\n")
    config = {**TINY, "method": "dplda", "vocabulary": str(vocab), "federated-eval": False,
              "output-dir": str(tmp_path / "run"), "dplda.public-corpus": _jsonl(tmp_path / "p.jsonl", ["zebra yak"] * 9)}
    grid = InProcessGrid.partitions(make_client_app(config), 2, config)
    seen: list[str] = []
    app = grid.client_app

    def recording(message, context):
        seen.append(message.metadata.message_type)
        return app(message, context)

    grid.client_app = recording
    with pytest.raises(UserInputError, match="shares no word with the agreed vocabulary"):
        run_server(grid, config)
    assert seen and not any(kind.startswith("train") for kind in seen)  # the vocabulary went out; no round did


# The rule: the start's weight and how fast it is forgotten come from the public corpus and the run's public
# settings alone (flower_topics.models.svi_public).

@pytest.mark.parametrize("rounds, kappa, expected", [
    (1, 0.5, 4.0),    # 1 - tau0^-1/2 = 1/2
    (2, 1.0, 3.0),    # (1 - 1/tau0)(1 - 1/(tau0 + 1)) = (tau0 - 1)/(tau0 + 1) = 1/2
    (40, 1.0, 41.0),  # the product telescopes to (tau0 - 1)/(tau0 + 39) = 1/2
])
def test_the_delay_leaves_the_start_half_its_weight_after_the_rounds(rounds, kappa, expected):
    from flower_topics.models.svi_public import half_weight_delay, start_weight_left

    assert half_weight_delay(rounds, kappa) == pytest.approx(expected, rel=1e-9)
    assert start_weight_left(expected, rounds, kappa) == pytest.approx(0.5, rel=1e-12)
    assert start_weight_left(1.0, rounds, kappa) == 0.0  # tau0 1: the first step replaces the start


def test_the_evidence_is_each_public_documents_counts_clipped_as_a_party_clips_them():
    import scipy.sparse as sp

    from flower_topics.models.svi_public import public_evidence

    topic_word = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]])
    # three of word 0 (norm 3, clipped to 2: 2 counts), one of word 2 (norm 1: kept), 3 + 4 of words 2, 3 (norm 5: 2/5)
    counts = sp.csr_matrix(np.array([[3.0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 3, 4]]))
    evidence = public_evidence(topic_word, counts, alpha=0.1, clip=2.0)
    np.testing.assert_allclose(evidence, [[2.0, 0, 0, 0], [0, 0, 1 + 1.2, 1.6]], atol=1e-3)


def test_the_default_start_holds_the_public_evidence_and_is_kept_half_after_num_rounds(tmp_path):
    from flower_topics.models.svi_public import start_weight_left

    strategy = _strategy(_config(tmp_path, _pairs(tmp_path), **{"num-rounds": 40}))
    lam = _initial_lambda(strategy)
    # 20 documents, each 3 + 3 of one pair of words (norm sqrt(18), one topic): clipped to 2, 2 sqrt(2) counts each
    eta = strategy.eta
    np.testing.assert_allclose(lam.sum() - eta * lam.size, 20 * 2 * np.sqrt(2), rtol=1e-3)
    assert start_weight_left(strategy.tau0, 40, 0.7) == pytest.approx(0.5)
    assert strategy.tau0 == pytest.approx(313.06, abs=0.01)
    report = strategy.privacy_report().details["initial_topics"]
    assert "clipped expected counts" in report and "tau0 313.1" in report


def test_explicit_settings_win_and_without_a_public_corpus_the_step_is_as_before(tmp_path):
    explicit = _strategy(_config(tmp_path, _pairs(tmp_path), **{"dplda.tau0": 5.0, "dplda.public-weight": 50.0}))
    assert explicit.tau0 == 5.0
    np.testing.assert_allclose(_initial_lambda(explicit).sum(axis=1), 50.0 + 1e-3 * len(VOCABULARY))
    assert _strategy(_config(tmp_path, "")).tau0 == 1.0


def test_the_rule_reads_no_private_setting_or_document(tmp_path):
    """The start and its delay are the same whatever the private data (dataset, partition, parties)."""
    public = _pairs(tmp_path)
    first = _strategy(_config(tmp_path, public, dataset="embedded", partition="iid"))
    other = _strategy(_config(tmp_path, public, dataset=str(tmp_path / "elsewhere.jsonl"), partition="label"))
    assert first.tau0 == other.tau0
    assert np.array_equal(_initial_lambda(first), _initial_lambda(other))


def test_a_public_start_runs_under_secure_aggregation(tmp_path):
    from flower_topics.data.prepare import load_run_data
    from flower_topics.simulations.runner import simulate
    from flower_topics.topic_model.model_file import load_model

    corpus = load_run_data(parse_run_config({"dataset": "embedded"})).corpus
    public = _jsonl(tmp_path / "public.jsonl", [" ".join(corpus.words(d)) for d in range(60)])
    run = {"method": "dplda", "dataset": "embedded", "num-topics": 5, "num-rounds": 2, "vocabulary": "private",
           "vocabulary-epsilon": 2.0, "dplda.epsilon": 6.0, "federated-eval": False, "dplda.public-corpus": public,
           "secure-aggregation": True}
    simulate(run, mode="federated", num_clients=3, out_dir=tmp_path / "run", engine="inprocess")
    report = load_model(tmp_path / "run" / "model.npz").metadata["privacy"]
    assert public in report["initial_topics"] and "secure aggregation" in report["trust_model"]
    assert report["epsilon"] <= 6.0 + 1e-9 and report["rounds"] == 2
