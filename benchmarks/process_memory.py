"""Resident memory of a set of processes, for the benchmarks that measure Flower's engines."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def resident_bytes(pids: Sequence[int]) -> int:
    """Resident memory (``VmRSS``) of the processes ``pids`` together; a process gone meanwhile counts 0."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return total
