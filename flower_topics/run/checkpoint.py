"""Checkpoint and resume a run: what the ServerApp writes every round, and how a run continues from it.

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
  composed local models, the carried counts of a resumed ``lda`` / ``fedlda``);
- ``meta``: JSON (UTF-8 bytes as a ``uint8`` array; the arrays are not compressed): the
  format version, the round, the run config, the vocabulary, the vocabulary agreement (so
  a resume never runs it again, which would spend privacy again), and the strategy's state
  (traffic per round, last applied round per node, excluded nodes, method metrics,
  evaluations, and the method's own counters: the privacy accounting).

Before a round's messages go out, a line of ``checkpoint-release.json`` (one JSON object a
line, appended and flushed) records the round and the nodes it was sent to; the file is
emptied after each checkpoint. A resume counts every line of a round past the checkpoint
as a round that was released and then lost to the crash, in the privacy report
(:func:`resume_strategy`): a resumed run never reports less than what the parties
released.

Node sampling needs no saved random state: every round draws from
``np.random.default_rng([seed, round])`` (:meth:`~flower_topics.strategies.base.TopicStrategy.sample_nodes`),
so a resumed round samples as the uninterrupted run would, given the same connected nodes.

No pickle: arrays go to ``.npz`` (read with ``allow_pickle=False``) and everything else to JSON.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from flower_topics.errors import UserInputError
from flower_topics.model.model_file import save_npz

if TYPE_CHECKING:
    from flower_topics.federation.vocabulary_agreement import Agreement
    from flower_topics.strategies.base import TopicStrategy

#: Version of the checkpoint format (``meta["format"]``).
FORMAT = 1
CHECKPOINT_FILE = "checkpoint.npz"
RELEASE_FILE = "checkpoint-release.json"
GLOBAL_PREFIX = "global/"
STRATEGY_PREFIX = "strategy/"
#: Run-config keys a resume may change; any other change (method, data, vocabulary, privacy) is refused.
RESUMABLE_KEYS = frozenset({"num-rounds", "output-dir", "resume", "verbose", "eval-every", "checkpoint-interval"})


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
        The vocabulary agreement's fields (:func:`agreement_state`).
    global_arrays : dict
        The strategy's global arrays after the round.
    strategy_arrays : dict
        The strategy's own arrays.
    strategy_meta : dict
        The strategy's state that is not an array (JSON).
    lost_releases : list of dict
        The rounds sent to the parties after this checkpoint and lost to a crash, in
        order (``{"round": r, "nodes": [...], "id": ..., ...}`` each).
    absorbed : list of str
        The ids of the lost releases this checkpoint's state already counts (a journal
        with one of them is not counted again).
    """

    round: int
    config: dict[str, Any]
    vocabulary: tuple[str, ...]
    agreement: dict[str, Any]
    global_arrays: dict[str, np.ndarray]
    strategy_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    strategy_meta: dict[str, Any] = field(default_factory=dict)
    lost_releases: list[dict[str, Any]] = field(default_factory=list)
    absorbed: list[str] = field(default_factory=list)


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars and arrays to Python, mapping keys to str."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


#: The strategy's accumulators that grow by one entry a round (:func:`base_state`): a writer
#: serializes each round's entry once and reuses it (see :class:`CheckpointWriter`).
HISTORY_KEYS = ("traffic", "method_metrics", "evaluations")


def _plain_entry(entry: Any) -> Any:
    """One history entry, JSON-ready (a :class:`~flower_topics.strategies.base.RoundTraffic` as its fields)."""
    return dataclasses.asdict(entry) if dataclasses.is_dataclass(entry) else _plain(entry)


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


#: State of strategies whose files keep no ``checkpoint_state`` method: the attributes their
#: ``aggregate`` and ``privacy_report`` read beyond the base's.
EXTRA_ATTRIBUTES: Mapping[str, tuple[str, ...]] = {"dplda": ("updates",)}


