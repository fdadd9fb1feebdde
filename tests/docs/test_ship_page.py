"""docs/ship.md: the synthetic commands of "Train and ship a model" run as
written (from a copy of the repository's configs), and what they print is what
the page says they print."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from fedpath.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "ship.md"


def synthetic_commands() -> list[str]:
    """The commands of the page's first ``bash`` block (its synthetic example)."""
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(r"## On the synthetic hospitals.*?```bash\n(.*?)```", text, re.S)
    assert block is not None, "docs/ship.md lost its synthetic example"
    return [
        line
        for line in block.group(1).splitlines()
        if line.strip() and not line.startswith("#")
    ]


@pytest.mark.slow
def test_the_pages_synthetic_commands_run_as_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    commands = synthetic_commands()
    assert [c.split()[:2] for c in commands] == [
        ["fedpath", "run"],
        ["fedpath", "run"],
        ["fedpath", "table"],
        ["fedpath", "table"],
        ["fedpath", "evaluate"],
    ]
    for command in commands:
        assert main(shlex.split(command)[1:]) == 0, command
    out = " ".join(capsys.readouterr().out.split())
    assert "| fedavg | **" in out and "consortium" in out
    assert re.search(
        r"balanced_accuracy measured here \d\.\d{4}; expected at a new site from "
        r"leave-one-hospital-out: \d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\] over 4 hospitals",
        out,
    )
    # the page's second line: the leave-one-out runs chose an operating point
    assert re.search(
        r"at the operating point \(0\.9000 sensitivity on validation\): sensitivity "
        r"measured here \d\.\d{4}, expected \d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\]",
        out,
    )
    model = tmp_path / "runs/synthetic_consortium/fedavg/none/seed0/model.fpm"
    assert model.is_file()  # the path the page names
