"""The runs a report shows: found under the given paths, grouped by experiment.

A run directory is one with ``final.json`` (finished) or ``results.jsonl``
(interrupted: its curves are shown, it has no table row). An *experiment* is
``{output_dir}/{name}``: the runs of one suite or one ``fedpath run``, which
share a dataset and a budget.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedpath.errors import ConfigError
from fedpath.runtime.persistence import FINAL, MODEL, RESULTS, TRAFFIC
from fedpath.utils.io import read_jsonl


@dataclass
class Run:
    """One run directory's files, read once."""

    path: Path
    config: dict[str, Any]
    final: dict[str, Any] | None
    records: list[dict[str, Any]]

    @property
    def method(self) -> str:
        if self.final:
            return str(self.final["method"])
        return str(self.config.get("label") or self.config["algorithm"]["name"])

    @property
    def target(self) -> str:
        return str(self.final["target"]) if self.final else self.path.parent.name

    @property
    def seed(self) -> int:
        return int(self.final["seed"]) if self.final else int(self.path.name[4:] or 0)

    @property
    def protocol(self) -> str:
        return str(self.config.get("evaluation", {}).get("protocol", "classifier"))

    @property
    def model_file(self) -> Path | None:
        p = self.path / MODEL
        return p if p.is_file() else None

    def traffic(self) -> list[dict[str, Any]]:
        p = self.path / TRAFFIC
        return list(read_jsonl(p)) if p.is_file() else []


@dataclass
class Experiment:
    """The runs of one ``{output_dir}/{name}``, in method order of the config."""

    root: Path
    runs: list[Run] = field(default_factory=list)

    @property
    def methods(self) -> list[str]:
        seen: list[str] = []
        for r in self.runs:
            if r.method not in seen:
                seen.append(r.method)
        return seen

    @property
    def finished(self) -> list[Run]:
        return [r for r in self.runs if r.final is not None]

    @property
    def protocol(self) -> str:
        return self.runs[0].protocol

    @property
    def per_client(self) -> bool:
        return any(
            "clients" in (r.final or {}).get("evaluation", {}) for r in self.runs
        )

    def first_run_any(self, method: str) -> Run | None:
        """The method's finished run of the first held-out domain, lowest seed
        (with or without a model file)."""
        runs = [r for r in self.finished if r.method == method]
        return min(runs, key=lambda r: (r.target, r.seed)) if runs else None

    def first_run(self, method: str) -> Run | None:
        """The method's run to draw figures from: a finished one with a model,
        the first held-out domain in the table's order, the lowest seed."""
        runs = [r for r in self.finished if r.method == method and r.model_file]
        return min(runs, key=lambda r: (r.target, r.seed)) if runs else None


def _is_run(p: Path) -> bool:
    return (p / "config.yaml").is_file() and (
        (p / FINAL).is_file() or (p / RESULTS).is_file()
    )


def _read(p: Path) -> Run:
    cfg = yaml.safe_load((p / "config.yaml").read_text()) or {}
    final = json.loads((p / FINAL).read_text()) if (p / FINAL).is_file() else None
    records = list(read_jsonl(p / RESULTS)) if (p / RESULTS).is_file() else []
    return Run(p, cfg, final, records)


def find_experiments(paths: list[Path]) -> list[Experiment]:
    """Every run under ``paths``, grouped by experiment (in the order found)."""
    groups: dict[Path, Experiment] = {}
    for path in paths:
        if not path.exists():
            raise ConfigError(f"report: {str(path)!r} does not exist")
        dirs = (
            [path]
            if _is_run(path)
            else sorted(
                p.parent for p in path.rglob("config.yaml") if _is_run(p.parent)
            )
        )
        for d in dirs:
            # {output_dir}/{name}/{method}/{target}/seed{seed}
            root = d.parents[2] if len(d.parents) >= 3 else d
            groups.setdefault(root, Experiment(root)).runs.append(_read(d))
    if not groups:
        raise ConfigError(
            "report: no run directories (with config.yaml and final.json or "
            f"results.jsonl) under {', '.join(map(str, paths))}"
        )
    for exp in groups.values():
        order = {m: i for i, m in enumerate(_config_order(exp))}
        exp.runs.sort(key=lambda r: (order.get(r.method, 1e9), r.target, r.seed))
    return list(groups.values())


def _config_order(exp: Experiment) -> list[str]:
    """Methods in the order their runs were started (config.yaml mtime)."""
    first: dict[str, float] = {}
    for r in exp.runs:
        t = (r.path / "config.yaml").stat().st_mtime
        first[r.method] = min(first.get(r.method, t), t)
    return sorted(first, key=lambda m: (first[m], m))
