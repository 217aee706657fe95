"""What a ClientApp process imports to answer one ``lda`` training message.

On Flower's deployment engine every message is a fresh ``flwr-clientapp`` process, so what the
ClientApp module and the message's handler import is paid at every message. A process that
imports the ClientApp and answers an ``lda`` round imports neither torch (nor what the neural
and private methods need) nor scipy.sparse (the party's document-term matrix, built for the
vocabulary agreement and evaluation only).
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