def strategy_state(strategy: "TopicStrategy", history: bool = True) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)``: everything the strategy's ``aggregate`` and ``privacy_report`` need to continue.

    The base's accumulators (:func:`base_state`), then the method's own state: the
    strategy's ``checkpoint_state()`` where it has one, else the attributes
    :data:`EXTRA_ATTRIBUTES` names for its method.
    """
    meta: dict[str, Any] = {"base": base_state(strategy, history)}
    arrays: dict[str, np.ndarray] = {}
    own = getattr(strategy, "checkpoint_state", None)
    if own is not None:
        arrays, method_meta = own()
        meta["method"] = _plain(method_meta)
    else:
        meta["method"] = {name: _plain(getattr(strategy, name))
                          for name in EXTRA_ATTRIBUTES.get(strategy.method, ())}
    return dict(arrays), meta


def load_strategy_state(strategy: "TopicStrategy", arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
    """Restore :func:`strategy_state` into a strategy freshly built from the same run config and vocabulary."""
    load_base_state(strategy, meta["base"])
    own = getattr(strategy, "load_checkpoint_state", None)
    if own is not None:
        own(dict(arrays), dict(meta.get("method", {})))
    else:
        for name, value in meta.get("method", {}).items():
            setattr(strategy, name, value)


def record_lost_round(strategy: "TopicStrategy", nodes: Sequence[int]) -> None:
    """Count a round released to ``nodes`` and lost to a crash in the strategy's traffic.

    The round is re-run under its own number after the resume, so the lost release is
    kept under a negative key (below every other): every report that counts the rounds
    with ``nodes_sampled`` counts it, and no round's metrics change.
    """
    from flower_topics.strategies.base import RoundTraffic

    key = min(0, *strategy.traffic) - 1 if strategy.traffic else -1
    strategy.traffic[key] = RoundTraffic(nodes_sampled=len(nodes), started=0.0)


def count_lost_release(strategy: "TopicStrategy", release: Mapping[str, Any]) -> None:
    """Count a lost release (``checkpoint-release.json``): the strategy's ``count_lost_release`` where it has one."""
    own = getattr(strategy, "count_lost_release", None)
    if own is not None:
        own(release)
    else:
        record_lost_round(strategy, release.get("nodes", []))


def resume_strategy(strategy: "TopicStrategy", checkpoint: Checkpoint) -> None:
    """Bring a freshly built strategy to the checkpoint's state, ready for round ``checkpoint.round + 1``.

    Restores the state, counts the releases lost to the crash, then calls the strategy's
    ``on_resume(global_arrays)`` where it has one (what a method does because the parties
    of a new Flower run start without their ``context.state``; see the README).
    """
    load_strategy_state(strategy, checkpoint.strategy_arrays, checkpoint.strategy_meta)
    for release in checkpoint.lost_releases:
        count_lost_release(strategy, release)
    hook = getattr(strategy, "on_resume", None)
    if hook is not None:
        hook(dict(checkpoint.global_arrays))


# ---------------------------------------------------------------------------------------------- agreement
def agreement_state(agreement: "Agreement") -> dict[str, Any]:
    """The agreement's fields as JSON (the vocabulary travels separately)."""
    privacy = None if agreement.privacy is None else _plain(dataclasses.asdict(agreement.privacy))
    return {"mode": agreement.mode, "nodes": agreement.nodes, "bytes_sent": agreement.bytes_sent,
            "bytes_received": agreement.bytes_received, "seconds": agreement.seconds,
            "excluded": {str(n): why for n, why in agreement.excluded.items()}, "privacy": privacy,
            "node_corpora": agreement.node_corpora, "shares": agreement.shares}


