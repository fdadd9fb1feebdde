from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedpath.config import ConfigError, ExperimentConfig, load_config, parse_override


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


def test_defaults_resolve_every_params_block() -> None:
    cfg = load_config()
    assert cfg.algorithm.name == "fedavg"
    # per-algorithm / per-backbone / per-dataset defaults are filled in
    assert cfg.algorithm.params == {"bn_buffers": "average"}
    assert cfg.model.params["norm"] == "batch"
    assert cfg.data.params["num_hospitals"] == 4


def test_yaml_and_overrides(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\ntrain:\n  rounds: 7\n  lr: 1e-4\nseeds: [1, 2]\n")
    cfg = load_config(
        p, ["train.local_epochs=3", "algorithm.name=fedprox", "algorithm.params.mu=0.5"]
    )
    assert cfg.name == "x"
    assert cfg.train.rounds == 7
    assert cfg.train.lr == pytest.approx(1e-4)  # YAML 1.1 reads 1e-4 as a string
    assert cfg.train.local_epochs == 3
    assert cfg.seeds == [1, 2]
    assert cfg.algorithm.params == {"mu": 0.5, "bn_buffers": "average"}


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(None, ["algorithm.name=fedprox", "lodo.targets=[hospital_1]"])
    p = write(tmp_path, cfg.to_yaml())
    again = load_config(p)
    assert again == cfg
    assert again.hash() == cfg.hash()
    assert load_config(None, ["train.rounds=9"]).hash() != cfg.hash()


def test_hash_leaves_out_where_and_on_how_many_threads_a_run_ran() -> None:
    # a suite resumed with another launcher (which sets runtime.threads) or moved
    # elsewhere is the same experiment; the device is not
    base = load_config(None)
    for over in ("output_dir=/else", "runtime.threads=3", "runtime.feature_cache=/c"):
        assert load_config(None, [over]).hash() == base.hash(), over
    assert load_config(None, ["runtime.device=cuda"]).hash() != base.hash()
    assert load_config(None, ["runtime.precision=bf16"]).hash() != base.hash()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "train.lrr=1",
            r"unknown config key 'train.lrr'; valid keys under 'train': rounds",
        ),
        ("bogus=1", r"unknown config key 'bogus'"),
        (
            "train.optimizer=rmsprop",
            r"'train.optimizer': expected one of 'adam', 'adamw', 'sgd'",
        ),
        ("partition.alpha=0", r"'partition.alpha': expected a number > 0"),
        ("partition.alpha=-1", r"'partition.alpha'"),
        (
            "partition.clients_per_domain=0",
            r"'partition.clients_per_domain': expected an integer >= 1",
        ),
        ("train.rounds=two", r"'train.rounds': expected an integer"),
        ("train.rounds=1.5", r"'train.rounds': expected an integer"),
        ("runtime.checkpoint=maybe", r"'runtime.checkpoint': expected true or false"),
        (
            "algorithm.name=fedmagic",
            r"unknown algorithm 'fedmagic'; valid choices: .*fedavg, .*fedstain",
        ),
        (
            "data.name=imagenet",
            r"unknown dataset 'imagenet'; valid choices: .*synthetic",
        ),
        (
            "model.backbone=vgg",
            r"'model.backbone': unknown backbone 'vgg'; valid choices: .*resnet18",
        ),
        ("algorithm.params.lr=1", r"unknown config key 'algorithm.params.lr'"),
        (
            "lodo.targets=some",
            r"'lodo.targets': expected one of 'all', 'none' or a list",
        ),
        ("seeds=[]", r"'seeds': expected a non-empty list"),
        ("seeds=[1,1]", r"'seeds': expected a non-empty list of distinct integers"),
        ("seeds=[0,-1]", r"'seeds': expected .*integers >= 0 .*, got \[0, -1\]"),
        (
            "train.schedule=linear",
            r"'train.lr_end': expected a number when train.schedule is 'linear'",
        ),
        (
            "data.params.image_size=8",
            r"'data.params.image_size': expected an integer in \[16, 512\]",
        ),
    ],
)
def test_bad_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_fedprox_mu_validated() -> None:
    with pytest.raises(
        ConfigError, match="'algorithm.params.mu': expected a number >= 0"
    ):
        load_config(None, ["algorithm.name=fedprox", "algorithm.params.mu=-1"])


