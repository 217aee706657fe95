"""A party's state on its own disk, so that a SuperNode that crashed rejoins its run.

Flower keeps a node's ``context.state`` in the SuperNode's memory: a SuperNode that is
killed and started again comes back with an empty state, without the agreed vocabulary
and without what its method keeps between rounds (``lda``'s topic assignments, for
instance), so it cannot take part again without counting its tokens twice. With
``state-dir`` in its node config a party writes its state there after every message it
answers, and a restarted SuperNode reads it back at its first message of the same run:

    flower-supernode ... --node-config "dataset='/srv/notes.jsonl' state-dir='/srv/flower-topics-state'"

The file is ``<state-dir>/run-<run id>-node-<node id>.npz``, written atomically (a
temporary file, then a rename: a crash mid-write leaves the previous file whole) and
readable by its owner only. It never leaves the party and holds what ``context.state``
holds: the agreed vocabulary, the run's secret nonce, what the party's own vocabulary
release spent, and its method's state (per-token topic assignments for ``lda``). The
secure sum's per-round keys are left out: a round a party died in cannot be finished
anyway.

The restored state continues the run exactly only if the server knows the party by the
same node id: the node id is a SuperNode's identity only with SuperNode authentication
(``flower-superlink --enable-supernode-auth``, ``flwr supernode register``; a
self-registered SuperNode gets a new id at every start). A state saved under another
node id is therefore not restored: the party refuses to take part (its earlier tokens
are in the global model under its old id, and entering them again would count them
twice).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context

from flower_topics.data.node_data import node_options
from flower_topics.errors import UserInputError
from flower_topics.secure_sum.party import STATE as SECURE_SUM_STATE

#: Records never written: the secure sum's keys of one round (:mod:`flower_topics.secure_sum.party`).
TRANSIENT = (SECURE_SUM_STATE,)
_CONFIG = "__config__"
_NODE = "__node__"


def state_path(context: Context) -> Path | None:
    """Where this party keeps its state for the run, or None without ``state-dir``."""
    directory = str(node_options(context.node_config).get("state-dir", "")).strip()
    if not directory:
        return None
    return Path(directory).expanduser() / f"run-{context.run_id}-node-{context.node_id}.npz"


def _saved_elsewhere(context: Context, directory: Path) -> Path | None:
    """A state of this run saved under another node id, if there is one."""
    others = sorted(p for p in directory.glob(f"run-{context.run_id}-node-*.npz")
                    if p.name != f"run-{context.run_id}-node-{context.node_id}.npz")
    return others[0] if others else None


def restore(context: Context) -> bool:
    """Fill an empty ``context.state`` from this party's file; True when something was restored.

    Raises
    ------
    UserInputError
        When the file cannot be read, or this run's state was saved under another node id
        (a restart without a stable identity: see the module docstring).
    """
    path = state_path(context)
    if path is None or len(context.state) > 0:
        return False
    if not path.exists():
        other = _saved_elsewhere(context, path.parent) if path.parent.is_dir() else None
        if other is not None:
            raise UserInputError(
                f"state-dir holds this run's state under another node id ({other.name}): this SuperNode restarted "
                "with a new identity, and its earlier tokens are in the global model under the old one; it cannot "
                "rejoin without counting them twice (start SuperNodes with SuperNode authentication, "
                "docs/real-hosts.md, to keep their node ids)")
        return False
    try:
        with np.load(path, allow_pickle=False) as saved:
            config = json.loads(str(saved[_CONFIG]))
            arrays: dict[str, dict[str, np.ndarray]] = {}
            for key in saved.files:
                if key in (_CONFIG, _NODE):
                    continue
                record, _, name = key.partition("/")
                arrays.setdefault(record, {})[name] = saved[key]
            node_id = int(saved[_NODE])
    except (OSError, ValueError, KeyError) as exc:
        raise UserInputError(f"state-dir: cannot read {path}: {exc}") from exc
    if node_id != context.node_id:
        raise UserInputError(f"state-dir: {path} belongs to node {node_id}, not {context.node_id}")
    for name, values in config.items():
        context.state[name] = ConfigRecord(values)
    for name, values in arrays.items():
        context.state[name] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in values.items()})
    return True


def persist(context: Context) -> Path | None:
    """Write ``context.state`` (less :data:`TRANSIENT`) to this party's file, atomically; its path, or None."""
    path = state_path(context)
    if path is None:
        return None
    config: dict[str, dict[str, Any]] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, record in context.state.items():
        if name in TRANSIENT:
            continue
        if isinstance(record, ConfigRecord):
            config[name] = dict(record)
        elif isinstance(record, ArrayRecord):
            arrays.update({f"{name}/{key}": array.numpy() for key, array in record.items()})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            np.savez(handle, **{_CONFIG: np.array(json.dumps(config)), _NODE: np.array(context.node_id)}, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        raise UserInputError(f"state-dir: cannot write {path}: {exc}") from exc
    return path
