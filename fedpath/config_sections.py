"""The sections of an experiment config: data, partition, LODO plan, model,
algorithm, training, evaluation and runtime (:class:`fedpath.config.ExperimentConfig`
holds one of each). Frozen dataclasses with declarative constraints
(:mod:`fedpath.schema`); import them from :mod:`fedpath.config`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fedpath.evaluation.metrics import BINARY_METRIC_NAMES, METRIC_NAMES
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

#: metrics a round can be selected by (higher is better; see evaluation.metrics)
SELECTABLE = (*METRIC_NAMES, *BINARY_METRIC_NAMES)


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
    ``validation``: fraction of each source domain's training split held out (not
    trained on) by whole slides, then dealt to its clients by slide; the global
    model is scored on it to select a round, fit a temperature and choose an
    operating point (:mod:`fedpath.runtime.selection`). 0: off.
    ``validation_seed``: the seed that draws those slides and deals them to the
    clients (None: the run's seed). Fixed, every seed of a run holds out the same
    slides, so a seed ensemble (``fedpath ensemble``) can be scored on validation
    slides none of its members trained on.
    """

    config_section = "partition"

    clients_per_domain: Annotated[int, Ge(1)] = 2
    alpha: Annotated[float, Gt(0)] = 0.5
    mode: Literal["label", "quantity", "iid"] = "label"
    min_client_size: Annotated[int, Ge(1)] = 2
    validation: Annotated[float, Range(0, 0.5, hi_open=True)] = 0.0
    validation_seed: Annotated[int, Ge(0)] | None = None


@dataclass(frozen=True)
class LodoConfig:
    """Leave-one-domain-out plan: every domain once as the unseen target, or a list.

    ``targets: none`` holds no domain out: every domain trains, and each client is
    evaluated on its own test split (``evaluation.protocol: local``; FedHD's setting).
    ``eval_split``: which part of the target domain is evaluated (``all``: every
    sample, as the FedDG papers do; ``test``: only its test split).
    ``source_eval``: also evaluate the global model on each source domain's test split.
    ``sources``: the domains that train, less the fold's target (default: all);
    ``[hospital_1]`` with FedAvg is hospital_1 alone, a local-only run.
    """

    targets: Literal["all", "none"] | list[str] = "all"
    eval_split: Literal["all", "test"] = "all"
    source_eval: bool = True
    sources: list[str] | None = None


