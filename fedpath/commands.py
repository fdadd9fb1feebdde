"""The handlers of fedpath's own subcommands (``run``, ``demo``, ``suite``,
``table``, ``evaluate``, ``predict``, ``list``, ``data``, ``stain-report``).

:mod:`fedpath.cli` parses the command line and dispatches here; the WSI, Flower,
FedHD-render and self-supervised subcommands live with their packages.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.data.base import DomainDataset

if TYPE_CHECKING:
    from fedpath.runtime.launch import LaunchOptions

#: the packaged demos: ``fedpath demo [NAME]``
DEMOS = ("stain", "fedhd", "fedad")


def _packaged_config(name: str) -> Path:
    return Path(str(resources.files("fedpath") / "configs" / f"{name}.yaml"))


def _console(quiet: bool) -> Console:
    return Console(quiet=quiet, soft_wrap=True)


def _cmd_run(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.runtime.experiment import run_dir_for

    cfg = load_config(args.config, args.overrides)
    code = _execute([cfg], args, quiet, args.resume)
    if getattr(args, "status", False):
        return code
    out = run_dir_for(cfg, "x", 0).parent.parent
    _console(quiet).print(f"results in {out}")
    if args.table and code == 0:
        _print_table([out], "accuracy", None, "markdown", None, quiet)
    return code


def _launch(args: argparse.Namespace) -> LaunchOptions:
    from fedpath.runtime.launch import launch_options

    return launch_options(
        getattr(args, "launcher", None),
        getattr(args, "jobs", None),
        getattr(args, "address", None),
    )


def _load_datasets(configs: Sequence[ExperimentConfig]) -> dict[str, DomainDataset]:
    from fedpath.runtime.experiment import load_dataset

    datasets: dict[str, DomainDataset] = {}
    for cfg in configs:
        if repr(cfg.data) not in datasets:
            datasets[repr(cfg.data)] = load_dataset(cfg.data)
    return datasets


def _execute(
    configs: Sequence[ExperimentConfig],
    args: argparse.Namespace,
    quiet: bool,
    resume: bool,
    datasets: dict[str, DomainDataset] | None = None,
    suite: bool = False,
) -> int:
    """Run (or with ``--status`` describe) every cell of ``configs`` with the
    launcher of ``args``; 0, or 1 when a cell of a parallel launcher failed."""
    from fedpath.runtime.cells import (
        clear_failure,
        hold_locks,
        plan_cells,
        status_table,
    )
    from fedpath.runtime.experiment import run_experiment
    from fedpath.runtime.launch import (
        check_launcher,
        make_view,
        oversubscription,
        run_parallel,
    )
    from fedpath.utils.progress import make_reporter, plural

    opts = _launch(args)
    datasets = datasets if datasets is not None else _load_datasets(configs)
    cells = plan_cells(configs, datasets)
    console = _console(quiet)
    if getattr(args, "status", False):
        table, counts = status_table(cells)
        _console(False).print(table, highlight=False, markup=False)
        summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        _console(False).print(
            f"{plural(len(cells), 'cell')}: {summary}", highlight=False
        )
        return 0
    if not opts.parallel:
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
    check_launcher(opts)
    warning = oversubscription(cells, opts)
    if warning:
        _console(False).print(warning, highlight=False, markup=False)
    how = (
        f"{plural(min(opts.jobs, len(cells)), 'local worker')}"
        if opts.launcher == "local"
        else f"Ray ({opts.address or 'a local instance'})"
    )
    console.print(f"{plural(len(cells), 'cell')} on {how}", highlight=False)
    with hold_locks(cells) as locks, make_view(cells, opts.jobs, quiet) as view:
        results = run_parallel(cells, opts, resume, locks, view)
    failed = [r for r in results if not r.ok]
    for res in failed:
        cell = cells[res.index - 1]
        first = res.error.splitlines()[0] if res.error else ""
        _console(False).print(
            f"failed: cell {cell.index} {cell.label}: {res.kind}: {first} (traceback "
            f"in {cell.run_dir / 'failed.json'})",
            highlight=False,
            markup=False,
        )
    return 1 if failed else 0


def _only(text: str | None) -> list[str] | None:
    return [m.strip() for m in text.split(",") if m.strip()] if text else None


def _cmd_demo(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.runtime.suite import load_suite, suite_metrics

    overrides = list(args.overrides)
    name = overrides.pop(0) if overrides and "=" not in overrides[0] else "stain"
    files = {"stain": "demo", **{d: f"demo_{d}" for d in DEMOS if d != "stain"}}
    if name not in files:
        raise ConfigError(
            f"demo {name!r} does not exist; choices: {', '.join(DEMOS)} (no name: "
            "stain)"
        )
    path = _packaged_config(files[name])
    description, configs = load_suite(path, overrides, _only(args.methods))
    metrics = suite_metrics(path) or ["accuracy", "balanced_accuracy"]
    if name == "stain" and getattr(args, "launcher", None) is None:
        # its cells (one thread each, demo_base.yaml) in a worker per core (no
        # --jobs: the cores): the same numbers on any machine, and on 2 cores in
        # about 0.6x the time of one process on 2 threads
        args.launcher = "local"
    baseline = "fedavg" if name == "stain" else None
    return _run_suite(description, configs, quiet, args.resume, metrics, args, baseline)


def _what_it_shows(
    outs: Sequence[Path], labels: Sequence[str], metric: str, baseline: str
) -> str:
    """The line under a demo's table: each method's average of ``metric`` at the
    unseen domain against ``baseline``'s, and whether the gap is larger than the
    seed spread (empty when the runs cannot say)."""
    from fedpath.evaluation.tables import build_table, separation
    from fedpath.runtime.experiment import collect_rows

    rows = [r for r in collect_rows(outs, "target") if r.method in labels]
    if not rows or not all(metric in r.metrics for r in rows):
        return ""
    text = separation(build_table(rows, metric=metric), baseline)
    return f"What this shows ({metric} at the unseen hospital): {text}" if text else ""


def _cmd_suite(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.runtime.suite import load_suite, suite_metrics

    description, configs = load_suite(args.suite, args.overrides, _only(args.only))
    metrics = [args.metric] if args.metric else suite_metrics(args.suite)
    return _run_suite(
        description, configs, quiet, args.resume, metrics or ["accuracy"], args
    )


def _run_suite(
    description: str,
    configs: Sequence[ExperimentConfig],
    quiet: bool,
    resume: bool,
    metrics: Sequence[str],
    args: argparse.Namespace | None = None,
    baseline: str | None = None,
) -> int:
    """Run ``configs`` and print their tables; with ``baseline``, the line that
    says how each method's average compares with it (:func:`_what_it_shows`)."""
    from fedpath.runtime.experiment import find_runs, plan_runs
    from fedpath.utils.progress import make_reporter, plural

    args = args or argparse.Namespace()
    make_reporter(quiet)  # a bad FEDPATH_PROGRESS fails before any work
    console = _console(quiet)
    head = configs[0]
    datasets = _load_datasets(configs)
    first = datasets[repr(head.data)]
    # counted up front: a bad lodo.targets fails before anything trains
    for cfg in configs:
        plan_runs(cfg, datasets[repr(cfg.data)])
    per_client = head.evaluation.protocol == "local" and head.lodo.targets == "none"
    if per_client:
        shape = f"{len(first.domains)} hospitals evaluated on their own test slides"
    else:
        targets = first.domains if head.lodo.targets == "all" else head.lodo.targets
        shape = plural(len(targets), "unseen domain")
    status = getattr(args, "status", False)
    (_console(False) if status else console).print(
        f"{description}: {plural(len(configs), 'method')} x {shape} x "
        f"{plural(len(head.seeds), 'seed')}"
    )
    start = time.perf_counter()
    code = _execute(configs, args, quiet, resume, datasets, suite=True)
    if status:
        return code
    outs = sorted({Path(c.output_dir) / c.name for c in configs})
    console.print(
        f"finished in {time.perf_counter() - start:.0f} s; runs in "
        f"{', '.join(map(str, outs))}"
    )
    if not any(find_runs([o]) for o in outs if o.exists()):
        return code
    labels = [c.method for c in configs]
    split = "clients" if per_client else "target"
    for metric in metrics:
        _print_table(outs, metric, split, "markdown", None, quiet, labels)
    if head.lodo.source_eval and head.evaluation.protocol == "classifier":
        _print_table(outs, "accuracy", "source_mean", "markdown", None, quiet, labels)
    if baseline is not None and not per_client:
        existing = [o for o in outs if o.exists()]
        line = _what_it_shows(existing, labels, metrics[-1], baseline)
        if line:  # part of the tables, printed even when quiet (as they are)
            _console(False).print(line, highlight=False, markup=False)
    return code


