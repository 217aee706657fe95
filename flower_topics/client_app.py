"""ClientApp: load this node's partition and run the method's local step.

The node's partition comes from its node config: ``partition-id`` and
``num-partitions`` (set by the simulation engine, and by
``flower-supernode --node-config`` in a deployment). Local state (topic
assignments) lives in ``context.state`` between rounds and never leaves the node.
"""

from __future__ import annotations

import time
from dataclasses import fields
from types import MappingProxyType
from typing import Any, Callable, Mapping, TypeVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_topics.clients import fedlda, pctd
from flower_topics.clients.lda import LDAClientState, train_round
from flower_topics.config import parse_run_config
from flower_topics.data.corpus import Corpus
from flower_topics.data.prepare import node_partition
from flower_topics.errors import UserInputError
from flower_topics.strategies import fedlda as fedlda_strategy
from flower_topics.strategies import pctd as pctd_strategy
from flower_topics.strategies.lda import ARRAYS, CONFIG, COUNTS_KEY, DELTA_KEY, METRICS, UPDATE

S = TypeVar("S")


def node_identity(context: Context) -> tuple[int, int]:
    """``(partition_id, num_partitions)`` of this node, from its node config."""
    try:
        return int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    except KeyError:
        raise UserInputError(
            "this node has no 'partition-id'/'num-partitions' node config; start it with "
            "flower-supernode --node-config \"partition-id=0 num-partitions=2\""
        ) from None


def node_corpus(context: Context, config: Mapping[str, Any]) -> tuple[int, Corpus]:
    """This node's partition id and its training documents."""
    partition_id, num_partitions = node_identity(context)
    return partition_id, node_partition(config, partition_id, num_partitions)


def load_state(context: Context, name: str, state: S) -> S:
    """Fill the dataclass ``state`` from ``context.state[name]`` (arrays) and ``[name-meta]`` (integers)."""
    if name in context.state.array_records:
        arrays, meta = context.state[name], context.state[f"{name}-meta"]
        for item in fields(state):
            if item.name in arrays:
                setattr(state, item.name, arrays[item.name].numpy())
            elif item.name in meta:
                setattr(state, item.name, int(meta[item.name]))
    return state


def save_state(context: Context, name: str, state: Any) -> None:
    """Keep the dataclass ``state`` in ``context.state``: its arrays (None left out) and its integers."""
    values = {item.name: getattr(state, item.name) for item in fields(state)}
    context.state[name] = ArrayRecord({k: Array(v) for k, v in values.items() if isinstance(v, np.ndarray)})
    context.state[f"{name}-meta"] = ConfigRecord({k: v for k, v in values.items() if isinstance(v, int)})


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
        return local_round(msg, context, config)

    return client


def client_seed(config: Mapping[str, Any], partition_id: int) -> int:
    """This client's seed: the run seed combined with its partition id."""
    return int(np.random.SeedSequence([int(config["seed"]), partition_id]).generate_state(1)[0])


Update = tuple[dict[str, np.ndarray], dict[str, int]]
"""A local step's reply: arrays for the ``update`` record and integers for ``metrics``."""


def train_lda(arrays: ArrayRecord, settings: ConfigRecord, corpus: Corpus, state: LDAClientState,
              seed: int) -> Update:
    """One round of local LDA sampling; the update is the topic-word count change."""
    delta = train_round(
        corpus,
        arrays[COUNTS_KEY].numpy(),
        state,
        server_round=int(settings["server-round"]),
        last_applied_round=int(settings["last-applied-round"]),
        n_topics=int(settings["num-topics"]),
        alpha=float(settings["alpha"]),
        beta=float(settings["beta"]),
        n_sweeps=int(settings["local-sweeps"]),
        seed=seed,
    )
    return {DELTA_KEY: delta}, {"num-tokens": corpus.n_tokens}


def train_fedlda(arrays: ArrayRecord, settings: ConfigRecord, corpus: Corpus, state: fedlda.FedLDAClientState,
                 seed: int) -> Update:
    """One round of FedLDA's local sampling (Algorithm 1); the update is the perturbed tuples only."""
    update = fedlda.train_round(
        corpus,
        arrays[fedlda_strategy.PHI_KEY].numpy(),
        state,
        server_round=int(settings["server-round"]),
        last_applied_round=int(settings["last-applied-round"]),
        settings=fedlda.FedLDASettings.from_record(settings),
        seed=seed,
    )
    return ({fedlda_strategy.TUPLES_KEY: update.tuples},
            {"num-documents": update.n_docs, "max-tuples-per-document": update.max_tuples_per_doc})


def train_pctd(arrays: ArrayRecord, settings: ConfigRecord, corpus: Corpus, state: pctd.PCTDClientState,
               seed: int) -> Update:
    """One private EM iteration of PC-TD (Algorithm 1, lines 4-10); the update is ``M_t`` only."""
    statistic = pctd.train_round(
        corpus,
        arrays[pctd_strategy.PHI_KEY].numpy(),
        state,
        server_round=int(settings["server-round"]),
        settings=pctd.PCTDSettings.from_record(settings),
        seed=seed,
    )
    return {pctd_strategy.STATISTIC_KEY: statistic}, {}


#: Each method's local step, the name of its state in ``context.state`` and the state's class.
LOCAL_STEPS: Mapping[str, tuple[Callable[..., Update], str, type]] = MappingProxyType({
    "lda": (train_lda, "lda-state", LDAClientState),
    "fedlda": (train_fedlda, "fedlda-state", fedlda.FedLDAClientState),
    "pctd": (train_pctd, "pctd-state", pctd.PCTDClientState),
})


def local_round(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """Run the method's local step on this node's documents, keep its state, and reply with its update."""
    started = time.perf_counter()
    step, state_name, state_class = LOCAL_STEPS[str(config["method"])]
    partition_id, corpus = node_corpus(context, config)
    state = load_state(context, state_name, state_class())
    arrays, metrics = step(msg.content[ARRAYS], msg.content[CONFIG], corpus, state, client_seed(config, partition_id))
    save_state(context, state_name, state)
    content = RecordDict({
        UPDATE: ArrayRecord({key: Array(value) for key, value in arrays.items()}),
        METRICS: MetricRecord({**metrics, "train-seconds": time.perf_counter() - started}),
    })
    return Message(content=content, reply_to=msg)


app = make_client_app()
