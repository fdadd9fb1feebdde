"""``fedpath fedhd-render``: pseudo-patches of a synthetic slide next to real ones.

FedHD's optional visual branch (:mod:`fedpath.mil.decoder`) on one domain of an
image dataset, end to end:

1. load the dataset of an experiment config (default: the packaged demo's);
2. embed the domain's patches with the configured backbone, after training it
   briefly on the domain's labels (``--train-epochs``) so that the embeddings
   carry information (or load ``--weights``);
3. group the patches by slide into bags and distil one slide into a synthetic
   slide (:func:`fedpath.mil.distill.distill_slides`, small ``M``, ``T``);
4. train the decoder on the domain's (embedding, patch) pairs;
5. write the grid: real patches of that slide, their decoded embeddings, and
   decoded tokens of its synthetic slide.

:func:`register` adds the subcommand (``fedpath.cli.COMMANDS`` dispatches to it);
:func:`handler` runs it (:mod:`fedpath.mil.render_run`, imported on use so
that ``fedpath --help`` does not load PyTorch). Bad input raises
:class:`~fedpath.config.ConfigError` or :class:`~fedpath.data.base.DataError`,
which ``fedpath``'s ``main`` reports as an ``error:`` line with exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpath.utils.cli_args import (
    SubParsers,
    add_overrides,
    add_quiet,
    int_at_least,
    positive_number,
)

#: counts that must be at least one (an empty grid, no tokens, no iteration)
POSITIVE = int_at_least(1)


def register(sub: SubParsers) -> None:
    """Add ``fedhd-render`` to ``sub``."""
    p = sub.add_parser(
        "fedhd-render",
        help="decode a FedHD synthetic slide into pseudo-patches (PNG grid)",
        description="FedHD's optional decoder branch, for visual inspection only: "
        "embed one domain's patches, distil one of its slides into a synthetic "
        "slide (Gaussian-mixture alignment), train a small decoder on the "
        "domain's (embedding, patch) pairs and write a PNG with real patches, "
        "decoded real embeddings and decoded synthetic-slide tokens. Overrides "
        "use dotted keys, e.g. data.params.image_size=32.",
    )
    p.add_argument("--config", type=Path, help="experiment YAML (default: the demo's)")
    add_overrides(p)
    p.add_argument("--out", type=Path, required=True, help="output PNG file")
    p.add_argument("--domain", help="domain (hospital/scanner); default: the first")
    p.add_argument(
        "--slide", help="slide to distil; default: the domain's largest slide"
    )
    p.add_argument(
        "--weights",
        type=Path,
        help="local encoder weights (fedpath or torchvision state_dict); "
        "default: model.weights of the config, else random init",
    )
    p.add_argument(
        "--train-epochs",
        type=int_at_least(0),
        help="epochs of supervised training of the backbone on the domain's "
        "labels before embedding (default 2; 0 with --weights)",
    )
    _add_distill_and_decoder(p)
    p.add_argument(
        "--columns", type=POSITIVE, default=8, help="patches per row (default 8)"
    )
    p.add_argument("--seed", type=int_at_least(0), default=0, help="default 0")
    add_quiet(p, "no progress bars or status lines")


def _add_distill_and_decoder(p: argparse.ArgumentParser) -> None:
    """The distillation's and the decoder's settings."""
    p.add_argument("--components", type=POSITIVE, default=4, help="GMM M (default 4)")
    p.add_argument(
        "--covariance", choices=("full", "diag"), default="diag", help="default diag"
    )
    p.add_argument(
        "--tokens", type=POSITIVE, default=32, help="synthetic tokens T (default 32)"
    )
    p.add_argument(
        "--iters",
        type=POSITIVE,
        default=200,
        help="distillation iterations (default 200)",
    )
    p.add_argument(
        "--decoder-epochs",
        type=POSITIVE,
        default=20,
        help="decoder epochs (default 20)",
    )
    p.add_argument(
        "--decoder-lr", type=positive_number, default=2e-3, help="default 2e-3"
    )
    p.add_argument(
        "--decoder-width",
        type=POSITIVE,
        default=64,
        help="decoder channels (default 64)",
    )
    p.add_argument(
        "--adversarial",
        action="store_true",
        help="add FedHD's L_GAN: train the decoder on L_GAN + lambda_rec * L_rec "
        "against a small spectral-norm hinge-loss discriminator (default: L_rec "
        "only, as before)",
    )
    p.add_argument(
        "--lambda-rec",
        type=float,
        help="weight of L_rec next to L_GAN, >= 0 (default 100; needs --adversarial)",
    )
    p.add_argument(
        "--d-lr",
        type=positive_number,
        help="discriminator learning rate, > 0 (default 1e-3; needs --adversarial)",
    )


def handler(args: argparse.Namespace) -> int:
    """Run ``fedhd-render`` (see :func:`fedpath.mil.render_run.run`)."""
    from fedpath.mil.render_run import run

    return run(args)
