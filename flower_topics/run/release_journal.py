"""The release journal, ``checkpoint-release.json``: the rounds released since the last checkpoint.

Before a round's messages go out, a line of ``checkpoint-release.json`` (one JSON object a
line, appended and flushed) records the round and the nodes it was sent to; the checkpoint
writer empties the file after each checkpoint. A resume counts every line of a round past
the checkpoint as a round that was released and then lost to the crash
(:func:`flower_topics.run.resume.resume_strategy`): a resumed run never reports less than
what the parties released.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

from flower_topics.errors import UserInputError
from flower_topics.run.json_values import plain_json

RELEASE_FILE = "checkpoint-release.json"


def write_release(directory: str | os.PathLike[str], server_round: int, nodes: Sequence[int],
                  details: Mapping[str, Any] | None = None) -> Path:
    """Record, before a round's messages go out, that round ``server_round`` is released to ``nodes``: one line
    appended to ``checkpoint-release.json`` in one write (a crash during it happens before the messages go out),
    with the strategy's ``details`` of the release
    (:meth:`~flower_topics.strategies.base.TopicStrategy.release_details`)."""
    path = Path(directory) / RELEASE_FILE
    line = json.dumps({"round": int(server_round), "nodes": [int(n) for n in nodes], "id": uuid.uuid4().hex,
                       **plain_json(dict(details or {}))}) + "\n"
    with open(path, "ab") as fh:
        fh.write(line.encode("utf-8"))
    return path


def read_releases(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a release journal, in order.

    A last line without its newline counts when it is whole JSON (the one record of a journal an
    older version wrote); one a crash cut short (before the round's messages went out) does not
    parse and is left out. Any other unreadable line is an error.

    Raises
    ------
    UserInputError
        One line: the journal is not readable.
    """
    path = Path(path)
    try:
        lines = path.read_bytes().split(b"\n")
        records = [json.loads(line) for line in lines[:-1] if line.strip()]  # lines[-1]: after the last newline
    except (OSError, ValueError) as exc:
        raise UserInputError(f"resume: {path} is not readable ({exc})") from None
    if lines[-1].strip():
        try:
            records.append(json.loads(lines[-1]))
        except ValueError:
            pass
    return records
