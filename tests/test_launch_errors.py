"""The ``flwr run`` path names a bad run config in one line, before anything starts.

Through the real launcher (``flower-topics-superlink ... flwr run .``, as the README's
Quickstart and docs/real-hosts.md run it), in a subprocess: an unknown key, a value out
of range, a missing dataset or vocabulary file, a corpus the parties cannot read (random bytes, an empty file,
no text column), an output directory that already holds a run and a malformed
``--run-config`` each give exactly one line, ``flower-topics: error: ...``, and exit status
2, in seconds and without starting a SuperLink (Flower alone answers ``[code: 15] Invalid
run configuration.``, a 30-line traceback, or the parties' errors once per party after the
run started). With ``--connection`` (an existing SuperLink, real hosts) the same check
runs, and the run config's ``dataset`` is not checked here: each party names its own file.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = str(Path(sys.executable).with_name("flower-topics-superlink"))
#: An environment variable the commands a test starts get, naming its tmp_path: every process they start inherits it.
MARK = "FLOWER_TOPICS_TEST_DIR"


def _launch(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    """Run the launcher from the project directory; its exit status and its non-empty output lines."""
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home"), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           MARK: str(tmp_path)}
    out = subprocess.run([LAUNCHER, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return out.returncode, lines


def _one_error(tmp_path: Path, run_config: str, *extra: str) -> str:
    if "output-dir=" not in run_config:  # not the checkout's runs/latest, which may hold a run of its own
        run_config += f" output-dir='{tmp_path / 'out'}'"
    code, lines = _launch(tmp_path, "--supernodes", "2", *extra, "flwr", "run", ".", *extra[1:2],
                          "--stream", "--run-config", run_config)
    assert code == 2 and len(lines) == 1, (code, lines)
    assert lines[0].startswith("flower-topics: error: "), lines
    assert not (tmp_path / "flwr-home").exists()  # no SuperLink was started, nothing submitted
    assert not (tmp_path / "out").exists()
    return lines[0]


def _processes_of(tmp_path: Path) -> list[int]:
    """The processes still running that a command of this test started (their environment holds its :data:`MARK`)."""
    mark = f"{MARK}={tmp_path}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone, or another user's
                continue
    return found


#: Corpora the parties cannot read: (content, what the one line says).
BAD_CORPORA = {
    "random.jsonl": (b"\xff" + random.Random(0).randbytes(20_000), "is not UTF-8 text"),
    "random.csv": (b"\xfe" + random.Random(1).randbytes(20_000), "is not UTF-8 text"),
    "empty.jsonl": (b"", "is empty"),
    "no-text.csv": (b"body,label\nengines and cars,a\nrivers and boats,b\n", "has no 'text' column"),
    "no-text.jsonl": (b'{"body": "engines and cars"}\n', "has no 'text' field"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(BAD_CORPORA))
def test_a_corpus_the_parties_cannot_read_is_one_line_in_seconds_and_nothing_starts(tmp_path, name):
    content, fragment = BAD_CORPORA[name]
    corpus = tmp_path / name
    corpus.write_bytes(content)
    started = time.monotonic()
    line = _one_error(tmp_path, f"dataset='{corpus}' num-rounds=1")
    took = time.monotonic() - started
    assert str(corpus) in line and fragment in line, line
    assert took < 20, took  # read before Flower starts: the interpreter's start and one read of the file
    assert _processes_of(tmp_path) == []


@pytest.mark.timeout(120)
def test_an_output_directory_that_holds_a_run_is_refused_before_anything_starts(tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "metrics.jsonl").write_text('{"round": 1}\n', encoding="utf-8")
    line = _one_error(tmp_path, f"output-dir='{used}' num-rounds=1")
    assert f"output directory {used.resolve()} already holds a run's outputs (metrics.jsonl)" in line, line
    assert sorted(p.name for p in used.iterdir()) == ["metrics.jsonl"]


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
def test_missing_vocabulary_file_is_one_line(tmp_path):
    missing = tmp_path / "no-such-vocabulary.txt"
    line = _one_error(tmp_path, f"vocabulary='{missing}' num-rounds=1")
    assert f"vocabulary '{missing}' is neither union, private nor a readable file" in line, line


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
    """`flower-topics simulate` on Flower's engine makes the shares before Flower starts; a share that cannot be
    made (here: a label partition of a corpus without labels) is one line, and nothing is started."""
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


def _simulate(tmp_path: Path, *args: str) -> tuple[int, list[str], float]:
    """``flower-topics simulate`` (Flower's engine, 2 clients, 1 round) in a subprocess, with FLWR_HOME under
    ``tmp_path``: its exit status, its non-empty output lines and how long it took."""
    cli = str(Path(sys.executable).with_name("flower-topics"))
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home"), MARK: str(tmp_path)}
    started = time.monotonic()
    out = subprocess.run([cli, "simulate", "--method", "lda", "--topics", "2", "--clients", "2", "--rounds", "1",
                          *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return out.returncode, lines, time.monotonic() - started


@pytest.mark.timeout(240)
def test_simulate_refuses_a_corpus_it_cannot_read_and_an_output_directory_in_use_in_seconds(tmp_path):
    content, fragment = BAD_CORPORA["random.jsonl"]
    corpus = tmp_path / "random.jsonl"
    corpus.write_bytes(content)
    code, lines, took = _simulate(tmp_path, "--dataset", str(corpus), "--out", str(tmp_path / "out"))
    assert code == 2 and len(lines) == 1, (code, lines)
    assert lines[0].startswith(f"flower-topics: error: {corpus} {fragment}"), lines
    assert took < 20, took
    used = tmp_path / "used"
    used.mkdir()
    (used / "model.npz").write_bytes(b"")
    code, lines, took = _simulate(tmp_path, "--dataset", "synthetic", "--out", str(used))
    assert code == 2 and len(lines) == 1, (code, lines)
    assert lines[0] == (f"flower-topics: error: output directory {used.resolve()} already holds a run's outputs "
                        "(model.npz); choose another output-dir or remove it"), lines
    assert took < 20, took
    assert not (tmp_path / "flwr-home").exists() and not (tmp_path / "out").exists()
    assert _processes_of(tmp_path) == []
