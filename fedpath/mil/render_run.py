"""The work of ``fedpath fedhd-render`` (arguments: :mod:`fedpath.mil.render_cli`)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from fedpath.config import ConfigError
from fedpath.data.base import DataError, Split
from fedpath.mil.decoder_gan import AdversarialOptions
from fedpath.mil.decoder_train import EpochCallback
from fedpath.utils.cli_args import is_quiet


def _demo_config() -> Path:
    return Path(str(resources.files("fedpath") / "configs" / "demo_base.yaml"))


def _check_args(args: argparse.Namespace) -> None:
    checks = [
        (args.components >= 1, "--components: expected an integer >= 1"),
        (args.tokens >= 1, "--tokens: expected an integer >= 1"),
        (args.iters >= 0, "--iters: expected an integer >= 0"),
        (args.decoder_epochs >= 0, "--decoder-epochs: expected an integer >= 0"),
        (args.decoder_lr > 0, "--decoder-lr: expected a number > 0"),
        (args.decoder_width >= 1, "--decoder-width: expected an integer >= 1"),
        (args.columns >= 1, "--columns: expected an integer >= 1"),
        (
            args.train_epochs is None or args.train_epochs >= 0,
            "--train-epochs: expected an integer >= 0",
        ),
        (
            args.out.suffix.lower() == ".png",
            f"--out: expected a .png file, got {str(args.out)!r}",
        ),
    ]
    for name, value in (("--lambda-rec", args.lambda_rec), ("--d-lr", args.d_lr)):
        if value is not None and not args.adversarial:
            checks.append((False, f"{name}: only used with --adversarial"))
    checks += [
        (
            args.lambda_rec is None or args.lambda_rec >= 0,
            f"--lambda-rec: expected a number >= 0, got {args.lambda_rec}",
        ),
        (
            args.d_lr is None or args.d_lr > 0,
            f"--d-lr: expected a number > 0, got {args.d_lr}",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def _adversarial(args: argparse.Namespace) -> AdversarialOptions | None:
    """The decoder's ``L_GAN`` settings of ``--adversarial`` (None: L_rec only)."""
    if not args.adversarial:
        return None
    given = {"lambda_rec": args.lambda_rec, "d_lr": args.d_lr}
    return AdversarialOptions(**{k: v for k, v in given.items() if v is not None})


@contextmanager
def _epoch_bar(quiet: bool, label: str, total: int) -> Iterator[EpochCallback | None]:
    """Progress over epochs (a bar on a terminal, lines in a log), or ``None``."""
    if quiet or total == 0:
        yield None
        return
    from fedpath.utils.progress_display import job_progress

    with job_progress("epoch", label, total, quiet) as job:
        seen = [0]

        def update(done: int, _total: int, loss: float) -> None:
            job.advance(done - seen[0], "" if math.isnan(loss) else f"loss {loss:.4f}")
            seen[0] = done

        yield update


