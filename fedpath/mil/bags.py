"""Slides as bags of patch embeddings: the data of multiple-instance learning.

A whole slide image enters MIL as a *bag*: the ``(N, D)`` embeddings of its
patches (CLAM's ``h5_files``/``pt_files``, written by :mod:`fedpath.wsi.features`)
plus one slide label. FedHD (design point 2) distils each real bag into one
synthetic bag, so both kinds share :class:`SlideBag`. :func:`synthetic_bags`
makes hospitals of bags whose diagnostic signal is a rare patch cluster that a
slide mean cannot see (see its docstring).
"""

from __future__ import annotations

import csv
import io
import math
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from fedpath.data.base import DataError
from fedpath.data.inputs import read_text
from fedpath.utils.files import check_file


@dataclass
class SlideBag:
    """One slide: ``features`` (N, D) float32, a class index, a domain (hospital).

    ``coords`` are the (N, 2) patch coordinates when known (CLAM's ``coords``),
    else ``None`` (synthetic slides have none). ``space`` is ``None`` for a bag in
    the embedding space of the model it meets, else the name of its own space
    (a synthetic slide received from a client with another feature extractor:
    it enters the receiver's model through that space's input adapter,
    :mod:`fedpath.mil.adapters`).
    """

    slide_id: str
    features: Tensor
    label: int
    domain: str
    coords: Tensor | None = None
    space: str | None = None

    def __post_init__(self) -> None:
        f = self.features
        if not isinstance(f, Tensor) or f.ndim != 2 or f.shape[0] == 0:
            shape = tuple(f.shape) if isinstance(f, Tensor) else type(f).__name__
            raise DataError(
                f"slide {self.slide_id!r}: features must be a non-empty (N, D) "
                f"tensor, got {shape}"
            )
        if self.coords is not None and tuple(self.coords.shape) != (f.shape[0], 2):
            raise DataError(
                f"slide {self.slide_id!r}: coords must be ({f.shape[0]}, 2), got "
                f"{tuple(self.coords.shape)}"
            )

    @property
    def num_patches(self) -> int:
        return int(self.features.shape[0])

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])


@dataclass
class BagDataset:
    """Bags of several hospitals in one embedding space.

    ``embedding_space`` names the feature extractor (e.g. ``"resnet50-imagenet"``,
    ``"uni"``, ``"synthetic"``): bags, synthetic slides and MIL models only mix
    within one space, which is what lets FedHD clients use different extractors.
    ``meta`` holds generator facts (ground truth of :func:`synthetic_bags`).
    """

    bags: list[SlideBag]
    classes: list[str]
    embedding_space: str
    domains: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.bags:
            raise DataError("a BagDataset needs at least one slide")
        if not self.domains:  # order of first appearance
            self.domains = list(dict.fromkeys(b.domain for b in self.bags))
        dim, seen = self.bags[0].dim, set()
        for b in self.bags:
            if b.dim != dim:
                raise DataError(
                    f"slide {b.slide_id!r} has embedding dimension {b.dim}, "
                    f"expected {dim} (as slide {self.bags[0].slide_id!r})"
                )
            if not 0 <= b.label < len(self.classes):
                raise DataError(
                    f"slide {b.slide_id!r}: label {b.label} is not in "
                    f"[0, {len(self.classes)}) (classes {self.classes})"
                )
            if b.domain not in self.domains:
                raise DataError(f"slide {b.slide_id!r}: unknown domain {b.domain!r}")
            if b.slide_id in seen:
                raise DataError(f"slide id {b.slide_id!r} occurs twice")
            seen.add(b.slide_id)

    @property
    def dim(self) -> int:
        return self.bags[0].dim

    def __len__(self) -> int:
        return len(self.bags)

    def __iter__(self) -> Iterator[SlideBag]:
        return iter(self.bags)

    def __getitem__(self, i: int) -> SlideBag:
        return self.bags[i]

    def by_domain(self, domain: str) -> list[SlideBag]:
        if domain not in self.domains:
            raise KeyError(f"unknown domain {domain!r}; known: {self.domains}")
        return [b for b in self.bags if b.domain == domain]

    def counts(self) -> dict[str, dict[str, int]]:
        """Slides per domain and class name."""
        out = {d: dict.fromkeys(self.classes, 0) for d in self.domains}
        for b in self.bags:
            out[b.domain][self.classes[b.label]] += 1
        return out

    def with_bags(self, bags: Sequence[SlideBag]) -> BagDataset:
        """The same classes, domains and space holding other bags."""
        return BagDataset(
            list(bags), self.classes, self.embedding_space, self.domains, self.meta
        )

    def train_test_split(
        self, test_fraction: float = 0.25, seed: int = 0
    ) -> tuple[BagDataset, BagDataset]:
        """Split by slide, stratified by (domain, label), reproducibly from ``seed``.

        Each (domain, label) group of ``n`` slides sends ``round(n * fraction)``
        to test, at least one when ``n >= 2`` and never all of them, so both
        sides see every class a hospital has.
        """
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        train: list[SlideBag] = []
        test: list[SlideBag] = []
        for di, dom in enumerate(self.domains):
            for label in range(len(self.classes)):
                group = [b for b in self.bags if b.domain == dom and b.label == label]
                n = len(group)
                n_test = min(max(round(n * test_fraction), int(n >= 2)), n - 1)
                rng = np.random.default_rng([seed, di, label])  # per group: stable
                chosen = set(rng.permutation(n)[: max(n_test, 0)].tolist())
                for i, b in enumerate(group):
                    (test if i in chosen else train).append(b)
        if not train or not test:
            raise DataError("too few slides to split into non-empty train and test")
        return self.with_bags(train), self.with_bags(test)


