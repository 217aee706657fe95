"""The ``flower-topics-superlink`` command: check a ``flwr run`` command, run it against a private local
SuperLink (or an existing one), and exit non-zero unless the run completed
(:func:`flower_topics.simulations.local_superlink.with_superlink`)."""

from __future__ import annotations

import sys
from typing import Sequence

from flower_topics.simulations.local_superlink import with_superlink


def main(argv: Sequence[str] | None = None) -> int:
    """``flower-topics-superlink [--supernodes N [--node-set KEY=VALUE ...] | --connection NAME] flwr run . [flwr
    options]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="flower-topics-superlink",
        description="Check a flwr run command's --run-config (one line per error, exit 2), run it against a "
        "private local SuperLink (free port, offline) or, with --connection, an existing one (real hosts), "
        "and exit non-zero unless the run completed.",
    )
    parser.add_argument("--supernodes", type=int, default=5, help="simulated SuperNodes (default 5)")
    parser.add_argument("--connection", metavar="NAME", default=None,
                        help="use this existing SuperLink connection of $FLWR_HOME/config.toml (real hosts, "
                        "docs/real-hosts.md) instead of starting a SuperLink; name it in the flwr command too")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the run")
    parser.add_argument("--node-set", action="append", metavar="KEY=VALUE", default=[],
                        help="a node-config key every simulated party gets ({partition} in a value becomes its "
                        "partition id; see flower-topics simulate --node-set): the parties then run as SuperNodes "
                        "of a local deployment SuperLink, as Flower's simulation engine takes no node config")
    parser.add_argument("--verbose", action="store_true", help="print Flower's own lines too")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="e.g. flwr run . --stream")
    args = parser.parse_args(argv)
    if not args.command:
        parser.error("give the command to run, e.g. flwr run . --stream")
    node_configs = None
    if args.node_set:
        from flower_topics.errors import UserInputError
        from flower_topics.run.config import parse_assignments
        from flower_topics.simulations.node_configs import check_party_files, node_config_text, party_node_configs

        if args.connection:
            parser.error("--node-set gives simulated parties their node config; on real hosts each SuperNode "
                         "sets its own (flower-supernode --node-config)")
        try:
            assignments = parse_assignments(args.node_set)
            if "dataset" in assignments:  # the pre-flight checks read the run config's dataset
                raise UserInputError("--node-set dataset: here the parties share the run config's dataset; for a "
                                     "file of each party's own use flower-topics simulate --node-set dataset=...")
            nodes = party_node_configs(assignments, args.supernodes)
            check_party_files(nodes)
        except UserInputError as exc:
            print(f"flower-topics: error: {exc}", file=sys.stderr)
            return 2
        node_configs = [node_config_text(node) for node in nodes]
    return with_superlink(args.command, num_supernodes=args.supernodes, timeout=args.timeout, verbose=args.verbose,
                          connection=args.connection, node_configs=node_configs)


if __name__ == "__main__":
    sys.exit(main())
