"""ClientApp: load this node's partition and run the method's local step.

The node's partition comes from its node config: ``partition-id`` and
``num-partitions`` (set by the simulation engine, and by
``flower-supernode --node-config`` in a deployment). Local state (topic
assignments) lives in ``context.state`` between rounds and never leaves the node.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_topics.clients import fedlda, pctd
from flower_topics.clients.lda import LDAClientState, train_round
from flower_topics.config import parse_run_config
from flower_topics.data.prepare import node_partition
from flower_topics.errors import UserInputError
from flower_topics.strategies import fedlda as fedlda_strategy
from flower_topics.strategies import pctd as pctd_strategy
from flower_topics.strategies.lda import ARRAYS, CONFIG, COUNTS_KEY, DELTA_KEY, METRICS, UPDATE


_STATE = "lda-state"
_STATE_META = "lda-state-meta"


def node_identity(context: Context) -> tuple[int, int]:
    """``(partition_id, num_partitions)`` of this node, from its node config."""
    try:
        return int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    except KeyError:
        raise UserInputError(
            "this node has no 'partition-id'/'num-partitions' node config; start it with "
            "flower-supernode --node-config \"partition-id=0 num-partitions=2\""
        ) from None


def _load_state(context: Context) -> LDAClientState:
    state = LDAClientState()
    if _STATE in context.state.array_records:
        arrays = context.state[_STATE]
        state.applied_z = arrays["applied-z"].numpy() if "applied-z" in arrays else None
        state.pending_z = arrays["pending-z"].numpy() if "pending-z" in arrays else None
        state.pending_round = int(context.state[_STATE_META]["pending-round"])
    return state


def _save_state(context: Context, state: LDAClientState) -> None:
    arrays = {}
    if state.applied_z is not None:
        arrays["applied-z"] = Array(state.applied_z)
    if state.pending_z is not None:
        arrays["pending-z"] = Array(state.pending_z)
    context.state[_STATE] = ArrayRecord(arrays)
    context.state[_STATE_META] = ConfigRecord({"pending-round": state.pending_round})


_FEDLDA_STATE = "fedlda-state"
_FEDLDA_META = "fedlda-state-meta"


def _load_fedlda_state(context: Context) -> fedlda.FedLDAClientState:
    state = fedlda.FedLDAClientState()
    if _FEDLDA_STATE in context.state.array_records:
        arrays = context.state[_FEDLDA_STATE]
        for name in ("z", "view", "pending_view"):
            if name in arrays:
                setattr(state, name, arrays[name].numpy())
        state.pending_round = int(context.state[_FEDLDA_META]["pending-round"])
    return state


def _save_fedlda_state(context: Context, state: fedlda.FedLDAClientState) -> None:
    arrays = {name: Array(value) for name in ("z", "view", "pending_view")
              if (value := getattr(state, name)) is not None}
    context.state[_FEDLDA_STATE] = ArrayRecord(arrays)
    context.state[_FEDLDA_META] = ConfigRecord({"pending-round": state.pending_round})


def make_client_app(run_config: Mapping[str, Any] | None = None) -> ClientApp:
    """A ClientApp bound to ``run_config`` (None: read each run's own config).

    Parameters
    ----------
    run_config : Mapping, optional
        A fixed run config, for ``flwr.simulation.run_simulation`` (which passes an
        empty one); by default the config of the run is used.
    """
    client = ClientApp()

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        config = parse_run_config(context.run_config if run_config is None else run_config)
        step = {"fedlda": train_fedlda, "pctd": train_pctd}.get(str(config["method"]), train_lda)
        return step(msg, context, config)

    return client


def client_seed(config: Mapping[str, Any], partition_id: int) -> int:
    """This client's seed: the run seed combined with its partition id."""
    return int(np.random.SeedSequence([int(config["seed"]), partition_id]).generate_state(1)[0])


def train_lda(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """One round of local LDA sampling; replies with the topic-word count change."""
    started = time.perf_counter()
    partition_id, num_partitions = node_identity(context)
    corpus = node_partition(config, partition_id, num_partitions)
    settings = msg.content[CONFIG]
    state = _load_state(context)
    delta = train_round(
        corpus,
        msg.content[ARRAYS][COUNTS_KEY].numpy(),
        state,
        server_round=int(settings["server-round"]),
        last_applied_round=int(settings["last-applied-round"]),
        n_topics=int(settings["num-topics"]),
        alpha=float(settings["alpha"]),
        beta=float(settings["beta"]),
        n_sweeps=int(settings["local-sweeps"]),
        seed=client_seed(config, partition_id),
    )
    _save_state(context, state)
    content = RecordDict({
        UPDATE: ArrayRecord({DELTA_KEY: Array(delta)}),
        METRICS: MetricRecord({
            "num-tokens": corpus.n_tokens,
            "train-seconds": time.perf_counter() - started,
        }),
    })
    return Message(content=content, reply_to=msg)


def train_fedlda(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """One round of FedLDA's local sampling (Algorithm 1); replies with perturbed tuples only."""
    started = time.perf_counter()
    partition_id, num_partitions = node_identity(context)
    corpus = node_partition(config, partition_id, num_partitions)
    settings = msg.content[CONFIG]
    state = _load_fedlda_state(context)
    update = fedlda.train_round(
        corpus,
        msg.content[ARRAYS][fedlda_strategy.PHI_KEY].numpy(),
        state,
        server_round=int(settings["server-round"]),
        last_applied_round=int(settings["last-applied-round"]),
        settings=fedlda.FedLDASettings.from_record(settings),
        seed=client_seed(config, partition_id),
    )
    _save_fedlda_state(context, state)
    content = RecordDict({
        UPDATE: ArrayRecord({fedlda_strategy.TUPLES_KEY: Array(update.tuples)}),
        METRICS: MetricRecord({
            "num-documents": update.n_docs,
            "max-tuples-per-document": update.max_tuples_per_doc,
            "train-seconds": time.perf_counter() - started,
        }),
    })
    return Message(content=content, reply_to=msg)


_PCTD_STATE = "pctd-state"


def train_pctd(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """One private EM iteration of PC-TD (Algorithm 1, lines 4-10); replies with ``M_t`` only."""
    started = time.perf_counter()
    partition_id, num_partitions = node_identity(context)
    corpus = node_partition(config, partition_id, num_partitions)
    settings = msg.content[CONFIG]
    state = pctd.PCTDClientState()
    if _PCTD_STATE in context.state.array_records:
        state.doc_topic = context.state[_PCTD_STATE]["doc-topic"].numpy()
    statistic = pctd.train_round(
        corpus,
        msg.content[ARRAYS][pctd_strategy.PHI_KEY].numpy(),
        state,
        server_round=int(settings["server-round"]),
        settings=pctd.PCTDSettings.from_record(settings),
        seed=client_seed(config, partition_id),
    )
    context.state[_PCTD_STATE] = ArrayRecord({"doc-topic": Array(state.doc_topic)})
    content = RecordDict({
        UPDATE: ArrayRecord({pctd_strategy.STATISTIC_KEY: Array(statistic)}),
        METRICS: MetricRecord({"train-seconds": time.perf_counter() - started}),
    })
    return Message(content=content, reply_to=msg)


app = make_client_app()
