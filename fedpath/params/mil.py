"""The MIL models' params dataclasses (``model.params`` of a slide-bag backbone),
without PyTorch.

Each is re-exported by its model's module (``fedpath.mil.models_attention``,
``.transmil``); see :mod:`fedpath.params` for why they live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fedpath.schema import Check, Checked, Ge, Range, require

#: A dropout rate field of a model's params: 1 would zero every activation.
Dropout = Annotated[float, Range(0, 1, hi_open=True)]


@dataclass(frozen=True)
class ABMILParams(Checked):
    """ABMIL; ``hidden=None`` attends on the raw features (FedWSIDD's ABMIL)."""

    config_section = "model.params"

    hidden: Annotated[int | None, Ge(1)] = 512
    attn_dim: Annotated[int, Ge(1)] = 256
    dropout: Dropout = 0.25
    gated: bool = True


@dataclass(frozen=True)
class CLAMParams(Checked):
    """CLAM (Lu et al. 2021) defaults: B = 8 instances, bag weight 0.7.

    ``k_sample=0`` or ``bag_weight=1`` switch the instance clustering off.
    """

    config_section = "model.params"

    hidden: Annotated[int, Ge(1)] = 512
    attn_dim: Annotated[int, Ge(1)] = 256
    dropout: Dropout = 0.25
    k_sample: Annotated[int, Ge(0)] = 8
    bag_weight: Annotated[float, Range(0, 1, lo_open=True)] = 0.7
    subtyping: bool = False
    gated: bool = True


@dataclass(frozen=True)
class ACMILParams(Checked):
    """ACMIL (Zhang et al. 2024) defaults: 5 branches, STKIM top-10, drop 0.6.

    ``mask_drop < 1`` so that STKIM leaves every branch a patch to attend to.
    """

    config_section = "model.params"

    hidden: Annotated[int, Ge(1)] = 256
    attn_dim: Annotated[int, Ge(1)] = 128
    n_token: Annotated[int, Ge(1)] = 5
    n_masked_patch: Annotated[int, Ge(0)] = 10
    mask_drop: Annotated[float, Range(0, 1, hi_open=True)] = 0.6
    dropout: Dropout = 0.0


def _odd_or_0(k: int) -> bool:
    return k == 0 or (k > 0 and k % 2 == 1)


@dataclass(frozen=True)
class TransMILParams(Checked):
    """TransMIL sizes (CPU defaults; paper: hidden 512, 8 heads, 256 landmarks).

    ``residual_kernel`` is odd (or 0, off): an even kernel's padding would make
    the convolution on V one token longer than the sequence it is added to.
    """

    config_section = "model.params"

    hidden: Annotated[int, Ge(1)] = 128
    heads: Annotated[int, Ge(1)] = 4
    landmarks: Annotated[int, Ge(1)] = 64
    pinv_iterations: Annotated[int, Ge(0)] = 6
    residual_kernel: Annotated[
        int, Check("an odd integer >= 1, or 0 (off)", _odd_or_0)
    ] = 33
    dropout: Dropout = 0.1
    ppeg: bool = True

    def validate(self) -> None:
        require(
            self.hidden % self.heads == 0,
            "heads",
            f"a divisor of hidden ({self.hidden})",
            self.heads,
        )
