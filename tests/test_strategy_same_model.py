"""The same seeded in-process run of every method gives the same replies and the same model as the
reference recorded in ``tests/fixtures/strategy_digests.json``.

Each method runs :data:`CONFIG` (three parties, three rounds, federated evaluation: rounds 1 and 2
scored inside the next round's training messages, round 3 by its own ``evaluate`` message) on the
in-process grid; every training reply a party sends (without the evaluation it may carry), the
final model's arrays and every round's metrics row but its wall time are reduced to SHA-256 digests
of their keys, dtypes, shapes and bytes, and compared with the fixture's, array for array.
``secure-lda`` runs ``lda`` under secure aggregation: its masked replies are drawn from OS entropy,
so only their layout is compared, and the unmasked sums must give the same model.

The methods with a privacy mechanism (``fedlda``, ``pctd``, ``ftm``, ``ntm``'s batches, ``dplda``)
draw their randomness from the party's secret seed: each node is given a ``secret-seed`` and the
run's nonce (:func:`~flower_topics.federation.client_app.run_nonce`, OS entropy) is fixed, so their
noise repeats too and their replies are compared value for value.

The fixture holds what the code gave when it was recorded. A change that is meant to change a
method's replies or model regenerates it, from the repository root::

    python -m tests.test_strategy_same_model [RUN ...]

(all runs, or only the named ones of :data:`RUNS`)
and says so in its commit; a change that is not (a refactoring) must leave this test green.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import RecordDict

from flower_topics.federation import client_app
from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server
from flower_topics.run.outputs import read_metrics
from flower_topics.topic_model.model_file import load_model
from flower_topics.simulations.inprocess import InProcessGrid
from tests.test_apps_inprocess import SMALL, spying

FIXTURE = Path(__file__).parent / "fixtures" / "strategy_digests.json"
CONFIG = {**SMALL, "num-rounds": 3, "pctd.consistency": 0.0}
#: run name -> run config entries beyond CONFIG
RUNS = {
    "lda": {"method": "lda"},
    "fedlda": {"method": "fedlda"},
    "fedlda-public-length": {"method": "fedlda", "fedlda.pad-length": 40},
    "pctd": {"method": "pctd"},
    "ftm": {"method": "ftm"},
    "ntm": {"method": "ntm"},
    "dplda": {"method": "dplda", "federated-eval": False},  # with a public vocabulary file (run_digests)
    "secure-lda": {"method": "lda", "secure-aggregation": True, "federated-eval": False},
}
#: runs whose reply values come from OS entropy (secure-sum masks): only their layout is compared
NOISY_REPLIES = {"secure-lda"}
#: keys of a metrics row that are clock readings
CLOCK = {"wall_time", "seconds"}


def _fixed_nonce(context: object) -> int:
    return 20240601


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()[:20]


def _array_digest(array: np.ndarray, values: bool) -> str:
    array = np.ascontiguousarray(array)
    return _digest(str(array.dtype), array.shape, array.tobytes() if values else b"")


def _content_digest(content: RecordDict, values: bool) -> dict[str, str]:
    out = {}
    for name, record in sorted(content.array_records.items()):
        for key, array in sorted(record.items()):
            out[f"{name}/{key}"] = _array_digest(array.numpy(), values)
    for name, record in sorted(content.metric_records.items()):
        out[name] = _digest(sorted(record.items()))
    for name, record in sorted(content.config_records.items()):
        out[name] = _digest(sorted(record.items()))
    return out


def _without_clock(value: object) -> object:
    if isinstance(value, dict):
        return {key: _without_clock(item) for key, item in value.items() if key not in CLOCK}
    return value


def run_digests(name: str, directory: Path) -> dict[str, object]:
    """The digests of one run of :data:`RUNS` (its outputs under ``directory``); the caller fixes
    :func:`~flower_topics.federation.client_app.run_nonce` (see the module docstring)."""
    config = {**CONFIG, **RUNS[name], "output-dir": str(directory)}
    if config["method"] == "dplda":  # an accounted or public vocabulary only: the synthetic corpus' words
        vocabulary = directory.parent / f"{name}-vocabulary.txt"
        vocabulary.parent.mkdir(parents=True, exist_ok=True)
        vocabulary.write_text("\n".join(f"w{i:04d}" for i in range(CONFIG["synthetic-vocab-size"])) + "\n")
        config["vocabulary"] = str(vocabulary)
    client, seen = spying(make_client_app(config))
    nodes = [{"partition-id": i, "num-partitions": 3, "secret-seed": 11 + i} for i in range(3)]
    run_server(InProcessGrid(client, nodes, config), config)
    saved = load_model(directory / "model.npz")
    rows = [_without_clock(row) for row in read_metrics(directory / "metrics.jsonl")]
    return {
        "replies": [_content_digest(content, name not in NOISY_REPLIES) for content in seen],
        "model": _array_digest(np.asarray(saved.topic_word), True),
        "metrics": [_digest(json.dumps(row, sort_keys=True)) for row in rows],
    }


@pytest.mark.parametrize("name", list(RUNS))
def test_a_seeded_run_gives_the_recorded_replies_and_model(tmp_path, monkeypatch, name):
    monkeypatch.setattr(client_app, "run_nonce", _fixed_nonce)
    expected = json.loads(FIXTURE.read_text())[name]
    got = run_digests(name, tmp_path / name)
    assert len(got["replies"]) == len(expected["replies"])
    for index, (reply, want) in enumerate(zip(got["replies"], expected["replies"])):
        assert reply == want, f"{name}: training reply {index} differs"
    assert got["model"] == expected["model"], f"{name}: the final model differs"
    assert got["metrics"] == expected["metrics"], f"{name}: a round's metrics differ"


if __name__ == "__main__":  # regenerate the fixture (see the module docstring)
    import tempfile

    client_app.run_nonce = _fixed_nonce
    import sys

    names = sys.argv[1:] or list(RUNS)  # some runs only: the others' digests are kept
    digests = json.loads(FIXTURE.read_text()) if FIXTURE.exists() and sys.argv[1:] else {}
    with tempfile.TemporaryDirectory() as scratch:
        digests.update({name: run_digests(name, Path(scratch) / name) for name in names})
    FIXTURE.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
