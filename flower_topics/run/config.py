"""The run configuration: every key, its default, its type and its valid range.

Options every method shares (what to run, data, partitioning, federation, evaluation)
are declared here (:data:`GLOBAL_OPTIONS`); each method's own options live in its wire
module and appear under its name (``fedlda.epsilon``, ``pctd.sigma``), read from the
registry (:mod:`flower_topics.methods`). In ``pyproject.toml`` they are the tables
``[tool.flwr.app.config.<method>]``, which Flower flattens into the dotted keys.

One schema serves the Flower run config (``flwr run --run-config``), the ``--set``
options of ``flower-topics simulate`` and the Python API. :func:`parse_run_config`
fills in defaults (``flwr.simulation.run_simulation`` passes an empty run config),
coerces types and rejects unknown keys and out-of-range values with a one-line
:class:`~flower_topics.errors.UserInputError`.
"""

from __future__ import annotations

import difflib
from types import MappingProxyType
from typing import Any, Iterator, Mapping

from flower_topics.data.partition import SCHEMES as PARTITION_SCHEMES
from flower_topics.data.periods import PERIODS, period_grid
from flower_topics.data.readers import DATE_COLUMN_HELP
from flower_topics.data.synthetic import years_problem
from flower_topics.errors import UserInputError
from flower_topics.methods import BUILT_IN, METHODS, all_node_options, get_method
from flower_topics.models.seed_words import SEED_WEIGHT
from flower_topics.options import (
    ConfigValue, Option, at_least, coerce, in_range, one_of, positive, positive_finite, shown,
)


def _min_df(v: Any) -> str | None:
    return None if (0 < v < 1) or (v >= 1 and float(v).is_integer()) else (
        "must be a fraction in (0, 1) or a whole document count >= 1"
    )


def _max_df(v: Any) -> str | None:
    return None if (0 < v <= 1) or (v > 1 and float(v).is_integer()) else (
        "must be a fraction in (0, 1] or a whole document count > 1"
    )


def _count_or_fraction(v: Any) -> str | None:
    return None if (0 < v < 1) or (v >= 1 and float(v).is_integer()) else (
        "must be a fraction in (0, 1) or a whole count >= 1"
    )


