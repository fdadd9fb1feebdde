"""The report in a real browser (fedpath.report.browser): it opens without
errors, every image loads, and the table cells the browser sees equal
final.json's."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.report import write_report
from fedpath.report.browser import check_page, find_chromium
from tests.report_helpers import expected_means


def test_report_opens_in_chromium(
    suite_dir: Path, other_dirs: list[Path], tmp_path: Path
) -> None:
    if find_chromium() is None:  # `make test` installs it where it can
        pytest.skip(
            "no Chromium here and `make test` could not install it (apt-get "
            "install chromium): the report's browser test is not run"
        )
    for paths, name in (([suite_dir], "suite"), (other_dirs, "other")):
        out = tmp_path / f"{name}.html"
        write_report(paths, out)
        seen = check_page(out)
        assert seen["images"], "no images on the page"
        bad = [i["alt"] for i in seen["images"] if not i["ok"]]
        assert not bad, f"images that did not load: {bad}"
        assert seen["errors"] == [], seen["errors"]
        if name == "suite":
            want = expected_means(suite_dir, "balanced_accuracy")
            got = {
                (c["method"], c["column"]): c["mean"]
                for c in seen["cells"]
                if c["table"] == "balanced_accuracy"
            }
            for key, value in want.items():
                assert got[key] == pytest.approx(value, abs=1e-9)
