"""Suites: several labelled variants of one base experiment, run and tabulated together.

A suite file is how ablations (FedStain Table V and the component switches) and the
demo are written down::

    description: FedStain ablations on the synthetic hospitals
    base: ../synthetic_fedstain.yaml      # relative to this file
    overrides: ['seeds=[0,1,2]']          # applied to every variant
    variants:                             # label -> overrides of that variant
      full: []
      no_randstain: [algorithm.params.randstain=false]
    metrics: [accuracy, balanced_accuracy]  # optional: the tables printed at the end

Each variant is a normal experiment whose results carry the variant's label as the
method name, so ``fedpath table`` shows one row per variant.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.utils.yaml_io import read_yaml_mapping

SUITE_KEYS = ("description", "base", "overrides", "variants", "metrics", "default")


def _strings(value: object, key: str, path: Path) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"suite {str(path)!r}: {key!r} must be a list of key=value strings, "
            f"got {value!r}"
        )
    return list(value)


def load_suite(
    path: Path, overrides: Sequence[str] = (), only: Sequence[str] | None = None
) -> tuple[str, list[ExperimentConfig]]:
    """(description, one validated config per variant, in file order)."""
    raw = read_yaml_mapping(path)
    unknown = [k for k in raw if k not in SUITE_KEYS]
    if unknown:
        raise ConfigError(
            f"suite {str(path)!r}: unknown key {unknown[0]!r}; valid keys: "
            f"{', '.join(SUITE_KEYS)}"
        )
    if "base" not in raw or not isinstance(raw["base"], str):
        raise ConfigError(f"suite {str(path)!r}: 'base' (a config path) is required")
    variants = raw.get("variants")
    if not isinstance(variants, dict) or not variants:
        raise ConfigError(
            f"suite {str(path)!r}: 'variants' must map labels to override lists"
        )
    base = (path.parent / raw["base"]).resolve()
    common = _strings(raw.get("overrides"), "overrides", path)
    default = raw.get("default")
    if default is not None and (
        not isinstance(default, list)
        or not default
        or not all(isinstance(v, str) for v in default)
    ):
        raise ConfigError(
            f"suite {str(path)!r}: 'default' must be a non-empty list of variant "
            f"labels, got {default!r}"
        )
    # without --only: the variants named by `default`, else every variant
    chosen = list(only) if only is not None else list(default or variants)
    missing = [v for v in chosen if v not in variants]
    if missing:
        what = (
            f"'default' names {missing[0]!r} (no such variant)"
            if only is None
            else f"has no variant {missing[0]!r}"
        )
        raise ConfigError(
            f"suite {str(path)!r} {what}; variants: {', '.join(map(str, variants))}"
        )
    _metrics(raw, path)  # a bad 'metrics' fails here too (`fedpath check`)
    configs = []
    for label in chosen:
        extra = _strings(variants[label], f"variants.{label}", path)
        try:
            cfg = load_config(base, [*common, *extra, *overrides, f"label={label}"])
        except ConfigError as err:  # name the suite and variant, not only the base
            raise ConfigError(
                f"suite {str(path)!r}, variant {label!r}: {err}"
            ) from None
        configs.append(cfg)
    return str(raw.get("description", path.stem)), configs


def suite_metrics(path: Path) -> list[str] | None:
    """The metrics a suite asks to tabulate (``metrics:``), or None."""
    return _metrics(read_yaml_mapping(path), path)


def _metrics(raw: dict[str, object], path: Path) -> list[str] | None:
    """The suite's ``metrics:`` checked: a list of names, or None."""
    value = raw.get("metrics")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"suite {str(path)!r}: 'metrics' must be a list of metric names, got "
            f"{value!r}"
        )
    return list(value)
