"""Split source domains into clients and plan leave-one-domain-out experiments.

FedStain / FedCCRL setting: each source domain (hospital) is divided into
``clients_per_domain`` clients with Dirichlet(alpha) skew (alpha = 0.5, 2 clients
per domain); the held-out domain is never seen in training.

With ``partition.validation`` > 0 a fraction of each source domain's training
split is held out first, whole slides at a time (:func:`hold_out_validation`), and
dealt to the domain's clients by slide: the training-domain validation data of
model selection and calibration (DomainBed's protocol), never trained on.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedpath.config import ConfigError, PartitionConfig
from fedpath.data.base import DataError, DomainDataset, Split, assign_test_split


@dataclass(frozen=True)
class ClientData:
    """One client (a hospital, or a part of one): its local training and test samples.

    ``test`` is the client's share of its domain's test split (all of it when the
    domain is one client): what ``evaluation.protocol: local`` evaluates on.
    ``validation``: its share of the domain's validation slides
    (``partition.validation``; None when off), disjoint from every client's
    ``train`` by slide.
    """

    client_id: str
    domain: str
    train: Split
    test: Split | None = None
    validation: Split | None = None


@dataclass(frozen=True)
class LodoFold:
    """One leave-one-domain-out experiment: train on ``sources``, test on ``target``."""

    target: str
    sources: list[str]


def lodo_plan(
    dataset: DomainDataset,
    targets: str | Sequence[str] = "all",
    probe_train: Sequence[str] = (),
    sources: Sequence[str] | None = None,
) -> list[LodoFold]:
    """Every domain once as the unseen target (``"all"``), or the listed targets.

    ``"none"``: one fold in which every domain trains (target ``"none"``).
    ``probe_train`` (``evaluation.probe_train``, FedAD Sec. 5.3.2): domains that
    take no part in federated training: no fold has them among its sources, and
    ``"all"`` holds out every *other* domain in turn; their data trains the
    linear probe only (:func:`fedpath.runtime.evaluate.eval_splits`).
    ``sources`` (``lodo.sources``): only these domains train, less each fold's
    target (None: every domain but the target).
    """
    _check_sources(dataset, sources, probe_train)
    train = list(dataset.domains) if sources is None else list(sources)
    if targets == "none":  # probe_train must then be [] (EvaluationConfig.check_lodo)
        return [LodoFold("none", train)]
    if len(dataset.domains) < 2:
        raise ConfigError(
            f"lodo.targets: dataset {dataset.name!r} has {len(dataset.domains)} "
            "domain; "
            "leave-one-domain-out needs at least 2"
        )
    kept_out = set(probe_train)
    chosen = (
        [d for d in dataset.domains if d not in kept_out]
        if targets == "all"
        else list(targets)
    )
    if not chosen and targets != "all":  # "all" minus probe_train: checked below
        raise ConfigError("lodo.targets: expected 'all' or a non-empty list of domains")
    _check_known(dataset, chosen, "lodo.targets")
    _check_probe_train(dataset, chosen, probe_train)
    folds = [
        LodoFold(t, [d for d in train if d != t and d not in kept_out]) for t in chosen
    ]
    for f in folds:
        if not f.sources:
            raise ConfigError(
                f"config key 'lodo.sources': {list(train)} leaves no domain to "
                f"train on when {f.target!r} is held out; expected at least one "
                "source domain other than each target (lodo.targets)"
            )
    return folds


def _check_known(dataset: DomainDataset, names: Sequence[str], key: str) -> None:
    """A :class:`ConfigError` naming ``key`` and the valid choices unless every
    one of ``names`` is a domain of ``dataset``."""
    for d in names:
        if d not in dataset.domains:
            raise ConfigError(
                f"{key}: domain {d!r} does not exist in dataset {dataset.name!r}; "
                f"valid choices: {', '.join(dataset.domains)}"
            )


def _check_sources(
    dataset: DomainDataset,
    sources: Sequence[str] | None,
    probe_train: Sequence[str],
) -> None:
    """``lodo.sources`` names domains of ``dataset``, none kept for the probe
    (``evaluation.probe_train``); a name listed twice is refused when the config
    loads (:func:`fedpath.config_sections.check_distinct`)."""
    if sources is None:
        return
    key = "config key 'lodo.sources'"
    if not sources:
        raise ConfigError(f"{key}: expected a non-empty list of domains, got []")
    _check_known(dataset, sources, key)
    for d in sources:
        if d in probe_train:
            raise ConfigError(
                f"{key}: {d!r} is kept out of training for the probe "
                "(evaluation.probe_train); expected domains that train"
            )


def _check_probe_train(
    dataset: DomainDataset, targets: Sequence[str], probe_train: Sequence[str]
) -> None:
    """``evaluation.probe_train`` names domains of ``dataset``, none of them a
    held-out target, and leaves every fold a source domain to train on."""
    if not probe_train:
        return
    key = "config key 'evaluation.probe_train'"
    valid = ", ".join(dataset.domains)
    _check_known(dataset, probe_train, key)
    for t in targets:
        if t in probe_train:
            raise ConfigError(
                f"{key}: {t!r} is a held-out target (lodo.targets); expected "
                "domains other than the targets (the probe is tested on the "
                f"target's test split), got {list(probe_train)}"
            )
    others = [d for d in dataset.domains if d not in probe_train]
    if len(others) < 2:
        raise ConfigError(
            f"{key}: {list(probe_train)} leave{' only' if others else ''} "
            f"{others or 'no domain'} of dataset {dataset.name!r} for federated "
            f"training; expected at most {max(len(dataset.domains) - 2, 0)} of "
            f"its domains ({valid}), so that a held-out target and at least one "
            "source domain to train on remain"
        )


def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    mode: str = "label",
    min_size: int = 1,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Positions of ``labels`` assigned to each of ``num_clients`` clients.

    ``label``: for each class, client shares ~ Dirichlet(alpha * 1); ``quantity``: one
    Dirichlet(alpha * 1) draw of client sizes; ``iid``: equal random shares. Draws are
    repeated (up to ``max_tries``) until every client holds ``min_size`` samples; if
    the skew is so strong that this fails, samples move from the largest client to
    the smallest until it holds, so no client is ever empty.
    """
    n = len(labels)
    if num_clients < 1:
        raise ConfigError(
            f"partition.clients_per_domain: expected >= 1, got {num_clients}"
        )
    if alpha <= 0:
        raise ConfigError(f"partition.alpha: expected a number > 0, got {alpha}")
    if n < num_clients * min_size:
        raise DataError(
            f"{n} samples cannot fill {num_clients} clients with at least "
            f"{min_size} each"
        )
    parts: list[np.ndarray] = []
    for _ in range(max_tries):
        parts = _draw(labels, num_clients, alpha, rng, mode)
        if min(len(p) for p in parts) >= min_size:
            break
    else:
        parts = _rebalance(parts, min_size, rng)
    return [np.sort(p) for p in parts]