def test_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = write(tmp_path, "train: [1, 2\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(bad)
    lst = write(tmp_path, "- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        load_config(lst)
    wrong = write(tmp_path, "train: 3\n")
    with pytest.raises(ConfigError, match=r"'train': expected a mapping.*cfg.yaml"):
        load_config(wrong)


def test_override_syntax(tmp_path: Path) -> None:
    assert parse_override("a.b=[1, 2]") == ("a.b", [1, 2])
    assert parse_override("x=null") == ("x", None)
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_override("train.lr")
    with pytest.raises(ConfigError, match="'name' is not a section"):
        load_config(write(tmp_path, "name: x\n"), ["name.sub=1"])
    with pytest.raises(ConfigError, match="'name': expected a string"):
        load_config(None, ["name.sub=1"])
    for key in ("train..lr", ".lr", "train."):
        with pytest.raises(ConfigError, match=f"the key '{key}' has an empty part"):
            parse_override(f"{key}=1")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["data.name=manifest", "data.params={}", "data.params.classes=[a,b,a]"],
            r"'data.params.classes': 'a' listed twice; expected distinct names",
        ),
        (
            ["data.name=folder", "data.params={}", "data.params.domains=[x,x]"],
            r"'data.params.domains': 'x' listed twice",
        ),
        (
            ["data.name=clam_bags", "data.params={}", "data.params.classes=[n,n]"],
            r"'data.params.classes': 'n' listed twice",
        ),
        (
            ["lodo.targets=[hospital_1,hospital_1]"],
            r"'lodo.targets': 'hospital_1' listed twice",
        ),
        (
            ["lodo.sources=[hospital_1,hospital_1]"],
            r"'lodo.sources': 'hospital_1' listed twice",
        ),
    ],
)
def test_a_name_listed_twice_is_named(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
    # the same lists with distinct names load
    fixed = [o.replace(",a]", "]").replace("[x,x]", "[x]") for o in overrides]
    fixed = [o.replace("[n,n]", "[n]").replace("hospital_1,", "") for o in fixed]
    load_config(None, fixed)


def test_saved_yaml_is_plain(tmp_path: Path) -> None:
    text = ExperimentConfig().to_yaml()
    data = yaml.safe_load(text)
    assert data["partition"]["alpha"] == 0.5
    assert set(data) == {
        "name",
        "label",
        "output_dir",
        "seeds",
        "data",
        "partition",
        "lodo",
        "model",
        "algorithm",
        "train",
        "evaluation",
        "runtime",
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["data.params.num_hospitals=0"],
            r"'data.params.num_hospitals': expected an integer >= 1, got 0",
        ),
        (
            ["data.params.samples_per_hospital=1"],
            r"'data.params.samples_per_hospital': expected an integer >= 2, got 1",
        ),
        (
            ["data.params.image_size=513"],
            r"'data.params.image_size': expected an integer in \[16, 512\], got 513",
        ),
        (
            ["data.params.slides_per_hospital=0"],
            r"'data.params.slides_per_hospital': expected an integer >= 1",
        ),
        (
            ["data.params.test_fraction=1"],
            r"'data.params.test_fraction': expected a number in \[0, 1\), got 1.0",
        ),
        (
            ["data.params.tumour_fraction=0"],
            r"'data.params.tumour_fraction': expected a number in \(0, 1\), got 0.0",
        ),
        (
            ["data.name=synthetic_bags", "data.params.slides_per_hospital=3"],
            r"'data.params.slides_per_hospital': expected an integer >= 4, got 3",
        ),
        (
            ["data.name=synthetic_bags", "data.params.rare_fraction=1"],
            r"'data.params.rare_fraction': expected a number in \(0, 1\)",
        ),
        (
            ["data.name=synthetic_bags", "data.params.min_patches=500"],
            r"'data.params.min_patches': expected 1 <= min_patches <= max_patches, "
            r"got \(500, 400\)",
        ),
        (
            ["data.name=clam_bags", "data.params.prefer=npy"],
            r"'data.params.prefer': expected 'h5' or 'pt', got 'npy'",
        ),
    ],
)
def test_bad_dataset_params_name_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_dataset_params_name_the_key_when_built_in_code() -> None:
    from fedpath.data.bags import SyntheticBagsParams
    from fedpath.data.synthetic import SyntheticParams

    with pytest.raises(ConfigError, match=r"'data.params.image_size': .* got 8"):
        SyntheticParams(image_size=8)
    with pytest.raises(ConfigError, match=r"'data.params.dim': expected an integer"):
        SyntheticBagsParams(dim=1)
    edge = SyntheticParams(num_hospitals=1, samples_per_hospital=2, image_size=512)
    assert edge.test_fraction == 0.25  # the bounds themselves are valid


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["partition.validation=0.5"],
            r"'partition.validation': expected a number in \[0, 0.5\), got 0.5",
        ),
        (
            ["partition.validation=-0.1"],
            r"'partition.validation': expected a number in \[0, 0.5\)",
        ),
        (
            ["runtime.export=selected"],
            r"'runtime.export': expected not 'selected' unless partition.validation "
            r"> 0",
        ),
        (
            ["runtime.export=best"],
            r"'runtime.export': expected one of 'last', 'selected', 'averaged'",
        ),
        (
            ["runtime.export=averaged"],
            r"'runtime.export': expected not 'averaged' unless evaluation.swa_from > 0",
        ),
        (
            ["train.rounds=3", "evaluation.swa_from=4"],
            r"'evaluation.swa_from': expected a round in 1..train.rounds \(3\), or 0",
        ),
        (
            ["evaluation.swa_from=-1"],
            r"'evaluation.swa_from': expected",
        ),
        (
            ["evaluation.swa_from=1", "evaluation.protocol=linear_probe"],
            r"'evaluation.swa_from': expected 0 unless evaluation.protocol is "
            r"'classifier'",
        ),
        (
            ["evaluation.target_sensitivity=0.9"],
            r"'evaluation.target_sensitivity': expected null unless "
            r"partition.validation > 0",
        ),
        (
            ["partition.validation=0.2", "evaluation.target_sensitivity=1.5"],
            r"'evaluation.target_sensitivity': expected a number in \(0, 1\] or null",
        ),
        (
            ["partition.validation=0.2", "evaluation.select_metric=ece"],
            r"'evaluation.select_metric': expected one of 'accuracy', "
            r"'balanced_accuracy'",
        ),
        (
            ["partition.validation=0.2", "evaluation.protocol=linear_probe"],
            r"'partition.validation': expected 0 unless evaluation.protocol is "
            r"'classifier'",
        ),
    ],
)
def test_selection_keys_name_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_selection_keys_default_off() -> None:
    cfg = load_config()
    assert cfg.partition.validation == 0.0
    assert cfg.evaluation.select_metric == "balanced_accuracy"
    assert cfg.evaluation.target_sensitivity is None
    assert cfg.runtime.export == "last"
    on = load_config(
        None,
        [
            "partition.validation=0.25",
            "evaluation.target_sensitivity=0.9",
            "runtime.export=selected",
        ],
    )
    assert on.partition.validation == 0.25 and on.runtime.export == "selected"


PROBE = ["algorithm.name=fedad", "evaluation.protocol=linear_probe"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["evaluation.probe_train=[hospital_0]"],
            r"'evaluation.probe_train': expected \[\] unless evaluation.protocol "
            r"is 'linear_probe'",
        ),
        (  # named before the rule that a 'none' plan is judged locally
            [*PROBE, "lodo.targets=none", "evaluation.probe_train=[hospital_0]"],
            r"'evaluation.probe_train': expected \[\] when lodo.targets is 'none'",
        ),
        (
            [
                "evaluation.protocol=local",
                "lodo.targets=none",
                "evaluation.probe_train=[hospital_0]",
            ],
            r"'evaluation.probe_train': expected \[\] unless evaluation.protocol",
        ),
        (
            [*PROBE, "evaluation.probe_train=[hospital_0,hospital_0]"],
            r"'evaluation.probe_train': 'hospital_0' listed twice",
        ),
    ],
)
def test_probe_train_rules_name_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_probe_train_defaults_to_the_targets_own_split() -> None:
    assert load_config(None, PROBE).evaluation.probe_train == []
    cfg = load_config(None, [*PROBE, "evaluation.probe_train=[hospital_0]"])
    assert cfg.evaluation.probe_train == ["hospital_0"]
