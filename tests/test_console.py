"""The console a person reads: one line a round, a summary, no Flower chatter unless verbose."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter

import pytest
from flwr.common.logger import FLOWER_LOGGER

from flower_topics.federation import console
from flower_topics.simulations.local_superlink import check_run_config
from flower_topics.errors import UserInputError


def test_round_line_has_round_metrics_and_privacy():
    line = console.round_line({"round": 3, "perplexity": 41.68, "npmi": 0.1398, "replies_applied": 5,
                               "replies_failed": 1, "bytes_sent": 9}, 30, "eps 2, delta 0 per document")
    assert line == "round 3/30  perplexity 41.68  npmi 0.1398  replies 5 (1 failed) | privacy: eps 2, delta 0 per document"


def test_summary_says_when_the_method_returned_another_number_of_topics():
    lines = console.summary_lines(method="ftm", topics=[["a", "b"]] * 11, asked_topics=20, last={"npmi": 0.1},
                                  privacy="eps 11 per token", directory="/runs/x", seconds=3.0, notes=["why"])
    assert "note: ftm returned 11 topics, not the 20 asked (num-topics)" in lines
    assert "note: why" in lines and lines[-1].startswith("outputs: /runs/x")
    assert sum(line.startswith("  topic") for line in lines) == 11


def test_filter_drops_flower_info_unless_verbose(caplog):
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, rooted = Keep(), []
    FLOWER_LOGGER.addHandler(handler)
    root = logging.Handler()
    root.emit = rooted.append
    logging.getLogger().addHandler(root)  # a library's basicConfig must not print Flower's lines twice
    try:
        console.install(verbose=False)
        FLOWER_LOGGER.info("Aggregated MetricRecord: {...}")
        FLOWER_LOGGER.debug("Terminated 2 actors")
        FLOWER_LOGGER.warning("round 2: reply of node 3 rejected")
        console.say("round 1/2")
        console.install(verbose=True)
        FLOWER_LOGGER.info("Starting strategy")
        console.install(verbose=False)
        console.user_error("'num-topics' = 0 must be >= 1")
        FLOWER_LOGGER.error("ServerApp raised an exception")
    finally:
        FLOWER_LOGGER.removeHandler(handler)
        logging.getLogger().removeHandler(root)
        console.install(verbose=False)
    assert rooted == []
    assert records == ["round 2: reply of node 3 rejected", "round 1/2", "Starting strategy",
                       "flower-topics: error: 'num-topics' = 0 must be >= 1"]


def test_flwr_run_config_is_checked_before_submitting(tmp_path):
    with pytest.raises(UserInputError, match=r"epsilon \(did you mean fedlda.epsilon"):
        check_run_config(["flwr", "run", ".", "--run-config", "method='fedlda' epsilon=5"])
    with pytest.raises(UserInputError, match="'num-topics' = 0 must be >= 1"):
        check_run_config(["flwr", "run", ".", "--run-config=num-topics=0"])
    check_run_config(["flwr", "run", ".", "--run-config", f"method='fedlda' fedlda.epsilon=5 output-dir='{tmp_path}'"])


def test_the_launcher_refuses_an_output_dir_holding_a_run_unless_the_run_resumes_it(tmp_path):
    def check(run_config: str) -> dict:
        return check_run_config(["flwr", "run", ".", "--run-config", f"dataset='synthetic' {run_config}"])

    used, other, fresh = tmp_path / "used", tmp_path / "other", tmp_path / "fresh"
    used.mkdir()
    (used / "model.npz").write_bytes(b"")
    with pytest.raises(UserInputError, match=r"output directory .*used already holds a run's outputs \(model.npz\)"):
        check(f"output-dir='{used}'")
    with pytest.raises(UserInputError, match="already holds a run's outputs"):
        check(f"output-dir='{used}' resume='{other}'")
    assert check(f"output-dir='{used}' resume='{used}'")["resume"] == str(used)  # a resume continues in its own
    check(f"output-dir='{fresh}'")
    assert not fresh.exists()  # the check creates nothing
    # a deployment's output directory is on the ServerApp's machine: not checked here
    check_run_config(["flwr", "run", ".", "--run-config", f"output-dir='{used}'"], local_data=False)


def test_a_failed_runs_hint_names_only_what_works_after_the_launcher_is_done(tmp_path, monkeypatch, capsys):
    """A private SuperLink is stopped when the launcher is done: its run's log is saved first, and the line names
    that file, never ``flwr log`` (which then reaches no SuperLink); on an existing SuperLink ``flwr log`` works."""
    from flower_topics.simulations import local_superlink

    saved = []

    def save(app_dir, home, run_id, path, connection):
        saved.append((run_id, path, connection))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the run's log\n", encoding="utf-8")
        return path

    def stream(command, cwd, env, verbose, started):
        started.append(7)
        return 0

    monkeypatch.setattr(local_superlink, "stream", stream)
    monkeypatch.setattr(local_superlink, "wait_for_run", lambda *a: "finished:failed - boom")
    monkeypatch.setattr(local_superlink, "latest_run", lambda *a: None)
    monkeypatch.setattr(local_superlink, "save_run_log", save)
    run = local_superlink._run_and_check
    assert run(["flwr", "run", "."], tmp_path, tmp_path / "home", local_superlink.CONNECTION, 10, False, fresh=True) == 1
    err = capsys.readouterr().err
    log = tmp_path / "home" / "logs" / "run-7.log"
    assert saved == [(7, log, local_superlink.CONNECTION)] and log.is_file()
    assert f"run 7 FAILED (finished:failed - boom)" in err and f"its full log is kept in {log}" in err
    assert "flwr log" not in err
    kept = tmp_path / "out" / "flower-run.log"
    assert run(["flwr", "run", "."], tmp_path, tmp_path / "home", local_superlink.CONNECTION, 10, False, fresh=True,
               run_log=kept) == 1
    assert f"its full log is kept in {kept}" in capsys.readouterr().err
    monkeypatch.setattr(local_superlink, "save_run_log", lambda *a: None)  # the log could not be read
    run(["flwr", "run", "."], tmp_path, tmp_path / "home", local_superlink.CONNECTION, 10, False, fresh=True)
    err = capsys.readouterr().err
    assert "rerun with --verbose" in err and "flwr log" not in err
    assert run(["flwr", "run", ".", "topics"], tmp_path, tmp_path / "home", "topics", 10, False) == 1
    assert "(also: flwr log 7 topics --show)" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_30_round_simulate_prints_under_60_lines_each_once(tmp_path):
    """The default simulate through flwr run: a line a round, the summary, nothing twice, no DEBUG."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "flower_topics.cli.main", "simulate", "--method", "lda", "--clients", "3", "--topics", "5",
         "--rounds", "30", "--out", str(out)],
        capture_output=True, text=True, timeout=280)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 0, "\n".join(lines[-30:])
    assert len(lines) < 60, "\n".join(lines)
    assert [n for n in range(1, 31) if sum(line.startswith(f"round {n}/30 ") for line in lines) != 1] == []
    repeated = [line for line, n in Counter(lines).items() if n > 1 and line.strip()]
    assert repeated == []
    text = "\n".join(lines)
    for noise in ("DEBUG", "INFO flwr", "alembic", "deprecated", "Aggregated MetricRecord", "Terminated"):
        assert noise not in text
    assert f"outputs: {out}" in text and "privacy: no privacy mechanism" in text
    assert sum(line.startswith("  topic ") for line in lines) == 5


