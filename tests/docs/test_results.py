"""docs/results/*.csv: the units files behind the verdicts of
docs/reproduction.md. Each reads back whole and is cited by the page, and every
``$ fedpath table|compare docs/results/...`` block on the page prints, run
now, what the page shows: a published table cannot drift from its units."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fedpath.cli import main
from fedpath.evaluation.units_file import read_units

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "docs" / "results").glob("*.csv"))
PAGE = ROOT / "docs" / "reproduction.md"
#: a ```text block that starts with a fedpath command over a units file
BLOCK = re.compile(
    r"```text\n\$ (fedpath (?:table|compare) docs/results/.*?)\n(.*?)```", re.S
)


def _blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def test_the_reproduction_page_keeps_its_units_and_shows_them() -> None:
    assert UNITS, "docs/results/ holds no units file"
    assert _blocks(), "docs/reproduction.md shows no command over its units"


@pytest.mark.parametrize("path", UNITS, ids=[p.name for p in UNITS])
def test_a_units_file_reads_back_whole_and_is_cited(path: Path) -> None:
    by = read_units(path)
    assert ("target", "last") in by
    for rows in by.values():
        metrics = {frozenset(r.metrics) for r in rows}
        assert len(metrics) == 1, f"{path.name}: units with different metrics"
        for r in rows:  # fractions, as the runs recorded them, not percent
            for name in ("accuracy", "balanced_accuracy", "auroc"):
                value = r.metrics.get(name)
                assert value is None or 0.0 <= value <= 1.0, (r, name)
    assert f"results/{path.name}" in PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize("command,shown", _blocks(), ids=lambda x: x[:60])
def test_a_command_over_the_units_prints_what_the_page_shows(
    command: str,
    shown: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(shlex.split(command)[1:]) == 0, command
    printed = capsys.readouterr().out
    assert printed.strip() == shown.strip()
