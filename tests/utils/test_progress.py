"""What every progress display shares (fedpath.utils.progress): the display
:func:`progress_mode` picks, the silent reporter, counts and durations."""

from __future__ import annotations

import pytest

from fedpath.errors import ConfigError
from fedpath.utils.progress import PROGRESS_ENV, Reporter, plural, progress_mode, span
from tests.utils.progress_helpers import FakeClock, drive


def test_span() -> None:
    assert span(42.4) == "42s"
    assert span(250) == "4m10s"
    assert span(3720) == "1h02m"
    assert span(-3) == "0s"


def test_plural() -> None:
    assert plural(1, "run") == "1 run"
    assert plural(0, "cell") == "0 cells" and plural(4, "round") == "4 rounds"


def test_progress_mode_from_env_and_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    # under pytest's capture stderr is not a terminal: lines by default
    assert progress_mode(False) == "lines"
    assert progress_mode(True) == "none"
    for value, mode in (("lines", "lines"), (" Bars ", "bars"), ("none", "none")):
        monkeypatch.setenv(PROGRESS_ENV, value)
        assert progress_mode(False) == mode, value
    monkeypatch.setenv(PROGRESS_ENV, "bars")
    assert progress_mode(True) == "none"  # --quiet wins over the variable
    monkeypatch.setenv(PROGRESS_ENV, "fancy")
    with pytest.raises(ConfigError, match=PROGRESS_ENV) as err:
        progress_mode(True)  # a bad value fails even when quiet
    assert "'fancy'" in str(err.value) and "bars, lines, none" in str(err.value)


def test_the_silent_reporter_takes_every_call(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with Reporter() as rep:
        drive(rep, FakeClock(), resumed=True)
        rep.start_job("encode", "ds", 10)
        rep.advance_job(10, item="x")
        rep.log("hello")
    assert capfd.readouterr() == ("", "")
