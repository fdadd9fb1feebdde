"""fedpath's ViT encoder (fedpath.models.vit): how blocks are grouped into stages.

Loading published checkpoints is tested in ``test_pretrained.py``.
"""

from __future__ import annotations

import pytest

from fedpath.models.vit import stage_sizes


@pytest.mark.parametrize(
    ("depth", "stages", "sizes"),
    [(12, 4, [3, 3, 3, 3]), (24, 4, [6, 6, 6, 6]), (5, 2, [3, 2]), (7, 3, [3, 2, 2])],
)
def test_stage_sizes_are_even_with_the_remainder_first(
    depth: int, stages: int, sizes: list[int]
) -> None:
    assert stage_sizes(depth, stages) == sizes
    assert sum(sizes) == depth
