"""The embedded corpus (``dataset='embedded'``, the default): real English text shipped with the package.

``debian.jsonl``: 1,346 long descriptions of Debian bookworm packages from 8 archive sections
(games, science, sound, graphics, fonts, mail, database, math; the ``label``), one JSON object
per line with the package's ``id``. Each description is part of its Debian package and is
distributed under that package's licence, which Debian main requires to be free (the Debian
Free Software Guidelines: redistribution allowed); the licence of a description is in
``/usr/share/doc/<id>/copyright`` of the package, or at ``https://metadata.ftp-master.debian.org/changelogs/``.
Built by ``build.py`` from the Debian descriptions corpus (see ``LICENSE.md`` beside this file).
"""

from __future__ import annotations

from pathlib import Path

EMBEDDED = "embedded"
#: The file ``dataset='embedded'`` reads.
EMBEDDED_PATH = Path(__file__).with_name("debian.jsonl")


def resolve_dataset(dataset: str) -> str:
    """The path a ``dataset`` value names: the embedded corpus' file for ``'embedded'``, else the value."""
    return str(EMBEDDED_PATH) if dataset == EMBEDDED else dataset


__all__ = ["EMBEDDED", "EMBEDDED_PATH", "resolve_dataset"]