def test_defaults_that_give_poor_topics_say_why_and_which_option_changes_it():
    from flower_topics.run.config import parse_run_config
    from flower_topics.methods import get_method

    for method, fix in (("pctd", {"pctd.sigma": 0.01}), ("ftm", {"ftm.epsilon": 1e6, "ftm.tau": 0.5}),
                        ("ntm", {"ntm.dp": False})):
        (note,) = get_method(method).notes(parse_run_config({"method": method}))
        assert all(key in note for key in fix), note
        assert get_method(method).notes(parse_run_config({"method": method, **fix})) == []
    assert get_method("lda").notes(parse_run_config({})) == []


def test_a_superlink_that_does_not_start_is_one_line_naming_its_log(tmp_path, monkeypatch, capsys):
    """The private SuperLink's own log is what explains a SuperLink that did not start: the line names it, and a
    caller with a temporary FLWR_HOME (``simulate``) gets a copy beside its run log."""
    from contextlib import contextmanager

    from flower_topics.simulations import local_superlink

    @contextmanager
    def failing(home, *, simulation, log_path):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("address already in use\n", encoding="utf-8")
        raise RuntimeError("flower-superlink exited with status 1 before listening")
        yield  # pragma: no cover

    monkeypatch.setattr(local_superlink, "superlink", failing)
    command = ["flwr", "run", ".", "--run-config", f"dataset='synthetic' output-dir='{tmp_path / 'out'}'"]
    home = tmp_path / "home"
    assert local_superlink.with_superlink(command, num_supernodes=2, flwr_home=home) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("flower-topics: error: flower-superlink exited with status 1 before listening (the SuperLink's "
                    f"log: {home / 'superlink.log'})")
    run_log = tmp_path / "out" / "flower-run.log"
    assert local_superlink.with_superlink(command, num_supernodes=2, flwr_home=home, run_log=run_log) == 1
    kept = tmp_path / "out" / "flower-superlink.log"
    assert capsys.readouterr().err.strip().endswith(f"(the SuperLink's log: {kept})")
    assert kept.read_text(encoding="utf-8") == "address already in use\n"
