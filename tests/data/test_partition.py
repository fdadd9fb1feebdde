"""Client partitions and leave-one-domain-out plans (fedpath.data.partition)."""

from __future__ import annotations

import numpy as np
import pytest

from fedpath.config import ConfigError, PartitionConfig, build_config
from fedpath.data.base import DataError
from fedpath.data.partition import (
    ClientData,
    dirichlet_partition,
    label_skew,
    lodo_plan,
    make_clients,
)
from tests.data.helpers import toy_dataset


def labels_of(n: int = 400, classes: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, classes, n)


@pytest.mark.parametrize("mode", ["label", "quantity", "iid"])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_partition_is_exact_cover_and_nonempty(mode: str, k: int) -> None:
    y = labels_of()
    for seed in range(20):
        parts = dirichlet_partition(y, k, 0.1, np.random.default_rng(seed), mode, 3)
        assert len(parts) == k
        allpos = np.concatenate(parts)
        assert np.array_equal(np.sort(allpos), np.arange(len(y)))  # disjoint cover
        assert min(len(p) for p in parts) >= 3


def test_extreme_skew_falls_back_to_rebalancing() -> None:
    y = np.zeros(30, dtype=int)
    # alpha tiny: almost every draw gives one client everything; min size must hold
    parts = dirichlet_partition(
        y, 3, 1e-4, np.random.default_rng(0), "quantity", 5, max_tries=2
    )
    assert sorted(len(p) for p in parts)[0] >= 5
    assert sum(len(p) for p in parts) == 30


def test_skew_grows_as_alpha_shrinks() -> None:
    y = labels_of(600, 3)

    def mean_skew(alpha: float) -> float:
        return float(
            np.mean(
                [
                    label_skew(
                        dirichlet_partition(y, 4, alpha, np.random.default_rng(s)), y
                    )
                    for s in range(30)
                ]
            )
        )

    skews = [mean_skew(a) for a in (100.0, 1.0, 0.1)]
    assert skews[0] < skews[1] < skews[2]
    assert skews[0] < 0.05 and skews[2] > 0.3


def test_partition_bad_input() -> None:
    with pytest.raises(ConfigError, match="alpha"):
        dirichlet_partition(labels_of(), 2, 0.0, np.random.default_rng(0))
    with pytest.raises(DataError, match="3 samples cannot fill 4 clients"):
        dirichlet_partition(np.zeros(3, int), 4, 1.0, np.random.default_rng(0))


def test_lodo_plans() -> None:
    ds = toy_dataset()
    plan = lodo_plan(ds)
    assert [f.target for f in plan] == ["d0", "d1", "d2"]
    assert all(f.target not in f.sources and len(f.sources) == 2 for f in plan)
    assert [f.target for f in lodo_plan(ds, ["d2"])] == ["d2"]
    with pytest.raises(ConfigError, match="domain 'd9' does not exist.*d0, d1, d2"):
        lodo_plan(ds, ["d9"])


def test_probe_train_domains_are_no_source_and_no_target_of_any_fold() -> None:
    ds = toy_dataset(domains=5)
    plan = lodo_plan(ds, ["d4"], probe_train=["d0", "d1"])
    assert [(f.target, f.sources) for f in plan] == [("d4", ["d2", "d3"])]
    # "all" holds out every domain that is not the probe's, in turn
    plan = lodo_plan(ds, "all", probe_train=["d1", "d3"])
    assert [(f.target, f.sources) for f in plan] == [
        ("d0", ["d2", "d4"]),
        ("d2", ["d0", "d4"]),
        ("d4", ["d0", "d2"]),
    ]
    # none listed: the plan of old
    assert lodo_plan(ds, "all", probe_train=[]) == lodo_plan(ds)


