"""Documents' dates as periods (year, quarter or month), for topic prevalence over time.

A date is read from a string: ``YYYY``, ``YYYY-MM``, or any ISO 8601 date or date-time that
:meth:`datetime.datetime.fromisoformat` reads (``2024-03-07``, ``2024-03-07T10:00:00+01:00``,
``20240307``). A missing or blank value is "no date"; any other value is refused with one line
naming it. Each distinct value is parsed once, so a corpus of many documents over few dates
costs a pass over its distinct dates.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Sequence

import numpy as np

from flower_topics.errors import UserInputError
from flower_topics.options import shown

#: The periods a prevalence table can be cut by.
PERIODS = ("year", "quarter", "month")

#: The most periods a run's grid may hold.
MAX_PERIODS = 1200

_YEAR = re.compile(r"^\d{4}$")
_YEAR_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def _year_month(value: str) -> tuple[int, int]:
    """``(year, month)`` of one date string; ValueError when it is not a date."""
    if _YEAR.match(value):
        return int(value), 1
    found = _YEAR_MONTH.match(value)
    if found:
        year, month = int(found.group(1)), int(found.group(2))
        if not 1 <= month <= 12:
            raise ValueError(value)
        return year, month
    parsed = datetime.fromisoformat(value)
    return parsed.year, parsed.month


def period_label(year: int, month: int, period: str) -> str:
    """The label of the period holding ``year``-``month``: ``2024``, ``2024-Q1`` or ``2024-03``."""
    if period == "year":
        return f"{year:04d}"
    if period == "quarter":
        return f"{year:04d}-Q{(month - 1) // 3 + 1}"
    if period == "month":
        return f"{year:04d}-{month:02d}"
    raise ValueError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")


def document_periods(values: Sequence[str | None], period: str, *, source: str = "the corpus",
                     column: str = "date", lines: Sequence[int] | None = None) -> tuple[tuple[str, ...], np.ndarray]:
    """The period of each document's date.

    Parameters
    ----------
    values : sequence of str or None
        Each document's date as read (None or blank: the document has no date).
    period : {"year", "quarter", "month"}
        How the dates are grouped.
    source : str
        What the refusal calls the corpus (its path).
    column : str
        What the refusal calls the date field.
    lines : sequence of int, optional
        The line of each document in ``source``, for the refusal (default: its position + 1).

    Returns
    -------
    periods : tuple of str
        The distinct periods, in time order (labels of :func:`period_label`).
    index : np.ndarray
        ``int64`` per document: its period's position in ``periods``, or -1 for no date.

    Raises
    ------
    UserInputError
        For a value that is not a date (one line: the value and its line).
    """
    if period not in PERIODS:
        raise UserInputError(f"prevalence-period must be one of {', '.join(PERIODS)}, got {period!r}")
    texts = np.array(["" if v is None else str(v).strip() for v in values], dtype=object)
    distinct, inverse = np.unique(texts, return_inverse=True)
    labels: list[str | None] = []
    for position, value in enumerate(distinct):
        if not value:
            labels.append(None)
            continue
        try:
            labels.append(period_label(*_year_month(value), period))
        except ValueError:
            first = int(np.flatnonzero(inverse == position)[0])
            line = lines[first] if lines is not None else first + 1
            raise UserInputError(f"{source}, line {line}: {column} {shown(value, 60)} is not a date (YYYY, YYYY-MM or an "
                                 "ISO 8601 date)") from None
    ordered = tuple(sorted({label for label in labels if label is not None}))
    position_of = {label: i for i, label in enumerate(ordered)}
    codes = np.array([-1 if label is None else position_of[label] for label in labels], dtype=np.int64)
    return ordered, codes[inverse.ravel()] if len(texts) else np.zeros(0, dtype=np.int64)


def period_grid(start: str, end: str, period: str) -> tuple[str, ...]:
    """Every period from the one holding date ``start`` to the one holding ``end``, in time order.

    Raises
    ------
    UserInputError
        When a bound is not a date, ``end`` comes before ``start``, or the grid would hold more than
        :data:`MAX_PERIODS` periods.
    """
    if period not in PERIODS:
        raise UserInputError(f"prevalence-period must be one of {', '.join(PERIODS)}, got {period!r}")
    bounds = []
    for name, value in (("prevalence-from", start), ("prevalence-to", end)):
        try:
            bounds.append(_year_month(str(value).strip()))
        except ValueError:
            raise UserInputError(f"{name} {value!r} is not a date (YYYY, YYYY-MM or an ISO 8601 date)") from None
    step = {"year": 12, "quarter": 3, "month": 1}[period]
    first = bounds[0][0] * 12 + (bounds[0][1] - 1) // step * step
    last = bounds[1][0] * 12 + bounds[1][1] - 1
    if last < first:
        raise UserInputError(f"prevalence-to {end!r} comes before prevalence-from {start!r}")
    months = range(first, last + 1, step)
    if len(months) > MAX_PERIODS:
        raise UserInputError(f"prevalence-from {start!r} to prevalence-to {end!r} spans {len(months)} {period}s, "
                             f"more than {MAX_PERIODS}: use a longer prevalence-period or a shorter range")
    return tuple(period_label(m // 12, m % 12 + 1, period) for m in months)