@dataclass(frozen=True)
class ModelConfig:
    """Backbone name (see ``fedpath list backbones``) and its parameters;
    ``weights``: optional local file with pretrained weights (never downloaded)."""

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
    atypical vs normal mitoses); ``none``: plain cross-entropy. The MIL methods
    (one slide per step) multiply each slide's loss by its class's weight; pooled
    MIL training weights by the pooled slides' labels.

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
    ``cache_features``: the frozen-feature fast path. With a frozen encoder
    (``trainable: classifier``) or frozen first stages (``last_stages``) and no
    pixel augmentation, the frozen part runs once over every image (cached on
    disk, ``runtime.feature_cache``) and the methods that only classify their
    inputs (``fedavg``, ``fedprox``, ``fedbn``, ``central_supervised``) train
    the rest on its output: the same model, a fraction of the compute. With
    ``augment: dihedral`` the output of all 8 views of every image is cached
    and each epoch picks one per image, as the pixel path would.
    ``soft_labels``: ``agreement`` trains the supervised loss against each
    sample's share of annotators agreeing with its label
    (``data.params.agreement``, :mod:`fedpath.losses.soft_targets`); ``none``:
    the labels as given. ``mixup``: MixUp's Beta(alpha, alpha) parameter
    (0: off; on cached maps it mixes the frozen stages' output). Both need a
    method that classifies each sample once (fedavg, fedprox, fedbn, ...).
    ``sampling``: ``balanced`` draws each epoch with replacement, every class
    equally likely (instead of, or beside, ``class_weights``); ``shuffle``:
    each sample once per epoch.
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
    cache_features: bool = False
    soft_labels: Literal["none", "agreement"] = "none"
    mixup: Annotated[float, Ge(0)] = 0.0
    sampling: Literal["shuffle", "balanced"] = "shuffle"

    def validate(self) -> None:
        require(
            not self.cache_features or self.trainable != "all",
            "trainable",
            "'classifier' or 'last_stages' when train.cache_features is true (only "
            "the output of a frozen part can be cached)",
            self.trainable,
        )
        require(
            not self.cache_features or self.augment in ("none", "dihedral"),
            "augment",
            "'none' or 'dihedral' when train.cache_features is true (the 8 dihedral "
            "views of every image can be cached; colour jitter cannot)",
            self.augment,
        )
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
      fit an L2 logistic regression on the target domain's train split (or on
      ``probe_train``'s, below; C chosen by
      ``probe_folds``-fold cross-validation over ``probe_cs``, L-BFGS with
      ``probe_max_iter`` iterations), evaluate once on its test split.
      ``probe_l2``: null (that CV), or the paper's fixed L2 penalty (e.g. 1e-4)
      on the per-sample mean log-loss, fitted once with scikit-learn's
      C = 1 / (n_train * probe_l2), no CV (:mod:`fedpath.evaluation.probe`).
      ``probe_train``: ``[]`` fits it on the target's train split (FedAD Sec.
      5.5); a list of domains fits it on their train splits instead (Sec.
      5.3.2), and they take no part in federated training
      (:func:`fedpath.data.partition.lodo_plan`);
    - ``local``: each client evaluates the model it would deploy (its own, for
      FedHD and local training; else the global one) on its own test split and
      reports metrics only; with a held-out target the global model is evaluated
      there too.

    With ``partition.validation`` > 0: ``select_metric``, the validation metric
    (mean over source clients) that selects a round; ``target_sensitivity``, for
    two classes, the sensitivity the operating point reaches on validation;
    ``positive_class``: the class it is for (null: the second class listed),
    which must be the data's second class (the threshold is on its probability).

    ``expected``: consortium mode only (``lodo.targets: none``): folders of the
    leave-one-hospital-out runs of the same recipe; their balanced accuracy per
    held-out hospital goes into ``model.fpm`` (``expected``) as the honest
    estimate at a new site (:mod:`fedpath.runtime.consortium`).

    ``tta``: test-time augmentation of every evaluation (and of the exported
    model): ``dihedral`` averages the softmax over the 8 flips and 90-degree
    turns of each image (tissue has no up; 8x the evaluation cost); with
    ``train.cache_features`` it averages over the 8 cached views, which needs
    ``train.augment: dihedral``.

    ``adapt_bn``: also report the model with its BatchNorm statistics
    re-estimated on the unseen domain's *unlabelled* images (AdaBN,
    :mod:`fedpath.tasks.adapt`; labels are never read, nothing is trained or
    chosen): ``evaluation.adapted`` beside ``evaluation.target`` in
    ``final.json`` (and in ``selected``). With ``lodo.eval_split: test`` the
    statistics come from the target's train split, disjoint from the images
    scored; with ``all`` from the scored images themselves (transductive, as a
    hospital adapting on the images it then classifies). ``model.fpm`` keeps the
    federation's statistics; a hospital adapts its copy with ``fedpath adapt-bn``.

    ``swa_from``: also report the uniform mean of the global weights after rounds
    ``swa_from .. train.rounds`` (SWA across rounds, :mod:`fedpath.runtime.averaging`;
    0: off): ``evaluation.averaged`` in ``final.json``, with its own calibration
    and operating point under validation and its ``adapted`` block under
    ``adapt_bn``; ``runtime.export: averaged`` exports it.
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
    probe_l2: Annotated[float | None, Gt(0)] = None
    probe_train: list[str] = field(default_factory=list)
    select_metric: Annotated[
        str,
        Check(
            "one of " + ", ".join(map(repr, SELECTABLE)),
            lambda name, ok=SELECTABLE: name in ok,  # a default: see schema.Check
        ),
    ] = "balanced_accuracy"
    target_sensitivity: Annotated[float | None, Range(0, 1, lo_open=True)] = None
    positive_class: str | None = None
    expected: list[str] = field(default_factory=list)
    tta: Literal["none", "dihedral"] = "none"
    adapt_bn: bool = False
    swa_from: Annotated[int, Ge(0)] = 0

    def validate(self) -> None:
        require(
            not self.probe_train or self.protocol == "linear_probe",
            "probe_train",
            "[] unless evaluation.protocol is 'linear_probe' (the domains the "
            "linear probe is trained on)",
            self.probe_train,
        )
        check_distinct({"probe_train": self.probe_train}, "evaluation", ["probe_train"])

    def check_lodo(self, lodo: LodoConfig) -> None:
        """``probe_train`` beside the LODO plan (its names are checked against
        the data's domains by :func:`fedpath.data.partition.lodo_plan`)."""
        require(
            not self.probe_train or lodo.targets != "none",
            "evaluation.probe_train",
            "[] when lodo.targets is 'none' (no held-out domain to test the probe on)",
            self.probe_train,
        )


