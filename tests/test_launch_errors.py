"""The ``flwr run`` path names a bad run config in one line, before anything starts.

Through the real launcher (``flower-topics-superlink ... flwr run .``, as the README's
Quickstart and docs/real-hosts.md run it), in a subprocess: an unknown key, a value out
of range, a missing dataset and a malformed ``--run-config`` each give exactly one line,
``flower-topics: error: ...``, and exit status 2, without starting a SuperLink (Flower
alone answers ``[code: 15] Invalid run configuration.`` or a 30-line traceback). With
``--connection`` (an existing SuperLink, real hosts) the same check runs, and the run
config's ``dataset`` is not checked here: each party names its own file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = str(Path(sys.executable).with_name("flower-topics-superlink"))


def _launch(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    """Run the launcher from the project directory; its exit status and its non-empty output lines."""
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home"), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    out = subprocess.run([LAUNCHER, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return out.returncode, lines


def _one_error(tmp_path: Path, run_config: str, *extra: str) -> str:
    code, lines = _launch(tmp_path, "--supernodes", "2", *extra, "flwr", "run", ".", *extra[1:2],
                          "--stream", "--run-config", run_config)
    assert code == 2 and len(lines) == 1, (code, lines)
    assert lines[0].startswith("flower-topics: error: "), lines
    assert not (tmp_path / "flwr-home").exists()  # no SuperLink was started, nothing submitted
    return lines[0]


@pytest.mark.timeout(120)
def test_unknown_key_is_named_with_its_suggestion(tmp_path):
    line = _one_error(tmp_path, "method='fedlda' epsilon=5")
    assert "unknown run-config key(s) epsilon (did you mean fedlda.epsilon" in line


@pytest.mark.timeout(120)
def test_value_out_of_range_names_the_key_and_its_range(tmp_path):
    line = _one_error(tmp_path, "num-topics=0 num-rounds=2")
    assert "'num-topics' = 0 must be >= 1" in line


@pytest.mark.timeout(120)
def test_missing_dataset_is_one_line(tmp_path):
    missing = tmp_path / "no-such-corpus.jsonl"
    line = _one_error(tmp_path, f"dataset='{missing}'")
    assert f"dataset '{missing}' does not exist" in line


@pytest.mark.timeout(120)
def test_malformed_run_config_is_one_line(tmp_path):
    line = _one_error(tmp_path, "dataset=notes.jsonl")  # an unquoted string is not TOML
    assert "--run-config" in line and "quoted" in line


@pytest.mark.timeout(120)
def test_existing_connection_checks_the_run_config_and_not_the_parties_files(tmp_path):
    line = _one_error(tmp_path, "method='pctd' sigma=0.25", "--connection", "topics")
    assert "sigma (did you mean pctd.sigma" in line
    # a deployment's run config may name a corpus the server lacks: the check passes; then the
    # connection is looked up before anything is submitted (none here): one line, status 1
    code, lines = _launch(tmp_path, "--connection", "topics", "flwr", "run", ".", "topics",
                          "--run-config", "dataset='/nonexistent/x.jsonl' num-rounds=2")
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("flower-topics: error: cannot list the runs of connection 'topics'"), lines
    assert "SuperLink connection 'topics' not found" in lines[0] and "does not exist" not in lines[0]


@pytest.mark.timeout(240)
def test_simulate_names_a_share_it_cannot_make_in_one_line(tmp_path):
    """`flower-topics simulate` on Flower's engine prepares the shares while Flower starts; a share that cannot be
    made (here: a label partition of a corpus without labels) fails the parties too, and the user sees one line."""
    corpus = tmp_path / "no-labels.jsonl"
    corpus.write_text("".join(f'{{"text": "apples pears plums number {i} of the notes"}}\n' for i in range(40)),
                      encoding="utf-8")
    cli = str(Path(sys.executable).with_name("flower-topics"))
    env = {**os.environ, "FLOWER_TOPICS_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([cli, "simulate", "--method", "lda", "--topics", "2", "--clients", "2", "--rounds", "1",
                          "--partition", "label", "--dataset", str(corpus), "--out", str(tmp_path / "out")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, (out.returncode, lines)
    assert lines[0].startswith("flower-topics: error: partition scheme 'label' needs document labels"), lines