#: The options every method shares.
GLOBAL_OPTIONS: Mapping[str, Option] = MappingProxyType(
    {
        # --- what to run
        "method": Option("lda", "topic modeling method (see the methods table)",
                         lambda v: None if v in METHODS else f"must be one of {', '.join(METHODS)}"),
        "num-topics": Option(10, "number of topics K", at_least(1)),
        "num-rounds": Option(20, "number of federated rounds", at_least(1)),
        "seed": Option(0, "the one seed every random choice flows from", at_least(0)),
        "output-dir": Option(
            "runs/latest", "directory the run writes its outputs into (absolute, or relative to the working directory)"
        ),
        "resume": Option(
            "", "output directory of an interrupted (or finished) run to continue from its last complete round: its "
            "checkpoint.npz; only num-rounds, output-dir, verbose, eval-every and checkpoint-interval may differ ('' = a new run)"
        ),
        # --- data
        "dataset": Option(
            "embedded",
            "'embedded' (real text shipped with the package: Debian package descriptions), 'synthetic' (a "
            "generated LDA corpus with known topics) or a path: OCTIS folder, .jsonl, .csv or folder of .txt files",
        ),
        "text-column": Option("text", "text column of a .jsonl/.csv corpus"),
        "label-column": Option("label", "label column of a .jsonl/.csv corpus (optional in the file)"),
        "date-column": Option("", DATE_COLUMN_HELP),
        "lowercase": Option(True, "lowercase raw text before tokenizing"),
        "stopwords": Option("english", "stopword list for raw text: english or none", one_of("english", "none")),
        "min-df": Option(2.0, "drop words in fewer documents (count >= 1, or fraction < 1)", _min_df),
        "max-df": Option(0.5, "drop words in more documents (fraction <= 1, or count > 1)", _max_df),
        "max-vocab": Option(0, "keep at most this many words, by document frequency (0 = no cap)", at_least(0)),
        "min-doc-length": Option(1, "drop documents with fewer tokens after preprocessing", at_least(1)),
        "heldout-fraction": Option(0.1, "share of each party's documents held out for evaluation (a corpus with its "
                                   "own split, e.g. OCTIS, keeps it)", in_range(0, 1, low_open=True, high_open=True)),
        # --- vocabulary agreement (before round 1)
        "vocabulary": Option("union", "how the parties agree on the vocabulary: union (candidate words and document "
                             "frequencies), private (differentially private set union) or the path of a public "
                             "vocabulary file (one word per line)"),
        "vocabulary-epsilon": Option(4.0, "private vocabulary: epsilon per document", positive),
        "vocabulary-delta": Option(1e-6, "private vocabulary: delta per document",
                                   in_range(0, 1, low_open=True, high_open=True)),
        "vocabulary-max-words": Option(20, "private vocabulary: distinct words a document contributes at most "
                                       "(Delta_0)", at_least(1)),
        "vocabulary-candidates": Option("", "private vocabulary under secure aggregation: a public file of candidate "
                                        "words, one per line ('' = the 21,719 words of the MiniLM tokenizer)"),
        "vocabulary-noise": Option("gaussian", "private vocabulary: noise of the set union", one_of("gaussian",
                                                                                                    "laplace")),
        # --- partitioning among clients
        "partition": Option("label", "how documents are split among clients", one_of(*PARTITION_SCHEMES)),
        "dirichlet-alpha": Option(0.5, "concentration of the Dirichlet label skew", positive_finite),
        "partition-sizes": Option(
            "", "explicit partition sizes for partition='sizes': counts '85,165,252' or ratios '0.2,0.3,0.5'"
        ),
        "label-groups": Option(
            "", "labels of each client for partition='label', clients separated by ';', labels by '+'"
        ),
        # --- the embedded synthetic corpus (gFedNTM paper's generator)
        "synthetic-nodes": Option(5, "synthetic corpus: number of nodes L", at_least(1)),
        "synthetic-topics": Option(10, "synthetic corpus: number of true topics K", at_least(1)),
        "synthetic-shared-topics": Option(5, "synthetic corpus: topics shared by all nodes K'", at_least(0)),
        "synthetic-vocab-size": Option(500, "synthetic corpus: vocabulary size V", at_least(2)),
        "synthetic-docs-per-node": Option(200, "synthetic corpus: documents per node", at_least(1)),
        "synthetic-doc-min-length": Option(50, "synthetic corpus: shortest document", at_least(1)),
        "synthetic-doc-max-length": Option(100, "synthetic corpus: longest document", at_least(1)),
        "synthetic-eta": Option(0.01, "synthetic corpus: topic-word Dirichlet prior", positive_finite),
        "synthetic-alpha": Option(0.1, "synthetic corpus: document-topic Dirichlet prior", positive_finite),
        "synthetic-dates": Option("", "synthetic corpus: a span of years 'FIRST-LAST' (e.g. '2015-2024'): each "
                                  "document gets a month in it, and true topic 0's share rises over it while topic "
                                  "1's falls ('' = no dates)", years_problem),
        # --- priors
        "alpha": Option(0.1, "document-topic Dirichlet prior (symmetric)", positive_finite),
        "beta": Option(0.01, "topic-word Dirichlet prior (symmetric; LDA-family methods)", positive_finite),
        # --- guided topics
        "seed-words": Option("", "guided topics: a public file the server reads, one topic per line, its seed words "
                             "separated by spaces; seeded topics come first, in the file's order (lda, fedlda, pctd, dplda; '' = none)"),
        "seed-weight": Option(SEED_WEIGHT, "guided topics: what a seed word adds to beta in its topic (a "
                              "pseudo-count)", positive_finite),
        # --- federation
        "fraction-train": Option(1.0, "fraction of connected nodes sampled each round", in_range(0, 1, low_open=True)),
        "min-nodes": Option(1, "wait for at least this many nodes; stop when fewer can take part", at_least(1)),
        "min-replies": Option(1.0, "valid replies a round needs to change the model: a count >= 1, or a fraction "
                              "in (0, 1) of the nodes sampled (else the model is kept)", _count_or_fraction),
        "round-timeout": Option(600.0, "seconds to wait for the replies of one round", positive),
        "checkpoint-interval": Option(10.0, "seconds between checkpoints (checkpoint.npz) of a method without a "
                                      "privacy mechanism; 0 = after every round. The agreement, the last round "
                                      "and every round of a private method are always checkpointed",
                                      at_least(0)),
        "secure-aggregation": Option(False, "the server learns only the sum of each round's updates (SecAgg on "
                                     "Flower's message API; the DP noise is then shared among the parties); methods "
                                     "that support it: docs/secure-aggregation.md"),
        "secure-aggregation-bits": Option(32, "secure aggregation: sums live in the integers modulo 2^bits",
                                          in_range(16, 64)),
        "secure-aggregation-tolerance": Option(1, "secure aggregation: parties of a round that may drop out after "
                                               "masking or collude with the server without weakening the guarantee "
                                               "(a round of n needs n - T survivors; T < n / 2)", at_least(0)),
        "secure-aggregation-epoch": Option(10, "secure aggregation: rounds one key agreement serves (each round still "
                                           "has its own mask keys and seeds; a dropout or another set of parties "
                                           "starts a new agreement; 1 = keys every round)", in_range(1, 100)),
        # --- evaluation
        "eval-every": Option(0, "evaluate the global model every N rounds (0 = ten times a run, evenly spaced; the "
                             "last round always)", at_least(0)),
        "eval-iterations": Option(100, "EM iterations of the theta fold-in for perplexity", at_least(1)),
        "eval-alpha": Option(0.01, "symmetric alpha of the theta fold-in", positive_finite),
        "eval-labels": Option(True, "also NMI and purity in the last round, when the parties have labels"),
        "eval-with-train": Option(True, "a scored round other than the last is scored by the next round's training "
                                  "messages, for the methods that allow it, instead of evaluate messages of its "
                                  "own (one exchange a party fewer)"),
        "verbose": Option(False, "console: also Flower's own lines (the strategy's banner, every record, the final "
                          "dump) and the package's information lines; default: one line a round and a summary"),
        "federated-eval": Option(True, "score the model on the parties' documents every eval-every rounds "
                                 "(what this releases: docs/privacy.md)"),
        # --- topic prevalence (docs/topics-in-use.md)
        "prevalence-period": Option("", "after the last round every party folds its dated documents (date-column) in "
                                    "on its host and sends its summed topic shares per period: year, quarter or "
                                    "month ('' = off); prevalence.csv and prevalence.png", one_of("", *PERIODS)),
        "prevalence-from": Option("", "prevalence: the first date of the public periods (with prevalence-to; needed "
                                  "under secure aggregation and for dplda; '' = the parties' own periods)"),
        "prevalence-to": Option("", "prevalence: the last date of the public periods"),
        "prevalence-by-party": Option(False, "prevalence: also keep each party's own table "
                                      "(prevalence-by-party.csv; not with secure aggregation)"),
    }
)


