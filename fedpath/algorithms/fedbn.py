"""FedBN (Li et al., ICLR 2021): normalization layers stay local.

Normalization modules are selected by type (BatchNorm, GroupNorm, LayerNorm,
InstanceNorm), not by a ``"bn"`` substring of their names, which misses
torchvision's ``downsample.1`` BatchNorms in the released code. Each client keeps its
own normalization parameters and running statistics across rounds; the broadcast
carries only the other entries.

Unseen target domain: a hospital outside the federation has no local BatchNorm
statistics, so the global model evaluated on it uses the example-weighted average
of the clients' normalization entries (the server still receives them). This is a
documented choice; the FedBN paper evaluates clients on their own domains only.
"""

from __future__ import annotations

from torch import nn

from fedpath.algorithms.base import ServerContext, register_algorithm
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.config import ConfigError
from fedpath.models.backbones import NORM_TYPES, keys_of_modules
from fedpath.params.algorithms import FedBNParams
from fedpath.types import ArrayDict
from fedpath.wire import Wire


class FedBNClient(WeightsClient):
    """FedBN: normalization layers keep their local values between rounds."""

    def local_keys(self, model: nn.Module) -> set[str]:
        return keys_of_modules(model, NORM_TYPES)


class FedBNServer(FedAvgServer):
    """FedAvg server whose broadcast leaves out normalization entries."""

    def __init__(self, params: FedBNParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        train = ctx.task.train
        if train.trainable == "classifier" or train.bn == "frozen":
            key, value = (
                ("train.trainable", train.trainable)
                if train.trainable == "classifier"
                else ("train.bn", train.bn)
            )
            raise ConfigError(
                f"config key {key!r}: {value!r} keeps the normalization layers "
                "fixed, but fedbn's point is to train them locally; use "
                "algorithm.name=fedavg, or train them (train.trainable: all or "
                "last_stages, train.bn: train)"
            )
        self.norm_keys = keys_of_modules(ctx.build_model(), NORM_TYPES)

    def broadcast_weights(self, client: str) -> ArrayDict:
        return {k: v for k, v in self.weights.items() if k not in self.norm_keys}


register_algorithm(
    "fedbn",
    FedBNClient,
    FedBNServer,
    FedBNParams,
    "FedBN (Li et al. 2021): normalization layers stay local",
    features=True,
    wire=Wire(
        "weights (normalization layers stay local)",
        {"fit": "weights"},
        secagg="examples",
    ),
)
