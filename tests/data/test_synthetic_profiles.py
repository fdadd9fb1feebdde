"""Stain and scanner profiles of the synthetic hospitals (data.synthetic_profiles)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedpath.data.synthetic_profiles import RUIFROK_E, RUIFROK_H
from fedpath.data.synthetic_render import (
    HospitalProfile,
    make_hospital_profiles,
    render_patches,
)

PROFILES = make_hospital_profiles(4)


LABELS = np.arange(64) % 2


def test_profiles() -> None:
    six = make_hospital_profiles(6, seed=3)
    assert [p.name for p in six] == [f"hospital_{i}" for i in range(6)]
    assert make_hospital_profiles(6, seed=3) == six
    assert make_hospital_profiles(4, seed=3) == six[:4]
    # Archetypes are fixed; random extra hospitals follow the seed.
    assert make_hospital_profiles(5, seed=9)[:4] == six[:4]
    assert make_hospital_profiles(5, seed=9)[4] != six[4]
    for p in six:
        assert p.stain_matrix.shape == (2, 3)
        assert np.allclose(np.linalg.norm(p.stain_matrix, axis=1), 1.0)
        assert not p.stain_matrix.flags.writeable
        assert p.h_scale > 0 and p.e_scale > 0
        # Close to the standard vectors: a few degrees of hue shift, not a new dye.
        assert p.stain_matrix[0] @ RUIFROK_H > 0.9
        assert p.stain_matrix[1] @ RUIFROK_E > 0.9
    assert len({hash(p) for p in six}) == 6
    image = render_patches(np.array([1]), six[5], 24)
    assert image.shape == (1, 3, 24, 24)


def test_profile_validation() -> None:
    base = PROFILES[0]
    with pytest.raises(ValueError, match="stain_matrix"):
        dataclasses.replace(base, stain_matrix=np.ones((3, 3)))
    with pytest.raises(ValueError, match="h_scale"):
        dataclasses.replace(base, h_scale=0.0)
    with pytest.raises(ValueError, match="gamma"):
        dataclasses.replace(base, gamma=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="black_point"):
        dataclasses.replace(base, black_point=0.9, white_point=0.5)
    with pytest.raises(TypeError):
        render_patches(LABELS, "hospital_0", 32)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_bad_num_hospitals(bad: object) -> None:
    with pytest.raises(ValueError, match="num_hospitals"):
        make_hospital_profiles(bad)  # type: ignore[arg-type]


def test_profile_is_a_frozen_dataclass() -> None:
    assert dataclasses.is_dataclass(HospitalProfile)
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES[0].h_scale = 2.0  # type: ignore[misc]