def agreement_from_state(state: Mapping[str, Any], vocabulary: Sequence[str]) -> "Agreement":
    """The :class:`~flower_topics.federation.vocabulary_agreement.Agreement` a checkpoint recorded."""
    from flower_topics.federation.vocabulary_agreement import Agreement
    from flower_topics.privacy.privacy_report import PrivacyReport

    privacy = None if state["privacy"] is None else PrivacyReport(**state["privacy"])
    return Agreement(vocabulary=tuple(vocabulary), mode=state["mode"], nodes=int(state["nodes"]),
                     bytes_sent=int(state["bytes_sent"]), bytes_received=int(state["bytes_received"]),
                     seconds=float(state["seconds"]), excluded=_int_keys(state["excluded"]), privacy=privacy,
                     node_corpora=int(state["node_corpora"]), shares=int(state["shares"]))


def send_vocabulary(grid: Grid, vocabulary: Sequence[str], min_nodes: int, timeout: float | None = None
                    ) -> dict[int, str]:
    """Send the checkpointed vocabulary to every node (the agreement's last message, ``query.vocabulary``).

    The parties of a new Flower run hold no vocabulary; the agreed words are already known
    to every party, so sending them again releases nothing, and no candidate is asked for
    (the agreement's privacy is not spent again). A party that kept its state maps its
    documents onto the same words again (nothing changes).

    Returns
    -------
    dict
        The nodes that could not take the vocabulary, with the reason.
    """
    from flwr.app import RecordDict

    from flower_topics.strategies.base import FederationError, error_reason, wait_for_nodes
    from flower_topics.wire import agreement as wire
    from flower_topics.wire.protocol import CONFIG, vocabulary_fingerprint

    nodes = sorted(wait_for_nodes(grid, min_nodes))
    record = ConfigRecord({wire.WORDS: wire.join_words(tuple(vocabulary)),
                           "vocabulary": vocabulary_fingerprint(tuple(vocabulary))})
    messages = [Message(RecordDict({CONFIG: record}), dst_node_id=n, message_type=wire.VOCABULARY) for n in nodes]
    excluded = {reply.metadata.src_node_id: error_reason(reply)
                for reply in grid.send_and_receive(messages, timeout=timeout) if reply.has_error()}
    if len(nodes) - len(excluded) < min_nodes:
        raise FederationError.too_few("resume (the vocabulary to the parties)", len(nodes) - len(excluded),
                                      min_nodes, excluded)
    return excluded


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
    agreement : Agreement
        The vocabulary agreement of the run.
    """

    def __init__(self, directory: str | os.PathLike[str], config: Mapping[str, Any], agreement: "Agreement") -> None:
        from flower_topics.methods import get_method

        self.path = Path(directory) / CHECKPOINT_FILE
        self._releases = Path(directory) / RELEASE_FILE
        self._method = str(config["method"])
        self._last_round = int(config["num-rounds"])
        #: seconds between checkpoints; 0 for a private method, whose lost round would cost privacy budget
        self.interval = 0.0 if get_method(self._method).private else float(config["checkpoint-interval"])
        self._saved_at = time.monotonic()
        self._static = {"config": json.dumps(_plain(dict(config))), "vocabulary": json.dumps(list(agreement.vocabulary)),
                        "agreement": json.dumps(agreement_state(agreement))}
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
             absorbed: Sequence[str] = ()) -> Path:
        """Write the state after ``server_round`` (atomically: temp file + ``os.replace``), then empty the
        release journal (``checkpoint-release.json``: its rounds are in the checkpoint now).

        ``absorbed``: the ids of lost releases (``checkpoint-release.json``) the strategy's state counts already.
        """
        own_arrays, strategy_meta = strategy_state(strategy, history=False)
        holes = {name: f"{self._token}:{name}" for name in (*self._static, *HISTORY_KEYS)}
        strategy_meta["base"].update({key: holes[key] for key in HISTORY_KEYS})
        meta = {"format": FORMAT, "round": int(server_round), "method": self._method, "config": holes["config"],
                "vocabulary": holes["vocabulary"], "agreement": holes["agreement"], "strategy": strategy_meta,
                "absorbed": list(absorbed), "written": time.time()}
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


def write_release(directory: str | os.PathLike[str], server_round: int, nodes: Sequence[int],
                  extra: Mapping[str, Any] | None = None) -> Path:
    """Record, before a round's messages go out, that round ``server_round`` is released to ``nodes``: one line
    appended to ``checkpoint-release.json`` in one write (a crash during it happens before the messages go out)."""
    path = Path(directory) / RELEASE_FILE
    line = json.dumps({"round": int(server_round), "nodes": [int(n) for n in nodes], "id": uuid.uuid4().hex,
                       **_plain(dict(extra or {}))}) + "\n"
    with open(path, "ab") as fh:
        fh.write(line.encode("utf-8"))
    return path


def read_releases(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a release journal, in order.

    A last line without its newline counts when it is whole JSON (the one record of a journal an
    older version wrote); one a crash cut short (before the round's messages went out) does not
    parse and is left out. Any other unreadable line is an error.

    Raises
    ------
    UserInputError
        One line: the journal is not readable.
    """
    path = Path(path)
    try:
        lines = path.read_bytes().split(b"\n")
        records = [json.loads(line) for line in lines[:-1] if line.strip()]  # lines[-1]: after the last newline
    except (OSError, ValueError) as exc:
        raise UserInputError(f"resume: {path} is not readable ({exc})") from None
    if lines[-1].strip():
        try:
            records.append(json.loads(lines[-1]))
        except ValueError:
            pass
    return records


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
                            strategy_meta=dict(meta["strategy"]), absorbed=list(meta.get("absorbed", [])))
    release = directory / RELEASE_FILE
    if release.is_file():
        checkpoint.lost_releases = [record for record in read_releases(release)
                                    if int(record.get("round", 0)) > checkpoint.round
                                    and record.get("id") not in checkpoint.absorbed]
    return checkpoint