@pytest.mark.parametrize(
    ("targets", "probe_train", "message"),
    [
        (["d2"], ["d0", "d9"], r"domain 'd9' does not exist .*: d0, d1, d2\b"),
        (["d2"], ["d0", "d2"], r"'d2' is a held-out target"),
        (["d2"], ["d0", "d1"], r"leave only \['d2'\] .*expected at most 1 of"),
        ("all", ["d0", "d1", "d2"], r"leave no domain .*expected at most 1 of"),
    ],
)
def test_bad_probe_train_names_the_key(
    targets: str | list[str], probe_train: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match="'evaluation.probe_train': .*" + message):
        lodo_plan(toy_dataset(), targets, probe_train)


def test_listed_sources_are_the_only_domains_that_train() -> None:
    ds = toy_dataset(domains=4)
    # one source: that hospital alone, the local-only row
    assert [(f.target, f.sources) for f in lodo_plan(ds, ["d3"], sources=["d1"])] == [
        ("d3", ["d1"])
    ]
    # each fold trains on the listed domains less its target, in the listed order
    plan = lodo_plan(ds, ["d0", "d3"], sources=["d3", "d0", "d2"])
    assert [(f.target, f.sources) for f in plan] == [
        ("d0", ["d3", "d2"]),
        ("d3", ["d0", "d2"]),
    ]
    assert lodo_plan(ds, "none", sources=["d1", "d2"])[0].sources == ["d1", "d2"]
    # none listed: the plan of old
    assert lodo_plan(ds, "all", sources=None) == lodo_plan(ds)


@pytest.mark.parametrize(
    ("targets", "sources", "probe_train", "message"),
    [
        (["d2"], ["d9"], [], r"domain 'd9' does not exist .*: d0, d1, d2\b"),
        (["d2"], [], [], r"expected a non-empty list"),
        (["d2"], ["d0"], ["d0"], r"'d0' is kept out of training for the probe"),
        ("all", ["d1"], [], r"leaves no domain to train on when 'd1' is held out"),
    ],
)
def test_bad_sources_name_the_key(
    targets: str | list[str], sources: list[str], probe_train: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match="'lodo.sources': .*" + message):
        lodo_plan(toy_dataset(), targets, probe_train, sources)


def test_make_clients_two_per_domain() -> None:
    ds = toy_dataset(per_domain=30)
    clients = make_clients(ds, ["d0", "d1"], PartitionConfig(2, 0.5), seed=0)
    assert [c.client_id for c in clients] == ["d0/c0", "d0/c1", "d1/c0", "d1/c1"]
    for d in ("d0", "d1"):
        mine = [c for c in clients if c.domain == d]
        total = sum(len(c.train) for c in mine)
        assert total == len(ds.split(d, "train"))
        assert all(len(c.train) >= 2 for c in mine)
    again = make_clients(ds, ["d0", "d1"], PartitionConfig(2, 0.5), seed=0)
    assert all(
        np.array_equal(a.train.indices, b.train.indices)
        for a, b in zip(clients, again, strict=True)
    )


def test_domain_with_fewer_samples_than_clients() -> None:
    ds = toy_dataset(per_domain=6)
    with pytest.raises(
        DataError,
        match="domain 'd0' of dataset 'toy' has .* fewer than "
        "partition.clients_per_domain=5",
    ):
        make_clients(ds, ["d0"], PartitionConfig(5, 0.5), seed=0)


def validation_slides(clients: list[ClientData], domain: str = "") -> set[str]:
    return {
        str(s)
        for c in clients
        if c.validation is not None and c.domain.startswith(domain)
        for s in c.validation.slides
    }


