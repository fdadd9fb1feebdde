"""What a runtime's transport does for the round loop, and nothing else.

The round loop (:class:`fedpath.runtime.loop.Run`) is the same for every
runtime; a transport only moves payloads: it finds the clients that can answer
(:meth:`Transport.begin_round`), delivers one stage's payloads and collects the
replies (:meth:`Transport.exchange`), and asks the clients for what only they
can compute (their own metrics, their validation slides' metrics and
predictions). In-process every client runs in this process
(:mod:`fedpath.runtime.inprocess`); over Flower each runs on its hospital's node
(:mod:`fedpath.runtime.flower.transport`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from fedpath.runtime.selection import ValidationPredictions
from fedpath.types import ArrayDict, Payload

#: ``exchange``'s replies (client -> payload, in client order) and ``info``:
#: ``sent`` (the clients messaged) plus integer counters that go into the
#: round's record (Flower: wire bytes, failures)
Exchanged = tuple[dict[str, Payload], dict[str, Any]]


class Transport(Protocol):
    """How the round loop reaches the clients (module docstring)."""

    #: True: the client states live with the run (checkpointed and restored);
    #: False: on the clients' side (Flower: each node's ``context.state``)
    keeps_client_states: bool

    def begin_round(self, rnd: int) -> None:
        """Before a round's client sampling (Flower: find the live nodes)."""

    def exchange(
        self, stage: str, rnd: int, messages: Mapping[str, Payload]
    ) -> Exchanged:
        """Deliver one stage's payloads and collect the replies."""
        ...

    def client_metrics(self, rnd: int) -> dict[str, Mapping[str, Any]]:
        """Each client's metrics of its deployed model on its own test split,
        in client order (``evaluation.protocol: local``)."""
        ...

    def validation_metrics(
        self, rnd: int, weights: ArrayDict
    ) -> dict[str, Mapping[str, Any]]:
        """Each source client's metrics of the global ``weights`` on its
        validation slides (``partition.validation``)."""
        ...

    def validation_predictions(self, weights: ArrayDict) -> ValidationPredictions:
        """The pooled validation predictions of ``weights``, client by client."""
        ...
