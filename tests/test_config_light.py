"""Validating a config imports no PyTorch: the registries answer names, ``in`` and
params classes from fedpath/catalog.json until something needs a registered object,
and the params classes live in torch-free modules (:mod:`fedpath.params`)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fedpath.algorithms.fedstain import FedStainParams
from fedpath.cli import main
from fedpath.config import ConfigError, load_config
from fedpath.registry import ALGORITHMS, BACKBONES, MIL_MODELS, Registry
from fedpath.schema import Checked

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(
    p.relative_to(ROOT).as_posix()
    for d in ("configs", "fedpath/configs")
    for p in (ROOT / d).rglob("*.yaml")
)


def _is_suite(path: str) -> bool:
    return "variants" in (ROOT / path).read_text()


CONFIGS = [p for p in SHIPPED if not _is_suite(p)]
SUITES = [p for p in SHIPPED if _is_suite(p)]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )


def _last_json(res: subprocess.CompletedProcess[str]) -> Any:
    """The JSON the probe printed last (it fails the test if the probe failed)."""
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_loading_every_shipped_config_imports_no_torch() -> None:
    assert len(CONFIGS) >= 10 and len(SUITES) >= 5
    code = f"""
import json, sys
from pathlib import Path
from typing import Any
from fedpath.cli import main
from fedpath.config import load_config
from fedpath.runtime.suite import load_suite
for p in {CONFIGS!r}:
    load_config(p)
variants = sum(len(load_suite(Path(p))[1]) for p in {SUITES!r})
codes = [main(["check", {CONFIGS[0]!r}]), main(["check", {SUITES[0]!r}])]
heavy = [m for m in ("torch", "torchvision") if m in sys.modules]
print(json.dumps({{"codes": codes, "variants": variants, "heavy": heavy}}))
"""
    res = _run(code)
    out = _last_json(res)
    assert out["codes"] == [0, 0]
    assert isinstance(out["variants"], int) and out["variants"] > len(SUITES)
    assert out["heavy"] == [], f"validating configs imported {out['heavy']}"
    assert f"{CONFIGS[0]}: valid (" in res.stdout
    assert f"{SUITES[0]}: valid suite (" in res.stdout


def test_importing_a_plugin_does_import_torch_the_probe_can_fail() -> None:
    code = "import json, sys, fedpath.models; print(json.dumps('torch' in sys.modules))"
    assert _last_json(_run(code)) is True


def test_catalog_params_are_the_plugins_classes() -> None:
    # every params class from the catalog (plugins not loaded, no torch), then
    # the same lookups once the plugins are loaded: the very same class objects
    code = """
import json, sys
from fedpath import registry
regs = [registry.DATASETS, registry.BACKBONES, registry.MIL_MODELS, registry.ALGORITHMS]
before = {r.what: {n: r.params(n) for n in r.names()} for r in regs}
light = not any(r._loaded for r in regs) and "torch" not in sys.modules
for r in regs:
    r.entries()  # loads the plugins
same = {
    what: all(reg.params(n) is c is reg.entry(n).params for n, c in classes.items())
    for reg in regs
    for what, classes in [(reg.what, before[reg.what])]
}
names = {r.what: list(before[r.what]) == r.names() for r in regs}
print(json.dumps({"light": light, "same": same, "names": names,
                  "torch": "torch" in sys.modules}))
"""
    out = _last_json(_run(code))
    assert out["light"] is True, "params from the catalog loaded the plugins or torch"
    assert out["torch"] is True  # the plugins were loaded for the second lookup
    assert out["same"] == dict.fromkeys(
        ["dataset", "backbone", "mil model", "algorithm"], True
    )
    assert out["names"] == out["same"]


def test_a_params_class_is_defined_once_in_its_params_module() -> None:
    assert FedStainParams.__module__ == "fedpath.params.algorithms"
    assert ALGORITHMS.params("fedstain") is FedStainParams


@dataclass(frozen=True)
class ToyParams(Checked):
    config_section = "algorithm.params"

    knob: int = 1


def test_entries_registered_at_run_time_come_first_without_loading_plugins() -> None:
    # a plugin that cannot be imported: any lookup that loads plugins fails loudly
    reg: Registry[object] = Registry(
        "algorithm", plugins=("fedpath._no_such_plugin",), catalog_kind="algorithms"
    )
    toy = object()
    reg.register("toy_runtime", params=ToyParams, doc="a toy")(toy)
    assert "toy_runtime" in reg
    assert "toy_runtime" in reg.names() and "fedstain" in reg.names()
    assert reg.params("toy_runtime") is ToyParams
    assert reg.params("fedstain") is FedStainParams  # from the catalog
    assert "no_such_algorithm" not in reg
    assert not reg._loaded
    with pytest.raises(ModuleNotFoundError, match="_no_such_plugin"):
        reg.get("fedavg")  # the registered object itself: the plugins are loaded
    assert reg.get("toy_runtime") is toy


def test_a_run_time_entry_validates_in_a_fresh_process_without_torch() -> None:
    code = """
import json, sys
from dataclasses import dataclass
from fedpath.config import load_config
from fedpath.registry import ALGORITHMS, shipped_catalog
from fedpath.schema import Checked

@dataclass(frozen=True)
class ToyParams(Checked):
    knob: int = 1

ALGORITHMS.register("toy_runtime", params=ToyParams)(object())
cfg = load_config(None, ["algorithm.name=toy_runtime", "algorithm.params.knob=3"])
print(json.dumps({
    "params": cfg.algorithm.params,
    "in_catalog": "toy_runtime" in shipped_catalog()["algorithms"],
    "listed": "toy_runtime" in ALGORITHMS.names(),
    "torch": "torch" in sys.modules,
}))
"""
    out = _last_json(_run(code))
    assert out == {
        "params": {"knob": 3},
        "in_catalog": False,
        "listed": True,
        "torch": False,
    }


def _unknown_name_errors() -> list[str]:
    msgs = []
    for override in ("algorithm.name=nope", "model.backbone=nope", "data.name=nope"):
        try:
            load_config(None, [override])
        except ConfigError as err:
            msgs.append(str(err))
    return msgs


def test_unknown_names_give_the_same_errors_with_and_without_the_plugins() -> None:
    code = """
import json, sys
from fedpath.config import ConfigError, load_config
msgs = []
for override in ("algorithm.name=nope", "model.backbone=nope", "data.name=nope"):
    try:
        load_config(None, [override])
    except ConfigError as err:
        msgs.append(str(err))
print(json.dumps({"msgs": msgs, "torch": "torch" in sys.modules}))
"""
    light = _last_json(_run(code))
    assert light["torch"] is False
    for reg in (ALGORITHMS, BACKBONES, MIL_MODELS):
        reg.entries()  # load the plugins in this process
    loaded = _unknown_name_errors()
    assert light["msgs"] == loaded
    assert loaded[0] == (
        "config key 'algorithm.name': unknown algorithm 'nope'; valid choices: "
        + ", ".join(ALGORITHMS.names())
    )
    assert "valid choices: " in loaded[1] and "(slide bags)" in loaded[1]
    assert loaded[2].startswith("config key 'data.name': unknown dataset 'nope'")


def test_check_a_bad_config_exits_2_naming_the_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", "configs/amibr/lite0.yaml", "train.lr=-1"]) == 2
    err = capsys.readouterr().err
    assert "config key 'train.lr'" in err and "lite0.yaml" in err
    assert (
        main(["check", "configs/ablations/fedad.yaml", "algorithm.params.gamma=-1"])
        == 2
    )
    assert "algorithm.params.gamma" in capsys.readouterr().err
