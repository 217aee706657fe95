"""``ntm`` (gFedNTM) under secure aggregation: the server adds only the masked sum of the parties' weighted updates.

A party sends ``n_l u_l`` (``u_l`` its gradient, or its weight change with ``sync="local"``; each
coordinate clipped to ``secure-clip``) in units of ``1 / quantum``, randomly rounded, with its
weight ``n_l``, its clipped-coordinate count and, without DP, its weighted loss; no metric.
Checked: the rounding is unbiased (a sampling test that a biased rounding fails) and clipped;
the unmasked sum is the parties' integer vectors' sum exactly; eq. (2) from the sum is within
``parties / (quantum sum n_l)`` of the plain average of the same gradients on every coordinate,
and a secure run's model within that (times the step) of a plain run's with the same party
seeds; a party refuses a range its update could exceed before it computes anything; with DP
the server's epsilon is the parties' accountant at the largest admitted sample rate; the wire
audit sees only masked vectors and no metrics.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord

import flower_topics.federation.client_app as client_app
from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import make_client_app
from flower_topics.clients import ntm as client
from flower_topics.run.config import parse_run_config
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.methods import get_method
from flower_topics.models.ntm import weighted_average
from tests.accounting import epsilon
from flower_topics.privacy.party_policy import PartyFacts, SecureFacts
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.ntm import NTM
from flower_topics.wire import ntm as wire

torch.set_num_threads(1)

TINY = {
    "dataset": "synthetic",
    "synthetic-nodes": 3, "synthetic-topics": 5, "synthetic-shared-topics": 2, "synthetic-vocab-size": 40,
    "synthetic-docs-per-node": 20, "synthetic-doc-min-length": 15, "synthetic-doc-max-length": 20,
    "num-topics": 4, "num-rounds": 3, "federated-eval": False, "method": "ntm", "ntm.batch-size": 8,
}
SECURE = {"secure-aggregation": True}
#: The functions the tests wrap, as the module defines them.
TRAIN_ROUND, SECURE_UPDATE, AGGREGATE = client.train_round, client.secure_update, NTM.aggregate


# ----------------------------------------------------------------------------- the party's integers


def _draws(draws: int = 20_000):
    """``draws`` secure updates of one fixed update (weight 5, clip 2, quantum 8) with fresh randomness."""
    settings = wire.NTMSettings(n_topics=2, dp=False, secure=True, secure_clip=2.0, quantum=8.0)
    update = np.array([0.3, -1.1, 0.0, 7.5, -9.0, 1.0 / 3.0])  # 7.5 and -9.0 beyond the clip
    rng = np.random.default_rng(0)
    out = [client.secure_update(update, 5, 2.25, settings, 10_000, rng) for _ in range(draws)]
    return out, 5 * np.clip(update, -2.0, 2.0) * 8.0  # the targets 12, -44, 0, 80, -80, 13.33


def _unbiased(integers: np.ndarray, target: np.ndarray) -> bool:
    """Each entry is floor + Bernoulli(fraction): its mean is within 5 standard errors of the target."""
    fraction = target - np.floor(target)
    stderr = np.sqrt(fraction * (1 - fraction) / integers.shape[0])
    return bool((np.abs(integers.mean(axis=0) - target) <= 5 * stderr + 1e-12).all())


def test_the_rounding_is_unbiased_and_the_update_clipped_to_its_range():
    out, target = _draws()
    integers = np.stack([o[wire.SECURE_UPDATE_KEY][0] for o in out])
    assert integers.dtype == np.int64 and all(o[wire.SECURE_CLIPPED_KEY][0] == 2 for o in out)
    assert (np.abs(integers - target) < 1).all()  # never more than one unit away: floor or ceil
    np.testing.assert_array_equal(integers[:, 3:5], np.broadcast_to([80, -80], (len(out), 2)))  # clipped exactly
    assert _unbiased(integers, target)
    losses = np.array([o[wire.SECURE_LOSS_KEY][0] for o in out])  # 5 x 2.25 = 11.25 in whole units
    assert set(np.unique(losses)) == {11, 12} and _unbiased(losses[:, None], np.array([11.25]))
    # every entry within the limit, even when the limit is below the clip's bound (never wraps)
    settings = wire.NTMSettings(n_topics=2, dp=False, secure=True, secure_clip=2.0, quantum=8.0)
    tight = client.secure_update(np.array([1.9, -1.9]), 5, 2.25, settings, 50, np.random.default_rng(1))
    assert np.abs(tight[wire.SECURE_UPDATE_KEY]).max() <= 50 and abs(tight[wire.SECURE_LOSS_KEY][0]) <= 50


def test_the_unbiasedness_check_catches_a_rounding_to_nearest(monkeypatch):
    """The check above has power: a deterministic rounding (to nearest) fails it on 13.33 (1/3 x 40)."""
    def nearest(values, quantum, limit, rng):
        return np.clip(np.rint(np.asarray(values) * quantum), -limit, limit).astype(np.int64)

    monkeypatch.setattr(client, "quantize", nearest)
    out, target = _draws(2_000)
    assert not _unbiased(np.stack([o[wire.SECURE_UPDATE_KEY][0] for o in out]), target)


def test_a_non_finite_update_is_not_sent():
    settings = wire.NTMSettings(n_topics=2, dp=False, secure=True)
    with pytest.raises(ValueError, match="not finite"):
        client.secure_update(np.array([0.0, np.nan]), 3, 1.0, settings, 1 << 30, np.random.default_rng(0))


def _corpus(n_docs: int) -> Corpus:
    tokens = np.tile(np.array([0, 1, 2, 1], dtype=np.int32), n_docs)
    return Corpus(tokens=tokens, doc_ptr=np.arange(0, 4 * n_docs + 1, 4), vocabulary=("a", "b", "c"))


@pytest.mark.parametrize("sync", ["minibatch", "local"])
def test_a_party_refuses_a_range_its_update_could_exceed_before_it_computes_anything(sync, monkeypatch):
    corpus = _corpus(30)
    settings = wire.NTMSettings(n_topics=2, dp=False, sync=sync, batch_size=8, secure=True, secure_clip=2.0,
                                quantum=16.0)
    weight = 8 if sync == "minibatch" else 30  # min(batch-size, D) or D
    needed = weight * 2.0 * 16.0 + 1
    assert client.secure_headroom(corpus, settings, int(needed)) is None
    assert "secure-aggregation-bits" in client.secure_headroom(corpus, settings, int(needed) - 1)

    def no_training(*args, **kwargs):
        raise AssertionError("the party computed its update before checking the range")

    model = NTM(["a", "b", "c"], settings)
    arrays = ArrayRecord({wire.WEIGHTS_KEY: Array(model.weights(model.initial_arrays()))})
    config = ConfigRecord({**settings.to_record(), "server-round": 1})
    with monkeypatch.context() as patch:
        patch.setattr(client, "train_round", no_training)
        with pytest.raises(UserInputError, match="could reach"):
            client.STEP.train(arrays, config, corpus, client.NTMClientState(), seed=1,
                              party=PartyFacts(secure=SecureFacts(1.0, int(needed) - 1)))
        with pytest.raises(UserInputError, match="no secure-sum round"):  # secure settings, no limit: no clear reply
            client.STEP.train(arrays, ConfigRecord(settings.to_record()), corpus, client.NTMClientState(), seed=1)
    update, metrics = client.STEP.train(arrays, config, corpus, client.NTMClientState(), seed=1,
                                        party=PartyFacts(secure=SecureFacts(1.0, int(needed))))
    assert metrics == {} and list(update) == list(wire.secure_reply_spec(settings, 3).arrays)
    assert update[wire.SECURE_WEIGHT_KEY][0] == weight and np.abs(update[wire.SECURE_UPDATE_KEY]).max() < needed


def test_with_dp_a_party_with_fewer_documents_than_the_accounting_assumes_refuses():
    settings = wire.NTMSettings(n_topics=2, dp=True, batch_size=8, secure=True, min_documents=31)
    assert "ntm.min-documents 31" in client.secure_headroom(_corpus(30), settings, 1 << 30)
    assert client.secure_headroom(_corpus(31), settings, 1 << 30) is None


def test_a_federation_whose_range_is_too_small_stops_with_one_line(tmp_path):
    config = {**TINY, **SECURE, "ntm.dp": False, "secure-aggregation-bits": 16, "output-dir": str(tmp_path / "r")}
    with pytest.raises(UserInputError, match="could reach .* use a larger secure-aggregation-bits"):
        run_server(InProcessGrid.partitions(make_client_app(config), 3, config), config)


# ----------------------------------------------------------------------------- the sum and the model


def _grid(config, seeds=(11, 12, 13)):
    nodes = [{"partition-id": i, "num-partitions": len(seeds), "secret-seed": s} for i, s in enumerate(seeds)]
    return InProcessGrid(make_client_app(config), nodes, config)


def _recorded_run(monkeypatch, rounds: int, **extra):
    """A run through Flower's strategy loop with fixed party seeds; what each party computed, sent, and the sums."""
    monkeypatch.setattr(client_app, "run_nonce", lambda context: 5)  # the same party seeds in every run of a test
    config = parse_run_config({**TINY, **extra})
    grid = _grid(config)
    strategy = get_method("ntm").build_strategy(config, agree_vocabulary(grid, config).vocabulary)
    raw: dict[int, list[tuple[np.ndarray, dict]]] = {}
    sent: dict[int, list[dict]] = {}
    summed: dict[int, dict] = {}
    served: dict[int, np.ndarray] = {}
    train_round, secure_update, aggregate = TRAIN_ROUND, SECURE_UPDATE, AGGREGATE

    def recording_train_round(*args, server_round, **kwargs):
        out = train_round(*args, server_round=server_round, **kwargs)
        raw.setdefault(server_round, []).append(out)
        return out

    def recording_secure_update(*args, **kwargs):
        out = secure_update(*args, **kwargs)
        sent.setdefault(len(summed) + 1, []).append(out)
        return out

    def recording_aggregate(self, server_round, arrays, replies):
        summed[server_round] = replies[0].arrays if self.secure is not None else None
        return aggregate(self, server_round, arrays, replies)

    monkeypatch.setattr(client, "train_round", recording_train_round)
    monkeypatch.setattr(client, "secure_update", recording_secure_update)
    monkeypatch.setattr(NTM, "aggregate", recording_aggregate)
    strategy.start(grid, strategy.initial_arrays(), num_rounds=rounds,
                   evaluate_fn=lambda r, arrays: served.__setitem__(r, strategy.weights(arrays).copy()))
    return strategy, raw, sent, summed, served


