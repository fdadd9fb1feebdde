"""The fidelity ledgers (docs/fidelity/*.md) stay true to the code.

Each ledger carries a ```` ```yaml fidelity ```` block: the method and, per
parameter, fedpath's ``default`` and the ``paper``'s value. A registered
method's default that drifts from the ledger fails here, and so does a default
that is not the paper's without the ``option`` giving the paper's and ``why``.
Where the paper contradicts itself, the row says so: ``contradiction`` (which
passage says what, and which one the default follows) and ``literal_option``
(the overrides that give the other, literal formula) come together, and the
default is the reading the row names as the paper's. A fedpath reading,
extension or fix beside a paper default is a ``fedpath_option`` with its
``why``. Every option is a list of ``algorithm.params.NAME=VALUE`` overrides
that the method accepts and that changes its parameter. Every
``fedpath/...py::Name`` and ``tests/...py`` reference in a ledger must exist,
so a moved function cannot leave its row pointing nowhere.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedpath.config import ConfigError
from fedpath.registry import ALGORITHMS
from fedpath.schema import resolve_params
from tests.fidelity_helpers import ledger_blocks

ROOT = Path(__file__).resolve().parents[2]
LEDGERS = sorted((ROOT / "docs" / "fidelity").glob("*.md"))
REF = re.compile(r"`((?:fedpath|tests|benchmarks|configs)/[\w/.-]+?)(?:::([\w.]+))?`")
OVERRIDE = re.compile(r"algorithm\.params\.(\w+)=(\S+)")
#: the keys that name an option, each needing its own explanation
OPTIONS = {"option": "why", "fedpath_option": "why", "literal_option": "contradiction"}


def test_there_is_a_ledger_per_paper() -> None:
    assert {p.stem for p in LEDGERS} >= {"fedstain", "fedhd", "fedad"}


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: p.stem)
def test_ledger_defaults_match_the_registered_method(path: Path) -> None:
    blocks = ledger_blocks(path)
    assert blocks, f"{path.name} has no ```yaml fidelity block"
    for block in blocks:
        params_cls = ALGORITHMS.params(block["method"])
        assert params_cls is not None, block["method"]
        defaults = {
            f.name: f.default
            for f in dataclasses.fields(params_cls)
            if f.default is not dataclasses.MISSING
        }
        for name, row in block["params"].items():
            assert name in defaults, f"{block['method']}: no param {name!r}"
            assert defaults[name] == row["default"], (
                f"{block['method']}.{name}: the code's default {defaults[name]!r} "
                f"is not the ledger's {row['default']!r} ({path.name})"
            )
            check_row(f"{block['method']}.{name}", row)


def check_row(where: str, row: dict[str, Any]) -> None:
    """One params row says what the schema asks (module docstring)."""
    assert "source" in row, f"{where}: say where the paper has it"
    if row["default"] != row["paper"]:
        assert row.get("option") and row.get("why"), (
            f"{where}: the default is not the paper's, so the ledger must name "
            "the option that gives the paper's and why"
        )
    if "contradiction" in row or "literal_option" in row:
        assert row.get("contradiction") and row.get("literal_option"), (
            f"{where}: a self-contradictory paper needs both 'contradiction' (which "
            "passage says what, which one the default follows) and "
            "'literal_option' (what gives the other formula)"
        )
        assert row["default"] == row["paper"], (
            f"{where}: the default is the reading the row names as the paper's"
        )
    if "fedpath_option" in row:
        assert row.get("why"), f"{where}: say why fedpath offers its option"


@pytest.mark.parametrize(
    "row",
    [
        {"default": 1, "paper": 2, "source": "Eq. 1"},  # differs, no option
        {"default": "a", "paper": "a", "source": "s", "contradiction": "x"},
        {"default": "a", "paper": "a", "source": "s", "literal_option": "x"},
        {
            "default": "a",
            "paper": "b",
            "source": "s",
            "contradiction": "x",
            "literal_option": "y",
            "option": "o",
            "why": "w",
        },  # not the reading named
        {"default": "a", "paper": "a", "source": "s", "fedpath_option": "x"},
        {"default": "a", "paper": "a"},  # no source
    ],
)
def test_a_row_that_hides_what_the_paper_says_fails(row: dict[str, Any]) -> None:
    with pytest.raises(AssertionError):
        check_row("m.p", row)


def option_rows(path: Path) -> list[tuple[str, str, str, str]]:
    """(method, param, key, option text) of every option a ledger names."""
    out = []
    for block in ledger_blocks(path):
        for name, row in block["params"].items():
            for key in OPTIONS:
                if key in row:
                    out.append((block["method"], name, key, str(row[key])))
    return out


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: p.stem)
def test_ledger_options_are_accepted_and_change_the_parameter(path: Path) -> None:
    """An option the ledger names must be one the method takes: a typo (or a
    value the method's checks refuse alone) would send a reader to an error."""
    for method, name, key, text in option_rows(path):
        where = f"{path.name}: {method}.{name} {key} {text!r}"
        overrides = {k: yaml.safe_load(v) for k, v in OVERRIDE.findall(text)}
        assert overrides, f"{where}: no algorithm.params.NAME=VALUE in it"
        assert name in overrides, f"{where}: does not set {name}"
        params_cls = ALGORITHMS.params(method)
        assert params_cls is not None
        try:
            chosen: Any = resolve_params(params_cls, overrides, "algorithm.params")
        except ConfigError as err:
            pytest.fail(f"{where}: the method refuses it: {err}")
        default: Any = resolve_params(params_cls, {}, "algorithm.params")
        assert getattr(chosen, name) != getattr(default, name), (
            f"{where}: gives the default again"
        )
        row = next(
            b["params"][name] for b in ledger_blocks(path) if b["method"] == method
        )
        assert row.get(OPTIONS[key]), f"{where}: say {OPTIONS[key]!r} beside it"
        if key == "option":  # the option that gives the paper's value
            assert getattr(chosen, name) == row["paper"], (
                f"{where}: does not give the paper's {row['paper']!r}"
            )


def _defines(path: Path, qualname: str) -> bool:
    tree = ast.parse(path.read_text("utf-8"))
    head, _, rest = qualname.partition(".")
    for node in tree.body:
        names = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        if head in names:
            if not rest or not isinstance(node, ast.ClassDef):
                return True
            return any(
                getattr(n, "name", None) == rest.split(".")[0] for n in node.body
            )
    return False


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: p.stem)
def test_ledger_references_exist(path: Path) -> None:
    missing = []
    for rel, name in REF.findall(path.read_text("utf-8")):
        target = ROOT / rel
        if not target.exists():
            missing.append(rel)
        elif name and not _defines(target, name):
            missing.append(f"{rel}::{name}")
    assert not missing, f"{path.name} points at what is not there: {missing}"
