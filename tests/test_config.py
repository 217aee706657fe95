"""Run-config validation, and pyproject's [tool.flwr.app.config] kept in step with it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from flwr.common.config import flatten_dict

from flower_topics.run.config import (GLOBAL_OPTIONS, OPTIONS, defaults, options_table, parse_assignments,
                                      parse_run_config, pyproject_tables)
from flower_topics.errors import UserInputError
from flower_topics.methods import BUILT_IN, METHODS

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_run_config_equals_schema_defaults():
    """The defaults in pyproject, flattened as Flower flattens them, are the registry's (its built-in methods'; a
    method added by ``register_method``, such as the tests' worked example, is not the package's)."""
    pyproject = flatten_dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"])
    assert pyproject == flatten_dict(pyproject_tables())
    added = {spec.key(name) for spec in METHODS.values() if spec.name not in BUILT_IN for name in spec.options}
    assert pyproject == {key: value for key, value in defaults().items() if key not in added}


def test_method_options_are_namespaced_and_no_key_means_two_things():
    for spec in METHODS.values():
        for name in spec.options:
            assert f"{spec.name}.{name}" in OPTIONS and name not in GLOBAL_OPTIONS
    assert not any("." in key for key in GLOBAL_OPTIONS)
    assert "delta" not in OPTIONS and "fedlda.delta" in OPTIONS and "pctd.delta" in OPTIONS


def test_documented_options_table_is_the_registry():
    assert options_table() in (ROOT / "docs" / "run-config.md").read_text()


def test_documented_node_config_table_is_the_registry():
    from flower_topics.run.config import node_options_table

    assert node_options_table() in (ROOT / "docs" / "run-config.md").read_text()


def test_empty_config_gets_every_default():
    # flwr.simulation.run_simulation passes an empty run config
    assert parse_run_config({}) == defaults()


def test_strings_from_the_command_line_are_coerced():
    cfg = parse_run_config({"num-topics": "20", "alpha": "0.5", "lowercase": "false", "dataset": "x"})
    assert cfg["num-topics"] == 20 and cfg["alpha"] == 0.5 and cfg["lowercase"] is False and cfg["dataset"] == "x"


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"num-topic": 3}, "unknown run-config key(s) num-topic (did you mean num-topics?)"),
        ({"num-topics": 0}, "'num-topics' = 0 must be >= 1"),
        ({"alpha": -0.1}, "'alpha' = -0.1 must be > 0"),
        ({"beta": 0}, "'beta' = 0 must be > 0"),
        ({"num-topics": "many"}, "is not a valid int"),
        ({"num-topics": 2.5}, "is not a valid int"),
        ({"partition": "random"}, "must be one of iid, label, dirichlet, sizes"),
        ({"min-df": 1.5}, "whole document count"),
        ({"fraction-train": 0}, "must be in (0, 1]"),
        ({"partition": "sizes"}, "partition='sizes' needs partition-sizes"),
        ({"synthetic-doc-min-length": 90, "synthetic-doc-max-length": 50}, "synthetic-doc-min-length"),
        ({"method": "nope"}, "unknown method 'nope'; registered: lda, fedlda, pctd"),
        ({"epsilon": 2.0}, "unknown run-config key(s) epsilon (did you mean fedlda.epsilon or ftm.epsilon or dplda.epsilon?)"),
        ({"fedlda.epsilon": 0}, "'fedlda.epsilon' = 0 must be > 0"),
        ({"pctd.delta": 0}, "'pctd.delta' = 0 must be in (0, 1)"),
        ({"min-replies": 1.5}, "whole count"),
    ],
)
def test_bad_values_give_one_line_errors(raw, fragment):
    with pytest.raises(UserInputError) as err:
        parse_run_config(raw)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_every_option_has_help_and_a_valid_default():
    for key, option in OPTIONS.items():
        assert option.help, key
        assert option.check is None or option.check(option.default) is None, key


def test_parse_assignments():
    assert parse_assignments(["alpha=0.1", "dataset='a b'"]) == {"alpha": "0.1", "dataset": "a b"}
    with pytest.raises(UserInputError):
        parse_assignments(["alpha"])
