r"""FedHD: one-shot federated distillation of whole slides (design points 1-3).

Round 1 has two stages and no model parameters cross the network:

1. ``distill``: every client fits a ``components``-component Gaussian mixture to
   each of its real slides and distils it into one synthetic slide of ``tokens``
   embeddings (:func:`fedpath.mil.distill.distill_slides`; ``many_to_one > 0``:
   :func:`~fedpath.mil.distill.compress_slides` instead) and uploads only those,
   with their labels and its declared embedding space. The server checks that
   every client lives in one space (embeddings of different extractors are not
   comparable) and pools the slides; with ``spaces: adapt`` it accepts clients
   of different extractors (``features``, per client) and sends each receiver
   the others' slides grouped by space, and the receiver trains one input
   adapter per foreign space with its model (:mod:`fedpath.mil.adapters`,
   docs/fedhd_heterogeneous.md).
2. ``fit``: each client receives the synthetic slides of every *other* client and
   trains its own MIL model (any registered architecture, chosen per client in
   ``models``) with the curriculum :math:`\mathcal L = \mathcal L_{real} +
   \mathcal L_{GCE}\,\mathbb 1(t \ge t_0)` (:func:`fedpath.tasks.bags.fit_bags`).

Later rounds (if ``train.rounds > 1``) continue local training with the same
synthetic slides. Each client keeps and deploys its own model, so runs use
``evaluation.protocol: local``.

Ablations (paper, Table "ablation") are parameters: ``components: 1`` (one
Gaussian), ``mode: mean`` (FedWSIDD-style mean matching, the baseline),
``many_to_one``, ``curriculum: false`` (direct mix), ``loss_synthetic: ce``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from fedpath.algorithms.base import (
    ProtocolError,
    ServerAlgorithm,
    ServerContext,
    register_algorithm,
    round_only,
    weighted_mean_scalars,
)
from fedpath.algorithms.mil_common import (
    DistillFitClient,
    architecture,
    arrays_to_bags,
    arrays_to_spaced,
    concat_bags,
    declared_spaces,
    embedding_space,
    guard_scalars,
    keep_model,
    own_model,
    real_bags,
    spaced_to_arrays,
    spaces_listing,
    stack_pool,
    train_bags,
    unstack_pool,
)
from fedpath.algorithms.names import DISTILL, FIT, POOL, RECEIVED, SYNTHETIC
from fedpath.config import ConfigError
from fedpath.losses import generalized_cross_entropy
from fedpath.mil.adapters import AdaptedMIL
from fedpath.mil.bags import SlideBag
from fedpath.mil.distill import DistillOptions, compress_slides, distill_slides
from fedpath.mil.models import MILModel
from fedpath.params.algorithms import FedHDParams
from fedpath.types import ArrayDict, ClientState, Payload, Scalar, as_numpy_dict

log = logging.getLogger("fedpath")

#: client state: the input adapters of the foreign spaces (``spaces: adapt``);
#: never sent, never deployed
ADAPTERS = "adapters"


class FedHDClient(DistillFitClient):
    """Distil own slides; train own MIL model on real + others' synthetic slides."""

    params: FedHDParams
    method = "FedHD"

    def synthetic_loss(self, logits: Tensor, label: Tensor) -> Tensor:
        """The noise-robust generalised cross-entropy (1 - p_y^q)/q on the slide
        logits of a synthetic slide (``loss_synthetic: ce``: the ablation)."""
        if self.params.loss_synthetic == "gce":
            return generalized_cross_entropy(logits, label, self.params.q)
        return F.cross_entropy(logits, label)

    def distill(self) -> Payload:
        from fedpath.mil.privacy import guard_tokens

        p, ctx = self.params, self.ctx
        every = real_bags(ctx)
        real = [b for b in every if b.num_patches >= p.min_patches]
        withheld = len(every) - len(real)
        if withheld:
            log.warning(
                "client %s: %d of %d slides have fewer than %d patches "
                "(algorithm.params.min_patches) and are not distilled: too small "
                "for a synthetic slide to hide their patches",
                ctx.client_id,
                withheld,
                len(every),
                p.min_patches,
            )
        seed = ctx.seed_for("distill") % (2**31)
        if not real:
            return self.synthetic_reply([], {}, withheld)
        opts = DistillOptions(
            components=1 if p.mode != "gmm" else p.components,
            covariance=p.covariance,
            tokens=p.tokens,
            iters=p.iters,
            lr=p.distill_lr,
            mode=p.mode,
        )
        if p.many_to_one:  # starts from init "auto" whatever p.init says
            synthetic = compress_slides(real, p.many_to_one, opts, seed=seed)
        else:
            synthetic = distill_slides(
                real, replace(opts, init=p.init), seed=seed, too_few=p.too_few
            )
        synthetic, report = guard_tokens(synthetic, every, p.min_token_distance, seed)
        return self.synthetic_reply(synthetic, report, withheld)

    def received(self, state: ClientState) -> list[SlideBag]:
        """The others' synthetic slides kept in ``state``; with ``spaces: adapt``
        those of a foreign space carry its name (:attr:`SlideBag.space`)."""
        if RECEIVED not in state.arrays:
            return []
        group, prefix = state.arrays[RECEIVED], f"{self.ctx.client_id}-recv"
        if "features" in group:  # one space: the receiver's
            return arrays_to_bags(group, "others", prefix)
        own, _ = embedding_space(self.ctx)
        out: list[SlideBag] = []
        for i, (space, part) in enumerate(arrays_to_spaced(group, state.scalars)):
            for b in arrays_to_bags(part, "others", f"{prefix}{i}"):
                b.space = None if space == own else space
                out.append(b)
        return out

    def adapted(
        self, model: MILModel, others: Sequence[SlideBag], state: ClientState
    ) -> MILModel:
        """``model`` with an input adapter per foreign space of ``others`` (its
        adapters from ``state`` after round 1), or ``model`` itself if none."""
        sources = {b.space: b.dim for b in others if b.space is not None}
        if not sources:
            return model
        torch.manual_seed(self.ctx.seed_for("adapters"))
        net = AdaptedMIL(
            model, sources, self.params.adapter, self.params.adapter_hidden
        )
        if ADAPTERS in state.arrays:
            net.adapters.load_state_dict(
                {k: torch.from_numpy(v) for k, v in state.arrays[ADAPTERS].items()}
            )
        return net

    def fit(self, payload: Payload, state: ClientState) -> Payload:
        p, ctx = self.params, self.ctx
        real = real_bags(ctx)
        if RECEIVED in payload.arrays:  # round 1: keep them for later rounds
            state.arrays[RECEIVED] = payload.arrays[RECEIVED]
            state.scalars.update(
                {k: v for k, v in payload.scalars.items() if k.startswith("space/")}
            )
        others = self.received(state)
        model = own_model(ctx, state, p)
        net = self.adapted(model, others, state)
        epochs = ctx.train.local_epochs
        if p.curriculum and others and p.t0 >= epochs * ctx.train.rounds:
            raise ConfigError(
                f"config key 'algorithm.params.t0': {p.t0} is not below the "
                f"{epochs * ctx.train.rounds} local epochs, so the synthetic slides "
                "would never be used; lower t0 or raise train.local_epochs"
            )
        # the curriculum counts epochs across rounds
        done = int(state.scalars.get("epochs_done", 0))
        scalars = train_bags(
            ctx,
            net,
            real,
            others,
            synthetic_from=max(0, p.t0 - done) if p.curriculum else 0,
            synthetic_loss=self.synthetic_loss,
        )
        state.scalars["epochs_done"] = done + epochs
        keep_model(state, model, architecture(ctx, p.models) or "")
        if isinstance(net, AdaptedMIL):  # the deployed model stays `model` alone
            state.arrays[ADAPTERS] = as_numpy_dict(net.adapters.state_dict())
            scalars["adapted_spaces"] = len(net.sources)
        return Payload({}, {"num_examples": len(real), **scalars})