def _draw(
    labels: np.ndarray, k: int, alpha: float, rng: np.random.Generator, mode: str
) -> list[np.ndarray]:
    n = len(labels)
    if mode == "iid":
        return list(np.array_split(rng.permutation(n), k))
    if mode == "quantity":
        shares = rng.dirichlet(np.full(k, alpha))
        cuts = (np.cumsum(shares)[:-1] * n).astype(int)
        return list(np.split(rng.permutation(n), cuts))
    if mode != "label":
        raise ConfigError(
            f"partition.mode: expected one of 'label', 'quantity', 'iid', got {mode!r}"
        )
    buckets: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        shares = rng.dirichlet(np.full(k, alpha))
        cuts = (np.cumsum(shares)[:-1] * len(idx)).astype(int)
        for b, chunk in zip(buckets, np.split(idx, cuts), strict=True):
            b.append(chunk)
    return [np.concatenate(b) if b else np.empty(0, np.int64) for b in buckets]


def _rebalance(
    parts: list[np.ndarray], min_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    parts = [rng.permutation(p) for p in parts]
    while True:
        sizes = [len(p) for p in parts]
        small = int(np.argmin(sizes))
        if sizes[small] >= min_size:
            return parts
        big = int(np.argmax(sizes))
        need = min(min_size - sizes[small], sizes[big] - min_size)
        parts[small] = np.concatenate([parts[small], parts[big][:need]])
        parts[big] = parts[big][need:]


def hold_out_validation(
    train: Split, fraction: float, seed: int, domain: str
) -> tuple[Split, Split]:
    """``(train, validation)``: about ``fraction`` of ``train`` held out by slide.

    Whole slides move (:func:`~fedpath.data.base.assign_test_split`: at least one
    slide when the domain has two or more, never all of them), so no slide has
    crops on both sides. The draw depends only on ``seed`` and the domain's name,
    so a domain holds out the same slides in every leave-one-domain-out fold.
    """
    state = np.random.SeedSequence([seed, zlib.crc32(domain.encode()), 15485863])
    held = assign_test_split(
        train.domains, train.slides, fraction, seed=int(state.generate_state(1)[0])
    )
    return train.subset(np.flatnonzero(~held)), train.subset(np.flatnonzero(held))


def deal_slides(split: Split, k: int, rng: np.random.Generator) -> list[Split]:
    """``split`` dealt to ``k`` clients whole slides at a time, in equal shares of
    slides (a client may get none when there are fewer slides than clients)."""
    slides = np.unique(split.slides)
    owner = dict(zip(slides.tolist(), rng.permutation(len(slides)) % k, strict=True))
    of = np.array([owner[s] for s in split.slides.tolist()], dtype=np.int64)
    return [split.subset(np.flatnonzero(of == ci)) for ci in range(k)]


def make_clients(
    dataset: DomainDataset, sources: Sequence[str], cfg: PartitionConfig, seed: int
) -> list[ClientData]:
    """Split each source domain's train split into clients_per_domain clients
    (after holding out its ``partition.validation`` slides)."""
    clients: list[ClientData] = []
    for di, domain in enumerate(sources):
        train = dataset.split(domain, "train")
        k = cfg.clients_per_domain
        held: list[Split | None] = [None] * k
        note = ""
        if cfg.validation > 0:
            vseed = seed if cfg.validation_seed is None else cfg.validation_seed
            train, validation = hold_out_validation(
                train, cfg.validation, vseed, domain
            )
            rng = np.random.default_rng([vseed, zlib.crc32(domain.encode()), 3])
            held = list(deal_slides(validation, k, rng))
            note = f" after holding out partition.validation={cfg.validation:g}"
        if len(train) < k * cfg.min_client_size:
            raise DataError(
                f"domain {domain!r} of dataset {dataset.name!r} has {len(train)} "
                f"training samples{note}, fewer than partition.clients_per_domain="
                f"{k} x partition.min_client_size={cfg.min_client_size}"
            )
        rng = np.random.default_rng([seed, di, 7919])
        parts = dirichlet_partition(
            train.labels, k, cfg.alpha, rng, cfg.mode, cfg.min_client_size
        )
        test = dataset.split(domain, "test")
        # the domain's test split, dealt out at random in equal shares
        deal = np.random.default_rng([seed, di, 104729]).permutation(len(test)) % k
        for ci, pos in enumerate(parts):
            own_test = test.subset(np.flatnonzero(deal == ci))
            clients.append(
                ClientData(
                    f"{domain}/c{ci}", domain, train.subset(pos), own_test, held[ci]
                )
            )
    return clients


def label_skew(parts: Sequence[np.ndarray], labels: np.ndarray) -> float:
    """Mean total-variation distance between client and pooled label distributions."""
    classes = np.unique(labels)
    pooled = np.array([np.mean(labels == c) for c in classes])
    tvs = []
    for p in parts:
        if len(p) == 0:
            continue
        dist = np.array([np.mean(labels[p] == c) for c in classes])
        tvs.append(0.5 * np.abs(dist - pooled).sum())
    return float(np.mean(tvs))
