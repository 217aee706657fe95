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
                               "replies_failed": 1, "bytes_sent": 9}, 30, "eps 2 per document")
    assert line == "round 3/30  ppl 41.7  npmi 0.14  replies 5/6 | eps 2 per document"


def test_a_round_line_with_every_metric_fits_160_characters_with_flowers_prefix():
    from flower_topics.privacy.privacy_report import PrivacyReport

    row = {"round": 1000, "perplexity": 12345.6, "npmi": -0.066261, "umass": -192.934, "diversity": 0.5133,
           "tss_normalized": 0.44231, "nmi": 0.11962, "purity": 0.27613, "replies_applied": 997, "replies_failed": 3}
    # the longest privacy words a round can have: a method's own epsilon on its unit
    token = PrivacyReport(mechanism="gaussian", unit="token", accountant="a long accountant " * 9, rounds=1000,
                          epsilon_round=0.123456, delta_round=1e-5, epsilon=1234.5678, delta=1e-5)
    line = console.round_line(row, 1000, token.round_summary())
    assert line == ("round 1000/1000  ppl 12346  npmi -0.0663  umass -193  div 0.513  tss 0.442  nmi 0.12  "
                    "purity 0.276  replies 997/1000 | eps 1235 per token")
    assert len("INFO :      " + line) < 160


def test_long_summary_lines_are_wrapped_and_said_once():
    note = "word " * 90
    lines = console.summary_lines(method="dplda", topics=[["a"]], asked_topics=1, last={}, privacy="eps 2 " * 40,
                                  directory="/runs/x", seconds=1.0, notes=[note])
    assert all(len("INFO :      " + line) < 160 for line in lines)
    notes = [line for line in lines if line.startswith("note: ") or line.startswith("    word")]
    assert " ".join(line.strip() for line in notes) == "note: " + note.strip()
    assert sum(line.startswith("privacy: ") for line in lines) == 1


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

    def stream(command, cwd, env, verbose, started, errors=None):
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


def test_help_lists_the_seven_commands_in_plain_text():
    proc = subprocess.run([sys.executable, "-m", "flower_topics.cli.main", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0
    description = " ".join(proc.stdout.split("positional arguments")[0].split())
    for command in ("simulate", "evaluate", "vocabulary", "infer", "report", "export", "ledger"):
        assert f"{command} (" in description
    assert "Seven commands" in description and "`" not in proc.stdout


def test_a_dplda_run_says_its_accountant_once_and_each_round_in_under_160_characters(tmp_path):
    import csv

    from flower_topics.cli.main import main
    from flower_topics.privacy.accountants.pld import PLDAccountant
    from flower_topics.topic_model.model_file import load_model
    from tests.test_method_contract import NEEDS, TINY

    said = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append("INFO :      " + record.getMessage())  # as Flower's console handler prints it

    options = {k: v for k, v in {**TINY, **NEEDS["dplda"]}.items() if k not in ("num-topics", "num-rounds", "dataset")}
    sets = [arg for key, value in options.items()
            for arg in ("--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}")]
    out = tmp_path / "run"
    handler = Keep()
    FLOWER_LOGGER.addHandler(handler)
    try:
        assert main(["simulate", "--method", "dplda", "--engine", "inprocess", "--clients", "2", "--topics", "4",
                     "--rounds", "3", "--dataset", "synthetic", "--out", str(out), *sets]) == 0
    finally:
        FLOWER_LOGGER.removeHandler(handler)
    rounds = [line for line in said if line.startswith("INFO :      round ") and "/3 " in line]
    assert len(rounds) == 3 and all(len(line) < 160 for line in said if "outputs: " not in line), said
    words = " ".join(" ".join(line.split()[2:]) for line in said)  # the lines' words, wrapped lines joined
    assert words.count(PLDAccountant.description) == 1  # in the summary's privacy statement only
    # the console's time is the model's, the report's and the results table's: one number
    wall = load_model(out / "model.npz").metadata["wall_time"]
    assert f"dplda finished in {wall:.1f} s;" in words
    assert main(["report", str(out)]) == 0
    assert f"3 rounds, {wall:.1f} s." in (out / "report.html").read_text(encoding="utf-8")
    with open(out / "results.csv", encoding="utf-8", newline="") as fh:
        assert float(next(csv.DictReader(fh))["wall_time"]) == round(wall, 2)


def test_a_sentence_transformers_load_draws_no_progress_bar(capfd):
    """transformers draws "Loading weights: 0%|..." through its own tqdm while it loads a model's weights (every
    dplda run with init=embedding, ntm, pctd); the package's model loads silence it first."""
    from transformers.utils import logging as transformers_logging

    from flower_topics.models.word_similarity import quiet_model_loading

    quiet_model_loading()
    for _ in transformers_logging.tqdm(range(3), desc="Loading weights"):
        pass
    assert "Loading weights" not in capfd.readouterr().err
    transformers_logging.enable_progress_bar()  # what this test's tqdm draws when the bars are on
    for _ in transformers_logging.tqdm(range(3), desc="Loading weights"):
        pass
    assert "Loading weights" in capfd.readouterr().err
    quiet_model_loading()
