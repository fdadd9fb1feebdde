"""FedAvg within groups of one architecture in one embedding space."""

from __future__ import annotations

import numpy as np

from fedpath.algorithms.group_average import MEMBERS, GroupAverages, group_of
from fedpath.types import Payload

IDS = ["a", "b", "c", "d"]


def reply(value: float, n: int, group: str) -> Payload:
    return Payload(
        {"weights": {"w": np.full(2, value, np.float32)}},
        {"num_examples": n, "group": group},
    )


def test_group_names_default_to_the_backbone() -> None:
    assert group_of("transmil", "uni") == "transmil@uni"
    assert group_of("", "uni") == "model.backbone@uni"


def test_each_group_is_averaged_by_slide_count_alone() -> None:
    avg = GroupAverages()
    assert avg.payload("a").arrays == {}  # before any fit
    avg.average(
        {
            "a": reply(1.0, 1, "x@u"),
            "b": reply(5.0, 3, "x@u"),
            "c": reply(9.0, 2, "y@v"),
        },
        "average",
    )
    assert np.allclose(avg.payload("a").arrays["weights"]["w"], (1 + 15) / 4)
    assert np.array_equal(
        avg.payload("b").arrays["weights"]["w"], avg.payload("a").arrays["weights"]["w"]
    )
    assert np.allclose(avg.payload("c").arrays["weights"]["w"], 9.0)
    assert avg.payload("d").arrays == {}
    # a later round replaces a group's average and keeps the others
    avg.average({"c": reply(3.0, 1, "y@v")}, "average")
    assert np.allclose(avg.payload("c").arrays["weights"]["w"], 3.0)
    assert np.allclose(avg.payload("a").arrays["weights"]["w"], 4.0)


def test_groups_survive_a_checkpoint_without_ids_in_keys() -> None:
    avg = GroupAverages()
    avg.average({"a": reply(1.0, 1, "x@u"), "c": reply(9.0, 2, "y@v")}, "average")
    saved = Payload({"other": {"k": np.zeros(1)}}, {"kept": 1})
    avg.save(saved, IDS)
    assert sorted(saved.arrays) == [MEMBERS, "other", "weights/0", "weights/1"]
    assert saved.scalars == {"kept": 1, "group/0": "x@u", "group/1": "y@v"}
    assert saved.arrays[MEMBERS]["group"].tolist() == [0, -1, 1, -1]
    again = GroupAverages()
    again.load(saved, IDS)
    assert again.member == avg.member == {"a": "x@u", "c": "y@v"}
    for c in IDS:
        mine, theirs = again.payload(c).arrays, avg.payload(c).arrays
        assert mine.keys() == theirs.keys()
        if mine:
            assert np.array_equal(mine["weights"]["w"], theirs["weights"]["w"])
    empty = GroupAverages()
    empty.load(Payload(), IDS)
    assert empty.groups == {} and empty.member == {}
