"""Whether a finished or interrupted run came from the config asked for now.

``--resume`` hands back a finished run's results and continues an interrupted
run from its checkpoint; both are refused when the config changed since (naming
the keys that differ, from the run's ``config.yaml``), except for options added to
fedpath after the run, at their defaults (a new option's default keeps the
behaviour the run had), and ``seeds`` (a run is one of them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpath.errors import ConfigError, ResumeError
from fedpath.utils.yaml_io import read_yaml_mapping

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig

log = logging.getLogger("fedpath")


def check_same_config(
    run_dir: Path, final: Mapping[str, Any], cfg: ExperimentConfig, config_hash: str
) -> None:
    """Refuse to hand back a finished run's results for a changed config
    (``config_hash``: the hash of ``cfg``).

    ``--resume`` skips finished runs; if the config changed since, their results
    would be returned as the new config's. The differing keys are named (from the
    run's ``config.yaml``). Options added to fedpath after the run, set to their
    defaults, do not count: a new option's default keeps the old behaviour.
    """
    if final.get("config_hash") == config_hash:
        return
    keys, added = _differing_keys(run_dir / "config.yaml", cfg)
    if _only_added(run_dir, keys, added):
        return
    shown = ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else "")
    raise ResumeError(
        f"{run_dir} finished with another config (differing keys: "
        f"{shown or 'unknown'}); --resume would return its old results: run "
        "without --resume to redo it, or choose another name/output_dir"
    )


def only_added_at_default(run_dir: Path, cfg: ExperimentConfig) -> bool:
    """True when ``cfg`` differs from the run's saved config only by options
    added to fedpath since, at their defaults (logged)."""
    return _only_added(run_dir, *_differing_keys(run_dir / "config.yaml", cfg))


#: keys of the experiment, not of one run: a run is one seed of ``seeds``, so
#: asking for more or fewer seeds changes no run that is asked for again
PER_EXPERIMENT_KEYS = ("seeds",)


def _only_added(run_dir: Path, keys: list[str], added: set[str]) -> bool:
    """True (logged) when the differing ``keys`` are all ``added`` ones or
    :data:`PER_EXPERIMENT_KEYS`."""
    rest = [k for k in keys if k not in PER_EXPERIMENT_KEYS]
    if not keys or not set(rest) <= added:
        return False
    log.info(
        "%s: it ran with other %s; its results stand",
        run_dir,
        ", ".join(
            [k for k in keys if k in PER_EXPERIMENT_KEYS]
            + [f"{k} (added to fedpath since, at its default)" for k in rest]
        ),
    )
    return True


def _differing_keys(saved: Path, cfg: ExperimentConfig) -> tuple[list[str], set[str]]:
    """The keys where ``cfg`` differs from the run's saved config (none when it
    is missing or unreadable: then the keys cannot be named, with a warning),
    and those of them the saved config lacks that ``cfg`` has at their default."""
    if not saved.is_file():
        return [], set()
    try:
        old = flat_keys(read_yaml_mapping(saved, "the run's saved config"))
    except ConfigError as err:
        log.warning("%s", err)
        return [], set()
    new = flat_keys(cfg.to_dict())
    from fedpath.config import RUN_LOCAL_KEYS, ExperimentConfig

    defaults = flat_keys(ExperimentConfig().to_dict())
    keys = sorted(
        k
        for k in old.keys() | new.keys()
        if old.get(k) != new.get(k) and k not in RUN_LOCAL_KEYS
    )
    added = {  # options newer than the run, at defaults that keep its behaviour
        k for k in keys if k not in old and k in defaults and new[k] == defaults[k]
    }
    return keys, added


def flat_keys(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config mapping as dotted keys (``train.lr``); an empty mapping
    is a value of its own."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flat_keys(v, key + "."))
        else:
            out[key] = v
    return out