def _check_features(feats: Tensor, where: str) -> Tensor:
    if feats.ndim != 2 or feats.shape[0] == 0:
        raise DataError(f"{where}: features must be (N, D), N > 0, got {feats.shape}")
    feats = feats.to(torch.float32)
    if not bool(torch.isfinite(feats).all()):
        bad = int((~torch.isfinite(feats)).any(dim=1).sum())
        raise DataError(f"{where}: {bad} patch embedding(s) contain NaN or inf")
    return feats


#: what h5py and torch raise on a damaged or foreign file (TypeError: a dataset of
#: strings; EOFError: an empty or cut ``.pt``)
_UNREADABLE: tuple[type[Exception], ...] = (OSError, RuntimeError, ValueError)
_UNREADABLE += (TypeError, KeyError, EOFError, pickle.UnpicklingError)


def read_bag_file(path: str | Path) -> tuple[Tensor, Tensor | None]:
    """Features (and coords) of one CLAM bag file: ``.h5`` or ``.pt``.

    Raises
    ------
    DataError
        Naming the file, when it is unreadable, lacks ``features``, or holds
        non-finite embeddings.
    """
    path = Path(path)
    check_file(path, "bag file")
    coords: Tensor | None = None
    try:
        if path.suffix == ".h5":
            import h5py

            with h5py.File(path, "r") as fh:
                if "features" not in fh:
                    raise DataError(
                        f"{path}: no 'features' dataset (has {sorted(fh.keys())})"
                    )
                feats = torch.from_numpy(np.asarray(fh["features"]))
                if "coords" in fh:
                    coords = torch.from_numpy(np.asarray(fh["coords"]))
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(obj, Tensor):
                raise DataError(f"{path}: expected a tensor, got {type(obj).__name__}")
            feats = obj
    except _UNREADABLE as err:
        if isinstance(err, DataError):
            raise
        raise DataError(f"{path}: unreadable bag file ({err})") from None
    feats = _check_features(feats, str(path))
    if coords is not None and tuple(coords.shape) != (feats.shape[0], 2):
        raise DataError(
            f"{path}: coords {tuple(coords.shape)} do not match {feats.shape[0]} "
            "patches"
        )
    return feats, coords


