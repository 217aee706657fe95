"""Server side of gFedNTM (Calvo-Bartolomé and Arenas-García, "Federated Neural Topic Models", section 3.2).

The strategy holds the global network ``W^(e)`` (float32, initialized from the run seed,
Algorithm 1 line 8) and sends it, flat, to the sampled parties every round. On the valid
replies:

- ``sync="minibatch"`` (Sync-Opt): eq. (1) with the weighted average of eq. (2),
  ``G = sum_l n_l G_l / sum_l n_l`` (``n_l`` the reply's ``batch-size``), then one step of
  the server's optimizer, eq. (3) (``W <- W - lambda G`` for ``sgd``; Adam, whose moments the
  strategy keeps between rounds, by default). With ``norm="layer"`` (or ``"none"``) every
  document's loss depends on that document alone, so ``G`` is exactly the gradient of the
  mean loss over the concatenated mini-batches and the step equals the centralized step
  (tests/test_ntm_federated.py checks it through the real Flower path);
- ``sync="local"``: the document-weighted average of the parties' weights (FedAvg).

Stopping (the paper: "either when the relative variation of the weights ... or when a
predefined maximum number of iterations is reached"): after ``max-steps`` aggregations,
or once the relative change ``|W' - W| / |W|`` falls below ``stop-tolerance``, later rounds
send nothing and keep the model.

``norm="batch"`` is refused with ``sync="minibatch"`` (eq. (2) would average gradients
each normalized with its own party's batch statistics: not the centralized gradient) and
with ``dp`` (per-document clipping bounds nothing); it runs with ``sync="local"``, where
every party's BatchNorm running statistics stay with it (buffers, not parameters) and the
server's topic-word distribution uses the initial ones, i.e. ``softmax(beta)`` up to a
constant scale, as the CTM library reports.

Privacy. Without ``dp`` nothing is randomized (a gradient can reveal much of a
mini-batch). With ``dp`` each party runs DP-SGD and accounts for itself in RDP (it alone
knows its ``D_l`` and so its sample rate); the report gives, per document, the largest
epsilon any party reported so far, at ``dp-delta``.

Secure aggregation (``secure-aggregation=true``, :mod:`flower_topics.secure_sum`): the server
receives only the sum over the round's parties of ``n_l u_l`` (each coordinate of the update
``u_l`` clipped to ``secure-clip``, quantized to ``1 / quantum``), of ``n_l``, of the clipped
coordinates and (without DP) of ``n_l`` times the loss (:mod:`flower_topics.wire.ntm`). Eq. (2)
is that sum divided by ``sum n_l`` (FedAvg adds the averaged change to ``W``); each party's
rounding error is below one unit, so the average is within ``parties / (quantum sum n_l)`` of
the plain one on every coordinate. No party sends its epsilon: with DP the strategy runs the
parties' accountant itself, for every round it sent (``dp-steps`` steps each) at the largest
sample rate a party may have, ``batch-size / min-documents`` (1 without that bound), which
bounds every party's own figure; each party still adds the full noise, so the guarantee does
not rely on the secure sum.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from flower_topics.errors import UserInputError
from flower_topics.topic_model.model_file import MODEL_FILE, STATE_FILE, load_model
from flower_topics.models.ntm import (
    NeuralTopicModel,
    apply_gradient,
    flatten_parameters,
    make_optimizer,
    topic_word,
    unflatten_parameters,
    weighted_average,
)
from flower_topics.models.ntm_federated import build_model
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.strategies import ntm_privacy
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.wire import ntm as wire
from flower_topics.wire.protocol import ReplyError, ReplySpec

def embedding_size(model: str) -> int:
    """The dimension of a sentence-transformers model's embeddings (loaded offline, from its folder)."""
    import os

    from flower_topics.models.embeddings import resolve_model
    from flower_topics.models.word_similarity import quiet_model_loading

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    quiet_model_loading()
    encoder = SentenceTransformer(resolve_model(model or None), device="cpu", local_files_only=True)
    dimension = getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension
    return int(dimension())