def test_validation_is_held_out_by_slide_and_stable() -> None:
    ds = toy_dataset(per_domain=80, slides_per_domain=10)
    cfg = PartitionConfig(2, 0.5, validation=0.3)
    clients = make_clients(ds, ["d0", "d1"], cfg, seed=0)
    trained = {s for c in clients for s in c.train.slides}
    validated = validation_slides(clients)
    assert validated and not trained & validated  # in the whole federation
    for d in ("d0", "d1"):
        mine = [c for c in clients if c.domain == d]
        val = [c.validation for c in mine if c.validation is not None]
        assert len(val) == 2
        # train + validation: exactly the domain's training split
        parts = [c.train.indices for c in mine] + [v.indices for v in val]
        assert np.array_equal(
            np.sort(np.concatenate(parts)), ds.split(d, "train").indices
        )
        held = sum(len(v) for v in val) / len(ds.split(d, "train"))
        assert 0.15 <= held <= 0.45
        # each validation slide belongs to one client, whole
        assert not set(val[0].slides) & set(val[1].slides)
    # seeded: the same split again; another seed, other slides
    again = make_clients(ds, ["d0", "d1"], cfg, seed=0)
    for a, b in zip(clients, again, strict=True):
        assert a.validation is not None and b.validation is not None
        assert np.array_equal(a.validation.indices, b.validation.indices)
        assert np.array_equal(a.train.indices, b.train.indices)
    others = [validation_slides(make_clients(ds, ["d0"], cfg, k)) for k in range(1, 6)]
    assert any(o != validation_slides(clients, "d0") for o in others)
    # a domain holds out the same slides in every fold (whatever its position)
    fold2 = make_clients(ds, ["d2", "d1"], cfg, seed=0)
    assert validation_slides(fold2, "d1") == validation_slides(clients, "d1")


def test_no_validation_by_default_leaves_the_split_alone() -> None:
    ds = toy_dataset(per_domain=40)
    base = make_clients(ds, ["d0", "d1"], PartitionConfig(2, 0.5), seed=3)
    off = make_clients(
        ds, ["d0", "d1"], PartitionConfig(2, 0.5, validation=0.0), seed=3
    )
    assert PartitionConfig().validation == 0.0
    for a, b in zip(base, off, strict=True):
        assert a.validation is None and b.validation is None
        assert np.array_equal(a.train.indices, b.train.indices)
    for d in ("d0", "d1"):
        total = sum(len(c.train) for c in base if c.domain == d)
        assert total == len(ds.split(d, "train"))


def test_validation_that_leaves_too_little_training_names_the_key() -> None:
    ds = toy_dataset(per_domain=12, slides_per_domain=6)
    with pytest.raises(DataError, match="after holding out partition.validation=0.4"):
        make_clients(
            ds,
            ["d0"],
            PartitionConfig(2, 0.5, min_client_size=5, validation=0.4),
            seed=0,
        )


def test_a_fixed_validation_seed_holds_out_the_same_slides_at_every_seed() -> None:
    ds = toy_dataset(per_domain=80, slides_per_domain=10)
    fixed = PartitionConfig(2, 0.5, validation=0.3, validation_seed=0)
    own = PartitionConfig(2, 0.5, validation=0.3)
    at = {k: make_clients(ds, ["d0", "d1"], fixed, seed=k) for k in range(4)}
    # every seed holds out (and deals) the slides seed 0 holds out on its own
    reference = make_clients(ds, ["d0", "d1"], own, seed=0)
    for clients in at.values():
        for a, b in zip(clients, reference, strict=True):
            assert a.validation is not None and b.validation is not None
            assert np.array_equal(a.validation.indices, b.validation.indices)
    # seed 0 is the run it was without the option; the training shares still
    # follow the run's seed
    for a, b in zip(at[0], reference, strict=True):
        assert np.array_equal(a.train.indices, b.train.indices)
    trains = {k: [c.train.indices.tobytes() for c in at[k]] for k in at}
    assert any(trains[k] != trains[0] for k in (1, 2, 3))


def test_a_validation_seed_without_validation_slides_names_the_key() -> None:
    with pytest.raises(ConfigError, match="partition.validation_seed"):
        build_config({"partition": {"validation_seed": 1}})
    cfg = build_config({"partition": {"validation": 0.2, "validation_seed": 1}})
    assert cfg.partition.validation_seed == 1
