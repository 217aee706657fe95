"""gFedNTM through Flower (method ``ntm``): Sync-Opt equals centralized training exactly, FedAvg weights by
documents, and each party's DP-SGD accounting and secret noise."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord

from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import agreed_documents, data_config, make_client_app, party_seed
from flower_topics.clients.ntm import NTMClientState, draw_batch, round_randomness, sample_rate, train_round
from flower_topics.run.config import parse_run_config
from flower_topics.errors import UserInputError
from flower_topics.methods import get_method
from flower_topics.models import ntm
from flower_topics.models.ntm_federated import build_model, dp_gradient
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.base import Reply
from flower_topics.strategies.ntm import NTM
from flower_topics.wire import ntm as wire

torch.set_num_threads(1)

TINY = {
    "dataset": "synthetic",
    "synthetic-nodes": 3, "synthetic-topics": 5, "synthetic-shared-topics": 2, "synthetic-vocab-size": 40,
    "synthetic-docs-per-node": 20, "synthetic-doc-min-length": 15, "synthetic-doc-max-length": 20,
    "num-topics": 4, "num-rounds": 3, "federated-eval": False, "method": "ntm", "ntm.batch-size": 8,
}


def _grid(config, secret_seeds=(1, 2, 3)):
    nodes = [{"partition-id": i, "num-partitions": len(secret_seeds),
              **({"secret-seed": s} if s is not None else {})} for i, s in enumerate(secret_seeds)]
    return InProcessGrid(make_client_app(config), nodes, config)


def _strategy(**extra):
    config = parse_run_config({**TINY, **extra})
    grid = _grid(config)
    return get_method("ntm").build_strategy(config, agree_vocabulary(grid, config).vocabulary), config, grid


# ----------------------------------------------------------------------------- the wire


@pytest.mark.parametrize("kind", wire.MODELS)
def test_the_wire_parameter_count_is_the_networks(kind):
    model = build_model(57, 5, kind, embedding_size=0 if kind == "prodlda" else 12, hidden_sizes=wire.HIDDEN_SIZES)
    assert wire.n_parameters(kind, 57, 5, 0 if kind == "prodlda" else 12) == ntm.n_parameters(model)


@pytest.mark.parametrize("extra", [{"ntm.norm": "batch"}, {"ntm.norm": "batch", "ntm.sync": "local"}])
def test_batch_norm_is_refused_where_it_breaks_eq2_or_dp(extra):
    with pytest.raises(UserInputError, match="norm='batch'"):
        _strategy(**extra)


def test_batch_norm_runs_with_local_sync_without_dp():
    strategy, _, grid = _strategy(**{"ntm.norm": "batch", "ntm.sync": "local", "ntm.dp": False,
                                     "ntm.local-steps": 2})
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=2)
    assert result.arrays and strategy.traffic[2].replies_applied == 3


# ----------------------------------------------------------------------------- (a) Sync-Opt == centralized


@pytest.mark.parametrize("solver", ["adam", "sgd"])
def test_sync_opt_through_flower_equals_centralized_steps_on_the_concatenated_batches(solver):
    """Three parties with fixed secret seeds: the server's weights after each round equal a
    centralized optimizer's steps on the concatenation of the parties' mini-batches, with each
    document's own dropout and reparameterization noise (eq. 2 and eq. 3, norm='layer')."""
    rounds = 4
    strategy, config, grid = _strategy(**{"ntm.dp": False, "ntm.optimizer": solver, "ntm.learning-rate": 1e-2})
    central = copy.deepcopy(strategy.model)
    optimizer = ntm.make_optimizer(central, solver, 1e-2)
    served = {}
    strategy.start(grid, strategy.initial_arrays(), num_rounds=rounds,
                   evaluate_fn=lambda r, arrays: served.__setitem__(r, strategy.weights(arrays).copy()))
    np.testing.assert_array_equal(served[0], ntm.flatten_parameters(central))
    corpora = [agreed_documents(grid.contexts[node], data_config(config)).training
               for node in sorted(grid.contexts)]
    # each party's seed of the run: its secret-seed mixed with the nonce its state keeps for the run
    seeds = [party_seed(grid.contexts[node], config, private=True) for node in sorted(grid.contexts)]
    settings = strategy.ntm
    for r in range(1, rounds + 1):
        rows, noises = [], []
        for seed, corpus in zip(seeds, corpora):
            rng, generator = round_randomness(seed, r)
            index = draw_batch(rng, corpus.n_docs, settings)
            rows.append(corpus.doc_term_matrix()[index].toarray())
            noises.append(ntm.draw_noise(central, index.size, generator))
        noise = ntm.ForwardNoise(*(torch.cat([getattr(n, f) for n in noises]) for f in
                                   ("eps", "encoder_mask", "theta_mask")))
        _, gradient = ntm.batch_gradient(central, np.concatenate(rows).astype(np.float32), None, noise=noise)
        ntm.apply_gradient(central, optimizer, gradient)
        expected = ntm.flatten_parameters(central)
        assert np.abs(expected - served[r - 1]).max() > 1e-4  # the step moved the weights
        # float32: the weighted average (float64 over 3 float32 gradients) and the concatenated batch's gradient
        # differ by summation order only. Adam divides by sqrt(v), so on a near-zero gradient entry that roundoff
        # can move a step by up to a whole step either way (its first steps are lr x sign(g)): 2 lr bounds every
        # entry (a CI run saw 0.5% of a step, 4.7e-5, with the parties' per-run nonce); 1e-6 must hold for nearly all
        np.testing.assert_allclose(served[r], expected, rtol=1e-5, atol=2 * 1e-2)
        # (a CI run under load saw 99.89% of the entries within 1e-6 after 4 Adam rounds; a wrong aggregation, such
        # as an unweighted mean or a missing party, moves nearly every entry by about a step)
        assert np.mean(np.abs(served[r] - expected) <= 1e-6 + 1e-5 * np.abs(expected)) > 0.99
    assert sum(len(x) for x in rows) == 3 * 8