@pytest.mark.parametrize("rounds, extra", [
    (3, {"ntm.dp": False}),
    (3, {"ntm.dp": False, "ntm.sync": "local", "ntm.local-steps": 2}),
    (2, {"ntm.dp": True, "ntm.min-documents": 10}),
    (1, {"ntm.dp": True, "ntm.sync": "local", "ntm.local-steps": 2}),  # DP-SGD is slow: one round
])
def test_the_unmasked_sum_is_the_parties_integer_vectors_sum_and_eq2_within_the_quantization_error(
        monkeypatch, rounds, extra):
    strategy, raw, sent, summed, served = _recorded_run(monkeypatch, rounds, **SECURE, **extra)
    quantum = strategy.ntm.quantum
    assert sorted(summed) == list(range(1, rounds + 1))
    weight_key = wire.reply_metrics(strategy.ntm)[0]
    for r, total in summed.items():
        parts = sent[r]
        assert len(parts) == 3
        for key in parts[0]:  # exactly the integers the parties sent, added
            expected = np.sum([p[key] for p in parts], axis=0)
            got = total[key] * quantum if key == wire.SECURE_UPDATE_KEY else total[key]
            np.testing.assert_array_equal(got, expected)
        # eq. (2) from the sum against the plain weighted average of the same rows (the parties' unrounded updates)
        rows = [row.reshape(-1).astype(np.float64) for row, _ in raw[r]]
        if strategy.ntm.sync == "local":
            rows = [row - served[r - 1].astype(np.float64) for row in rows]
        weights = [m[weight_key] for _, m in raw[r]]
        assert total[wire.SECURE_WEIGHT_KEY][0] == sum(weights)
        plain = weighted_average(rows, weights)
        secure = total[wire.SECURE_UPDATE_KEY].reshape(-1) / total[wire.SECURE_WEIGHT_KEY][0]
        # each party's rounding moves its n_l u_l by less than one unit, 1 / quantum: the average by less than
        # parties / (quantum sum n_l); nothing was clipped (secure-clip 100), float64 roundoff is far below
        assert total[wire.SECURE_CLIPPED_KEY][0] == 0
        bound = 3 / (quantum * sum(weights))
        assert np.abs(secure - plain).max() <= bound * (1 + 1e-9)
        assert np.abs(secure - plain).max() > bound / 100  # the quantization is there (not a plain sum in disguise)
        for (row, metrics), part in zip(raw[r], parts):  # and the metrics stayed with the parties
            assert weight_key in metrics and ("epsilon" in metrics) == strategy.ntm.dp


