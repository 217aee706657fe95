"""The checkpoint file: what the ServerApp writes every round so that an interrupted run can continue.

After the vocabulary agreement (round 0), after the last round, after every round of a
method with a privacy mechanism, and otherwise after the first round that ends at least
``checkpoint-interval`` seconds (default 10; 0: every round) after the last checkpoint, the
ServerApp replaces ``checkpoint.npz`` in the run's output directory (a temporary file, then
``os.replace``: a crash leaves the previous checkpoint or the new one, never half of one).
A crash then costs at most the rounds since the last checkpoint: seconds of work for a
method without privacy, and for a private one only the round the crash happened in (its
release is spent: see below). It holds, in one file so that its parts always belong to the
same round:

- ``global/<key>``: the global arrays of the strategy after the round;
- ``strategy/<key>``: the strategy's own arrays (e.g. ``ntm``'s optimizer moments, ``ftm``'s
  composed local models, the restored counts of a resumed ``lda`` / ``fedlda``);
- ``meta``: JSON (UTF-8 bytes as a ``uint8`` array; the arrays are not compressed): the
  format version, the round, the run config, the vocabulary, the vocabulary agreement (so
  a resume never runs it again, which would spend privacy again), and the strategy's state
  (traffic per round, last applied round per node, excluded nodes, method metrics,
  evaluations, and the method's own counters: the privacy accounting).

Before a round's messages go out, a line of the release journal records it
(:mod:`flower_topics.run.release_journal`); the writer empties the journal after each
checkpoint. How a run continues from a checkpoint: :mod:`flower_topics.run.resume`.

Node sampling needs no saved random state: every round draws from
``np.random.default_rng([seed, round])`` (:meth:`~flower_topics.strategies.base.TopicStrategy.sample_nodes`),
so a resumed round samples as the uninterrupted run would, given the same connected nodes.

No pickle: arrays go to ``.npz`` (read with ``allow_pickle=False``) and everything else to JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np
from flwr.app import ArrayRecord

from flower_topics.errors import UserInputError
from flower_topics.methods import get_method
from flower_topics.run.json_values import plain_json
from flower_topics.run.release_journal import RELEASE_FILE, read_releases
from flower_topics.topic_model.model_file import save_npz

if TYPE_CHECKING:
    from flower_topics.strategies.base import TopicStrategy

#: Version of the checkpoint format (``meta["format"]``).
FORMAT = 1
CHECKPOINT_FILE = "checkpoint.npz"
GLOBAL_PREFIX = "global/"
STRATEGY_PREFIX = "strategy/"




class AgreedVocabulary(Protocol):
    """What a checkpoint keeps of the vocabulary agreement
    (:class:`~flower_topics.federation.vocabulary_agreement.Agreement`)."""

    vocabulary: tuple[str, ...]

    def state(self) -> dict[str, Any]:
        """Its fields as JSON values (the vocabulary travels separately)."""


# ---------------------------------------------------------------------------------------------- state
@dataclass
class Checkpoint:
    """A run's state after round :attr:`round` (0: after the vocabulary agreement, before round 1).

    Parameters
    ----------
    round : int
        The last complete round.
    config : dict
        The run config of the run that wrote it (validated).
    vocabulary : tuple of str
        The agreed vocabulary, in column order.
    agreement : dict
        The vocabulary agreement's fields (``AgreedVocabulary.state()``).
    global_arrays : dict
        The strategy's global arrays after the round.
    strategy_arrays : dict
        The strategy's own arrays.
    strategy_meta : dict
        The strategy's state that is not an array (JSON).
    lost_releases : list of dict
        The rounds sent to the parties after this checkpoint and lost to a crash, in
        order (``{"round": r, "nodes": [...], "id": ..., ...}`` each).
    counted_lost_releases : list of str
        The ids of the lost releases this checkpoint's state already counts (a journal
        with one of them is not counted again); ``meta``'s ``counted_lost_releases`` (an
        older checkpoint's ``absorbed``).
    """

    round: int
    config: dict[str, Any]
    vocabulary: tuple[str, ...]
    agreement: dict[str, Any]
    global_arrays: dict[str, np.ndarray]
    strategy_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    strategy_meta: dict[str, Any] = field(default_factory=dict)
    lost_releases: list[dict[str, Any]] = field(default_factory=list)
    counted_lost_releases: list[str] = field(default_factory=list)


#: The strategy's accumulators that grow by one entry a round (:func:`base_state`): a writer
#: serializes each round's entry once and reuses it (see :class:`CheckpointWriter`).
HISTORY_KEYS = ("traffic", "method_metrics", "evaluations")


def _plain_entry(entry: Any) -> Any:
    """One history entry, JSON-ready (a :class:`~flower_topics.strategies.base.RoundTraffic` as its fields)."""
    return dataclasses.asdict(entry) if dataclasses.is_dataclass(entry) else plain_json(entry)


def _int_keys(mapping: Mapping[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in mapping.items()}


def base_state(strategy: "TopicStrategy", history: bool = True) -> dict[str, Any]:
    """What every :class:`~flower_topics.strategies.base.TopicStrategy` accumulates (its public attributes).

    ``history=False`` leaves out the entries that grow by one a round (:data:`HISTORY_KEYS`),
    which :class:`CheckpointWriter` serializes itself.
    """
    state = {
        "last_applied": {str(n): int(r) for n, r in strategy.last_applied.items()},
        "excluded": {str(n): str(why) for n, why in strategy.excluded.items()},
    }
    if history:
        state.update({key: {str(r): _plain_entry(entry) for r, entry in getattr(strategy, key).items()}
                      for key in HISTORY_KEYS})
    return state


def read_meta(stored: np.ndarray) -> dict[str, Any]:
    """The ``meta`` entry of a checkpoint: UTF-8 JSON bytes (a NumPy unicode string in files before them)."""
    text = stored.tobytes().decode("utf-8") if stored.dtype == np.uint8 else str(stored)
    return json.loads(text)


def load_base_state(strategy: "TopicStrategy", state: Mapping[str, Any]) -> None:
    """Restore :func:`base_state` into a freshly built strategy."""
    from flower_topics.strategies.base import RoundTraffic

    strategy.traffic = {int(r): RoundTraffic(**t) for r, t in state["traffic"].items()}
    strategy.last_applied = _int_keys(state["last_applied"])
    strategy.excluded.update(_int_keys(state["excluded"]))
    strategy.method_metrics = _int_keys(state["method_metrics"])
    strategy.evaluations = _int_keys(state["evaluations"])


def strategy_state(strategy: "TopicStrategy", history: bool = True) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)``: everything the strategy's ``aggregate`` and ``privacy_report`` need to continue:
    the base's accumulators (:func:`base_state`), then the method's own
    (:meth:`~flower_topics.strategies.base.TopicStrategy.checkpoint_state`)."""
    arrays, method_meta = strategy.checkpoint_state()
    return dict(arrays), {"base": base_state(strategy, history), "method": plain_json(method_meta)}


