"""The package keeps its shape: sizes, layers, no import circles, mirrored tests;
the tests and benchmarks keep to the same size limit.

The figures come from :mod:`tests.archcheck` (``python -m tests.archcheck``
prints them); the first tests check that checker on a small package written
here, so a check that silently found nothing would fail.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests import archcheck


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), "utf-8")


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    long_body = "\n".join(f"    x{i} = {i}" for i in range(85))
    _write(
        tmp_path,
        {
            "fedpath/__init__.py": "",
            "fedpath/a.py": "from fedpath import b\n",
            "fedpath/b.py": "def f():\n    from fedpath.a import g\n",
            "fedpath/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from fedpath import d\n"
            ),
            "fedpath/d.py": "from fedpath import c\n",
            "fedpath/e.py": "# circle-ok: e needs f\nfrom fedpath import f\n",
            "fedpath/f.py": "from fedpath import e\n",
            "fedpath/runtime/__init__.py": "",
            "fedpath/runtime/x.py": "from fedpath.deploy.y import z\n",
            "fedpath/deploy/__init__.py": "",
            "fedpath/deploy/y.py": "z = 1\n",
            "fedpath/long.py": (
                'def long():\n    """Doc\n\n    lines.\n    """\n' + long_body + "\n"
                "def short():\n" + long_body.replace("x", "y", 70) + "\n"
            ),
            "tests/test_a.py": "",
        },
    )
    return tmp_path


def test_checker_finds_function_level_circles(toy: Path) -> None:
    found = archcheck.circles(archcheck.load(toy))
    assert found == [["fedpath.a", "fedpath.b"]]  # not c/d (types only), not e/f


def test_checker_measures_functions_without_docstrings(toy: Path) -> None:
    mods = archcheck.load(toy)
    assert mods["fedpath.long"].long_functions == [("long", 86), ("short", 86)]
    # the docstring's 4 lines are not counted: 1 (def) + 85 body lines
    assert archcheck.MAX_FUNCTION_LINES < 86


def test_checker_finds_layer_violations_and_unmirrored(toy: Path) -> None:
    mods = archcheck.load(toy)
    bad = archcheck.layer_violations(mods, "fedpath.runtime", "fedpath.deploy")
    assert bad == [("fedpath.runtime.x", "fedpath.deploy.y")]
    assert "fedpath.a" not in archcheck.unmirrored(mods, toy)  # no logic
    assert "fedpath.long" in archcheck.unmirrored(mods, toy)


def test_checker_counts_the_lines_of_test_and_benchmark_files(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "fedpath/m.py": "a = 1\n",
            "tests/test_a.py": "a = 1\nb = 2\n",
            "tests/sub/helpers.py": "a = 1\n",
            "benchmarks/bench_x.py": "a = 1\nb = 2\nc = 3\n",
            "benchmarks/notes.md": "a\n",
        },
    )
    assert archcheck.file_lines(tmp_path) == {
        "tests/sub/helpers.py": 1,
        "tests/test_a.py": 2,
        "benchmarks/bench_x.py": 3,
    }


@pytest.fixture(scope="module")
def package() -> dict[str, archcheck.Module]:
    return archcheck.load()


def test_no_module_over_the_size_limit(package: dict[str, archcheck.Module]) -> None:
    big = {m.name: m.lines for m in package.values() if m.lines > 400}
    assert not big, f"split these modules by responsibility (400 lines): {big}"


def test_no_test_or_benchmark_file_over_the_size_limit() -> None:
    big = {path: n for path, n in archcheck.file_lines().items() if n > 400}
    assert not big, f"split these files by responsibility (400 lines): {big}"


def test_no_function_over_the_length_limit(
    package: dict[str, archcheck.Module],
) -> None:
    long = {f"{m.name}.{q}": n for m in package.values() for q, n in m.long_functions}
    assert not long, f"functions over 80 lines, docstring excluded: {long}"


def test_runtime_never_imports_deploy(package: dict[str, archcheck.Module]) -> None:
    bad = archcheck.layer_violations(package, "fedpath.runtime", "fedpath.deploy")
    assert not bad, f"deploy sits above runtime; these imports run backwards: {bad}"


def test_no_import_circle(package: dict[str, archcheck.Module]) -> None:
    found = archcheck.circles(package)
    assert not found, (
        f"import circles (function-level imports count): {found}; break them, or "
        "mark the import with '# circle-ok: <why>'"
    )


def test_every_module_with_logic_has_its_mirrored_tests(
    package: dict[str, archcheck.Module],
) -> None:
    missing = {
        m: str(archcheck.mirror_path(m).relative_to(archcheck.ROOT))
        for m in archcheck.unmirrored(package)
    }
    assert not missing, (
        f"modules without their tests/<package>/test_<module>.py: {missing}"
    )
