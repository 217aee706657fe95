"""The contract every registered method meets, run in-process on a tiny corpus.

For each method in the registry: a 3-round run writes a valid model and the typed privacy
report; each kind of malformed reply is rejected with its reason and never reaches the
global model; a reply of another method is refused; ``min-replies`` keeps the model; a
node that cannot take part is no longer sampled and the run stops with one line when
too few remain.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp

from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.methods import METHODS, get_method
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.base import FederationError
from flower_topics.wire import lda as lda_wire
from flower_topics.wire.protocol import BAD_INPUT

TINY = {
    "dataset": "synthetic",
    "synthetic-nodes": 2, "synthetic-topics": 4, "synthetic-shared-topics": 2, "synthetic-vocab-size": 40,
    "synthetic-docs-per-node": 20, "synthetic-doc-min-length": 15, "synthetic-doc-max-length": 20,
    "num-topics": 4, "num-rounds": 3, "eval-iterations": 20, "pctd.consistency": 0.0,
}
REPORT_FIELDS = {f.name for f in dataclasses.fields(PrivacyReport)} - {"details"}
#: What a method needs beyond TINY to run at all (dplda: an accounted vocabulary, no federated evaluation).
NEEDS = {"dplda": {"vocabulary": str(Path(__file__).parent / "fixtures" / "synthetic40_vocabulary.txt"),
                   "federated-eval": False, "dplda.epsilon": 50.0, "dplda.sample-rate": 0.5, "dplda.init": "random"}}


def _config(method: str, **extra) -> dict:
    return {**TINY, "method": method, **NEEDS.get(method, {}), **extra}


def _strategy(method: str, grid=None, **extra):
    """The method's strategy over the vocabulary 2 in-process nodes agree on, and the grid."""
    config = parse_run_config(_config(method, **extra))
    grid = grid or InProcessGrid.partitions(make_client_app(config), 2, config)
    return get_method(method).build_strategy(config, agree_vocabulary(grid, config).vocabulary), config, grid


def _one_round(method: str, **extra):
    """The strategy after configure_train, and the real replies of 2 in-process nodes."""
    strategy, config, grid = _strategy(method, **extra)
    arrays = strategy.initial_arrays()
    replies = list(grid.send_and_receive(strategy.configure_train(1, arrays, ConfigRecord(), grid)))
    assert all(not r.has_error() for r in replies)
    return strategy, replies


def _with(reply: Message, **records) -> Message:
    """``reply`` with some records replaced (None removes one)."""
    content = RecordDict({k: v for k, v in reply.content.items() if k not in records})
    for key, record in records.items():
        if record is not None:
            content[key] = record
    return Message(content=content, metadata=reply.metadata)


