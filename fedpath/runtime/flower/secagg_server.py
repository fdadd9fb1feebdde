"""The coordinator's half of SecAgg+: Flower's ``SecAggPlusWorkflow`` for the
fit stage of one round (the protocol and the node's half: :mod:`.secagg`).

The workflow runs unchanged; it gets a stand-in legacy strategy
(:class:`_SumStrategy`: the round's nodes, and it keeps the unmasked aggregate)
and a Grid (:class:`_WorkflowGrid`) that sends fedpath's own ``fit`` message in
the ``collect_masked_vectors`` stage, a fedpath header with the three others,
and sends through the run's :class:`~.messenger.Messenger` (fedpath's short
poll; failures logged and recorded as for any stage).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    RecordDict,
)
from flwr.common import FitIns, FitRes, Parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    Key,
    Stage,
)
from flwr.server import ServerConfig, SimpleClientManager
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid

from fedpath.algorithms.names import FIT, WEIGHTS
from fedpath.config import ConfigError, ExperimentConfig
from fedpath.data.partition import ClientData
from fedpath.runtime.flower import META, STAGE_MESSAGE
from fedpath.runtime.flower.messenger import Messenger
from fedpath.runtime.flower.nodes import record_bytes
from fedpath.runtime.flower.records import SCALARS, RecordError
from fedpath.runtime.flower.secagg import INDEX, STAGE_PREFIX
from fedpath.runtime.sampling import clients_per_round
from fedpath.runtime.secagg import (
    RC_MAX_WEIGHT,
    RC_MODE,
    RC_THRESHOLD,
    SecAggSettings,
    check_algorithm,
)
from fedpath.runtime.transport import Exchanged
from fedpath.types import ArrayDict, Payload

log = logging.getLogger("fedpath")


class SecureFit:
    """The fit stage of one round through Flower's ``SecAggPlusWorkflow``."""

    def __init__(
        self,
        messenger: Messenger,
        settings: SecAggSettings,
        max_weight: float,
        rounds: int,
    ) -> None:
        self.messenger = messenger
        self.settings = settings
        self.max_weight = max_weight
        self.rounds = rounds
        #: the last round's protocol replies as the coordinator received them
        self.received: dict[str, list[Message]] = {}

    @classmethod
    def for_run(
        cls,
        cfg: ExperimentConfig,
        clients: Sequence[ClientData],
        settings: SecAggSettings,
        messenger: Messenger,
    ) -> SecureFit:
        """Check that SecAgg+ can carry this run (its algorithm, its clients per
        round); its driver."""
        s = settings
        weighting = check_algorithm(cfg)
        n = len(clients)
        k = min(n, clients_per_round(cfg.train, n))
        if k < 2:
            raise ConfigError(
                f"Flower run config {RC_MODE!r}: SecAgg+ needs at least 2 clients "
                f"per round, this run samples {k} of {n} (train.clients_per_round, "
                "train.client_fraction)"
            )
        s.check_clients(k)
        weight = s.max_weight
        if weighting == "equal":
            weight = 1.0
        elif weight == 0:  # the largest training split of the roster
            weight = float(max(len(c.train) for c in clients))
        log.info(
            "secure aggregation: SecAgg+ on the fit stage (clipping range %g, "
            "quantization range %d, modulus %d, %s %g)",
            s.clipping_range,
            s.quantization_range,
            s.modulus_range,
            RC_MAX_WEIGHT,
            weight,
        )
        return cls(messenger, s, weight, cfg.train.rounds)

    def exchange(self, rnd: int, messages: Mapping[str, Payload]) -> Exchanged:
        """Every client in ``messages`` gets the aggregate as its reply (weight 1),
        with its own plain scalars; absent clients dropped out."""
        s = self.settings
        contents: dict[int, RecordDict] = {}
        client_of: dict[int, str] = {}
        for cid, node, content in self.messenger.address(FIT, rnd, messages):
            contents[node], client_of[node] = content, cid
        s.check_clients(len(contents))
        grid = _WorkflowGrid(self.messenger, rnd, contents, client_of)
        strategy = _SumStrategy(grid, sorted(contents))
        manager = SimpleClientManager()
        for proxy in strategy.proxies:
            manager.register(proxy)
        context = LegacyContext(
            Context(0, 0, {}, RecordDict(), {}),
            ServerConfig(num_rounds=self.rounds),
            strategy,
            manager,
        )
        context.state[MAIN_CONFIGS_RECORD] = ConfigRecord(
            {WorkflowKey.CURRENT_ROUND: rnd}
        )
        context.state[MAIN_PARAMS_RECORD] = ArrayRecord()
        if len(contents) >= 2:
            SecAggPlusWorkflow(
                s.num_shares,
                s.reconstruction_threshold,
                max_weight=self.max_weight,
                clipping_range=s.clipping_range,
                quantization_range=s.quantization_range,
                modulus_range=s.modulus_range,
            )(grid, context)
        self.received = grid.received
        if strategy.aggregate is None:
            raise RuntimeError(
                f"round {rnd} stage 'fit': secure aggregation halted with "
                f"{len(grid.scalars)} of {len(messages)} clients' masked vectors "
                "(SecAgg+ needs at least 2, and every client's secrets need "
                f"{RC_THRESHOLD} live neighbours; see the failures above)"
            )
        arrays = grid.arrays(strategy.aggregate)
        replies = {
            cid: Payload({WEIGHTS: arrays}, {"num_examples": 1, **grid.scalars[cid]})
            for cid in sorted(grid.scalars)
        }
        return replies, {
            "sent": sorted(client_of.values()),
            "wire_bytes_up": grid.up,
            "wire_bytes_down": grid.down,
            "failed": len(messages) - len(replies),
        }


