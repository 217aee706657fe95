"""The English stopword list: scikit-learn's, read without importing scikit-learn."""

from __future__ import annotations

import subprocess
import sys

from flower_topics.data.preprocessing import stopword_list


def test_the_english_list_is_scikit_learns():
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    assert stopword_list("english") == frozenset(ENGLISH_STOP_WORDS) and len(ENGLISH_STOP_WORDS) > 300


def test_reading_it_does_not_import_scikit_learn():
    # every message on the deployment engine starts a ClientApp process that preprocesses the party's texts again:
    # importing scikit-learn there cost about 3 s of CPU a message
    code = ("import sys; from flower_topics.data.preprocessing import stopword_list; "
            "words = stopword_list('english'); print(len(words), 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [str(len(stopword_list("english"))), "False"], out.stdout + out.stderr