# ----------------------------------------------------------------------------- (b) aggregation by hand


def _settings(**kw) -> wire.NTMSettings:
    return wire.NTMSettings(n_topics=3, **{"dp": False, **kw})


def test_local_sync_is_the_document_weighted_average_of_the_weights():
    vocabulary = [f"w{i}" for i in range(11)]
    strategy = NTM(vocabulary, _settings(sync="local"))
    arrays = strategy.initial_arrays()
    p = strategy.weights(arrays).size
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(1, p)).astype(np.float32) for _ in range(3)]
    docs = [10, 30, 60]
    replies = [Reply(100 + i, {wire.NEW_WEIGHTS_KEY: w}, {"num-documents": n, "loss": 1.0})
               for i, (w, n) in enumerate(zip(weights, docs))]
    new, metrics = strategy.aggregate(1, arrays, replies)
    expected = (10 * weights[0] + 30 * weights[1] + 60 * weights[2])[0] / 100
    np.testing.assert_allclose(new[wire.WEIGHTS_KEY].numpy(), expected, rtol=1e-6, atol=1e-7)
    assert metrics["relative-change"] > 0


def test_minibatch_sync_is_eq2_then_eq3():
    vocabulary = [f"w{i}" for i in range(11)]
    strategy = NTM(vocabulary, _settings(optimizer="sgd", learning_rate=0.5))
    arrays = strategy.initial_arrays()
    w = strategy.weights(arrays).astype(np.float64)
    rng = np.random.default_rng(1)
    grads = [rng.normal(size=(1, w.size)).astype(np.float32) for _ in range(2)]
    replies = [Reply(101, {wire.GRADIENT_KEY: grads[0]}, {"batch-size": 5, "loss": 2.0}),
               Reply(102, {wire.GRADIENT_KEY: grads[1]}, {"batch-size": 15, "loss": 1.0})]
    new, metrics = strategy.aggregate(1, arrays, replies)
    expected = w - 0.5 * (5 * grads[0][0] + 15 * grads[1][0]) / 20
    np.testing.assert_allclose(new[wire.WEIGHTS_KEY].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert metrics["loss"] == pytest.approx((5 * 2.0 + 15 * 1.0) / 20)


def test_max_steps_stops_sending():
    strategy, _, grid = _strategy(**{"ntm.dp": False, "ntm.max-steps": 2})
    strategy.start(grid, strategy.initial_arrays(), num_rounds=4)
    assert [strategy.traffic[r].nodes_sampled for r in (1, 2)] == [3, 3]
    assert 3 not in strategy.traffic or strategy.traffic[3].nodes_sampled == 0
    assert strategy.steps == 2 and "max-steps" in strategy.stopped


# ----------------------------------------------------------------------------- (c) DP-SGD


def _party_corpus():
    config = parse_run_config(TINY)
    grid = _grid(config)
    agree_vocabulary(grid, config)
    return agreed_documents(grid.contexts[101], data_config(config)).training


def test_dp_epsilon_grows_with_rounds_and_equals_an_independent_rdp_computation():
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    from flower_topics.privacy.gaussian import DEFAULT_ORDERS

    corpus = _party_corpus()
    settings = wire.NTMSettings(n_topics=4, dp=True, batch_size=8, noise_multiplier=1.1, dp_delta=1e-5)
    model = build_model(corpus.n_words, 4, "prodlda")
    weights = ntm.flatten_parameters(model)
    state = NTMClientState()
    q = sample_rate(corpus.n_docs, settings)
    assert 0 < q < 1
    epsilons = []
    for r in range(1, 5):
        row, metrics = train_round(corpus, weights, state, server_round=r, settings=settings, seed=3)
        assert set(metrics) == {"batch-size", "epsilon"} and row.shape == (1, weights.size)
        epsilons.append(metrics["epsilon"])
        rdp = compute_rdp(q=q, noise_multiplier=1.1, steps=r, orders=list(DEFAULT_ORDERS))
        assert metrics["epsilon"] == pytest.approx(get_privacy_spent(orders=list(DEFAULT_ORDERS), rdp=rdp,
                                                                     delta=1e-5)[0], rel=1e-9)
        accountant = RDPAccountant()
        for _ in range(r):
            accountant.step(noise_multiplier=1.1, sample_rate=q)
        assert metrics["epsilon"] <= accountant.get_epsilon(1e-5) * (1 + 1e-9)  # more orders: never looser
    assert np.all(np.diff(epsilons) > 0) and state.dp_steps == 4


def test_dp_gradient_without_noise_or_clipping_is_the_mean_gradient():
    corpus = _party_corpus()
    model = build_model(corpus.n_words, 4, "prodlda")
    bow = corpus.doc_term_matrix()[:6].toarray().astype(np.float32)
    noise = ntm.draw_noise(model, 6, torch.Generator().manual_seed(0))
    _, mean = ntm.batch_gradient(model, bow, None, noise=noise)
    _, private = dp_gradient(model, torch.as_tensor(bow), None, noise, max_grad_norm=1e9, noise_multiplier=1e-20,
                             expected_batch=6.0, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(private, mean, rtol=1e-4, atol=1e-6)
    _, clipped = dp_gradient(model, torch.as_tensor(bow), None, noise, max_grad_norm=0.5, noise_multiplier=1e-20,
                             expected_batch=1.0, generator=torch.Generator().manual_seed(1))
    assert np.linalg.norm(clipped) <= 6 * 0.5 * (1 + 1e-5)  # each document moves the sum by at most C


def _first_replies(secret_seeds):
    config = parse_run_config({**TINY, "ntm.dp": True})
    grid = _grid(config, secret_seeds)
    strategy = get_method("ntm").build_strategy(config, agree_vocabulary(grid, config).vocabulary)
    messages = strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid)
    return [r.content["update"][wire.GRADIENT_KEY].numpy() for r in grid.send_and_receive(messages)]


def test_dp_noise_is_the_partys_secret():
    same = _first_replies((5, 6, 7)), _first_replies((5, 6, 7))
    for a, b in zip(*same):
        assert not np.allclose(a, b)  # a fixed secret seed is mixed with a fresh nonce per run: other noise
    fresh = _first_replies((None, None, None)), _first_replies((None, None, None))
    for a, b in zip(*fresh):
        assert not np.allclose(a, b)  # without a secret: fresh entropy, nothing the server could recompute


def test_the_contract_reply_carries_only_the_row_and_the_metrics():
    strategy, config, grid = _strategy()
    messages = strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid)
    for reply in grid.send_and_receive(messages):
        assert set(reply.content["update"].keys()) == {wire.GRADIENT_KEY}
        assert set(reply.content["metrics"].keys()) == {"batch-size", "epsilon"}
    arrays, _ = strategy.aggregate_train(1, grid.send_and_receive(
        strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid)))
    assert arrays is not None and strategy.privacy_report().epsilon > 0