def _cmd_table(args: argparse.Namespace, quiet: bool) -> int:
    _print_table(
        args.paths,
        args.metric,
        args.split,
        args.format,
        args.out,
        quiet,
        select=args.select,
    )
    return 0


def _print_table(
    paths: Sequence[Path],
    metric: str,
    split: str | None,
    fmt: str,
    out: Path | None,
    quiet: bool,
    methods: Sequence[str] | None = None,
    select: str = "last",
) -> None:
    """Print (and with ``out`` write) the table of ``metric`` on ``split`` of the
    runs under ``paths``; ``split`` None: the first of ``target``, ``clients``,
    ... that these runs have (runs with ``lodo.targets: none`` have only
    ``clients``), said in the title."""
    from fedpath.evaluation.tables import build_table, to_csv, to_latex, to_markdown
    from fedpath.runtime.experiment import collect_rows, splits_of
    from fedpath.utils.io import atomic_write_text

    if split is None:
        have = splits_of(paths)
        split = have[0] if have else "target"  # none: collect_rows says why
    rows = collect_rows(paths, split, select)
    if rows and not any(metric in r.metrics for r in rows):
        have = sorted(
            {
                k
                for r in rows
                for k, v in r.metrics.items()
                if isinstance(v, int | float) and k != "n"
            }
        )
        listed = (
            f"expected one of {', '.join(have)}"
            if have
            else "these runs recorded no numeric metric for this split"
        )
        raise ConfigError(
            f"--metric: {metric!r} is not among these runs' metrics on --split "
            f"{split}; {listed}"
        )
    if methods is not None:  # keep the suite's methods, in the suite's order
        rows = sorted(
            (r for r in rows if r.method in methods),
            key=lambda r: methods.index(r.method),
        )
    table = build_table(rows, metric=metric)
    text = {"markdown": to_markdown, "csv": to_csv, "latex": to_latex}[fmt](table)
    title = {
        "target": "unseen target domain",
        "source_mean": "source domains' test splits (mean)",
        "source_worst": "worst source domain",
        "clients": "clients' own test splits",
        "adapted": "unseen target domain, BatchNorm adapted to it",
    }[split]
    if select == "selected":
        title += ", round selected on the sources' validation slides"
    elif select == "averaged":
        title += ", weights averaged over the last rounds"
    console = _console(False)  # the table is the output asked for, even when quiet
    if fmt == "markdown":
        console.print(
            f"\n{metric} (%) on the {title}, mean ± std over seeds\n", highlight=False
        )
    console.print(text, highlight=False, markup=False)
    if out is not None:
        atomic_write_text(out, text)


