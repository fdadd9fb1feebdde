"""docs/results/*.csv: the units files behind the verdicts of
docs/reproduction.md. Each reads back whole and is cited by the page, and every
``$ fedpath table|compare docs/results/...`` block on the page prints, run
now, what the page shows: a published table cannot drift from its units
(``benchmarks/refresh_results.py`` rewrites the blocks after units are added)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from fedpath.evaluation.units_file import read_units

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "docs" / "results").glob("*.csv"))
PAGE = ROOT / "docs" / "reproduction.md"


def _script() -> ModuleType:
    """benchmarks/refresh_results.py, whose block pattern this test reads by."""
    path = ROOT / "benchmarks" / "refresh_results.py"
    spec = importlib.util.spec_from_file_location("refresh_results", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFRESH = _script()


def _blocks() -> list[tuple[str, str]]:
    """(command, what the page shows) of each results block."""
    found = REFRESH.BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    return [(command, shown) for _, command, shown, _ in found]


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
    command: str, shown: str
) -> None:
    # the script's runner: from the repository root, exit 0 or SystemExit
    assert REFRESH.printed(command).strip() == shown.strip()


def test_the_refresh_script_rewrites_a_stale_block_and_only_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command, shown = _blocks()[0]
    page = tmp_path / "page.md"
    prose = "Prose the script leaves alone.\n\n```text\n$ ls\nstale\n```\n"
    page.write_text(
        f"{prose}\n```text\n$ {command}\nan old table\n```\n", encoding="utf-8"
    )
    assert REFRESH.main(["--page", str(page), "--check"]) == 1
    assert "1 blocks, stale" in capsys.readouterr().out
    assert REFRESH.main(["--page", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith(prose) and "an old table" not in text
    assert f"$ {command}\n{shown.strip()}\n```" in text
    assert REFRESH.main(["--page", str(page), "--check"]) == 0
    with pytest.raises(SystemExit, match="no `\\$ fedpath table"):
        page.write_text(prose, encoding="utf-8")
        REFRESH.main(["--page", str(page)])