class _Options(Mapping[str, Option]):
    """The global options, then each registered method's under its name, read from the registry at each use (so
    that a method :func:`~flower_topics.methods.register_method` adds later has its keys too)."""

    def __init__(self) -> None:
        self._built: tuple[tuple[str, ...], dict[str, Option]] = ((), {})

    def _table(self) -> dict[str, Option]:
        if self._built[0] != tuple(METHODS):  # built again only when a method was registered since
            self._built = (tuple(METHODS), {**GLOBAL_OPTIONS, **{spec.key(name): option for spec in METHODS.values()
                                                                 for name, option in spec.options.items()}})
        return self._built[1]

    def __getitem__(self, key: str) -> Option:
        return self._table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


#: Every key: the global options and each registered method's options under its name.
OPTIONS: Mapping[str, Option] = _Options()


def defaults() -> dict[str, ConfigValue]:
    """Every key with its default value."""
    return {key: opt.default for key, opt in OPTIONS.items()}


class RunConfig(dict):
    """A validated run config: every key of :data:`OPTIONS` with a value of its default's type.

    Made only by :func:`parse_run_config`, once, where a run starts (the ServerApp, the launcher, a
    command); everything below reads it and never parses it again (:func:`parse_run_config` returns a
    ``RunConfig`` as it is). It is read-only: ``{**config, key: value}`` makes a plain dict to parse
    anew. The keys every method reads are also typed attributes.
    """

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a RunConfig is read-only: parse {**config, key: value} for another one")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _read_only  # type: ignore

    def __reduce__(self) -> tuple[type, tuple[dict[str, ConfigValue]]]:
        return RunConfig, (dict(self),)

    @property
    def method(self) -> str:
        """The registered method the run trains (``method``)."""
        return str(self["method"])

    @property
    def num_topics(self) -> int:
        """``num-topics``."""
        return int(self["num-topics"])

    @property
    def num_rounds(self) -> int:
        """``num-rounds``."""
        return int(self["num-rounds"])

    @property
    def output_dir(self) -> str:
        """``output-dir``."""
        return str(self["output-dir"])

    @property
    def dataset(self) -> str:
        """``dataset``."""
        return str(self["dataset"])


