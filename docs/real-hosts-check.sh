#!/usr/bin/env bash
# Run docs/real-hosts.md as written, on one machine: every host is 127.0.0.1 (SERVER_HOST=localhost).
#
#   docs/real-hosts-check.sh            # from the project directory, in its virtual environment
#
# The server, the two parties and the user each get a temporary folder; the commands are the
# guide's (the openssl CA and certificate, `mkdir -p state` + flower-superlink with TLS and
# SuperNode authentication, `mkdir -p keys` + ssh-keygen, the connection entry, flwr supernode
# register/list, two flower-supernode with their own small files, one short lda run through
# `flower-topics-superlink --connection topics`, then `flwr ls topics --run-id ID`). Differences
# from real hosts, and only these: --host 127.0.0.1 instead of 0.0.0.0, free ports instead of
# 9093/9094, 2 rounds. Every process is started in its own process group and stopped by its PID
# (TERM, then KILL); every wait is bounded. Exit status 0 only if the run's final status is
# finished:completed and its outputs are on the server; KEEP=1 keeps the folders.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${VIRTUAL_ENV:-}" && -f "$ROOT/.venv/bin/activate" ]]; then . "$ROOT/.venv/bin/activate"; fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/real-hosts-check.XXXXXX")"
STARTED=$SECONDS
PIDS=()

descendants() {  # descendants PID: the PIDs below it (Flower's SuperExec runs in a session of its own)
    local child
    for child in $(pgrep -P "$1" || true); do echo "$child"; descendants "$child"; done
}

