"""Checkpoint and resume (flower_topics.run.checkpoint): exact for lda, every method survives a crash, changes refused.

A run writes ``checkpoint.npz`` after its vocabulary agreement and after every round (these
tests set ``checkpoint-interval=0``, except those of the interval), and appends a line to
``checkpoint-release.json`` before a round's messages go out. These tests stop runs at a
chosen point (an exception where the ServerApp would die; and once a real ``flower-topics
simulate`` process killed by its PID) and resume them with ``resume=<output-dir>``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from flower_topics.run.release_journal import RELEASE_FILE
from flower_topics.run.checkpoint import (CHECKPOINT_FILE, CheckpointWriter, load_checkpoint, read_meta,
                                      strategy_state)
from flower_topics.federation.client_app import make_client_app
from flower_topics.errors import UserInputError
from flower_topics.methods import METHODS
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.wire.protocol import CONFIG
from tests.test_method_contract import NEEDS, TINY


class Crash(Exception):
    """Where the ServerApp process would die."""


class CrashingGrid(InProcessGrid):
    """In-process nodes; the server 'dies' while round ``crash_round``'s training messages are on the wire.

    The messages were configured (and ``checkpoint-release.json`` written) before the
    crash: the parties released in that round and no reply came back.
    """

    crash_round = 0

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        for msg in messages:
            if (msg.metadata.message_type.startswith("train.") and CONFIG in msg.content
                    and int(msg.content[CONFIG]["server-round"]) == self.crash_round):
                raise Crash(f"server died in round {self.crash_round}")
        return super().send_and_receive(messages, timeout=timeout)


def _config(method: str, out: Path, **extra) -> dict:
    return {**TINY, "method": method, **NEEDS.get(method, {}), "output-dir": str(out), "checkpoint-interval": 0.0,
            **extra}


def _grid(config, crash_round=0, nodes=2) -> InProcessGrid:
    grid = CrashingGrid.partitions(make_client_app(config), nodes, config)
    grid.crash_round = crash_round
    return grid


def _state(directory: Path) -> dict[str, np.ndarray]:
    with np.load(directory / "state.npz") as data:
        return {k: data[k] for k in data.files}


def test_lda_ten_rounds_equal_five_resumed_to_ten_array_for_array(tmp_path):
    """Parties that keep their context.state (the same nodes): the resumed run is the uninterrupted one.

    Two of three nodes a round: the resumed rounds sample the nodes the uninterrupted run sampled
    (the sampling is seeded by (seed, round), no random state is saved)."""
    sampling = {"eval-every": 5, "fraction-train": 0.6}
    config = _config("lda", tmp_path / "full", **{"num-rounds": 10, **sampling})
    run_server(_grid(config, nodes=3), config)
    half = _config("lda", tmp_path / "half", **{"num-rounds": 5, **sampling})
    grid = _grid(half, nodes=3)
    run_server(grid, half)
    assert load_checkpoint(tmp_path / "half").round == 5
    resumed = {**half, "num-rounds": 10, "resume": str(tmp_path / "half"), "output-dir": str(tmp_path / "resumed")}
    model = run_server(grid, resumed)
    full, again = _state(tmp_path / "full"), _state(tmp_path / "resumed")
    assert full.keys() == again.keys()
    for key in full:
        assert np.array_equal(full[key], again[key]), key
    np.testing.assert_array_equal(load_model(tmp_path / "full" / "model.npz").topic_word, model.topic_word)
    rows = read_metrics(tmp_path / "resumed" / "metrics.jsonl")
    assert [r["round"] for r in rows] == list(range(1, 11))  # rounds 1-5 copied over, 6-10 continued
    assert model.metadata["rounds"] == 10 and model.metadata["resumed"]["after_round"] == 5
    assert rows[-1]["privacy"]["rounds"] == 10
    full_rows = read_metrics(tmp_path / "full" / "metrics.jsonl")
    assert [r["bytes_sent"] for r in rows] == [r["bytes_sent"] for r in full_rows]
    assert {r["nodes_sampled"] for r in rows} == {2}


def test_lda_parties_that_lost_their_state_count_every_token_once(tmp_path):
    """Fresh nodes (as in a new Flower run) send their whole counts again; the restored counts retire at once."""
    from flower_topics.federation.client_app import agreed_documents, data_config

    config = _config("lda", tmp_path / "run", **{"num-rounds": 5})
    with pytest.raises(Crash):
        run_server(_grid(config, crash_round=4), config)
    resumed = {**config, "resume": str(tmp_path / "run")}
    with pytest.raises(Crash):  # and once more in the same round, after the resume
        run_server(_grid(resumed, crash_round=4), resumed)
    grid = _grid(resumed)  # fresh contexts: every party restarts
    run_server(grid, resumed)
    counts = _state(tmp_path / "run")["topic-word-counts"]
    training = [agreed_documents(grid.contexts[n], data_config(resumed)).training for n in grid.contexts]
    np.testing.assert_array_equal(counts.sum(axis=0), sum(np.bincount(t.tokens, minlength=counts.shape[1])
                                                          for t in training))  # every token once, none twice
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[3]["restored_share"] == 0.0 and "restored_share" not in rows[4]
    assert rows[-1]["privacy"]["rounds"] == 7  # both releases of round 4 lost to a crash count too


def _uninterrupted(method: str, tmp_path: Path, rounds: int, extra: dict) -> dict:
    config = _config(method, tmp_path / f"{method}-full", **{"num-rounds": rounds, **extra})
    return run_server(_grid(config), config).metadata["privacy"]


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_survives_a_crash_and_counts_every_release(method, tmp_path):
    """Crash while round 3's messages are out (rounds 1-2 checkpointed); resume on fresh nodes to 4 rounds."""
    rounds, extra = 4, ({"ntm.dp": True, "ntm.batch-size": 8} if method == "ntm" else {})
    config = _config(method, tmp_path / "run", **{"num-rounds": rounds, **extra})
    with pytest.raises(Crash):
        run_server(_grid(config, crash_round=3), config)
    checkpoint = load_checkpoint(tmp_path / "run")
    assert checkpoint.round == 2 and [r["round"] for r in checkpoint.lost_releases] == [3]
    assert not (tmp_path / "run" / "model.npz").exists()
    started = time.time()
    model = run_server(_grid(config), {**config, "resume": str(tmp_path / "run")})
    seconds = time.time() - started
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3, 4]  # no round lost, none twice
    assert model.metadata["rounds"] == rounds
    assert model.topic_word.shape[1] == len(model.vocabulary) and np.all(np.isfinite(model.topic_word))
    np.testing.assert_allclose(model.topic_word.sum(axis=1), 1.0, atol=1e-6)
    if method != "ftm":  # FTM's global model has the K* topics its merge produced
        assert model.topic_word.shape[0] == TINY["num-topics"]
    report, reference = model.metadata["privacy"], _uninterrupted(method, tmp_path, rounds, extra)
    assert report["rounds"] >= reference["rounds"] + 1  # the lost round 3 was released: it counts
    if reference["epsilon"] is not None:
        assert report["epsilon"] >= reference["epsilon"] - 1e-9
    assert model.metadata["resumed"]["seconds_to_resume"] < seconds


