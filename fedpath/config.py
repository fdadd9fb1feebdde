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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from fedpath.registry import ALGORITHMS, BACKBONES, DATASETS, MIL_MODELS, Registry
from fedpath.schema import (  # noqa: F401  (ConfigError, resolve_params: their home)
    Check,
    Checked,
    ConfigError,
    Ge,
    Gt,
    Range,
    from_mapping,
    require,
    resolve_params,
)

# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class DataConfig:
    """Which dataset, where it lives, and its dataset-specific parameters."""

    name: str = "synthetic"
    root: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionConfig(Checked):
    """How each source domain is split into clients (FedStain: alpha=0.5, 2 per domain).

    ``mode``: ``label`` draws per-class client proportions from Dirichlet(alpha)
    (label and quantity skew, the NIID-Bench convention); ``quantity`` draws one
    Dirichlet(alpha) vector of client sizes per domain (quantity skew only);
    ``iid`` splits uniformly at random.
    """

    config_section = "partition"

    clients_per_domain: Annotated[int, Ge(1)] = 2
    alpha: Annotated[float, Gt(0)] = 0.5
    mode: Literal["label", "quantity", "iid"] = "label"
    min_client_size: Annotated[int, Ge(1)] = 2


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
class TrainConfig(Checked):
    """Rounds, client sampling and the local optimisation loop.

    ``schedule`` runs over the whole federation (all rounds x local epochs):
    ``linear`` goes from ``lr`` to ``lr_end``; ``cosine`` from ``lr`` to ``lr_end``
    (0 if unset) along a half cosine; the position is derived from (round, step), so
    it needs no state and resumes exactly.
    ``clients_per_round`` (a count) overrides ``client_fraction`` when set.
    ``class_weights``: ``balanced`` weights each class's cross-entropy by
    n / (C * n_c) over the client's own training labels (for imbalanced data such as
    atypical vs normal mitoses); ``none``: plain cross-entropy.

    Fine-tuning a (pretrained) image encoder:
    ``trainable``: ``all`` parameters, only the ``classifier`` (a frozen encoder),
    or ``last_stages`` (the classifier and the encoder's last
    ``trainable_stages`` stages); ``encoder_lr_scale``: the encoder's learning
    rate is ``lr`` times this; ``warmup``: fraction of the whole federation's
    steps over which the learning rate rises linearly from 0; ``bn``: ``train``
    updates BatchNorm statistics during local training, ``frozen`` keeps the
    (pretrained or global) running statistics and uses them (BatchNorm layers in
    eval mode). How BatchNorm is shared is the algorithm's choice: ``fedavg``
    averages it, ``fedbn`` keeps it local.
    ``augment``: label-preserving augmentation applied to every training batch
    of every image method before its own (FedStain's views are made from the
    augmented batch): ``dihedral`` (random flips and 90-degree rotations: tissue
    has no canonical orientation) or ``dihedral_jitter`` (plus mild brightness,
    contrast and saturation jitter, +-10%); ``none``.
    """

    config_section = "train"

    rounds: Annotated[int, Ge(1)] = 3
    local_epochs: Annotated[int, Ge(1)] = 1
    batch_size: Annotated[int, Ge(1)] = 32
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: Annotated[float, Gt(0)] = 1e-3
    lr_end: Annotated[float | None, Ge(0)] = None
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    weight_decay: Annotated[float, Ge(0)] = 0.0
    momentum: Annotated[float, Ge(0)] = 0.9
    grad_clip: Annotated[float | None, Gt(0)] = None
    client_fraction: Annotated[float, Range(0, 1, lo_open=True)] = 1.0
    clients_per_round: Annotated[int | None, Ge(1)] = None
    min_replies: Annotated[int, Ge(1)] = 1
    eval_every: Annotated[int, Ge(1)] = 1
    eval_batch_size: Annotated[int, Ge(1)] = 256
    class_weights: Literal["none", "balanced"] = "none"
    trainable: Literal["all", "classifier", "last_stages"] = "all"
    trainable_stages: Annotated[int, Ge(1)] = 1
    encoder_lr_scale: Annotated[float, Ge(0)] = 1.0
    warmup: Annotated[float, Range(0, 1, hi_open=True)] = 0.0
    bn: Literal["train", "frozen"] = "train"
    augment: Literal["none", "dihedral", "dihedral_jitter"] = "none"

    def validate(self) -> None:
        require(
            self.schedule != "linear" or self.lr_end is not None,
            "lr_end",
            "a number when train.schedule is 'linear'",
            self.lr_end,
        )


@dataclass(frozen=True)
class EvalConfig(Checked):
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

    config_section = "evaluation"

    protocol: Literal["classifier", "linear_probe", "local"] = "classifier"
    probe_folds: Annotated[int, Ge(2)] = 5
    probe_max_iter: Annotated[int, Ge(1)] = 100
    probe_cs: Annotated[
        list[float],
        Check(
            "a non-empty list of positive numbers",
            lambda cs: len(cs) >= 1 and all(c > 0 for c in cs),
        ),
    ] = field(default_factory=lambda: [0.001, 0.01, 0.1, 1.0, 10.0, 100.0])


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
class ExperimentConfig(Checked):
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

    def validate(self) -> None:
        require(
            self.lodo.targets != "none" or self.evaluation.protocol == "local",
            "evaluation.protocol",
            "'local' when lodo.targets is 'none' (no held-out domain to evaluate on)",
            self.evaluation.protocol,
        )
        require(
            len(self.seeds) >= 1, "seeds", "a non-empty list of integers", self.seeds
        )
        require(
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
    data = dataclasses.replace(
        cfg.data, params=_resolve(DATASETS, cfg.data.name, cfg.data.params, "data")
    )
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
    registry: Registry[Any],
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
