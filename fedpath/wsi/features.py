"""Patch features of whole slides: the second stage of CLAM's pipeline.

Follows CLAM's ``extract_features_fp.py`` (Lu et al., Nat. Biomed. Eng. 2021):
for every coordinate of a slide's ``patches/<slide_id>.h5`` the patch is read
from the slide (lazily, batch by batch), encoded by a frozen backbone and the
features are written to ``h5_files/<slide_id>.h5`` (datasets ``features``,
N x D float32, and ``coords``, N x 2) and optionally ``pt_files/<slide_id>.pt``
(the features tensor), which is what CLAM's MIL training reads.

The encoder is any registered fedpath backbone (:data:`BACKBONES`), random or
loaded from a local weights file; its ``encode`` returns ``h(x)`` for images in
[0, 1] and normalizes them itself.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import torch.nn.functional as F

from fedpath.config import ModelConfig
from fedpath.data.base import DataError
from fedpath.models.backbones import FedModel, build_model
from fedpath.models.pretrained import encoder_info, state_digest
from fedpath.utils.files import check_file
from fedpath.utils.io import atomic_write_bytes
from fedpath.wsi import StageReport, atomic_h5, h5_complete, run_stage
from fedpath.wsi.slide import open_slide
from fedpath.wsi.slide_base import Slide


def load_encoder(
    backbone: str = "small_cnn",
    weights: str | Path | None = None,
    params: dict[str, Any] | None = None,
    device: str = "cpu",
) -> FedModel:
    """A backbone in eval mode for feature extraction (classifier unused)."""
    cfg = ModelConfig(
        backbone=backbone,
        weights=str(weights) if weights is not None else None,
        params=dict(params or {}),
    )
    model = build_model(cfg, num_classes=2)
    return model.eval().to(device)


def read_coords(coords_h5: Path) -> tuple[np.ndarray, dict[str, Any]]:
    """CLAM coords (N x 2 int64) and their attributes; DataError naming the file."""
    check_file(coords_h5, "coords file")
    try:
        with h5py.File(coords_h5, "r") as fh:
            dset = fh["coords"]
            coords = np.asarray(dset[:], dtype=np.int64).reshape(-1, 2)
            attrs = {k: _plain(v) for k, v in dset.attrs.items()}
    except (OSError, KeyError, ValueError, TypeError) as err:
        # ValueError/TypeError: coords of an odd size or a non-numeric dtype
        raise DataError(
            f"coords file {str(coords_h5)!r} is unreadable or lacks the 'coords' "
            f"dataset: {err}"
        ) from None
    for key in ("patch_size", "patch_level"):
        if key not in attrs:
            raise DataError(
                f"coords file {str(coords_h5)!r}: 'coords' lacks the attribute "
                f"{key!r} (written by fedpath's or CLAM's tiling)"
            )
    return coords, attrs


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def iter_patch_batches(
    slide: Slide,
    coords: np.ndarray,
    level: int,
    size: int,
    batch_size: int,
) -> Iterator[np.ndarray]:
    """uint8 batches (B, size, size, 3) of the patches at ``coords``, read lazily.

    The next batch is read in a background thread while the caller encodes the
    current one (decoding releases the GIL, so the two overlap). Parts of a
    patch beyond the slide border are white, as OpenSlide returns them for
    CLAM's edge patches.
    """

    def read(start: int) -> np.ndarray:
        chunk = coords[start : start + batch_size]
        out = np.empty((len(chunk), size, size, 3), dtype=np.uint8)
        for i, (x, y) in enumerate(chunk):
            out[i] = slide.read_region(int(x), int(y), level, size, size, pad=True)
        return out

    starts = list(range(0, len(coords), batch_size))
    if not starts:
        return
    with ThreadPoolExecutor(1) as pool:
        pending: Future[np.ndarray] = pool.submit(read, starts[0])
        for nxt in [*starts[1:], None]:
            batch = pending.result()
            if nxt is not None:
                pending = pool.submit(read, nxt)
            yield batch


def to_model_input(
    batch: np.ndarray, input_size: int | None, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> float (B, 3, s, s) in [0, 1], resized if asked.

    Resizing is bilinear and antialiased, like the PIL resize fedpath applies to
    crops on disk, so features of a patch match those of its saved crop.
    """
    x = torch.from_numpy(batch).to(device).permute(0, 3, 1, 2).float().div_(255.0)
    if input_size is not None and x.shape[-1] != input_size:
        x = F.interpolate(
            x,
            size=(input_size, input_size),
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )
    return x


