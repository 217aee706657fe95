"""The environment of the Flower processes our launchers start (``launch.flwr_env``)."""

from __future__ import annotations

import subprocess
import sys

from flower_topics.simulations.local_superlink import MALLOC_MMAP_THRESHOLD, flwr_env, with_num_supernodes


def _child_sees(env: dict[str, str], name: str) -> str:
    return subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({name!r}, ''))"], env=env,
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def test_flower_processes_get_a_fixed_mmap_threshold_unless_the_user_sets_one(tmp_path, monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    env = flwr_env(tmp_path)
    assert _child_sees(env, "MALLOC_MMAP_THRESHOLD_") == str(MALLOC_MMAP_THRESHOLD) == "4194304"
    assert env["FLWR_HOME"] == str(tmp_path) and env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1"
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")  # a user's own tuning wins
    assert _child_sees(flwr_env(tmp_path), "MALLOC_MMAP_THRESHOLD_") == "65536"


def test_a_flwr_run_command_gets_the_number_of_supernodes_as_its_federation_config():
    assert with_num_supernodes(["/venv/bin/flwr", "run", ".", "--stream"], 5) == [
        "/venv/bin/flwr", "run", ".", "--stream", "--federation-config", "num-supernodes=5"]
    own = ["flwr", "run", ".", "--federation-config", "backend.client-resources.num-cpus=1 num-supernodes=3"]
    assert with_num_supernodes(own, 5) == own  # the user's own value wins
    other = ["flwr", "run", ".", "--federation-config=verbose=true"]
    assert with_num_supernodes(other, 2) == [*other, "--federation-config", "num-supernodes=2"]
    assert with_num_supernodes(["flwr", "ls"], 5) is None  # not a run: the SuperLink's config is set instead
