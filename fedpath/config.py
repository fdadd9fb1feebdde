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
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedpath.config_sections import (
    AlgorithmConfig,
    DataConfig,
    EvalConfig,
    LodoConfig,
    ModelConfig,
    PartitionConfig,
    RuntimeConfig,
    TrainConfig,
    check_backend,
    check_distinct,
)
from fedpath.registry import ALGORITHMS, BACKBONES, DATASETS, MIL_MODELS, Registry
from fedpath.schema import (  # noqa: F401  (ConfigError, resolve_params: their home)
    Checked,
    ConfigError,
    from_mapping,
    require,
    resolve_params,
)
from fedpath.utils.yaml_io import read_yaml_mapping

#: config keys that do not change what a run computes (beyond the last bits of
#: float rounding, for the thread count): outside :meth:`ExperimentConfig.hash`
#: (experiment tracking among them: it can be turned on at ``--resume``)
RUN_LOCAL_KEYS = (
    "output_dir",
    "runtime.threads",
    "runtime.feature_cache",
    "runtime.tracking",
    "runtime.tracking_dir",
)


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
        """Check the rules between sections (each section checks its own keys);
        the first broken rule fails, naming its key."""
        self.evaluation.check_lodo(self.lodo)
        self._validate_run()
        self._validate_selection()
        self._validate_evaluation()

    def _validate_run(self) -> None:
        """The held-out domain, the seeds and the run directory's names."""
        # lodo.targets: none with validation is consortium mode (docs/ship.md):
        # every hospital trains, the validation slides are all that is scored
        require(
            self.lodo.targets != "none"
            or self.evaluation.protocol == "local"
            or (
                self.evaluation.protocol == "classifier"
                and self.partition.validation > 0
            ),
            "evaluation.protocol",
            "'local' when lodo.targets is 'none' (no held-out domain to evaluate "
            "on), or 'classifier' with partition.validation > 0 (consortium mode: "
            "scored on the hospitals' validation slides)",
            self.evaluation.protocol,
        )
        seeds = self.seeds
        require(
            len(seeds) >= 1 and len(set(seeds)) == len(seeds) and min(seeds) >= 0,
            "seeds",
            "a non-empty list of distinct integers >= 0 (they seed numpy, which "
            "refuses negative seeds)",
            seeds,
        )
        for key, value in (("name", self.name), ("label", self.label)):
            require(
                value is None or _path_component(value),
                key,
                "a name usable as one folder (no '/', '\\', '..' or leading '.'), "
                "it names the run directory under output_dir",
                value,
            )

    def _validate_selection(self) -> None:
        """Validation slides, the exported weights and weight averaging."""
        validating = self.partition.validation > 0
        require(
            not validating or self.evaluation.protocol == "classifier",
            "partition.validation",
            "0 unless evaluation.protocol is 'classifier' (the global model is "
            "scored on the validation slides)",
            self.partition.validation,
        )
        require(
            validating or self.partition.validation_seed is None,
            "partition.validation_seed",
            "null unless partition.validation > 0 (no validation slides to draw)",
            self.partition.validation_seed,
        )
        require(
            validating or self.runtime.export != "selected",
            "runtime.export",
            "not 'selected' unless partition.validation > 0 (no validation split to "
            "select a round on)",
            self.runtime.export,
        )
        swa = self.evaluation.swa_from
        require(
            self.runtime.export != "averaged" or swa > 0,
            "runtime.export",
            "not 'averaged' unless evaluation.swa_from > 0 (no averaged weights)",
            self.runtime.export,
        )
        require(
            swa <= self.train.rounds,
            "evaluation.swa_from",
            f"a round in 1..train.rounds ({self.train.rounds}), or 0 (off)",
            swa,
        )
        require(
            swa == 0 or self.evaluation.protocol == "classifier",
            "evaluation.swa_from",
            "0 unless evaluation.protocol is 'classifier' (the global model's "
            "weights are averaged)",
            swa,
        )

    def _validate_evaluation(self) -> None:
        """Test-time augmentation, BatchNorm adaptation and the operating point."""
        require(
            self.evaluation.tta == "none"
            or not self.train.cache_features
            or self.train.augment == "dihedral",
            "evaluation.tta",
            "'none' when train.cache_features is true without train.augment: "
            "dihedral (the cache then holds one view of each image, nothing to "
            "average over)",
            self.evaluation.tta,
        )
        require(
            not self.evaluation.adapt_bn or self.evaluation.protocol == "classifier",
            "evaluation.adapt_bn",
            "false unless evaluation.protocol is 'classifier' (the global model's "
            "BatchNorm statistics are re-estimated on the held-out domain)",
            self.evaluation.adapt_bn,
        )
        require(
            not self.evaluation.adapt_bn or self.lodo.targets != "none",
            "evaluation.adapt_bn",
            "false when lodo.targets is 'none' (no held-out domain to adapt to)",
            self.evaluation.adapt_bn,
        )
        require(
            self.partition.validation > 0 or self.evaluation.target_sensitivity is None,
            "evaluation.target_sensitivity",
            "null unless partition.validation > 0 (the threshold is chosen on the "
            "source validation split)",
            self.evaluation.target_sensitivity,
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
        """Short stable hash of the resolved config (identifies a model's origin).

        :data:`RUN_LOCAL_KEYS` are left out: they say where a run is kept and how
        many threads ran it, not what it is, so a run directory moved elsewhere,
        or a suite resumed with another launcher (which sets ``runtime.threads``),
        still resumes.
        """
        raw = self.to_dict()
        for key in RUN_LOCAL_KEYS:
            *parents, leaf = key.split(".")
            node = raw
            for part in parents:
                node = node.get(part, {})
            node.pop(leaf, None)
        blob = json.dumps(raw, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **overrides: Any) -> ExperimentConfig:
        """Return a copy with dotted overrides applied and re-validated."""
        raw = self.to_dict()
        for key, value in overrides.items():
            _set_dotted(raw, key.replace("__", "."), value)
        return build_config(raw)


# --------------------------------------------------------------------------- loading


def _path_component(text: str) -> bool:
    return (
        bool(text)
        and not text.startswith(".")
        and "/" not in text
        and "\\" not in text
        and "\0" not in text
    )


#: appended to "data not found" errors: where a user finds the datasets
WHERE_TO_GET = (
    "where to get each dataset and how to build what fedpath reads: docs/data/ "
    "(AMi-Br: `fedpath amibr`)"
)

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def resolve_data_root(root: str | None) -> str | None:
    """``data.root`` with ``${NAME}`` replaced by the environment variable NAME.

    Shipped configs write ``root: ${FEDPATH_AMIBR}`` so that no path of one
    machine is in them; the variable is read when the data is loaded (not when
    the config is validated), and an unset one is an error naming it.
    """
    if root is None:
        return None

    def env(m: re.Match[str]) -> str:
        value = os.environ.get(m.group(1))
        if not value:
            raise ConfigError(
                f"data.root {root!r}: environment variable {m.group(1)} is not "
                f"set; set it to the dataset's folder or pass "
                f"data.root=/path/to/data ({WHERE_TO_GET})"
            )
        return value

    return _ENV.sub(env, root)


def load_config(
    path: str | Path | None = None, overrides: Sequence[str] = ()
) -> ExperimentConfig:
    """Load a YAML config (defaults if ``path`` is None) plus key=value overrides.

    Also checks that the package of ``runtime.tracking``'s backend is installed
    (here, where a user's config is loaded, not in :func:`build_config`: a Flower
    node validates the coordinator's config, and tracks nothing).
    """
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_yaml_mapping(Path(path))
        if not raw:  # every default would start a 4-fold experiment on every core
            raise ConfigError(
                f"config file {str(path)!r} is empty; expected at least data, "
                "algorithm and train keys (see configs/ for examples)"
            )
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(raw, key, value)
    try:
        cfg = build_config(raw)
        check_backend(cfg.runtime.tracking)
        return cfg
    except ConfigError as err:
        where = f" (in {path})" if path is not None else ""
        raise ConfigError(f"{err}{where}") from None


def parse_override(item: str) -> tuple[str, Any]:
    """``"train.lr=1e-4"`` -> ``("train.lr", 0.0001)``; values are parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected key=value (e.g. train.lr=1e-4)")
    key, text = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {item!r}: the key is empty")
    if "" in key.split("."):
        raise ConfigError(
            f"override {item!r}: the key {key!r} has an empty part; expected "
            "dotted names (e.g. train.lr=1e-4)"
        )
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
    check_distinct(data.params, "data.params", ("classes", "domains"))
    lodo = {"targets": cfg.lodo.targets, "sources": cfg.lodo.sources}
    check_distinct(lodo, "lodo", ("targets", "sources"))
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
