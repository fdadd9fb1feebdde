"""The MIL model contract, its registry and the shared gated-attention block.

Every MIL model maps one bag ``(N, D)`` to a :class:`MILOutput`. Models are
registered in :data:`MIL_MODELS` as ``factory(params, in_dim, num_classes)``
with a frozen params dataclass, so a FedHD client can pick any architecture by
name (the paper's clients mix CLAM, TransMIL and ACMIL, Table 1). The models
themselves live in :mod:`fedpath.mil.models_attention` (ABMIL, CLAM-SB/MB,
ACMIL) and :mod:`fedpath.mil.transmil`.

Training objective of every model, as the MIL algorithms form it:
``CE(logits, y) + aux_loss``; a model puts its own extra losses (CLAM's instance
clustering, ACMIL's sub-predictions and diversity) in ``aux_loss`` when it is in
training mode and given the label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, is_dataclass
from typing import Any

from torch import Tensor, nn

from fedpath.config import resolve_params
from fedpath.params.mil import Dropout  # noqa: F401  (its old home)
from fedpath.registry import MIL_MODELS


@dataclass
class MILOutput:
    """What a MIL model returns for one bag.

    Attributes
    ----------
    logits : Tensor
        ``(1, C)`` slide class scores (a batch of one, ready for cross-entropy).
    attention : Tensor
        ``(K, N)`` attention of ``K`` branches over the ``N`` patches (softmax
        weights; ``K = 1`` for single-branch models). It keeps its graph;
        ``detach()`` it to inspect or store.
    aux_loss : Tensor
        Scalar model-specific loss to add to the bag loss; ``0`` when the model
        has none, is in eval mode, or got no label.
    embedding : Tensor | None
        ``(1, H)`` slide representation fed to the classifier, when it has one.
    """

    logits: Tensor
    attention: Tensor
    aux_loss: Tensor
    embedding: Tensor | None = None


class MILModel(nn.Module):
    """Base class: ``forward(bag (N, D), label=None) -> MILOutput``.

    ``embedding_space`` names the feature extractor whose bags the model takes
    when its client has its own (``algorithm.params.features``); ``None``: the
    dataset's. It is not a weight: the slide-bag task reads it to give the model
    its client's bags (:meth:`fedpath.tasks.bags.BagTask.predict`).
    """

    embedding_space: str | None = None

    def __init__(self, in_dim: int, num_classes: int) -> None:
        super().__init__()
        if in_dim < 1 or num_classes < 2:
            raise ValueError(
                f"need in_dim >= 1 and num_classes >= 2, got {in_dim}, {num_classes}"
            )
        self.in_dim = in_dim
        self.num_classes = num_classes

    def check_bag(self, bag: Tensor) -> Tensor:
        """``(N, D)`` float bag (a leading batch of one is dropped), else ValueError."""
        if bag.ndim == 3 and bag.shape[0] == 1:
            bag = bag[0]
        if bag.ndim != 2 or bag.shape[0] < 1 or bag.shape[1] != self.in_dim:
            raise ValueError(
                f"{type(self).__name__} expects a bag of shape (N >= 1, "
                f"{self.in_dim}), got {tuple(bag.shape)}"
            )
        return bag

    def zero(self, like: Tensor) -> Tensor:
        return like.new_zeros(())

    def forward(self, bag: Tensor, label: Tensor | int | None = None) -> MILOutput:
        raise NotImplementedError

    def __call__(self, bag: Tensor, label: Tensor | int | None = None) -> MILOutput:
        # typed wrapper: nn.Module.__call__ returns Any
        out: MILOutput = super().__call__(bag, label)
        return out


MILFactory = Callable[[Any, int, int], MILModel]


def build_mil_model(
    name: str,
    in_dim: int,
    num_classes: int,
    params: Mapping[str, Any] | Any | None = None,
) -> MILModel:
    """Build registered MIL model ``name``.

    ``params`` is the model's params dataclass, a mapping of its fields (typed
    and validated like a config section), or ``None`` for the defaults.
    """
    schema = MIL_MODELS.params(name)
    if schema is None:
        return MIL_MODELS.get(name)(None, in_dim, num_classes)
    if params is None or isinstance(params, Mapping):
        params = resolve_params(schema, params or {}, f"mil model {name!r} params")
    elif not (is_dataclass(params) and isinstance(params, schema)):
        raise TypeError(
            f"params for mil model {name!r} must be {schema.__name__} or a "
            f"mapping, got {type(params).__name__}"
        )
    return MIL_MODELS.get(name)(params, in_dim, num_classes)


def mil_builder(
    backbone: str, params: Mapping[str, Any], in_dim: int, num_classes: int
) -> Callable[[str | None, int | None], MILModel]:
    """``build(name, dim)``: the configured model (``model.backbone`` with
    ``model.params``) for ``None`` or that name, another registered one by name
    (FedHD clients may each choose their architecture), for bags of ``dim``
    (default ``in_dim``; a client with its own feature extractor)."""

    def build(name: str | None = None, dim: int | None = None) -> MILModel:
        d = in_dim if dim is None else dim
        if name is None or name == backbone:
            return build_mil_model(backbone, d, num_classes, params)
        return build_mil_model(name, d, num_classes)

    return build


def label_index(label: Tensor | int) -> int:
    """The class index of a label given as an int or a 0-d / (1,) tensor."""
    return int(label.reshape(-1)[0]) if isinstance(label, Tensor) else int(label)


class GatedAttention(nn.Module):
    r"""Gated attention logits of Ilse et al. (2018), Eq. 9, with K branches.

    .. math:: a_{k} = w^\top\big(\tanh(V h_k) \odot \sigma(U h_k)\big)

    returns the raw ``(K, N)`` logits (softmax over patches is the caller's,
    so ACMIL can mask logits before it). ``gated=False`` drops the sigmoid gate
    (Ilse's Eq. 8).
    """

    def __init__(
        self,
        dim: int,
        attn_dim: int,
        branches: int = 1,
        dropout: float = 0.0,
        gated: bool = True,
    ) -> None:
        super().__init__()
        self.v = nn.Sequential(nn.Linear(dim, attn_dim), nn.Tanh(), nn.Dropout(dropout))
        self.u = (
            nn.Sequential(nn.Linear(dim, attn_dim), nn.Sigmoid(), nn.Dropout(dropout))
            if gated
            else None
        )
        self.w = nn.Linear(attn_dim, branches)

    def forward(self, h: Tensor) -> Tensor:
        a = self.v(h)
        if self.u is not None:
            a = a * self.u(h)
        return self.w(a).T  # (K, N)


def feature_reduction(
    in_dim: int, hidden: int, dropout: float, bias: bool = True
) -> nn.Sequential:
    """CLAM's first layer (fc 1024 -> 512, ReLU, dropout), for any ``in_dim``."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden, bias=bias), nn.ReLU(), nn.Dropout(dropout)
    )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of all parameters and buffers (what sending the weights would cost)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


__all__ = [
    "MIL_MODELS",
    "GatedAttention",
    "MILModel",
    "MILOutput",
    "build_mil_model",
    "count_parameters",
    "feature_reduction",
    "label_index",
    "parameter_bytes",
]
