"""The repository as a user receives it: no path of the development machine in a
user-facing file, the documentation builds without a warning, the README stays
short and keeps its two commands."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_FACING = ("README.md", "docs", "configs", "benchmarks", "fedpath", "mkdocs.yml")
TEXT = {".md", ".yaml", ".yml", ".py", ".txt", ".cff", ".toml", ".json", ""}
#: absolute paths that only exist on some machine (placeholders such as
#: /path/to/amibr or /data/... are fine)
MACHINE = re.compile(r"(?<![\w.])/(?:work|home|Users|opt/pypi|root)/[\w.-]")
RELATIVE = re.compile(r"(?<![\w/.])((?:\.\./)+)[\w.-]")


def _files() -> list[Path]:
    """Tracked and not-ignored untracked files under the user-facing paths."""
    try:
        out = subprocess.run(
            [
                "git",
                "ls-files",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                *USER_FACING,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        files = [ROOT / f for f in out]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [p for u in USER_FACING for p in (ROOT / u).rglob("*")]
    return [f for f in files if f.is_file() and f.suffix in TEXT]


def escapes(path: Path, text: str) -> list[str]:
    """Paths in ``text`` that name something outside the repository.

    A Markdown link's target and a suite's ``base:`` are relative to their file
    (``docs/data/a.md`` may link ``../index.md``); any other ``../`` is read as a
    command run from the checkout, so it leaves the repository.
    """
    bad = [m.group(0) for m in MACHINE.finditer(text)]
    for m in RELATIVE.finditer(text):
        ups = m.group(1).count("../")
        before = text[max(0, m.start() - 6) : m.start()]
        if before.endswith("](") or before == "base: ":
            depth = len(path.parent.relative_to(ROOT).parts)
            if depth - ups >= 0:
                continue
        bad.append(m.group(0))
    return bad


def test_the_path_check_can_fail() -> None:
    docs = ROOT / "docs" / "x.md"
    assert escapes(docs, "data: ../shared/data/amibr") == ["../s"]
    assert escapes(ROOT / "README.md", "see ../papers/a.txt") == ["../p"]
    assert escapes(docs, "root: /work/shared/data") == ["/work/s"]
    assert escapes(docs, "[readme](../README.md), data.root=/path/to/amibr") == []
    assert escapes(ROOT / "docs" / "data" / "a.md", "[x](../index.md)") == []
    assert escapes(docs, "[x](../../papers/a.md)") == ["../../p"]
    assert escapes(ROOT / "configs" / "a" / "s.yaml", "base: ../b.yaml") == []


def test_no_user_facing_file_names_a_path_outside_the_repository() -> None:
    files = _files()
    assert len(files) > 50, "the file listing found too little"
    found = {
        str(f.relative_to(ROOT)): hits
        for f in files
        if (hits := escapes(f, f.read_text(encoding="utf-8", errors="replace")))
    }
    assert not found, f"paths outside the repository: {found}"


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) < 12_000, f"README is {len(text.encode())} bytes"
    assert "make demo" in text and "make test" in text
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: install\n\t\$\(BIN\)/fedpath demo$", makefile, re.M)
    assert re.search(r"^test: lint typecheck unit$", makefile, re.M)


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is not installed (pip install -e '.[dev]')")
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    res = subprocess.run(
        [
            str(Path(sys.executable).parent / "mkdocs"),
            "build",
            "--strict",
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    warnings = [ln for ln in res.stderr.splitlines() if "WARNING" in ln]
    assert res.returncode == 0 and not warnings, res.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()


def test_the_benchmark_constraints_pin_every_package_and_the_makefile_s_torch() -> None:
    lines = (ROOT / "benchmarks" / "constraints.txt").read_text().splitlines()
    pins = dict(
        line.split("==", 1) for line in lines if line and not line.startswith("#")
    )
    assert all(pins.values()) and len(pins) == sum(
        1 for line in lines if line and not line.startswith("#")
    )
    assert "fedpath" not in pins  # fedpath itself is the checkout, not a pin
    make = (ROOT / "Makefile").read_text()
    for name in ("torch", "torchvision"):
        assert f'"{name}=={pins[name]}"' in make, name
