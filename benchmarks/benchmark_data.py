"""Where the benchmarks find their corpora: ``FLOWER_TOPICS_DATASETS``, else ``../shared/datasets``.

The benchmark corpora (BBC_News, M10, debian_descriptions, debian_large, pypi_summaries;
docs/reproducing.md says what each is and where it comes from) are never copied into the
repository. Point the benchmarks at your copy with ``FLOWER_TOPICS_DATASETS=/path/to/datasets``;
unset, they read ``shared/datasets`` next to the repository root. Named ``benchmark_data`` (not
``datasets``) so that it never shadows the HuggingFace ``datasets`` package.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = Path(os.environ.get("FLOWER_TOPICS_DATASETS", ROOT.parent / "shared" / "datasets"))
