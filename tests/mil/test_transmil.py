"""TransMIL and its Nystrom attention: :mod:`fedpath.mil.transmil`.

(The pseudo-inverse against ``torch.linalg.pinv``, the exact-attention path and
the permutation (in)variance are tested in ``test_models.py``.)
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from fedpath.mil.models import MIL_MODELS
from fedpath.mil.transmil import PPEG, NystromAttention, TransMIL, iterative_pinv
from fedpath.params.mil import TransMILParams

SMALL = TransMILParams(hidden=8, heads=2, landmarks=4, residual_kernel=3, dropout=0.0)


def test_the_pinv_starts_from_the_scaled_transpose_and_inverts() -> None:
    torch.manual_seed(0)
    a = torch.softmax(torch.randn(2, 5, 5, dtype=torch.float64), -1)
    z0 = iterative_pinv(a, iters=0)
    for i in range(2):
        norm1 = a[i].abs().sum(0).max()  # largest column sum
        norm_inf = a[i].abs().sum(1).max()  # largest row sum
        assert torch.allclose(z0[i], a[i].T / (norm1 * norm_inf))
    # one step of Z <- Z (13I - AZ (15I - AZ (7I - AZ))) / 4
    eye = torch.eye(5, dtype=torch.float64)
    az = a @ z0
    step = 0.25 * z0 @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    assert torch.allclose(iterative_pinv(a, iters=1), step)
    inv = iterative_pinv(a, iters=40)
    assert torch.allclose(a @ inv, eye.expand(2, 5, 5), atol=1e-8)


def test_attention_heads_must_divide_the_dimension() -> None:
    with pytest.raises(ValueError, match="dim 10 is not divisible by heads 4"):
        NystromAttention(10, 4, landmarks=8)


@torch.no_grad()
def test_the_landmarks_are_means_of_contiguous_segments() -> None:
    torch.manual_seed(1)
    n, m, h, d = 10, 3, 2, 4
    attn = NystromAttention(
        h * d, h, landmarks=m, pinv_iterations=60, residual_kernel=0
    )
    x = torch.randn(n, h * d)
    out, first = attn(x)
    # independently: segments [0..3], [4..6], [7..9] (i * m // n), exact pinv
    q, k, v = attn.qkv(x).view(n, 3, h, d).permute(1, 2, 0, 3)
    q = q * d**-0.5
    segments = [range(0, 4), range(4, 7), range(7, 10)]
    q_l = torch.stack([q[:, list(s)].mean(1) for s in segments], 1)
    k_l = torch.stack([k[:, list(s)].mean(1) for s in segments], 1)
    k1 = torch.softmax(q @ k_l.transpose(-1, -2), -1)
    k2 = torch.softmax(q_l @ k_l.transpose(-1, -2), -1)
    k3 = torch.softmax(q_l @ k.transpose(-1, -2), -1)
    mix = k1 @ torch.linalg.pinv(k2.double()).float() @ k3  # (h, n, n)
    ref = attn.out((mix @ v).transpose(0, 1).reshape(n, -1))
    assert torch.allclose(out, ref, atol=1e-4)
    assert torch.allclose(first, mix[:, 0], atol=1e-4)


@torch.no_grad()
def test_the_residual_convolution_on_v_is_added() -> None:
    torch.manual_seed(2)
    plain = NystromAttention(8, 2, landmarks=16, residual_kernel=0)
    conv = NystromAttention(8, 2, landmarks=16, residual_kernel=3)
    conv.load_state_dict(plain.state_dict(), strict=False)
    assert conv.residual is not None
    conv.residual.weight.zero_()
    conv.residual.weight[:, 0, 0, 0] = 1.0  # each token gets its predecessor's v
    x = torch.randn(6, 8)
    v = plain.qkv(x).view(6, 3, 2, 4)[:, 2]  # (n, h, d)
    shifted = torch.cat([torch.zeros(1, 2, 4), v[:-1]])  # zero padding at the start
    added = conv.out[0](shifted.reshape(6, 8)) - conv.out[0].bias
    assert torch.allclose(conv(x)[0], plain(x)[0] + added, atol=1e-5)


@torch.no_grad()
def test_ppeg_convolves_the_row_major_grid_and_skips_the_class_token() -> None:
    dim, side = 2, 3
    ppeg = PPEG(dim)
    for c in ppeg.convs:
        assert isinstance(c, nn.Conv2d)
        c.weight.zero_()
        assert c.bias is not None
        c.bias.zero_()
    assert isinstance(ppeg.convs[2], nn.Conv2d)
    ppeg.convs[2].weight[:, 0, 1, 0] = 1.0  # 3x3: add the left neighbour
    x = torch.randn(1 + side * side, dim)
    out = ppeg(x, side)
    assert torch.equal(out[0], x[0])
    for i in range(side * side):
        left = x[1 + i - 1] if i % side else torch.zeros(dim)
        assert torch.allclose(out[1 + i], x[1 + i] * 2 + left - x[1 + i]), i


class FixedAttention(nn.Module):
    """Stands in for the last layer: the class token's attention is given."""

    def __init__(self, first: Tensor) -> None:
        super().__init__()
        self.first = first

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        assert x.shape[0] == self.first.shape[1]  # cls + side * side tokens
        return x, self.first


@torch.no_grad()
def test_padding_duplicates_give_their_attention_back_to_the_patches() -> None:
    model = TransMIL(SMALL, in_dim=5, num_classes=3).eval()
    # 5 patches: a 3 x 3 grid, the last 4 tokens copy patches 0..3
    first = torch.rand(2, 10) + 0.1
    model.layer2 = FixedAttention(first)  # type: ignore[assignment]
    out = model(torch.randn(5, 5))
    p = first.mean(0)[1:]
    expected = torch.stack([p[0] + p[5], p[1] + p[6], p[2] + p[7], p[3] + p[8], p[4]])
    assert out.attention.shape == (1, 5)
    assert torch.allclose(out.attention[0], expected / expected.sum())
    assert out.embedding is not None and out.embedding.shape == (1, 8)
    assert out.logits.shape == (1, 3)
    assert float(out.aux_loss) == 0.0


@torch.no_grad()
def test_a_single_patch_and_a_square_bag_need_no_padding() -> None:
    model = MIL_MODELS.get("transmil")(SMALL, 5, 2).eval()
    assert isinstance(model, TransMIL) and model.ppeg is not None
    for n in (1, 4, 9):
        out = model(torch.randn(1, n, 5))  # a leading batch of one is dropped
        assert out.attention.shape == (1, n)
        assert torch.allclose(out.attention.sum(), torch.tensor(1.0))
    flat = TransMILParams(hidden=8, heads=2, landmarks=4, ppeg=False)
    assert TransMIL(flat, 5, 2).ppeg is None
