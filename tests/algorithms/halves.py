"""Algorithm halves for unit tests: the client and server of one tiny config,
built the way both runtimes build them (:class:`fedpath.runtime.context.RunContext`).

Shared by the mirrored tests of the image and self-supervised algorithms
(``tests/algorithms/test_<module>.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpath.algorithms.base import ClientAlgorithm, ServerAlgorithm
from fedpath.config import ExperimentConfig
from fedpath.data.base import DomainDataset, Split
from fedpath.data.partition import ClientData
from fedpath.runtime.context import RunContext
from fedpath.runtime.experiment import load_dataset
from fedpath.types import ArrayDict, as_numpy_dict


@dataclass(frozen=True)
class Halves:
    """One config's run context and dataset, to build client and server halves."""

    run: RunContext
    dataset: DomainDataset

    @property
    def params(self) -> Any:
        return self.run.params

    def data(self, domain: str = "hospital_0") -> Split:
        return self.dataset.split(domain, "train")

    def client(
        self,
        client_id: str = "c0",
        domain: str = "hospital_0",
        *,
        data: Split | None = None,
        round: int = 1,
    ) -> Any:
        """A fresh client half on ``domain``'s training split (or ``data``)."""
        split = data if data is not None else self.data(domain)
        half: ClientAlgorithm[Any] = self.run.client_half(
            ClientData(client_id, domain, split), round=round, seed=0
        )
        return half

    def initial_weights(self) -> ArrayDict:
        return as_numpy_dict(self.run.task.build_model().state_dict())

    def server(self, clients: Sequence[str] = ("c0", "c1", "c2")) -> Any:
        """A server half over ``clients`` (all on hospital_0's split)."""
        data = [ClientData(c, "hospital_0", self.data()) for c in clients]
        half: ServerAlgorithm[Any] = self.run.server_half(
            initial_weights=self.initial_weights(), clients=data, seed=0
        )
        return half


def halves(cfg: ExperimentConfig) -> Halves:
    """The halves of ``cfg``'s algorithm on ``cfg``'s dataset."""
    dataset = load_dataset(cfg.data)
    return Halves(RunContext.build(cfg, dataset), dataset)


def nudged(weights: ArrayDict, scale: float, seed: int) -> ArrayDict:
    """``weights`` with Gaussian noise of std ``scale`` on the float entries."""
    rng = np.random.default_rng(seed)
    return {
        k: (v + rng.normal(size=v.shape) * scale).astype(v.dtype)
        if v.dtype.kind == "f"
        else v.copy()
        for k, v in weights.items()
    }
