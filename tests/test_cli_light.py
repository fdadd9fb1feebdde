"""The command line answers --help, --version and list without loading PyTorch,
and ``list`` (read from catalog.json) says what the registries hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedpath import catalog
from fedpath.cli import build_parser, main
from fedpath.utils.cli_args import parse_args_overrides_anywhere

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
    for kind, entries in ((k, live[k]) for k in catalog.KINDS):
        header = next(i for i, line in enumerate(out) if line.startswith(kind + " ("))
        block = out[header + 1 : header + 1 + len(entries)]
        assert [line.split()[0] for line in block] == list(entries), kind
    assert {"abmil", "transmil", "clam_sb"} <= set(live["mil"])
    assert main(["list", "mil"]) == 0
    only = capsys.readouterr().out
    assert "abmil" in only and "fedavg" not in only
    assert main(["list", "algorithms", "--live"]) == 0
    assert "fedstain" in capsys.readouterr().out


SUITE = (
    Path(__file__).resolve().parents[1] / "configs/ablations/fedstain_statistics.yaml"
)


def test_overrides_may_come_after_the_options() -> None:
    argv = ["suite", str(SUITE), "seeds=[0]", "--only", "moments,mean_std", "--resume"]
    args = parse_args_overrides_anywhere(
        build_parser(), [*argv, "train.rounds=2", "seeds=[1]"]
    )
    assert args.only == "moments,mean_std" and args.resume
    # in command-line order, so the later seeds=[1] wins when they are applied
    assert args.overrides == ["seeds=[0]", "train.rounds=2", "seeds=[1]"]


def test_a_late_override_reaches_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(Path(__file__).resolve().parents[1] / "configs/synthetic_fedavg.yaml")
    out = f"output_dir={tmp_path}"
    # --status sits between the config and the overrides: both are still applied
    assert main(["run", cfg, "--status", out, "train.rounds=-3"]) == 2
    assert "'train.rounds'" in capsys.readouterr().err
    assert main(["run", cfg, "--status", out, "seeds=[0]"]) == 0
    assert "4 cells: 4 pending" in capsys.readouterr().out  # 4 folds x 1 seed, not 12
    assert not any(tmp_path.iterdir())  # --status runs nothing


@pytest.mark.parametrize(
    "argv",
    [
        ["suite", str(SUITE), "--only", "moments", "--bogus"],  # an unknown option
        ["table", "runs", "--metric", "auroc", "train.rounds=2"],  # no overrides there
        ["suite", str(SUITE), "--only", "moments", "other.yaml"],  # not key=value
    ],
)
def test_words_that_are_not_late_overrides_stay_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert f"unrecognized arguments: {argv[-1]}" in capsys.readouterr().err
