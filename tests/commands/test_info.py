"""``fedpath info``: a model file verified and its header printed, nothing scored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from fedpath.cli import main
from fedpath.commands.info import describe, render
from fedpath.ensemble import save_ensemble
from tests.inference.conftest import member

EXPECTED = {
    "metric": "balanced_accuracy",
    "weights": "selected",
    "per_hospital": {"a": 0.66, "b": 0.72},
    "mean": 0.69,
    "min": 0.66,
    "max": 0.72,
    "hospitals": 2,
}


def _consortium_file(tmp_path: Path) -> Path:
    return member(
        tmp_path / "model.fpm",
        0,
        temperature=1.261,
        threshold=0.35,
        target_sensitivity=0.9,
        trained_on=["site_a", "site_b"],
        validation={"metric": "balanced_accuracy", "value": 0.749, "n": 468},
        expected=EXPECTED,
    )


def test_info_prints_what_a_hospital_checks_before_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _consortium_file(tmp_path)
    assert main(["info", str(path)]) == 0
    said = capsys.readouterr().out
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert f"sha256 {sha}" in said
    assert "0.6900 [0.6600, 0.7200] over 2 hospitals" in said
    lines = {ln.split()[0]: ln.split(None, 1)[1] for ln in said.splitlines()[3:]}
    assert lines["threshold"] == "0.35" and lines["temperature"] == "1.261"
    assert lines["trained_on"] == "site_a, site_b"
    assert lines["validation.n"] == "468" and lines["validation.value"] == "0.749"
    assert lines["expected.per_hospital.b"] == "0.72"
    assert lines["class_names"] == "normal, tumour"
    assert "payload_sha256" not in said  # the container's bookkeeping


def test_info_says_how_the_operating_point_held_at_held_out_hospitals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spread = {"per_hospital": {"a": 0.8, "b": 0.9}, "mean": 0.85}
    point = {"target_sensitivity": 0.9, "sensitivity": {**spread, "min": 0.8}}
    expected = {**EXPECTED, "operating_point": point}
    path = member(tmp_path / "m.fpm", 0, expected=expected)
    assert main(["info", str(path)]) == 0
    said = capsys.readouterr().out.splitlines()
    at = next(i for i, ln in enumerate(said) if ln.startswith("expected at a new"))
    assert said[at + 1].startswith("at the operating point (0.9000 sensitivity")
    assert "sensitivity expected 0.8500 [0.8000, n/a]" in said[at + 1]
    rows = [ln.split() for ln in said]
    assert ["expected.operating_point.sensitivity.per_hospital.b", "0.9"] in rows


def test_info_json_is_the_whole_header_with_the_files_sha256(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _consortium_file(tmp_path)
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info["bytes"] == path.stat().st_size and info["expected"] == EXPECTED
    assert info["parameters"] > 0 and info["tensors"] > 0
    assert info["payload_sha256"] and info["format"] == 2


def test_info_lists_an_ensembles_members_and_says_when_no_temperature(
    tmp_path: Path,
) -> None:
    plain = member(tmp_path / "a.fpm", 0)
    text = "\n".join(render(describe(plain)))
    assert "no temperature fitted" in text and "expected at a new site" not in text
    ens = tmp_path / "ens.fpm"
    save_ensemble(ens, [plain, member(tmp_path / "b.fpm", 1)])
    text = "\n".join(render(describe(ens)))
    assert "kind ensemble" in text and "members.2.file" in text
    assert "no temperature fitted" not in text


def test_info_refuses_an_altered_file_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _consortium_file(tmp_path)
    blob = bytearray(path.read_bytes())
    blob[-40] ^= 1  # one bit of the weights
    path.write_bytes(bytes(blob))
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "altered" in err
    assert main(["info", str(tmp_path / "none.fpm")]) == 2
    assert "does not exist" in capsys.readouterr().err
