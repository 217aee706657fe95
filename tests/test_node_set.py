"""Node config in a simulation: ``simulate --node-set`` gives every party node-config keys ({partition}: one file per
party), on the in-process engine and, as SuperNodes of a local deployment, on the flower engine; a node-config key
given as a run-config key is refused in one line that says so."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from flower_topics.cli.main import main
from flower_topics.errors import UserInputError
from flower_topics.privacy.ledger import read_ledger
from flower_topics.simulations.node_configs import node_config_text, party_node_configs
from tests.test_method_contract import NEEDS, TINY


def _sets(options: dict) -> list[str]:
    return [arg for key, value in options.items()
            for arg in ("--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}")]


TINY_SETS = _sets({k: v for k, v in TINY.items() if k not in ("num-topics", "num-rounds", "dataset")})


def test_each_party_gets_the_keys_with_its_partition_id_in_place_of_the_placeholder():
    nodes = party_node_configs({"privacy-ledger": "/srv/ledger-{partition}.json", "lifetime-epsilon": "8",
                                "min-party-df": "3", "lowercase": "false"}, 3)
    assert nodes == [{"privacy-ledger": f"/srv/ledger-{i}.json", "lifetime-epsilon": 8.0, "min-party-df": 3,
                      "lowercase": False, "partition-id": i, "num-partitions": 3} for i in range(3)]
    # what a SuperNode's --node-config reads back with Flower's own parser is the same config
    text = node_config_text({**nodes[1], "theta-out": "/srv/a b/theta.csv"})
    assert parse_config_args([text]) == {**nodes[1], "theta-out": "/srv/a b/theta.csv"}
    assert party_node_configs({"privacy-ledger": "ledger.json"}, 1)[0]["privacy-ledger"] == "ledger.json"


@pytest.mark.parametrize("assignments, message", [
    ({"privacy-ledger": "ledger.json"}, "--node-set privacy-ledger names a file of each party's own: put {partition} "
                                        "in it, e.g. privacy-ledger=runs/privacy-ledger-{partition}.json"),
    ({"theta-out": "theta.csv"}, "--node-set theta-out names a file of each party's own"),
    ({"partition-id": "1"}, "--node-set partition-id: simulate gives each party its share's partition-id"),
    ({"lifetime-epsilom": "8"}, "--node-set 'lifetime-epsilom': not a node-config key (did you mean lifetime-epsilon"),
    ({"lifetime-epsilon": "-1"}, "lifetime-epsilon"),
])
def test_a_bad_node_set_is_one_line(assignments, message):
    with pytest.raises(UserInputError, match=None) as refused:
        party_node_configs(assignments, 2)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_node_config_key_given_as_run_config_is_refused_saying_so(tmp_path, capsys):
    assert main(["simulate", "--method", "dplda", "--clients", "2", "--topics", "4", "--rounds", "2",
                 "--out", str(tmp_path / "run"), "--set", "lifetime-epsilon=8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lifetime-epsilon is a node-config key" in err
    assert "--node-set lifetime-epsilon=" in err and "did you mean" not in err


def test_every_simulated_party_keeps_its_own_ledger(tmp_path, capsys):
    config = {**NEEDS["dplda"], "num-rounds": 2}
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    assert main(["simulate", "--method", "dplda", "--engine", "inprocess", "--clients", "2", "--topics", "4",
                 "--rounds", "2", "--dataset", "synthetic", "--out", str(tmp_path / "run"), *TINY_SETS,
                 *_sets({k: v for k, v in config.items() if k != "num-rounds"}),
                 "--node-set", f"privacy-ledger={ledgers}/party-{{partition}}.json",
                 "--node-set", "lifetime-epsilon=80"]) == 0
    books = sorted(p.name for p in ledgers.glob("*.json"))
    assert books == ["party-0.json", "party-1.json"]
    for book in books:  # written by that party alone: its two rounds' releases (the vocabulary is public)
        entries = read_ledger(ledgers / book).entries
        assert [e.method for e in entries] == ["dplda", "dplda"] and len({e.run for e in entries}) == 1


@pytest.mark.timeout(420)
def test_the_flower_engine_runs_parties_with_node_config_as_supernodes(tmp_path, capsys):
    theta = tmp_path / "theta"
    theta.mkdir()
    assert main(["simulate", "--method", "lda", "--clients", "2", "--topics", "4", "--rounds", "1", "--dataset",
                 "synthetic", "--out", str(tmp_path / "run"), *TINY_SETS,
                 "--node-set", f"theta-out={theta}/party-{{partition}}.csv"]) == 0
    rows = {}
    for party in (0, 1):
        with open(theta / f"party-{party}.csv", encoding="utf-8", newline="") as fh:
            rows[party] = list(csv.DictReader(fh))
    # TINY: 2 x 20 documents, 10% held out, dealt to the parties: each party wrote its own share's topics
    assert sum(len(r) for r in rows.values()) == 40 and all(rows.values())
    assert Path(tmp_path / "run" / "model.npz").is_file()


def test_a_ledger_no_party_could_write_is_refused_once_before_anything_starts(tmp_path, capsys):
    assert main(["simulate", "--method", "dplda", "--engine", "inprocess", "--clients", "2", "--topics", "4",
                 "--rounds", "2", "--dataset", "synthetic", "--out", str(tmp_path / "run"), *TINY_SETS,
                 *_sets(NEEDS["dplda"]), "--node-set", f"privacy-ledger={tmp_path}/missing/party-{{partition}}.json",
                 "--node-set", "lifetime-epsilon=80"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"its folder {tmp_path}/missing does not exist" in err
    assert not (tmp_path / "run").exists()


def test_flower_topics_superlink_checks_its_node_set_before_starting_anything(capsys):
    from flower_topics.cli.superlink import main as superlink

    assert superlink(["--supernodes", "2", "--node-set", "theta-out=theta.csv", "flwr", "run", "."]) == 2
    assert "put {partition} in it" in capsys.readouterr().err
    assert superlink(["--supernodes", "2", "--node-set", "dataset=notes.jsonl", "flwr", "run", "."]) == 2
    assert "flower-topics simulate --node-set dataset=" in capsys.readouterr().err


@pytest.mark.parametrize("run, sets, told", [({"secure-aggregation": True, "secure-aggregation-tolerance": 0}, {}, 0),
                                             ({"secure-aggregation": True}, {}, None),
                                             ({"secure-aggregation": True}, {"secure-tolerance": "0"}, 0)])
def test_a_simulation_tells_each_party_the_runs_tolerance(tmp_path, monkeypatch, run, sets, told):
    """Each simulated party's own secure-tolerance is the run's (or its --node-set); on the flower engine a secure run
    whose T is not the node option's default therefore runs its parties as SuperNodes, which have node config."""
    from flower_topics.simulations import runner

    seen = []

    def federated(config, num_clients, out_dir, shares, nodes=None):
        seen.append(nodes)
        raise UserInputError("stopped before Flower")

    monkeypatch.setattr(runner, "_federated", federated)
    with pytest.raises(UserInputError, match="stopped before Flower"):
        runner.simulate({**TINY, "method": "lda", **run}, mode="federated", num_clients=2, out_dir=tmp_path / "out",
                        engine="flower", node_config=sets)
    (nodes,) = seen
    assert (None if nodes is None else [node["secure-tolerance"] for node in nodes]) == \
        (None if told is None else [told, told])


def test_a_partys_own_secure_tolerance_outranks_the_runs():
    assert [n["secure-tolerance"] for n in party_node_configs({}, 2, {"secure-aggregation-tolerance": 2})] == [2, 2]
    assert party_node_configs({"secure-tolerance": "3"}, 1, {"secure-aggregation-tolerance": 2})[0][
        "secure-tolerance"] == 3
    assert "secure-tolerance" not in party_node_configs({}, 1)[0]  # no run config: the party's default applies