def parse_run_config(raw: Mapping[str, Any]) -> RunConfig:
    """Validate a run config and fill in the defaults (a :class:`RunConfig` is returned as it is: it is valid).

    Parameters
    ----------
    raw : Mapping
        Keys as in ``[tool.flwr.app.config]`` (kebab-case); values may be strings
        (as from the command line) or already typed.

    Returns
    -------
    RunConfig
        Every key of :data:`OPTIONS`, with a value of the default's type.

    Raises
    ------
    UserInputError
        For an unknown key or method, a value of the wrong type, or a value out of range, or (last: the
        method's :attr:`~flower_topics.methods.MethodSpec.check_noise`) a privacy target no noise reaches.
    """
    if isinstance(raw, RunConfig):
        return raw
    config = parse_run_options(raw)
    get_method(str(config["method"])).check_noise(config)
    return RunConfig(config)


def parse_run_options(raw: Mapping[str, Any]) -> dict[str, ConfigValue]:
    """Every check of :func:`parse_run_config` but calibrating the noise, which imports an accountant and
    searches: a launcher refuses the run's files (a vocabulary file, seed words, a public corpus) with these
    first, then calls :func:`parse_run_config`.

    Returns
    -------
    dict
        Every key of :data:`OPTIONS`, with a value of the default's type: a plain dict, not yet a
        :class:`RunConfig` (its noise is not yet known to be reachable).

    Raises
    ------
    UserInputError
        For an unknown key or method, a value of the wrong type, or a value out of range.
    """
    unknown = sorted((key for key in raw if key not in OPTIONS), key=str)
    node_keys = [key for key in unknown if key in all_node_options()]
    if node_keys:  # a party's own setting, which the server's run config cannot give
        listed = ", ".join(_key_text(key) for key in node_keys)
        raise UserInputError(f"{listed} {'is a node-config key' if len(node_keys) == 1 else 'are node-config keys'}"
                             f" (each party sets its own; the run config cannot): on a SuperNode, flower-supernode "
                             f"--node-config \"{node_keys[0]}=...\"; in flower-topics simulate, --node-set "
                             f"{node_keys[0]}=...")
    if unknown:
        hints = [f"{_key_text(key)} (did you mean {' or '.join(_close_keys(key))}?)" if _close_keys(key)
                 else _key_text(key) for key in unknown[:10]] + ([f"and {len(unknown) - 10} more"] * (len(unknown) > 10))
        raise UserInputError(f"unknown run-config key(s) {', '.join(hints)}; docs/run-config.md lists every key")
    if "method" in raw:
        method = raw["method"]  # an unknown method is one line naming the registered ones
        get_method(method if isinstance(method, str) and len(method) <= 60 else shown(method, 60))
    config = defaults()
    for key, value in raw.items():
        config[key] = coerce(key, value, OPTIONS[key])
    _check_consistency(config)
    get_method(str(config["method"])).check(config)
    return config