def check_resume_config(saved: Mapping[str, Any], new: Mapping[str, Any], completed: int) -> None:
    """Refuse, in one line, a resume whose run config changes more than :data:`RESUMABLE_KEYS`.

    Also refused: ``num-rounds`` below the rounds already completed, and for ``dplda`` any
    change of ``num-rounds`` (its noise multiplier is calibrated to spend the whole-run
    budget over exactly ``num-rounds`` releases: a new total would change the noise).
    """
    changed = sorted(k for k in set(saved) | set(new)
                     if k not in RESUMABLE_KEYS and _differs(saved.get(k), new.get(k)))
    if changed:
        shown = ", ".join(f"{k} ({saved.get(k)!r} -> {new.get(k)!r})" for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise UserInputError(f"resume refused: the run config changes {shown}{more}; a resume may change only "
                             f"{', '.join(sorted(RESUMABLE_KEYS))}")
    rounds = int(new["num-rounds"])
    if rounds < completed:
        raise UserInputError(f"resume refused: num-rounds {rounds} is below the {completed} round(s) already completed")
    if str(new["method"]) == "dplda" and rounds != int(saved["num-rounds"]):
        raise UserInputError(f"resume refused: dplda calibrates its noise to num-rounds={saved['num-rounds']} "
                             f"releases under the whole-run budget; num-rounds={rounds} would change the noise")


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) != float(b)
    return a != b


