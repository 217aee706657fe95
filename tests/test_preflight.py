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


#: What a launcher's refusal of a run's files must not have imported: the accountants (a calibration), the neural
#: stack, compiled kernels, scipy, the strategies and the evaluation (each a fraction of a second or more).
HEAVY = ("dp_accounting", "autodp", "opacus", "torch", "sentence_transformers", "transformers", "sklearn", "numba",
         "scipy")
PREFLIGHT_IMPORTS = r"""
import json, sys
from flower_topics.errors import UserInputError

launcher, vocabulary, public, out = sys.argv[1:5]
said = ""
if launcher == "superlink":  # flower-topics-superlink's (and flwr run's) pre-flight
    from flower_topics.simulations.local_superlink import check_run_config
    try:
        check_run_config(["flwr", "run", ".", "--run-config", f"method='dplda' vocabulary='{vocabulary}' num-topics=4 "
                          f"dplda.public-corpus='{public}' federated-eval=false output-dir='{out}'"])
    except UserInputError as exc:
        said = str(exc)
elif launcher == "simulate":
    from flower_topics.cli.main import main
    said = str(main(["simulate", "--method", "dplda", "--clients", "2", "--topics", "4", "--rounds", "2", "--out", out,
                     "--set", f"vocabulary={vocabulary}", "--set", f"dplda.public-corpus={public}",
                     "--set", "federated-eval=false", "--set", "dplda.init=random"]))
else:  # a valid run config parsed in full: its noise is calibrated
    from flower_topics.run.config import parse_run_config
    from flower_topics.privacy.dplda_calibration import noise_multiplier
    said = repr(noise_multiplier(parse_run_config({"method": "dplda", "vocabulary": vocabulary,
                                                   "federated-eval": False})))
heavy = tuple(sys.argv[5].split())
print(json.dumps({"said": said, "modules": sorted(m for m in sys.modules if m.split(".")[0] in heavy or
                                                  m.startswith(("flower_topics.strategies", "flower_topics.evaluation",
                                                                "flower_topics.metrics")))}))
"""


def _preflight_modules(launcher: str, vocabulary: Path, public: Path, out: Path) -> dict:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", PREFLIGHT_IMPORTS, launcher, str(vocabulary), str(public), str(out),
                           " ".join(HEAVY)], capture_output=True, text=True, timeout=300, cwd=root, check=False,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "FLOWER_TOPICS_CACHE_DIR": "off"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_refusing_a_dplda_public_corpus_imports_no_accountant_and_nothing_heavy(tmp_path):
    words = ["game", "player", "level", "music", "sound", "audio", "font", "glyph", "mail", "server"]
    vocabulary = tmp_path / "vocabulary.txt"
    vocabulary.write_text("\n".join(words) + "\n", encoding="utf-8")
    public = tmp_path / "public.jsonl"  # 6 documents, 18 tokens: too small for 4 topics
    public.write_text("".join(json.dumps({"text": " ".join(words[3 * (j // 2):3 * (j // 2) + 3])}) + "\n"
                              for j in range(6)), encoding="utf-8")
    refused = _preflight_modules("superlink", vocabulary, public, tmp_path / "flwr")
    assert "too small to train 4 topics: 6 documents and 18 tokens" in refused["said"]
    assert refused["modules"] == [], refused["modules"][:10]
    refused = _preflight_modules("simulate", vocabulary, public, tmp_path / "run")
    assert refused["said"] == "2" and not (tmp_path / "run").exists()
    assert refused["modules"] == [], refused["modules"][:10]
    # the same process, parsing a run config that passes: the accountant is imported (the check above can see it)
    calibrated = _preflight_modules("calibrate", vocabulary, public, tmp_path / "flwr")
    assert float(calibrated["said"]) > 0 and "dp_accounting" in calibrated["modules"], calibrated


def test_a_target_no_noise_reaches_is_still_refused_before_flower_starts(tmp_path, no_flower):
    unreachable = ("dplda.epsilon=1e-7 dplda.delta=1e-12 dplda.sample-rate=1.0 num-rounds=10000 "
                   "federated-eval=false")
    with pytest.raises(UserInputError, match="no noise level reaches eps 1e-07"):
        check_run_config(["flwr", "run", ".", "--run-config", f"method='dplda' vocabulary='{VOCABULARY}' "
                          f"{unreachable} output-dir='{tmp_path / 'flwr'}'"])
    assert not (tmp_path / "flwr").exists()
