"""Typed experiment configs: YAML file + ``key=value`` overrides, validated at load.

A config is a tree of frozen dataclasses. :func:`load_config` reads a YAML file,
applies dotted overrides (``train.lr=1e-4``), checks every key and value against the
dataclass annotations (unknown keys and bad values fail at once, naming the key and
the valid choices), resolves the per-dataset / per-backbone / per-algorithm
``params`` against the parameter dataclass that the registered object declares, and
returns an :class:`ExperimentConfig` whose :meth:`~ExperimentConfig.to_dict` is the
fully resolved config saved in every run directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml


class ConfigError(ValueError):
    """A bad config key or value; the message names the key and what was expected."""


T = TypeVar("T")


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class DataConfig:
    """Which dataset, where it lives, and its dataset-specific parameters."""

    name: str = "synthetic"
    root: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionConfig:
    """How each source domain is split into clients (FedStain: alpha=0.5, 2 per domain).

    ``mode``: ``label`` draws per-class client proportions from Dirichlet(alpha)
    (label and quantity skew, the NIID-Bench convention); ``quantity`` draws one
    Dirichlet(alpha) vector of client sizes per domain (quantity skew only);
    ``iid`` splits uniformly at random.
    """

    clients_per_domain: int = 2
    alpha: float = 0.5
    mode: Literal["label", "quantity", "iid"] = "label"
    min_client_size: int = 2

    def __post_init__(self) -> None:
        _check(
            self.clients_per_domain >= 1,
            "partition.clients_per_domain",
            "an integer >= 1",
            self.clients_per_domain,
        )
        _check(self.alpha > 0, "partition.alpha", "a number > 0", self.alpha)
        _check(
            self.min_client_size >= 1,
            "partition.min_client_size",
            "an integer >= 1",
            self.min_client_size,
        )


@dataclass(frozen=True)
class LodoConfig:
    """Leave-one-domain-out plan: every domain once as the unseen target, or a list.

    ``targets: none`` holds no domain out: every domain trains, and each client is
    evaluated on its own test split (``evaluation.protocol: local``; FedHD's setting).
    ``eval_split``: which part of the target domain is evaluated (``all``: every
    sample, as the FedDG papers do; ``test``: only its test split).
    ``source_eval``: also evaluate the global model on each source domain's test split.
    """

    targets: Literal["all", "none"] | list[str] = "all"
    eval_split: Literal["all", "test"] = "all"
    source_eval: bool = True


@dataclass(frozen=True)
class ModelConfig:
    """Backbone name (see ``fedpath list backbones``) and its parameters.

    ``weights``: optional local file with pretrained weights (never downloaded).
    """

    backbone: str = "small_cnn"
    weights: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AlgorithmConfig:
    """Federated algorithm name (see ``fedpath list algorithms``) and its parameters."""

    name: str = "fedavg"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainConfig:
    """Rounds, client sampling and the local optimisation loop.

    ``schedule`` runs over the whole federation (all rounds x local epochs):
    ``linear`` goes from ``lr`` to ``lr_end``; ``cosine`` from ``lr`` to ``lr_end``
    (0 if unset) along a half cosine; the position is derived from (round, step), so
    it needs no state and resumes exactly.
    ``clients_per_round`` (a count) overrides ``client_fraction`` when set.
    ``class_weights``: ``balanced`` weights each class's cross-entropy by
    n / (C * n_c) over the client's own training labels (for imbalanced data such as
    atypical vs normal mitoses); ``none``: plain cross-entropy.
    """

    rounds: int = 3
    local_epochs: int = 1
    batch_size: int = 32
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: float = 1e-3
    lr_end: float | None = None
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    weight_decay: float = 0.0
    momentum: float = 0.9
    grad_clip: float | None = None
    client_fraction: float = 1.0
    clients_per_round: int | None = None
    min_replies: int = 1
    eval_every: int = 1
    eval_batch_size: int = 256
    class_weights: Literal["none", "balanced"] = "none"

    def __post_init__(self) -> None:
        _check(self.rounds >= 1, "train.rounds", "an integer >= 1", self.rounds)
        _check(
            self.local_epochs >= 1,
            "train.local_epochs",
            "an integer >= 1",
            self.local_epochs,
        )
        _check(
            self.batch_size >= 1, "train.batch_size", "an integer >= 1", self.batch_size
        )
        _check(self.lr > 0, "train.lr", "a number > 0", self.lr)
        _check(
            self.lr_end is None or self.lr_end >= 0,
            "train.lr_end",
            "a number >= 0 or null",
            self.lr_end,
        )
        _check(
            self.schedule != "linear" or self.lr_end is not None,
            "train.lr_end",
            "a number when train.schedule is 'linear'",
            self.lr_end,
        )
        _check(
            self.weight_decay >= 0,
            "train.weight_decay",
            "a number >= 0",
            self.weight_decay,
        )
        _check(
            0 < self.client_fraction <= 1,
            "train.client_fraction",
            "a number in (0, 1]",
            self.client_fraction,
        )
        _check(
            self.clients_per_round is None or self.clients_per_round >= 1,
            "train.clients_per_round",
            "an integer >= 1 or null",
            self.clients_per_round,
        )
        _check(
            self.min_replies >= 1,
            "train.min_replies",
            "an integer >= 1",
            self.min_replies,
        )
        _check(
            self.eval_every >= 1, "train.eval_every", "an integer >= 1", self.eval_every
        )
        _check(
            self.grad_clip is None or self.grad_clip > 0,
            "train.grad_clip",
            "a number > 0 or null",
            self.grad_clip,
        )


@dataclass(frozen=True)
class EvalConfig:
    """How a run's models are evaluated.

    ``protocol``:

    - ``classifier``: the global model's predictions on the unseen target domain
      (and on each source's test split);
    - ``linear_probe``: self-supervised methods (FedAD): freeze the global encoder,
      fit an L2 logistic regression on the target domain's train split (C chosen by
      ``probe_folds``-fold cross-validation over ``probe_cs``, L-BFGS with
      ``probe_max_iter`` iterations), evaluate once on its test split;
    - ``local``: each client evaluates the model it would deploy (its own, for
      FedHD and local training; else the global one) on its own test split and
      reports metrics only; with a held-out target the global model is evaluated
      there too.
    """

    protocol: Literal["classifier", "linear_probe", "local"] = "classifier"
    probe_folds: int = 5
    probe_max_iter: int = 100
    probe_cs: list[float] = field(
        default_factory=lambda: [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]
    )

    def __post_init__(self) -> None:
        _check(
            self.probe_folds >= 2,
            "evaluation.probe_folds",
            "an integer >= 2",
            self.probe_folds,
        )
        _check(
            self.probe_max_iter >= 1,
            "evaluation.probe_max_iter",
            "an integer >= 1",
            self.probe_max_iter,
        )
        _check(
            len(self.probe_cs) >= 1 and all(c > 0 for c in self.probe_cs),
            "evaluation.probe_cs",
            "a non-empty list of positive numbers",
            self.probe_cs,
        )


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how the in-process runtime runs.

    ``threads``: torch intra-op threads (null: leave torch's default).
    ``checkpoint``: write a checkpoint after every round (needed for ``--resume``).
    """

    device: str = "cpu"
    threads: int | None = None
    checkpoint: bool = True
    export_model: bool = True


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: a dataset, a LODO plan, one algorithm, seeds, training.

    ``label``: the method's name in results and tables (default: the algorithm's);
    ablation variants of one algorithm get their own labels.
    """

    name: str = "experiment"
    label: str | None = None
    output_dir: str = "runs"
    seeds: list[int] = field(default_factory=lambda: [0])
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    lodo: LodoConfig = field(default_factory=LodoConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    def __post_init__(self) -> None:
        _check(
            self.lodo.targets != "none" or self.evaluation.protocol == "local",
            "evaluation.protocol",
            "'local' when lodo.targets is 'none' (no held-out domain to evaluate on)",
            self.evaluation.protocol,
        )
        _check(
            len(self.seeds) >= 1, "seeds", "a non-empty list of integers", self.seeds
        )
        _check(
            len(set(self.seeds)) == len(self.seeds),
            "seeds",
            "distinct integers",
            self.seeds,
        )

    @property
    def method(self) -> str:
        """The method's label in results and tables."""
        return self.label or self.algorithm.name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def hash(self) -> str:
        """Short stable hash of the resolved config (identifies a model's origin)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **overrides: Any) -> ExperimentConfig:
        """Return a copy with dotted overrides applied and re-validated."""
        raw = self.to_dict()
        for key, value in overrides.items():
            _set_dotted(raw, key.replace("__", "."), value)
        return build_config(raw)


def _check(ok: bool, key: str, expected: str, got: Any) -> None:
    if not ok:
        raise ConfigError(f"config key {key!r}: expected {expected}, got {got!r}")


# --------------------------------------------------------------------------- loading


def load_config(
    path: str | Path | None = None, overrides: Sequence[str] = ()
) -> ExperimentConfig:
    """Load a YAML config (defaults if ``path`` is None) plus key=value overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_yaml_mapping(Path(path))
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(raw, key, value)
    try:
        return build_config(raw)
    except ConfigError as err:
        where = f" (in {path})" if path is not None else ""
        raise ConfigError(f"{err}{where}") from None


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping; errors name the file and line."""
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(
            f"config file {str(path)!r} is not valid YAML: {err}"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(path)!r}: expected a mapping at the top level, "
            f"got {type(data).__name__}"
        )
    return data


def parse_override(item: str) -> tuple[str, Any]:
    """``"train.lr=1e-4"`` -> ``("train.lr", 0.0001)``; values are parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected key=value (e.g. train.lr=1e-4)")
    key, text = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {item!r}: the key is empty")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    return key, value


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(
                f"override {key!r}: {'.'.join(parts[: i + 1])!r} is not a section"
            )
        node = child
    node[parts[-1]] = value


