"""What every method's messages share: record names, message types, reply validation.

A training message from a strategy to a party is ``train.<method>`` (Flower's named
handlers) with two records: :data:`ARRAYS` (the global model as the method sends it)
and :data:`CONFIG` (the method's settings, the round, and the vocabulary's fingerprint).
A party's reply has exactly three records:

- :data:`UPDATE`, an ArrayRecord with the method's arrays (:class:`ArraySpec` each);
- :data:`METRICS`, a MetricRecord with the method's named integers or floats;
- :data:`SENDER`, a ConfigRecord naming the method that produced the reply.

Where the strategy carries an evaluation with a training message, both the message and its
reply also have records named :data:`CARRIED` + an ``evaluate`` message's or reply's record
name (:mod:`flower_topics.evaluation.federated`); the strategy separates them before it
validates the rest.

:func:`validate_reply` checks a reply against a method's :class:`ReplySpec` and raises
:class:`ReplyError` with the reason; nothing that fails reaches a global model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MessageType, MetricRecord, RecordDict

ARRAYS = "arrays"
CONFIG = "config"
UPDATE = "update"
METRICS = "metrics"
SENDER = "sender"

#: The prefix of the records of an evaluation carried in a training message and its reply
#: (:func:`flower_topics.evaluation.federated.carry_request`).
CARRIED = "evaluate."

#: Error code of a party's reply that says it cannot take part with this input (its data,
#: the vocabulary, the settings); the strategy stops sampling that node.
BAD_INPUT = 4000


class ReplyError(ValueError):
    """A reply that does not follow its method's protocol; the message says why."""


def message_type(method: str) -> str:
    """The Flower message type of a training round of ``method``: ``train.<method>``."""
    return f"{MessageType.TRAIN}.{method}"


def vocabulary_fingerprint(vocabulary: Sequence[str]) -> str:
    """A short hash of the words in column order: the strategy and each party must agree on it."""
    digest = hashlib.sha256("\n".join(vocabulary).encode("utf-8")).hexdigest()
    return f"{len(vocabulary)}:{digest[:16]}"


def payload_bytes(content: RecordDict) -> int:
    """Serialized size in bytes of a message's records (arrays, configs, metrics)."""
    total = 0
    for record in content.values():
        total += record.count_bytes() if isinstance(record, ArrayRecord) else len(record.deflate())
    return total


#: The dtype kinds an :class:`ArraySpec` names.
ARRAY_KINDS = ("integer", "floating")


@dataclass(frozen=True)
class ArraySpec:
    """The dtype, shape and value range of one array in a reply.

    Parameters
    ----------
    kind : {"integer", "floating"}
        numpy dtype kind the array must have; floating arrays must be finite.
    shape : tuple
        Expected shape; ``None`` in a position accepts any length there.
    low, high : float, optional
        Every entry must satisfy ``low <= x < high``.
    columns : tuple of (low, high), optional
        For a 2-D array, bounds ``low <= x < high`` per column (e.g. word ids < V, topics < K).
    what : str
        What the entries are, for error messages.
    """

    kind: Literal["integer", "floating"]
    shape: tuple[int | None, ...]
    low: float | None = None
    high: float | None = None
    columns: tuple[tuple[float, float], ...] | None = None
    what: str = "array"

    def __post_init__(self) -> None:
        if self.kind not in ARRAY_KINDS:
            raise ValueError(f"ArraySpec kind must be one of {', '.join(ARRAY_KINDS)}, not {self.kind!r}")

    def check(self, key: str, array: np.ndarray) -> None:
        """Raise :class:`ReplyError` unless ``array`` meets this spec."""
        if not np.issubdtype(array.dtype, np.integer if self.kind == "integer" else np.floating):
            raise ReplyError(f"'{key}' has dtype {array.dtype}, expected {self.kind}")
        if array.ndim != len(self.shape) or any(e is not None and e != a for e, a in zip(self.shape, array.shape)):
            expected = "(" + ", ".join("n" if e is None else str(e) for e in self.shape) + ")"
            raise ReplyError(f"'{key}' has shape {array.shape}, expected {expected}")
        if self.kind == "floating" and not np.all(np.isfinite(array)):
            raise ReplyError(f"'{key}' has NaN or infinite entries")
        if array.size == 0:
            return
        if self.low is not None and array.min() < self.low:
            raise ReplyError(f"'{key}' has an entry {array.min()} below {self.low} ({self.what})")
        if self.high is not None and array.max() >= self.high:
            raise ReplyError(f"'{key}' has an entry {array.max()} >= {self.high} ({self.what})")
        for j, (low, high) in enumerate(self.columns or ()):
            col = array[:, j]
            if col.min() < low or col.max() >= high:
                raise ReplyError(f"'{key}' column {j} has values outside [{low}, {high}) ({self.what})")


