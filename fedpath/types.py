"""What crosses between the client and server halves of an algorithm.

A :class:`Payload` is named groups of named arrays
(``arrays["weights"]["conv1.weight"]``,
``arrays["stain_stats"]["skewness"]``) plus named scalars. Both runtimes move exactly
this: the in-process runtime by reference, the Flower runtime as one ``ArrayRecord``
per group and a ``ConfigRecord`` for the scalars. Nothing hides in positional lists
or JSON strings, so a payload audit can inspect what leaves a hospital.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

Scalar = int | float | str | bool
ArrayDict = dict[str, np.ndarray]


@dataclass
class Payload:
    """Named array groups plus scalars; the unit of communication.

    Arrays are numeric or boolean numpy arrays (what every transport can carry);
    identifiers such as client ids travel as scalars or are known to the receiver.
    """

    arrays: dict[str, ArrayDict] = field(default_factory=dict)
    scalars: dict[str, Scalar] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Bytes of array data (what dominates the wire)."""
        return sum(a.nbytes for group in self.arrays.values() for a in group.values())

    def group(self, name: str) -> ArrayDict:
        """The array group ``name``; a KeyError names the groups that are present."""
        try:
            return self.arrays[name]
        except KeyError:
            raise KeyError(
                f"payload has no array group {name!r}; present: {sorted(self.arrays)}"
            ) from None

    def copy(self) -> Payload:
        return Payload(
            {g: {k: v.copy() for k, v in d.items()} for g, d in self.arrays.items()},
            dict(self.scalars),
        )


@dataclass
class ClientState(Payload):
    """What a client keeps between rounds (local modules, counters).

    Held by the runtime (a dict in-process, ``context.state`` under Flower), never a
    file the client writes on the side, so it is checkpointed with the run.
    """

    @classmethod
    def empty(cls) -> ClientState:
        return cls()


def as_numpy_dict(tensors: Mapping[str, object]) -> ArrayDict:
    """Copy a mapping of tensors/arrays into an independent dict of numpy arrays."""
    out: ArrayDict = {}
    for key, value in tensors.items():
        if hasattr(value, "detach"):
            out[key] = value.detach().cpu().numpy().copy()
        else:
            out[key] = np.array(value, copy=True)
    return out


def payload_to_tree(payload: Payload) -> dict[str, object]:
    """A checkpoint-friendly tree: tensors and plain scalars (loads weights_only)."""
    import torch

    for g, d in payload.arrays.items():
        for k, v in d.items():
            if v.dtype.kind not in "biuf":
                raise TypeError(
                    f"payload array {g}/{k} has dtype {v.dtype}; payload arrays must "
                    "be numeric or boolean"
                )
    return {
        "arrays": {
            g: {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in d.items()}
            for g, d in payload.arrays.items()
        },
        "scalars": dict(payload.scalars),
    }


def payload_from_tree(
    tree: Mapping[str, object], cls: type[Payload] = Payload
) -> Payload:
    arrays = tree.get("arrays", {})
    scalars = tree.get("scalars", {})
    assert isinstance(arrays, Mapping) and isinstance(scalars, Mapping)
    return cls(
        {g: {k: v.numpy() for k, v in d.items()} for g, d in arrays.items()},
        dict(scalars),
    )