def load_strategy_state(strategy: "TopicStrategy", arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
    """Restore :func:`strategy_state` into a strategy freshly built from the same run config and vocabulary."""
    load_base_state(strategy, meta["base"])
    strategy.load_checkpoint_state(dict(arrays), dict(meta.get("method", {})))


# ---------------------------------------------------------------------------------------------- files
class CheckpointWriter:
    """Writes ``checkpoint.npz`` of one run when it is due (:meth:`due`), in time that does not grow with the rounds.

    The JSON of what does not change during a run (the run config, the vocabulary, the
    agreement) is made once, and each round's entry of the strategy's history
    (:data:`HISTORY_KEYS`) once, when its round has passed: strategies write only the
    current round's entries, so an entry older than the newest is final (the two newest
    are made again every time, to be safe), and the text of the final ones is kept joined.
    The text written is exactly ``json.dumps`` of the whole state. The arrays are stored
    uncompressed: compressing a ``K x V`` matrix every round cost more than the round's
    sampling (BBC, K=20), and the file is replaced each round anyway.

    Parameters
    ----------
    directory : path
        The run's output directory.
    config : mapping
        The run config (validated).
    agreement : AgreedVocabulary
        The vocabulary agreement of the run (its vocabulary and its ``state()``).
    """

    def __init__(self, directory: str | os.PathLike[str], config: Mapping[str, Any], agreement: "AgreedVocabulary"
                 ) -> None:
        self.path = Path(directory) / CHECKPOINT_FILE
        self._releases = Path(directory) / RELEASE_FILE
        self._method = str(config["method"])
        self._last_round = int(config["num-rounds"])
        #: seconds between checkpoints; 0 for a private method, whose lost round would cost privacy budget
        self.interval = 0.0 if get_method(self._method).private else float(config["checkpoint-interval"])
        self._saved_at = time.monotonic()
        self._static = {"config": json.dumps(plain_json(dict(config))), "vocabulary": json.dumps(list(agreement.vocabulary)),
                        "agreement": json.dumps(agreement.state())}
        self._frozen: dict[str, tuple[list[int], str]] = {key: ([], "") for key in HISTORY_KEYS}
        self._token = uuid.uuid4().hex  # marks the holes; no value of the state can contain it

    def _history(self, key: str, entries: Mapping[int, Any]) -> str:
        """``json.dumps`` of ``{str(round): entry}``; entries but the two newest are serialized once and kept."""
        keys = list(entries)
        frozen_keys, frozen_text = self._frozen[key]
        if keys[:len(frozen_keys)] != frozen_keys:  # a strategy whose history was replaced (a resume): start over
            frozen_keys, frozen_text = [], ""
        parts = [f"{json.dumps(str(r))}: {json.dumps(_plain_entry(entries[r]))}" for r in keys[len(frozen_keys):]]
        freeze = max(0, len(keys) - 2 - len(frozen_keys))
        if freeze:
            frozen_text = ", ".join(filter(None, [frozen_text, *parts[:freeze]]))
            frozen_keys, parts = frozen_keys + keys[len(frozen_keys):len(frozen_keys) + freeze], parts[freeze:]
        self._frozen[key] = (frozen_keys, frozen_text)
        return "{" + ", ".join(filter(None, [frozen_text, *parts])) + "}"

    def due(self, server_round: int) -> bool:
        """Whether the state after ``server_round`` is to be checkpointed: the last round, every round with
        interval 0, else the first round ending ``interval`` seconds or more after the last checkpoint."""
        return (self.interval <= 0 or server_round >= self._last_round
                or time.monotonic() - self._saved_at >= self.interval)

    def save(self, server_round: int, strategy: "TopicStrategy", arrays: ArrayRecord,
             counted_lost_releases: Sequence[str] = ()) -> Path:
        """Write the state after ``server_round`` (atomically: temp file + ``os.replace``), then empty the
        release journal (``checkpoint-release.json``: its rounds are in the checkpoint now).

        ``counted_lost_releases``: the ids of lost releases (``checkpoint-release.json``) the strategy's state counts
        already.
        """
        own_arrays, strategy_meta = strategy_state(strategy, history=False)
        holes = {name: f"{self._token}:{name}" for name in (*self._static, *HISTORY_KEYS)}
        strategy_meta["base"].update({key: holes[key] for key in HISTORY_KEYS})
        meta = {"format": FORMAT, "round": int(server_round), "method": self._method, "config": holes["config"],
                "vocabulary": holes["vocabulary"], "agreement": holes["agreement"], "strategy": strategy_meta,
                "counted_lost_releases": list(counted_lost_releases), "written": time.time()}
        fill = dict(self._static)
        fill.update({key: self._history(key, getattr(strategy, key)) for key in HISTORY_KEYS})
        # one pass over the text with the holes: what is filled in is never scanned again
        text = re.sub(f'"{self._token}:([a-z_]+)"', lambda m: fill[m.group(1)], json.dumps(meta))
        payload: dict[str, np.ndarray] = {"meta": np.frombuffer(text.encode("utf-8"), dtype=np.uint8)}
        payload.update({GLOBAL_PREFIX + k: np.asarray(a.numpy()) for k, a in arrays.items()})
        payload.update({STRATEGY_PREFIX + k: np.asarray(v) for k, v in own_arrays.items()})
        path = save_npz(self.path, compress=False, **payload)
        self._saved_at = time.monotonic()
        if self._releases.is_file() and self._releases.stat().st_size:
            self._releases.write_bytes(b"")  # a crash before this leaves lines of rounds <= the checkpoint's: ignored
        return path


def load_checkpoint(directory: str | os.PathLike[str]) -> Checkpoint:
    """Read the checkpoint of an interrupted run's output directory.

    Raises
    ------
    UserInputError
        One line: no checkpoint there, or a file that is not one this version wrote.
    """
    directory = Path(directory).expanduser().resolve()
    path = directory / CHECKPOINT_FILE
    if not path.is_file():
        raise UserInputError(f"resume: {directory} holds no {CHECKPOINT_FILE} (the output directory of a run that "
                             "was interrupted after its vocabulary agreement)")
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = read_meta(data["meta"])
            global_arrays = {k[len(GLOBAL_PREFIX):]: data[k] for k in data.files if k.startswith(GLOBAL_PREFIX)}
            strategy_arrays = {k[len(STRATEGY_PREFIX):]: data[k] for k in data.files if k.startswith(STRATEGY_PREFIX)}
    except (OSError, ValueError, KeyError) as exc:
        raise UserInputError(f"resume: {path} is not a readable checkpoint ({exc})") from None
    if meta.get("format") != FORMAT:
        raise UserInputError(f"resume: {path} has checkpoint format {meta.get('format')!r}, this version reads {FORMAT}")
    if not global_arrays:
        raise UserInputError(f"resume: {path} holds no global model")
    checkpoint = Checkpoint(round=int(meta["round"]), config=dict(meta["config"]),
                            vocabulary=tuple(meta["vocabulary"]), agreement=dict(meta["agreement"]),
                            global_arrays=global_arrays, strategy_arrays=strategy_arrays,
                            strategy_meta=dict(meta["strategy"]),
                            counted_lost_releases=list(meta.get("counted_lost_releases", meta.get("absorbed", []))))
    release = directory / RELEASE_FILE
    if release.is_file():
        checkpoint.lost_releases = [record for record in read_releases(release)
                                    if int(record.get("round", 0)) > checkpoint.round
                                    and record.get("id") not in checkpoint.counted_lost_releases]
    return checkpoint