def _key_text(key: Any) -> str:
    """A key as an error line shows it: as it is when it is a short printable string, else its clipped repr."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else shown(key, 60)


def _close_keys(key: Any) -> list[str]:
    """Known keys a mistyped or un-namespaced key may have meant (``epsilon`` -> ``fedlda.epsilon``)."""
    if not isinstance(key, str) or len(key) > 200:
        return []
    namespaced = [k for k in OPTIONS if k.split(".")[-1] == key]
    return namespaced or difflib.get_close_matches(key, list(OPTIONS), n=2)


def _check_consistency(config: dict[str, ConfigValue]) -> None:
    if config["synthetic-doc-min-length"] > config["synthetic-doc-max-length"]:
        raise UserInputError("run-config synthetic-doc-min-length must be <= synthetic-doc-max-length")
    if config["synthetic-shared-topics"] > config["synthetic-topics"]:
        raise UserInputError("run-config synthetic-shared-topics must be <= synthetic-topics")
    if str(config["synthetic-dates"]).strip() and config["synthetic-shared-topics"] < 2:
        raise UserInputError("run-config synthetic-dates plants a rising and a falling shared topic: it needs "
                             "synthetic-shared-topics >= 2")
    if str(config["prevalence-period"]):
        _check_prevalence(config)
    if config["partition"] == "sizes" and not str(config["partition-sizes"]).strip():
        raise UserInputError("partition='sizes' needs partition-sizes, e.g. partition-sizes='85,165,252'")


def _check_prevalence(config: Mapping[str, ConfigValue]) -> None:
    """The prevalence keys that can be refused from the run config alone: from and to together and a valid grid,
    and per-party tables or the parties' own periods only without secure aggregation."""
    if config["dataset"] == "synthetic" and not str(config["synthetic-dates"]).strip():
        raise UserInputError("prevalence on the synthetic corpus needs its dates: set synthetic-dates, a span of "
                             "years (e.g. synthetic-dates='2020-2024')")
    start, end = str(config["prevalence-from"]).strip(), str(config["prevalence-to"]).strip()
    if bool(start) != bool(end):
        raise UserInputError("prevalence-from and prevalence-to go together (e.g. prevalence-from='2015' "
                             "prevalence-to='2024')")
    if start:
        period_grid(start, end, str(config["prevalence-period"]))
    if config["secure-aggregation"] and config["prevalence-by-party"]:
        raise UserInputError("prevalence-by-party sends each party's own table to the server: it cannot go with "
                             "secure aggregation")
    if config["secure-aggregation"] and not start:
        raise UserInputError("prevalence under secure aggregation needs public periods: set prevalence-from and "
                             "prevalence-to (the first and last date of the periods, e.g. '2015-01' and '2024-12')")


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings (``--set`` options) into a dict."""
    parsed: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserInputError(f"--set {item!r} must look like KEY=VALUE, e.g. --set alpha=0.1")
        parsed[key.strip()] = value.strip().strip("'\"")
    return parsed


def pyproject_tables() -> dict[str, Any]:
    """The defaults as ``[tool.flwr.app.config]`` holds them: global keys, then one table per built-in method
    (:data:`~flower_topics.methods.BUILT_IN`; a method registered by ``register_method`` is documented by its
    owner)."""
    tables: dict[str, Any] = {key: opt.default for key, opt in GLOBAL_OPTIONS.items()}
    for spec in map(METHODS.__getitem__, BUILT_IN):
        tables[spec.name] = {name: opt.default for name, opt in spec.options.items()}
    return tables


def options_table() -> str:
    """The table of every option (Markdown; docs/run-config.md holds it), from the schema and the built-in
    methods (:data:`~flower_topics.methods.BUILT_IN`)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    built_in = {**GLOBAL_OPTIONS, **{METHODS[name].key(key): opt for name in BUILT_IN
                                     for key, opt in METHODS[name].options.items()}}
    for key, opt in built_in.items():
        lines.append(f"| `{key}` | `{opt.default!r}` | {opt.help.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def node_options_table() -> str:
    """The table of every node-config key a party may set (Markdown; docs/run-config.md holds it), from the
    registry (:func:`~flower_topics.methods.all_node_options`)."""
    lines = ["| node-config key | default | meaning |", "|---|---|---|"]
    for key, opt in all_node_options().items():
        lines.append(f"| `{key}` | `{opt.default!r}` | {opt.help.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