def build_config(raw: Mapping[str, Any]) -> ExperimentConfig:
    """Validate a raw mapping; resolve every ``params`` block against its registry."""
    cfg = from_mapping(ExperimentConfig, raw, "")
    from fedpath.algorithms.base import ALGORITHMS
    from fedpath.data.base import DATASETS
    from fedpath.models.backbones import BACKBONES

    data = dataclasses.replace(
        cfg.data, params=_resolve(DATASETS, cfg.data.name, cfg.data.params, "data")
    )
    from fedpath.mil import MIL_MODELS

    # slide-bag datasets take a MIL model (abmil, transmil...) as their backbone
    models = MIL_MODELS if cfg.model.backbone in MIL_MODELS else BACKBONES
    if cfg.model.backbone not in models:
        raise ConfigError(
            f"config key 'model.backbone': unknown backbone {cfg.model.backbone!r}; "
            f"valid choices: {', '.join(BACKBONES.names())} (images), "
            f"{', '.join(MIL_MODELS.names())} (slide bags)"
        )
    model = dataclasses.replace(
        cfg.model,
        params=_resolve(
            models,
            cfg.model.backbone,
            cfg.model.params,
            "model",
            name_key="backbone",
        ),
    )
    algorithm = dataclasses.replace(
        cfg.algorithm,
        params=_resolve(
            ALGORITHMS, cfg.algorithm.name, cfg.algorithm.params, "algorithm"
        ),
    )
    return dataclasses.replace(cfg, data=data, model=model, algorithm=algorithm)


