"""Run the cells (fold x seed x method) of ``fedpath run``, ``demo`` and ``suite``:
one after another in this process, or on a parallel launcher; ``--status`` only
describes them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedpath.commands.common import console
from fedpath.config import ExperimentConfig

if TYPE_CHECKING:
    from fedpath.data.base import DomainDataset
    from fedpath.runtime.cells import Cell
    from fedpath.runtime.launch import LaunchOptions


def launch_options(args: argparse.Namespace) -> LaunchOptions:
    """The launcher that ``--launcher``/``--jobs``/``--address`` ask for."""
    from fedpath.runtime.launch import launch_options as options

    return options(
        getattr(args, "launcher", None),
        getattr(args, "jobs", None),
        getattr(args, "address", None),
    )


def load_datasets(configs: Sequence[ExperimentConfig]) -> dict[str, DomainDataset]:
    """Each distinct dataset of ``configs`` loaded once, keyed by ``repr(cfg.data)``."""
    from fedpath.runtime.experiment import load_dataset

    datasets: dict[str, DomainDataset] = {}
    for cfg in configs:
        if repr(cfg.data) not in datasets:
            datasets[repr(cfg.data)] = load_dataset(cfg.data)
    return datasets


def execute(
    configs: Sequence[ExperimentConfig],
    args: argparse.Namespace,
    quiet: bool,
    resume: bool,
    datasets: dict[str, DomainDataset] | None = None,
    suite: bool = False,
) -> int:
    """Run (or with ``--status`` describe) every cell of ``configs`` with the
    launcher of ``args``; 0, or 1 when a cell of a parallel launcher failed."""
    from fedpath.runtime.cells import plan_cells

    opts = launch_options(args)  # a bad launcher fails before any data loads
    if not getattr(args, "status", False):
        check_output_dirs(configs)  # and an output_dir that cannot be written
    datasets = datasets if datasets is not None else load_datasets(configs)
    cells = plan_cells(configs, datasets)
    if getattr(args, "status", False):
        return _print_status(cells)
    if not opts.parallel:
        return _run_serial(configs, cells, datasets, quiet, resume, suite)
    return _run_parallel(cells, opts, quiet, resume)


def check_output_dirs(configs: Sequence[ExperimentConfig]) -> None:
    """Create each config's ``output_dir``, or fail naming it and why, before
    any data loads or any cell trains."""
    from fedpath.utils.io import make_folder

    for out in dict.fromkeys(cfg.output_dir for cfg in configs):
        make_folder(Path(out), f"output_dir {out!r}")


def _print_status(cells: Sequence[Cell]) -> int:
    """``--status``: the table of the cells' states (printed even when quiet)."""
    from fedpath.runtime.cells import status_table
    from fedpath.utils.progress import plural

    table, counts = status_table(cells)
    console(False).print(table, highlight=False, markup=False)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    console(False).print(f"{plural(len(cells), 'cell')}: {summary}", highlight=False)
    return 0


def _run_serial(
    configs: Sequence[ExperimentConfig],
    cells: Sequence[Cell],
    datasets: dict[str, DomainDataset],
    quiet: bool,
    resume: bool,
    suite: bool,
) -> int:
    """Every cell in this process, holding each cell's lock while it runs."""
    from fedpath.runtime.cells import clear_failure, hold_locks
    from fedpath.runtime.experiment import run_experiment
    from fedpath.utils.progress_display import make_reporter

    reporter = make_reporter(quiet)
    rounds = sum(c.rounds for c in cells)
    with hold_locks(cells) as locks, reporter as rep:
        current: list[Path] = []

        def before_run(run_dir: Path) -> None:
            for done in current:
                locks.release_one(done)
            current[:] = [run_dir]
            locks.mark(run_dir, "running")
            clear_failure(run_dir)

        if suite:
            rep.start_suite(len(cells), len(configs), rounds)
        for k, cfg in enumerate(configs, 1):
            if suite:
                rep.start_method(k, len(configs), cfg.method)
            run_experiment(
                cfg,
                rep,
                resume=resume,
                dataset=datasets[repr(cfg.data)],
                before_run=before_run,
            )
    return 0


def _run_parallel(
    cells: Sequence[Cell], opts: LaunchOptions, quiet: bool, resume: bool
) -> int:
    """Every cell on the local or Ray launcher; each failure named, then 1."""
    from fedpath.runtime.cells import hold_locks
    from fedpath.runtime.launch import check_launcher, oversubscription, run_parallel
    from fedpath.runtime.launch_view import make_view
    from fedpath.utils.progress import plural

    check_launcher(opts)
    warning = oversubscription(cells, opts)
    if warning:
        console(False).print(warning, highlight=False, markup=False)
    how = (
        f"{plural(min(opts.jobs, len(cells)), 'local worker')}"
        if opts.launcher == "local"
        else f"Ray ({opts.address or 'a local instance'})"
    )
    console(quiet).print(f"{plural(len(cells), 'cell')} on {how}", highlight=False)
    with hold_locks(cells) as locks, make_view(cells, opts.jobs, quiet) as view:
        results = run_parallel(cells, opts, resume, locks, view)
    failed = [r for r in results if not r.ok]
    for res in failed:
        cell = cells[res.index - 1]
        first = res.error.splitlines()[0] if res.error else ""
        console(False).print(
            f"failed: cell {cell.index} {cell.label}: {res.kind}: {first} (traceback "
            f"in {cell.run_dir / 'failed.json'})",
            highlight=False,
            markup=False,
        )
    return 1 if failed else 0
