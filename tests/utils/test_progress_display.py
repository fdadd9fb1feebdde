"""Which reporter a command gets (fedpath.utils.progress_display), and one long
job's progress outside the runtime."""

from __future__ import annotations

import pytest

from fedpath.errors import ConfigError
from fedpath.utils.progress import PROGRESS_ENV, Reporter, progress_mode
from fedpath.utils.progress_bars import RichReporter
from fedpath.utils.progress_display import job_progress, make_reporter
from fedpath.utils.progress_lines import LineReporter
from tests.utils.progress_helpers import FakeClock, drive, messages


def test_mode_from_env_and_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    # under pytest's capture stderr is not a terminal: lines by default
    assert type(make_reporter(False)) is LineReporter
    assert type(make_reporter(True)) is Reporter
    for value, cls in (
        ("lines", LineReporter),
        ("bars", RichReporter),
        (" Bars ", RichReporter),
        ("none", Reporter),
    ):
        monkeypatch.setenv(PROGRESS_ENV, value)
        rep = make_reporter(False)
        assert type(rep) is cls, value
        rep.close()
    monkeypatch.setenv(PROGRESS_ENV, "lines")
    assert progress_mode(True) == "none"  # --quiet wins over the variable
    monkeypatch.setenv(PROGRESS_ENV, "fancy")
    with pytest.raises(ConfigError, match=PROGRESS_ENV) as err:
        make_reporter(False)
    assert "'fancy'" in str(err.value)
    assert "bars, lines, none" in str(err.value)


def test_quiet_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    with make_reporter(True) as rep:
        drive(rep, FakeClock())
        rep.start_job("encode", "ds", 10)
        rep.advance_job(10)
        rep.log("hello")
    out, err = capfd.readouterr()
    assert out == err == ""


def test_job_progress_helper(capfd: pytest.CaptureFixture[str]) -> None:
    with job_progress("tile", "slides", 3, quiet=False) as job:
        for name in ("a", "b", "c"):
            job.advance(item=name)
    lines = messages(capfd.readouterr().err)
    assert lines[0] == "tile slides: 3 items"
    assert lines[-1].startswith("tile slides: 3/3 done in ")
    assert lines[-1].endswith("(c)")
    with job_progress("tile", "slides", 3, quiet=True) as job:
        job.advance()
    assert capfd.readouterr() == ("", "")
