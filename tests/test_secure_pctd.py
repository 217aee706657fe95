"""``pctd`` under secure aggregation: each party's noisy ``M_t``, quantized, is masked; the server adds the sum.

The parties' noise is the paper's, unchanged (each adds the full ``sigma``), so the accounting
is too; what the secure sum changes is that the server sees only the sum. Checked: the
quantizer is unbiased and never leaves its range, the unmasked sum is the parties' quantized
statistics' sum exactly and each is within ``1 / quantum`` of its real ``M_t``, a party refuses
a range its statistic could exceed, and the report's epsilon is the plain run's.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord

from flower_topics.federation.client_app import make_client_app
from flower_topics.clients import pctd as client
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.privacy.party_policy import PartyFacts, SecureFacts
from flower_topics.secure_sum.protocol import quantize
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.pctd import PCTD
from flower_topics.wire import pctd as wire
from tests.test_method_contract import TINY


def test_the_quantizer_is_unbiased_exact_on_its_grid_and_clipped_to_its_range():
    rng = np.random.default_rng(0)
    values = np.array([0.3, -1.7, 2.0, 1e9, -1e9])
    draws = np.stack([quantize(values, 4.0, 1000, rng) for _ in range(20_000)])
    assert draws.dtype == np.int64
    np.testing.assert_allclose(draws[:, :3].mean(axis=0) / 4.0, values[:3], atol=0.01)  # 0.3 x 4 = 1.2: 1 or 2
    assert set(np.unique(draws[:, 0])) == {1, 2} and set(np.unique(draws[:, 2])) == {8}
    assert (draws[:, 3] == 1000).all() and (draws[:, 4] == -1000).all()


def _run(tmp_path, monkeypatch, parties=3, **extra):
    raw: dict[int, list[np.ndarray]] = {}
    sent: dict[int, list[np.ndarray]] = {}
    summed: dict[int, np.ndarray] = {}
    train_round, real_quantize, aggregate = client.train_round, client.quantize, PCTD.aggregate

    def recording_train_round(*args, server_round, **kwargs):
        out = train_round(*args, server_round=server_round, **kwargs)
        raw.setdefault(server_round, []).append(out)
        return out

    def recording_quantize(values, quantum, limit, rng):
        out = real_quantize(values, quantum, limit, rng)
        sent.setdefault(len(summed) + 1, []).append(out)
        return out

    def recording_aggregate(self, server_round, arrays, replies):
        summed[server_round] = replies[0].arrays[wire.STATISTIC_KEY]
        return aggregate(self, server_round, arrays, replies)

    monkeypatch.setattr(client, "train_round", recording_train_round)
    monkeypatch.setattr(client, "quantize", recording_quantize)
    monkeypatch.setattr(PCTD, "aggregate", recording_aggregate)
    config = {**TINY, "method": "pctd", "synthetic-nodes": parties, "synthetic-topics": 2 + parties,
              "federated-eval": False, "num-rounds": 3, "output-dir": str(tmp_path / "run"), **extra}
    model = run_server(InProcessGrid.partitions(make_client_app(config), parties, config), config)
    return model, raw, sent, summed


def test_the_unmasked_sum_is_the_quantized_statistics_sum_exactly(tmp_path, monkeypatch):
    model, raw, sent, summed = _run(tmp_path, monkeypatch, **{"secure-aggregation": True, "pctd.quantum": 16.0})
    assert sorted(summed) == [1, 2, 3]
    for server_round, total in summed.items():
        np.testing.assert_array_equal(total * 16.0, np.sum(sent[server_round], axis=0))
        for integers, statistic in zip(sent[server_round], raw[server_round]):
            assert np.abs(integers / 16.0 - statistic).max() <= 1 / 16.0 + 1e-6
    report = model.metadata["privacy"]
    assert "does not rely on the secure sum" in report["secure_aggregation"] and report["rounds"] == 3


def test_the_guarantee_is_the_plain_runs(tmp_path, monkeypatch):
    secure, *_ = _run(tmp_path / "secure", monkeypatch, **{"secure-aggregation": True})
    plain, *_ = _run(tmp_path / "plain", monkeypatch)
    assert secure.metadata["privacy"]["epsilon"] == plain.metadata["privacy"]["epsilon"]


def test_a_party_refuses_a_range_its_statistic_could_exceed():
    corpus = Corpus(tokens=np.array([0] * 30 + [1, 2] * 5, dtype=np.int32), doc_ptr=np.array([0, 20, 40]),
                    vocabulary=("a", "b", "c"))
    settings = wire.PCTDSettings(n_topics=2, sigma=0.25, quantum=8.0)
    units = client.semantic_units(corpus, settings).counts.shape[0]
    needed = (30 + 40 * 0.25 * np.sqrt(units)) * 8.0
    assert client.secure_headroom(corpus, settings, int(np.ceil(needed))) is None
    assert "pctd.quantum" in client.secure_headroom(corpus, settings, int(needed) - 1)
    arrays = ArrayRecord({wire.PHI_KEY: Array(np.full((2, 3), 1 / 3, dtype=np.float32))})
    config = ConfigRecord({**settings.to_record(), "server-round": 1})
    with pytest.raises(UserInputError, match="secure-aggregation-bits"):
        client.STEP.train(arrays, config, corpus, client.PCTDClientState(), seed=1,
                          party=PartyFacts(secure=SecureFacts(1.0, int(needed) - 1)))
    update, metrics = client.STEP.train(arrays, config, corpus, client.PCTDClientState(), seed=1,
                                        party=PartyFacts(secure=SecureFacts(1.0, 1 << 30)))
    assert update[wire.STATISTIC_KEY].dtype == np.int64 and metrics == {}
