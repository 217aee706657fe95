"""What a person reads on the console: one line a round, a short summary at the end.

Everything the ServerApp says goes through Flower's logger (``flwr``), because that is
what ``flwr run --stream`` and ``flwr log`` show from a ServerApp process. By default
(run config ``verbose=false``) only this module's lines (marked) and warnings or errors
are shown: the logger's level is WARNING, so Flower's own INFO and DEBUG lines (the
strategy's banner, ``configure_train``, every aggregated record, the final dump of every
round's records: about 30 a round) are dropped before a record is even made, and this
module hands its lines to the logger's handlers directly. ``verbose=true``
(``flower-topics simulate --verbose``) keeps everything (level DEBUG, Flower's default).

After a :class:`~flower_topics.errors.UserInputError` has been said in one line, Flower's
own report of the same exception (a traceback and an exit-code help text) is dropped too,
so a bad value reads as one line on every path.

The package's own logger (``flower_topics``, used by the data readers and the vocabulary
agreement) is forwarded to Flower's logger in the ServerApp process, warnings always and
information lines when verbose, so that both engines show them once.
"""

from __future__ import annotations

import logging
import textwrap
from logging import ERROR, INFO, WARNING
from typing import Any, Mapping, Sequence

from flwr.common.logger import FLOWER_LOGGER

#: Attribute that marks a log record as a console line of this package.
MARK = "flower_topics_console"
#: Topics the end-of-run summary lists (the rest are in topics.txt).
SUMMARY_TOPICS = 20
#: Metrics the round lines and the summary show, in this order, with their console names.
METRICS = (("perplexity", "perplexity"), ("npmi", "npmi"), ("umass", "umass"), ("diversity", "diversity"),
           ("tss_normalized", "tss"), ("nmi", "nmi"), ("purity", "purity"))
#: The round line's shorter names (three significant digits each), so that a round with every metric fits
#: :data:`WIDTH`.
ROUND_NAMES = {"perplexity": "ppl", "diversity": "div"}
#: The most characters a console line has, Flower's ``INFO :      `` prefix included: round lines are made to
#: fit, and the summary's longer lines (a method's note, the privacy statement) are wrapped.
WIDTH = 159
#: The width of Flower's prefix of a line on the console (``INFO :      ``).
PREFIX = 12


class _ConsoleFilter(logging.Filter):
    """Drops Flower's INFO/DEBUG lines unless verbose; after a user error, Flower's report of it."""

    def __init__(self) -> None:
        super().__init__()
        self.verbose = False
        self.user_error = False

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, MARK, False):
            return True
        if self.user_error and record.levelno >= ERROR:
            return False  # the traceback and exit code of an error already said in one line
        return self.verbose or record.levelno >= WARNING


class _Forward(logging.Handler):
    """Re-logs the package's ``flower_topics`` records on Flower's logger (marked)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= WARNING or _FILTER.verbose:
            say("%s", record.getMessage(), level=record.levelno)


_FILTER = _ConsoleFilter()
_FORWARD = _Forward()


def install(verbose: bool) -> None:
    """Quiet Flower's logger (unless ``verbose``) and forward the package's logger to it.

    Idempotent: a second run in the same process only changes the verbosity.
    """
    _FILTER.verbose = bool(verbose)
    _FILTER.user_error = False
    FLOWER_LOGGER.setLevel(logging.DEBUG if verbose else WARNING)
    if _FILTER not in FLOWER_LOGGER.filters:
        FLOWER_LOGGER.addFilter(_FILTER)
    # Flower's logger has its own console handler; a root handler some library installs (a basicConfig on
    # import) would print every line a second time.
    FLOWER_LOGGER.propagate = False
    package = logging.getLogger("flower_topics")
    if _FORWARD not in package.handlers:
        package.addHandler(_FORWARD)
    package.setLevel(logging.INFO)
    package.propagate = False


def say(message: str, *args: Any, level: int = INFO) -> None:
    """One console line (shown whatever the verbosity: handed to the logger's filters and handlers past
    its level, which keeps Flower's own INFO lines out unless verbose)."""
    FLOWER_LOGGER.handle(FLOWER_LOGGER.makeRecord(FLOWER_LOGGER.name, level, __file__, 0, message, args, None,
                                                  extra={MARK: True}))


def user_error(message: str) -> None:
    """Say a user's mistake in one line, and drop Flower's traceback of it that follows."""
    say("flower-topics: error: %s", message, level=ERROR)
    _FILTER.user_error = True


def _number(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3g}"


def metrics_text(row: Mapping[str, Any], *, short: bool = False) -> str:
    """``perplexity 22.27  npmi 0.4277 ...`` of the metrics a row has; ``short``: the round line's names and three
    significant digits (``ppl 22.3  npmi 0.428``)."""
    def number(value: float) -> str:
        if not short:
            return _number(value)
        return f"{value:.0f}" if 1e3 <= abs(value) < 1e5 else f"{value:.3g}"

    return "  ".join(f"{ROUND_NAMES.get(key, name) if short else name} {number(float(row[key]))}"
                     for key, name in METRICS if isinstance(row.get(key), (int, float)))


def round_line(row: Mapping[str, Any], num_rounds: int, privacy: str) -> str:
    """The line of one round: the round, its metrics (on evaluation rounds), the replies it applied of those it
    got, and the privacy spent so far (a few words: :meth:`~flower_topics.privacy.privacy_report.PrivacyReport.round_summary`).
    """
    parts = [f"round {int(row['round'])}/{num_rounds}"]
    metrics = metrics_text(row, short=True)
    if metrics:
        parts.append(metrics)
    applied, failed = row.get("replies_applied"), row.get("replies_failed")
    if isinstance(applied, (int, float)):
        parts.append(f"replies {int(applied)}" + (f"/{int(applied) + int(failed)}" if failed else ""))
    return "  ".join(parts) + f" | {privacy}"


def wrapped(line: str) -> list[str]:
    """``line`` cut at spaces into lines that fit :data:`WIDTH` with Flower's prefix, the later ones indented."""
    return textwrap.wrap(line, width=WIDTH - PREFIX, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False) or [line]


def summary_lines(*, method: str, topics: Sequence[Sequence[str]], asked_topics: int, last: Mapping[str, Any],
                  privacy: str, directory: str, seconds: float, notes: Sequence[str] = ()) -> list[str]:
    """The end-of-run summary: top words of each topic, final metrics, privacy, notes, where the outputs are."""
    lines = [f"flower-topics: {method} finished in {seconds:.1f} s; {len(topics)} topics, top words:"]
    width = len(str(len(topics) - 1))
    for k, words in enumerate(topics[:SUMMARY_TOPICS]):
        lines.append(f"  topic {k:>{width}}: {' '.join(words)}")
    if len(topics) > SUMMARY_TOPICS:
        lines.append(f"  ... {len(topics) - SUMMARY_TOPICS} more in topics.txt")
    if len(topics) != asked_topics:
        lines.append(f"note: {method} returned {len(topics)} topics, not the {asked_topics} asked (num-topics)")
    for note in notes:
        lines.extend(wrapped(f"note: {note}"))
    metrics = metrics_text(last)
    lines.append(f"final: {metrics}" if metrics else "final: no evaluation (federated-eval=false)")
    lines.extend(wrapped(f"privacy: {privacy}"))
    lines.append(f"outputs: {directory} (model.npz, topics.txt, metrics.jsonl, plots)")
    return lines