def test_lda_checkpointed_by_time_counts_every_round_released_since_its_checkpoint(tmp_path):
    """checkpoint-interval longer than the run: only round 0 is checkpointed before the crash in round 4, so
    the journal holds rounds 1-4, all four count as released, and the resumed run counts every token once."""
    from flower_topics.federation.client_app import agreed_documents, data_config

    config = _config("lda", tmp_path / "run", **{"num-rounds": 5, "checkpoint-interval": 3600.0})
    with pytest.raises(Crash):
        run_server(_grid(config, crash_round=4), config)
    checkpoint = load_checkpoint(tmp_path / "run")
    assert checkpoint.round == 0 and [r["round"] for r in checkpoint.lost_releases] == [1, 2, 3, 4]
    assert len((tmp_path / "run" / RELEASE_FILE).read_text().splitlines()) == 4
    grid = _grid(config)
    model = run_server(grid, {**config, "resume": str(tmp_path / "run")})
    assert load_checkpoint(tmp_path / "run").round == 5  # the last round is always checkpointed
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5]  # the lines of rounds 1-3 after the checkpoint: redone
    assert rows[-1]["privacy"]["rounds"] == 5 + 4 and model.metadata["resumed"]["after_round"] == 0
    assert [r["round"] for r in model.metadata["resumed"]["lost_releases"]] == [1, 2, 3, 4]
    counts = _state(tmp_path / "run")["topic-word-counts"]
    training = [agreed_documents(grid.contexts[n], data_config(config)).training for n in grid.contexts]
    np.testing.assert_array_equal(counts.sum(axis=0), sum(np.bincount(t.tokens, minlength=counts.shape[1])
                                                          for t in training))


