"""The one place where a run's algorithm halves are assembled, for both runtimes.

:class:`RunContext` is built once per run (in-process) or once per experiment
config (a Flower node): it resolves the algorithm's params into their typed
dataclass, picks the dataset's training task and checks that the algorithm
trains on that kind of data. Every client half then gets its
:class:`~fedpath.algorithms.base.ClientContext` from :meth:`RunContext.client_context`,
whether it runs in this process or on a hospital's node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedpath.algorithms.base import (
    ALGORITHMS,
    AlgorithmSpec,
    ClientAlgorithm,
    ClientContext,
    ServerAlgorithm,
    ServerContext,
)
from fedpath.config import ExperimentConfig, resolve_params
from fedpath.data.base import DomainDataset
from fedpath.data.partition import ClientData
from fedpath.tasks import Task, make_task
from fedpath.types import ArrayDict


@dataclass(frozen=True)
class RunContext:
    """A run's config, task, algorithm and typed params: what both halves need."""

    cfg: ExperimentConfig
    task: Task
    spec: AlgorithmSpec
    params: Any

    @classmethod
    def build(cls, cfg: ExperimentConfig, dataset: DomainDataset) -> RunContext:
        schema = ALGORITHMS.params(cfg.algorithm.name)
        params = (
            resolve_params(schema, cfg.algorithm.params, "algorithm.params")
            if schema
            else None
        )
        return cls(
            cfg, make_task(cfg, dataset), ALGORITHMS.get(cfg.algorithm.name), params
        )

    def client_context(
        self,
        client: ClientData,
        *,
        round: int,
        seed: int,
        on_epoch: Callable[[int, int], None] | None = None,
    ) -> ClientContext:
        """The context of ``client``'s half in round ``round`` of seed ``seed``."""
        return ClientContext(
            client_id=client.client_id,
            domain=client.domain,
            data=client.train,
            task=self.task,
            round=round,
            seed=seed,
            test=client.test,
            on_epoch=on_epoch,
        )

    def client_half(
        self,
        client: ClientData,
        *,
        round: int,
        seed: int,
        on_epoch: Callable[[int, int], None] | None = None,
    ) -> ClientAlgorithm[Any]:
        """A fresh client half (nothing lives on it between calls)."""
        ctx = self.client_context(client, round=round, seed=seed, on_epoch=on_epoch)
        return self.spec.client(self.params, ctx)

    def server_half(
        self,
        *,
        initial_weights: ArrayDict,
        clients: list[ClientData],
        seed: int,
    ) -> ServerAlgorithm[Any]:
        return self.spec.server(
            self.params,
            ServerContext(
                initial_weights=initial_weights,
                client_ids=[c.client_id for c in clients],
                client_domains={c.client_id: c.domain for c in clients},
                seed=seed,
                task=self.task,
            ),
        )
