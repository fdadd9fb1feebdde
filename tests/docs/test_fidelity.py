"""The fidelity ledgers (docs/fidelity/*.md) stay true to the code.

Each ledger carries a ```` ```yaml fidelity ```` block: the method and, per
parameter, fedpath's ``default`` and the ``paper``'s value. A registered
method's default that drifts from the ledger fails here, and so does a default
that is not the paper's without the ``option`` giving the paper's and ``why``.
Every ``fedpath/...py::Name`` and ``tests/...py`` reference in a ledger must
exist, so a moved function cannot leave its row pointing nowhere.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedpath.registry import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2]
LEDGERS = sorted((ROOT / "docs" / "fidelity").glob("*.md"))
BLOCK = re.compile(r"```yaml fidelity\n(.*?)```", re.S)
REF = re.compile(r"`((?:fedpath|tests|benchmarks|configs)/[\w/.-]+?)(?:::([\w.]+))?`")


def ledger_blocks(path: Path) -> list[dict[str, Any]]:
    return [yaml.safe_load(b) for b in BLOCK.findall(path.read_text("utf-8"))]


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
            assert "source" in row, (
                f"{block['method']}.{name}: say where the paper has it"
            )
            if row["default"] != row["paper"]:
                assert row.get("option") and row.get("why"), (
                    f"{block['method']}.{name}: the default is not the paper's, so the "
                    "ledger must name the option that gives the paper's and why"
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