def test_a_private_method_is_checkpointed_every_round_whatever_the_interval(tmp_path):
    """A lost round of a private method costs privacy budget: its rounds are all checkpointed."""
    config = _config("fedlda", tmp_path / "run", **{"num-rounds": 4, "checkpoint-interval": 3600.0})
    with pytest.raises(Crash):
        run_server(_grid(config, crash_round=3), config)
    checkpoint = load_checkpoint(tmp_path / "run")
    assert checkpoint.round == 2 and [r["round"] for r in checkpoint.lost_releases] == [3]


def test_the_writer_is_due_after_the_interval_and_at_the_last_round(monkeypatch, tmp_path):
    import flower_topics.run.checkpoint as checkpoint_module
    from flower_topics.federation.vocabulary_agreement import Agreement

    clock = [100.0]
    monkeypatch.setattr(checkpoint_module.time, "monotonic", lambda: clock[0])
    config = {"method": "lda", "num-rounds": 50, "checkpoint-interval": 10.0, "seed": 0}
    agreement = Agreement(vocabulary=("a", "b"), mode="file", nodes=1, bytes_sent=0, bytes_received=0, seconds=0.0)
    writer = CheckpointWriter(tmp_path, config, agreement)
    clock[0] = 109.9
    assert not writer.due(7)
    clock[0] = 110.0
    assert writer.due(8) and writer.due(50)
    assert CheckpointWriter(tmp_path, {**config, "checkpoint-interval": 0.0}, agreement).due(1)
    assert CheckpointWriter(tmp_path, {**config, "method": "dplda"}, agreement).interval == 0.0


def test_the_release_journal_skips_a_cut_short_last_line_and_refuses_a_broken_one(tmp_path):
    from flower_topics.run.release_journal import read_releases, write_release

    path = tmp_path / RELEASE_FILE
    write_release(tmp_path, 1, [101, 102])
    write_release(tmp_path, 2, [101], {"realized_delta": 0.5})
    assert [(r["round"], r["nodes"]) for r in read_releases(path)] == [(1, [101, 102]), (2, [101])]
    with open(path, "ab") as fh:
        fh.write(b'{"round": 3, "no')  # a crash during the append: round 3's messages never went out
    assert [r["round"] for r in read_releases(path)] == [1, 2]
    path.write_text(json.dumps({"round": 4, "nodes": [7], "id": "x"}))  # an older version's one record, no newline
    assert [r["round"] for r in read_releases(path)] == [4]
    path.write_text('{"round": 1}\nnot json\n{"round": 2}\n')
    with pytest.raises(UserInputError, match="is not readable"):
        read_releases(path)


@pytest.mark.parametrize("change, what", [
    ({"method": "pctd"}, "method"),
    ({"vocabulary-max-words": 5}, "vocabulary-max-words"),
    ({"min-df": 3}, "min-df"),
    ({"fedlda.epsilon": 3.0}, "fedlda.epsilon"),
])
def test_a_resume_that_changes_method_vocabulary_or_privacy_is_refused_in_one_line(change, what, tmp_path):
    base = _config("fedlda", tmp_path / "run", **{"num-rounds": 2})
    run_server(_grid(base), base)
    sent = []

    class Watching(CrashingGrid):
        def send_and_receive(self, messages, *, timeout=None):
            sent.extend(messages)
            return super().send_and_receive(messages, timeout=timeout)

    config = {**base, **change, "num-rounds": 4, "resume": str(tmp_path / "run"), "output-dir": str(tmp_path / "b")}
    with pytest.raises(UserInputError) as info:
        run_server(Watching.partitions(make_client_app(config), 2, config), config)
    message = str(info.value)
    assert "\n" not in message and message.startswith("resume refused") and what in message
    assert not sent and not (tmp_path / "b").exists()  # refused before anything was sent or written


