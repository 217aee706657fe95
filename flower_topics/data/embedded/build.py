"""Rebuild ``debian.jsonl`` from the Debian descriptions corpus (kept beside it, for provenance).

Run: ``python -m flower_topics.data.embedded.build /path/to/debian_descriptions/corpus.jsonl``.
Takes, with a fixed seed, up to :data:`PER_SECTION` descriptions of each section in
:data:`SECTIONS` (sections whose words differ, so that the topics of a short run read),
and keeps each package's id so that the licence of every description can be traced.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SECTIONS = ("games", "science", "sound", "graphics", "fonts", "mail", "database", "math")
PER_SECTION = 180
OUT = Path(__file__).with_name("debian.jsonl")


def build(source: Path, out: Path = OUT, seed: int = 0) -> int:
    """Write the embedded corpus; returns its number of documents."""
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = np.random.default_rng(seed)
    kept = []
    for section in SECTIONS:
        docs = [r for r in rows if r["label"] == section]
        pick = rng.permutation(len(docs))[:PER_SECTION]
        kept += [docs[i] for i in sorted(pick)]
    with out.open("w", encoding="utf-8") as fh:
        for r in kept:
            fh.write(json.dumps({"id": r["id"], "text": r["text"], "label": r["label"]}, ensure_ascii=False) + "\n")
    return len(kept)


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