def _is_device(name: str) -> bool:
    head, _, index = name.partition(":")
    return (name == "cpu") or (head == "cuda" and (index == "" or index.isdigit()))


@dataclass(frozen=True)
class RuntimeConfig(Checked):
    """Where and how the in-process runtime runs.

    ``device``: ``cpu`` (the default), ``cuda`` or ``cuda:<index>`` (a GPU;
    a Flower node sets its own with ``--device``).
    ``precision``: ``fp32``, or ``bf16``: the image encoder runs under bfloat16
    autocast (convolutions and matrix products in bf16, on GPUs with bf16
    support; no loss scaling needed), while losses, pixel augmentations, stain
    statistics and the classifier stay in float32.
    ``threads``: torch intra-op threads (null: leave torch's default).
    ``checkpoint``: write a checkpoint after every round (needed for ``--resume``).
    ``export``: ``model.fpm`` holds the ``last`` or the ``selected`` round's model,
    or the ``averaged`` weights (``evaluation.swa_from``).
    ``feature_cache``: folder of the encoded images of ``train.cache_features``
    (null: ``<output_dir>/feature_cache``); one HDF5 file per dataset, encoder
    and weights, reused by every later run.
    ``tracking``: also log every round's records (those of ``results.jsonl``) to
    ``tensorboard`` or ``mlflow`` (a local file store, no server); ``none``.
    ``tracking_dir``: where (null: ``<run_dir>/tensorboard/``, or the MLflow store
    ``<output_dir>/mlruns``); see :mod:`fedpath.runtime.tracking`.
    """

    config_section = "runtime"

    device: Annotated[
        str,
        Check(
            "'cpu', 'cuda' or 'cuda:<index>'",
            lambda d, ok=_is_device: ok(d),  # a default: see schema.Check
        ),
    ] = "cpu"
    precision: Literal["fp32", "bf16"] = "fp32"
    threads: Annotated[int | None, Ge(1)] = None
    checkpoint: bool = True
    export_model: bool = True
    export: Literal["last", "selected", "averaged"] = "last"
    feature_cache: str | None = None
    tracking: Literal["none", "tensorboard", "mlflow"] = "none"
    tracking_dir: str | None = None


#: backend -> (the module it needs, the fedpath extra that installs it)
BACKENDS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
}


def check_backend(backend: str) -> None:
    """Refuse a backend whose package is not installed (at config time).

    Only looks the package up (``importlib.util.find_spec``), imports nothing.
    """
    if backend not in BACKENDS:
        return
    module, extra = BACKENDS[backend]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"config key 'runtime.tracking': {backend!r} needs the {module!r} "
            f"package, which is not installed: pip install 'fedpath[{extra}]' "
            "(or runtime.tracking=none)"
        )


def check_distinct(
    params: Mapping[str, Any], section: str, keys: Sequence[str]
) -> None:
    """Each list of names among ``keys`` names each one once: ``classes:
    [normal, normal]`` would otherwise surface later as a label that belongs to
    no class, and a domain listed twice would be trained twice."""
    for key in keys:
        names = params.get(key)
        if not isinstance(names, list):
            continue
        twice = sorted({str(n) for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(
                f"config key '{section}.{key}': {', '.join(map(repr, twice))} "
                f"listed twice; expected distinct names, got {names}"
            )