def test_dplda_refuses_a_new_num_rounds_and_a_missing_checkpoint(tmp_path):
    config = _config("dplda", tmp_path / "run", **{"num-rounds": 2})
    run_server(_grid(config), config)
    with pytest.raises(UserInputError, match="calibrates its noise"):
        run_server(_grid(config), {**config, "num-rounds": 3, "resume": str(tmp_path / "run"),
                                   "output-dir": str(tmp_path / "b")})
    with pytest.raises(UserInputError, match="holds no checkpoint.npz"):
        run_server(_grid(config), {**config, "resume": str(tmp_path / "nothing")})


def test_the_checkpoint_is_one_npz_without_pickle_and_written_every_round(tmp_path):
    config = _config("ntm", tmp_path / "run", **{"num-rounds": 2})
    run_server(_grid(config), config)
    with np.load(tmp_path / "run" / CHECKPOINT_FILE, allow_pickle=False) as data:
        meta = read_meta(data["meta"])
        assert meta["round"] == 2 and meta["config"]["num-rounds"] == 2 and meta["vocabulary"]
        assert any(k.startswith("strategy/ntm-optimizer-") for k in data.files)  # Adam's moments
        assert any(k.startswith("global/") for k in data.files)
    assert (tmp_path / "run" / RELEASE_FILE).read_text() == ""  # round 2 is in the checkpoint: the journal is emptied
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]  # no temporary file left


def test_the_writer_writes_exactly_the_json_of_the_whole_state_and_refreshes_the_newest_rounds(tmp_path):
    """The per-round cache of :class:`CheckpointWriter` changes no byte of the state: after every save the
    stored meta equals the state built from scratch, also when the newest round's entries change after a
    save (late evaluation bytes) and when a value looks like the writer's own placeholders."""
    from flower_topics.federation.vocabulary_agreement import Agreement
    from flower_topics.federation.server_app import build_strategy
    from flower_topics.strategies.base import RoundTraffic

    from flower_topics.run.config import parse_run_config

    config = parse_run_config({**_config("lda", tmp_path), "num-rounds": 5})
    vocabulary = ("alpha", "beta", "gamma")
    agreement = Agreement(vocabulary=vocabulary, mode="file", nodes=2, bytes_sent=0, bytes_received=0, seconds=0.0)
    strategy = build_strategy(config, vocabulary)
    writer = CheckpointWriter(tmp_path, config, agreement)
    arrays = strategy.initial_arrays()
    for server_round in range(1, 5):
        strategy.traffic[server_round] = RoundTraffic(bytes_sent=10 * server_round, nodes_sampled=2)
        strategy.method_metrics[server_round] = {"num-tokens": 7.0 * server_round}
        strategy.excluded[server_round] = f'"{writer._token}:config" sent by a hostile party'
        writer.save(server_round, strategy, arrays)
        strategy.traffic[server_round].eval_bytes_sent += 3  # after the save, still in its round
        writer.save(server_round, strategy, arrays)
        with np.load(tmp_path / CHECKPOINT_FILE, allow_pickle=False) as data:
            meta = read_meta(data["meta"])
            assert data["meta"].dtype == np.uint8
        _, expected = strategy_state(strategy)
        assert meta["strategy"] == json.loads(json.dumps(expected))
        assert meta["vocabulary"] == list(vocabulary) and meta["config"]["num-rounds"] == 5
        assert meta["round"] == server_round
    assert load_checkpoint(tmp_path).strategy_meta["base"]["traffic"]["4"]["eval_bytes_sent"] == 3