# ---------------------------------------------------------------------------------------------- rounds
class RoundOffset(Strategy):
    """Flower's :meth:`~flwr.serverapp.strategy.Strategy.start` loop on a strategy whose rounds begin after ``offset``.

    ``Strategy.start`` always counts rounds from 1. Wrapping the run's strategy, this
    strategy's ``start(grid, checkpoint arrays, num_rounds=total - offset, ...)`` hands the
    inner strategy round ``r + offset`` for the loop's round ``r``, so round numbers in
    ``metrics.jsonl``, the node-sampling seeds ``[seed, round]``, ``server-round`` in every
    message and the privacy counts continue where the checkpoint stopped. Before each
    round's messages go out it appends the round to ``checkpoint-release.json`` (see the module docstring).
    With ``offset=0`` it is a transparent wrapper.

    Parameters
    ----------
    inner : TopicStrategy
        The run's strategy.
    offset : int
        The rounds already completed.
    directory : str or Path, optional
        Where ``checkpoint-release.json`` goes (None: not written).
    """

    def __init__(self, inner: "TopicStrategy", offset: int = 0,
                 directory: str | os.PathLike[str] | None = None) -> None:
        self.inner = inner
        self.offset = int(offset)
        self.directory = None if directory is None else Path(directory)

    def summary(self) -> None:  # noqa: D102
        self.inner.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                        ) -> Iterable[Message]:
        """The inner strategy's messages for round ``server_round + offset``, recorded as released."""
        messages = list(self.inner.configure_train(server_round + self.offset, arrays, config, grid))
        if self.directory is not None and messages:
            extra = getattr(self.inner, "release_details", None)
            write_release(self.directory, server_round + self.offset, [m.metadata.dst_node_id for m in messages],
                          extra() if extra is not None else None)
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:  # noqa: D102
        return self.inner.aggregate_train(server_round + self.offset, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                           ) -> Iterable[Message]:  # noqa: D102
        return self.inner.configure_evaluate(server_round + self.offset, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:  # noqa: D102
        return self.inner.aggregate_evaluate(server_round + self.offset, replies)

    def evaluate_fn(self, fn: Callable[[int, ArrayRecord], MetricRecord | None]
                    ) -> Callable[[int, ArrayRecord], MetricRecord | None]:
        """``fn`` called with the inner round numbers (the loop's round 0, the starting model, is not passed on)."""
        def shifted(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            return None if server_round == 0 else fn(server_round + self.offset, arrays)

        return shifted


def array_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord of numpy arrays (the checkpoint's global arrays)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


# ---------------------------------------------------------------------------------------------- carried counts
@dataclass
class CarriedCounts:
    """Global counts carried over a resume whose parties restarted without their state (``lda``, ``fedlda``).

    The checkpointed counts hold every party's tokens, but a party that lost its
    ``context.state`` enters its tokens again. Until they have re-entered, the model the
    parties are sent is ``own + floor(carried * remaining)``, ``own`` the counts entered
    since the resume and ``remaining = 1 - entered / total`` the share of the carried
    tokens not re-entered yet; once every token is back, the carried counts are gone and
    no token is counted twice.

    Parameters
    ----------
    carried : np.ndarray
        The counts at the resume (every party's old tokens).
    total : int
        Tokens in them.
    entered : int
        Tokens re-entered since.
    """

    carried: np.ndarray
    total: int
    entered: int = 0

    @property
    def remaining(self) -> float:
        """The share of the carried tokens not re-entered yet, in [0, 1]."""
        return 0.0 if self.total <= 0 else min(1.0, max(0.0, 1.0 - self.entered / self.total))

    def mix(self, own: np.ndarray) -> np.ndarray:
        """``own + floor(carried * remaining)`` (``own`` once nothing remains)."""
        if self.remaining <= 0:
            return own.copy()
        return own + np.floor(np.maximum(self.carried, 0) * self.remaining).astype(own.dtype)

    def state(self, prefix: str) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Arrays and numbers for a checkpoint."""
        return {f"{prefix}carried": self.carried}, {f"{prefix}total": int(self.total),
                                                    f"{prefix}entered": int(self.entered)}

    @classmethod
    def from_state(cls, prefix: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]
                   ) -> "CarriedCounts | None":
        """The carried counts of a checkpoint (None when it has none)."""
        if f"{prefix}carried" not in arrays:
            return None
        return cls(np.array(arrays[f"{prefix}carried"]), int(meta[f"{prefix}total"]), int(meta[f"{prefix}entered"]))
