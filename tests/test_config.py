"""Run-config validation, and pyproject's [tool.flwr.app.config] kept in step with it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from flower_topics.config import OPTIONS, defaults, parse_assignments, parse_run_config
from flower_topics.errors import UserInputError

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_run_config_equals_schema_defaults():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["flwr"]["app"]["config"] == defaults()


def test_empty_config_gets_every_default():
    # flwr.simulation.run_simulation passes an empty run config
    assert parse_run_config({}) == defaults()


def test_strings_from_the_command_line_are_coerced():
    cfg = parse_run_config({"num-topics": "20", "alpha": "0.5", "lowercase": "false", "dataset": "x"})
    assert cfg["num-topics"] == 20 and cfg["alpha"] == 0.5 and cfg["lowercase"] is False and cfg["dataset"] == "x"


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"num-topic": 3}, "unknown run-config key(s) num-topic"),
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
        ({"method": "ftm"}, "not available yet"),
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
