r"""Local MIL training with FedHD's curriculum, and evaluation.

FedHD design point 3 (and "loss and training strategy"): a client trains its
own MIL model for 50 epochs on

.. math:: \mathcal L_{local} = \mathcal L_{real} + \mathcal L_{GCE}\cdot
          \mathbb I(t \ge t_0)

with :math:`t_0 = 30`: real slides only until epoch ``t0``, then the other
clients' synthetic slides join under the noise-robust generalised
cross-entropy (:math:`q = 0.7`). One bag per step (batch size 1, as CLAM and
TransMIL), shuffled every epoch; real and synthetic bags are interleaved in
one shuffled stream, so the epoch's loss is the sum of the two terms over its
bags. ``L_real`` is cross-entropy plus the model's ``aux_loss`` (CLAM's
instance loss, ACMIL's branch losses); synthetic bags get GCE on the slide
logits only (their instances are not real patches; ``aux_on_synthetic``
changes that).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedpath.losses import generalized_cross_entropy
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel

EpochCallback = Callable[[int, dict[str, float]], None]


def _check_bags(model: MILModel, bags: Sequence[SlideBag], what: str) -> None:
    for b in bags:
        if b.dim != model.in_dim:
            raise ValueError(
                f"{what} slide {b.slide_id!r} has D={b.dim}, the model expects "
                f"{model.in_dim} (a different embedding space?)"
            )
        if not 0 <= b.label < model.num_classes:
            raise ValueError(
                f"{what} slide {b.slide_id!r} has label {b.label}, the model has "
                f"{model.num_classes} classes"
            )


def train_mil(
    model: MILModel,
    real_bags: Sequence[SlideBag],
    synthetic_bags: Sequence[SlideBag] = (),
    epochs: int = 50,
    t0: int = 30,
    lr: float = 2e-4,
    weight_decay: float = 1e-5,
    loss_synthetic: Literal["gce", "ce"] = "gce",
    q: float = 0.7,
    curriculum: bool = True,
    seed: int = 0,
    on_epoch: EpochCallback | None = None,
    *,
    optimizer: Literal["adam", "adamw"] = "adam",
    aux_on_synthetic: bool = False,
    penalty: Callable[[], Tensor] | None = None,
) -> dict[str, list[float]]:
    """Train ``model`` in place on real bags, then (from epoch ``t0``) also on
    synthetic bags; FedHD's local objective (module docstring).

    Parameters
    ----------
    model : MILModel
        Any registered MIL model; left in eval mode afterwards.
    real_bags, synthetic_bags : sequence of SlideBag
        The client's real slides and the synthetic slides it received.
    epochs, t0 : int
        Epochs (paper 50) and the first epoch (0-based) that uses the
        synthetic bags (paper 30). ``curriculum=False`` uses them from epoch
        0 (the ablation "direct mix").
    lr, weight_decay, optimizer : float, float, {"adam", "adamw"}
        CLAM's Adam(2e-4, weight decay 1e-5) by default.
    loss_synthetic, q : {"gce", "ce"}, float
        Loss on synthetic bags: GCE :math:`(1 - p_y^q)/q` (paper) or CE (the
        ablation).
    seed : int
        Shuffling, dropout and ACMIL's masking draw from a generator forked
        from ``seed``; the caller's global RNG state is restored afterwards.
    on_epoch : callable, optional
        ``on_epoch(epoch, stats)`` after every epoch.
    penalty : callable, optional
        A regulariser added to every bag's loss (FedProx's proximal term);
        its mean per epoch is reported as ``penalty``.

    Returns
    -------
    dict[str, list[float]]
        Per epoch: ``loss`` (mean over all bags of the epoch), ``loss_real``
        (mean CE + aux over real bags), ``loss_synthetic`` (mean over the
        synthetic bags, NaN in epochs without them), ``aux`` (mean aux loss
        over real bags), ``synthetic_bags`` (how many were used).
    """
    if not real_bags:
        raise ValueError("train_mil needs at least one real bag")
    _check_bags(model, real_bags, "real")
    _check_bags(model, synthetic_bags, "synthetic")
    if loss_synthetic not in ("gce", "ce"):
        raise ValueError(
            f"loss_synthetic must be 'gce' or 'ce', got {loss_synthetic!r}"
        )
    opt_cls = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
    opt = opt_cls(model.parameters(), lr=lr, weight_decay=weight_decay)
    device = next(model.parameters()).device
    start = 0 if not curriculum else t0
    history: dict[str, list[float]] = {
        k: []
        for k in (
            "loss", "loss_real", "loss_synthetic", "aux", "synthetic_bags", "penalty"
        )
    }  # fmt: skip
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        model.train()
        for epoch in range(epochs):
            pool: list[tuple[SlideBag, bool]] = [(b, False) for b in real_bags]
            if synthetic_bags and epoch >= start:
                pool += [(b, True) for b in synthetic_bags]
            sums = {"real": 0.0, "syn": 0.0, "aux": 0.0, "pen": 0.0}
            for i in torch.randperm(len(pool)).tolist():
                bag, synthetic = pool[i]
                label = torch.tensor([bag.label], device=device)
                out = model(bag.features.to(device), label)
                if synthetic:
                    loss = (
                        generalized_cross_entropy(out.logits, label, q)
                        if loss_synthetic == "gce"
                        else F.cross_entropy(out.logits, label)
                    )
                    if aux_on_synthetic:
                        loss = loss + out.aux_loss
                    sums["syn"] += float(loss.detach())
                else:
                    loss = F.cross_entropy(out.logits, label) + out.aux_loss
                    sums["real"] += float(loss.detach())
                    sums["aux"] += float(out.aux_loss.detach())
                if penalty is not None:
                    pen = penalty()
                    sums["pen"] += float(pen.detach())
                    loss = loss + pen
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            n_syn = len(pool) - len(real_bags)
            stats = {
                "loss": (sums["real"] + sums["syn"]) / len(pool),
                "loss_real": sums["real"] / len(real_bags),
                "loss_synthetic": sums["syn"] / n_syn if n_syn else math.nan,
                "aux": sums["aux"] / len(real_bags),
                "synthetic_bags": float(n_syn),
                "penalty": sums["pen"] / len(pool),
            }
            for k, v in stats.items():
                history[k].append(v)
            if on_epoch is not None:
                on_epoch(epoch, stats)
    model.eval()
    return history


@torch.no_grad()
def evaluate_mil(
    model: MILModel, bags: Sequence[SlideBag]
) -> tuple[np.ndarray, np.ndarray]:
    """Class probabilities ``(n, C)`` and labels ``(n,)`` of ``bags`` (eval mode).

    Feed them to :func:`fedpath.evaluation.metrics.classification_metrics`.
    The model's train/eval mode is restored afterwards.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    probs: list[Tensor] = [
        torch.softmax(model(b.features.to(device)).logits, dim=1)[0].cpu() for b in bags
    ]
    model.train(was_training)
    labels = np.array([b.label for b in bags], dtype=np.int64)
    if not probs:
        return np.zeros((0, model.num_classes)), labels
    return torch.stack(probs).double().numpy(), labels
