"""The server half of the distill-then-fit methods: FedHD, FedDGM-approx, DESA.

These methods share one round shape. Round 1 runs two stages: ``distill``, where
every client uploads synthetic slides (its declared embedding space with them),
then ``fit``, where every client trains its own MIL model on what the server sent
back; later rounds run ``fit`` alone. No model weights are averaged.

- :class:`DistillFitServer`: the stages, the stage checks, the embedding-space
  check of the ``distill`` replies (:func:`~fedpath.algorithms.mil_spaces.
  check_spaces`), the token guard's figures and the mean of the ``fit``
  scalars. A method fills in what it sends in ``fit``
  (:meth:`~DistillFitServer.configure_fit`), what it keeps of the synthetic
  slides (:meth:`~DistillFitServer.accept_synthetic`) and of the ``fit`` replies
  (:meth:`~DistillFitServer.accept_fit`), and its checkpoint.
- :class:`SyntheticPool` and :class:`PoolServer`: keep every client's slides and
  send each client the *others'* in round 1 (per embedding space with ``spaces:
  adapt``); clients keep them for later rounds (FedHD, FedDGM-approx). DESA mixes
  the slides into anchors instead (:mod:`fedpath.algorithms.desa`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, TypeVar

from fedpath.algorithms.base import (
    ProtocolError,
    ServerAlgorithm,
    ServerContext,
    round_only,
    weighted_mean_scalars,
)
from fedpath.algorithms.mil_common import (
    arrays_to_spaced,
    concat_bags,
    guard_scalars,
    spaced_to_arrays,
    stack_pool,
    unstack_pool,
)
from fedpath.algorithms.mil_spaces import check_spaces
from fedpath.algorithms.names import DISTILL, FIT, POOL, RECEIVED, SYNTHETIC
from fedpath.params.mil_train import SpacesParams
from fedpath.types import ArrayDict, Payload, Scalar

#: the params of a distill-then-fit method (all accept ``spaces: adapt``)
SP = TypeVar("SP", bound=SpacesParams)


class DistillFitServer(ServerAlgorithm[SP]):
    """Round 1: ``distill`` then ``fit``; later rounds: ``fit``; no averaging.

    Subclasses set :attr:`method` and :attr:`title` (how errors name the
    method), :attr:`why` (why clients of different embedding spaces are refused
    without ``spaces: adapt``) and implement the hooks below.
    """

    #: the method's name in a protocol error (as its client's ``method``)
    method: ClassVar[str] = "this algorithm"
    #: the method's name in a configuration error about embedding spaces
    title: ClassVar[str] = "this algorithm"
    #: what the method would do wrong with slides of different spaces
    why: ClassVar[str] = "their synthetic slides are not comparable"

    def stages(self, rnd: int) -> Sequence[str]:
        return (DISTILL, FIT) if rnd == 1 else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == DISTILL:
            return round_only(clients, rnd)
        if stage != FIT:
            raise ProtocolError(f"{self.method} has no stage {stage!r}")
        return self.configure_fit(rnd, clients)

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == FIT:
            self.accept_fit(replies)
            return weighted_mean_scalars(replies)
        spaces = check_spaces(replies, self.title, self.why, self.params.adapt)
        return {**self.accept_synthetic(replies, spaces), **guard_scalars(replies)}

    def configure_fit(self, rnd: int, clients: Sequence[str]) -> dict[str, Payload]:
        """What each client receives for ``fit`` in round ``rnd``."""
        raise NotImplementedError

    def accept_synthetic(
        self, replies: Mapping[str, Payload], spaces: Mapping[str, str]
    ) -> dict[str, Scalar]:
        """Keep what the ``distill`` replies carry (``spaces``: each client's
        checked embedding space); return the scalars to log."""
        raise NotImplementedError

    def accept_fit(self, replies: Mapping[str, Payload]) -> None:
        """Keep what the ``fit`` replies carry besides scalars (default: none)."""


class SyntheticPool:
    """The clients' synthetic slides (wire format) with their declared spaces."""

    def __init__(self, client_ids: Sequence[str]) -> None:
        self.ids = list(client_ids)
        self.slides: dict[str, ArrayDict] = {}
        self.spaces: dict[str, str] = {}

    def accept(self, replies: Mapping[str, Payload], spaces: Mapping[str, str]) -> None:
        """Keep every reply's ``synthetic`` group (``spaces``: :func:`check_spaces`)."""
        self.slides = {c: dict(r.group(SYNTHETIC)) for c, r in replies.items()}
        self.spaces = dict(spaces)

    def num_slides(self) -> int:
        return sum(len(p["sizes"]) for p in self.slides.values())

    def others(self, client: str, space: str | None = None) -> ArrayDict:
        """Every other client's slides (of ``space``, if given), stacked."""
        return concat_bags(
            [
                self.slides[c]
                for c in sorted(self.slides)
                if c != client and space in (None, self.spaces.get(c))
            ]
        )

    def others_by_space(self, client: str) -> list[tuple[str, ArrayDict]]:
        """The other clients' slides, one stack per embedding space (sorted)."""
        names = sorted({self.spaces[c] for c in self.slides if c != client})
        return [(s, self.others(client, s)) for s in names]

    def received(self, client: str, adapt: bool, rnd: int) -> Payload:
        """What ``client`` receives: group ``received`` with the others' slides,
        one stack (``adapt`` false) or one per space with its ``space/<i>``."""
        if not adapt:
            return Payload({RECEIVED: self.others(client)}, {"round": rnd})
        arrays, names = spaced_to_arrays(self.others_by_space(client))
        return Payload({RECEIVED: arrays}, {"round": rnd, **names})

    def state(self, adapt: bool) -> Payload:
        """The pool as one group: every client's slides stacked in client order,
        ``owner`` (per slide) the position of its client in the run's client ids
        (no client id inside a key); with ``adapt`` one such stack per space."""
        owners = [
            c for c in self.ids if c in self.slides and len(self.slides[c]["sizes"])
        ]
        if not owners:
            return Payload()
        if not adapt:
            return Payload({POOL: stack_pool(self.slides, owners, self.ids)})
        names = sorted({self.spaces[c] for c in owners})
        parts = [
            (
                s,
                stack_pool(
                    self.slides, [c for c in owners if self.spaces[c] == s], self.ids
                ),
            )
            for s in names
        ]
        arrays, scalars = spaced_to_arrays(parts)
        return Payload({POOL: arrays}, scalars)

    def load_state(self, state: Payload) -> None:
        self.slides, self.spaces = {}, {}
        if POOL not in state.arrays:
            return
        group = state.arrays[POOL]
        if "features" in group:
            self.slides.update(unstack_pool(group, self.ids))
            return
        for space, part in arrays_to_spaced(group, state.scalars):
            got = unstack_pool(part, self.ids)
            self.slides.update(got)
            self.spaces.update(dict.fromkeys(got, space))


class PoolServer(DistillFitServer[SP]):
    """Pool the synthetic slides; send each client the others' in round 1 (per
    space with ``spaces: adapt``; clients keep them); the pool is the state."""

    def __init__(self, params: SP, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.pool = SyntheticPool(ctx.client_ids)

    def configure_fit(self, rnd: int, clients: Sequence[str]) -> dict[str, Payload]:
        if rnd > 1:  # clients kept what they received in round 1
            return round_only(clients, rnd)
        return {c: self.pool.received(c, self.params.adapt, rnd) for c in clients}

    def accept_synthetic(
        self, replies: Mapping[str, Payload], spaces: Mapping[str, str]
    ) -> dict[str, Scalar]:
        self.pool.accept(replies, spaces)
        return {
            "synthetic_slides": self.pool.num_slides(),
            "synthetic_bytes": sum(r.nbytes() for r in replies.values()),
        }

    def state(self) -> Payload:
        """The pool (:meth:`SyntheticPool.state`)."""
        return self.pool.state(self.params.adapt)

    def load_state(self, state: Payload) -> None:
        self.pool.load_state(state)


__all__ = ["DistillFitServer", "PoolServer", "SyntheticPool"]
