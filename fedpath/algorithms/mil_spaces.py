"""Clients in different embedding spaces: the pieces the synthetic-slide methods share.

With per-client feature extractors (``algorithm.params.features``) every client
distils or samples its synthetic slides in its *own* embedding space; a method
with ``spaces: adapt`` (:class:`~fedpath.params.mil_train.SpacesParams`: FedHD,
mean matching, DESA, FedDGM-approx) accepts that, sends slides grouped by space
(:func:`~fedpath.algorithms.mil_common.spaced_to_arrays`) and each receiver wraps
its MIL model with one input adapter per foreign space
(:class:`fedpath.mil.adapters.AdaptedMIL`, docs/fedhd_heterogeneous.md).

- server: :func:`check_spaces` (the declared spaces, or a clear error; the
  pool of slides is :class:`fedpath.algorithms.distill_server.SyntheticPool`);
- client: :func:`keep_spaced` / :func:`spaced_bags` (what arrived, kept in the
  client state, as bags tagged with their foreign space), :func:`with_adapters`
  and :func:`keep_adapters` (the adapters live in the client state, never in the
  deployed model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fedpath.algorithms.base import ClientContext
from fedpath.algorithms.mil_common import (
    SPACE_PREFIX,
    arrays_to_bags,
    arrays_to_spaced,
    declared_spaces,
    embedding_space,
    spaces_listing,
)
from fedpath.config import ConfigError
from fedpath.mil.adapters import AdaptedMIL
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel
from fedpath.params.mil_train import SpacesParams
from fedpath.types import ClientState, Payload, Scalar, as_numpy_dict

#: client state: the input adapters of the foreign spaces (``spaces: adapt``);
#: never sent, never deployed
ADAPTERS = "adapters"


def check_spaces(
    replies: Mapping[str, Payload], method: str, why: str, adapt: bool
) -> dict[str, str]:
    """Each client's declared embedding space, or a clear error: one name with
    two dimensions always; different spaces unless ``adapt`` (``why`` says what
    the method would do with them)."""
    spaces = declared_spaces(replies)
    listing = spaces_listing(spaces)
    dims: dict[str, set[int]] = {}
    for s, d in spaces.values():
        dims.setdefault(s, set()).add(d)
    if any(len(d) > 1 for d in dims.values()):
        raise ConfigError(
            f"{method} clients declare one embedding space with different "
            f"dimensions (one name per extractor). Clients: {listing}"
        )
    if len(dims) > 1 and not adapt:
        raise ConfigError(
            f"{method} clients declare different embedding spaces; {why}. Set "
            "algorithm.params.spaces: adapt to train an input adapter per foreign "
            f"space at each receiver. Clients: {listing}"
        )
    return {c: s for c, (s, _) in spaces.items()}


def keep_spaced(
    payload: Payload, state: ClientState, group: str, into: str | None = None
) -> None:
    """Keep ``group`` of ``payload`` (and its ``space/<i>`` names) for later
    rounds, as the state group ``into`` (default: the same name)."""
    if group in payload.arrays:
        state.arrays[into or group] = payload.arrays[group]
        state.scalars.update(
            {k: v for k, v in payload.scalars.items() if k.startswith(SPACE_PREFIX)}
        )


def spaced_bags(
    ctx: ClientContext, state: ClientState, group: str, domain: str, prefix: str
) -> list[SlideBag]:
    """The slides of ``group`` kept in ``state``: one stack in the client's
    space, or one per space, a bag of a foreign space carrying its name
    (:attr:`SlideBag.space`)."""
    if group not in state.arrays:
        return []
    arrays = state.arrays[group]
    if "features" in arrays:  # one space: the receiver's
        return arrays_to_bags(arrays, domain, prefix)
    own, _ = embedding_space(ctx)
    out: list[SlideBag] = []
    for i, (space, part) in enumerate(arrays_to_spaced(arrays, state.scalars)):
        for b in arrays_to_bags(part, domain, f"{prefix}{i}"):
            b.space = None if space == own else space
            out.append(b)
    return out


def with_adapters(
    ctx: ClientContext,
    p: SpacesParams,
    model: MILModel,
    bags: Sequence[SlideBag],
    state: ClientState,
) -> MILModel:
    """``model`` with an input adapter per foreign space of ``bags`` (its
    adapters from ``state`` after round 1), or ``model`` itself if none."""
    sources = {b.space: b.dim for b in bags if b.space is not None}
    if not sources:
        return model
    torch.manual_seed(ctx.seed_for("adapters"))
    net = AdaptedMIL(model, sources, p.adapter, p.adapter_hidden)
    if ADAPTERS in state.arrays:
        net.adapters.load_state_dict(
            {k: torch.from_numpy(v) for k, v in state.arrays[ADAPTERS].items()}
        )
    return net.to(next(model.parameters()).device)


def keep_adapters(state: ClientState, net: MILModel) -> dict[str, Scalar]:
    """Keep ``net``'s adapters in ``state`` (the deployed model stays the wrapped
    one); the scalar ``adapted_spaces`` if it has any."""
    if not isinstance(net, AdaptedMIL):
        return {}
    state.arrays[ADAPTERS] = as_numpy_dict(net.adapters.state_dict())
    return {"adapted_spaces": len(net.sources)}


__all__ = [
    "ADAPTERS",
    "SPACE_PREFIX",
    "check_spaces",
    "keep_adapters",
    "keep_spaced",
    "spaced_bags",
    "with_adapters",
]