def load_clam_bags(
    root: str | Path,
    csv_path: str | Path,
    *,
    embedding_space: str,
    classes: Sequence[str] | None = None,
    prefer: Literal["h5", "pt"] = "h5",
) -> BagDataset:
    """Bags from CLAM's feature layout and a ``slide_id,label,domain`` CSV.

    Looks for ``root/h5_files/<slide_id>.h5`` and ``root/pt_files/<slide_id>.pt``
    (``prefer`` is tried first). ``label`` holds class names; ``classes`` fixes
    their order (default: sorted names in the CSV).

    Raises
    ------
    DataError
        Naming the CSV row or file: missing columns, unknown labels, slides
        without a file, bad files, or embedding dimensions that differ.
    """
    root, csv_path = Path(root), Path(csv_path)
    reader = csv.DictReader(io.StringIO(read_text(csv_path, "slide CSV"), newline=""))
    try:  # cells stripped; a short row's missing cells empty
        rows = [{k: (v or "").strip() for k, v in r.items() if k} for r in reader]
    except csv.Error as err:  # its messages quote no content
        raise DataError(f"{csv_path}: not valid CSV ({err})") from None
    need = ["domain", "label", "slide_id"]
    missing = [c for c in need if c not in (reader.fieldnames or [])]
    if not rows or missing:
        # the header is not quoted: the file may be anything (never its content)
        raise DataError(
            f"{csv_path}: needs columns {need} and rows; found "
            f"{len(reader.fieldnames or [])} column(s) and {len(rows)} row(s)"
            + (f", lacking {', '.join(missing)}" if missing else "")
        )
    names = list(classes) if classes is not None else sorted({r["label"] for r in rows})
    order = ["h5", "pt"] if prefer == "h5" else ["pt", "h5"]
    bags: list[SlideBag] = []
    for line, row in enumerate(rows, start=2):
        sid, label = row["slide_id"], row["label"]
        if not sid or "/" in sid or "\\" in sid or sid in (".", ".."):
            # a slide id names a file in root's h5_files/pt_files, never elsewhere
            raise DataError(
                f"{csv_path}:{line}: slide_id must be a non-empty file name "
                "(no '/', '\\', '.' or '..')"
            )
        if label not in names:
            raise DataError(
                f"{csv_path}:{line}: slide {sid!r} has label {label!r}, not one of "
                f"{names}"
            )
        files = [root / f"{kind}_files" / f"{sid}.{kind}" for kind in order]
        path = next((p for p in files if p.is_file()), None)
        if path is None:
            raise DataError(
                f"{csv_path}:{line}: slide {sid!r} has no bag file (looked for "
                f"{', '.join(str(p) for p in files)})"
            )
        feats, coords = read_bag_file(path)
        if bags and feats.shape[1] != bags[0].dim:
            raise DataError(
                f"{path}: slide {sid!r} has D={feats.shape[1]}, but slide "
                f"{bags[0].slide_id!r} has D={bags[0].dim}; one embedding space "
                "per dataset"
            )
        bags.append(SlideBag(sid, feats, names.index(label), row["domain"], coords))
    return BagDataset(bags, names, embedding_space)


def _rotation(dim: int, strength: float, gen: torch.Generator) -> Tensor:
    """A random rotation exp(A), A skew-symmetric; ``strength`` ~ angle in radians."""
    a = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    a = (a - a.T) * (strength / math.sqrt(2 * dim))
    return torch.linalg.matrix_exp(a)


