"""Where the benchmarks find their corpora: the folder named by ``FLOWER_TOPICS_DATASETS``.

The benchmark corpora (BBC_News, M10, debian_descriptions, debian_large, pypi_summaries;
docs/reproducing.md says what each is, where it comes from and how to lay it out) are never
copied into the repository. Point the benchmarks at your copy with
``FLOWER_TOPICS_DATASETS=/path/to/datasets``; a benchmark's default corpus is a name under that
folder (unset, ``shared/datasets`` next to the repository's folder). Named ``benchmark_data`` (not
``datasets``) so that it never shadows the HuggingFace ``datasets`` package.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = Path(os.environ.get("FLOWER_TOPICS_DATASETS", ROOT.parent / "shared" / "datasets"))

LAYOUT = {
    "BBC_News": ("corpus.tsv", "vocabulary.txt", "metadata.json"),
    "M10": ("corpus.tsv", "vocabulary.txt", "metadata.json"),
    "debian_descriptions": ("corpus.jsonl",),
    "debian_large": ("corpus.jsonl",),
    "pypi_summaries": ("corpus.jsonl",),
}
"""Each corpus folder under ``DATASETS`` and its files (docs/reproducing.md says where each comes from)."""


def dataset_path(value: str) -> Path:
    """A ``--dataset`` value as a path: a path (a relative one from the working directory), else a corpus name.

    Parameters
    ----------
    value : str
        A file or folder (``runs/split/private.jsonl``, ``$FLOWER_TOPICS_DATASETS/BBC_News``), or
        the name of a corpus under :data:`DATASETS` (``BBC_News``, ``debian_large``).

    Returns
    -------
    Path
        The path that exists; for a corpus name, its folder, or its ``corpus.jsonl`` where that is
        the corpus' one file.

    Raises
    ------
    SystemExit
        With one line, when neither exists.
    """
    path = Path(value).expanduser()
    if path.exists():
        return path
    if len(path.parts) == 1 and (DATASETS / value).exists():
        return DATASETS / value / "corpus.jsonl" if LAYOUT.get(value) == ("corpus.jsonl",) else DATASETS / value
    named = f", nor a corpus named so under FLOWER_TOPICS_DATASETS ({DATASETS})" if len(path.parts) == 1 else ""
    raise SystemExit(f"--dataset {value}: no such file or folder ({path.absolute()}){named}")
