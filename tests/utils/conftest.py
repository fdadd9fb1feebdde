"""Progress tests run with the display left to the code: no FEDPATH_PROGRESS or
FEDPATH_QUIET from the environment that runs them."""

from __future__ import annotations

import pytest

from fedpath.utils.progress import PROGRESS_ENV


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    monkeypatch.delenv("FEDPATH_QUIET", raising=False)