def _update_with(reply: Message, change) -> Message:
    arrays = {k: v.numpy() for k, v in reply.content["update"].items()}
    change(arrays)
    return _with(reply, update=ArrayRecord({k: Array(v) for k, v in arrays.items()}))


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_writes_a_valid_model_and_the_typed_privacy_report(tmp_path, method, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = _config(method, **{"output-dir": str(tmp_path / "run")})
    run_server(InProcessGrid.partitions(make_client_app(config), 2, config), config)
    model = load_model(tmp_path / "run" / "model.npz")
    k = model.topic_word.shape[0]
    assert model.topic_word.shape[1] == len(model.vocabulary) and (k == 4 or method == "ftm" and k >= 1)  # FTM: K*
    np.testing.assert_allclose(model.topic_word.sum(axis=1), 1.0)
    assert model.metadata["method"] == method and REPORT_FIELDS <= set(model.metadata["privacy"])
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert REPORT_FIELDS <= set(row["privacy"]) and row["replies_applied"] == 2
        assert row["privacy"]["unit"] == ("none" if not METHODS[method].private else row["privacy"]["unit"])
    if METHODS[method].private:
        assert rows[-1]["privacy"]["epsilon"] >= rows[0]["privacy"]["epsilon"] > 0  # FTM spends once


def _first_key(reply):
    return next(iter(reply.content["update"].keys()))


def _malformed(method: str, strategy, reply: Message) -> dict[str, tuple[Message, str]]:
    """Each kind of malformed reply the method's protocol must reject, with the reason's fragment."""
    key = _first_key(reply)
    array = reply.content["update"][key].numpy()
    other = np.float64 if np.issubdtype(array.dtype, np.integer) else np.int64
    cases = {
        "missing key": (_update_with(reply, lambda a: a.pop(key)), "keys missing"),
        "extra key": (_update_with(reply, lambda a: a.update(spy=np.zeros(3))), "unexpected ['spy']"),
        "wrong dtype": (_update_with(reply, lambda a: a.update({key: a[key].astype(other)})), "dtype"),
        "wrong shape": (_update_with(reply, lambda a: a.update({key: a[key].reshape(1, -1) if a[key].ndim == 1
                                                                else np.concatenate([a[key], a[key][:, :1]], axis=1)})),
                        "shape"),
        "other method": (_with(reply, sender=ConfigRecord({"method": "someone-else"})), "produced by method"),
        "no sender": (_with(reply, sender=None), "records missing ['sender']"),
        "extra record": (_with(reply, theta=ArrayRecord({"theta": Array(np.ones(2))})), "unexpected ['theta']"),
    }
    if np.issubdtype(array.dtype, np.floating):
        cases["nan"] = (_update_with(reply, lambda a: a[key].flat.__setitem__(0, np.nan)), "NaN or infinite")
        cases["inf"] = (_update_with(reply, lambda a: a[key].flat.__setitem__(0, np.inf)), "NaN or infinite")
    if method in ("pctd", "dplda"):  # K x V arrays: a topic count other than what was sent
        cases["topic count"] = (_update_with(reply, lambda a: a.update({key: np.concatenate([a[key], a[key]])})),
                                "shape")
    if method == "lda":  # a K x V count change as gaps and values (flower_topics.wire.counts)
        values = f"{lda_wire.DELTA_KEY}.values"
        cases["cell count"] = (_update_with(reply, lambda a: a.update({values: np.concatenate([a[values], a[values]])})),
                               "fit neither")

        def negative(a):
            a[values] = a[values].astype(np.int32)
            a[values][0] = -10**6

        cases["negative counts"] = (_update_with(reply, negative), "negative")
    if method == "fedlda":
        v, k = strategy.vocab_size, strategy.fedlda.n_topics
        cases["word id >= V"] = (_update_with(reply, lambda a: a[key].__setitem__((0, 0), v)), "column 0")
        cases["topic id >= K"] = (_update_with(reply, lambda a: a[key].__setitem__((0, 2), k)), "column 2")
        cases["old topic > K"] = (_update_with(reply, lambda a: a[key].__setitem__((0, 1), k + 1)), "column 1")
    if reply.content["metrics"]:
        name = next(iter(reply.content["metrics"].keys()))
        metrics = dict(reply.content["metrics"])
        metrics.pop(name)
        from flwr.app import MetricRecord

        cases["missing metric"] = (_with(reply, metrics=MetricRecord(metrics)), "keys missing")
    return cases


@pytest.mark.parametrize("method", list(METHODS))
def test_each_malformed_reply_kind_is_rejected_with_its_reason(method, caplog):
    strategy, replies = _one_round(method)
    cases = _malformed(method, strategy, replies[0])
    assert {"missing key", "extra key", "wrong dtype", "wrong shape", "other method"} <= set(cases)
    for attempt, (kind, (bad, reason)) in enumerate(cases.items(), start=2):  # a fresh round's count each time
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            arrays, metrics = strategy.aggregate_train(attempt, [bad])
        assert arrays is None, kind  # nothing reaches the global model
        assert metrics["replies-failed"] == 1 and metrics["replies-applied"] == 0, kind
        assert reason in caplog.text, (kind, caplog.text)
    arrays, metrics = strategy.aggregate_train(1, replies)  # the untouched replies are applied
    assert arrays is not None and metrics["replies-applied"] == 2


@pytest.mark.parametrize("method", list(METHODS))
def test_an_oversized_payload_is_rejected(method, monkeypatch, caplog):
    strategy, replies = _one_round(method)
    spec = strategy.reply_spec()
    monkeypatch.setattr(strategy, "reply_spec", lambda: dataclasses.replace(spec, max_bytes=64))
    with caplog.at_level(logging.WARNING):
        arrays, _ = strategy.aggregate_train(1, replies[:1])
    assert arrays is None and "exceeds the 64 bytes" in caplog.text


@pytest.mark.parametrize("method", list(METHODS))
def test_min_replies_keeps_the_previous_model(method, caplog):
    config = parse_run_config(_config(method, **{"min-replies": 2}))
    grid = InProcessGrid.partitions(make_client_app(config), 2, config, drop=lambda r, n: r == 2 and n == 102)
    strategy = get_method(method).build_strategy(config, agree_vocabulary(grid, config).vocabulary)
    models = {}
    with caplog.at_level(logging.WARNING):
        strategy.start(grid, strategy.initial_arrays(), num_rounds=3,
                       evaluate_fn=lambda r, arrays: models.__setitem__(r, strategy.topic_word(arrays)))
    np.testing.assert_array_equal(models[2], models[1])  # round 2 had one valid reply of the 2 needed
    assert not np.array_equal(models[3], models[2])
    assert strategy.traffic[2].model_held and "the global model stays as it was" in caplog.text


def test_min_replies_as_a_fraction_of_the_nodes_sampled():
    strategy, _, _ = _strategy("lda", **{"min-replies": 0.5})
    assert [strategy.replies_needed(n) for n in (1, 2, 3, 10)] == [1, 1, 2, 5]


def test_a_strategy_with_another_vocabulary_stops_the_run_at_once_with_one_line():
    config = parse_run_config(_config("fedlda", **{"min-nodes": 2}))
    grid = InProcessGrid.partitions(make_client_app(config), 2, config)
    vocab = agree_vocabulary(grid, config).vocabulary
    strategy = get_method("fedlda").build_strategy(config, list(reversed(vocab)))
    with pytest.raises(FederationError) as err:
        strategy.start(grid, strategy.initial_arrays(), num_rounds=3)
    message = str(err.value)
    assert message.startswith("round 1: 0 node(s) can take part, min-nodes is 2")
    assert "is not the one this node agreed to" in message and "agree_vocabulary" in message and "\n" not in message
    assert set(strategy.excluded) == {101, 102}


def test_a_node_that_missed_the_agreement_is_told_why():
    config = parse_run_config(_config("lda"))
    grid = InProcessGrid.partitions(make_client_app(config), 2, config)
    strategy = get_method("lda").build_strategy(config, ("w0", "w1"))  # no agreement stage ran
    with pytest.raises(FederationError, match="has no agreed vocabulary"):
        strategy.start(grid, strategy.initial_arrays(), num_rounds=1)


def test_a_client_app_without_the_methods_handler_stops_the_run():
    strategy, config, _ = _strategy("pctd")
    other = ClientApp()

    @other.train()
    def train(msg, context):  # a user's app that knows only plain "train" messages
        return Message(RecordDict(), reply_to=msg)

    with pytest.raises(FederationError, match="No train function registered with name 'pctd'"):
        strategy.start(InProcessGrid.partitions(other, 2, config), strategy.initial_arrays(), num_rounds=2)


def test_one_bad_node_is_dropped_and_the_others_go_on(tmp_path):
    """Node 101's partition id is out of range: it cannot join the agreement, and the others go on."""
    config = parse_run_config(_config("lda", **{"federated-eval": False}))
    grid = InProcessGrid(make_client_app(config), [{"partition-id": 7, "num-partitions": 2},
                                                   {"partition-id": 1, "num-partitions": 2}], config)
    seen = []
    app = grid.client_app
    grid.client_app = lambda msg, ctx: seen.append((ctx.node_id, msg.metadata.message_type)) or app(msg, ctx)
    agreement = agree_vocabulary(grid, config)
    assert "partition-id 7" in agreement.excluded[101] and agreement.nodes == 1
    strategy = get_method("lda").build_strategy(config, agreement.vocabulary)
    strategy.excluded.update(agreement.excluded)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=3)
    assert [node for node, kind in seen if kind.startswith("train")] == [102, 102, 102]
    assert result.arrays and [strategy.traffic[r].replies_applied for r in (1, 2, 3)] == [1, 1, 1]


def test_a_bad_input_error_reply_carries_the_code_and_the_reason():
    config = parse_run_config(_config("lda"))
    grid = InProcessGrid(make_client_app(config), [{"partition-id": 5, "num-partitions": 2}], config)
    request = Message(RecordDict({"config": ConfigRecord({"mode": "union"})}), dst_node_id=101,
                      message_type="query.candidates")
    (reply,) = grid.send_and_receive([request])
    assert reply.has_error() and reply.error.code == BAD_INPUT and "partition-id 5 is outside [0, 2)" in reply.error.reason


def test_the_client_app_for_lda_and_fedlda_does_not_import_torch():
    """Only a pctd or ntm message loads what those methods need; a node serving lda/fedlda stays light."""
    import subprocess
    import sys

    code = ("import sys; import flower_topics.federation.client_app, flower_topics.clients.lda, flower_topics.clients.fedlda; "
            "print(sorted(m for m in ('torch', 'opacus', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
