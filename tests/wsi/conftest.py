"""The generated pyramidal TIFF shared by the slide tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wsi.helpers import he_image, write_slide


# one slide for the session: writing it is the slow part of the slide tests
@pytest.fixture(scope="session")
def slide_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("slides")
    path = root / "slide_a.tif"
    return path, write_slide(path, he_image(3000, 2000, seed=1))
