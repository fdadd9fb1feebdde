r"""Input adapters: a client's MIL model reading bags of other embedding spaces.

FedHD with heterogeneous feature extractors (``algorithm.params.spaces: adapt``,
docs/fedhd_heterogeneous.md): every client distils its slides in its *own*
embedding space, and a receiver cannot feed a synthetic slide of another
extractor (another dimension, other coordinates) to its MIL model. It wraps the
model in :class:`AdaptedMIL`: a bag of foreign space ``s`` passes through that
space's adapter :math:`A_s: \mathbb R^{d_s} \to \mathbb R^{d}` token by token
before the model, a bag of the receiver's own space goes straight in:

.. math:: f(x) = g(x) \ \text{(own)}, \qquad f(h) = g(A_s(h)) \ \text{(space s)}

with ``linear`` :math:`A_s = W_s\,\mathrm{LN}(h) + b_s` or ``mlp``
:math:`A_s = W_2\,\mathrm{GELU}(W_1\,\mathrm{LN}(h) + b_1) + b_2`. The
LayerNorm (with its affine part) first removes the per-token scale and offset
of the foreign extractor, so the linear map starts from comparable inputs
whatever the source's feature scale. Adapters and model are trained jointly
by the ordinary local loop (:func:`fedpath.tasks.bags.fit_bags` routes each
bag by its :attr:`~fedpath.mil.bags.SlideBag.space`); only ``model`` is
deployed, so an exported client model is exactly the model of a homogeneous
run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from torch import Tensor, nn

from fedpath.mil.models import MILModel, MILOutput

AdapterKind = Literal["linear", "mlp"]


def space_key(space: str) -> str:
    """A module name for ``space`` (``nn.ModuleDict`` keys may not hold ``.``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", space) or "_"


def make_adapter(
    src_dim: int, dim: int, kind: AdapterKind = "linear", hidden: int = 0
) -> nn.Sequential:
    """LayerNorm + Linear (``linear``) or a one-hidden-layer MLP (``mlp``,
    ``hidden`` units, 0: ``dim``) from ``src_dim`` to ``dim``."""
    if src_dim < 1 or dim < 1:
        raise ValueError(f"adapter dimensions must be >= 1, got {src_dim} -> {dim}")
    if kind == "linear":
        return nn.Sequential(nn.LayerNorm(src_dim), nn.Linear(src_dim, dim))
    if kind == "mlp":
        h = hidden or dim
        return nn.Sequential(
            nn.LayerNorm(src_dim), nn.Linear(src_dim, h), nn.GELU(), nn.Linear(h, dim)
        )
    raise ValueError(f"adapter kind must be 'linear' or 'mlp', got {kind!r}")


class AdaptedMIL(MILModel):
    """``model`` plus one input adapter per foreign space (module docstring).

    ``sources`` maps each foreign space's name to its dimension. ``forward``
    is the model's own-space forward; :meth:`adapt` maps a foreign bag into the
    model's space. Parameters: the model's under ``model.``, the adapters'
    under ``adapters.<space_key>.``.
    """

    def __init__(
        self,
        model: MILModel,
        sources: Mapping[str, int],
        kind: AdapterKind = "linear",
        hidden: int = 0,
    ) -> None:
        super().__init__(model.in_dim, model.num_classes)
        self.model = model
        self.embedding_space = model.embedding_space
        self.sources = dict(sources)
        keys = {space_key(s): s for s in self.sources}
        if len(keys) != len(self.sources):
            raise ValueError(
                f"embedding space names {sorted(self.sources)} collide as module "
                "names; rename one"
            )
        self.adapters = nn.ModuleDict(
            {
                space_key(s): make_adapter(d, model.in_dim, kind, hidden)
                for s, d in sorted(self.sources.items())
            }
        )

    def source_dim(self, space: str) -> int:
        """The dimension of foreign space ``space``; a KeyError names the known."""
        if space not in self.sources:
            raise KeyError(
                f"no input adapter for embedding space {space!r}; adapters: "
                f"{sorted(self.sources)}"
            )
        return self.sources[space]

    def adapt(self, bag: Tensor, space: str) -> Tensor:
        """``bag`` (N, d_space) of foreign ``space`` as (N, D) of the model's."""
        d = self.source_dim(space)
        if bag.ndim != 2 or bag.shape[1] != d:
            raise ValueError(
                f"a bag of space {space!r} must be (N, {d}), got {tuple(bag.shape)}"
            )
        out: Tensor = self.adapters[space_key(space)](bag)
        return out

    def forward(self, bag: Tensor, label: Tensor | int | None = None) -> MILOutput:
        return self.model(bag, label)


__all__ = ["AdaptedMIL", "AdapterKind", "make_adapter", "space_key"]
