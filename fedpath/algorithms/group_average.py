"""FedAvg within groups of clients that can share weights (HistoFS ``spaces: adapt``).

Weights can only be averaged between clients that train one architecture in one
embedding space. With clients of different extractors and architectures, a
server averages (by slide count) within each such **group**
(:func:`group_of`) and sends each client its group's average; a client alone in
its group keeps training its own model (docs/fedhd_heterogeneous.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedpath.algorithms.aggregation import BufferPolicy, weighted_average
from fedpath.algorithms.names import WEIGHTS
from fedpath.types import ArrayDict, Payload

#: server state: each client's group (index into the saved groups, -1: none)
MEMBERS = "members"


def group_of(architecture_name: str, space: str) -> str:
    """The averaging group of a client: its architecture ('' = model.backbone)
    in its embedding space."""
    return f"{architecture_name or 'model.backbone'}@{space}"


class GroupAverages:
    """Each group's average weights and each client's group."""

    def __init__(self) -> None:
        self.groups: dict[str, ArrayDict] = {}
        self.member: dict[str, str] = {}

    def average(self, replies: Mapping[str, Payload], bn_buffers: BufferPolicy) -> None:
        """Average the ``weights`` of the replies of each group (the reply scalar
        ``group``), weighted by ``num_examples``."""
        by_group: dict[str, list[str]] = {}
        for c in sorted(replies):
            by_group.setdefault(str(replies[c].scalars["group"]), []).append(c)
        for group, members in by_group.items():
            states = [replies[c].group(WEIGHTS) for c in members]
            counts = [float(replies[c].scalars["num_examples"]) for c in members]
            self.groups[group] = weighted_average(
                states, counts, list(states[0]), bn_buffers
            )
            self.member.update(dict.fromkeys(members, group))

    def payload(self, client: str) -> Payload:
        """``client``'s group's average (empty before its first ``fit``)."""
        group = self.member.get(client)
        return Payload({WEIGHTS: self.groups[group]} if group is not None else {})

    def save(self, saved: Payload, ids: Sequence[str]) -> None:
        """Add the groups to a server checkpoint: ``weights/<i>`` with its name
        in ``group/<i>`` (sorted names), the members as indices into them (no
        client id or group name inside a key)."""
        names = sorted(self.groups)
        for i, group in enumerate(names):
            saved.arrays[f"{WEIGHTS}/{i}"] = self.groups[group]
            saved.scalars[f"group/{i}"] = group
        if self.member:
            saved.arrays[MEMBERS] = {
                "group": np.array(
                    [names.index(self.member[c]) if c in self.member else -1
                     for c in ids], np.int64
                )
            }  # fmt: skip

    def load(self, state: Payload, ids: Sequence[str]) -> None:
        """The inverse of :meth:`save`."""
        names: list[str] = []
        while f"group/{len(names)}" in state.scalars:
            names.append(str(state.scalars[f"group/{len(names)}"]))
        self.groups = {
            g: dict(state.arrays[f"{WEIGHTS}/{i}"]) for i, g in enumerate(names)
        }
        members = state.arrays.get(MEMBERS, {}).get("group")
        self.member = {
            ids[i]: names[g] for i, g in enumerate([] if members is None else members)
            if g >= 0
        }  # fmt: skip


__all__ = ["MEMBERS", "GroupAverages", "group_of"]
