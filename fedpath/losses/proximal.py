"""FedProx's proximal term (mu/2)||w - w_global||^2.

See :mod:`fedpath.losses` for the conventions and references.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor


# -------------------------------------------------------------------------- FedProx
def snapshot_parameters(params: Iterable[Tensor]) -> list[Tensor]:
    """Detached copies of ``params``: the anchor :math:`w_g` of
    :func:`proximal_term`, taken when the round's global weights are loaded."""
    return [p.detach().clone() for p in params]


class Proximal(NamedTuple):
    r"""FedProx's penalty :math:`\frac{\mu}{2} d` (added to the loss) and the
    squared distance :math:`d = \lVert w - w_g\rVert^2` it scales (logged)."""

    penalty: Tensor
    distance: Tensor


def proximal_term(
    params: Iterable[Tensor],
    anchor: Sequence[Tensor],
    mu: float,
    *,
    stacked: bool = False,
) -> Proximal:
    r"""FedProx's proximal term [FedProx]_ (Li et al. 2020, Eq. 2).

    .. math::

        h(w; w_g) = \frac{\mu}{2} \lVert w - w_g \rVert_2^2
                  = \frac{\mu}{2} \sum_k \lVert w_k - w_{g,k} \rVert_2^2

    over the parameter tensors :math:`w_k`, with :math:`w_g` the global weights
    received at the start of the round (:func:`snapshot_parameters`). Gradient:
    :math:`\mu (w - w_g)`; the anchor carries none.

    Parameters
    ----------
    params : iterable of Tensor
        The parameters being trained, in the order of ``anchor``.
    anchor : sequence of Tensor
        Their detached values at the start of the round.
    mu : float
        :math:`\mu` (>= 0).
    stacked : bool
        How the per-tensor terms are added: ``False`` one after the other (FedProx
        on images and slide bags), ``True`` as ``torch.stack(terms).sum()``
        (FedProx-SSL). The vectorised sum rounds differently in the last bits;
        each method keeps its own so its logged losses stay bit-identical (the
        gradient is the same either way).

    Returns
    -------
    Proximal
        ``penalty`` :math:`h` and ``distance`` :math:`\lVert w - w_g\rVert^2`.

    Raises
    ------
    ValueError
        If ``params`` and ``anchor`` differ in length.
    """
    terms = [((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True)]
    distance = torch.stack(terms).sum() if stacked else torch.as_tensor(sum(terms))
    return Proximal(0.5 * mu * distance, distance)