class _SumStrategy(Strategy):
    """Selects the round's nodes; keeps the unmasked aggregate (as float64)."""

    def __init__(self, grid: Grid, nodes: list[int]) -> None:
        self.proxies = [GridClientProxy(n, grid, 0) for n in nodes]
        self.aggregate: list[np.ndarray] | None = None

    def initialize_parameters(self, client_manager: ClientManager) -> None:
        return None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        # the content is replaced by fedpath's fit message (_WorkflowGrid)
        return [(p, FitIns(Parameters([], ""), {})) for p in self.proxies]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: Any,
    ) -> tuple[None, dict[str, Any]]:
        if results:
            self.aggregate = parameters_to_ndarrays(results[0][1].parameters)
        return None, {}

    def configure_evaluate(self, *args: Any) -> list[Any]:
        return []

    def aggregate_evaluate(self, *args: Any) -> tuple[None, dict[str, Any]]:
        return None, {}

    def evaluate(self, *args: Any) -> None:
        return None


class _WorkflowGrid(Grid):
    """The workflow's view of the grid: fedpath's messages, headers and polling."""

    def __init__(
        self,
        messenger: Messenger,
        rnd: int,
        contents: dict[int, RecordDict],
        client_of: dict[int, str],
    ) -> None:
        self.messenger, self.grid, self.rnd = messenger, messenger.grid, rnd
        self.contents, self.client_of = contents, client_of
        self.up = self.down = 0
        self.received: dict[str, list[Message]] = {}
        #: client -> the plain scalars of its masked reply (the contributors)
        self.scalars: dict[str, dict[str, Any]] = {}
        self.index: ConfigRecord | None = None

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        out: list[Message] = []
        stage = ""
        for msg in messages:
            node = msg.metadata.dst_node_id
            configs = msg.content.config_records[RECORD_KEY_CONFIGS]
            stage = str(configs[Key.STAGE])
            if stage == Stage.COLLECT_MASKED_VECTORS:
                content = RecordDict(dict(self.contents[node].items()))
            else:
                header = self.messenger.header(
                    STAGE_PREFIX + stage, self.rnd, self.client_of[node]
                )
                content = RecordDict({META: header})
            content[RECORD_KEY_CONFIGS] = configs
            self.down += record_bytes(content)
            out.append(
                Message(
                    content,
                    dst_node_id=node,
                    message_type=STAGE_MESSAGE,
                    group_id=msg.metadata.group_id,
                )
            )
        name = FIT if stage == Stage.COLLECT_MASKED_VECTORS else STAGE_PREFIX + stage
        collect = stage == Stage.COLLECT_MASKED_VECTORS

        def read(cid: str, reply: Message) -> None:
            if collect:  # (an unfit vector stops the round: RecordError)
                self._contribution(cid, reply.content)

        clients = [self.client_of[m.metadata.dst_node_id] for m in out]
        got = self.messenger.deliver(self.rnd, name, out, clients, read)
        self.received[stage] = got.all
        self.up += got.wire_up
        self.messenger.timeouts(self.rnd, name, sorted(got.missing, key=_node))
        return got.all

    def _contribution(self, cid: str, content: RecordDict) -> None:
        index = content.config_records.get(INDEX)
        if index is None or (
            self.index is not None and dict(index) != dict(self.index)
        ):
            raise RecordError(
                f"round {self.rnd}: client {cid}'s masked vector does not hold the "
                "same entries as the others' (another model?)"
            )
        self.index = index
        scalars = content.config_records.get(SCALARS, ConfigRecord())
        self.scalars[cid] = dict(scalars)

    def arrays(self, aggregate: list[np.ndarray]) -> ArrayDict:
        """The unmasked mean as named arrays of the clients' dtypes and shapes."""
        index = self.index
        assert index is not None
        names, shapes, dtypes = (
            cast(list[str], index[k]) for k in ("names", "shapes", "dtypes")
        )
        if len(aggregate) != len(names):
            raise RecordError(
                f"round {self.rnd}: {len(aggregate)} aggregated arrays for "
                f"{len(names)} entries"
            )
        out: ArrayDict = {}
        for name, shape, dtype, value in zip(
            names, shapes, dtypes, aggregate, strict=True
        ):
            dims = tuple(int(d) for d in str(shape).split(",") if d)
            out[str(name)] = value.reshape(dims).astype(np.dtype(str(dtype)))
        return out

    # the workflow only calls send_and_receive; the rest is the real grid's

    def set_run(self, run: Any) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        return self.grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self.grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> list[int]:
        return list(self.grid.get_node_ids())

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        return list(self.grid.push_messages(messages))

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return list(self.grid.pull_messages(message_ids))


def _node(missing: tuple[str, int]) -> int:
    """The node of a ``(client, node)`` (SecAgg+ reports timeouts by node)."""
    return missing[1]
