"""The floor: a ServerApp that sends every node one message of ``send-bytes`` a round, and a ClientApp that
does nothing but answer with ``reply-bytes``.

Each round is one exchange, as a round of ``lda`` is: the server pushes one message to each node and
pulls the replies every 0.2 s (what flower-topics' ServerApp does, ``flower_topics.federation.grids``).
The ServerApp writes ``metrics.jsonl`` (one line a round: ``round``, ``wall_time``) into ``output-dir``;
the ClientApp appends its timings to ``$FLOWER_TOPICS_TIMINGS`` as flower-topics' ClientApp does
(``flower_topics.federation.message_timing``), with code of its own so that it imports Flower and numpy only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()
POLL_INTERVAL = 0.2


def _started() -> float | None:
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@client.train()
def answer(msg: Message, context: Context) -> Message:
    """Reply with ``reply-bytes`` bytes, and nothing else."""
    handler_started = time.time()
    size = int(msg.content["config"]["reply-bytes"])
    reply = Message(RecordDict({"update": ArrayRecord({"x": Array(np.zeros(size, dtype=np.uint8))})}), reply_to=msg)
    path = os.environ.get("FLOWER_TOPICS_TIMINGS")
    if path:
        now, started, times = time.time(), _started(), os.times()
        line = {"message": "floor", "pid": os.getpid(), "time": now,
                "since_start": None if started is None else now - started, "cpu": times.user + times.system,
                "before_handler": None if started is None else handler_started - started,
                "handler": now - handler_started, "stages": {}}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    return reply


@server.main()
def main(grid: Grid, context: Context) -> None:
    """``num-rounds`` exchanges with every node, each timed."""
    config = context.run_config
    rounds, wanted = int(config["num-rounds"]), int(config["min-nodes"])
    send, reply = int(config["send-bytes"]), int(config["reply-bytes"])
    out = Path(str(config["output-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 120
    nodes = sorted(grid.get_node_ids())
    while len(nodes) < wanted and time.monotonic() < deadline:
        time.sleep(0.5)
        nodes = sorted(grid.get_node_ids())
    if len(nodes) < wanted:
        raise RuntimeError(f"only {len(nodes)} of {wanted} nodes connected")
    started = time.time()
    rows = []
    for server_round in range(1, rounds + 1):
        messages = [Message(RecordDict({"arrays": ArrayRecord({"x": Array(np.ones(send, dtype=np.uint8))}),
                                        "config": ConfigRecord({"reply-bytes": reply})}),
                            dst_node_id=node, message_type="train") for node in nodes]
        waiting = {mid for mid in grid.push_messages(messages) if mid}
        replies = []
        while waiting:
            arrived = list(grid.pull_messages(waiting))
            replies.extend(arrived)
            waiting.difference_update(m.metadata.reply_to_message_id for m in arrived)
            if waiting:
                time.sleep(POLL_INTERVAL)
        failed = [m.error.reason for m in replies if m.has_error()]
        if failed:
            raise RuntimeError(f"round {server_round}: {failed[0]}")
        rows.append({"round": server_round, "wall_time": time.time() - started})
    (out / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
