"""The runs a report shows: found under the given paths, grouped by experiment.

A run directory is one with ``final.json`` (finished) or ``results.jsonl``
(interrupted: its curves are shown, it has no table row). An *experiment* is
``{output_dir}/{name}``: the runs of one suite or one ``fedpath run``, which
share a dataset and a budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpath.errors import ConfigError, DataError
from fedpath.runtime.persistence import FINAL, MODEL, RESULTS, TRAFFIC
from fedpath.runtime.records import read_final, read_json_lines
from fedpath.utils.yaml_io import read_yaml_mapping


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
        if self.final:
            return int(self.final["seed"])
        digits = self.path.name.removeprefix("seed")  # {target}/seed{seed}
        return int(digits) if digits.isdigit() else 0

    @property
    def protocol(self) -> str:
        ev = self.config.get("evaluation")
        if not isinstance(ev, dict):
            return "classifier"
        return str(ev.get("protocol", "classifier"))

    @property
    def model_file(self) -> Path | None:
        p = self.path / MODEL
        return p if p.is_file() else None

    def traffic(self) -> list[dict[str, Any]]:
        """The run's ``traffic.jsonl`` records, checked as ``fedpath audit``
        checks them (:func:`fedpath.runtime.audit.read_traffic`); [] without."""
        from fedpath.runtime.audit import read_traffic

        if not (self.path / TRAFFIC).exists():
            return []
        return read_traffic(self.path, torn_tail="skip")  # a live run's too


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
    """A run directory's config, ``final.json`` and ``results.jsonl``, each
    checked (:mod:`fedpath.runtime.records`): a damaged file is an error naming
    it and the line; a truncated last line of a run still writing is left out."""
    cfg = read_yaml_mapping(p / "config.yaml", "run config")
    algorithm = cfg.get("algorithm")
    if not cfg.get("label") and not (
        isinstance(algorithm, dict) and isinstance(algorithm.get("name"), str)
    ):
        raise DataError(
            f"run config {str(p / 'config.yaml')!r}: no 'algorithm.name' (a "
            "damaged run directory)"
        )
    final = read_final(p) if (p / FINAL).exists() else None
    return Run(p, cfg, final, _results(p / RESULTS))


def _results(path: Path) -> list[dict[str, Any]]:
    """The records of ``results.jsonl`` ([] without one), each with an integer
    ``round`` and a string ``kind`` where it has them (what the curves read)."""
    if not path.exists():
        return []
    lines = read_json_lines(path, "run record")
    for line, rec in zip(lines.numbers, lines.records, strict=True):
        rnd, kind = rec.get("round", 0), rec.get("kind", "")
        if isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0:
            raise DataError(
                f"run record {str(path)!r}: line {line}: 'round' must be an "
                "integer >= 0"
            )
        if not isinstance(kind, str):
            raise DataError(
                f"run record {str(path)!r}: line {line}: 'kind' must be a string"
            )
    return lines.records


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
