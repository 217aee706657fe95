"""Wire protocol of topic prevalence, the stage after the last round.

``query.prevalence`` (server to every party that trained): the final topics and how to cut
time. A party folds in every document of its own with a date against the topics (on its host,
as ``infer`` does), adds each period's topic shares, and replies with that table only:

- request ``config``: ``vocabulary`` (fingerprint), ``method`` (whose release rule the party
  applies: its method's :attr:`~flower_topics.clients.base.LocalStep.prevalence`),
  ``period`` (``year``, ``quarter`` or ``month``), ``periods`` (the public grid, joined by
  newlines; empty: the party's own periods), ``eval-alpha`` and ``eval-iterations`` (the
  fold-in), and the method's release settings (``dplda``: its noise); request ``arrays``:
  ``topic-word`` (``K x V``), plus the secure-sum round's record under secure aggregation;
- reply ``update``: :data:`SUMS` (``K x T`` summed topic shares, float64; documents per
  period are its column sums, as each document's shares sum to 1) or, under secure
  aggregation, the masked integer vector; ``config``: ``periods`` (the reply's columns);
  ``metrics``: :data:`UNDATED`, :data:`OUTSIDE` and :data:`EMPTY` document counts (plain
  releases only: with noise or secure aggregation nothing but the table leaves).
"""

from __future__ import annotations

from flwr.app import MessageType

from flower_topics.wire.protocol import ArraySpec, ReplySpec

PREVALENCE = f"{MessageType.QUERY}.prevalence"
#: The reply's table: ``K x T`` summed topic shares.
SUMS = "topic-shares"
#: The request's topics.
TOPIC_WORD = "topic-word"
#: Documents without a date, or whose date falls outside the grid, or without a word of the vocabulary.
UNDATED, OUTSIDE, EMPTY = "undated", "outside", "empty"
#: The request's units of a plain table under secure aggregation (entries are sent as integers of 1 / quantum).
QUANTUM = "quantum"
#: Those units: a document's share of a topic to 1/1024.
DEFAULT_QUANTUM = 1024.0
#: The request's units of a method's integer table (``dplda`` under secure aggregation: its sensitivity units).
UNITS = "units"
#: Largest prevalence reply accepted, in bytes (a K x T float table).
MAX_REPLY_BYTES = 64 << 20


def join_periods(periods: tuple[str, ...] | list[str]) -> str:
    """Period labels as they travel: one string, newline-separated."""
    return "\n".join(periods)


def split_periods(text: str) -> tuple[str, ...]:
    """The inverse of :func:`join_periods`."""
    return tuple(text.split("\n")) if text else ()


def reply_spec(n_topics: int, n_periods: int | None, plain: bool) -> ReplySpec:
    """A valid prevalence reply: a finite ``K x T`` table (``T`` free when the party sends its own periods),
    non-negative when it carries no noise, with the counts of what it left out when ``plain``."""
    table = ArraySpec("floating", (n_topics, n_periods), low=0 if plain else None, what="summed topic shares")
    return ReplySpec("prevalence", {SUMS: table}, metrics=(UNDATED, OUTSIDE, EMPTY) if plain else (),
                     max_bytes=MAX_REPLY_BYTES, config=("periods",))
