"""Real end-to-end runs through Flower's engines.

- simulation engine, from Python (``flwr.simulation.run_simulation`` via the runner);
- the README launcher: a simulation SuperLink, ``flwr run .``, the exit status from the
  run's final status.

The deployment engine with TLS, SuperNode authentication and each party's own corpus is
tests/test_deployment_tls.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from flower_topics.simulations.processes import process_tree
from flower_topics.simulations.local_superlink import with_superlink
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics

SMALL = {
    "dataset": "synthetic",
    "synthetic-nodes": 2,
    "synthetic-topics": 4,
    "synthetic-shared-topics": 2,
    "synthetic-vocab-size": 60,
    "synthetic-docs-per-node": 30,
    "synthetic-doc-min-length": 20,
    "synthetic-doc-max-length": 30,
    "num-topics": 4,
}


def _check_outputs(out: Path, rounds: int) -> None:
    model = load_model(out / "model.npz")
    assert model.topic_word.shape == (4, 60)
    np.testing.assert_allclose(model.topic_word.sum(axis=1), 1.0)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["round"] for r in rows] == list(range(1, rounds + 1))
    assert all(r["bytes_received"] > 0 for r in rows) and rows[-1]["perplexity"] > 0
    assert (out / "topics.txt").read_text().count("topic") == 4
    assert (out / "perplexity.png").exists()
    assert json.loads(json.dumps(model.metadata))["rounds"] == rounds


@pytest.mark.timeout(600)
def test_readme_launcher_reports_success_and_failure(tmp_path, monkeypatch, capsys, app_dir):
    """`flower-topics-superlink flwr run .` exits 0 on a completed run, 1 on a failed one, and 2 on a run
    config the ServerApp would reject (refused before anything is submitted)."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    flwr = str(Path(sys.executable).with_name("flwr"))
    config = " ".join(f"{k}={v!r}" for k, v in {**SMALL, "num-rounds": 2}.items())  # TOML values: strings quoted
    ok = with_superlink([flwr, "run", ".", "--run-config", f"{config} output-dir='{tmp_path / 'ok'}'"],
                        num_supernodes=2, app_dir=app_dir, timeout=240)
    assert ok == 0
    _check_outputs(tmp_path / "ok", 2)
    bad = with_superlink([flwr, "run", ".", "--run-config", f"num-topics=0 output-dir='{tmp_path / 'bad'}'"],
                         num_supernodes=2, app_dir=app_dir, timeout=240)
    assert bad == 2
    assert "'num-topics' = 0 must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    # a valid run config whose run fails in the ServerApp (a vocabulary file of one word: a topic model needs
    # two): `flwr run` exits 0, the launcher 1
    one_word = tmp_path / "one-word-vocabulary.txt"
    one_word.write_text("engine\n", encoding="utf-8")
    failed = with_superlink([flwr, "run", ".", "--run-config",
                             f"{config} vocabulary='{one_word}' output-dir='{tmp_path / 'failed'}'"],
                            num_supernodes=2, app_dir=app_dir, timeout=240)
    assert failed == 1
    err = capsys.readouterr().err
    assert "FAILED (finished:failed" in err
    # the private SuperLink is gone: the line names the log it kept, not `flwr log` (which could not reach it)
    logs = list((tmp_path / "flwr-home" / "logs").glob("run-*.log"))
    assert len(logs) == 1 and f"its full log is kept in {logs[0]}" in err and "flwr log" not in err
    assert "1 word(s) pass the vocabulary filters" in logs[0].read_text(encoding="utf-8")
    assert not (tmp_path / "failed" / "model.npz").exists()


@pytest.mark.timeout(600)
def test_simulation_engine_federated_run(tmp_path):
    from flower_topics.simulations import simulate

    out = tmp_path / "sim"
    config = {**SMALL, "num-rounds": 3, "lda.local-sweeps": 2}
    rows = simulate(config, mode="federated", num_clients=2, out_dir=out)
    assert rows[0]["mode"] == "federated" and rows[0]["perplexity"] > 0
    _check_outputs(out, 3)
    assert (out / "results.md").exists() and (out / "results.csv").exists()
    # the same federation with every SuperNode's ClientApp in this process: the same model, count for count
    simulate(config, mode="federated", num_clients=2, out_dir=tmp_path / "inprocess", engine="inprocess")
    _check_outputs(tmp_path / "inprocess", 3)
    with np.load(out / "state.npz") as flower, np.load(tmp_path / "inprocess" / "state.npz") as here:
        assert flower.files == here.files
        for key in flower.files:
            np.testing.assert_array_equal(flower[key], here[key], err_msg=key)
    flower_rows, here_rows = read_metrics(out / "metrics.jsonl"), read_metrics(tmp_path / "inprocess" / "metrics.jsonl")
    assert [r["bytes_sent"] for r in flower_rows] == [r["bytes_sent"] for r in here_rows]
    assert flower_rows[-1]["perplexity"] == pytest.approx(here_rows[-1]["perplexity"], rel=1e-9)



def listening_addresses() -> set[str]:
    """Local addresses of the TCP sockets in LISTEN state held by this process and its descendants."""
    import socket
    import struct

    pids = process_tree(os.getpid())
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*") if Path(f"/proc/{pid}/fd").exists() else []:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    addresses = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] != "0A" or parts[9] not in inodes:  # 0A = LISTEN
                continue
            raw = bytes.fromhex(parts[1].split(":")[0])
            words = struct.unpack("<" + "I" * (len(raw) // 4), raw)
            addresses.add(socket.inet_ntop(family, struct.pack(">" + "I" * len(words), *words)))
    return addresses

