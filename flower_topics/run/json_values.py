"""Values of a run's state as JSON: what the checkpoint and the release journal write."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def plain_json(value: Any) -> Any:
    """JSON-ready: numpy scalars and arrays to Python, mapping keys to str."""
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value
