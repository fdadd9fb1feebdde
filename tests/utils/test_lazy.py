"""Lazy package exports (fedpath.utils.lazy): a name is imported on first use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fedpath.utils.lazy import lazy_exports


def test_a_name_comes_from_its_module_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lazypkg").mkdir()
    (tmp_path / "lazypkg" / "__init__.py").write_text("")
    (tmp_path / "lazypkg" / "heavy.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    getattr_ = lazy_exports("lazypkg", {"VALUE": "heavy"})
    assert "lazypkg.heavy" not in sys.modules  # nothing imported yet
    assert getattr_("VALUE") == 42
    assert "lazypkg.heavy" in sys.modules
    for name in ("lazypkg.heavy", "lazypkg"):
        monkeypatch.delitem(sys.modules, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    getattr_ = lazy_exports("fedpath.report", {"write_report": "build"})
    with pytest.raises(AttributeError, match="'fedpath.report' has no attribute 'x'"):
        getattr_("x")


def test_the_report_package_exports_lazily() -> None:
    import fedpath.report as report
    from fedpath.report.build import write_report
    from fedpath.report.builder import ReportInfo

    assert report.write_report is write_report and report.ReportInfo is ReportInfo