class NTM(TopicStrategy):
    """gFedNTM: Sync-Opt (or FedAvg) of ProdLDA / CombinedTM / ZeroShotTM, optionally with DP-SGD.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order (V = its length).
    settings : NTMSettings
        The network, the synchronization and DP-SGD, sent to every party (``embedding_size``
        resolved for combinedtm / zeroshottm).
    max_steps : int (default: 0)
        Aggregations after which the model stops changing (0: every round).
    stop_tolerance : float (default: 0.0)
        Stop once ``|W' - W| / |W|`` is below it (0: never).
    **federation : Any
        ``fraction_train``, ``min_nodes``, ``min_replies``, ``seed``, ``evaluation`` of
        :class:`TopicStrategy`; the seed also initializes ``W^(0)``.
    """

    method = wire.METHOD
    evaluation_with_train = True  # scoring in the training handler leaves its local step as it was

    def __init__(self, vocabulary: Sequence[str], settings: wire.NTMSettings, *, max_steps: int = 0,
                 stop_tolerance: float = 0.0, **federation: Any) -> None:
        super().__init__(vocabulary, **federation)
        if max_steps < 0 or not stop_tolerance >= 0:
            raise ValueError("max_steps and stop_tolerance must be >= 0")
        self.ntm = dataclasses.replace(settings, secure=self.secure is not None)  # what the parties are told
        self.max_steps = int(max_steps)
        self.stop_tolerance = float(stop_tolerance)
        self.model = self._network(seed=self.seed)
        self.optimizer = make_optimizer(self.model, settings.optimizer, settings.learning_rate)
        self._scratch = self._network(seed=0)
        self.steps = 0
        self.party_epsilon: dict[int, float] = {}
        self.first_epsilon: dict[int, float] = {}
        self.epsilon_before = 0.0  # DP: the largest epsilon reported before a resume (flower_topics.run.checkpoint)

    def _network(self, seed: int):
        return build_model(self.vocab_size, self.ntm.n_topics, self.ntm.model, embedding_size=self.ntm.embedding_size,
                           hidden_sizes=wire.HIDDEN_SIZES, norm=self.ntm.norm, seed=seed)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "NTM":
        """The strategy of a validated run config (E read from the embedding model for combinedtm / zeroshottm)."""
        record = dict(config)
        if str(config["ntm.model"]) != "prodlda":
            record["ntm.embedding-size"] = embedding_size(str(config["ntm.embedding-model"]))
        try:
            settings = wire.NTMSettings.from_record(record)
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        return cls(vocabulary, settings, max_steps=int(config["ntm.max-steps"]),
                   stop_tolerance=float(config["ntm.stop-tolerance"]), **cls.federation_options(config))

    @classmethod
    def load_network(cls, run_directory: str | os.PathLike[str]) -> NeuralTopicModel:
        """The trained network of a finished ``ntm`` run, from its ``model.npz`` and ``state.npz``.

        With it a party (or anyone holding the model) infers documents' topic proportions
        (:func:`flower_topics.models.ntm.infer_theta`), which ``model.npz``'s topic-word
        matrix alone cannot give for these models.

        Raises
        ------
        UserInputError
            If the directory does not hold a finished ``ntm`` run.
        """
        directory = Path(run_directory)
        model = load_model(directory / MODEL_FILE)
        config = model.metadata.get("run_config", {})
        if config.get("method") != wire.METHOD or not (directory / STATE_FILE).is_file():
            raise UserInputError(f"{directory} does not hold a finished ntm run (model.npz of method ntm and "
                                 f"{STATE_FILE})")
        strategy = cls.from_config(config, model.vocabulary)  # the run config as the run validated it
        with np.load(directory / STATE_FILE) as state:
            unflatten_parameters(strategy.model, state[wire.WEIGHTS_KEY])
        return strategy.model.eval()

    # ------------------------------------------------------------ hooks
    def initial_arrays(self) -> ArrayRecord:
        """``W^(0)``: the network initialized from the strategy's seed, flat float32."""
        return ArrayRecord({wire.WEIGHTS_KEY: Array(flatten_parameters(self.model, np.float32))})

    def weights(self, arrays: ArrayRecord) -> np.ndarray:
        """The flat ``(P,)`` weights of a global model."""
        return arrays[wire.WEIGHTS_KEY].numpy()

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """The ``K x V`` word distribution the decoder gives a one-topic document (models.ntm.topic_word)."""
        unflatten_parameters(self._scratch, self.weights(arrays))
        return topic_word(self._scratch)

    def train_config(self) -> dict[str, Any]:
        """The network, synchronization and DP-SGD settings."""
        return self.ntm.to_record()

    def reply_spec(self) -> ReplySpec:
        """One finite float32 ``(1, P)`` row and the weight (and loss or epsilon) metrics."""
        return wire.reply_spec(self.ntm, self.vocab_size)

    def decode_sum(self, server_round: int, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The secure sum as floats: the weighted update in update units (its integers / quantum), the rest as is."""
        out = {key: value.astype(np.float64) for key, value in arrays.items()}
        out[wire.SECURE_UPDATE_KEY] = out[wire.SECURE_UPDATE_KEY] / self.ntm.quantum
        return out

    def check_reply(self, server_round: int, reply: Reply) -> None:
        """Under secure aggregation, the unmasked sum must have a positive total weight (else the round is held)."""
        if self.secure is not None and not reply.arrays[wire.SECURE_WEIGHT_KEY][0] >= 1:
            raise ReplyError(f"the summed aggregation weight is {reply.arrays[wire.SECURE_WEIGHT_KEY][0]:g}, not >= 1")

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """Eqs. (1)-(3) (``minibatch``) or the document-weighted average of the weights (``local``).

        Under secure aggregation ``replies`` is the one unmasked sum: eq. (2) is its weighted
        update over its weight (with ``local``, that average change is added to ``W``).
        """
        current = self.weights(arrays)
        unflatten_parameters(self.model, current)
        if self.secure is not None:
            return self._finish(current, self._aggregate_sum(current, replies[0]))
        key = wire.reply_key(self.ntm)
        rows = [r.arrays[key].reshape(-1) for r in replies]
        if self.ntm.sync == "minibatch":
            gradient = weighted_average(rows, [r.metrics["batch-size"] for r in replies])  # eq. (2)
            apply_gradient(self.model, self.optimizer, gradient)  # eq. (3)
        else:
            unflatten_parameters(self.model, weighted_average(rows, [r.metrics["num-documents"] for r in replies]))
        metrics: dict[str, float] = {}
        if self.ntm.dp:
            for r in replies:
                self.party_epsilon[r.node_id] = max(self.party_epsilon.get(r.node_id, 0.0), r.metrics["epsilon"])
                self.first_epsilon.setdefault(r.node_id, r.metrics["epsilon"])
        else:
            metrics["loss"] = float(np.average([r.metrics["loss"] for r in replies],
                                               weights=[r.metrics[wire.reply_metrics(self.ntm)[0]] for r in replies]))
        return self._finish(current, metrics)

    def _aggregate_sum(self, current: np.ndarray, summed: Reply) -> dict[str, float]:
        """Eq. (2) (or FedAvg's average change) from the secure sum, the step, and the sum's metrics."""
        total = float(summed.arrays[wire.SECURE_WEIGHT_KEY][0])
        average = summed.arrays[wire.SECURE_UPDATE_KEY].reshape(-1) / total
        if self.ntm.sync == "minibatch":
            apply_gradient(self.model, self.optimizer, average.astype(np.float32))  # eq. (3)
        else:
            unflatten_parameters(self.model, (np.asarray(current, dtype=np.float64) + average).astype(np.float32))
        metrics = {"clipped-entries": float(summed.arrays[wire.SECURE_CLIPPED_KEY][0]),
                   wire.reply_metrics(self.ntm)[0]: total}
        if not self.ntm.dp:
            metrics["loss"] = float(summed.arrays[wire.SECURE_LOSS_KEY][0]) / total
        return metrics

    def _finish(self, current: np.ndarray, metrics: dict[str, float]) -> tuple[ArrayRecord, dict[str, float]]:
        """The new global weights, the relative change, the steps and the stopping criteria."""
        new = flatten_parameters(self.model, np.float32)
        change = float(np.linalg.norm(new.astype(np.float64) - current) / max(np.linalg.norm(current), 1e-30))
        self.steps += 1
        metrics = {"relative-change": change, "steps": self.steps, **metrics}
        if self.max_steps and self.steps >= self.max_steps:
            self.stopped = f"max-steps {self.max_steps} reached"
        elif self.stop_tolerance and change < self.stop_tolerance:
            self.stopped = f"relative change {change:.3g} < stop-tolerance {self.stop_tolerance:g}"
        return ArrayRecord({wire.WEIGHTS_KEY: Array(new)}), metrics

    # ------------------------------------------------------------ checkpoint
    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The server optimizer's state (Adam's moments and step counts), the steps, the stop, the parties' epsilons.

        The network's weights are the global arrays; the optimizer's tensors are saved as
        arrays ``ntm-optimizer-<param>-<name>``, its hyper-parameters as JSON.
        """
        optimizer = self.optimizer.state_dict()
        arrays: dict[str, np.ndarray] = {}
        scalars: dict[str, dict[str, float]] = {}
        for index, entries in optimizer["state"].items():
            for name, value in entries.items():
                if hasattr(value, "detach"):
                    arrays[f"ntm-optimizer-{index}-{name}"] = value.detach().cpu().numpy()
                else:
                    scalars.setdefault(str(index), {})[name] = float(value)
        return arrays, {"param_groups": optimizer["param_groups"], "optimizer_scalars": scalars, "steps": self.steps,
                        "stopped": self.stopped, "party_epsilon": {str(n): e for n, e in self.party_epsilon.items()},
                        "first_epsilon": {str(n): e for n, e in self.first_epsilon.items()},
                        "epsilon_before": self.epsilon_before}

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state` (the optimizer continues where it stopped: the same Adam step)."""
        import torch

        state: dict[int, dict[str, Any]] = {}
        prefix = "ntm-optimizer-"
        for key, value in arrays.items():
            if key.startswith(prefix):
                index, _, name = key[len(prefix):].partition("-")
                state.setdefault(int(index), {})[name] = torch.from_numpy(np.array(value))
        for index, entries in meta.get("optimizer_scalars", {}).items():
            state.setdefault(int(index), {}).update(entries)
        self.optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        self.steps = int(meta["steps"])
        self.stopped = meta["stopped"]
        self.party_epsilon = {int(n): float(e) for n, e in meta["party_epsilon"].items()}
        self.first_epsilon = {int(n): float(e) for n, e in meta["first_epsilon"].items()}
        self.epsilon_before = float(meta["epsilon_before"])

    def lost_release(self, release: Mapping[str, Any]) -> None:
        """A round released and lost to a crash: with DP one round's epsilon more (basic composition)."""
        if self.ntm.dp:
            self.epsilon_before += max(self.first_epsilon.values(), default=0.0)

    def on_resume(self, arrays: Mapping[str, np.ndarray]) -> None:
        """With DP: the parties of a new Flower run restart their accountants, so what they report from now on is
        added to the largest epsilon reported before (basic composition of the two parts: never fewer)."""
        self.epsilon_before += max(self.party_epsilon.values(), default=0.0)
        self.party_epsilon = {}

    # ------------------------------------------------------------ privacy
    def privacy_report(self) -> PrivacyReport:
        """Without DP none; with DP, per document, the largest epsilon a party reported (its own RDP accounting),
        or under secure aggregation the parties' accountant run by the server (:mod:`.ntm_privacy`)."""
        return ntm_privacy.privacy_report(self.ntm, rounds=self.rounds_released(), secure=self.secure is not None,
                                          party_epsilon=self.party_epsilon, first_epsilon=self.first_epsilon,
                                          epsilon_before=self.epsilon_before,
                                          evaluation=self.unaccounted_evaluation())


def quality_notes(config: Mapping[str, Any]) -> list[str]:
    """Why a DP-SGD run gives noise topics, and the option that changes it (the console says it)."""
    if not bool(config["ntm.dp"]):
        return []
    return [f"ntm.dp=true (noise multiplier {float(config['ntm.noise-multiplier']):g}): DP-SGD over a few dozen "
            "documents per party a step gives noise topics (NPMI about -0.23 on BBC after 300 steps: docs/ntm.md); "
            "ntm.dp=false trains the paper's non-private model, whose gradients then leave each party in clear"
            + (" (under secure aggregation: only their sum reaches the server, without noise)"
               if bool(config.get("secure-aggregation", False)) else "")]