@pytest.mark.parametrize("kind", ["combinedtm", "zeroshottm"])
def test_embedding_models_run_with_the_offline_sentence_transformer(kind):
    """Each party embeds its documents' words (the corpora keep no raw text); E travels in the settings."""
    pytest.importorskip("sentence_transformers")
    strategy, _, grid = _strategy(**{"ntm.model": kind, "num-rounds": 2})
    strategy.start(grid, strategy.initial_arrays(), num_rounds=2)
    assert strategy.ntm.embedding_size > 0 and strategy.traffic[2].replies_applied == 3
    assert strategy.privacy_report().epsilon > 0


def test_each_partys_accounting_persists_in_its_node_state_across_rounds():
    strategy, _, grid = _strategy()
    strategy.start(grid, strategy.initial_arrays(), num_rounds=3)
    assert set(strategy.party_epsilon) == {101, 102, 103}
    assert all(strategy.party_epsilon[n] > strategy.first_epsilon[n] > 0 for n in strategy.party_epsilon)
    report = strategy.privacy_report()
    assert report.unit == "document" and report.epsilon == max(strategy.party_epsilon.values()) and report.rounds == 3


def test_a_finished_run_keeps_its_network_so_documents_can_be_inferred_later(tmp_path):
    """state.npz holds the final weights: the loaded network's decoder is the written topic_word, and its
    encoder gives each document proportions (what model.npz alone cannot)."""
    from flower_topics.topic_model.model_file import load_model
    from flower_topics.federation.server_app import run_server

    config = parse_run_config({**TINY, "ntm.dp": False, "output-dir": str(tmp_path / "run")})
    grid = _grid(config)
    run_server(grid, config)
    network = NTM.load_network(tmp_path / "run")
    written = load_model(tmp_path / "run" / "model.npz")
    np.testing.assert_allclose(ntm.topic_word(network), written.topic_word, atol=1e-6)
    corpus = agreed_documents(grid.contexts[101], data_config(config)).training
    theta = ntm.infer_theta(network, corpus.doc_term_matrix())
    assert theta.shape == (corpus.n_docs, 4) and np.allclose(theta.sum(axis=1), 1.0)
    with pytest.raises(UserInputError, match="does not exist"):
        NTM.load_network(tmp_path)
    (tmp_path / "run" / "state.npz").unlink()
    with pytest.raises(UserInputError, match="finished ntm run"):
        NTM.load_network(tmp_path / "run")
