"""FedAvg and FedProx on a homogeneous MIL model (FedHD's parameter-sharing baselines).

Every client trains the configured ``model.backbone`` (one architecture for all:
averaging needs it) on its real slides for ``train.local_epochs`` per round; the server
averages the weights by slide count. FedProx adds (mu/2)||w - w_global||^2.
"""

from __future__ import annotations

import torch

from fedpath.algorithms.base import ClientAlgorithm, ProtocolError, register_algorithm
from fedpath.algorithms.fedavg import WEIGHTS, FedAvgServer
from fedpath.algorithms.mil_common import real_bags, train_bags
from fedpath.losses import proximal_term, snapshot_parameters
from fedpath.mil.models import MILModel
from fedpath.params.mil_train import FedAvgMILParams, FedProxMILParams
from fedpath.types import ClientState, Payload, as_numpy_dict
from fedpath.wire import Wire


class FedAvgMILClient(ClientAlgorithm[FedAvgMILParams]):
    """Load the global MIL weights, train on real slides, upload the weights."""

    def deployed_model(self, payload: Payload, state: ClientState) -> MILModel:
        model = super().deployed_model(payload, state)
        assert isinstance(model, MILModel)
        return model

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != "fit":
            raise ProtocolError(f"{type(self).__name__} has no stage {stage!r}")
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        model = self.deployed_model(payload, state)
        anchor = snapshot_parameters(model.parameters())

        def proximal() -> torch.Tensor:
            return proximal_term(model.parameters(), anchor, p.mu).penalty

        scalars = train_bags(ctx, model, real, penalty=proximal if p.mu > 0 else None)
        return Payload(
            {WEIGHTS: as_numpy_dict(model.state_dict())},
            {"num_examples": len(real), **scalars},
        )


register_algorithm(
    "fedavg_mil",
    FedAvgMILClient,
    FedAvgServer,
    FedAvgMILParams,
    "FedAvg/FedProx (mu > 0) on one MIL architecture; real slides stay local",
    data="bags",
    wire=Wire("MIL model weights", {"fit": "weights"}, secagg="examples"),
)


register_algorithm(
    "fedprox_mil",
    FedAvgMILClient,
    FedAvgServer,
    FedProxMILParams,
    "FedProx on one MIL architecture: CE + (mu/2)||w - w_global||^2",
    data="bags",
    wire=Wire("MIL model weights", {"fit": "weights"}, secagg="examples"),
)