@dataclass(frozen=True)
class ReplySpec:
    """Everything a valid reply of one method in one round must be.

    Parameters
    ----------
    method : str
        The method whose client must have produced the reply.
    arrays : Mapping[str, ArraySpec]
        The arrays of the :data:`UPDATE` record, exactly these keys.
    metrics : tuple of str
        The entries of the :data:`METRICS` record, exactly these keys.
    max_bytes : int
        Largest payload accepted (all records together).
    config : tuple of str
        The entries of a :data:`CONFIG` ConfigRecord the reply carries (none: no such record).
    """

    method: str
    arrays: Mapping[str, ArraySpec]
    metrics: tuple[str, ...] = ()
    max_bytes: int = 1 << 30
    config: tuple[str, ...] = ()


def validate_reply(content: RecordDict, spec: ReplySpec) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The arrays and metrics of a reply that follows ``spec``.

    Parameters
    ----------
    content : RecordDict
        The reply's content.
    spec : ReplySpec
        What this round's replies must be.

    Returns
    -------
    (dict, dict)
        ``{key: array}`` of the update and ``{key: value}`` of the metrics.

    Raises
    ------
    ReplyError
        Naming the first problem: an unexpected or missing record, a reply of another
        method, an oversized payload, a missing or extra key, a wrong dtype or shape,
        a NaN or infinite value, or a value out of range.
    """
    records, expected = set(content.keys()), {UPDATE, METRICS, SENDER} | ({CONFIG} if spec.config else set())
    if records != expected:
        raise ReplyError(f"records missing {sorted(expected - records)} / unexpected {sorted(records - expected)}")
    sender = content[SENDER]
    if not isinstance(sender, ConfigRecord) or sender.get("method") != spec.method:
        produced = sender.get("method") if isinstance(sender, ConfigRecord) else None
        raise ReplyError(f"reply produced by method {produced!r}, this round is {spec.method!r}")
    size = payload_bytes(content)
    if size > spec.max_bytes:
        raise ReplyError(f"payload of {size} bytes exceeds the {spec.max_bytes} bytes {spec.method} allows")
    update, metrics = content[UPDATE], content[METRICS]
    if not isinstance(update, ArrayRecord) or not isinstance(metrics, MetricRecord):
        raise ReplyError(f"'{UPDATE}' must be an ArrayRecord and '{METRICS}' a MetricRecord")
    _same_keys(UPDATE, set(update.keys()), set(spec.arrays))
    _same_keys(METRICS, set(metrics.keys()), set(spec.metrics))
    if spec.config:
        if not isinstance(content[CONFIG], ConfigRecord):
            raise ReplyError(f"'{CONFIG}' must be a ConfigRecord")
        _same_keys(CONFIG, set(content[CONFIG].keys()), set(spec.config))
    arrays = {}
    for key, array_spec in spec.arrays.items():
        array = update[key].numpy()
        array_spec.check(key, array)
        arrays[key] = array
    values = {}
    for key in spec.metrics:
        value = metrics[key]
        if not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise ReplyError(f"metric '{key}' = {value!r} is not a finite non-negative number")
        values[key] = value
    return arrays, values


def _same_keys(record: str, got: set[str], expected: set[str]) -> None:
    if got != expected:
        raise ReplyError(f"'{record}' keys missing {sorted(expected - got)} / unexpected {sorted(got - expected)}")
