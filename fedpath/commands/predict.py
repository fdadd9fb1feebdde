"""``fedpath predict`` (a CSV of predictions) and ``fedpath adapt-bn`` (a model
file with BatchNorm re-estimated on a site's images): an exported model applied
to a folder of images (or, for ``predict``, of slide bags)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console

from fedpath.commands.common import SKIP_BAD_HELP, add_common, console
from fedpath.utils.cli_args import SubParsers, int_at_least, is_quiet


def register_predict(sub: SubParsers) -> None:
    """Add ``predict`` to ``sub``."""
    pr = sub.add_parser(
        "predict",
        help="predict every image of a folder (or one image) with an exported model",
        description="Writes one CSV row per image: path, predicted class, one "
        "probability column per class. Images of another size are resized to the "
        "model's input size (bilinear, antialiased), as the training data was. A "
        "MIL model (models/<client>.fpm) takes a bag file (.h5/.pt) or a folder of "
        "them (recursive) and writes one row per slide: slide, path, predicted, "
        "prob_<class>... at full precision.",
    )
    pr.add_argument("model", type=Path)
    pr.add_argument(
        "images",
        type=Path,
        help="an image file or a folder (recursive); for a MIL model a bag file or "
        "a folder of bag files",
    )
    pr.add_argument("--out", type=Path, required=True, help="predictions CSV")
    pr.add_argument("--batch-size", type=int_at_least(1), default=64)
    pr.add_argument("--skip-bad", action="store_true", help=SKIP_BAD_HELP)
    add_common(pr)


def register_adapt_bn(
    sub: SubParsers,
) -> None:
    """Add ``adapt-bn`` to ``sub``."""
    ad = sub.add_parser(
        "adapt-bn",
        help="adapt an exported model's BatchNorm statistics to a site's unlabelled "
        "images (AdaBN), writing a new model file",
        description="Re-estimates every BatchNorm layer's running mean and variance "
        "on the images under IMAGES (any folder layout, searched recursively; no "
        "label is read, no weight is trained) and writes the adapted model to --out. "
        "A scanner or stain protocol the federation never saw shifts the "
        "activations; re-estimating the statistics on the site's own images undoes "
        "much of that shift. The new file records how many images it was adapted "
        "on (adapted_bn); use it with `fedpath evaluate` / `fedpath predict` like "
        "any model file. Use a few hundred images or more, of the kind the model "
        "will see.",
    )
    ad.add_argument("model", type=Path, help="an image model file (model.fpm)")
    ad.add_argument(
        "images", type=Path, help="a folder of the site's images (recursive)"
    )
    ad.add_argument("--out", type=Path, required=True, help="the adapted model file")
    ad.add_argument(
        "--batch-size", type=int_at_least(2, "a batch's variance"), default=64
    )
    ad.add_argument("--skip-bad", action="store_true", help=SKIP_BAD_HELP)
    ad.add_argument(
        "--all-layers",
        action="store_true",
        help="also adapt the BatchNorm layers of the stages frozen in training "
        "(the file's bn_fixed; by default they keep their statistics, as the "
        "run's own evaluation.adapt_bn does)",
    )
    add_common(ad)


def _bar_step(
    stack: ExitStack, name: str, unit: str, quiet: bool
) -> Callable[[int, int], None]:
    """A progress callback ``step(done, total)`` whose bar starts at the first
    call, when the total is known, and closes with ``stack``."""
    from fedpath.utils.progress_display import JobProgress, job_progress

    job: list[JobProgress] = []
    seen = [0]

    def step(done: int, total: int) -> None:
        if not job:
            job.append(stack.enter_context(job_progress(name, unit, total, quiet)))
        job[0].advance(done - seen[0])
        seen[0] = done

    return step


def run_predict(args: argparse.Namespace) -> int:
    """Write the predictions CSV; report how many and what was skipped."""
    from fedpath.artifact import LoadedModel
    from fedpath.inference import predict_bags, predict_files
    from fedpath.loading import load_model
    from fedpath.utils.io import check_output_file

    quiet = is_quiet(args)
    check_output_file(args.out, "--out")
    model = load_model(args.model)  # an image model, or a MIL model of slide bags
    unit = "images" if isinstance(model, LoadedModel) else "slides"
    with ExitStack() as stack:
        step = _bar_step(stack, "predict", unit, quiet)
        if isinstance(model, LoadedModel):
            info = predict_files(
                model, args.images, args.out, args.batch_size, args.skip_bad, step
            )
        else:
            info = predict_bags(model, args.images, args.out, args.skip_bad, step)
    console(quiet).print(f"wrote {info[unit]} predictions to {args.out}")
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


def run_adapt_bn(args: argparse.Namespace) -> int:
    """Write the model with its BatchNorm statistics re-estimated on the images."""
    from fedpath.inference import adapt_model_file
    from fedpath.loading import load_model
    from fedpath.utils.io import check_output_file

    quiet = is_quiet(args)
    check_output_file(args.out, "--out")
    model = load_model(args.model)
    with ExitStack() as stack:
        step = _bar_step(stack, "adapt-bn", "images", quiet)
        info = adapt_model_file(
            model,
            args.images,
            args.out,
            args.batch_size,
            args.skip_bad,
            step,
            all_layers=args.all_layers,
        )
    kept = info["kept"]
    which = f" ({kept} layers of its frozen stages kept)" if kept else ""
    console(quiet).print(
        f"wrote {args.out}: BatchNorm statistics of {args.model} re-estimated on "
        f"{info['images']} images under {args.images}{which}",
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
