"""The worked example of docs/adding-a-method.md: the page shows the example's files as they are, its code runs as
shown, the example learns (its first round is the E-step of the pooled documents, summed), and registering a method
refuses a duplicate or malformed spec in one line.

tests/conftest.py registers the example (``register_method``) before collection, so that every test parametrized
over the registry's methods runs it as well.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from examples.expected_counts import SPEC
from examples.expected_counts import wire as example_wire
from examples.expected_counts.strategy import ExpectedCounts
from flower_topics.errors import UserInputError
from flower_topics.federation.client_app import agreed_documents, data_config, make_client_app
from flower_topics.federation.server_app import run_server, synthetic_truth
from flower_topics.methods import BUILT_IN, METHODS, MethodSpec, register_method
from flower_topics.metrics.similarity import align_topics, topic_similarity_score
from flower_topics.models import svi
from flower_topics.run.config import parse_run_config
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.wire.method_wire import MethodWire

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding-a-method.md"
EXAMPLE = ROOT / "examples" / "expected_counts"
#: A file of the example shown on the page: its path in backquotes on a line of its own, then its code.
SHOWN = re.compile(r"^`(examples/[\w/]+\.py)`:?\n\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TINY = {"dataset": "synthetic", "synthetic-nodes": 2, "synthetic-topics": 4, "synthetic-shared-topics": 2,
        "synthetic-vocab-size": 40, "synthetic-docs-per-node": 30, "synthetic-doc-min-length": 15,
        "synthetic-doc-max-length": 20, "num-topics": 4, "method": SPEC.name}


def _blocks(language: str = "python") -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", PAGE.read_text(), re.MULTILINE | re.DOTALL)


def test_the_page_shows_every_file_of_the_example_as_it_is():
    shown = dict(SHOWN.findall(PAGE.read_text()))
    files = {str(path.relative_to(ROOT)): path.read_text() for path in sorted(EXAMPLE.glob("*.py"))}
    assert set(shown) == set(files), "the page must show each file of examples/expected_counts, and only those"
    for path, text in files.items():
        assert shown[path] == text, f"docs/adding-a-method.md shows {path} other than it is"


def test_the_page_runs_the_example_as_it_shows_it(tmp_path):
    """The page's block that registers and runs the example, run in a fresh interpreter (nothing registered yet)."""
    (run,) = [block for block in _blocks() if "register_method(SPEC)" in block and "simulate(" in block]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", run], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = re.search(r'out_dir="([^"]+)"', run).group(1)
    assert (tmp_path / out / "model.npz").is_file() and (tmp_path / out / "metrics.jsonl").is_file()


def test_the_example_is_registered_by_the_tests_and_is_not_a_method_of_the_package():
    assert METHODS[SPEC.name] is SPEC and SPEC.name not in BUILT_IN
    assert not any(spec.strategy.startswith("examples.") for name, spec in METHODS.items() if name in BUILT_IN)


def test_its_first_round_is_the_e_step_of_every_party_s_documents_summed_plus_the_prior(tmp_path):
    """Batch variational EM: lambda after round 1 is eta plus the expected counts of all the parties' documents
    under the initial lambda, computed here from each party's documents directly."""
    config = parse_run_config({**TINY, "num-rounds": 1, "output-dir": str(tmp_path / "run")})
    grid = InProcessGrid.partitions(make_client_app(config), 2, config)
    model = run_server(grid, config)
    strategy = SPEC.build_strategy(config, model.vocabulary)
    start = strategy.initial_arrays()[example_wire.LAMBDA_KEY].numpy()
    statistic = sum(svi.e_step(start, svi.document_counts(agreed_documents(context, data_config(config)).training),
                               alpha=config["alpha"], clip=None,
                               max_iter=config[f"{SPEC.name}.max-iterations"]).statistic
                    for context in grid.contexts.values())
    lam = config["beta"] + statistic
    np.testing.assert_allclose(model.topic_word, lam / lam.sum(axis=1, keepdims=True), rtol=1e-9)


def test_the_example_trained_in_process_is_closer_to_the_synthetic_truth_than_its_start(tmp_path):
    config = parse_run_config({**TINY, "num-rounds": 8, "output-dir": str(tmp_path / "run")})
    model = run_server(InProcessGrid.partitions(make_client_app(config), 2, config), config)
    truth, words = synthetic_truth(config)
    start = SPEC.build_strategy(config, model.vocabulary)
    initial = start.topic_word(start.initial_arrays())
    before = topic_similarity_score(align_topics(truth, words, model.vocabulary), initial).normalized
    after = topic_similarity_score(align_topics(truth, words, model.vocabulary), model.topic_word).normalized
    assert after > before + 0.2, (before, after)


def test_registering_a_duplicate_or_malformed_method_is_refused_in_one_line():
    refusals = [
        (lambda: register_method(SPEC), ValueError, "method 'expected_counts' is registered already"),
        (lambda: register_method("expected_counts"), TypeError, "register_method takes a MethodSpec, not str"),
        (lambda: register_method(MethodSpec("lda", SPEC.title, SPEC.wire, SPEC.strategy, SPEC.client, private=False)),
         TypeError, "its wire module's METHOD is 'expected_counts'"),
        (lambda: register_method(_renamed("two-words")), TypeError, "must be a Python identifier"),
        (lambda: register_method(_renamed("other", client="examples.expected_counts.client:NOTHING")), TypeError,
         "method 'other': AttributeError"),
        (lambda: register_method(_renamed("other", strategy="examples.nowhere:ExpectedCounts")), TypeError,
         "method 'other': ModuleNotFoundError"),
        (lambda: register_method(_renamed("other", strategy="examples.expected_counts.client:STEP")), TypeError,
         "is not a TopicStrategy subclass"),
    ]
    for register, error, message in refusals:
        with pytest.raises(error, match=re.escape(message)) as refused:
            register()
        assert "\n" not in str(refused.value)
    assert "other" not in METHODS and "two-words" not in METHODS


def _renamed(name: str, **parts: str) -> MethodSpec:
    """The example's spec under another name (its wire module's METHOD replaced to match)."""
    import dataclasses

    wire = dataclasses.replace(SPEC.wire, method=name)
    return MethodSpec(name, SPEC.title, wire, parts.get("strategy", SPEC.strategy), parts.get("client", SPEC.client),
                      private=False)


def test_a_strategy_whose_from_config_drops_the_federation_options_is_refused_in_one_line():
    """Without ``**cls.federation_options(config)``, min-nodes, fraction-train, evaluation and secure aggregation
    would be silently ignored: building the strategy says so instead."""

    class Forgetful(ExpectedCounts):
        @classmethod
        def from_config(cls, config, vocabulary):
            return cls(vocabulary, example_wire.SETTINGS.from_record(config), eta=float(config["beta"]))

    spec = MethodSpec(SPEC.name, SPEC.title, SPEC.wire, "tests.test_method_example:Forgetful", SPEC.client,
                      private=False)
    config = parse_run_config({**TINY, "min-nodes": 2, "fraction-train": 0.5})
    globals()["Forgetful"] = Forgetful
    try:
        with pytest.raises(TypeError, match=r"Forgetful\.from_config ignores the run config's fraction_train, "
                                            r"min_nodes, evaluation: pass \*\*cls\.federation_options") as refused:
            spec.build_strategy(config, ["w0", "w1"])
    finally:
        del globals()["Forgetful"]
    assert "\n" not in str(refused.value)
    assert SPEC.build_strategy(config, ["w0", "w1"]).min_nodes == 2


def test_a_method_of_one_s_own_runs_in_process_only_and_its_keys_stay_out_of_a_flower_app(tmp_path):
    """Flower's engine runs the parties in other processes, which have not registered it: refused in one line
    before anything is read or started; and the run config ``simulate`` writes for a Flower App (a built-in
    method's run) carries none of a registered method's keys, which a Flower App's config does not declare."""
    from flower_topics.simulations.runner import simulate, write_app

    with pytest.raises(UserInputError, match="registered in this process only") as refused:
        simulate(TINY, mode="federated", num_clients=2, out_dir=tmp_path / "run", engine="flower")
    assert "\n" not in str(refused.value) and not any(tmp_path.iterdir())
    config = parse_run_config({**TINY, "method": "lda"})
    assert "expected_counts.max-iterations" in config
    written = tomllib.loads(write_app(tmp_path / "app", config).read_text())
    assert written["method"] == "lda" and "lda.local-sweeps" in written
    assert not [key for key in written if key.startswith("expected_counts.")]
