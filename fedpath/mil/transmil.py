"""TransMIL (Shao et al., NeurIPS 2021) with our own Nystrom attention.

TransMIL treats a bag as a sequence: patch features are reduced (``fc``),
padded to a square number of tokens by repeating the first ones, prefixed with
a class token, and passed through two Nystrom-attention layers with a PPEG
(pyramid position encoding: depthwise 7/5/3 convolutions on the 2-D token grid)
in between; the normalised class token is classified.

It is **not** permutation invariant, by design: the square padding duplicates
the *first* tokens, PPEG convolves neighbours on the grid, the Nystrom landmarks
are means of contiguous token segments, and the residual convolution on V runs
along the sequence. With ``ppeg=False, residual_kernel=0``, a square ``N`` and
``N + 1 <= landmarks`` (exact attention) the logits are invariant (tested).
Defaults are CPU-sized (hidden 128, 4 heads, 64 landmarks); the paper uses
512, 8 and 256.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fedpath.mil.models import (
    MIL_MODELS,
    MILModel,
    MILOutput,
    feature_reduction,
)
from fedpath.params.mil import TransMILParams


def iterative_pinv(a: Tensor, iters: int = 6) -> Tensor:
    r"""Moore-Penrose pseudo-inverse of a batch of square matrices, iteratively.

    The Newton-Schulz-type iteration of Razavi et al. (2014) used by
    Nystromformer (Xiong et al., AAAI 2021, Eq. 16):
    :math:`Z \leftarrow \tfrac14 Z(13I - AZ(15I - AZ(7I - AZ)))` from
    :math:`Z_0 = A^\top / (\lVert A\rVert_1 \lVert A\rVert_\infty)`; it
    converges for the row-stochastic softmax kernels it is used on and needs
    only matrix products (no SVD, so it runs on any device and in autograd).
    """
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    col = a.abs().sum(dim=-2).amax(dim=-1, keepdim=True)
    row = a.abs().sum(dim=-1).amax(dim=-1, keepdim=True)
    z = a.transpose(-1, -2) / (col * row).unsqueeze(-1)
    for _ in range(iters):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


class NystromAttention(nn.Module):
    r"""Multi-head self-attention approximated with Nystrom landmarks.

    :math:`\mathrm{softmax}(QK^\top)V \approx \mathrm{softmax}(Q\tilde K^\top)
    \,\mathrm{pinv}(\mathrm{softmax}(\tilde Q\tilde K^\top))\,
    \mathrm{softmax}(\tilde Q K^\top)V` (Xiong et al. 2021, Eq. 14), with
    landmarks :math:`\tilde Q, \tilde K` the means of ``landmarks`` contiguous
    segments of near-equal length (no zero padding, unlike the
    ``nystrom_attention`` package, so no padded keys dilute the softmax). When
    the sequence has at most ``landmarks`` tokens, exact attention is used.
    A depthwise convolution of V along the sequence (kernel ``residual_kernel``,
    0 = off) is added, as in Nystromformer.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        landmarks: int,
        pinv_iterations: int = 6,
        residual_kernel: int = 33,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads, self.dim_head = heads, dim // heads
        self.landmarks, self.pinv_iterations = landmarks, pinv_iterations
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(dropout))
        self.residual = (
            nn.Conv2d(
                heads,
                heads,
                (residual_kernel, 1),
                padding=(residual_kernel // 2, 0),
                groups=heads,
                bias=False,
            )
            if residual_kernel > 0
            else None
        )

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x`` (n, dim) -> output (n, dim) and the first token's attention (h, n)."""
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.dim_head).permute(1, 2, 0, 3)
        q = q * self.dim_head**-0.5
        if n <= self.landmarks:
            attn = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
            out, first = attn @ v, attn[:, 0]
        else:
            m = self.landmarks
            seg = torch.arange(n, device=x.device) * m // n  # contiguous segments
            size = torch.bincount(seg, minlength=m).to(x.dtype).view(1, m, 1)
            q_l = q.new_zeros(self.heads, m, self.dim_head).index_add_(1, seg, q) / size
            k_l = k.new_zeros(self.heads, m, self.dim_head).index_add_(1, seg, k) / size
            k1 = torch.softmax(q @ k_l.transpose(-1, -2), dim=-1)  # (h, n, m)
            k2 = torch.softmax(q_l @ k_l.transpose(-1, -2), dim=-1)  # (h, m, m)
            k3 = torch.softmax(q_l @ k.transpose(-1, -2), dim=-1)  # (h, m, n)
            left = k1 @ iterative_pinv(k2, self.pinv_iterations)
            out = left @ (k3 @ v)
            first = (left[:, :1] @ k3)[:, 0]
        if self.residual is not None:
            out = out + self.residual(v.unsqueeze(0))[0]
        out = out.transpose(0, 1).reshape(n, -1)
        return self.out(out), first


