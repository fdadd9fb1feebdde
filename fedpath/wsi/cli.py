"""``fedpath tile | features | mvmidog | amibr``: the slide preprocessing stages.

``register_<stage>`` adds one subcommand's parser (:data:`fedpath.cli.COMMANDS`
names them; :func:`register` adds all four) and :func:`run` runs any of them.
Bad input raises :class:`~fedpath.errors.DataError` or
:class:`~fedpath.config.ConfigError`, which ``fedpath``'s ``main`` turns into an
``error:`` line and exit code 2.

Importing this module loads neither PyTorch nor a slide reader (``fedpath --help``
imports it to register the subcommands): each handler imports the stage it runs.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from rich.console import Console

from fedpath.config import ConfigError
from fedpath.errors import DataError
from fedpath.utils import cli_args
from fedpath.wsi.amibr_params import DEFAULT_PAD, DEFAULT_SIZE, MIN_SIZE, PAD_FILLS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Handler = Callable[[argparse.Namespace, bool], int]
T = TypeVar("T", bound="DataclassInstance")
POSITIVE, NON_NEG = cli_args.int_at_least(1), cli_args.int_at_least(0)


def _common(p: argparse.ArgumentParser) -> None:
    cli_args.add_quiet(
        p,
        "no progress bar (also FEDPATH_QUIET=1); the summary and skipped inputs "
        "and errors still print",
    )
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip unreadable slides and bad annotations, count and report them "
        "(default: stop at the first, naming it)",
    )


def _slide_stage(
    sub: cli_args.SubParsers, name: str, summary: str, description: str
) -> argparse.ArgumentParser:
    """A subcommand run over slide files or folders, writing into ``--out``."""
    p = sub.add_parser(name, help=summary, description=description)
    p.add_argument("slides", nargs="+", type=Path, help="slide files or folders")
    p.add_argument("--out", "-o", type=Path, required=True, help="output folder")
    return p


def register(sub: cli_args.SubParsers) -> None:
    """Add the ``tile``, ``features``, ``mvmidog`` and ``amibr`` subcommands."""
    register_tile(sub)
    register_features(sub)
    register_mvmidog(sub)
    register_amibr(sub)


def register_tile(sub: cli_args.SubParsers) -> None:
    """Add ``tile`` to ``sub``."""
    tile = _slide_stage(
        sub,
        "tile",
        "tissue patches of whole slides -> CLAM coords h5",
        "Segment tissue (Otsu on HSV saturation, as CLAM) and write "
        "OUT/patches/<slide_id>.h5 with the level-0 corners of every grid patch "
        "with enough tissue (plus OUT/masks/<slide_id>.png). Finished slides are "
        "skipped when run again.",
    )
    tile.add_argument("--patch-size", type=POSITIVE, default=256, help="default 256")
    where = tile.add_mutually_exclusive_group()
    where.add_argument(
        "--magnification",
        type=cli_args.positive_number,
        help="patch magnification, e.g. 20 (needs mpp or objective power in the "
        "file); default: --level 0",
    )
    where.add_argument("--level", type=NON_NEG, help="pyramid level (default 0)")
    tile.add_argument(
        "--step", type=POSITIVE, help="grid step in patch pixels (default: patch size)"
    )
    tile.add_argument(
        "--tissue-threshold",
        type=float,
        default=0.5,
        help="minimum tissue fraction of a kept patch (default 0.5)",
    )
    tile.add_argument(
        "--mask-size", type=POSITIVE, default=2048, help="tissue thumbnail's long side"
    )
    tile.add_argument(
        "--min-tissue-area",
        type=float,
        default=4.0,
        help="smallest tissue piece, in 512x512 level-0 patches (CLAM's a_t; "
        "default 4)",
    )
    tile.add_argument("--no-masks", action="store_true", help="do not save masks")
    _common(tile)


def register_features(sub: cli_args.SubParsers) -> None:
    """Add ``features`` to ``sub``."""
    feat = _slide_stage(
        sub,
        "features",
        "encode tiled patches -> CLAM features h5 (+ pt)",
        "Read every patch of COORDS/patches/<slide_id>.h5 from the "
        "slide, encode it with a backbone (eval mode) and write "
        "OUT/h5_files/<slide_id>.h5 (features, coords) and with --save-pt "
        "OUT/pt_files/<slide_id>.pt. Finished slides are skipped when run again.",
    )
    feat.add_argument(
        "--coords", type=Path, required=True, help="output folder of `fedpath tile`"
    )
    feat.add_argument(
        "--backbone",
        default="small_cnn",
        help="registered backbone (see `fedpath list backbones`)",
    )
    feat.add_argument("--weights", type=Path, help="local weights file (optional)")
    feat.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="key=value",
        help="backbone parameter (values parsed as YAML); repeatable",
    )
    feat.add_argument(
        "--input-size", type=POSITIVE, help="resize patches to this before encoding"
    )
    feat.add_argument("--batch-size", type=POSITIVE, default=32, help="default 32")
    feat.add_argument("--device", default="cpu", help="torch device (default cpu)")
    feat.add_argument(
        "--save-pt", action="store_true", help="also write pt_files/<id>.pt"
    )
    _common(feat)


def register_mvmidog(sub: cli_args.SubParsers) -> None:
    """Add ``mvmidog`` to ``sub``."""
    mid = sub.add_parser(
        "mvmidog",
        help="MIDOG slides + annotation JSON -> MvMidog patches and manifest",
        description="Build the FedStain paper's MvMidog: 128x128 PNG patches of "
        "mitotic figures (off-centre) and negatives per scanner, quality-filtered, "
        "with OUT/manifest.csv for `data.name: manifest`. Resumable.",
    )
    mid.add_argument("annotations", type=Path, help="MIDOG COCO-style JSON")
    mid.add_argument("slide_dir", type=Path, help="folder of the slide files")
    mid.add_argument("--out", "-o", type=Path, required=True, help="output folder")
    mid.add_argument("--seed", type=NON_NEG, default=0)
    mid.add_argument("--patch-size", type=cli_args.int_at_least(8), default=128)
    mid.add_argument(
        "--max-offset", type=NON_NEG, default=32, help="largest figure offset (px)"
    )
    mid.add_argument("--border-attempts", type=POSITIVE, default=3)
    mid.add_argument(
        "--negatives-per-slide",
        type=NON_NEG,
        help="random negatives per slide (default: its number of mitotic figures)",
    )
    mid.add_argument(
        "--margin", type=NON_NEG, default=64, help="negatives' distance from figures"
    )
    mid.add_argument("--bbox-format", choices=["xyxy", "xywh"], default="xyxy")
    mid.add_argument(
        "--no-imposters",
        action="store_true",
        help="do not crop imposters (hard negatives) as negatives",
    )
    mid.add_argument(
        "--include-unlabelled",
        action="store_true",
        help="also take negatives from images without any annotation",
    )
    mid.add_argument("--scanner-field", default="scanner")
    mid.add_argument(
        "--scanner-map",
        type=Path,
        help="JSON {file_name: scanner} or CSV file_name,scanner (default: MIDOG "
        "2021 id ranges)",
    )
    mid.add_argument("--tissue-threshold", type=float, default=0.5)
    mid.add_argument("--mask-size", type=POSITIVE, default=1024)
    mid.add_argument("--min-nonwhite", type=float, default=0.25)
    mid.add_argument("--white-level", type=int, default=220)
    mid.add_argument("--min-edge", type=float, default=2.0)
    mid.add_argument("--min-saturation-std", type=float, default=4.0)
    _common(mid)


def register_amibr(sub: cli_args.SubParsers) -> None:
    """Add ``amibr`` to ``sub``."""
    ami = sub.add_parser(
        "amibr",
        help="AMi-Br table + MIDOG 2021 / TUPAC16 images -> normal/atypical "
        "mitosis crops and manifest",
        description="Crop every mitotic figure of the AMi-Br table (AMI-BR.csv) "
        "from its MIDOG 2021 or TUPAC16 image: OUT/patches/{normal,atypical}/"
        "<dataset>_<uid>.png, centred on the figure (its pixel is the crop's "
        "[size//2, size//2]), and OUT/manifest.csv (path,label,domain,slide,"
        "majority_atypical) for `data.name: manifest`. Domains: the MIDOG 2021 "
        "scanner by image number (001-050 Hamamatsu XR, 051-100 Hamamatsu S360, "
        "101-150 Aperio CS2) and TUPAC16. Resumable: existing crops are kept.",
    )
    ami.add_argument(
        "--annotations", type=Path, required=True, help="the AMi-Br table (AMI-BR.csv)"
    )
    ami.add_argument(
        "--midog",
        type=Path,
        help="folder of the MIDOG 2021 images (001.tiff ... 150.tiff, found in it "
        "or below it); omit to leave the MIDOG21 rows out",
    )
    ami.add_argument(
        "--tupac",
        type=Path,
        help="folder of the TUPAC16 images named as the table's slide column "
        "(01_stitched1.tif ... 23_stitched1.tif, 24.tif ... 73.tif; found in it "
        "or below it); omit to leave the TUPAC16 rows out",
    )
    ami.add_argument("--out", "-o", type=Path, required=True, help="output folder")
    ami.add_argument(
        "--size",
        type=cli_args.int_at_least(MIN_SIZE),
        default=DEFAULT_SIZE,
        help=f"crop side in pixels, at least {MIN_SIZE} (default {DEFAULT_SIZE})",
    )
    ami.add_argument(
        "--pad",
        choices=list(PAD_FILLS),
        default=DEFAULT_PAD,
        help="fill of crop pixels outside the image (default black, as PIL's crop "
        "and the crops of fedpath's published AMi-Br results)",
    )
    _common(ami)


def run(args: argparse.Namespace) -> int:
    """Run the subcommand ``args`` was parsed for; 0 on success."""
    handler = _HANDLERS.get(getattr(args, "command", None) or "")
    if handler is None:
        raise ConfigError("not a slide subcommand (tile, features, mvmidog, amibr)")
    return handler(args, cli_args.is_quiet(args))


def _report(text: str) -> None:
    # The summary is the command's result (counts, skipped inputs): printed even
    # when quiet, which only silences progress bars.
    Console(soft_wrap=True).print(text, highlight=False)


def _cmd_tile(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.wsi.slide import find_slides
    from fedpath.wsi.tiling import tile_slides

    rep = tile_slides(
        find_slides(args.slides),
        args.out,
        skip_bad=args.skip_bad,
        quiet=quiet,
        save_masks=not args.no_masks,
        patch_size=args.patch_size,
        magnification=args.magnification,
        level=args.level,
        step=args.step,
        tissue_threshold=args.tissue_threshold,
        mask_size=args.mask_size,
        min_tissue_area=args.min_tissue_area,
    )
    _report(rep.summary(f"tile -> {args.out / 'patches'}"))
    return 0


def _params(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param: expected key=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _cmd_features(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.wsi.features import extract_features_stage
    from fedpath.wsi.slide import find_slides

    rep = extract_features_stage(
        find_slides(args.slides),
        args.coords,
        args.out,
        args.backbone,
        args.weights,
        args.input_size,
        args.batch_size,
        params=_params(args.param),
        device=args.device,
        save_pt=args.save_pt,
        skip_bad=args.skip_bad,
        quiet=quiet,
    )
    _report(rep.summary(f"features -> {args.out / 'h5_files'}"))
    return 0


def read_scanner_map(path: Path) -> dict[str, str]:
    """``{file_name: scanner}`` from a JSON object or a two-column CSV (UTF-8)."""
    from fedpath.data.inputs import read_text  # lazy: fedpath.data loads torch

    text = read_text(path, "scanner map")
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object {file_name: scanner}")
            return {str(k): str(v) for k, v in data.items()}
        rows = [r for r in csv.reader(text.splitlines(keepends=True)) if r]
    except (csv.Error, ValueError) as err:
        raise DataError(f"scanner map {str(path)!r}: {err}") from None
    if rows and rows[0][:2] == ["file_name", "scanner"]:
        rows = rows[1:]
    bad = [i for i, r in enumerate(rows) if len(r) < 2]
    if bad:
        raise DataError(f"scanner map {str(path)!r}: row {bad[0] + 1} lacks 2 fields")
    return {r[0].strip(): r[1].strip() for r in rows}


def _from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """Dataclass ``cls`` with every field that has a same-named option taken from
    ``args`` (the options are named after the fields), then ``given``."""
    named = {
        f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)
    }
    return cls(**{**named, **given})


def _cmd_mvmidog(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.wsi.midog import MvMidogParams, build_mvmidog, format_report
    from fedpath.wsi.quality import QualityThresholds

    params = _from_args(
        MvMidogParams,
        args,
        imposters_as_negatives=not args.no_imposters,
        scanners=read_scanner_map(args.scanner_map) if args.scanner_map else None,
        quality=_from_args(QualityThresholds, args),
    )
    report = build_mvmidog(
        args.annotations,
        args.slide_dir,
        args.out,
        params,
        skip_bad=args.skip_bad,
        quiet=quiet,
    )
    if quiet:  # build_mvmidog printed the report unless quiet
        _report(format_report(report))
    return 0


def _cmd_amibr(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.wsi.amibr import build_amibr

    report = build_amibr(
        args.annotations,
        args.out,
        midog=args.midog,
        tupac=args.tupac,
        size=args.size,
        pad=args.pad,
        skip_bad=args.skip_bad,
        quiet=quiet,
    )
    _report(report.summary())
    return 0


#: Each subcommand's handler, by name (:func:`run`).
_HANDLERS: dict[str, Handler] = {
    "tile": _cmd_tile,
    "features": _cmd_features,
    "mvmidog": _cmd_mvmidog,
    "amibr": _cmd_amibr,
}