def _embed(
    args: argparse.Namespace, cfg: Any, data: Split, num_classes: int, quiet: bool
) -> torch.Tensor:
    """Train the backbone briefly on ``data``'s labels (or load weights); encode."""
    from fedpath.models.backbones import build_model
    from fedpath.tasks.images import encode_images, fit_images

    model_cfg = cfg.model
    if args.weights is not None:
        model_cfg = dataclasses.replace(model_cfg, weights=str(args.weights))
    epochs = args.train_epochs
    if epochs is None:
        epochs = 0 if model_cfg.weights else 2
    torch.manual_seed(args.seed)
    model = build_model(model_cfg, num_classes)
    device = torch.device("cpu")
    if epochs > 0:
        train_cfg = dataclasses.replace(cfg.train, rounds=1, local_epochs=epochs)

        def ce(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
            return {"loss": torch.nn.functional.cross_entropy(m(x), y)}

        with _epoch_bar(quiet, "backbone", epochs) as cb:

            def on_epoch(done: int, total: int) -> None:
                if cb is not None:
                    cb(done, total, float("nan"))

            fit_images(
                model, data, ce, train_cfg, round_idx=1, seed=args.seed,
                device=device, on_epoch=on_epoch,
            )  # fmt: skip
    feats = encode_images(model, data, cfg.train.eval_batch_size, device)
    return torch.from_numpy(feats).float()


def _pick_slide(slides: np.ndarray, wanted: str | None, domain: str) -> str:
    names, counts = np.unique(slides, return_counts=True)
    if wanted is None:
        return str(names[int(np.argmax(counts))])
    if wanted in names:
        return wanted
    if f"{domain}/{wanted}" in names:
        return f"{domain}/{wanted}"
    shown = ", ".join(map(str, names[:10])) + (" ..." if len(names) > 10 else "")
    raise DataError(f"--slide: domain {domain!r} has no slide {wanted!r}; has {shown}")


def run(args: argparse.Namespace) -> int:
    """Run ``fedhd-render``; print what was rendered and the PNG's path."""
    from fedpath.config import load_config
    from fedpath.mil.bags import SlideBag
    from fedpath.mil.decoder import render, save_grid, spread
    from fedpath.mil.decoder_train import train_decoder
    from fedpath.mil.distill import DistillOptions, distill_slides
    from fedpath.runtime.experiment import load_dataset
    from fedpath.tasks import require_kind

    quiet = is_quiet(args)
    console = Console(quiet=quiet, soft_wrap=True)
    _check_args(args)
    t0 = time.perf_counter()
    cfg = load_config(args.config or _demo_config(), args.overrides)
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    ds = load_dataset(cfg.data)
    require_kind(ds, "images", "data.name: fedhd-render (patches to decode)")
    domain = args.domain or ds.domains[0]
    ds.check_domain(domain)
    data = ds.split(domain, "all")
    if len(data) < 2:
        raise DataError(f"--domain: domain {domain!r} has {len(data)} patch(es)")
    console.print(
        f"{ds.name}: domain {domain}, {len(data)} patches, "
        f"{len(set(data.slides.tolist()))} slides, {ds.image_size}px"
    )
    emb = _embed(args, cfg, data, ds.num_classes, quiet)
    patches = data.load(np.arange(len(data)))

    slide = _pick_slide(data.slides, args.slide, domain)
    rows = np.flatnonzero(data.slides == slide)
    labels = data.labels[rows]
    bag = SlideBag(slide, emb[rows], int(np.bincount(labels).argmax()), domain)
    opts = DistillOptions(
        components=args.components,
        covariance=args.covariance,
        tokens=args.tokens,
        iters=args.iters,
    )
    syn = distill_slides([bag], opts, seed=args.seed, too_few="reduce")[0]
    console.print(
        f"distilled slide {slide} ({bag.num_patches} patches, D={bag.dim}) into "
        f"{syn.num_patches} tokens"
    )

    gan = _adversarial(args)
    with _epoch_bar(quiet, "decoder", args.decoder_epochs) as cb:
        decoder, history = train_decoder(
            emb, patches, args.decoder_epochs, args.decoder_lr, args.seed,
            on_epoch=cb, width=args.decoder_width, adversarial=gan,
        )  # fmt: skip
    show = rows[spread(len(rows), args.columns)]
    tok = syn.features[spread(syn.num_patches, args.columns)]
    out = save_grid(
        patches[show], render(decoder, emb[show]), render(decoder, tok), args.out,
        columns=args.columns,
    )  # fmt: skip
    last = f"{history[-1]:.4f}" if history else "untrained"
    loss = "" if gan is None else f" (L_GAN + {gan.lambda_rec:g} L_rec)"
    console.print(
        f"decoder: {args.decoder_epochs} epochs on {len(data)} pairs{loss}, final "
        f"L_rec {last}; {time.perf_counter() - t0:.1f} s"
    )
    print(f"wrote {out}")
    return 0
