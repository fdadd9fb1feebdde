"""``fedpath compare`` and ``fedpath table --baseline`` over run directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedpath.cli import main
from fedpath.evaluation.paired import sign_flip_p

SCORES = {  # method -> (target, seed) -> balanced accuracy
    "fedavg": {("h0", 0): 0.60, ("h0", 1): 0.62, ("h1", 0): 0.70, ("h1", 1): 0.66},
    "better": {("h0", 0): 0.70, ("h0", 1): 0.71, ("h1", 0): 0.79, ("h1", 1): 0.77},
    "level": {("h0", 0): 0.61, ("h0", 1): 0.60, ("h1", 0): 0.71, ("h1", 1): 0.65},
}


def _runs(root: Path) -> Path:
    for method, cells in SCORES.items():
        for (target, seed), value in cells.items():
            run = root / "exp" / method / target / f"seed{seed}"
            run.mkdir(parents=True)
            record = {
                "method": method,
                "target": target,
                "seed": seed,
                "evaluation": {"target": {"balanced_accuracy": value, "n": 10}},
            }
            (run / "final.json").write_text(json.dumps(record))
    return root / "exp"


def test_compare_json_matches_an_independent_computation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp.json"
    root = _runs(tmp_path)
    code = main(
        [
            "compare",
            str(root),
            "--baseline",
            "fedavg",
            "--format",
            "json",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = {d["method"]: d for d in json.loads(out.read_text())}
    units = sorted(SCORES["fedavg"])
    d = np.array([100 * (SCORES["better"][u] - SCORES["fedavg"][u]) for u in units])
    assert data["better"]["mean"] == pytest.approx(d.mean())
    assert data["better"]["diffs"] == pytest.approx(list(d))
    assert data["better"]["p_value"] == pytest.approx(sign_flip_p(d))
    assert data["better"]["wins"] == 4 and data["better"]["losses"] == 0
    # four units can never reach p < 0.05 in a sign-flip test (min p = 2/16)
    assert data["better"]["verdict"].startswith("not separated at this power")
    assert data["level"]["ties"] == 0 and data["level"]["wins"] == 2
    assert "fedavg" not in data


def test_compare_markdown_and_table_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _runs(tmp_path)
    assert main(["compare", str(root), "--baseline", "fedavg"]) == 0
    text = capsys.readouterr().out
    assert "| better | +9.75 |" in text
    assert "better vs fedavg (balanced_accuracy, 4 paired units): +9.75 points" in text
    assert (
        main(
            [
                "table",
                str(root),
                "--metric",
                "balanced_accuracy",
                "--baseline",
                "fedavg",
            ]
        )
        == 0
    )
    assert "| level |" in capsys.readouterr().out


def test_compare_on_the_validation_slides_pairs_the_clients_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a recipe is chosen on the sources' validation slides: compare pairs the
    # mean over each run's clients, not the target's score
    root = tmp_path / "exp"
    val = {"a": (0.70, 0.74), "b": (0.60, 0.62)}  # method -> (client 0, client 1)
    for method, (v0, v1) in val.items():
        for seed in (0, 1):
            run = root / method / "h0" / f"seed{seed}"
            run.mkdir(parents=True)
            shift = 0.01 * seed
            clients = {
                "h1/c0": {"balanced_accuracy": v0 + shift, "n": 5},
                "h2/c0": {"balanced_accuracy": v1 + shift, "n": 5},
            }
            ev = {
                "target": {"balanced_accuracy": 0.5},
                "validation": {"metric": "balanced_accuracy", "clients": clients},
            }
            record = {"method": method, "target": "h0", "seed": seed, "evaluation": ev}
            (run / "final.json").write_text(json.dumps(record))
    argv = ["compare", str(root), "--baseline", "b", "--format", "json"]
    assert main([*argv, "--split", "validation"]) == 0
    (a,) = json.loads(capsys.readouterr().out)
    expected = 100 * ((0.70 + 0.74) / 2 - (0.60 + 0.62) / 2)
    assert a["diffs"] == pytest.approx([expected, expected])
    assert main(argv) == 0  # the target: level
    assert json.loads(capsys.readouterr().out)[0]["mean"] == pytest.approx(0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline", "nobody"], "--baseline nobody: baseline 'nobody' has no runs"),
        (["--baseline", "fedavg", "--metric", "auroc"], "--metric: 'auroc' is not"),
    ],
)
def test_compare_errors_name_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    root = _runs(tmp_path)
    assert main(["compare", str(root), *argv]) != 0
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf", "x"])
def test_a_meaningless_effect_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    from fedpath.cli import build_parser

    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(
            ["compare", str(tmp_path), "--baseline", "fedavg", "--effect", value]
        )
    assert err.value.code == 2
    assert "argument --effect: expected a finite number > 0" in capsys.readouterr().err
