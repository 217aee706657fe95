"""A public vocabulary file (``vocabulary`` = a path): the run's vocabulary, read by the ServerApp and by a launcher's
checks before anything starts."""

from __future__ import annotations

from pathlib import Path

from flower_topics.errors import UserInputError


def read_vocabulary_file(path: str) -> tuple[str, ...]:
    """A public vocabulary file: one word per line (blank lines ignored), no duplicates."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserInputError(f"vocabulary {path!r} is neither union, private nor a readable file (one word per line)")
    try:
        words = [w.strip() for w in file.read_text(encoding="utf-8").splitlines() if w.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"vocabulary file {path!r} cannot be read: {exc}") from None
    if len(set(words)) != len(words):
        raise UserInputError(f"vocabulary file {path!r} lists some words more than once")
    return tuple(words)


__all__ = ["read_vocabulary_file"]