class FedHDServer(ServerAlgorithm):
    """Pool the synthetic slides; send each client the others'; no averaging."""

    params: FedHDParams

    def __init__(self, params: FedHDParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.pool: dict[str, ArrayDict] = {}
        #: each pooled client's declared embedding space
        self.spaces: dict[str, str] = {}

    def stages(self, rnd: int) -> Sequence[str]:
        return (DISTILL, FIT) if rnd == 1 else (FIT,)

    def configure(
        self, stage: str, rnd: int, clients: Sequence[str]
    ) -> dict[str, Payload]:
        if stage == DISTILL:
            return round_only(clients, rnd)
        if stage != FIT:
            raise ProtocolError(f"FedHD has no stage {stage!r}")
        if rnd > 1:  # clients kept what they received in round 1
            return round_only(clients, rnd)
        if self.params.spaces == "adapt":
            out = {}
            for c in clients:
                arrays, names = spaced_to_arrays(self._others_by_space(c))
                out[c] = Payload({RECEIVED: arrays}, {"round": rnd, **names})
            return out
        return {
            c: Payload({RECEIVED: self._others(c)}, {"round": rnd}) for c in clients
        }

    def _others(self, client: str, space: str | None = None) -> ArrayDict:
        """Every other client's synthetic slides (of ``space``, if given), stacked."""
        return concat_bags(
            [
                self.pool[c]
                for c in sorted(self.pool)
                if c != client and space in (None, self.spaces.get(c))
            ]
        )

    def _others_by_space(self, client: str) -> list[tuple[str, ArrayDict]]:
        """The other clients' slides, one stack per embedding space (sorted)."""
        names = sorted({self.spaces[c] for c in self.pool if c != client})
        return [(s, self._others(client, s)) for s in names]

    def aggregate(
        self, stage: str, rnd: int, replies: Mapping[str, Payload]
    ) -> dict[str, Scalar]:
        if stage == FIT:
            return weighted_mean_scalars(replies)
        spaces = declared_spaces(replies)
        listing = spaces_listing(spaces)
        dims: dict[str, set[int]] = {}
        for s, d in spaces.values():
            dims.setdefault(s, set()).add(d)
        if any(len(d) > 1 for d in dims.values()):
            raise ConfigError(
                "FedHD clients declare one embedding space with different "
                f"dimensions (one name per extractor). Clients: {listing}"
            )
        if len(dims) > 1 and self.params.spaces != "adapt":
            raise ConfigError(
                "FedHD clients declare different embedding spaces; synthetic slides "
                "of different feature extractors are not comparable. Set "
                "algorithm.params.spaces: adapt to train an input adapter per "
                f"foreign space at each receiver. Clients: {listing}"
            )
        self.pool = {c: dict(r.group(SYNTHETIC)) for c, r in replies.items()}
        self.spaces = {c: s for c, (s, _) in spaces.items()}
        n = sum(int(r.scalars["num_slides"]) for r in replies.values())
        nbytes = sum(r.nbytes() for r in replies.values())
        out: dict[str, Scalar] = {"synthetic_slides": n, "synthetic_bytes": nbytes}
        if self.params.spaces == "adapt":
            out["embedding_spaces"] = len(dims)
        return {**out, **guard_scalars(replies)}

    def state(self) -> Payload:
        """The pool as one group: every client's slides stacked in client order,
        ``owner`` (per slide) the position of its client in the run's client ids
        (no client id inside a key); with ``spaces: adapt`` one such stack per
        embedding space (:func:`~fedpath.algorithms.mil_common.spaced_to_arrays`)."""
        ids = self.ctx.client_ids
        owners = [c for c in ids if c in self.pool and len(self.pool[c]["sizes"])]
        if not owners:
            return Payload()
        if self.params.spaces != "adapt":
            return Payload({POOL: stack_pool(self.pool, owners, ids)})
        names = sorted({self.spaces[c] for c in owners})
        arrays, scalars = spaced_to_arrays(
            [
                (
                    s,
                    stack_pool(
                        self.pool, [c for c in owners if self.spaces[c] == s], ids
                    ),
                )
                for s in names
            ]
        )
        return Payload({POOL: arrays}, scalars)

    def load_state(self, state: Payload) -> None:
        self.pool, self.spaces = {}, {}
        if POOL not in state.arrays:
            return
        group = state.arrays[POOL]
        if "features" in group:
            self._unstack(group, "")
            return
        for space, part in arrays_to_spaced(group, state.scalars):
            self._unstack(part, space)

    def _unstack(self, group: ArrayDict, space: str) -> None:
        part = unstack_pool(group, self.ctx.client_ids)
        self.pool.update(part)
        if space:
            self.spaces.update(dict.fromkeys(part, space))


register_algorithm(
    "fedhd",
    FedHDClient,
    FedHDServer,
    FedHDParams,
    "FedHD: one-shot GMM-aligned synthetic slides, own MIL model, curriculum + GCE",
    data="bags",
)
