"""Bad input that the ServerApp would refuse only after the vocabulary agreement is refused before Flower starts
(seed words none of which can be agreed, a public corpus too small for K), once, in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flower_topics.cli.main import main
from flower_topics.errors import UserInputError
from flower_topics.simulations import local_superlink
from flower_topics.simulations.local_superlink import check_run_config
from tests.test_method_contract import TINY

VOCABULARY = Path(__file__).parent / "fixtures" / "synthetic40_vocabulary.txt"  # w0000 ... w0039


@pytest.fixture
def no_flower(monkeypatch):
    """Flower must not start: the launcher is replaced by one that fails the test."""
    def started(*args, **kwargs):
        raise AssertionError("Flower was started")

    monkeypatch.setattr(local_superlink, "with_superlink", started)


def _simulate(out: Path, method: str, *sets: str, engine: str = "flower") -> int:
    tiny = {k: v for k, v in TINY.items() if k not in ("num-topics", "num-rounds", "dataset")}
    args = [arg for key, value in tiny.items() for arg in ("--set", f"{key}={value}")]
    return main(["simulate", "--method", method, "--clients", "2", "--topics", "4", "--rounds", "2", "--dataset",
                 "synthetic", "--engine", engine, "--out", str(out), *args, *[a for s in sets for a in ("--set", s)]])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_seed_words_outside_a_vocabulary_file_are_refused_before_flower_starts(tmp_path, capsys, no_flower):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("zebra quokka\nW0001x\n", encoding="utf-8")
    started = time.monotonic()
    assert _simulate(tmp_path / "run", "lda", f"vocabulary={VOCABULARY}", f"seed-words={seeds}") == 2
    err = _one_line(capsys)
    assert "seed-words: none of the 3 seed words is in the vocabulary file" in err and "(40 words;" in err
    assert time.monotonic() - started < 30 and not (tmp_path / "run").exists()
    # the same check in flower-topics-superlink's (and flwr run's) pre-flight
    with pytest.raises(UserInputError, match="none of the 3 seed words is in the vocabulary file"):
        check_run_config(["flwr", "run", ".", "--run-config",
                          f"dataset='synthetic' vocabulary='{VOCABULARY}' seed-words='{seeds}' "
                          f"output-dir='{tmp_path / 'flwr'}'"])
    # one seed word in the file is enough (the others are dropped with a warning when the run starts)
    seeds.write_text("zebra w0003\n", encoding="utf-8")
    check_run_config(["flwr", "run", ".", "--run-config", f"dataset='synthetic' vocabulary='{VOCABULARY}' "
                      f"seed-words='{seeds}' output-dir='{tmp_path / 'flwr'}'"])


def test_seed_words_none_of_which_the_corpus_has_are_refused_before_an_agreement(tmp_path, capsys, no_flower):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("zebra quokka\n", encoding="utf-8")
    assert _simulate(tmp_path / "run", "lda", f"seed-words={seeds}") == 2  # vocabulary='union': agreed later
    err = _one_line(capsys)
    assert "none of the 2 seed words is in the corpus' words (the agreed vocabulary is drawn from them)" in err
    for engine in ("inprocess",):  # the in-process engine too, before its ServerApp runs
        assert _simulate(tmp_path / engine, "lda", f"seed-words={seeds}", engine=engine) == 2
        assert "none of the 2 seed words" in _one_line(capsys)
        assert not (tmp_path / engine).exists()


def test_a_public_corpus_too_small_for_k_is_refused_before_flower_starts(tmp_path, capsys, no_flower):
    words = ["game", "player", "level", "music", "sound", "audio", "font", "glyph", "mail", "server"]
    vocabulary = tmp_path / "vocabulary.txt"
    vocabulary.write_text("\n".join(words) + "\n", encoding="utf-8")
    public = tmp_path / "public.jsonl"
    # 6 documents of 3 vocabulary words, each word in 2 of them (the reading filters keep it): 18 tokens
    public.write_text("".join(json.dumps({"text": " ".join(words[3 * (j // 2):3 * (j // 2) + 3])}) + "\n"
                              for j in range(6)), encoding="utf-8")
    dplda = ["federated-eval=false", "dplda.init=random", "dplda.epsilon=50"]
    run = ["simulate", "--method", "dplda", "--clients", "2", "--topics", "4", "--rounds", "2"]  # embedded corpus
    assert main([*run, "--out", str(tmp_path / "run"), *[a for s in (f"vocabulary={vocabulary}",
                 f"dplda.public-corpus={public}", *dplda) for a in ("--set", s)]]) == 2
    err = _one_line(capsys)
    assert ("dplda.public-corpus is too small to train 4 topics: 6 documents and 18 tokens over the vocabulary "
            "file") in err and "at least 4 documents and 40 tokens" in err
    with pytest.raises(UserInputError, match="too small to train 4 topics: 6 documents and 18 tokens"):
        check_run_config(["flwr", "run", ".", "--run-config",
                          f"method='dplda' vocabulary='{vocabulary}' num-topics=4 dplda.public-corpus='{public}' "
                          f"federated-eval=false output-dir='{tmp_path / 'flwr'}'"])
    # over a private agreement: the corpus' own words bound any vocabulary agreed from them
    assert main([*run, "--out", str(tmp_path / "private"), *[a for s in ("vocabulary=private",
                 "vocabulary-epsilon=1", f"dplda.public-corpus={public}", *dplda) for a in ("--set", s)]]) == 2
    assert "6 documents and 18 tokens over the corpus' words" in _one_line(capsys)


def test_a_run_that_fails_on_an_error_the_serverapp_said_does_not_repeat_it(tmp_path, capsys, monkeypatch):
    message = "seed-words: none of the 2 seed words is in the agreed vocabulary of 40 words (e.g. a, b)"

    def stream(command, cwd, env, verbose, started, errors=None):
        print(f"ERROR :     flower-topics: error: {message}")  # what the ServerApp's console says
        errors.append(message)
        started.append(7)
        return 0

    monkeypatch.setattr(local_superlink, "stream", stream)
    monkeypatch.setattr(local_superlink, "wait_for_run",
                        lambda *a: f"finished:failed - Simulation failed with exception: {message}")
    monkeypatch.setattr(local_superlink, "save_run_log", lambda *a: tmp_path / "run.log")
    assert local_superlink._run_and_check(["flwr", "run", "."], tmp_path, tmp_path, local_superlink.CONNECTION,
                                          10, False, fresh=True) == 1
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count(message) == 1
    assert "run 7 FAILED (finished:failed): the error above" in captured.err
