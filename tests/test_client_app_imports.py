"""What a ClientApp process imports to answer one message.

On Flower's deployment engine every message is a fresh ``flwr-clientapp`` process, so what the
ClientApp module and the message's handler import is paid at every message. A process that
imports the ClientApp and answers an ``lda`` round imports neither torch (nor what the neural
and private methods need) nor scipy.sparse (the party's document-term matrix, built for the
vocabulary agreement and evaluation only). Importing the ClientApp and parsing a run config
(every message does) imports no numba: only a message that runs a compiled kernel does. A
``dplda`` round whose release the party's guard already knows to fit (kept in its state from its
earlier messages) imports no privacy accountant (dp_accounting, autodp).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flower_topics.data.embedded import EMBEDDED_PATH

ROOT = Path(__file__).resolve().parents[1]

ANSWER_ONE_LDA_ROUND = r"""
import json, sys
import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from flower_topics.federation import client_app
from flower_topics.wire import lda as wire
from flower_topics.wire.agreement import join_words
from flower_topics.wire.protocol import ARRAYS, CONFIG, UPDATE, vocabulary_fingerprint

path, words = sys.argv[1], sys.argv[2].split()
context = Context(run_id=1, node_id=7, node_config={"dataset": path}, state=RecordDict(), run_config={})
fingerprint = vocabulary_fingerprint(words)
context.state[client_app.VOCABULARY_STATE] = ConfigRecord({"words": join_words(words), "fingerprint": fingerprint})
settings = wire.LDASettings(n_topics=4, alpha=0.1, beta=0.01, local_sweeps=1)
content = RecordDict({
    CONFIG: ConfigRecord({**settings.to_record(), "vocabulary": fingerprint, "server-round": 1,
                          "last-applied-round": 0}),
    ARRAYS: wire.counts_arrays(np.zeros((4, len(words)), dtype=np.int64)),
})
TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0  # as Flower sets them
message = Message(content=content, message_type="train.lda", dst_node_id=7, group_id="1")
message.metadata.__dict__["_message_id"] = "m1"
TaskIdentity.node_id = 7
reply = client_app.app(message, context)
assert not reply.has_error(), reply.error
TaskIdentity.node_id = 0
print(json.dumps({"keys": sorted(reply.content[UPDATE].keys()),
                  "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                                    ("torch", "opacus", "sentence_transformers", "sklearn", "matplotlib", "scipy"))}))
"""


def test_answering_an_lda_round_imports_no_torch_and_no_scipy_sparse(tmp_path):
    path = tmp_path / "party.jsonl"
    lines = EMBEDDED_PATH.read_text(encoding="utf-8").splitlines(keepends=True)[:40]
    path.write_text("".join(lines), encoding="utf-8")
    words = sorted({w for line in lines for w in json.loads(line)["text"].lower().split() if w.isalpha()})[:300]
    done = subprocess.run([sys.executable, "-c", ANSWER_ONE_LDA_ROUND, str(path), " ".join(words)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "FLOWER_TOPICS_CACHE_DIR": "off"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["keys"], result  # it did answer, with its count change
    modules = result["modules"]
    assert not [m for m in modules if m.split(".")[0] in ("torch", "opacus", "sentence_transformers", "sklearn",
                                                           "matplotlib")], modules
    assert "scipy.sparse" not in modules, [m for m in modules if m.startswith("scipy.sparse")][:5]


PARSE_A_CONFIG = r"""
import json, sys
from flower_topics.federation import client_app
from flower_topics.run.config import parse_run_config
from flower_topics.wire.fedlda import FedLDASettings

client_app.data_config({"method": "fedlda", "num-topics": 4, "fedlda.sampler": "mh"})
settings = FedLDASettings.from_record(parse_run_config({"method": "fedlda", "vocabulary": "/x/v.txt"}))
print(json.dumps({"sampler": settings.sampler,
                  "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite"))}))
"""

ANSWER_DPLDA_ROUNDS = r"""
import json, sys
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from flower_topics.federation import client_app
from flower_topics.wire import dplda as wire
from flower_topics.wire.agreement import join_words
from flower_topics.wire.protocol import ARRAYS, CONFIG, UPDATE, vocabulary_fingerprint

path, words, record, kept, first, last = sys.argv[1], sys.argv[2].split(), json.loads(sys.argv[3]), sys.argv[4], \
    int(sys.argv[5]), int(sys.argv[6])
context = Context(run_id=1, node_id=7, node_config={"dataset": path}, state=RecordDict(), run_config={})
fingerprint = vocabulary_fingerprint(words)
context.state[client_app.VOCABULARY_STATE] = ConfigRecord({"words": join_words(words), "fingerprint": fingerprint})
if first > 1:  # the party's own state after its earlier messages, as its SuperNode hands it to a new process
    with np.load(kept) as arrays:
        context.state["dplda-state"] = ArrayRecord({k: Array(arrays[k]) for k in arrays.files})
    context.state["dplda-state-meta"] = ConfigRecord({})
settings = wire.DPLDASettings.from_record(record)
lam = np.ones((settings.n_topics, len(words)), dtype=np.float32)
for server_round in range(first, last + 1):
    content = RecordDict({CONFIG: ConfigRecord({**settings.to_record(), "vocabulary": fingerprint,
                                                "server-round": server_round}),
                          ARRAYS: ArrayRecord({wire.LAMBDA_KEY: Array(lam)})})
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, server_round, 0  # as Flower sets them
    message = Message(content=content, message_type="train.dplda", dst_node_id=7, group_id=str(server_round))
    message.metadata.__dict__["_message_id"] = f"m{server_round}"
    TaskIdentity.node_id = 7
    reply = client_app.app(message, context)
    assert not reply.has_error(), reply.error
    TaskIdentity.node_id = 0
state = context.state["dplda-state"]
np.savez(kept, **{k: state[k].numpy() for k in state})
print(json.dumps({"keys": sorted(reply.content[UPDATE].keys()), "releases": int(state["releases"].numpy().shape[0]),
                  "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("dp_accounting", "autodp"))}))
"""


def _run(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "FLOWER_TOPICS_CACHE_DIR": "off"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_client_app_and_parsing_a_run_config_imports_no_numba():
    result = _run(PARSE_A_CONFIG)
    assert result["sampler"] == "gibbs"  # it did parse
    assert result["modules"] == [], result["modules"][:5]


def test_a_dplda_round_known_to_fit_imports_no_privacy_accountant(tmp_path):
    from flower_topics.run.config import parse_run_config
    from flower_topics.strategies.dplda import calibrated_settings
    from flower_topics.wire import dplda as wire

    path = tmp_path / "party.jsonl"
    lines = EMBEDDED_PATH.read_text(encoding="utf-8").splitlines(keepends=True)[:60]
    path.write_text("".join(lines), encoding="utf-8")
    words = sorted({w for line in lines for w in json.loads(line)["text"].lower().split() if w.isalpha()})[:300]
    config = parse_run_config({"method": "dplda", "num-rounds": 40, "num-topics": 4, "dplda.sample-rate": 0.5,
                               "vocabulary": "/x/v.txt", "federated-eval": False})
    record = json.dumps(dict(calibrated_settings(config).to_record()))
    kept = str(tmp_path / "state.npz")
    # messages 1-3 (the guard computes epsilons at 1, 2 and 3: it learns that 4 releases fit)
    first = _run(ANSWER_DPLDA_ROUNDS, str(path), " ".join(words), record, kept, "1", "3")
    assert first["releases"] == 3 and first["modules"], first  # an epsilon was computed: an accountant imported
    # message 4, in a fresh process from the party's state: known to fit, no epsilon, no accountant
    fourth = _run(ANSWER_DPLDA_ROUNDS, str(path), " ".join(words), record, kept, "4", "4")
    assert fourth["keys"] == [wire.STATISTIC_KEY] and fourth["releases"] == 4, fourth
    assert fourth["modules"] == [], fourth["modules"][:5]
