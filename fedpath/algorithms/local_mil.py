"""Local-only MIL training: each hospital trains its own model on its own slides.

The lower bound of FedHD's table: nothing is exchanged at all. Each client keeps
its model in its state and deploys it (``evaluation.protocol: local``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fedpath.algorithms.base import (
    ProtocolError,
    ServerAlgorithm,
    register_algorithm,
    round_only,
    weighted_mean_scalars,
)
from fedpath.algorithms.mil_common import (
    MILTrainParams,
    OwnMILClient,
    architecture,
    keep_model,
    own_model,
    real_bags,
    train_bags,
)
from fedpath.types import ClientState, Payload, Scalar
from fedpath.wire import Wire


class LocalMILClient(OwnMILClient):
    """Train the client's own MIL model on its real slides only."""

    params: MILTrainParams

    def handle(self, stage: str, payload: Payload, state: ClientState) -> Payload:
        if stage != "fit":
            raise ProtocolError(f"local_mil has no stage {stage!r}")
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        model = own_model(ctx, state, p)
        scalars = train_bags(ctx, model, real)
        keep_model(state, model, architecture(ctx, p.models) or "")
        return Payload({}, {"num_examples": len(real), **scalars})


class NoServer(ServerAlgorithm):
    """A coordinator that only starts rounds and logs the clients' scalars."""

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        return round_only(clients, rnd)

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        return weighted_mean_scalars(replies)

    def state(self) -> Payload:
        return Payload()

    def load_state(self, state: Payload) -> None:
        pass


register_algorithm(
    "local_mil",
    LocalMILClient,
    NoServer,
    MILTrainParams,
    "Local-only MIL training (no federation; FedHD's lower bound)",
    data="bags",
    wire=Wire("metrics only", {"fit": "metrics"}),
)
