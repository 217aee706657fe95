"""Where a ClientApp process spends its time on one message, for benchmarks.

On Flower's deployment engine every message a SuperNode receives starts a fresh
``flwr-clientapp`` process. With ``FLOWER_TOPICS_TIMINGS=<file>`` in the SuperNode's
environment (its ClientApp processes inherit it), the ClientApp appends one JSON line per
message it answers to that file::

    {"message": "lda", "pid": 4242, "time": 1767225600.0, "since_start": 2.41, "cpu": 1.98, "before_handler": 1.62,
     "handler": 0.79, "stages": {"data": 0.31, "compute": 0.40, "state": 0.02},
     "imported": ["numba", "scipy"]}

- ``time``: when it replied (``time.time()``);
- ``since_start``: seconds from the process's start (``/proc``) to the reply;
- ``cpu``: the process's CPU seconds (user + system) from its start to the reply;
- ``before_handler``: from the process's start to the handler (Python, Flower's runtime,
  the message and the context pulled, the FAB installed, this package imported);
- ``handler``: the handler itself; ``stages``: the parts of it that were timed;
- ``imported``: which of the heavy libraries (:data:`WATCHED`) the process had imported.

Unset (the default), nothing is measured and nothing is written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: Environment variable naming the file the timings are appended to.
TIMINGS_ENV = "FLOWER_TOPICS_TIMINGS"
#: Libraries a line says were imported by the time of the reply (``imported``).
WATCHED = ("numba", "scipy", "sklearn", "torch", "opacus", "sentence_transformers", "matplotlib", "dp_accounting",
           "autodp")

_stages: dict[str, float] = {}


def process_started() -> float | None:
    """The start of this process as a ``time.time()`` value (Linux ``/proc``), or None where unknown."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the seconds spent in the ``with`` block to stage ``name`` of the current message."""
    started = time.perf_counter()
    try:
        yield
    finally:
        _stages[name] = _stages.get(name, 0.0) + time.perf_counter() - started


def begin() -> float:
    """Start timing a message; returns the handler's start (``time.time()``)."""
    _stages.clear()
    return time.time()


def record(message: str, handler_started: float) -> None:
    """Append this message's line to ``$FLOWER_TOPICS_TIMINGS`` (nothing when it is unset).

    Parameters
    ----------
    message : str
        What the message was (the handler's name).
    handler_started : float
        What :func:`begin` returned.
    """
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        return
    now = time.time()
    started = process_started()
    times = os.times()
    line = {"message": message, "pid": os.getpid(), "time": round(now, 4),
            "since_start": None if started is None else round(now - started, 4),
            "cpu": round(times.user + times.system, 4),
            "before_handler": None if started is None else round(handler_started - started, 4),
            "handler": round(now - handler_started, 4),
            "stages": {k: round(v, 4) for k, v in _stages.items()},
            "imported": [name for name in WATCHED if name in sys.modules]}
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    except OSError:  # a measurement never costs the party its reply
        pass