def _resolve(
    registry: Any,
    name: str,
    params: Mapping[str, Any],
    section: str,
    name_key: str = "name",
) -> dict[str, Any]:
    if name not in registry:
        raise ConfigError(
            f"config key '{section}.{name_key}': unknown {registry.what} {name!r}; "
            f"valid choices: {', '.join(registry.names())}"
        )
    schema = registry.params(name)
    if schema is None:
        if params:
            raise ConfigError(
                f"config key '{section}.params': {registry.what} {name!r} takes no "
                f"parameters, got {sorted(params)}"
            )
        return {}
    return dataclasses.asdict(from_mapping(schema, params, f"{section}.params"))


def resolve_params(schema: type[T], params: Mapping[str, Any], section: str) -> T:
    """Build a params dataclass from a (resolved) params mapping."""
    return from_mapping(schema, params, section)


def from_mapping(cls: type[T], raw: Any, prefix: str) -> T:
    """Build dataclass ``cls`` from a mapping, checking keys and value types."""
    where = prefix or "the top level"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"config key {where!r}: expected a mapping, got {type(raw).__name__}"
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in raw if k not in fields]
    if unknown:
        key = _join(prefix, str(unknown[0]))
        raise ConfigError(
            f"unknown config key {key!r}; valid keys"
            f"{' under ' + repr(prefix) if prefix else ''}: {', '.join(fields)}"
        )
    kwargs = {
        name: _convert(hints[name], value, _join(prefix, name))
        for name, value in raw.items()
    }
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"config section {where!r}: {err}") from None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_mapping(tp, value, key)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _convert(option, value, key)
            except ConfigError as err:
                errors.append(str(err).split(": expected ", 1)[-1].split(", got")[0])
        raise ConfigError(
            f"config key {key!r}: expected {' or '.join(errors)}"
            f"{' or null' if type(None) in args else ''}, got {value!r}"
        )
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(
            f"config key {key!r}: expected one of {', '.join(map(repr, args))}, "
            f"got {value!r}"
        )
    if origin in (list, tuple, Sequence):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"config key {key!r}: expected a list, got {value!r}")
        item_tp = args[0] if args else Any
        items = [_convert(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key {key!r}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key {key!r}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"config key {key!r}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"config key {key!r}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config key {key!r}: expected a string, got {value!r}")
    raise ConfigError(f"config key {key!r}: unsupported type {tp!r}")
