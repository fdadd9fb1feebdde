"""Test builders: small on-disk datasets generated inside tests (never shipped, never
downloaded), client contexts for unit tests of algorithm halves, tiny in-process
runs with a spy on what crosses the client boundary, and model files with an
edited header."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from fedpath.algorithms.base import ClientContext
from fedpath.config import ExperimentConfig, load_config
from fedpath.data.base import DomainDataset, Split
from fedpath.data.partition import lodo_plan
from fedpath.data.synthetic_render import make_hospital_profiles, render_patches
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import Payload
from tests.conftest import tiny_overrides
from tests.model_file_helpers import seal_model_file, split_model_file

CLASSES = ("normal", "tumour")


def _patches(n: int, hospital: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    labels = np.arange(n) % 2
    prof = make_hospital_profiles(3, 0)[hospital]
    return render_patches(labels, prof, size, seed=hospital), labels


def _save(img: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img.transpose(1, 2, 0)).save(path)


def write_manifest_tree(root: Path, per_domain: int = 16, size: int = 40) -> Path:
    """root/imgs/<domain>/<i>.png + root/manifest.csv (path,label,domain,slide)."""
    rows = []
    for d in range(3):
        imgs, labels = _patches(per_domain, d, size)
        for i, (img, y) in enumerate(zip(imgs, labels, strict=True)):
            rel = Path("imgs") / f"site{d}" / f"{i}.png"
            _save(img, root / rel)
            rows.append(
                {
                    "path": str(rel),
                    "label": CLASSES[y],
                    "domain": f"site{d}",
                    "slide": f"s{i % 4}",
                }
            )
    path = root / "manifest.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["path", "label", "domain", "slide"])
        w.writeheader()
        w.writerows(rows)
    return path


def write_folder_tree(root: Path, per_domain: int = 12, size: int = 40) -> Path:
    """root/<domain>/<class>/<i>.png."""
    for d in range(3):
        imgs, labels = _patches(per_domain, d, size)
        for i, (img, y) in enumerate(zip(imgs, labels, strict=True)):
            _save(img, root / f"site{d}" / CLASSES[y] / f"{i}.png")
    return root


def write_wilds_tree(
    root: Path, per_center: int = 8, size: int = 48, mixed: bool = False
) -> Path:
    """A fake camelyon17_v1.0 folder: metadata.csv + patches/ (5 centers).

    Two slides per center, each of one class; ``mixed``: three slides per
    center, each holding both classes (as a real slide's patches do), so a
    split by slide keeps both classes on each side."""
    base = root / "camelyon17_v1.0"
    rows: list[dict[str, object]] = []
    for center in range(5):
        imgs, labels = _patches(per_center, center % 3, size)
        for i, (img, y) in enumerate(zip(imgs, labels, strict=True)):
            k = (i // 2) % 3 if mixed else i % 2  # the slide within the center
            patient, node = 10 * center + k, k
            x, yy = 32 * i, 64 * center
            folder = f"patient_{patient:03d}_node_{node}"
            _save(img, base / "patches" / folder / f"patch_{folder}_x_{x}_y_{yy}.png")
            rows.append(
                {
                    "": len(rows),
                    "patient": patient,
                    "node": node,
                    "x_coord": x,
                    "y_coord": yy,
                    "tumor": int(y),
                    "slide": (3 if mixed else 2) * center + k,
                    "center": center,
                    "split": int(i % 4 == 0),
                }
            )
    with (base / "metadata.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return base


def make_client_context(
    *,
    cfg: ExperimentConfig,
    dataset: DomainDataset | None = None,
    data: Split | None = None,
    domain: str | None = None,
    client_id: str = "c0",
    round: int = 1,
    seed: int = 0,
) -> ClientContext:
    """A client context for unit tests of an algorithm half, built the way both
    runtimes build it (:class:`fedpath.runtime.context.RunContext`).

    ``data`` defaults to the training split of ``domain`` (default: the dataset's
    first domain); ``dataset`` defaults to ``cfg``'s.
    """
    from fedpath.data.partition import ClientData
    from fedpath.runtime.context import RunContext
    from fedpath.runtime.experiment import load_dataset

    ds = dataset if dataset is not None else load_dataset(cfg.data)
    domain = domain or ds.domains[0]
    split = data if data is not None else ds.split(domain, "train")
    return RunContext.build(cfg, ds).client_context(
        ClientData(client_id, domain, split), round=round, seed=seed
    )


def make_run(tmp_path: Path, *extra: str, target: str = "hospital_0") -> InProcessRun:
    """An in-process run of the tiny config (``tests/conftest.py``) plus ``extra``,
    holding out ``target``, writing under ``tmp_path / "run"``."""
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    return InProcessRun(cfg, ds, lodo_plan(ds, [target])[0], 0, tmp_path / "run")


def spy_calls(run: InProcessRun) -> list[tuple[str, str, int, Payload, Payload]]:
    """Record every client call of ``run``: (client, stage, round, sent, reply)."""
    calls: list[tuple[str, str, int, Payload, Payload]] = []
    inner = run._call_client

    def wrapped(cid: str, stage: str, rnd: int, payload: Payload) -> Payload:
        reply = inner(cid, stage, rnd, payload)
        calls.append((cid, stage, rnd, payload.copy(), reply.copy()))
        return reply

    run._call_client = wrapped  # type: ignore[method-assign]
    return calls


def rewrite_header(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    """A file written with an edited header (a valid checksum over it: as a
    writer, not a tamperer, would produce it)."""
    head, payload = split_model_file(src.read_bytes())
    edit(head)
    dst.write_bytes(seal_model_file(json.dumps(head).encode(), payload))
    return dst
