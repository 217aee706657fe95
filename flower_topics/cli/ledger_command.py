"""``flower-topics ledger FILE``: what a party's privacy ledger records as spent, per run and in total."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from flower_topics.errors import UserInputError
from flower_topics.privacy.ledger import APPROX_DP, Entry, compose, read_ledger


def add_command(sub: Any) -> None:
    """Add ``ledger`` to the ``flower-topics`` subparsers ``sub``."""
    led = sub.add_parser(
        "ledger", help="print what a party's privacy ledger (node config privacy-ledger) has spent",
        description="Print a party's privacy ledger: per run (run id, its ledger session, method, releases) the "
        "epsilon per document of that run's releases, and per set of documents the total of every run composed "
        "(the accountant that calibrates dplda), at the ledger's lifetime-delta. A damaged ledger is one line "
        "and exit status 2.")
    led.add_argument("file", help="the ledger file (a party's privacy-ledger)")
    led.add_argument("--delta", type=float, default=None, help="the delta to report epsilon at (default: the "
                     "ledger's lifetime-delta)")


def _releases(entries: list[Entry]) -> str:
    kinds = Counter()
    for e in entries:
        r = e.release
        key = (f"eps {r.epsilon:g}, delta {r.delta:g}" if r.mechanism == APPROX_DP else
               f"{r.mechanism} sigma {r.noise_multiplier:.4g} q {r.sample_rate:g}")
        kinds[key] += 1 if r.mechanism == APPROX_DP else r.steps
    return "; ".join(f"{count} x {key}" for key, count in kinds.items())


def run(args: argparse.Namespace) -> int:
    """Print the ledger ``args.file``; 0, or :class:`UserInputError` (one line) for a damaged one."""
    if not Path(args.file).is_file():
        raise UserInputError(f"{args.file}: no ledger there (a party's privacy-ledger file)")
    ledger = read_ledger(args.file)
    delta = args.delta if args.delta is not None else (ledger.delta or 1e-5)
    if not 0 < delta < 1:
        raise UserInputError(f"--delta {delta:g} must be in (0, 1)")
    cap = f"cap eps {ledger.epsilon:g}" if ledger.epsilon else "no cap recorded"
    print(f"privacy ledger {args.file}: {len(ledger.entries)} releases; {cap}; epsilon per document at delta {delta:g}")
    for documents in ledger.fingerprints():
        mine = [e for e in ledger.entries if e.documents == documents]
        print(f"documents {documents}")
        runs: dict[tuple[int, str], list[Entry]] = {}
        for e in mine:
            runs.setdefault((e.run, e.session), []).append(e)
        for (run_id, session), entries in runs.items():
            methods = ", ".join(dict.fromkeys(e.method for e in entries))
            eps = compose([e.release for e in entries], delta)
            print(f"  run {run_id} (session {session}) {methods}: eps {eps:.4g} ({_releases(entries)})")
        total = compose([e.release for e in mine], delta)
        left = f", {max(ledger.epsilon - total, 0.0):.4g} left of the cap" if ledger.epsilon else ""
        print(f"  total: eps {total:.4g} over {len(runs)} runs, composed{left}")
    return 0