@pytest.mark.parametrize("sync", ["minibatch", "local"])
def test_a_secure_runs_model_is_the_plain_runs_within_the_quantization_error(monkeypatch, sync):
    """One round, sgd, the same party seeds: the same mini-batches, so the only difference is the rounding.

    minibatch: ``W' = W - lr G``; ``|G_secure - G_plain| < 3 / (quantum N)`` (``N`` the summed
    batch sizes), the float32 rounding of ``G`` adds at most ``2^-24 |G|`` on each side, and
    each ``W'`` is rounded to float32 once (at most one float32 spacing apart in all).
    local: ``W' = W + avg(W_l - W)`` against ``avg(W_l)``, the same bound on the average, each
    side rounded to float32 once.
    """
    extra = {"ntm.dp": False, "ntm.optimizer": "sgd", "ntm.learning-rate": 0.5, "ntm.sync": sync,
             "ntm.local-steps": 2}
    secure, raw, _, summed, served = _recorded_run(monkeypatch, 1, **SECURE, **extra)
    plain, _, _, _, plain_served = _recorded_run(monkeypatch, 1, **extra)
    np.testing.assert_array_equal(plain_served[0], served[0])
    n = summed[1][wire.SECURE_WEIGHT_KEY][0]
    before, after, reference = served[0].astype(np.float64), served[1].astype(np.float64), plain_served[1]
    average = 3 / (secure.ntm.quantum * n)
    spacing = np.spacing(np.maximum(np.abs(after), np.abs(reference)).astype(np.float32)).astype(np.float64)
    if sync == "minibatch":
        gradient = (before - reference) / 0.5
        bound = 0.5 * (average + 2 * 2.0 ** -24 * (np.abs(gradient) + average)) + spacing
    else:
        bound = average + spacing
    difference = np.abs(after - reference)
    assert (difference <= bound * (1 + 1e-9)).all()
    assert difference.max() > 0 and np.abs(after - before).max() > 100 * average  # it trained; it was rounded


