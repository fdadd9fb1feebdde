"""A node's data and run context: its client, split as in-process, built once.

A node holds its own hospital's data. :func:`find_client` splits it exactly as
the in-process runtime does, so the node trains on the same images; the dataset
and the :class:`~fedpath.runtime.context.RunContext` are kept per process (a
persistent worker keeps them across messages; a fresh ClientApp process builds
its one dataset once). PyTorch and the algorithms load only when a stage
message asks for them, never for a ``hello``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedpath.config import ExperimentConfig
from fedpath.runtime.flower.node_context import NodeError

if TYPE_CHECKING:  # torch and the algorithms load only for stage messages
    from fedpath.data.base import DomainDataset
    from fedpath.data.partition import ClientData
    from fedpath.runtime.context import RunContext


def find_client(
    dataset: DomainDataset,
    sources: list[str],
    cfg: ExperimentConfig,
    seed: int,
    client_id: str,
) -> ClientData:
    """This node's client, split exactly as the in-process runtime splits it.

    With every source domain on disk, :func:`make_clients` runs as in-process. A
    node that holds only its own hospital's domain gets the same split when
    ``partition.clients_per_domain`` is 1 (the whole training split); with more
    clients per domain the split depends on the domain's position among the
    sources, which needs every source's metadata on the node.
    """
    from fedpath.data.partition import make_clients

    present = [d for d in sources if d in dataset.domains]
    if not present:
        raise NodeError(
            f"client {client_id}: the node's dataset {dataset.name!r} holds domains "
            f"{dataset.domains}, none of the federation's sources {sources}"
        )
    if len(present) < len(sources) and cfg.partition.clients_per_domain > 1:
        raise NodeError(
            f"client {client_id}: the node's dataset holds {present} of the sources "
            f"{sources}; with partition.clients_per_domain="
            f"{cfg.partition.clients_per_domain} the Dirichlet split needs every "
            "source domain's labels on the node (or use clients_per_domain=1)"
        )
    for client in make_clients(dataset, present, cfg.partition, seed):
        if client.client_id == client_id:
            return client
    raise NodeError(
        f"client {client_id}: not a client of this fold; the node's data gives "
        f"{[c.client_id for c in make_clients(dataset, present, cfg.partition, seed)]}"
    )


#: Datasets this process has built, by data config (a worker keeps them across
#: messages; a fresh ClientApp process builds its one dataset once).
_DATASETS: dict[str, DomainDataset] = {}
_DATASETS_KEPT = 2


def node_dataset(cfg: ExperimentConfig) -> DomainDataset:
    """The node's dataset, built once per process and data config."""
    from fedpath.runtime.experiment import load_dataset
    from fedpath.tasks import prepare_dataset

    key = repr(cfg.data)
    if key not in _DATASETS:
        while len(_DATASETS) >= _DATASETS_KEPT:
            del _DATASETS[next(iter(_DATASETS))]
        _DATASETS[key] = load_dataset(cfg.data)
    # train.cache_features: the node encodes its own images (cached on its disk)
    return prepare_dataset(cfg, _DATASETS[key])


#: The run contexts (task, typed algorithm params) this process has built, by
#: config hash: algorithm params are resolved once per config, not per message.
_RUNS: dict[str, RunContext] = {}


def node_run_context(cfg: ExperimentConfig, dataset: DomainDataset) -> RunContext:
    """The run context of ``cfg`` on this node, built once per process and config."""
    from fedpath.runtime.context import RunContext

    key = cfg.hash()
    if key not in _RUNS:
        while len(_RUNS) >= _DATASETS_KEPT:
            del _RUNS[next(iter(_RUNS))]
        _RUNS[key] = RunContext.build(cfg, dataset)
    return _RUNS[key]
