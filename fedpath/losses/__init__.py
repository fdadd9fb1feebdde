"""Loss functions of FedStain, FedCCRL/FedAlign, FedAD, MOON and FedProx.

Every loss is a pure, differentiable function of tensors: no modules, no state, no
randomness. Numerically delicate steps use log-sum-exp, ``log_softmax``, ``expm1``
and explicit clamps, so the losses stay finite for large logits, tiny temperatures
and (for the cosine-based losses) all-zero feature vectors.

Shapes follow one convention: a *view* axis, where present, is axis 1, i.e.
``(B, V, D)`` holds ``V`` views of each of ``B`` samples. Contrastive losses that
flatten it stack the views *view-major* (all samples of view 0, then of view 1, ...),
as ``torch.cat(torch.unbind(features, dim=1), dim=0)`` does, so anchor ``v * B + b``
is view ``v`` of sample ``b``.

References
----------
.. [Khosla2020] P. Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020.
.. [FedStain] FedStain, Section III-E, Eq. 3-6 (SupCon representation alignment
   and Jensen-Shannon prediction alignment).
.. [FedCCRL] Wang, Guo, Tang, "FedCCRL", arXiv 2410.11267 (and the FedAlign fork,
   arXiv 2501.15486): supervised contrastive term of the released client code.
.. [FedAD] FedAD, Section 4, Eq. 1-4 (NT-Xent, teacher alignment, orthogonality).
.. [SimCLR] T. Chen et al., "A Simple Framework for Contrastive Learning of Visual
   Representations", ICML 2020.
.. [AugMix] D. Hendrycks et al., "AugMix", ICLR 2020 (Jensen-Shannon consistency).
.. [GCE] Z. Zhang and M. Sabuncu, "Generalized Cross Entropy Loss for Training Deep
   Neural Networks with Noisy Labels", NeurIPS 2018.
.. [MOON] Q. Li, B. He, D. Song, "Model-Contrastive Federated Learning", CVPR 2021.
.. [FedProx] T. Li et al., "Federated Optimization in Heterogeneous Networks",
   MLSys 2020.
"""

from fedpath.losses._common import NORM_EPS
from fedpath.losses.prediction import (
    generalized_cross_entropy,
    js_divergence,
    weighted_cross_entropy,
)
from fedpath.losses.proximal import Proximal, proximal_term, snapshot_parameters
from fedpath.losses.self_supervised import (
    moon_contrastive,
    nt_xent,
    orthogonality_loss,
    teacher_alignment_loss,
)
from fedpath.losses.supervised import fedccrl_contrastive, paired_supcon, supcon_loss

__all__ = [
    "NORM_EPS",
    "Proximal",
    "fedccrl_contrastive",
    "generalized_cross_entropy",
    "js_divergence",
    "moon_contrastive",
    "nt_xent",
    "orthogonality_loss",
    "paired_supcon",
    "proximal_term",
    "snapshot_parameters",
    "supcon_loss",
    "teacher_alignment_loss",
    "weighted_cross_entropy",
]