def test_with_dp_the_server_runs_the_parties_accountant_at_the_largest_sample_rate(monkeypatch, tmp_path):
    config = {**TINY, **SECURE, "ntm.dp": True, "ntm.min-documents": 12, "ntm.noise-multiplier": 1.3,
              "num-rounds": 2, "output-dir": str(tmp_path / "run")}
    states = {}

    def keeping_state(corpus, weights, state, **kwargs):
        out = TRAIN_ROUND(corpus, weights, state, **kwargs)
        states.setdefault(kwargs["server_round"], []).append(state.epsilon(1e-5))
        return out

    monkeypatch.setattr(client, "train_round", keeping_state)
    model = run_server(_grid(parse_run_config(config)), config)
    report = model.metadata["privacy"]
    q = 8 / 12
    assert report["sample_rate"] == pytest.approx(q) and report["rounds"] == 2
    assert report["epsilon"] == pytest.approx(epsilon("rdp", 1.3, q, 2, 1e-5), rel=1e-12)
    assert report["epsilon_round"] == pytest.approx(epsilon("rdp", 1.3, q, 1, 1e-5), rel=1e-12)
    assert "no party's epsilon" in report["secure_aggregation"]
    # the bound holds for every party: each party's own accountant (its q = 8 / D_l <= q) says no more
    own = states[2]
    assert len(own) == 3 and all(0 < e <= report["epsilon"] for e in own)


# ----------------------------------------------------------------------------- the wire


@pytest.mark.parametrize("dp", [False, True])
def test_the_wire_audit_sees_only_masked_vectors_and_no_metrics(tmp_path, dp):
    from tests.test_wire_audit import _documents, _run

    audit, sizes = _run(tmp_path, "ntm", **SECURE, **{"secure-aggregation-tolerance": 0, "federated-eval": False,
                                                      "ntm.dp": dp, "ntm.batch-size": 8, "num-rounds": 2})
    seen = audit.check(sizes, _documents)
    # keys, shares, check and unmask in round 1; round 2 continues the key epoch: check and unmask (2 parties)
    assert seen == {"query.candidates": 2, "query.vocabulary": 2, "train.ntm": 4, "query.secure_sum": 12}
    for request, reply, _ in audit.sent:
        if request.metadata.message_type == "train.ntm":
            assert not reply.has_error()
            (masked,) = reply.content["update"].values()
            assert masked.numpy().dtype == np.uint32 and dict(reply.content["metrics"]) == {}


def test_a_resumed_secure_dp_run_accounts_every_round_sent_including_the_lost_one(tmp_path):
    """Crash while round 3's masked updates are out; resume on fresh parties to 4 rounds: 5 releases, at q = 1."""
    from tests.test_checkpoint_resume import Crash, _config
    from tests.test_checkpoint_resume import _grid as crashing_grid

    config = _config("ntm", tmp_path / "run", **{**SECURE, "secure-aggregation-tolerance": 0, "num-rounds": 4,
                                                 "ntm.dp": True, "ntm.batch-size": 8})
    with pytest.raises(Crash):
        run_server(crashing_grid(config, crash_round=3), config)
    model = run_server(crashing_grid(config), {**config, "resume": str(tmp_path / "run")})
    report = model.metadata["privacy"]
    assert report["rounds"] == 5 and report["sample_rate"] == 1.0  # ntm.min-documents 0: no amplification
    assert report["epsilon"] == pytest.approx(epsilon("rdp", 1.0, 1.0, 5, 1e-5), rel=1e-12)
