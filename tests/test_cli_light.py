"""The command line answers --help, --version and list without loading PyTorch,
and ``list`` (read from catalog.json) says what the registries hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedpath import catalog
from fedpath.cli import main

PROBE = """
import sys
from fedpath.cli import main
try:
    code = main({argv!r})
except SystemExit as e:
    code = e.code
heavy = [m for m in ("torch", "torchvision") if m in sys.modules]
print("HEAVY=" + ",".join(heavy))
sys.exit(code or 0)
"""


def _probe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


LIGHT = [
    ["--help"],
    ["--version"],
    ["list"],
    ["run", "--help"],
    ["amibr", "--help"],
    ["audit", "--help"],
    [
        "check",
        str(Path(__file__).resolve().parents[1] / "configs/synthetic_fedavg.yaml"),
    ],
]


@pytest.mark.parametrize("argv", LIGHT)
def test_light_commands_do_not_import_torch(argv: list[str]) -> None:
    res = _probe(argv)
    assert res.returncode == 0, res.stderr
    assert "HEAVY=\n" in res.stdout, f"{argv} imported {res.stdout.split('HEAVY=')[1]}"


def test_heavy_command_does_import_torch_the_probe_can_fail() -> None:
    # the probe's negative control: a command that builds data must load torch
    res = _probe(["data", "data.params.num_hospitals=2", "data.params.image_size=16"])
    assert res.returncode == 0, res.stderr
    assert "HEAVY=torch" in res.stdout


def test_catalog_json_matches_the_registries() -> None:
    assert catalog.load() == catalog.collect(), (
        "fedpath/catalog.json is stale: run `python -m fedpath.catalog --write`"
    )
    assert catalog.main(["--check"]) == 0


def test_catalog_check_fails_on_a_stale_file(monkeypatch: pytest.MonkeyPatch) -> None:
    live = catalog.collect()
    live["algorithms"] = {
        **live["algorithms"],
        "brand_new": {"doc": "registered since", "params": None},
    }
    monkeypatch.setattr(catalog, "collect", lambda: live)
    assert catalog.main(["--check"]) == 1


def test_list_shows_every_kind_one_line_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    live = catalog.collect()
    for kind, entries in live.items():
        header = next(i for i, line in enumerate(out) if line.startswith(kind + " ("))
        block = out[header + 1 : header + 1 + len(entries)]
        assert [line.split()[0] for line in block] == list(entries), kind
    assert {"abmil", "transmil", "clam_sb"} <= set(live["mil"])
    assert main(["list", "mil"]) == 0
    only = capsys.readouterr().out
    assert "abmil" in only and "fedavg" not in only
    assert main(["list", "algorithms", "--live"]) == 0
    assert "fedstain" in capsys.readouterr().out
