"""The AMi-Br table benchmark's command line: overrides after a list option and
unknown names (the benchmark itself needs the data and is not run here)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(
    benchmark_script: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch
) -> ModuleType:
    monkeypatch.chdir(ROOT)
    return benchmark_script("bench_amibr_table")


def test_overrides_after_methods_are_moved_to_the_overrides(bench: ModuleType) -> None:
    args = argparse.Namespace(
        methods=["pooled", "train.rounds=8", "local"],
        folds=["TUPAC16", "seed=1"],
        overrides=["train.lr=0.001"],
    )
    from _common import split_overrides

    split_overrides(args, ("methods", "folds"))
    assert args.methods == ["pooled", "local"]
    assert args.folds == ["TUPAC16"]
    assert args.overrides == ["seed=1", "train.rounds=8", "train.lr=0.001"]


def test_hetero_bench_moves_overrides_after_its_methods(
    benchmark_script: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hetero = benchmark_script("bench_fedhd_hetero")
    seen = {}
    argv = ["bench", "--dataset", "synthetic", "--methods", "desa", "train.rounds=6",
            "histofs", "--out", "x", "train.local_epochs=5"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)

    def load(path: object, overrides: list[str]) -> object:
        seen["overrides"] = overrides
        raise SystemExit("stop")

    monkeypatch.setattr(hetero, "load_config", load)
    monkeypatch.setattr(hetero, "setup_threads", lambda: 1)
    with pytest.raises(SystemExit, match="stop"):
        hetero.main()
    assert seen["overrides"][-2:] == ["train.rounds=6", "train.local_epochs=5"]


def test_unknown_method_names_the_option_and_the_choices(
    bench: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench", "--methods", "fedavg", "fedsatin"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--methods: unknown fedsatin" in err
    assert "fedstain" in err and "pooled" in err and "local" in err


def test_unknown_fold_is_refused(
    bench: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench", "--folds", "MIDOG21_XR"])
    with pytest.raises(SystemExit):
        bench.main()
    assert "--folds: unknown MIDOG21_XR" in capsys.readouterr().err


def test_run_wall_counts_every_round_of_a_resumed_run(
    bench: ModuleType, tmp_path: Path
) -> None:
    import json
    import os

    from _common import run_wall

    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.yaml", "final.json"):
        (run / name).write_text("{}")
    os.utime(run / "config.yaml", (1000.0, 1000.0))
    os.utime(run / "final.json", (1073.0, 1073.0))  # the last attempt: 73 s
    assert run_wall(run) == 73.0  # no records: the file times
    rounds = [
        {
            "kind": "timing",
            "round": r,
            "client_s": 300.0,
            "server_s": 1.0,
            "eval_s": 9.0,
        }
        for r in (1, 2)
    ]
    lines = [json.dumps({"kind": "eval", "round": 1}), *map(json.dumps, rounds)]
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    assert run_wall(run) == 620.0  # both rounds, though resumed in between
    os.utime(run / "final.json", (2000.0, 2000.0))  # one attempt, longer
    assert run_wall(run) == 1000.0


def test_test_time_bench_names_what_matched_nothing(
    benchmark_script: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    bench_tt = benchmark_script("bench_test_time")
    argv = ["bench", str(tmp_path), "--methods", "fedstain", "--seeds", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        bench_tt.main()
    msg = str(exc.value)
    assert str(tmp_path) in msg and "--methods fedstain" in msg and "--seeds 2" in msg


def test_hetero_bench_gives_each_method_only_its_own_params(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    hetero = benchmark_script("bench_fedhd_hetero")
    from fedpath.config import load_config

    base = load_config(ROOT / "configs/fedhd/heterogeneous.yaml")
    over = ["train.rounds=6", "algorithm.params.tokens=200", "algorithm.params.t0=9"]
    desa = hetero.variant("desa", base, over)
    assert desa[-1] == "algorithm.params.tokens=200"  # DESA has tokens, not t0
    assert "spaces" in desa[-2] and "adapt" in desa[-2]
    local = hetero.variant("local", base, over)
    assert not any(o.startswith("algorithm.params.t") for o in local)
    assert "spaces" not in local[-1]  # local training has no spaces option
    assert hetero.variant("fedhd", base, over) == []  # the base config's own


def test_rendered_bench_moves_every_feature_folder_and_pools_in_each_own_space(
    benchmark_script: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    rendered = benchmark_script("bench_fedhd_rendered")
    common = rendered.base_overrides(tmp_path)
    base = rendered.load_config(rendered.CONFIG, common)
    assert base.data.root == str(tmp_path / "lite0")
    roots = {k: v["root"] for k, v in base.algorithm.params["features"].items()}
    assert roots == {
        "hospital_1": str(tmp_path / "lite2"),
        "hospital_2": str(tmp_path / "lite0_s5"),
        "hospital_3": str(tmp_path / "lite2_s5"),
    }
    cfgs = dict(rendered.pooled_own_configs(common, tmp_path / "out"))
    models = base.algorithm.params["models"]
    assert sorted(cfgs) == sorted(models)
    for domain, cfg in cfgs.items():
        assert cfg.algorithm.name == "pooled_mil"
        assert not any(cfg.algorithm.params.values())  # no features, no models
        assert cfg.model.backbone == models[domain]
        assert cfg.data.root == (roots.get(domain) or str(tmp_path / "lite0"))
        assert cfg.output_dir == str(tmp_path / "out" / domain)
    p0 = cfgs["hospital_0"].model.params
    assert (p0["hidden"], p0["attn_dim"]) == (64, 32)  # its architecture's params
    # the spec the benchmark renders is the one the config describes
    assert rendered.SPEC.tumour == (0.04, 0.12) and rendered.SPEC.patches == 48


def test_fedad_claim_roles_keep_training_probe_and_test_hospitals_apart(
    benchmark_script: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    """Each role set of the FedAD claim benchmark: three hospitals train (K = 6
    clients), two others fit the probe, a sixth tests it; every hospital is
    held out once at most, and every method runs the same four role sets."""
    bench = benchmark_script("bench_fedad_claim")
    cfgs = bench.role_configs("fedad", tmp_path, ["seeds=[0]"])
    targets = [c.lodo.targets[0] for c in cfgs]
    assert len(set(targets)) == len(cfgs) == 4
    for cfg in cfgs:
        probe = set(cfg.evaluation.probe_train)
        hospitals = {f"hospital_{i}" for i in range(cfg.data.params["num_hospitals"])}
        sources = hospitals - probe - set(cfg.lodo.targets)
        assert len(probe) == 2 and len(sources) == 3
        assert len(sources) * cfg.partition.clients_per_domain == 6
        assert cfg.algorithm.name == "fedad" and cfg.method == "fedad"
    base = bench.role_configs("fedavg_ssl", tmp_path, [])
    assert [c.lodo.targets for c in base] == [c.lodo.targets for c in cfgs]
    assert [c.evaluation.probe_train for c in base] == [
        c.evaluation.probe_train for c in cfgs
    ]
    with pytest.raises(SystemExit):
        bench.main(["--methods", "fedad_plus", "--out", str(tmp_path)])


def test_fedad_claim_runs_only_the_role_sets_asked_for(
    benchmark_script: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    bench = benchmark_script("bench_fedad_claim")
    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(
        bench,
        "run_experiment",
        lambda cfg, resume: ran.append((cfg.method, cfg.lodo.targets)),
    )
    monkeypatch.setattr(bench, "fedpath", lambda argv: 0)
    argv = [
        "--out",
        str(tmp_path),
        "--roles",
        "2",
        "4",
        "--methods",
        "fedad",
        "seeds=[0]",
    ]
    assert bench.main(argv) == 0
    assert ran == [("fedad", [bench.ROLES[1][0]]), ("fedad", [bench.ROLES[3][0]])]


def test_against_pairs_that_folders_runs_with_each_row(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folds, seeds = ["TUPAC16", "MIDOG21_AperioCS2"], [0, 1, 2]
    scores, other = {}, tmp_path / "zoom_3_soft_tta"
    for i, fold in enumerate(folds):
        for seed in seeds:
            row = {
                "balanced_accuracy": 0.6 + 0.01 * (i + seed),
                "auroc": 0.7,
                "ece": 0.05,
            }
            scores[("local", fold, seed)] = row
            ahead = {**row, "balanced_accuracy": row["balanced_accuracy"] + 0.02}
            run = other / fold / f"seed{seed}"
            run.mkdir(parents=True)
            record = {"evaluation": {"target": ahead}}
            (run / "final.json").write_text(json.dumps(record))
    args = argparse.Namespace(
        against=other, folds=folds, seeds=seeds, methods=["local"],
        select="last", adapted=False,
    )  # fmt: skip
    bench._pair(args, scores)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "(balanced_accuracy, 6 paired" in x)
    assert "zoom_3_soft_tta vs local" in line and "+2.00 points [+2.00, +2.00]" in line
    assert "wins 6-0" in line
    (other / "TUPAC16" / "seed2" / "final.json").unlink()
    with pytest.raises(SystemExit, match="--against .*TUPAC16, seed 2"):
        bench._pair(args, scores)