cleanup() {
    local status=$? pid below=()
    for pid in "${PIDS[@]}"; do below+=($(descendants "$pid")); done
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}" "${below[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    if [[ $status -ne 0 ]]; then
        for log in "$WORK"/server/superlink.log "$WORK"/party-*/supernode.log; do
            [[ -f "$log" ]] && { echo "--- last lines of $log"; tail -n 15 "$log"; }
        done
    fi
    if [[ "${KEEP:-0}" == 1 ]]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi
    echo "real-hosts-check: $([[ $status -eq 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - STARTED)) s"
}
trap cleanup EXIT

fail() { echo "real-hosts-check: $*" >&2; exit 1; }
free_port() { python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {  # wait_port PORT PID SECONDS: until something listens on 127.0.0.1:PORT
    local deadline=$((SECONDS + $3))
    until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
        kill -0 "$2" 2>/dev/null || fail "process $2 exited before listening on $1"
        ((SECONDS < deadline)) || fail "nothing listened on 127.0.0.1:$1 within $3 s"
        sleep 0.3
    done
}
start() {  # start LOG COMMAND...: in its own process group, its PID recorded
    local log=$1; shift
    setsid "$@" >"$log" 2>&1 &
    PIDS+=($!)
}

export FLWR_HOME="$WORK/user/flwr-home"            # the user's flwr configuration (default ~/.flwr)
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_DISABLE_UPDATE_CHECK=1
PORT=$(free_port)                                   # the guide's 9093
mkdir -p "$WORK/server" "$WORK/user" "$WORK/party-a" "$WORK/party-b"

echo "== 1. the server: certificates"
cd "$WORK/server"
SERVER_HOST=localhost
SERVER_IP=127.0.0.1
mkdir -p certs && cd certs
openssl req -x509 -newkey rsa:4096 -sha256 -days 365 -nodes \
  -keyout ca.key -out ca.crt -subj "/CN=flower-topics CA" 2>/dev/null
openssl req -newkey rsa:4096 -sha256 -nodes \
  -keyout server.key -out server.csr -subj "/CN=$SERVER_HOST" 2>/dev/null
cat > server.ext <<EXT
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:$SERVER_HOST, IP:$SERVER_IP, IP:127.0.0.1
EXT
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -days 365 -sha256 -extfile server.ext -out server.pem 2>/dev/null
openssl verify -CAfile ca.crt server.pem     # server.pem: OK
cd ..

echo "== 2. the server: the SuperLink on 127.0.0.1:$PORT"
mkdir -p state
start superlink.log flower-superlink \
  --ssl-ca-certfile certs/ca.crt --ssl-certfile certs/server.pem --ssl-keyfile certs/server.key \
  --enable-supernode-auth \
  --host 127.0.0.1 --port "$PORT" \
  --database state/superlink.db \
  --disable-runtime-dependency-installation
wait_port "$PORT" "${PIDS[-1]}" 60

echo "== 3. each party: its key pair, the CA certificate, its own file"
for party in a b; do
    cd "$WORK/party-$party"
    mkdir -p keys
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "party-$party" -f "keys/party-$party"
    mkdir -p certs && cp "$WORK/server/certs/ca.crt" certs/       # ca.crt is public
    cp "keys/party-$party.pub" "$WORK/user/"                       # only the public key leaves
done
# two small files of real text (the package's embedded Debian descriptions), other sections each
python - "$WORK" <<'PY'
import json, sys
from pathlib import Path
from flower_topics.data.embedded import EMBEDDED_PATH
work, sections = Path(sys.argv[1]), {"a": ("games", "science"), "b": ("sound", "graphics")}
docs = [json.loads(line) for line in EMBEDDED_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
for party, labels in sections.items():
    mine = [d for label in labels for d in [d for d in docs if d.get("label") == label][:40]]
    with (work / f"party-{party}" / "notes.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps({"text": d["text"], "label": d["label"]}) + "\n" for d in mine)
PY

echo "== 4. the user: the connection entry and the registrations"
cd "$WORK/user"
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "local"

[superlink.local]
address = ":local:"
TOML
# what flwr writes on first use (above); the guide's entry, root-certificates an absolute path:
cat >> "$FLWR_HOME/config.toml" <<TOML

[superlink.topics]
address = "$SERVER_HOST:$PORT"
root-certificates = "$WORK/server/certs/ca.crt"
TOML
flwr supernode register party-a.pub topics --name party-a
flwr supernode register party-b.pub topics --name party-b
flwr supernode list topics

echo "== 5. each party: its SuperNode, with its own file"
for party in a b; do
    cd "$WORK/party-$party"
    node_port=$(free_port)                          # the guide's 9094; two SuperNodes share this host
    start supernode.log flower-supernode \
      --superlink "$SERVER_HOST:$PORT" \
      --root-certificates certs/ca.crt \
      --auth-supernode-private-key "keys/party-$party" \
      --port "$node_port" \
      --node-config "dataset='$WORK/party-$party/notes.jsonl' text-column='text' label-column='label' lowercase=true stopwords='english' corpus-cache='$WORK/party-$party/cache'"
    wait_port "$node_port" "${PIDS[-1]}" 60
done
cd "$WORK/user"
deadline=$((SECONDS + 90))
until [[ $(flwr supernode list topics --format json | python -c \
          'import json, sys; print(sum(n["status"] == "online" for n in json.load(sys.stdin)["nodes"]))') == 2 ]]; do
    ((SECONDS < deadline)) || fail "the two SuperNodes did not come online within 90 s"
    sleep 1
done
flwr supernode list topics

echo "== 6. the user: a run, and its final status"
cd "$ROOT"                                          # the project directory (the Flower app)
OUT="$WORK/server/runs/lda"                         # a directory on the server
# a bad run config is one line before anything is submitted
if bad=$(flower-topics-superlink --connection topics flwr run . topics --run-config "method='lda' epsilon=1" 2>&1); then
    fail "an unknown key was accepted"
fi
[[ $(printf '%s\n' "$bad" | grep -c .) == 1 && "$bad" == "flower-topics: error: unknown run-config key(s) epsilon"* ]] \
    || fail "an unknown key should give one line, got: $bad"
echo "$bad"
timeout 420 flower-topics-superlink --connection topics --timeout 360 flwr run . topics --stream \
  --run-config "method='lda' num-topics=5 num-rounds=2 min-nodes=2 eval-every=2 output-dir='$OUT'" \
  | tee "$WORK/user/run.log"
run_id=$(sed -n 's/^flower-topics: run \([0-9]*\) finished:completed$/\1/p' "$WORK/user/run.log")
[[ -n "$run_id" ]] || fail "no completed run"
status=$(flwr ls topics --run-id "$run_id" --format json | python -c 'import json, sys; print(json.load(sys.stdin)["runs"][0]["status"])')
echo "flwr ls topics --run-id $run_id: $status"
[[ "$status" == finished:completed ]] || fail "run $run_id: $status"
for file in model.npz vocabulary.txt topics.txt metrics.jsonl; do
    [[ -f "$OUT/$file" ]] || fail "the run wrote no $file on the server"
done
python - "$OUT" <<'PY'
import sys
from flower_topics.topic_model.model_file import load_model
metadata = load_model(f"{sys.argv[1]}/model.npz").metadata
assert metadata["run_config"]["dataset"] == "the parties' own files (node config)", metadata["run_config"]["dataset"]
print("model.npz: trained on", metadata["run_config"]["dataset"], "| vocabulary:",
      metadata["vocabulary_agreement"]["words"], "words from", metadata["vocabulary_agreement"]["nodes"], "parties")
PY
