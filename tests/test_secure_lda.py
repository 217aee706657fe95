"""``lda`` under secure aggregation: the server adds only the masked count changes' sum.

The changes are integers, so a secure run is the plain run exactly (the parties' local steps
are seeded from the public run seed, and an integer sum does not depend on its order), also
when a party's masked update is lost (it rolls back, as in a plain run); a party refuses a
range its counts could overflow; a sum that would make a count negative holds the round.
"""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.run.checkpoint import load_checkpoint
from flower_topics.federation.client_app import make_client_app
from flower_topics.clients import lda as client
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.run.outputs import read_metrics
from flower_topics.privacy.party_policy import PartyFacts, SecureFacts
from flower_topics.secure_sum.protocol import SecureSumSettings
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.lda import ADLDA
from flower_topics.wire import lda as wire
from tests.test_method_contract import TINY


def _run(tmp_path, name, parties=3, drop=None, **extra):
    config = {**TINY, "method": "lda", "synthetic-nodes": parties, "synthetic-topics": 2 + parties, "federated-eval": False, "num-rounds": 4,
              "output-dir": str(tmp_path / name), **extra}
    run_server(InProcessGrid.partitions(make_client_app(config), parties, config, drop), config)
    counts = load_checkpoint(tmp_path / name).global_arrays[wire.COUNTS_KEY]  # the last round's global counts
    return counts, [row for row in read_metrics(tmp_path / name / "metrics.jsonl") if "replies_applied" in row]


def test_a_secure_run_is_the_plain_run_exactly(tmp_path):
    plain, _ = _run(tmp_path, "plain")
    secure, rows = _run(tmp_path, "secure", **{"secure-aggregation": True})
    np.testing.assert_array_equal(secure, plain)
    assert [r["replies_applied"] for r in rows] == [3, 3, 3, 3]


def test_a_party_whose_masked_update_is_lost_rolls_back_and_every_token_counts_once(tmp_path):
    lost = lambda server_round, node: server_round == 2 and node == 102  # its round-2 masked update never arrives
    plain, plain_rows = _run(tmp_path, "plain", parties=4, drop=lost)
    secure, rows = _run(tmp_path, "secure", parties=4, drop=lost, **{"secure-aggregation": True})
    np.testing.assert_array_equal(secure, plain)
    assert [r["replies_applied"] for r in rows] == [4, 3, 4, 4]
    assert secure.sum() == plain_rows[-1]["num_tokens"]  # the 4 parties' tokens, as they reported them in clear


def test_a_party_refuses_a_range_its_counts_could_overflow():
    corpus = Corpus(tokens=np.array([0] * 40 + [1, 2], dtype=np.int32), doc_ptr=np.array([0, 20, 42]),
                    vocabulary=("a", "b", "c"))
    assert client.secure_headroom(corpus, 40) is None
    assert "a word occurs 40 times" in client.secure_headroom(corpus, 39)
    settings = wire.LDASettings(n_topics=2, alpha=0.1, beta=0.01, secure=True)
    from flwr.app import Array, ArrayRecord, ConfigRecord
    arrays = ArrayRecord({wire.COUNTS_KEY: Array(np.zeros((2, 3), dtype=np.int32))})
    config = ConfigRecord({**settings.to_record(), "server-round": 1, "last-applied-round": 0})
    with pytest.raises(UserInputError, match="secure-aggregation-bits"):
        client.STEP.train(arrays, config, corpus, client.LDAClientState(), seed=1,
                          party=PartyFacts(secure=SecureFacts(noise_share=1.0, entry_limit=39)))


def test_a_sum_that_would_make_a_count_negative_holds_the_round(tmp_path, monkeypatch, caplog):
    original = client.train_round

    def negative_in_round_2(corpus, global_counts, state, *, server_round, **kwargs):
        delta = original(corpus, global_counts, state, server_round=server_round, **kwargs)
        if server_round == 2:
            delta = delta - int(global_counts.max()) - 1  # every party takes away more than the counts hold
        return delta

    monkeypatch.setattr(client, "train_round", negative_in_round_2)
    model, rows = _run(tmp_path, "secure", **{"secure-aggregation": True})
    held = {r["round"]: r["model_held"] for r in rows}
    assert held == {1: 0, 2: 1, 3: 0, 4: 0}
    assert "secure sum of 3 parties rejected" in caplog.text
    assert (model >= 0).all() and model.sum() == rows[0]["num_tokens"]  # round 1 entered every token once


def test_a_secure_lda_run_cannot_be_resumed():
    strategy = ADLDA(["a", "b"], wire.LDASettings(n_topics=2, alpha=0.1, beta=0.01), secure=SecureSumSettings())
    with pytest.raises(UserInputError, match="cannot be resumed"):
        strategy.on_resume({})
