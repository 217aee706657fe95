"""Node config for a simulation's parties: ``flower-topics simulate --node-set KEY=VALUE``.

A deployed party sets its own options on its SuperNode (``flower-supernode --node-config``): its privacy ledger
and lifetime cap, where it writes its documents' topics, its corpus cache... In a simulation every party gets
the same ``--node-set`` keys, beside the ``partition-id`` and ``num-partitions`` of its share. A value's
``{partition}`` becomes the party's partition id, so that a path names one file per party
(``privacy-ledger=runs/ledger-{partition}.json``); a key whose file is a party's own (:data:`PER_PARTY`) must
have it when there are two parties or more, since two parties writing one file would corrupt it.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Mapping

from flower_topics.errors import UserInputError
from flower_topics.methods import all_node_options
from flower_topics.options import coerce, shown
from flower_topics.run.config import OPTIONS

TOLERANCE = "secure-aggregation-tolerance"

#: What a value's ``{partition}`` becomes: the party's partition id.
PLACEHOLDER = "{partition}"
#: Node-config keys naming a file or folder that is the party's own (written by it alone).
PER_PARTY = ("privacy-ledger", "theta-out", "prevalence-out", "state-dir")
#: Node-config keys a simulation sets itself.
SIMULATION_KEYS = ("partition-id", "num-partitions")


def told_tolerance(node_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    """A simulated party's node config with the run config's ``secure-aggregation-tolerance`` as its own
    ``secure-tolerance``, unless it sets one: the simulation's operator plays every party and tells each the
    federation's tolerance out of band, as a deployed party's operator sets it on its SuperNode."""
    tolerance = run_config.get(TOLERANCE, OPTIONS[TOLERANCE].default)
    return {"secure-tolerance": coerce(TOLERANCE, tolerance, OPTIONS[TOLERANCE], source="run-config"),
            **node_config}


def party_node_configs(assignments: Mapping[str, str], num_parties: int,
                       run_config: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Each simulated party's node config: its share's ``partition-id`` and ``num-partitions``, and ``assignments``
    (``--node-set``), validated, with ``{partition}`` replaced by its partition id.

    Parameters
    ----------
    assignments : Mapping
        Node-config keys and their values (strings, as on the command line, or typed).
    num_parties : int
        How many parties (partitions).
    run_config : Mapping, optional
        The run's config: each party's ``secure-tolerance`` is then its tolerance, unless assigned
        (:func:`told_tolerance`).

    Raises
    ------
    UserInputError
        One line: a key that is not a node-config key, one the simulation sets, a bad value, or a per-party path
        without ``{partition}`` shared by two parties or more.
    """
    table = all_node_options()
    for key, value in assignments.items():
        if key in SIMULATION_KEYS:
            raise UserInputError(f"--node-set {key}: simulate gives each party its share's partition-id and "
                                 "num-partitions itself (--clients)")
        if key not in table:
            close = difflib.get_close_matches(str(key), list(table), n=2)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise UserInputError(f"--node-set {shown(key, 60)}: not a node-config key{hint}; docs/run-config.md "
                                 "lists them (Node config)")
        if key in PER_PARTY and num_parties > 1 and PLACEHOLDER not in str(value):
            raise UserInputError(f"--node-set {key} names a file of each party's own: put {PLACEHOLDER} in it, "
                                 f"e.g. {key}=runs/{key}-{PLACEHOLDER}{'.json' if key == 'privacy-ledger' else ''}")
    configs = []
    for partition in range(num_parties):
        node: dict[str, Any] = {}
        for key, value in assignments.items():
            if isinstance(value, str):
                value = value.replace(PLACEHOLDER, str(partition))
            node[key] = coerce(key, value, table[key], source="node-config")
        node = {**node, "partition-id": partition, "num-partitions": num_parties}
        configs.append(node if run_config is None else told_tolerance(node, run_config))
    return configs


def check_party_files(nodes: list[dict[str, Any]]) -> None:
    """Before a simulation starts: each party's ``privacy-ledger`` is one it can write and read, as the party checks
    at its first message (:func:`~flower_topics.privacy.ledger.check_writable`), said once here instead of once
    per party after the engine started.

    Raises
    ------
    UserInputError
        One line naming the ledger and what is wrong with it.
    """
    from pathlib import Path

    from flower_topics.privacy.ledger import check_writable

    for node in nodes:
        if str(node.get("privacy-ledger", "")).strip():
            check_writable(Path(str(node["privacy-ledger"])).expanduser())


def node_config_text(node_config: Mapping[str, Any]) -> str:
    """``flower-supernode --node-config``'s text of a node config: ``key=value`` pairs, strings quoted (TOML)."""
    def literal(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, (int, float)):
            return repr(value)
        return json.dumps(str(value))  # a TOML basic string

    return " ".join(f"{key}={literal(value)}" for key, value in node_config.items())


__all__ = ["PER_PARTY", "PLACEHOLDER", "check_party_files", "node_config_text", "party_node_configs",
           "told_tolerance"]
