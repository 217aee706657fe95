"""Documents' periods and the topic-prevalence table, against hand-computed values."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from flower_topics.data.periods import document_periods, period_label
from flower_topics.errors import UserInputError
from flower_topics.metrics.prevalence import PrevalenceTable, period_totals


@pytest.mark.parametrize(("value", "period", "label"), [
    ("2024", "year", "2024"), ("2024", "month", "2024-01"),
    ("2024-03", "quarter", "2024-Q1"), ("2024-04", "quarter", "2024-Q2"), ("2024-12", "quarter", "2024-Q4"),
    ("2024-03-07", "month", "2024-03"), ("2024-03-07T23:59:00+01:00", "month", "2024-03"),
    ("20240908", "quarter", "2024-Q3"), ("2005-08", "year", "2005"),
])
def test_a_date_falls_in_its_period(value, period, label):
    periods, index = document_periods([value], period)
    assert periods == (label,) and index.tolist() == [0]


def test_periods_are_in_time_order_and_blank_dates_are_no_date():
    periods, index = document_periods(["2021-11", None, "2020-02", " ", "2021-10", "2020-01-31"], "quarter")
    assert periods == ("2020-Q1", "2021-Q4")
    assert index.tolist() == [1, -1, 0, -1, 1, 0]


@pytest.mark.parametrize("value", ["2024-13", "last week", "24-03", "2024/03/07"])
def test_a_value_that_is_not_a_date_is_one_line_naming_it_and_its_line(value):
    with pytest.raises(UserInputError) as caught:
        document_periods(["2024-01", "2024-02", value], "month", source="notes.jsonl", lines=[1, 2, 5])
    message = str(caught.value)
    assert "\n" not in message and f"{value!r}" in message and "notes.jsonl, line 5" in message


def test_an_unknown_period_is_refused():
    with pytest.raises(UserInputError, match="prevalence-period must be one of year, quarter, month"):
        document_periods(["2024"], "week")
    with pytest.raises(ValueError):
        period_label(2024, 1, "week")


def test_period_totals_add_each_periods_theta_rows_and_count_its_documents():
    theta = np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8], [0.0, 1.0]])
    sums, documents = period_totals(theta, np.array([1, 1, -1, 0]), 3)
    assert np.allclose(sums, [[0.0, 1.5, 0.0], [1.0, 0.5, 0.0]])
    assert documents.tolist() == [1, 2, 0]


def test_tables_add_over_the_union_of_periods_and_shares_sum_to_one_per_period():
    a = PrevalenceTable(("2020", "2022"), np.array([[1.0, 0.25], [1.0, 0.75]]), np.array([2, 1]), undated=3)
    b = PrevalenceTable(("2021", "2022"), np.array([[3.0, 1.0], [0.0, 1.0]]), np.array([3, 2]))
    total = a.plus(b)
    assert total.periods == ("2020", "2021", "2022") and total.undated == 3
    assert np.allclose(total.sums, [[1.0, 3.0, 1.25], [1.0, 0.0, 1.75]])
    assert total.documents.tolist() == [2, 3, 3]
    assert np.allclose(total.shares(), [[0.5, 1.0, 1.25 / 3], [0.5, 0.0, 1.75 / 3]])
    assert np.allclose(total.shares().sum(axis=0), 1.0)


def test_a_period_without_documents_has_no_share_and_the_csv_says_so(tmp_path):
    table = PrevalenceTable(("2020-Q1", "2020-Q2"), np.array([[2.0, 0.0], [0.0, 0.0]]), np.array([2, 0]))
    path = table.write_csv(tmp_path / "prevalence.csv", labels=["engine car", "river boat"])
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert [(r["period"], r["topic"], r["label"], r["share"], r["documents"]) for r in rows] == [
        ("2020-Q1", "0", "engine car", "1", "2"), ("2020-Q1", "1", "river boat", "0", "2"),
        ("2020-Q2", "0", "engine car", "", "0"), ("2020-Q2", "1", "river boat", "", "0")]


def test_mismatched_tables_are_refused():
    with pytest.raises(ValueError):
        PrevalenceTable(("2020",), np.ones((2, 2)), np.ones(1))
    with pytest.raises(ValueError):
        PrevalenceTable(("2020",), np.ones((2, 1)), np.ones(1)).plus(
            PrevalenceTable(("2020",), np.ones((3, 1)), np.ones(1)))