def test_an_older_checkpoints_keys_are_read_too(tmp_path):
    """A checkpoint written with the older keys (``absorbed`` in its meta, the restored counts under
    ``<prefix>carried``) resumes as one with the current keys: the same lost releases are not counted again, the
    same restored counts are mixed in."""
    from flower_topics.strategies.restored_counts import RestoredCounts

    counts = np.array([[3, 0], [1, 2]], dtype=np.int64)
    for key in ("restored", "carried"):
        restored = RestoredCounts.from_state("lda-", {f"lda-{key}": counts}, {"lda-total": 6, "lda-entered": 2})
        np.testing.assert_array_equal(restored.restored, counts)
        np.testing.assert_array_equal(restored.mix(np.zeros_like(counts)), [[2, 0], [0, 1]])  # floor(counts * 2/3)
    assert RestoredCounts.from_state("lda-", {}, {}) is None

    config = _config("lda", tmp_path / "run", **{"num-rounds": 5})
    with pytest.raises(Crash):
        run_server(_grid(config, crash_round=4), config)
    path = tmp_path / "run" / CHECKPOINT_FILE
    lost = [json.loads(line)["id"] for line in (tmp_path / "run" / RELEASE_FILE).read_text().splitlines()]
    assert lost and load_checkpoint(tmp_path / "run").lost_releases
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = read_meta(arrays["meta"])
    meta.pop("counted_lost_releases")
    for older in ({**meta, "absorbed": lost}, {**meta, "absorbed": []}):
        arrays["meta"] = np.frombuffer(json.dumps(older).encode("utf-8"), dtype=np.uint8)
        np.savez(path, **arrays)
        checkpoint = load_checkpoint(tmp_path / "run")
        assert checkpoint.counted_lost_releases == older["absorbed"]
        assert [r["id"] for r in checkpoint.lost_releases] == [i for i in lost if i not in older["absorbed"]]


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (from /proc: the SuperLink runs in a session of its own)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the ServerApp process")
def test_a_killed_serverapp_process_resumes_from_its_last_checkpoint(tmp_path):
    """flower-topics simulate (Flower's simulation engine): the process running the ServerApp is killed by its
    PID once round 2's checkpoint is there; simulate --resume finishes the run with no round lost."""
    out = tmp_path / "run"
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_HOME": str(tmp_path / "flwr")}
    common = ["--clients", "2", "--topics", "4", "--dataset", "synthetic", "--out", str(out),
              "--set", "synthetic-nodes=2", "--set", "synthetic-vocab-size=40", "--set", "synthetic-topics=4",
              "--set", "synthetic-shared-topics=2", "--set", "synthetic-docs-per-node=20",
              "--set", "synthetic-doc-min-length=15", "--set", "synthetic-doc-max-length=20",
              "--set", "eval-iterations=20", "--set", "lda.local-sweeps=300", "--set", "checkpoint-interval=0"]
    command = [sys.executable, "-m", "flower_topics.cli.main", "simulate", "--method", "lda", "--rounds", "8", *common]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    started_here: set[int] = set()
    deadline = time.time() + 240
    try:
        serverapp = []
        while time.time() < deadline and proc.poll() is None:
            started_here.update(_descendants(proc.pid))
            serverapp = [p for p in started_here if "flwr-simulation" in _cmdline(p)]
            if serverapp and (out / CHECKPOINT_FILE).exists() and load_checkpoint(out).round >= 2:
                break
            time.sleep(0.1)
        assert serverapp and proc.poll() is None, "the run ended (or never started its ServerApp) before round 2"
        for pid in serverapp:
            os.kill(pid, signal.SIGKILL)  # the crash: the ServerApp's process dies mid-run
        killed_at = load_checkpoint(out).round
        time.sleep(3)
        assert load_checkpoint(out).round == killed_at  # nothing runs on after the kill
    finally:
        for pid in sorted(started_here | set(_descendants(proc.pid))):  # stop the SuperLink and flwr run we started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
    assert 2 <= killed_at < 8 and not (out / "model.npz").exists()
    started = time.time()
    resumed = subprocess.run([sys.executable, "-m", "flower_topics.cli.main", "simulate", "--resume", str(out),
                              "--clients", "2"], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["round"] for r in rows] == list(range(1, 9))  # no round lost, none twice
    model = load_model(out / "model.npz")
    assert model.metadata["resumed"]["after_round"] == killed_at and model.metadata["privacy"]["rounds"] >= 8
    assert model.topic_word.shape == (4, len(model.vocabulary))
    resumed_at = model.metadata["resumed"]
    print(f"killed after round {killed_at}; the resumed simulate took {time.time() - started:.1f} s: checkpoint "
          f"restored in {resumed_at['seconds_to_restore']:.2f} s, parties ready after "
          f"{resumed_at['seconds_to_resume']:.2f} s of the ServerApp; 0 rounds lost")
