"""A deployment as on real hosts: TLS, SuperNode authentication, each party its own corpus.

One SuperLink (deployment engine) with TLS and ``--enable-supernode-auth`` and two
SuperNodes on 127.0.0.1, each authenticated by its own registered key pair and reading
its own raw-text JSONL file (different Debian sections, hence different vocabularies)
named in its ``--node-config``. Through this SuperLink, ``flwr run`` submits lda (2 rounds, the
``union`` vocabulary agreement), then fedlda and pctd (1 round each, on lda's agreed vocabulary as a
public file: the agreement's traffic and a second round are lda's to test, and each message here
costs a ClientApp process per SuperNode; pctd with its consistency term, R from the offline
embedding model), each scored by federated evaluation at the end, with a run config whose
``dataset`` does not exist: the server never opens a corpus. A third SuperNode whose key is not registered is refused.
Every process is stopped by its PID. See docs/real-hosts.md for the same on real hosts.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.simulations.local_superlink import submit
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics
from tests.test_e2e_flower import listening_addresses
from tests.deployment import (
    alive,
    descendants,
    list_supernodes,
    make_certificates,
    make_node_keys,
    register_supernode,
    run_log,
    tls_superlink,
    tls_supernode,
    wait_for_exit,
    wait_for_outputs,
    write_tls_connection,
)

ROOT = Path(__file__).resolve().parents[1]
DEBIAN = EMBEDDED_PATH  # the embedded corpus: 1,346 Debian descriptions of 8 sections (at least 104 in each)
PER_LABEL = 75  # documents per Debian section: 150 per party
PARTY_LABELS = {"a": ("games", "science"), "b": ("sound", "mail")}
NO_CORPUS = "/nonexistent/server-has-no-corpus"
AGREED = "agreed"  # fedlda and pctd read the vocabulary lda's run agreed on (its output's vocabulary.txt)
RUNS = {
    "lda": {"method": "lda", "num-rounds": 2},
    "fedlda": {"method": "fedlda", "num-rounds": 1, "vocabulary": AGREED},
    "pctd": {"method": "pctd", "num-rounds": 1, "vocabulary": AGREED, "pctd.consistency": 0.3},  # R: embeddings
}
COMMON = {"num-topics": 5, "min-nodes": 2, "eval-every": 2, "dataset": NO_CORPUS, "seed": 0}


def _party_file(directory: Path, labels: tuple[str, ...]) -> Path:
    """The first ``PER_LABEL`` documents of each of ``labels``, as raw-text JSONL."""
    taken = {label: 0 for label in labels}
    path = directory / f"{'-'.join(labels)}.jsonl"
    with DEBIAN.open(encoding="utf-8") as source, path.open("w", encoding="utf-8") as out:
        for line in source:
            doc = json.loads(line)
            if doc["label"] in taken and taken[doc["label"]] < PER_LABEL:
                taken[doc["label"]] += 1
                out.write(json.dumps({"id": doc["id"], "text": doc["text"], "label": doc["label"]}) + "\n")
    assert all(n == PER_LABEL for n in taken.values()), taken
    return path


def _raw_text(path: Path) -> str:
    return "\n".join(json.loads(line)["text"].lower() for line in path.read_text(encoding="utf-8").splitlines())


def _config(settings: dict, out: Path) -> str:
    items = {**COMMON, **settings, "output-dir": str(out)}
    if items.get("vocabulary") == AGREED:
        items["vocabulary"] = str(out.parent / "lda" / "vocabulary.txt")
    return " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in items.items())


def _check_run(name: str, out: Path, text_a: str, text_b: str) -> None:
    model = load_model(out / "model.npz")
    np.testing.assert_allclose(model.topic_word.sum(axis=1), 1.0, rtol=1e-6)
    words = (out / "vocabulary.txt").read_text(encoding="utf-8").split()
    assert list(model.vocabulary) == words and model.topic_word.shape == (5, len(words))
    # words that only one party has (not even as a substring of the other party's text)
    only_a = [w for w in words if w in text_a and w not in text_b]
    only_b = [w for w in words if w in text_b and w not in text_a]
    assert only_a and only_b, f"{name}: the vocabulary lacks one party's own words ({len(words)} words)"
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["round"] for r in rows] == list(range(1, RUNS[name]["num-rounds"] + 1))
    for key in ("perplexity", "npmi", "umass"):  # federated evaluation of the final model
        assert isinstance(rows[-1].get(key), (int, float)) and np.isfinite(rows[-1][key]), (name, key, rows[-1])
    assert rows[-1]["perplexity"] > 0 and rows[-1]["eval_parties"] == 2
    agreement = rows[0]["vocabulary_agreement"]
    assert agreement["nodes"] == 2 and agreement["words"] == len(words), agreement
    assert agreement["mode"] == ("file" if RUNS[name].get("vocabulary") == AGREED else "union"), agreement
    assert agreement["bytes_received"] > 0 and agreement["seconds"] >= 0, agreement
    if name in ("fedlda", "pctd"):
        assert rows[-1]["privacy"]["epsilon"] > 0, rows[-1]["privacy"]
    print(f"{name}: V={len(words)} (e.g. only A: {only_a[:3]}, only B: {only_b[:3]}), "
          f"perplexity {rows[-1]['perplexity']:.1f}, npmi {rows[-1]['npmi']:.3f}, "
          f"agreement {agreement['mode']} {agreement['seconds']}s, epsilon {rows[-1]['privacy'].get('epsilon')}")


@pytest.mark.timeout(900)
def test_tls_authenticated_deployment_each_party_its_own_corpus(tmp_path, monkeypatch, app_dir):
    started = time.monotonic()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    home, logs = tmp_path / "flwr-home", tmp_path / "logs"
    data = tmp_path / "data"
    data.mkdir()
    files = {party: _party_file(data, labels) for party, labels in PARTY_LABELS.items()}
    text_a, text_b = _raw_text(files["a"]), _raw_text(files["b"])
    certs = make_certificates(tmp_path / "certs")
    keys = {name: make_node_keys(tmp_path / "keys", name) for name in ("a", "b", "intruder")}
    pids: list[int] = []
    children: list[int] = []  # what Flower started below them (its SuperExec processes)
    statuses: dict[str, str] = {}
    listening: set[str] = set()

    with tls_superlink(home, certs, log_path=logs / "superlink.log") as (port, link):
        pids.append(link.pid)
        write_tls_connection(home, f"127.0.0.1:{port}", certs.ca)
        registered = {register_supernode(home, keys[p].public, ROOT, name=f"party-{p}") for p in ("a", "b")}
        assert len(registered) == 2

        # a SuperNode whose public key nobody registered is refused: it exits with status 1
        with tls_supernode(home, port, certs, keys["intruder"], "dataset='/nonexistent/x'",
                           log_path=logs / "intruder.log") as intruder:
            pids.append(intruder.pid)
            code = wait_for_exit(intruder, timeout=90)
        intruder_log = (logs / "intruder.log").read_text(errors="replace")
        assert code == 1, intruder_log[-2000:]
        assert "Failed to initialize the connection to the SuperLink" in intruder_log, intruder_log[-2000:]
        assert "Failed to activate SuperNode" in intruder_log, intruder_log[-2000:]

        node_config = {p: f"dataset='{files[p]}' text-column='text' label-column='label' lowercase=true "
                          f"stopwords='english'" for p in files}
        with tls_supernode(home, port, certs, keys["a"], node_config["a"], log_path=logs / "node-a.log") as node_a, \
             tls_supernode(home, port, certs, keys["b"], node_config["b"], log_path=logs / "node-b.log") as node_b:
            pids += [node_a.pid, node_b.pid]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # both registered SuperNodes online
                online = {int(n["node-id"]) for n in list_supernodes(home, ROOT) if n["status"] == "online"}
                if online >= registered:
                    break
                time.sleep(1.0)
            assert online >= registered, list_supernodes(home, ROOT)
            for name, settings in RUNS.items():
                run_started = time.monotonic()
                run_id = submit(app_dir, home, [_config(settings, tmp_path / name)])
                listening.update(listening_addresses())  # the SuperLink, the SuperNodes and their apps
                statuses[name] = wait_for_outputs(ROOT, home, run_id, tmp_path / name, [link, node_a, node_b],
                                                  timeout=240)
                print(f"{name}: run {run_id} {statuses[name]} in {time.monotonic() - run_started:.1f} s")
                assert statuses[name] == "finished:completed", (
                    f"{name}: {statuses[name]}\n--- flwr log {run_id} --show\n"
                    + run_log(home, run_id, ROOT)[-6000:]
                    + "\n--- node-a.log\n" + (logs / "node-a.log").read_text(errors="replace")[-3000:]
                )
            assert node_a.poll() is None and node_b.poll() is None
            children += [c for pid in (link.pid, node_a.pid, node_b.pid) for c in descendants(pid)]

    for name in RUNS:
        _check_run(name, tmp_path / name, text_a, text_b)
    assert listening and listening <= {"127.0.0.1", "::1"}, listening  # loopback only
    assert not Path(NO_CORPUS).exists()
    assert (tmp_path / "cache" / "flower-topics").is_dir()  # PC-TD's R was built (in the ServerApp)
    for pid in pids:  # each stopped by its PID when its context manager closed
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    deadline = time.monotonic() + 30  # Flower's SuperExec processes follow their parent (--parent-pid)
    while any(alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert children and not [c for c in children if alive(c)], children
    print(f"wall time of the TLS deployment test: {time.monotonic() - started:.1f} s")