class PPEG(nn.Module):
    """Pyramid position encoding generator: x + DWConv7 + DWConv5 + DWConv3 on the grid.

    The class token (row 0) bypasses the convolutions.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(dim, dim, k, padding=k // 2, groups=dim) for k in (7, 5, 3)
        )

    def forward(self, x: Tensor, side: int) -> Tensor:
        cls, feat = x[:1], x[1:]
        grid = feat.T.reshape(1, -1, side, side)
        grid = grid + sum(conv(grid) for conv in self.convs)
        return torch.cat([cls, grid.flatten(2)[0].T])


class TransLayer(nn.Module):
    """Pre-norm residual Nystrom attention (TransMIL has no feed-forward block)."""

    def __init__(self, p: TransMILParams) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(p.hidden)
        self.attn = NystromAttention(
            p.hidden,
            p.heads,
            p.landmarks,
            p.pinv_iterations,
            p.residual_kernel,
            p.dropout,
        )

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        out, first = self.attn(self.norm(x))
        return x + out, first


class TransMIL(MILModel):
    """TransMIL: fc -> square padding + cls -> layer -> PPEG -> layer -> LN -> cls.

    ``attention`` is the class token's (Nystrom-approximated) attention in the
    last layer, averaged over heads, with the padding duplicates' weights added
    back to the patches they copy, renormalised over the patches: ``(1, N)``.
    No auxiliary loss.
    """

    def __init__(self, p: TransMILParams, in_dim: int, num_classes: int) -> None:
        super().__init__(in_dim, num_classes)
        self.p = p
        self.fc = feature_reduction(in_dim, p.hidden, 0.0)
        self.cls_token = nn.Parameter(torch.randn(1, p.hidden) * 0.02)
        self.layer1 = TransLayer(p)
        self.ppeg = PPEG(p.hidden) if p.ppeg else None
        self.layer2 = TransLayer(p)
        self.norm = nn.LayerNorm(p.hidden)
        self.classifier = nn.Linear(p.hidden, num_classes)

    def forward(self, bag: Tensor, label: Tensor | int | None = None) -> MILOutput:
        h = self.fc(self.check_bag(bag))
        n = h.shape[0]
        side = math.isqrt(n - 1) + 1 if n > 1 else 1  # ceil(sqrt(n))
        pad = torch.arange(side * side - n, device=h.device) % n
        x = torch.cat([self.cls_token, h, h[pad]])
        x, _ = self.layer1(x)
        if self.ppeg is not None:
            x = self.ppeg(x, side)
        x, first = self.layer2(x)
        z = self.norm(x)[:1]
        patch_attn = first.mean(0)[1:]
        attention = patch_attn[:n].index_add(0, pad, patch_attn[n:]).unsqueeze(0)
        # the cls token also attends to itself; report a distribution over patches
        attention = attention / attention.sum().clamp_min(1e-12)
        return MILOutput(self.classifier(z), attention, self.zero(h), z)


@MIL_MODELS.register("transmil", params=TransMILParams)
def transmil(p: TransMILParams, in_dim: int, num_classes: int) -> MILModel:
    """TransMIL: Nystrom-attention transformer with PPEG (Shao et al. 2021)."""
    return TransMIL(p, in_dim, num_classes)