def synthetic_bags(
    num_domains: int = 3,
    slides_per_domain: int = 40,
    dim: int = 64,
    patches: tuple[int, int] = (200, 400),
    rare_fraction: float = 0.03,
    seed: int = 0,
    *,
    common_components: int = 8,
    cluster_std: float = 0.35,
    concentration: float = 1.0,
    positive_fraction: float = 0.5,
    rare_offset: float = 0.5,
    slide_jitter: float = 0.1,
    domain_shift: float = 0.5,
    domain_scale: float = 0.2,
    domain_rotation: float = 0.3,
) -> BagDataset:
    r"""Hospitals of slide bags whose label lives in a rare patch cluster.

    Generative model, in a shared "tissue" space, then mapped per hospital:

    1. Common tissue types: centres :math:`c_k \sim N(0, I_D)`, ``k <
       common_components``, shared by both classes and all hospitals.
    2. A rare diagnostic type at :math:`r = 2\bar c - c_j +
       \text{rare\_offset}\, u`: common centre :math:`j` mirrored through the
       centroid :math:`\bar c` (plus a small random offset, :math:`|u| = 1`).
       Along :math:`\bar c - c_j` it lies beyond every common cluster, so rare
       patches are linearly separable one by one (as tumour patches are in
       real embeddings); but the shift it gives a slide mean, a few per cent
       of :math:`\bar c - c_j`, lies in the span of the common centres, where
       the slides' random tissue mixtures move the mean several times more: a
       linear probe on slide means is near chance, a single-mean summary
       loses the signal.
    3. Slide: ``N ~ U{patches}`` patches; mixture weights
       :math:`w \sim \mathrm{Dir}(\text{concentration})`; each centre jittered
       by ``slide_jitter``; patch :math:`x = c_z + \text{jitter} +
       \text{cluster\_std}\,\epsilon`, :math:`z \sim w`.
    4. Positive slides (``round(positive_fraction * n)`` per hospital, label 1
       ``"tumour"``): a fraction ``f ~ U[0.5, 1.5] * rare_fraction`` of patches
       (at least one) is replaced by :math:`r + \text{cluster\_std}\,\epsilon`.
    5. Hospital ``d``: :math:`x \mapsto (x R_d) \odot a_d + b_d` with a random
       rotation :math:`R_d` (angle ~ ``domain_rotation``), per-dimension scales
       :math:`a_d = e^{\text{domain\_scale}\,\eta}` and a shift
       :math:`b_d \sim N(0, \text{domain\_shift}^2 I)`.

    ``meta`` holds the ground truth per hospital (``common_centres`` (K, D),
    ``rare_centre`` (D,), in that hospital's coordinates) and per slide
    (``rare_masks``: bool (N,), which patches are rare). Deterministic in ``seed``.
    """
    lo, hi = patches
    if not 1 <= lo <= hi:
        raise ValueError(f"patches must be (lo, hi) with 1 <= lo <= hi, got {patches}")
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(common_components, dim, generator=gen, dtype=torch.float64)
    u = torch.randn(dim, generator=gen, dtype=torch.float64)
    mirrored = int(torch.randint(common_components, (1,), generator=gen))
    rare = 2 * centres.mean(0) - centres[mirrored] + rare_offset * u / u.norm()
    alpha = np.full(common_components, float(concentration))
    rng = np.random.default_rng(seed)  # Dirichlet draws (torch's use the global RNG)
    bags: list[SlideBag] = []
    meta: dict[str, Any] = {"common_centres": {}, "rare_centre": {}, "rare_masks": {}}
    for d in range(num_domains):
        dom = f"hospital_{d}"
        rot = _rotation(dim, domain_rotation, gen)
        scale = torch.exp(domain_scale * torch.randn(dim, generator=gen))
        shift = domain_shift * torch.randn(dim, generator=gen)

        def to_domain(x: Tensor, m: tuple[Tensor, ...] = (rot, scale, shift)) -> Tensor:
            return ((x @ m[0]) * m[1] + m[2]).to(torch.float32)

        meta["common_centres"][dom] = to_domain(centres)
        meta["rare_centre"][dom] = to_domain(rare[None])[0]
        n_pos = round(positive_fraction * slides_per_domain)
        labels = torch.zeros(slides_per_domain, dtype=torch.long)
        labels[torch.randperm(slides_per_domain, generator=gen)[:n_pos]] = 1
        for i in range(slides_per_domain):
            n = int(torch.randint(lo, hi + 1, (1,), generator=gen))
            w = torch.from_numpy(rng.dirichlet(alpha))
            z = torch.multinomial(w, n, replacement=True, generator=gen)
            jitter = slide_jitter * torch.randn(
                centres.shape, generator=gen, dtype=torch.float64
            )
            noise = torch.randn(n, dim, generator=gen, dtype=torch.float64)
            x = (centres + jitter)[z] + cluster_std * noise
            mask = torch.zeros(n, dtype=torch.bool)
            if int(labels[i]) == 1:
                f = rare_fraction * (0.5 + float(torch.rand(1, generator=gen)))
                k = min(n, max(1, round(f * n)))
                idx = torch.randperm(n, generator=gen)[:k]
                mask[idx] = True
                rn = torch.randn(k, dim, generator=gen, dtype=torch.float64)
                x[idx] = rare + cluster_std * rn
            sid = f"{dom}_slide{i:03d}"
            meta["rare_masks"][sid] = mask
            bags.append(SlideBag(sid, to_domain(x), int(labels[i]), dom))
    return BagDataset(bags, ["normal", "tumour"], "synthetic", meta=meta)
