"""Checks a launcher makes before Flower starts, of what the ServerApp would otherwise refuse only after the
vocabulary agreement: seed words none of which can be in the vocabulary, and a ``dplda.public-corpus`` too small
for ``num-topics``.

What is known before the agreement decides how exact they are. A ``vocabulary`` file is the run's vocabulary, so
against it both checks are the ServerApp's own. A simulation's corpus is read before it starts, and the agreed
vocabulary (``union`` or ``private``) is drawn from its words: a seed word outside them cannot be agreed, and a
public corpus too small over them is too small over any vocabulary agreed from them, so these refusals are exact
too, while what passes may still be refused before round 1 (one line). Without either (a deployment, where each
party reads its own file) the ServerApp checks both before round 1.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from flower_topics.errors import UserInputError
from flower_topics.options import shown


def check_public_inputs(config: Mapping[str, Any], corpus_words: Sequence[str] | None = None) -> None:
    """Refuse, before anything starts, seed words none of which can be agreed and a public corpus too small for K.

    Parameters
    ----------
    config : Mapping
        A validated run config.
    corpus_words : sequence of str, optional
        A simulation's corpus' words (the words of its parties' shares), of which the agreed vocabulary is a
        subset; used when ``vocabulary`` is not a file. None: no check against words unless it is a file.

    Raises
    ------
    UserInputError
        One line: no seed word in the vocabulary file (or in the corpus' words), or a ``dplda.public-corpus``
        with fewer documents or tokens than ``num-topics`` needs over them.
    """
    from flower_topics.data.vocabulary_file import read_vocabulary_file
    from flower_topics.wire.agreement import MODES

    vocabulary = str(config["vocabulary"])
    if vocabulary not in MODES:
        words: Sequence[str] | None = read_vocabulary_file(vocabulary)
        over = f"the vocabulary file {shown(vocabulary, 200)}"
    else:
        words = corpus_words
        over = "the corpus' words (the agreed vocabulary is drawn from them)"
    if words is not None and str(config.get("seed-words", "")):
        check_seed_words(config, words, over)
    if str(config["method"]) == "dplda" and str(config.get("dplda.public-corpus", "")):
        from flower_topics.data.public_corpus import check_public_size, over_vocabulary, public_corpus

        public = public_corpus(config)()  # type: ignore[misc]
        if words is None:  # its own words: over any vocabulary it is at most this large
            check_public_size(public, int(config["num-topics"]), over="its own words")
        else:
            check_public_size(over_vocabulary(public, words), int(config["num-topics"]),
                              vocabulary_size=len(words), over=over)


def check_seed_words(config: Mapping[str, Any], words: Sequence[str], over: str) -> None:
    """Refuse a ``seed-words`` file none of whose words (lowercased when the corpus is) is in ``words``."""
    from flower_topics.models.seed_words import read_seed_lines

    lines = read_seed_lines(str(config["seed-words"]))
    seeds = list(dict.fromkeys(word.lower() if bool(config["lowercase"]) else word for line in lines
                               for word in line))
    known = set(words)
    if not any(word in known for word in seeds):
        raise UserInputError(f"seed-words: none of the {len(seeds)} seed words is in {over} ({len(words)} words; "
                             f"e.g. {', '.join(seeds[:5])}); nothing to guide the topics")


__all__ = ["check_public_inputs", "check_seed_words"]