def _cmd_stain_report(args: argparse.Namespace) -> int:
    from fedpath.runtime.experiment import load_dataset
    from fedpath.stain.analysis import analyse, write_report

    cfg = load_config(args.config or _packaged_config("demo_base"), args.overrides)
    ds = load_dataset(cfg.data)
    rows, samples = analyse(ds, args.channel, args.images)
    title = args.title or f"{ds.name}: {args.channel} intensity per domain"
    png, table = write_report(rows, samples, args.out, title, args.channel)
    console = Console(soft_wrap=True)
    for r in rows:
        console.print(
            f"{r.domain:>24}: skewness {r.skewness:+.3f}, excess kurtosis "
            f"{r.excess_kurtosis:+.3f} ({r.images} images)",
            highlight=False,
        )
    console.print(f"wrote {png} and {table}")
    return 0


def _cmd_evaluate(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.artifact import LoadedModel, load_any
    from fedpath.inference import evaluate, open_data, parse_class_map
    from fedpath.utils.io import atomic_write_text, dumps_json

    model = load_any(args.model)  # an image model, or a MIL model of slide bags
    unit = "images" if isinstance(model, LoadedModel) else "slides"
    class_map = parse_class_map(args.class_map, model.class_names)
    opened = open_data(
        args.data,
        model,
        args.config,
        args.overrides,
        args.skip_bad,
        class_map,
        args.split,
    )
    ds = opened.dataset
    result = evaluate(
        model,
        ds,
        opened.domains,
        per_domain=args.per_domain,
        split=args.split,
        bootstrap=args.bootstrap,
        seed=args.seed,
    )
    result["model"] = str(args.model)
    result["data"] = args.data
    if opened.settings is not None:
        result["data_settings"] = opened.settings
    if opened.renamed:
        result["class_map"] = opened.renamed
    if opened.warnings:
        result["warnings"] = opened.warnings
    result["skipped"] = ds.skipped
    console = Console(soft_wrap=True)
    if not isinstance(model, LoadedModel):
        m = model.meta
        console.print(
            f"MIL model {m.architecture} of client {m.client or '?'} ({m.method}, "
            f"seed {m.seed}): bags of D={m.in_dim}, embedding space "
            f"{m.embedding_space!r}",
            highlight=False,
            markup=False,
        )
    for text in opened.warnings:
        Console(stderr=True).print(f"warning: {text}", highlight=False, markup=False)
    if opened.settings is not None:
        s = opened.settings
        params = ", ".join(f"{k}={v}" for k, v in s["params"].items())
        root = f", root {s['root']}" if s["root"] else ""
        console.print(
            f"data {s['name']}{root} ({params}): settings from {s['source']}",
            highlight=False,
            markup=False,
        )
    if opened.renamed:
        matched = ", ".join(f"{k} -> {v}" for k, v in opened.renamed.items())
        console.print(f"classes matched: {matched}", highlight=False, markup=False)
    part = "" if args.split == "all" else f" ({args.split} split)"
    _print_metrics(console, f"all{part}", result, model.class_names, unit)
    for d, dm in result.get("per_domain", {}).items():
        _print_metrics(console, f"{d}{part}", dm, model.class_names, unit)
    if ds.skipped:
        bad = "bag files" if unit == "slides" else "images"
        console.print(f"skipped {len(ds.skipped)} unreadable {bad} (--skip-bad)")
    if args.out:
        atomic_write_text(args.out, dumps_json(result, indent=2))
    return 0


def _print_metrics(
    console: Console, title: str, m: dict, classes: list[str], unit: str = "images"
) -> None:
    """One report of :func:`fedpath.inference.evaluate`: the metrics, their
    bootstrap intervals, per-class sensitivity and specificity, the operating
    point's metrics, and the confusion matrix with the class names; ``unit``
    names what was scored (``images``, or ``slides`` for a MIL model)."""
    from rich.markup import escape
    from rich.table import Table

    def num(v: float) -> str:
        return "n/a" if v != v else f"{v:.4f}"  # nan: undefined

    table = Table(title=f"{escape(title)}: {m['n']} {unit}", show_header=True)
    names = ("accuracy", "balanced_accuracy", "macro_f1", "auroc", "mcc")
    for name in names:
        table.add_column(name)
    table.add_row(*(num(m[k]) for k in names))
    console.print(table)
    bs = m.get("bootstrap")
    if bs is not None:

        def ci(lo: float, hi: float) -> str:
            return "n/a (one class)" if lo != lo else f"{lo:.4f}-{hi:.4f}"

        console.print(
            f"{100 * bs['level']:.0f}% bootstrap CI ({bs['resamples']} resamples of "
            f"the {unit}, seed {bs['seed']}): balanced_accuracy "
            f"{ci(*bs['balanced_accuracy'])}, auroc {ci(*bs['auroc'])}",
            highlight=False,
        )
    if "temperature" in m:
        console.print(
            f"probabilities scaled by the model's temperature {m['temperature']:.4f}"
        )
    per_class = m.get("per_class")
    if per_class is not None:
        console.print(
            "per class, one vs the rest: sensitivity (recall) = TP/(TP+FN), "
            "specificity = TN/(TN+FP)",
            highlight=False,
        )
        pc = Table()
        for col in ("class", "n", "sensitivity", "specificity"):
            pc.add_column(col)
        for c, r in per_class.items():
            pc.add_row(
                escape(c), str(r["n"]), num(r["sensitivity"]), num(r["specificity"])
            )
        console.print(pc)
    op = m.get("operating_point")
    if op is not None:
        cols = ("sensitivity", "specificity", *names[:2], "mcc")
        point = Table(
            title=f"at the model's operating point p >= {op['threshold']:.4f}"
        )
        for name in cols:
            point.add_column(name)
        point.add_row(*(num(op[k]) for k in cols))
        console.print(point)
    console.print(
        "confusion matrix: rows = true class, columns = predicted class",
        highlight=False,
    )
    cm = Table()
    cm.add_column("true \\ predicted")
    for c in classes:
        cm.add_column(escape(c))
    for c, row in zip(classes, m["confusion"], strict=True):
        cm.add_row(escape(c), *map(str, row))
    console.print(cm)


def _cmd_predict(args: argparse.Namespace, quiet: bool) -> int:
    from contextlib import ExitStack

    from fedpath.artifact import LoadedModel, load_any
    from fedpath.inference import predict_bags, predict_files
    from fedpath.utils.progress import JobProgress, job_progress

    model = load_any(args.model)  # an image model, or a MIL model of slide bags
    unit = "images" if isinstance(model, LoadedModel) else "slides"
    with ExitStack() as stack:
        job: list[JobProgress] = []  # started at the first batch: the total is known
        seen = [0]

        def step(done: int, total: int) -> None:
            if not job:
                bar = job_progress("predict", unit, total, quiet)
                job.append(stack.enter_context(bar))
            job[0].advance(done - seen[0])
            seen[0] = done

        if isinstance(model, LoadedModel):
            info = predict_files(
                model, args.images, args.out, args.batch_size, args.skip_bad, step
            )
        else:
            info = predict_bags(model, args.images, args.out, args.skip_bad, step)
    console = _console(quiet)
    console.print(f"wrote {info[unit]} predictions to {args.out}")
    err = Console(stderr=True)
    for text in info.get("warnings", []):
        err.print(f"warning: {text}", highlight=False, markup=False)
    if info["skipped"]:
        bad = "bag files" if unit == "slides" else "images"
        err.print(
            f"skipped {len(info['skipped'])} unreadable {bad}: "
            f"{', '.join(info['skipped'][:5])}"
        )
    return 0


def _cmd_adapt_bn(args: argparse.Namespace, quiet: bool) -> int:
    from contextlib import ExitStack

    from fedpath.artifact import load_model
    from fedpath.inference import adapt_model_file
    from fedpath.utils.progress import JobProgress, job_progress

    if args.batch_size < 2:
        raise ConfigError(
            f"--batch-size: expected 2 or more (a batch's variance), got "
            f"{args.batch_size}"
        )
    model = load_model(args.model)
    with ExitStack() as stack:
        job: list[JobProgress] = []
        seen = [0]

        def step(done: int, total: int) -> None:
            if not job:
                bar = job_progress("adapt-bn", "images", total, quiet)
                job.append(stack.enter_context(bar))
            job[0].advance(done - seen[0])
            seen[0] = done

        info = adapt_model_file(
            model, args.images, args.out, args.batch_size, args.skip_bad, step
        )
    _console(quiet).print(
        f"wrote {args.out}: BatchNorm statistics of {args.model} re-estimated on "
        f"{info['images']} images under {args.images}",
        highlight=False,
        markup=False,
    )
    if info["skipped"]:
        Console(stderr=True).print(
            f"skipped {len(info['skipped'])} unreadable images: "
            f"{', '.join(info['skipped'][:5])}",
            highlight=False,
            markup=False,
        )
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fedpath.runtime.experiment import load_dataset

    cfg = load_config(args.config or _packaged_config("demo_base"), args.overrides)
    ds = load_dataset(cfg.data)
    rows = ds.counts()
    table = Table(
        title=f"{ds.name}: {len(ds.domains)} domains, classes {ds.classes}, "
        f"{ds.image_size}px"
    )
    for col in rows[0]:
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    Console().print(table)
    return 0
