"""The procedural tissue of the synthetic patches (fedpath.data.synthetic_tissue)."""

from __future__ import annotations

import numpy as np
import scipy.ndimage
import scipy.stats

from fedpath.data import synthetic_tissue as st


def test_normal_is_the_inverse_normal_cdf() -> None:
    u = np.array([0.025, 0.5, 0.841344746, 0.0, 1.0])
    z = st._normal(u)
    np.testing.assert_allclose(z[:3], scipy.stats.norm.ppf(u[:3]), rtol=1e-12)
    assert np.isfinite(z).all() and z[3] < -7 and z[4] > 7  # clipped, not infinite


def test_blur_is_a_reflecting_gaussian_over_the_last_two_axes() -> None:
    x = np.random.default_rng(0).random((2, 3, 12, 12)).astype(np.float32)
    assert st.blur(x, 0.0) is x
    expected = scipy.ndimage.gaussian_filter(x, (0, 0, 1.2, 1.2), mode="reflect")
    np.testing.assert_allclose(st.blur(x, 1.2), expected, atol=1e-5)


def test_value_noise_passes_through_the_lattice() -> None:
    grid = np.random.default_rng(1).standard_normal((2, 4, 4)).astype(np.float32)
    field = st._value_noise(grid, 9, 4.0)
    assert field.shape == (2, 9, 9)
    # pixels 0, 4 and 8 lie on lattice points 0, 1 and 2: no interpolation there
    np.testing.assert_allclose(field[:, ::4, ::4], grid[:, :3, :3], rtol=1e-6)


def test_a_patch_does_not_depend_on_its_chunk() -> None:
    means = np.array([0.2, 0.8, 0.5, 0.3])
    whole = st.draw_chunk(means, 0, 24, seed=3, key=1)
    head = st.draw_chunk(means[:2], 0, 24, seed=3, key=1)
    tail = st.draw_chunk(means[2:], 2, 24, seed=3, key=1)
    np.testing.assert_array_equal(whole.scalars[2:], tail.scalars)
    np.testing.assert_array_equal(whole.fine[:2], head.fine)
    c_h, c_e = st.concentrations(whole, 24)
    h_tail, e_tail = st.concentrations(tail, 24)
    assert c_h.shape == c_e.shape == (4, 24, 24)
    np.testing.assert_allclose(c_h[2:], h_tail, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(c_e[2:], e_tail, rtol=1e-6, atol=1e-7)
    assert (c_h >= 0).all() and (c_e >= 0).all()


def test_atypia_adds_haematoxylin() -> None:
    n = 24
    low = st.concentrations(st.draw_chunk(np.full(n, 0.1), 0, 32, 0, 0), 32)[0]
    high = st.concentrations(st.draw_chunk(np.full(n, 0.9), 0, 32, 0, 0), 32)[0]
    assert high.mean() > 1.2 * low.mean()  # more, larger, darker nuclei