@torch.inference_mode()
def extract_features(
    slide_path: str | Path,
    coords_h5: str | Path,
    out_path: str | Path,
    backbone: str = "small_cnn",
    weights: str | Path | None = None,
    input_size: int | None = None,
    batch_size: int = 32,
    *,
    params: dict[str, Any] | None = None,
    model: FedModel | None = None,
    device: str = "cpu",
    pt_path: str | Path | None = None,
) -> int:
    """Encode every patch of one slide and write CLAM's ``h5_files`` layout.

    Parameters
    ----------
    slide_path, coords_h5, out_path
        The slide, its coords h5 (from :func:`~fedpath.wsi.tiling.tile_slide` or
        CLAM) and the features h5 to write (atomically).
    backbone, weights, params
        The encoder (a registered backbone, an optional local weights file);
        ignored when ``model`` is given (a stage encodes many slides with one).
    input_size : int, optional
        Resize patches to this before encoding; by default the coords file's
        ``target_patch_size`` (fedpath) or ``patch_size`` (CLAM).
    pt_path : path, optional
        Also save the features tensor there (CLAM's ``pt_files``).

    Returns
    -------
    int
        Number of patches encoded.
    """
    if batch_size < 1:
        raise DataError(f"batch_size must be >= 1, got {batch_size}")
    coords, attrs = read_coords(Path(coords_h5))
    level, size = int(attrs["patch_level"]), int(attrs["patch_size"])
    target = input_size or int(attrs.get("target_patch_size", size))
    net = (
        model if model is not None else load_encoder(backbone, weights, params, device)
    )
    net.eval()
    dev = next(net.parameters()).device
    feats = np.zeros((len(coords), net.feature_dim), dtype=np.float32)
    with open_slide(slide_path) as slide:
        start = 0
        for batch in iter_patch_batches(slide, coords, level, size, batch_size):
            z = net.encode(to_model_input(batch, target, dev))
            feats[start : start + len(batch)] = z.float().cpu().numpy()
            start += len(batch)
    with atomic_h5(Path(out_path)) as fh:
        fh.create_dataset("features", data=feats)
        cds = fh.create_dataset("coords", data=coords)
        for k, v in attrs.items():
            cds.attrs[k] = v
        fh.attrs["backbone"] = backbone
        fh.attrs["weights"] = str(weights or "")
        # which encoder made these features (the patch-feature cache's key part)
        fh.attrs["encoder_sha256"] = state_digest(net.encoder)
        fh.attrs["weights_sha256"] = encoder_info(net)["weights_sha256"]
        fh.attrs["input_size"] = target
        fh.attrs["num_patches"] = len(coords)
    if pt_path is not None:
        buf = io.BytesIO()
        torch.save(torch.from_numpy(feats), buf)
        atomic_write_bytes(Path(pt_path), buf.getvalue())
    return len(coords)


def extract_features_stage(
    slide_paths: Sequence[str | Path],
    coords_dir: str | Path,
    out_dir: str | Path,
    backbone: str = "small_cnn",
    weights: str | Path | None = None,
    input_size: int | None = None,
    batch_size: int = 32,
    *,
    params: dict[str, Any] | None = None,
    device: str = "cpu",
    save_pt: bool = False,
    skip_bad: bool = False,
    quiet: bool = True,
) -> StageReport:
    """Features of many slides: ``out_dir/h5_files/<id>.h5`` (+ ``pt_files``).

    ``coords_dir`` is the tiling output (``<coords_dir>/patches/<id>.h5``, or
    the h5 files directly in ``coords_dir``). Resumable: slides whose features
    h5 (and .pt when asked) exist complete are skipped. One encoder serves all
    slides. With ``skip_bad`` a slide that cannot be read (or has no coords) is
    skipped and listed in the report; otherwise the error propagates.
    """
    out = Path(out_dir)
    cdir = Path(coords_dir)
    if (cdir / "patches").is_dir():
        cdir = cdir / "patches"
    model: FedModel | None = None

    def outputs(p: Path) -> tuple[Path, Path | None]:
        pt = out / "pt_files" / f"{p.stem}.pt" if save_pt else None
        return out / "h5_files" / f"{p.stem}.h5", pt

    def finished(p: Path) -> bool:
        h5, pt = outputs(p)
        return h5_complete(h5, "features") and (pt is None or pt.is_file())

    def encode(p: Path) -> int:
        nonlocal model
        if model is None:  # built lazily: a fully resumed stage loads nothing
            model = load_encoder(backbone, weights, params, device)
        h5, pt = outputs(p)
        return extract_features(
            p,
            cdir / f"{p.stem}.h5",
            h5,
            backbone,
            weights,
            input_size,
            batch_size,
            model=model,
            pt_path=pt,
        )

    paths = [Path(p) for p in slide_paths]
    return run_stage(
        "features", paths, finished, encode, skip_bad=skip_bad, quiet=quiet
    )
